#include "server/engine/prefetch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "server/dataset/dataset.h"
#include "common/posix.h"

namespace stoker {

Prefetcher::Prefetcher(int root_fd, uint32_t threads, uint64_t budget_bytes,
                       uint64_t max_file_bytes, uint32_t simulate_latency_us)
    : root_fd_(root_fd),
      budget_(budget_bytes),
      max_file_bytes_(max_file_bytes),
      latency_us_(simulate_latency_us) {
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

Prefetcher::~Prefetcher() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  space_cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void Prefetcher::Enqueue(uint64_t key, std::string path, bool ranged, uint64_t offset,
                         uint64_t length) {
  {
    MutexLock l(&mu_);
    if (threads_.empty()) return;
    queue_.push_back(Item{key, std::move(path), ranged, offset, length});
    entries_[key] = Entry{};
  }
  work_cv_.NotifyOne();
}

void Prefetcher::Done(uint64_t key) {
  MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  switch (it->second.state) {
    case State::kQueued:
      ++stats_.late;  // still queued: Loop skips keys no longer in entries_
      entries_.erase(it);
      if (!space_waiting_.empty()) space_cv_.NotifyAll();  // it may be waiting for room
      break;
    case State::kReading:
      it->second.done = true;  // ReadOne's end frees its bytes
      break;
    case State::kRead:
      FreeLocked(it->second.bytes);
      entries_.erase(it);
      break;
  }
}

void Prefetcher::FreeLocked(uint64_t bytes) {
  window_ -= bytes;
  if (!space_waiting_.empty()) space_cv_.NotifyAll();
}

Prefetcher::Stats Prefetcher::stats() const {
  MutexLock l(&mu_);
  Stats s = stats_;
  s.window_bytes = window_;
  s.queued = queue_.size();
  s.waiting_for_room = space_waiting_.size();
  s.busy = busy_;
  return s;
}

void Prefetcher::Loop() {
  std::vector<char> scratch(1 << 20);
  for (;;) {
    Item item;
    {
      MutexLock l(&mu_);
      while (!stop_ && queue_.empty()) work_cv_.Wait(&mu_);
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      if (entries_.find(item.key) == entries_.end()) continue;  // dispatched already
      ++busy_;
    }
    ReadOne(item, &scratch);
    MutexLock l(&mu_);
    --busy_;
  }
}

void Prefetcher::ReadOne(const Item& item, std::vector<char>* scratch) {
  absl::StatusOr<int> fd = OpenBeneath(root_fd_, item.path);
  uint64_t begin = 0, length = 0;
  bool ok = fd.ok();
  UniqueFd closer(ok ? *fd : -1);
  if (ok) {
    struct stat st;
    ok = ::fstat(closer.get(), &st) == 0;
    const uint64_t size = ok ? static_cast<uint64_t>(st.st_size) : 0;
    begin = item.ranged ? std::min(item.offset, size) : 0;
    length = item.ranged ? std::min(item.length, size - begin) : size;
  }
  const bool too_large = ok && max_file_bytes_ != 0 && length > max_file_bytes_;
  // Resident already (first and last page): nothing to read, nothing held.
  const Residency first =
      ok && !too_large && length > 0 ? PageResidency(closer.get(), begin) : Residency::kUnknown;
  const bool warm = first == Residency::kCached &&
                    PageResidency(closer.get(), begin + length - 1) == Residency::kCached;
  {
    // Claim the bytes: wait while the window is full (but never with an
    // empty window, or a file larger than the budget would wait forever),
    // and while an item due earlier waits for room.
    MutexLock l(&mu_);
    auto it = entries_.find(item.key);
    if (!ok) ++stats_.errors;
    if (too_large) {
      ++stats_.too_large;
      ok = false;
    }
    if (ok && warm && it != entries_.end()) ++stats_.files_cached;  // else counted late
    if (it == entries_.end() || !ok || warm) {
      if (it != entries_.end()) entries_.erase(it);
      return;
    }
    space_waiting_.insert(item.key);
    while (!stop_ && entries_.find(item.key) != entries_.end() &&
           !(*space_waiting_.begin() == item.key && (window_ == 0 || window_ + length <= budget_))) {
      space_cv_.Wait(&mu_);
    }
    space_waiting_.erase(item.key);
    if (!space_waiting_.empty()) space_cv_.NotifyAll();  // the next in line may fit too
    it = entries_.find(item.key);
    if (stop_ || it == entries_.end()) return;
    it->second.state = State::kReading;
    it->second.bytes = length;
    window_ += length;
    stats_.window_bytes_max = std::max(stats_.window_bytes_max, window_);
  }
  const bool cold = first == Residency::kNotCached;
  if (cold && latency_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(latency_us_));
  uint64_t done = 0;
  bool read_ok = true;
  while (done < length) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(scratch->size(), length - done));
    ssize_t n = ::pread(closer.get(), scratch->data(), chunk, static_cast<off_t>(begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      read_ok = false;
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  MutexLock l(&mu_);
  ++stats_.files_read;
  stats_.bytes_read += done;
  if (cold) ++stats_.cold_files;
  if (!read_ok) ++stats_.errors;
  auto it = entries_.find(item.key);
  if (it == entries_.end()) return;
  if (it->second.done) {
    FreeLocked(it->second.bytes);
    entries_.erase(it);
  } else {
    it->second.state = State::kRead;
  }
}

}  // namespace stoker
