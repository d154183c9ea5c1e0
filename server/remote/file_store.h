// A decode node's store of shipped files: the videos and volumes a trainer
// node sends whole (a clip or a patch needs its file, and a file serves
// many samples), kept so that each is sent once, not once per sample.
//
// A file is named by its key: 32 lowercase hex digits the trainer derives
// from the file's identity (its path, size, mtime, inode and byte range:
// transcode_cache.h, IdentityOf), so a changed file is a new key. The store
// is a private folder (0700) the node makes at start and removes, with its
// contents, when it stops. The folder is locked (flock) while its node
// lives; a node starting removes the unlocked ones it finds (those of nodes
// that were killed), so nothing is left behind for long.
//
// A file's life:
//   1. A relay asks Has(keys) (the DecodeNode.Has RPC); a key found is
//      touched, so it is kept at least `keep_ns` from then.
//   2. A missing one is sent in chunks on the relay's Decode stream:
//      Begin(key, size), Upload::Append for each chunk in order, then
//      Commit, which links the finished file under its key (a second upload
//      of a key already there is dropped). An Upload destroyed before
//      Commit removes its partial file.
//   3. A task that reads it pins it (Acquire) until the task is answered
//      or dropped (Release).
//   4. Over the budget, the least recently used files that are neither
//      pinned nor used within `keep_ns` are removed. The budget is a goal:
//      files in use are never removed to meet it.
//
// Thread-safe: one lock guards the index; chunk writes (Upload::Append) take
// no lock and belong to one thread (the stream's reader).

#ifndef STOKER_SERVER_REMOTE_FILE_STORE_H_
#define STOKER_SERVER_REMOTE_FILE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/posix.h"

namespace stoker::remote {

// Whether `key` is a store key: exactly 32 lowercase hex digits (so a name
// from a task can never leave the folder).
bool IsStoreKey(std::string_view key);

struct FileStoreStats {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t received = 0;  // files committed since start
  uint64_t removed = 0;   // files removed to meet the budget
};

class FileStore {
 public:
  class Upload {
   public:
    ~Upload();  // removes the partial file unless committed
    Upload(const Upload&) = delete;
    Upload& operator=(const Upload&) = delete;
    const std::string& key() const { return key_; }
    uint64_t size() const { return size_; }
    uint64_t written() const { return written_; }
    // Appends the next chunk. INVALID_ARGUMENT past the declared size; the
    // write's errno (a full disk) otherwise.
    absl::Status Append(std::string_view data);

   private:
    friend class FileStore;
    Upload(int dir_fd, std::string key, std::string temp, uint64_t size, UniqueFd fd)
        : dir_fd_(dir_fd), key_(std::move(key)), temp_(std::move(temp)), size_(size),
          fd_(std::move(fd)) {}
    const int dir_fd_;
    const std::string key_;
    const std::string temp_;  // its name in the folder until committed
    const uint64_t size_;
    UniqueFd fd_;
    uint64_t written_ = 0;
    bool committed_ = false;
  };

  // Makes a private folder beneath `parent` (an existing directory; empty:
  // /tmp) and a store in it of `budget_bytes`, after removing the folders
  // of killed nodes there; `clock` is borrowed. Errors: mkdtemp's, open's.
  static absl::StatusOr<std::unique_ptr<FileStore>> Create(const std::string& parent,
                                                           uint64_t budget_bytes, Clock* clock,
                                                           int64_t keep_ns);
  ~FileStore();  // removes the folder and everything in it
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  // The folder, O_DIRECTORY: the node's workers read shipped files beneath it.
  int dir_fd() const { return dir_.get(); }
  const std::string& path() const { return path_; }
  uint64_t budget() const { return budget_; }

  // Step 1: whether each key is here (touching those that are).
  std::vector<bool> Has(const std::vector<std::string>& keys) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2. INVALID_ARGUMENT for a bad key, an empty file or one over the
  // whole budget.
  absl::StatusOr<std::unique_ptr<Upload>> Begin(std::string_view key, uint64_t size)
      ABSL_LOCKS_EXCLUDED(mu_);
  // INVALID_ARGUMENT when not all of its bytes came; rename's errno.
  absl::Status Commit(std::unique_ptr<Upload> upload) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 3: pins every key, or none and NOT_FOUND naming the first missing.
  absl::Status Acquire(const std::vector<std::string>& keys) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(const std::vector<std::string>& keys) ABSL_LOCKS_EXCLUDED(mu_);

  FileStoreStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t bytes = 0;
    int64_t used_ns = 0;
    uint32_t pins = 0;
  };
  FileStore(UniqueFd dir, std::string path, uint64_t budget, Clock* clock, int64_t keep_ns)
      : dir_(std::move(dir)), path_(std::move(path)), budget_(budget), clock_(clock),
        keep_ns_(keep_ns) {}
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UniqueFd dir_;
  const std::string path_;
  const uint64_t budget_;
  Clock* const clock_;
  const int64_t keep_ns_;

  mutable absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_temp_ ABSL_GUARDED_BY(mu_) = 0;
  FileStoreStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::remote

#endif  // STOKER_SERVER_REMOTE_FILE_STORE_H_
