// Internal to server/dataset: what the indexers (ImageFolder walk, manifest
// parser) produce before it becomes an immutable Dataset.

#ifndef STOKER_SERVER_DATASET_INDEX_BUILDER_H_
#define STOKER_SERVER_DATASET_INDEX_BUILDER_H_

#include <dirent.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/dataset/dataset.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {

class DataRoot;

namespace dataset_internal {

// What a cached index was made from, and how it looked: checked (stat)
// before a cached index is used.
struct WatchedPath {
  std::string path;  // canonical, relative to the root
  bool is_dir = false;
  uint64_t ino = 0;
  uint64_t size = 0;  // files only
  int64_t mtime_ns = 0;
};

// Entries in order; paths concatenated in one buffer, as Dataset keeps them.
struct DatasetIndex {
  std::string paths;
  std::vector<uint64_t> offsets{0};  // files + 1 entries into `paths`
  std::vector<int64_t> labels;
  std::vector<std::string> class_names;
  // WebDataset only (empty otherwise): per entry, its shard, its member's
  // (offset, length) and its member's name.
  std::vector<uint32_t> entry_file;
  std::vector<uint64_t> ranges;
  std::string names;
  std::vector<uint64_t> name_offsets{0};
  // ImageFolder only: see Dataset::Arrays::listed. Empty until an entry's
  // listed path differs (SetListed).
  std::string listed;
  std::vector<uint64_t> listed_offsets;
  // Segmentation sets: see Dataset::Arrays::masks. Empty until an entry has
  // a mask (SetMask).
  std::string masks;
  std::vector<uint64_t> mask_offsets;
  // Detection sets: see Dataset::Arrays::box_offsets. Empty unless
  // EnableBoxes was called before the first entry.
  std::vector<uint64_t> mask_ranges;  // WebDataset: see Dataset::Arrays::mask_ranges
  std::vector<uint64_t> box_offsets;
  std::vector<float> boxes;
  std::vector<int64_t> box_labels;
  std::vector<uint8_t> box_flags;
  std::vector<WatchedPath> watched;
  std::vector<std::string> warnings;
  std::function<void(uint64_t)> progress;

  uint64_t size() const { return labels.size(); }
  // Ends the entry whose path was appended to `paths` since the last one.
  void EndEntry(int64_t label) {
    offsets.push_back(paths.size());
    labels.push_back(label);
    if (!listed_offsets.empty()) listed_offsets.push_back(listed.size());
    if (!mask_offsets.empty()) mask_offsets.push_back(masks.size());
    if (!box_offsets.empty()) box_offsets.push_back(box_labels.size());
    Tick();
  }
  // Every entry has boxes (maybe none): call before the first entry.
  void EnableBoxes() { box_offsets.assign(1, 0); }
  // Adds a box (XYXY) to the entry being added (before its EndEntry); the
  // first box makes the set a detection set (the entries before have none).
  void AddBox(const float xyxy[4], int64_t label, uint8_t flag) {
    if (box_offsets.empty()) box_offsets.assign(labels.size() + 1, 0);
    boxes.insert(boxes.end(), xyxy, xyxy + 4);
    box_labels.push_back(label);
    box_flags.push_back(flag);
  }
  // Gives the entry being added (before its EndEntry) a mask, a path
  // relative to the root; the entries before it have none ("").
  void SetMask(std::string_view path) {
    if (mask_offsets.empty()) mask_offsets.assign(labels.size() + 1, 0);
    masks.append(path);
  }
  // Gives the entry being added (before its EndEntry) a listed path of its
  // own; the entries before it keep "" (derived from their paths).
  void SetListed(std::string_view path) {
    if (listed_offsets.empty()) listed_offsets.assign(labels.size() + 1, 0);
    listed.append(path);
  }
  void Add(std::string_view path, int64_t label) {
    paths.append(path);
    EndEntry(label);
  }
  // Reports progress every 65,536 entries (the callback rate-limits itself).
  void Tick() {
    if (progress && (labels.size() & 0xffff) == 0) progress(labels.size());
  }
  // Records how `fd` (open on `path`) looks now, for the cache.
  void Watch(std::string path, int fd, bool is_dir);
  // Views of the arrays (the WebDataset ones only when there are shards).
  Dataset::Arrays arrays() const;
};

// Calls fn(name, d_type, dir_fd) for each entry of the directory but "." and
// "..", in readdir order (the folder indexers' one directory listing).
template <typename Fn>
absl::Status ForEachEntry(UniqueFd fd, std::string_view display, Fn&& fn) {
  DIR* dir = fdopendir(fd.get());
  if (dir == nullptr) return PosixError(Cat("opendir '", display, "'"), errno);
  (void)fd.Release();  // owned by `dir` now
  std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, &closedir);
  while (true) {
    errno = 0;
    const struct dirent* entry = readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) return PosixError(Cat("readdir '", display, "'"), errno);
      return absl::OkStatus();
    }
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    absl::Status status = fn(name, entry->d_type, dirfd(dir));
    if (!status.ok()) return status;
  }
}

// Indexes the ImageFolder tree at the canonical directory `dir` (relative to
// the root). See Dataset::Open.
absl::Status IndexImageFolder(const DataRoot& root, const std::string& dir,
                              const IndexOptions& options, DatasetIndex* out);

// Parses the manifest at the canonical file path `file` (relative to the
// root); with `label_files` a label column names each entry's label volume
// (its mask). See Dataset::Open.
absl::Status IndexManifest(const DataRoot& root, const std::string& file, bool label_files,
                           DatasetIndex* out);

// Indexes the Medical Segmentation Decathlon dataset.json at the canonical
// file path `file`. See Dataset::Open.
absl::Status IndexDecathlon(const DataRoot& root, const std::string& file, DatasetIndex* out);
// kVolumeFolder: the volume files beneath `images` by path, each with the
// label volume of the same relative path beneath `masks` (when not empty;
// volumes without one are left out, with a warning).
absl::Status IndexVolumeFolder(const DataRoot& root, const std::string& images,
                               const std::string& masks, DatasetIndex* out);
// kHdf5 / kLmdb: `file` is the HDF5 file or the LMDB's data.mdb; raw_shape
// gets the raw images' height, width and channels (0s: encoded).
absl::Status IndexRecords(const DataRoot& root, DatasetFormat format, const std::string& file,
                             const IndexOptions& options, DatasetIndex* out,
                             uint32_t raw_shape[3]);

// `text` with the bare NaN, Infinity and -Infinity that Python's json module
// writes (not JSON) quoted, as protobuf's JSON parser takes them for double
// fields; strings are left alone.
std::string QuoteNonFinite(std::string text);

// The most bytes a JSON file the indexers read may have (COCO 2017's
// train instances are 448 MB; LVIS's about 1 GB).
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{4} << 30;
// The whole JSON file `file` (canonical, relative to the root), watched for
// the index cache; `what` names it in errors ("annotations").
absl::StatusOr<std::string> ReadJsonFile(const DataRoot& root, const std::string& file,
                                         std::string_view what, DatasetIndex* out);

// Indexes the COCO instances JSON at the canonical file path `annotations`
// over the images folder `images` (both relative to the root). See
// Dataset::Open.
absl::Status IndexCoco(const DataRoot& root, const std::string& images,
                       const std::string& annotations, DatasetIndex* out);

// Indexes the paired folders `images` and `masks` (canonical, relative to
// the root). See Dataset::Open.
absl::Status IndexPairedFolders(const DataRoot& root, const std::string& images,
                                const std::string& masks, const std::string& image_suffix,
                                const std::string& mask_suffix, DatasetIndex* out);

// Indexes the tar shards at the canonical file paths `shards`, in order;
// with `sample_keys` (IndexOptions::extensions: a video set's "mp4", "avi",
// ...), a sample is its group's first member of one of those keys instead
// of an image. See Dataset::Open.
absl::Status IndexWebDataset(const DataRoot& root, const std::vector<std::string>& shards,
                             const std::vector<std::string>& sample_keys, DatasetIndex* out);

// The index cache: the file that would hold the index of `name` made with
// the IndexOptions::flags() `flags` under `cache_dir`; Save writes it
// atomically (a warning on failure, never an error); Load maps it, if it is
// there, intact, made with the same format and flags, and still valid for
// the files it was made from (else nullptr).
std::string CachePath(const std::string& cache_dir, const std::string& root_path,
                      const std::string& name, int format, uint32_t flags);
absl::Status SaveIndex(const std::string& file, const std::string& name, int format, uint32_t flags,
                       const DatasetIndex& index);

// A cached index, mapped read-only; the spans point into the mapping.
struct MappedIndex {
  void* addr = nullptr;
  size_t bytes = 0;
  Dataset::Arrays arrays;
  std::vector<std::string> class_names;
  std::vector<std::string> warnings;
  std::vector<WatchedPath> watched;
  ~MappedIndex();
};

// Whether `w` still looks as it did; `why` names the first difference.
bool StillSame(const DataRoot& root, const WatchedPath& w, std::string* why);

// nullptr when there is no usable cache file (`why` says why, for the log;
// empty when there is simply none).
std::unique_ptr<MappedIndex> LoadIndex(const DataRoot& root, const std::string& file,
                                       const std::string& name, int format, uint32_t flags,
                                       std::string* why);

}  // namespace dataset_internal
}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_INDEX_BUILDER_H_
