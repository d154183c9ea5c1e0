#include "server/worker/volume_work.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash64.h"
#include "common/posix.h"
#include "server/dataset/dataset.h"
#include "server/engine/transcode_cache.h"  // IdentityOf, CacheKeyFor
#include "server/image/pipeline.h"
#include "server/volume/prefix.h"
#include "server/volume/hdf5_volume.h"
#include "server/volume/volume_task.h"

namespace stoker::worker {
namespace {

void Fail(ResultMsg* r, const absl::Status& st) {
  r->code = static_cast<uint32_t>(st.code() == absl::StatusCode::kOk ? absl::StatusCode::kUnknown
                                                                      : st.code());
  const size_t n = std::min(st.message().size(), sizeof(r->reason) - 1);
  std::memcpy(r->reason, st.message().data(), n);
  r->reason[n] = '\0';
}

// One source file, open, and what identifies its content.
struct Source {
  UniqueFd fd;
  struct stat st {};
};

absl::StatusOr<Source> Open(int data_root, std::string_view path) {
  absl::StatusOr<int> fd = OpenBeneath(data_root, path);
  if (!fd.ok()) return fd.status();
  Source s;
  s.fd = UniqueFd(*fd);
  if (fstat(s.fd.get(), &s.st) != 0) return PosixError("fstat " + std::string(path), errno);
  return s;
}

}  // namespace

bool VolumeWork::MapEntry(int cache_dir, const std::string& name, uint64_t key) {
  absl::StatusOr<std::unique_ptr<volume::MappedEntry>> e =
      volume::MappedEntry::Open(cache_dir, name, key, /*verify_payload=*/false);
  if (!e.ok()) return false;
  entry_ = *std::move(e);
  entry_name_ = name;
  entry_key_ = key;
  ++mapped_;
  return true;
}

void VolumeWork::Run(const TaskMsg& t, std::string_view path, std::string_view label_path,
                     int data_root, int cache_dir, uint8_t* out, uint8_t* label_out,
                     ResultMsg* r) {
  const volume::VolumeTaskParams& p = t.volume;
  std::string name(path);  // for messages: channel files joined by ", "
  for (size_t at = name.find('\0'); at != std::string::npos; at = name.find('\0', at)) {
    name.replace(at, 1, ", ");
  }
  const uint64_t image_bytes = volume::PatchImageBytes(p);
  const uint64_t label_bytes = label_out != nullptr ? volume::PatchLabelBytes(p) : 0;
  if (image_bytes > t.out_capacity || label_bytes > t.mask_out_capacity) {
    Fail(r, absl::InternalError("the task's rooms are smaller than its patches"));
    return;
  }
  const int64_t t0 = MonotonicNs();
  // An image given as several files (its channels) is read file by file.
  const std::vector<std::string_view> files = SplitPathFiles(path);
  std::vector<Source> images;
  for (std::string_view file : files) {
    absl::StatusOr<Source> image = Open(data_root, file);
    if (!image.ok()) return Fail(r, image.status());
    images.push_back(*std::move(image));
  }
  std::optional<Source> label;
  if (!label_path.empty()) {
    absl::StatusOr<Source> l = Open(data_root, label_path);
    if (!l.ok()) return Fail(r, l.status());
    label = *std::move(l);
  }
  // The entry: named by what the sample is, keyed by what its files hold.
  std::string what = std::string(path) + "\n" + std::string(label_path) + "\n";
  what.append(reinterpret_cast<const char*>(&p.recipe_hash), sizeof(p.recipe_hash));
  const uint64_t entry_id = Hash64(what.data(), what.size(), 0x766f6c);
  const std::string entry_name = volume::VolumeEntryName(entry_id);
  std::string identity = what;
  const auto add = [&identity](std::string_view file, const struct stat& st) {
    const CacheKey k = CacheKeyFor(IdentityOf(file, st, false, 0, 0));
    identity.append(reinterpret_cast<const char*>(&k), sizeof(k));
  };
  for (size_t f = 0; f < files.size(); ++f) add(files[f], images[f].st);
  if (label.has_value()) add(label_path, label->st);
  const uint64_t key = Hash64(identity.data(), identity.size(), 0x6b6579);

  // The entry, or the claim to write it; while another worker holds the
  // claim (it is preparing this volume), wait for its entry.
  UniqueFd claim;
  if (cache_dir >= 0 && (entry_ == nullptr || entry_name_ != entry_name || entry_key_ != key)) {
    entry_.reset();
    const int64_t deadline = MonotonicNs() + kWaitForWriterNs;
    for (int tries = 0; tries < 3 && entry_ == nullptr; ++tries) {
      if (MapEntry(cache_dir, entry_name, key)) break;
      absl::StatusOr<UniqueFd> claimed = volume::ClaimEntry(cache_dir, entry_name);
      if (claimed.ok()) {
        claim = *std::move(claimed);
        break;
      }
      if (claimed.status().code() != absl::StatusCode::kAlreadyExists) break;
      while (volume::ProbeClaim(cache_dir, entry_name, kFreshClaimNs) == volume::ClaimState::kHeld &&
             MonotonicNs() < deadline) {
        ::usleep(5000);
      }
      if (MonotonicNs() >= deadline) break;  // prepare it here, unwritten
    }
  }
  volume::PreparedView view;
  std::optional<volume::PreparedVolume> prepared;
  const int64_t t1 = MonotonicNs();
  if (cache_dir >= 0 && entry_ != nullptr && entry_name_ == entry_name && entry_key_ == key) {
    const volume::MappedEntry& e = *entry_;
    view.shape = e.shape();
    view.channels = e.channels();
    view.image = e.image();
    view.label = e.label();
    view.foreground = e.foreground();
    view.foreground_count = e.foreground_count();
    view.background = e.background();
    view.background_count = e.background_count();
    r->input_bytes = e.bytes();
    r->prepared_hit = 1;
    r->prepared_entry_kind = kPreparedVolume;
  } else {
    volume::VolumeLimits limits;
    std::vector<volume::Volume> channels;
    const auto unclaim = [&] {
      if (claim.valid()) ::unlinkat(cache_dir, (".tmp-" + entry_name).c_str(), 0);
    };
    const std::array<double, 3> spacing = {p.spacing[0], p.spacing[1], p.spacing[2]};
    r->input_bytes = 0;
    for (size_t f = 0; f < files.size(); ++f) {
      absl::StatusOr<volume::Volume> v = volume::ReadAnyVolume(
          images[f].fd.get(), std::string(files[f]), limits, spacing, volume::ArrayKeys(p.array_keys));
      if (!v.ok()) {
        unclaim();
        return Fail(r, v.status());
      }
      r->input_bytes += static_cast<uint64_t>(images[f].st.st_size);
      channels.push_back(*std::move(v));
    }
    std::optional<volume::Volume> lab;
    if (label.has_value()) {
      absl::StatusOr<volume::Volume> l =
          volume::ReadAnyVolume(label->fd.get(), std::string(label_path), limits, spacing,
                                volume::ArrayKeys(p.label_array_keys));
      if (!l.ok()) {
        unclaim();
        return Fail(r, l.status());
      }
      r->input_bytes += static_cast<uint64_t>(label->st.st_size);
      lab = *std::move(l);
    }
    r->read_ns = static_cast<uint64_t>(MonotonicNs() - t0);
    absl::StatusOr<volume::PreparedVolume> ready =
        volume::Prepare(channels, lab, volume::RecipeOf(p), name);
    if (!ready.ok()) {
      unclaim();
      return Fail(r, ready.status());
    }
    prepared = *std::move(ready);
    ++prepared_;
    view = volume::ViewOf(*prepared);
    if (claim.valid()) {
      // A failure costs the next epoch a preparation, not this sample.
      if (volume::WriteClaimedEntry(cache_dir, std::move(claim), entry_name, key, *prepared).ok()) {
        r->prepared_entry_id = entry_id;
        r->prepared_entry_bytes = volume::EntryBytes(*prepared);
        r->prepared_entry_kind = kPreparedVolume;
      }
    }
  }
  const int64_t t2 = MonotonicNs();
  r->decode_ns = static_cast<uint64_t>(t2 - t1);
  absl::Status st = volume::CutPatches(p, view, t.key.seed, t.key.epoch, t.key.dataset_index, out,
                                       label_out, name);
  if (!st.ok()) return Fail(r, st);
  r->augment_ns = static_cast<uint64_t>(MonotonicNs() - t2);
  r->bytes = image_bytes;
  r->mask_bytes = label_bytes;
  r->channels = static_cast<uint32_t>(view.channels);
  r->decode_path = image::kDecodePathCount;  // not an image's decode
  r->code = 0;
}

}  // namespace stoker::worker
