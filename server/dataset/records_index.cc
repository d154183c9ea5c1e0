// The record indexer of Dataset::Open (kHdf5, kLmdb): what
// IndexOptions::index_records gave, as a DatasetIndex of byte ranges (one
// file, as a WebDataset shard's members).

#include <string>

#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/records.h"
#include "server/dataset/str_cat.h"

namespace stoker {
namespace dataset_internal {

absl::Status IndexRecords(const DataRoot& root, DatasetFormat format, const std::string& file,
                             const IndexOptions& options, DatasetIndex* out,
                             uint32_t raw_shape[3]) {
  if (!options.index_records) {
    return absl::FailedPreconditionError("this daemon cannot index record files (HDF5, LMDB)");
  }
  RecordTarget target;
  target.kind = format == DatasetFormat::kLmdb ? RecordKind::kLmdb : RecordKind::kHdf5;
  target.file = file;
  target.images_key = options.record_images;
  target.labels_key = options.record_labels_key;
  if (!options.record_shape.empty()) {
    const auto& s = options.record_shape;
    if (format != DatasetFormat::kLmdb) {
      return absl::InvalidArgumentError(
          "record_shape is for an LMDB of raw pixels: an HDF5 array has its own shape");
    }
    if ((s.size() != 2 && s.size() != 3) || s[0] == 0 || s[1] == 0 || s[0] > 65535 ||
        s[1] > 65535 || (s.size() == 3 && s[2] != 1 && s[2] != 3)) {
      return absl::InvalidArgumentError(
          "record_shape is [height, width] or [height, width, channels], channels 1 or 3, each "
          "side 1..65535");
    }
    target.height = s[0];
    target.width = s[1];
    target.channels = s.size() == 3 ? s[2] : 1;
  }
  if (!options.record_labels.empty()) {
    absl::StatusOr<ResolvedPath> labels = ResolveUserPath(root, options.record_labels);
    if (!labels.ok()) return labels.status();
    if (labels->is_dir) {
      return absl::InvalidArgumentError(
          Cat("labels '", options.record_labels, "' is a directory, not a file"));
    }
    target.labels_file = labels->path;
  }
  // Watched so that a changed file (or labels file) is indexed again.
  for (const std::string* path : {&target.file, &target.labels_file}) {
    if (path->empty()) continue;
    absl::StatusOr<int> fd = OpenBeneath(root.fd(), *path);
    if (!fd.ok()) return fd.status();
    UniqueFd owned(*fd);
    out->Watch(*path, owned.get(), false);
  }
  absl::StatusOr<RecordIndex> index = options.index_records(target);
  if (!index.ok()) return index.status();
  raw_shape[0] = index->height;
  raw_shape[1] = index->width;
  raw_shape[2] = index->channels;
  if (!index->warning.empty()) out->warnings.push_back(index->warning);
  out->paths = file;
  out->offsets = {0, file.size()};
  const size_t n = index->offsets.size();
  out->entry_file.assign(n, 0);
  out->ranges.resize(2 * n);
  out->labels = std::move(index->labels);
  out->names.clear();
  out->name_offsets.assign(1, 0);
  out->name_offsets.reserve(n + 1);
  for (size_t i = 0; i < n; ++i) {
    out->ranges[2 * i] = index->offsets[i];
    out->ranges[2 * i + 1] = index->lengths[i];
    out->names += std::to_string(i < index->rows.size() ? index->rows[i] : i);
    out->name_offsets.push_back(out->names.size());
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal

bool NamedLikeHdf5(std::string_view path) {
  for (std::string_view e : {".h5", ".hdf5", ".he5", ".H5"}) {
    if (path.size() >= e.size() && path.substr(path.size() - e.size()) == e) return true;
  }
  return false;
}

std::string PnmHeader(uint32_t height, uint32_t width, uint32_t channels) {
  return dataset_internal::Cat(channels == 1 ? "P5" : "P6", "\n", width, " ", height, "\n255\n");
}

}  // namespace stoker
