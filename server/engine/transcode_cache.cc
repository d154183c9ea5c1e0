#include "server/engine/transcode_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/posix.h"

namespace stoker {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'T', 'C', 'v', '1', '\0'};
constexpr std::string_view kEntrySuffix = ".jpg";
constexpr std::string_view kTempPrefix = ".tmp-";

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}
inline void Store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline void Store32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void AppendU64(std::string* s, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  s->append(b, 8);
}

}  // namespace

SourceIdentity IdentityOf(std::string_view path, const struct stat& st, bool has_range,
                          uint64_t range_offset, uint64_t range_length) {
  SourceIdentity id;
  id.path = path;
  id.has_range = has_range;
  id.range_offset = range_offset;
  id.range_length = range_length;
  id.file_size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

CacheKey CacheKeyFor(const SourceIdentity& id) {
  std::string s = "stoker transcode cache key v2";
  s.push_back('\0');
  AppendU64(&s, id.path.size());
  s.append(id.path);
  AppendU64(&s, id.has_range ? 1 : 0);
  AppendU64(&s, id.range_offset);
  AppendU64(&s, id.range_length);
  AppendU64(&s, id.file_size);
  AppendU64(&s, static_cast<uint64_t>(id.mtime_ns));
  AppendU64(&s, id.inode);
  AppendU64(&s, static_cast<uint64_t>(id.ctime_ns));
  return CacheKey{Hash64(s.data(), s.size(), 0x5354'4b48'4931ull),
                  Hash64(s.data(), s.size(), 0x5354'4b4c'4f32ull)};
}

std::string CacheEntryName(const CacheKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[15 - i] = kHex[(key.hi >> (4 * i)) & 15];
    s[31 - i] = kHex[(key.lo >> (4 * i)) & 15];
  }
  s.append(kEntrySuffix);
  return s;
}

std::string CacheTempName(const CacheKey& key) {
  return std::string(kTempPrefix) + CacheEntryName(key);
}

bool ParseCacheEntryName(std::string_view name, CacheKey* key) {
  if (name.size() != 32 + kEntrySuffix.size() || name.substr(32) != kEntrySuffix) return false;
  CacheKey k;
  for (int i = 0; i < 32; ++i) {
    const char c = name[i];
    uint64_t d;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return false;
    }
    uint64_t& half = i < 16 ? k.hi : k.lo;
    half = (half << 4) | d;
  }
  if (key != nullptr) *key = k;
  return true;
}

void WriteEnvelope(uint64_t source_bytes, int64_t source_mtime_ns, const uint8_t* payload,
                   size_t payload_bytes, std::vector<uint8_t>* out) {
  out->assign(kEnvelopeBytes + payload_bytes, 0);
  uint8_t* h = out->data();
  std::memcpy(h, kMagic, 8);
  Store32(h + 8, kEnvelopeVersion);
  Store32(h + 12, kEnvelopeBytes);
  Store64(h + 16, source_bytes);
  Store64(h + 24, static_cast<uint64_t>(source_mtime_ns));
  Store64(h + 32, payload_bytes);
  Store64(h + 40, Hash64(payload, payload_bytes, kEnvelopeVersion));
  Store64(h + 56, Hash64(h, 56, kEnvelopeVersion));
  if (payload_bytes != 0) std::memcpy(h + kEnvelopeBytes, payload, payload_bytes);
}

absl::Status OpenEnvelope(const uint8_t* entry, size_t bytes, uint64_t source_bytes,
                          int64_t source_mtime_ns, size_t* payload_offset, size_t* payload_bytes) {
  if (bytes < kEnvelopeBytes) {
    return absl::DataLossError(absl::StrCat("entry of ", bytes, " bytes: shorter than its header"));
  }
  if (std::memcmp(entry, kMagic, 8) != 0) return absl::DataLossError("not a cache entry (magic)");
  if (Load64(entry + 56) != Hash64(entry, 56, kEnvelopeVersion)) {
    return absl::DataLossError("header checksum mismatch");
  }
  if (Load32(entry + 8) != kEnvelopeVersion || Load32(entry + 12) != kEnvelopeBytes) {
    return absl::DataLossError(
        absl::StrCat("entry format ", Load32(entry + 8), ", not ", kEnvelopeVersion));
  }
  if (Load64(entry + 16) != source_bytes ||
      Load64(entry + 24) != static_cast<uint64_t>(source_mtime_ns)) {
    return absl::DataLossError("entry of another version of the source (size or mtime)");
  }
  const uint64_t n = Load64(entry + 32);
  if (n != bytes - kEnvelopeBytes) {
    return absl::DataLossError(
        absl::StrCat("payload of ", bytes - kEnvelopeBytes, " bytes, header says ", n));
  }
  if (Load64(entry + 40) != Hash64(entry + kEnvelopeBytes, n, kEnvelopeVersion)) {
    return absl::DataLossError("payload checksum mismatch");
  }
  *payload_offset = kEnvelopeBytes;
  *payload_bytes = n;
  return absl::OkStatus();
}

uint32_t CountScans(const uint8_t* d, size_t n) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return 0;
  uint32_t scans = 0;
  size_t i = 2;
  bool in_scan = false;
  while (i + 1 < n) {
    if (in_scan) {
      // Entropy-coded data: the next 0xFF that starts a marker.
      const void* ff = std::memchr(d + i, 0xFF, n - i - 1);
      if (ff == nullptr) break;
      i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
      const uint8_t m = d[i + 1];
      if (m == 0x00 || m == 0xFF || (m >= 0xD0 && m <= 0xD7)) {
        i += m == 0xFF ? 1 : 2;  // stuffed byte, fill byte, restart marker
        continue;
      }
      in_scan = false;
      continue;
    }
    if (d[i] != 0xFF) return scans;  // garbage between segments: stop here
    const uint8_t m = d[i + 1];
    if (m == 0xFF) {
      ++i;
      continue;
    }
    if (m == 0xD9) break;  // EOI
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
      i += 2;
      continue;
    }
    if (i + 4 > n) break;
    const size_t len = (size_t{d[i + 2]} << 8) | d[i + 3];
    if (len < 2) break;
    if (m == 0xDA) {
      ++scans;
      in_scan = true;
    }
    i += 2 + len;
  }
  return scans;
}

// ---------------------------------------------------------------------------

namespace {

class PosixDir : public CacheDir {
 public:
  explicit PosixDir(int fd) : fd_(fd) {}

  absl::Status List(std::vector<CacheDirEntry>* out) override {
    out->clear();
    UniqueFd copy(::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!copy.valid()) return PosixError("open the transcode cache", errno);
    DIR* dir = ::fdopendir(copy.get());
    if (dir == nullptr) return PosixError("fdopendir", errno);
    copy.Release();
    while (struct dirent* e = ::readdir(dir)) {
      struct stat st;
      if (::fstatat(fd_, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
        continue;
      }
      out->push_back({e->d_name, static_cast<uint64_t>(st.st_size),
                      int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
    }
    ::closedir(dir);
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& name) override {
    if (::unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT) {
      return PosixError("unlink " + name, errno);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
};

}  // namespace

uint64_t DefaultCacheBudget(int dir_fd, uint64_t most) {
  uint64_t budget = most;
  struct statvfs vfs;
  if (::fstatvfs(dir_fd, &vfs) == 0) {
    budget = std::min<uint64_t>(budget, uint64_t{vfs.f_bavail} * vfs.f_frsize / 4);
  }
  return budget;
}

absl::StatusOr<int> OpenCacheDirectory(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(parent.string(), ": ", ec.message()));
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    return PosixError("mkdir " + path, errno);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return PosixError("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return PosixError("fstat " + path, errno);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(path + " is not a folder");
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " belongs to uid ", st.st_uid, ", not to this daemon's user"));
  }
  if ((st.st_mode & 077) != 0 && ::fchmod(fd.get(), st.st_mode & 0700) != 0) {
    return PosixError("chmod go-rwx " + path, errno);
  }
  // One daemon per folder: two would delete each other's temporaries at
  // start-up and each keep its own budget. Held while the fd is open.
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is in use by another stokerd (one daemon per transcode cache)"));
    }
    return PosixError("flock " + path, errno);
  }
  return fd.Release();
}

std::unique_ptr<CacheDir> PosixCacheDir(int dir_fd) { return std::make_unique<PosixDir>(dir_fd); }

TranscodeCache::TranscodeCache(CacheDir* dir, uint64_t budget_bytes, Clock* clock)
    : dir_(dir), clock_(clock != nullptr ? clock : SystemClock()) {
  stats_.budget_bytes = budget_bytes;
}

absl::Status TranscodeCache::Load() {
  std::vector<CacheDirEntry> files;
  if (absl::Status st = dir_->List(&files); !st.ok()) return st;
  std::stable_sort(files.begin(), files.end(), [](const CacheDirEntry& a, const CacheDirEntry& b) {
    return a.mtime_ns < b.mtime_ns;
  });
  absl::MutexLock l(&mu_);
  for (const CacheDirEntry& f : files) {
    if (std::string_view(f.name).substr(0, kTempPrefix.size()) == kTempPrefix) {
      (void)dir_->Remove(f.name);
      continue;
    }
    if (!ParseCacheEntryName(f.name, nullptr) || by_name_.count(f.name) != 0) continue;
    lru_.push_back(Entry{f.name, f.bytes, false});
    by_name_[f.name] = std::prev(lru_.end());
    stats_.bytes += f.bytes;
    ++stats_.loaded_entries;
  }
  EvictLocked();
  stats_.entries = lru_.size();
  return absl::OkStatus();
}

bool TranscodeCache::WritesAllowed() const {
  absl::MutexLock l(&mu_);
  if (clock_->NowNs() < stats_.writes_paused_until_ns) return false;
  if (!lru_.empty() && !lru_.front().used) return true;
  const uint64_t typical = lru_.empty() ? 0 : stats_.bytes / lru_.size();
  return stats_.bytes + typical < stats_.budget_bytes;
}

void TranscodeCache::TouchLocked(const std::string& name, uint64_t bytes) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    stats_.bytes -= it->second->bytes;
    lru_.erase(it->second);
  }
  lru_.push_back(Entry{name, bytes, true});
  by_name_[name] = std::prev(lru_.end());
  stats_.bytes += bytes;
}

void TranscodeCache::RemoveLocked(const std::string& name) {
  (void)dir_->Remove(name);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  stats_.bytes -= it->second->bytes;
  lru_.erase(it->second);
  by_name_.erase(it);
}

void TranscodeCache::EvictLocked() {
  while (stats_.bytes > stats_.budget_bytes && !lru_.empty()) {
    const std::string name = lru_.front().name;
    RemoveLocked(name);
    ++stats_.evictions;
  }
}

bool TranscodeCache::OnReport(const CacheReport& r) {
  if (r.event == kCacheNone) return false;
  bool paused = false;
  const std::string name = CacheEntryName(r.key);
  absl::MutexLock l(&mu_);
  stats_.transcode_ns += r.transcode_ns;
  switch (r.event) {
    case kCacheHit:
      ++stats_.hits;
      // An entry this index did not know (its write's report was lost with
      // a worker) is adopted.
      TouchLocked(name, r.entry_bytes);
      EvictLocked();
      break;
    case kCacheBad:
      ++stats_.bad_entries;
      RemoveLocked(name);
      break;
    case kCacheMiss:
      ++stats_.misses;
      if (r.bytes_written != 0) {
        ++stats_.writes;
        stats_.bytes_written += r.bytes_written;
        TouchLocked(name, r.bytes_written);
        EvictLocked();
      } else if (r.write_errno != 0) {
        ++stats_.write_failures;
        paused = PauseWritesLocked(r.write_errno);
      } else {
        ++stats_.writes_refused;
      }
      if (r.temp_left) (void)dir_->Remove(CacheTempName(r.key));
      break;
    default:
      break;
  }
  stats_.entries = lru_.size();
  return paused;
}

bool TranscodeCache::PauseWritesLocked(int err) {
  const int64_t now = clock_->NowNs();
  if (now < stats_.writes_paused_until_ns) return false;  // in-flight writes of the same pause
  const int64_t pause = next_pause_ns_;
  next_pause_ns_ = std::min(kMaxWritePauseNs, 2 * next_pause_ns_);
  stats_.writes_paused_until_ns = now + pause;
  const char* name = ::strerrorname_np(err);
  stats_.writes_paused_reason =
      absl::StrCat(std::strerror(err), " (", name != nullptr ? name : "errno", ")");
  ++stats_.write_pauses;
  return true;
}

TranscodeCache::Stats TranscodeCache::stats() const {
  absl::MutexLock l(&mu_);
  Stats st = stats_;
  if (clock_->NowNs() >= st.writes_paused_until_ns) {  // writes are back on
    st.writes_paused_until_ns = 0;
    st.writes_paused_reason.clear();
  }
  return st;
}

}  // namespace stoker
