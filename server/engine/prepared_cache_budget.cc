#include "server/engine/prepared_cache_budget.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"

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

PreparedCacheBudget::Stats PreparedCacheBudget::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace stoker
