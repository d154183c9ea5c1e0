// The transcode cache (stokerd --transcode-cache DIR): lossless baseline
// copies of the progressive (multi-scan) JPEGs a daemon reads, so that later
// epochs decode the copy (2-3x faster, the same pixels:
// server/image/decode/transcode.h) instead of the original.
//
// Who does what
//   1. The daemon opens DIR once (0700, owner-only) and hands it to every
//      worker as worker::kTranscodeCacheFd. Each task says whether the cache
//      is on and whether the worker may write a copy (TaskMsg::cache: the
//      daemon allows writes while the budget has room).
//   2. The worker (worker_main.cc) names the entry of the file it is given
//      by CacheKeyFor (the file's identity) and CacheEntryName. Hit: it reads
//      the entry, checks it whole (OpenEnvelope) and decodes its payload.
//      Bad entry: it decodes the original and reports kCacheBad. Miss: it
//      reads the original; a multi-scan one (CountScans) is re-coded
//      (Transcoder::ToBaseline) and, when writes are allowed, written as
//      ".tmp-NAME" (O_CREAT|O_EXCL, 0600, so two workers never write the
//      same entry) and renamed to NAME. The copy is decoded in place of the
//      original (re-coding and then decoding the copy costs less than
//      decoding the progressive original and then re-coding it). A failure
//      of the cache never fails the sample: it is reported and counted.
//   3. The daemon's TranscodeCache (below) indexes the entries (key ->
//      bytes, last use), keeps their bytes within the budget (least recently
//      used first), deletes bad entries and the temporaries a failed write
//      left (workers never delete), and counts what happened for Status.
//
// An entry is a 64-byte envelope header followed by the payload (a baseline
// JPEG); all integers little-endian:
//   0  magic "STKTCv1\0"          32 payload_bytes (u64)
//   8  format version (u32)       40 payload_hash (u64, Hash64 of payload)
//  12  header bytes, 64 (u32)     48 reserved, 0 (u64)
//  16  source bytes (u64)         56 header_hash (u64, Hash64 of bytes 0..55)
//  24  source mtime, ns (i64)
// A torn write (no fsync: a crash after the rename may leave a short or
// zeroed file), a flipped bit, a changed original or an older format all
// fail OpenEnvelope, so the entry is never trusted but rebuilt.
//
// One daemon per DIR: start-up removes every ".tmp-*" left there.

#ifndef STOKER_SERVER_ENGINE_TRANSCODE_CACHE_H_
#define STOKER_SERVER_ENGINE_TRANSCODE_CACHE_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/hash64.h"

namespace stoker {

// ---------------------------------------------------------------------------
// The entry format, shared by the workers and the daemon.

inline constexpr uint32_t kEnvelopeVersion = 1;
inline constexpr size_t kEnvelopeBytes = 64;

// The largest payload accepted for a source of `source_bytes` (a baseline
// copy is measured at 1.07-1.08x its progressive original): larger copies
// are not written, larger entries are bad.
inline constexpr uint64_t MaxPayloadBytes(uint64_t source_bytes) {
  return 2 * source_bytes + (uint64_t{1} << 20);
}

// Envelopes are checked with common/hash64.h's Hash64.

// 128 bits naming one version of one input: the dataset-relative path, the
// member range (shards), and the file's size, mtime and inode number.
struct CacheKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const CacheKey& o) const { return hi == o.hi && lo == o.lo; }
};

// What a key is made of.
struct SourceIdentity {
  std::string_view path;  // relative to the data root
  bool has_range = false;
  uint64_t range_offset = 0;
  uint64_t range_length = 0;
  uint64_t file_size = 0;  // st_size of the whole file
  int64_t mtime_ns = 0;    // st_mtim
  uint64_t inode = 0;      // st_ino
  int64_t ctime_ns = 0;    // st_ctim: unlike the mtime, no user can set it
                           // back (cp -p or rsync -t over the same inode)
};
CacheKey CacheKeyFor(const SourceIdentity& id);
// The identity of `path` (its byte range with has_range) open as `st`: what
// every cache of a file's derived bytes keys on (this cache's copies, the
// prepared cache's entries).
SourceIdentity IdentityOf(std::string_view path, const struct stat& st, bool has_range,
                          uint64_t range_offset, uint64_t range_length);

// The entry's file name in DIR: 32 lowercase hex digits and ".jpg".
std::string CacheEntryName(const CacheKey& key);
// The temporary a worker writes it as first: ".tmp-" + CacheEntryName.
std::string CacheTempName(const CacheKey& key);
// Whether `name` is an entry's name (and its key, when `key` is not null).
bool ParseCacheEntryName(std::string_view name, CacheKey* key);

// An entry for `payload`, copy of a source of `source_bytes` bytes (the
// member's, for a shard member) last modified at `source_mtime_ns`.
void WriteEnvelope(uint64_t source_bytes, int64_t source_mtime_ns, const uint8_t* payload,
                   size_t payload_bytes, std::vector<uint8_t>* out);

// Checks `entry` (a whole entry file) as a copy of that source: OK and the
// payload's place in `entry`, or DATA_LOSS naming what is wrong (magic,
// version, header checksum, source size or mtime, length, payload checksum).
absl::Status OpenEnvelope(const uint8_t* entry, size_t bytes, uint64_t source_bytes,
                          int64_t source_mtime_ns, size_t* payload_offset, size_t* payload_bytes);

// The scans (SOS markers) of a JPEG, found by walking its markers (entropy-
// coded data is skipped by looking for 0xFF not followed by 0x00 or RSTn;
// no Huffman decoding). A progressive file has several; a baseline one,
// one. Stops at EOI or the end of `data`; 0 for what is not a JPEG.
uint32_t CountScans(const uint8_t* data, size_t size);

// ---------------------------------------------------------------------------
// The daemon's room.

// What a worker's result says of the cache (worker::ResultMsg::cache_event).
enum CacheEvent : uint32_t {
  kCacheNone = 0,       // cache off for the task, or the sample failed first
  kCacheHit = 1,        // decoded the entry
  kCacheMiss = 2,       // no entry; a multi-scan original (bytes_written: a copy was written)
  kCacheBad = 3,        // the entry failed its check: decoded the original
  kCacheNotNeeded = 4,  // no entry; the original is single-scan (nothing to gain) or
                        // the transcoder refused it (corrupt, truncated, unsupported)
};

// One worker result's report.
struct CacheReport {
  CacheEvent event = kCacheNone;
  CacheKey key;
  uint64_t entry_bytes = 0;    // kCacheHit: the entry's size
  uint64_t bytes_written = 0;  // kCacheMiss: the copy written (0: none)
  int write_errno = 0;         // kCacheMiss: writing the copy failed, with this errno
  bool temp_left = false;      // the failed write left CacheTempName(key)
  uint64_t transcode_ns = 0;   // re-coding the original (0: none)
};

// What the daemon does to DIR, for tests (leveldb's Env).
struct CacheDirEntry {
  std::string name;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
};
class CacheDir {
 public:
  virtual ~CacheDir() = default;
  // Every regular file in DIR.
  virtual absl::Status List(std::vector<CacheDirEntry>* out) = 0;
  // Removes `name` (absent: OK).
  virtual absl::Status Remove(const std::string& name) = 0;
};
// Opens (making it and its parents, 0700, as needed) the cache's folder:
// an fd of it, O_DIRECTORY and close-on-exec. Group and other permission
// bits found on it are taken away. Errors: a system call's (PosixError),
// FAILED_PRECONDITION when another user owns it or it is not a folder.
absl::StatusOr<int> OpenCacheDirectory(const std::string& path);

// A cache's budget when none is given: `most`, and at most a quarter of the
// free space now on the file system of folder `dir_fd`.
uint64_t DefaultCacheBudget(int dir_fd, uint64_t most);

// The real DIR, as the open directory `dir_fd` (borrowed: must outlive it).
std::unique_ptr<CacheDir> PosixCacheDir(int dir_fd);

class TranscodeCache {
 public:
  struct Stats {
    uint64_t budget_bytes = 0;
    uint64_t bytes = 0;  // of the entries indexed
    uint64_t entries = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;  // multi-scan originals without an entry (kCacheMiss)
    uint64_t writes = 0;
    uint64_t bytes_written = 0;
    uint64_t write_failures = 0;  // writing a copy failed (EACCES, ENOSPC, ...)
    uint64_t write_pauses = 0;    // times a failed write turned writes off for a while
    // While writes are off after a failed write: why ("No space left on
    // device (ENOSPC)"), and when they come back on (the clock's ns). Empty
    // and 0 while writes are on.
    std::string writes_paused_reason;
    int64_t writes_paused_until_ns = 0;
    uint64_t writes_refused = 0;  // misses not written: no room in the budget, or another
                                  // worker was writing the same entry
    uint64_t bad_entries = 0;
    uint64_t evictions = 0;
    uint64_t loaded_entries = 0;  // found in DIR at start-up
    uint64_t transcode_ns = 0;    // the workers' re-coding time, all told
  };

  // A write that fails (a full disk, a quota, a read-only folder) turns
  // writes off for this long, doubled at each failure in a row up to
  // kMaxWritePauseNs: while they are off no worker re-codes a file it could
  // not keep, so a cache that cannot grow is never slower than none.
  static constexpr int64_t kWritePauseNs = 60'000'000'000;
  static constexpr int64_t kMaxWritePauseNs = 3600'000'000'000;

  // `dir` and `clock` are borrowed and must outlive this (clock: nullptr
  // for the system's).
  TranscodeCache(CacheDir* dir, uint64_t budget_bytes, Clock* clock = nullptr);

  // Indexes DIR: entries by name (oldest mtime least recently used),
  // temporaries removed, other files left alone; then evicts down to the
  // budget. Errors: the listing's.
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the next task may write a copy: never while writes are paused
  // (kWritePauseNs); else while one more entry of the
  // mean size fits in the budget, or while the least recently used entry
  // has not been used since Load (an earlier run's, which may be evicted).
  // So entries this run uses are not pushed out by new ones (only by a
  // write that overshoots, several being in flight at once): a dataset whose
  // copies exceed the budget keeps the part that fits, rather than
  // rewriting and evicting every copy each epoch.
  bool WritesAllowed() const ABSL_LOCKS_EXCLUDED(mu_);

  // A worker's report: counts it, touches or indexes the entry, deletes a
  // bad entry or a temporary left behind, and after a write evicts least
  // recently used entries until the bytes are within the budget (an entry
  // larger than the whole budget goes at once). A failed write pauses
  // writes; true when this report began a pause (the caller logs it once,
  // with stats().writes_paused_reason).
  bool OnReport(const CacheReport& r) ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::string name;
    uint64_t bytes = 0;
    bool used = false;  // hit or written since Load
  };
  using Lru = std::list<Entry>;  // least recently used first

  void TouchLocked(const std::string& name, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PauseWritesLocked(int err) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CacheDir* const dir_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  int64_t next_pause_ns_ ABSL_GUARDED_BY(mu_) = kWritePauseNs;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Lru::iterator> by_name_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_TRANSCODE_CACHE_H_
