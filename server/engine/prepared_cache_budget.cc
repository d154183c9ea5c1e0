#include "server/engine/prepared_cache_budget.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "server/worker/image_entry.h"
#include "spdlog/spdlog.h"

namespace stoker {

PreparedCacheBudget::PreparedCacheBudget(CacheDir* dir, uint64_t budget_bytes) : dir_(dir) {
  stats_.budget_bytes = budget_bytes;
}

absl::Status PreparedCacheBudget::Load(int64_t now_ns) {
  std::vector<CacheDirEntry> files;
  if (absl::Status st = dir_->List(&files); !st.ok()) return st;
  std::sort(files.begin(), files.end(), [](const CacheDirEntry& a, const CacheDirEntry& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  absl::MutexLock l(&mu_);
  entries_.clear();
  stats_.bytes = 0;
  for (const CacheDirEntry& f : files) {
    if (absl::StartsWith(f.name, ".tmp-")) {
      if (now_ns - f.mtime_ns > kStaleTempNs && dir_->Remove(f.name).ok()) ++stats_.temps_removed;
      continue;
    }
    if (!absl::EndsWith(f.name, ".stkv") && !absl::EndsWith(f.name, ".stki")) continue;  // not ours
    entries_.push_back({f.name, f.bytes});
    stats_.bytes += f.bytes;
  }
  EvictLocked();
  stats_.entries = entries_.size();
  return absl::OkStatus();
}

void PreparedCacheBudget::Added(const std::string& name, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  // A rewrite of a stale entry replaces it (the same name, a new key).
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->name == name) {
      stats_.bytes -= it->bytes;
      entries_.erase(it);
      break;
    }
  }
  entries_.push_back({name, bytes});
  stats_.bytes += bytes;
  ++stats_.written;
  ++(absl::EndsWith(name, ".stkv") ? stats_.volume_writes : stats_.image_writes);
  EvictLocked();
  stats_.entries = entries_.size();
}

void PreparedCacheBudget::EvictLocked() {
  while (stats_.bytes > stats_.budget_bytes && !entries_.empty()) {
    const Entry e = entries_.front();
    entries_.pop_front();
    (void)dir_->Remove(e.name);  // absent: OK; a failure leaves a file the next Load counts
    stats_.bytes -= e.bytes;
    ++stats_.evicted;
  }
}

void PreparedCacheBudget::Hit(bool volume) {
  absl::MutexLock l(&mu_);
  ++(volume ? stats_.volume_hits : stats_.image_hits);
}

void PreparedCacheBudget::Report(const worker::ResultMsg& r) {
  if (r.prepared_hit != 0) Hit(r.prepared_entry_kind == worker::kPreparedVolume);
  if (r.prepared_entry_bytes != 0) {
    Added(r.prepared_entry_kind == worker::kPreparedImage
              ? worker::ImageEntryName(r.prepared_entry_id)
              : volume::VolumeEntryName(r.prepared_entry_id),
          r.prepared_entry_bytes);
  }
}

absl::StatusOr<PreparedCache> OpenPreparedCache(const std::string& path, double mb,
                                                int64_t wall_now_ns) {
  auto fd = OpenCacheDirectory(path);
  if (!fd.ok()) return fd.status();
  PreparedCache c;
  c.fd = UniqueFd(*fd);
  c.dir = PosixCacheDir(c.fd.get());
  c.mb = mb != 0 ? mb : DefaultCacheBudget(c.fd.get(), uint64_t{64} << 30) / 1048576.0;
  c.budget = std::make_unique<PreparedCacheBudget>(c.dir.get(),
                                                   static_cast<uint64_t>(c.mb * 1048576.0));
  if (absl::Status st = c.budget->Load(wall_now_ns); !st.ok()) {
    spdlog::warn("prepared cache {}: {}", path, st.ToString());
  }
  const PreparedCacheBudget::Stats vs = c.budget->stats();
  spdlog::info("prepared cache {}: {} entries, {:.1f} of {:.0f} MiB", path, vs.entries,
               vs.bytes / 1048576.0, c.mb);
  return c;
}

PreparedCacheBudget::Stats PreparedCacheBudget::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace stoker
