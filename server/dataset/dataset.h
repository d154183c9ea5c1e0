// Datasets the daemon serves: where the files are, their labels, and the
// confinement of every path to the daemon's --data-root.

#ifndef STOKER_SERVER_DATASET_DATASET_H_
#define STOKER_SERVER_DATASET_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker {

// The daemon's data root: a directory, held open. Every dataset and every
// file the daemon or a worker opens must lie beneath it, after symlinks.
// Thread-safe after construction (const).
class DataRoot {
 public:
  // INVALID_ARGUMENT / NOT_FOUND when `dir` is not an existing directory.
  static absl::StatusOr<std::unique_ptr<DataRoot>> Open(const std::string& dir);
  ~DataRoot();  // closes fd()
  DataRoot(const DataRoot&) = delete;
  DataRoot& operator=(const DataRoot&) = delete;

  // The canonical absolute path of the root.
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  // Resolves a path named by a client (relative to the root, or absolute and
  // inside it) to a canonical path relative to the root ("" for the root
  // itself). PERMISSION_DENIED when it escapes the root (through "..", an
  // absolute path elsewhere, or a symlink), NOT_FOUND when it does not exist.
  // Canonical: symlinks resolved, no "." or ".." components. A symlink whose
  // absolute target lies beneath the root is followed. INVALID_ARGUMENT for
  // an empty path (use "." for the root).
  absl::StatusOr<std::string> Resolve(std::string_view user_path) const;

 private:
  DataRoot(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Opens `relative_path` for reading beneath the directory `root_fd`, refusing
// any path that leaves it (openat2 RESOLVE_BENEATH, with a checked fallback
// where the kernel lacks openat2). Returns the fd or a status naming the
// path and the errno.
//  - PERMISSION_DENIED when the path leaves the root: "..", an absolute path,
//    a symlink outside (and, under openat2, any absolute symlink: give it
//    canonical paths such as Dataset::path() and DataRoot::Resolve() return).
//    Without openat2 (ENOSYS, or EPERM from an old seccomp filter) every
//    component is opened with O_NOFOLLOW: any symlink is refused.
//  - FAILED_PRECONDITION when it is not a regular file (a FIFO named like a
//    sample must not block a worker); NOT_FOUND when missing.
// The fd is read-only, close-on-exec and blocking; the caller closes it.
absl::StatusOr<int> OpenBeneath(int root_fd, std::string_view relative_path);

enum class DatasetFormat { kAuto = 0, kImageFolder = 1, kManifest = 2 };

// An indexed dataset: immutable, shared between sessions (shared_ptr<const>).
// Paths are stored in one buffer (no per-entry allocation) so that millions
// of entries stay small.
class Dataset {
 public:
  // Indexes the dataset at `user_path` (resolved through `root`).
  //  - kImageFolder: a sub-folder per class, sorted class names give labels
  //    0..K-1 (as torchvision's ImageFolder); files ending .jpg/.jpeg in any
  //    case, found recursively under each class folder, sorted by path.
  //    Exactly torchvision's order: classes are the directories (symlinks
  //    followed) sorted by name bytes; within a class, directories sorted by
  //    their whole path string (so "a/x y" < "a/x/z" < "a/x0"), files by name
  //    within each. Non-directories only: a directory "x.jpg" is walked, not
  //    listed; a dangling symlink "x.jpg" is listed (it fails as a sample).
  //    Symlinks are followed; one leading outside the root fails the whole
  //    request. A directory met again below itself (a loop) is skipped.
  //    path(i) is the canonical path: a symlinked file's target.
  //  - kManifest: `path<TAB>label` per line, paths relative to the
  //    manifest's folder; blank lines and '#' comments skipped.
  //    The label is a signed 64-bit integer after the last tab; CRLF line
  //    ends are accepted; an absolute path must lie beneath the root. Entries
  //    are normalized lexically ("." and ".."), not stat'ed: a missing file
  //    fails later, as a sample.
  //  - kAuto: a directory is an ImageFolder, a file a manifest.
  // Every entry is confined to the root (PERMISSION_DENIED naming the entry).
  // NOT_FOUND for a missing path, FAILED_PRECONDITION for an empty dataset,
  // INVALID_ARGUMENT for a malformed manifest line (with its line number),
  // or for a format that does not match the path (a directory as manifest).
  // Blocking: reads the whole tree or manifest.
  static absl::StatusOr<std::shared_ptr<const Dataset>> Open(const DataRoot& root,
                                                             std::string_view user_path,
                                                             DatasetFormat format);

  uint64_t size() const { return labels_.size(); }
  // Path of entry i relative to the data root, for OpenBeneath.
  std::string_view path(uint64_t i) const {
    return std::string_view(paths_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  int64_t label(uint64_t i) const { return labels_[i]; }
  // ImageFolder: the class names in label order; manifest: empty.
  const std::vector<std::string>& class_names() const { return class_names_; }
  // Canonical path relative to the root: the dataset's identity.
  const std::string& name() const { return name_; }
  // Heap bytes the index holds (buffer capacities), for the status page and
  // for tests: 16 bytes per entry plus the path bytes, with at most 1/8 of
  // slack in each buffer.
  uint64_t memory_bytes() const;

 private:
  Dataset() = default;
  std::string name_;
  std::string paths_;              // all paths, concatenated
  std::vector<uint64_t> offsets_;  // size() + 1 entries into paths_
  std::vector<int64_t> labels_;
  std::vector<std::string> class_names_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_DATASET_H_
