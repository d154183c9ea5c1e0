#include "server/dataset/dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <utility>

#include "server/dataset/beneath.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "server/posix.h"

namespace stoker {

using dataset_internal::Cat;

absl::StatusOr<std::unique_ptr<DataRoot>> DataRoot::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty data root");
  std::unique_ptr<char, decltype(&free)> real(realpath(dir.c_str(), nullptr), &free);
  if (real == nullptr) return PosixError(Cat("data root '", dir, "'"), errno);
  int fd = open(real.get(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOTDIR) {
      return absl::InvalidArgumentError(Cat("data root '", dir, "' is not a directory"));
    }
    return PosixError(Cat("open data root '", dir, "'"), err);
  }
  return std::unique_ptr<DataRoot>(new DataRoot(real.get(), fd));
}

DataRoot::~DataRoot() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::string> DataRoot::Resolve(std::string_view user_path) const {
  absl::StatusOr<dataset_internal::ResolvedPath> resolved =
      dataset_internal::ResolveUserPath(*this, user_path);
  if (!resolved.ok()) return resolved.status();
  return std::move(resolved->path);
}

absl::StatusOr<int> OpenBeneath(int root_fd, std::string_view relative_path) {
  return dataset_internal::OpenBeneathImpl(root_fd, relative_path,
                                           dataset_internal::OpenKind::kRegularFile,
                                           /*use_openat2=*/true);
}

absl::StatusOr<std::shared_ptr<const Dataset>> Dataset::Open(const DataRoot& root,
                                                             std::string_view user_path,
                                                             DatasetFormat format) {
  absl::StatusOr<dataset_internal::ResolvedPath> resolved =
      dataset_internal::ResolveUserPath(root, user_path);
  if (!resolved.ok()) return resolved.status();
  switch (format) {
    case DatasetFormat::kAuto:
      format = resolved->is_dir ? DatasetFormat::kImageFolder : DatasetFormat::kManifest;
      break;
    case DatasetFormat::kImageFolder:
      if (!resolved->is_dir) {
        return absl::InvalidArgumentError(
            Cat("'", user_path, "' is not a directory (an ImageFolder dataset)"));
      }
      break;
    case DatasetFormat::kManifest:
      if (resolved->is_dir) {
        return absl::InvalidArgumentError(
            Cat("'", user_path, "' is a directory, not a manifest file"));
      }
      break;
    default:
      return absl::InvalidArgumentError(Cat("unknown dataset format ", static_cast<int>(format)));
  }

  dataset_internal::DatasetIndex index;
  absl::Status status = format == DatasetFormat::kImageFolder
                            ? dataset_internal::IndexImageFolder(root, resolved->path, &index)
                            : dataset_internal::IndexManifest(root, resolved->path, &index);
  if (!status.ok()) return status;
  if (index.size() == 0) {
    return absl::FailedPreconditionError(
        format == DatasetFormat::kImageFolder
            ? Cat("dataset '", user_path, "' has no .jpg/.jpeg file in a class folder")
            : Cat("manifest '", user_path, "' lists no entry"));
  }

  std::shared_ptr<Dataset> dataset(new Dataset());
  dataset->name_ = std::move(resolved->path);
  dataset->paths_ = std::move(index.paths);
  dataset->offsets_ = std::move(index.offsets);
  dataset->labels_ = std::move(index.labels);
  dataset->class_names_ = std::move(index.class_names);
  // Vectors grown by doubling may hold twice what they need; a copy to
  // release it is worth it only then.
  auto trim = [](auto& buffer) {
    if (buffer.capacity() > buffer.size() + buffer.size() / 8) buffer.shrink_to_fit();
  };
  trim(dataset->paths_);
  trim(dataset->offsets_);
  trim(dataset->labels_);
  return std::shared_ptr<const Dataset>(std::move(dataset));
}

uint64_t Dataset::memory_bytes() const {
  uint64_t bytes = paths_.capacity() + offsets_.capacity() * sizeof(uint64_t) +
                   labels_.capacity() * sizeof(int64_t) + name_.capacity() +
                   class_names_.capacity() * sizeof(std::string);
  for (const std::string& name : class_names_) bytes += name.capacity();
  return bytes;
}

}  // namespace stoker
