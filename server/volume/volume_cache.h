// One entry of the volume cache (issue 37's "deterministic prefix, once"):
// a sample's volumes after its deterministic prefix (Orientation, Spacing,
// intensity, CropForeground), with its label's foreground and background
// voxel lists, in one file laid out to be memory-mapped, so that later
// epochs (and later daemons) cut random patches without reading, inflating,
// resampling or scanning the source again.
//
// Who does what (to come: the daemon's side as the transcode cache's,
// server/engine/transcode_cache.h): the worker that prepares a sample
// writes its entry ".tmp-NAME" (O_CREAT|O_EXCL, 0600) and renames it to
// NAME; a worker that needs it maps it (OpenEntry) and keeps the mapping.
// NAME and `key` come from the caller: the key is a hash of everything the
// content depends on (the sources' identities, the prefix's ops, the
// foreground threshold), so a changed file or recipe never matches.
//
// Layout (little-endian; sections 4096-aligned so each maps on its own):
//      0  magic "STKVCv1\0"            192  image offset, bytes (u64 x 2)
//      8  version (u32)                208  label offset, bytes (u64 x 2)
//     12  header bytes, 4096 (u32)     224  foreground offset, count (u64 x 2)
//     16  key (u64)                    240  background offset, count (u64 x 2)
//     24  shape i, j, k (i64 x 3)      256  payload bytes (u64)
//     48  channels (i64)               264  payload hash (u64)
//     56  has label (u32), 0 (u32)     272  zero up to 4088
//     64  affine, 16 f64 row-major    4088  header hash (u64, of bytes 0..4087)
//   4096  image float32 (voxel order, channel slowest), label uint8 (one
//         channel), foreground and background voxel indices (u32, i fastest).
// A torn write, a flipped bit or a changed key fails OpenEntry (the payload
// hash only when asked to verify: hashing reads every page), so an entry is
// never trusted but rebuilt.
//
// Thread-safe: a MappedEntry is immutable once open.

#ifndef STOKER_SERVER_VOLUME_VOLUME_CACHE_H_
#define STOKER_SERVER_VOLUME_VOLUME_CACHE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/posix.h"
#include "server/volume/volume.h"

namespace stoker::volume {

inline constexpr uint32_t kVolumeEntryVersion = 1;
inline constexpr uint64_t kVolumeEntryHeaderBytes = 4096;

// A sample after its prefix, as an entry holds it.
struct PreparedVolume {
  FloatVolume image;
  bool has_label = false;
  std::vector<uint8_t> label;  // image.ChannelVoxels() class numbers, when has_label
  std::vector<uint32_t> foreground, background;  // voxel indices, ascending
};

// MONAI's map_binary_to_indices: foreground = the label's voxels > 0;
// background = its zero voxels where some image channel is >
// image_threshold (RandCropByPosNegLabel's image_threshold). Voxel indices
// in volume order. INVALID_ARGUMENT for a label of another size or a
// volume of 2^32 voxels or more.
absl::Status ForegroundBackground(const FloatVolume& image, const std::vector<uint8_t>& label,
                                  double image_threshold, std::vector<uint32_t>* foreground,
                                  std::vector<uint32_t>* background);

// An entry's file name in the cache's folder: the 16 hex digits of `id` (a
// hash of what the sample is: its files' paths and the recipe) and ".stkv".
std::string VolumeEntryName(uint64_t id);

// The bytes WriteEntry writes for `v` (its file's size).
uint64_t EntryBytes(const PreparedVolume& v);

// Writes `v` as entry `name` in `dir_fd` (through ".tmp-NAME" and a rename).
// ALREADY_EXISTS when another writer holds the temporary; the errno's code
// for the file system's errors. ClaimEntry then WriteClaimedEntry.
absl::Status WriteEntry(int dir_fd, const std::string& name, uint64_t key,
                        const PreparedVolume& v);

// Claiming an entry before preparing its volume, so that two workers given
// the same volume at once (a session's next epoch planned while this one's
// volumes are still being prepared) prepare it once: ClaimEntry creates
// ".tmp-NAME" (O_EXCL) and holds flock(LOCK_EX) on it until the entry is
// written (or its writer dies: the kernel drops the lock). ALREADY_EXISTS
// when another writer holds it.
absl::StatusOr<UniqueFd> ClaimEntry(int dir_fd, const std::string& name);
// Writes `v` into the claimed temporary `fd` and renames it to `name`; the
// temporary is removed on failure.
absl::Status WriteClaimedEntry(int dir_fd, UniqueFd fd, const std::string& name, uint64_t key,
                               const PreparedVolume& v);
// Whether entry `name` is being written: kHeld while its temporary's lock
// is held (or the temporary is younger than `stale_after_ns`: its writer may
// not have locked it yet); kNone when there is no temporary, or its writer
// is gone (the temporary is then removed).
enum class ClaimState { kNone, kHeld };
ClaimState ProbeClaim(int dir_fd, const std::string& name, int64_t stale_after_ns);

class MappedEntry {
 public:
  // Maps entry `name` of `dir_fd`. NOT_FOUND when there is none; DATA_LOSS
  // when it is not whole (short, a bad header hash, offsets past its end,
  // with `verify_payload` a bad payload hash) or FAILED_PRECONDITION when
  // its key is not `key` (stale): the caller rebuilds it either way.
  static absl::StatusOr<std::unique_ptr<MappedEntry>> Open(int dir_fd, const std::string& name,
                                                           uint64_t key, bool verify_payload);

  const std::array<int64_t, 3>& shape() const { return shape_; }
  int64_t channels() const { return channels_; }
  const std::array<double, 16>& affine() const { return affine_; }
  const float* image() const { return image_; }
  const uint8_t* label() const { return label_; }  // nullptr without one
  const uint32_t* foreground() const { return fg_; }
  uint64_t foreground_count() const { return fg_count_; }
  const uint32_t* background() const { return bg_; }
  uint64_t background_count() const { return bg_count_; }
  uint64_t bytes() const { return map_.bytes(); }

 private:
  MappedEntry() = default;
  Mapping map_;
  std::array<int64_t, 3> shape_{};
  int64_t channels_ = 0;
  std::array<double, 16> affine_{};
  const float* image_ = nullptr;
  const uint8_t* label_ = nullptr;
  const uint32_t* fg_ = nullptr;
  const uint32_t* bg_ = nullptr;
  uint64_t fg_count_ = 0, bg_count_ = 0;
};

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_VOLUME_CACHE_H_
