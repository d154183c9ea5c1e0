// Readahead: a small pool of I/O threads in stokerd that reads the files of
// samples about to be dispatched, so that a worker finds its input in the
// page cache instead of waiting on a cold disk or network storage.
//
// The engine queues each sample's file (or tar member) when its batch gets
// a ring slot, in the order the samples will be dispatched, and calls Done
// when the sample goes to a worker. The threads read the queue front to
// back (pread into a scratch buffer; the page cache keeps the data), as long
// as the bytes read ahead and not yet dispatched stay within the budget: the
// bound on memory that readahead may hold in the page cache. An input whose
// first and last pages are cached already is not read again: on a warm
// dataset readahead costs an open, two one-byte reads and a close per file.

#ifndef STOKER_SERVER_ENGINE_PREFETCH_H_
#define STOKER_SERVER_ENGINE_PREFETCH_H_

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace stoker {

class Prefetcher {
 public:
  struct Stats {
    uint64_t files_read = 0;  // reads completed
    uint64_t bytes_read = 0;
    uint64_t cold_files = 0;        // not in the page cache when their read began
    uint64_t late = 0;              // dispatched before their read began (dropped)
    uint64_t errors = 0;            // open/read failures (the worker reports them)
    uint64_t too_large = 0;         // over --max-file-bytes: not read
    uint64_t window_bytes = 0;      // read ahead, not yet dispatched, now
    uint64_t window_bytes_max = 0;  // its high-water mark
    uint64_t queued = 0;            // waiting for a thread, now
    uint64_t files_cached = 0;      // found in the page cache already: not read
    uint64_t waiting_for_room = 0;  // threads waiting for room in the window, now
    uint64_t busy = 0;              // threads working on an item, now
  };

  // `root_fd`: the data root (borrowed). Inputs over `max_file_bytes` are
  // not read (the workers refuse them too). `simulate_latency_us`: tests and
  // benchmarks only, a read of uncached data first sleeps this long (a slow
  // disk), as the workers do with the same setting.
  Prefetcher(int root_fd, uint32_t threads, uint64_t budget_bytes, uint64_t max_file_bytes,
             uint32_t simulate_latency_us);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues a readahead of `path` (relative to the root): [offset, offset +
  // length) when `ranged`, else the whole file. `key` must be unique among
  // the keys not yet Done.
  void Enqueue(uint64_t key, std::string path, bool ranged, uint64_t offset, uint64_t length);
  // The sample was dispatched or dropped: forget it, and free its bytes.
  void Done(uint64_t key);
  Stats stats() const;

 private:
  struct Item {
    uint64_t key = 0;
    std::string path;
    bool ranged = false;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  enum class State { kQueued, kReading, kRead };
  void Loop();
  void ReadOne(const Item& item, std::vector<char>* scratch);
  // Takes `bytes` off the window and wakes the threads waiting for room, if
  // any (not every thread: on a warm dataset that was most of stokerd's CPU).
  void FreeLocked(uint64_t bytes) STOKER_REQUIRES(mu_);

  const int root_fd_;
  const uint64_t budget_;
  const uint64_t max_file_bytes_;
  const uint32_t latency_us_;
  mutable Mutex mu_;
  CondVar work_cv_;   // queue_ gained an item, or stop_
  CondVar space_cv_;  // window_ shrank, or stop_
  // Keys of the items whose threads wait for room. Room goes to the smallest
  // first: keys grow in dispatch order, so the sample due next is read next.
  std::set<uint64_t> space_waiting_ STOKER_GUARDED_BY(mu_);
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  std::deque<Item> queue_ STOKER_GUARDED_BY(mu_);
  struct Entry {
    State state = State::kQueued;
    uint64_t bytes = 0;  // counted in window_ (kReading, kRead)
    bool done = false;   // Done() came while reading
  };
  std::unordered_map<uint64_t, Entry> entries_ STOKER_GUARDED_BY(mu_);
  uint64_t window_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t busy_ STOKER_GUARDED_BY(mu_) = 0;  // Stats::busy
  Stats stats_ STOKER_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // set in the constructor, joined in the destructor
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_PREFETCH_H_
