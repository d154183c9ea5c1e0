#include "server/remote/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace stoker::remote {

bool IsStoreKey(std::string_view key) {
  if (key.size() != 32) return false;
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

FileStore::Upload::~Upload() {
  if (!committed_) ::unlinkat(dir_fd_, temp_.c_str(), 0);
}

absl::Status FileStore::Upload::Append(std::string_view data) {
  if (data.size() > size_ - written_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shipped file ", key_, ": more than its ", size_, " bytes"));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd_.get(), data.data() + done, data.size() - done,
                               static_cast<off_t>(written_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return PosixError(absl::StrCat("write shipped file ", key_), n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  written_ += done;
  return absl::OkStatus();
}

namespace {

constexpr char kFolderPrefix[] = "stoker-shipped-";

// The names in folder `dir` but "." and "..". Read through a descriptor of
// its own: a dup would share (and move) `dir`'s offset.
std::vector<std::string> Names(int dir) {
  std::vector<std::string> names;
  const int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return names;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n(e->d_name);
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

// Removes the folder `name` of `parent` and the files in it.
void RemoveFolder(int parent, const std::string& name, int dir) {
  for (const std::string& n : Names(dir)) ::unlinkat(dir, n.c_str(), 0);
  ::unlinkat(parent, name.c_str(), AT_REMOVEDIR);
}

// The stores of nodes that were killed (a store's folder is locked while
// its node lives): removed, so a killed node leaves nothing for long.
void RemoveStale(const std::string& parent) {
  UniqueFd p(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!p.valid()) return;
  for (const std::string& name : Names(p.get())) {
    if (name.rfind(kFolderPrefix, 0) != 0) continue;
    UniqueFd d(::openat(p.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!d.valid() || ::fstat(d.get(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (::flock(d.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its node lives
    RemoveFolder(p.get(), name, d.get());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Create(const std::string& parent_in,
                                                             uint64_t budget_bytes, Clock* clock,
                                                             int64_t keep_ns) {
  const std::string parent = parent_in.empty() ? "/tmp" : parent_in;
  RemoveStale(parent);
  std::string path = absl::StrCat(parent, "/", kFolderPrefix, "XXXXXX");
  if (::mkdtemp(path.data()) == nullptr) return PosixError("mkdtemp " + path, errno);
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // Held for the store's life (and by the workers' copies of the fd).
  if (!dir.valid() || ::flock(dir.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::rmdir(path.c_str());
    return PosixError("open " + path, err);
  }
  return std::unique_ptr<FileStore>(
      new FileStore(std::move(dir), std::move(path), budget_bytes, clock, keep_ns));
}

FileStore::~FileStore() {
  // Everything in the folder: committed files and partial uploads alike.
  for (const std::string& n : Names(dir_.get())) ::unlinkat(dir_.get(), n.c_str(), 0);
  ::rmdir(path_.c_str());
}

std::vector<bool> FileStore::Has(const std::vector<std::string>& keys) {
  absl::MutexLock l(&mu_);
  const int64_t now = clock_->NowNs();
  std::vector<bool> have;
  have.reserve(keys.size());
  for (const std::string& k : keys) {
    auto it = entries_.find(k);
    have.push_back(it != entries_.end());
    if (it != entries_.end()) it->second.used_ns = now;
  }
  return have;
}

absl::StatusOr<std::unique_ptr<FileStore::Upload>> FileStore::Begin(std::string_view key,
                                                                    uint64_t size) {
  if (!IsStoreKey(key)) {
    return absl::InvalidArgumentError("a shipped file's key is not 32 lowercase hex digits");
  }
  if (size == 0 || size > budget_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a shipped file of ", size, " bytes (the node takes 1 to ", budget_,
        ": its --decode-files-mb)"));
  }
  std::string temp;
  {
    absl::MutexLock l(&mu_);
    temp = absl::StrCat(".up-", next_temp_++);
  }
  UniqueFd fd(::openat(dir_.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return PosixError("create a shipped file in " + path_, errno);
  return std::unique_ptr<Upload>(
      new Upload(dir_.get(), std::string(key), std::move(temp), size, std::move(fd)));
}

absl::Status FileStore::Commit(std::unique_ptr<Upload> up) {
  if (up->written_ != up->size_) {
    return absl::InvalidArgumentError(absl::StrCat("shipped file ", up->key_, ": ", up->written_,
                                                   " of its ", up->size_, " bytes came"));
  }
  up->fd_.Reset();
  absl::MutexLock l(&mu_);
  if (entries_.count(up->key_) != 0) return absl::OkStatus();  // the destructor removes it
  if (::renameat(dir_.get(), up->temp_.c_str(), dir_.get(), up->key_.c_str()) != 0) {
    return PosixError("rename a shipped file in " + path_, errno);
  }
  up->committed_ = true;
  Entry& e = entries_[up->key_];
  e.bytes = up->size_;
  e.used_ns = clock_->NowNs();
  stats_.bytes += e.bytes;
  ++stats_.received;
  EvictLocked();
  return absl::OkStatus();
}

absl::Status FileStore::Acquire(const std::vector<std::string>& keys) {
  absl::MutexLock l(&mu_);
  for (const std::string& k : keys) {
    if (entries_.count(k) == 0) {
      return absl::NotFoundError(
          absl::StrCat("shipped file ", k, " is not on the decode node (never sent, or removed)"));
    }
  }
  const int64_t now = clock_->NowNs();
  for (const std::string& k : keys) {
    Entry& e = entries_[k];
    ++e.pins;
    e.used_ns = now;
  }
  return absl::OkStatus();
}

void FileStore::Release(const std::vector<std::string>& keys) {
  absl::MutexLock l(&mu_);
  const int64_t now = clock_->NowNs();
  for (const std::string& k : keys) {
    auto it = entries_.find(k);
    if (it == entries_.end() || it->second.pins == 0) continue;
    --it->second.pins;
    it->second.used_ns = now;
  }
  EvictLocked();
}

void FileStore::EvictLocked() {
  const int64_t now = clock_->NowNs();
  while (stats_.bytes > budget_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.pins != 0 || now - it->second.used_ns < keep_ns_) continue;
      if (victim == entries_.end() || it->second.used_ns < victim->second.used_ns) victim = it;
    }
    if (victim == entries_.end()) return;  // all in use: over budget for now
    ::unlinkat(dir_.get(), victim->first.c_str(), 0);
    stats_.bytes -= victim->second.bytes;
    ++stats_.removed;
    entries_.erase(victim);
  }
}

FileStoreStats FileStore::stats() const {
  absl::MutexLock l(&mu_);
  FileStoreStats s = stats_;
  s.files = entries_.size();
  return s;
}

}  // namespace stoker::remote
