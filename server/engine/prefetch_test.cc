// The readahead pool against real files: the byte budget holds, a freed
// window wakes the thread waiting for room, and inputs already in the page
// cache are not read again. Whether a file is cached is decided by the
// kernel, so cases that need a cold file skip where the file system cannot
// drop one (tmpfs) or cannot tell (mincore unanswered).

#include "server/engine/prefetch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "testing/dataset_test_util.h"
#include "common/posix.h"

namespace stoker {
namespace {

// Larger than any readahead window the kernel opens on a first read, so
// that a reader of a file's first page leaves its last page cold.
constexpr uint64_t kFileBytes = 8u << 20;

bool WaitFor(const std::function<bool()>& cond, int ms = 10000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

// Pages of the file in the page cache, by mincore (which, unlike a read,
// starts no readahead); -1 if that cannot be told.
int64_t ResidentPages(int fd, uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -1;
  const size_t pages = (bytes + 4095) / 4096;
  std::vector<unsigned char> vec(pages);
  const int rc = ::mincore(p, bytes, vec.data());
  ::munmap(p, bytes);
  if (rc != 0) return -1;
  int64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// Writes `n` files f0..f{n-1} of kFileBytes; with `cold`, drops them from the
// page cache. False where that state cannot be had, or told, here.
bool MakeFiles(const testing::TempDir& dir, int n, bool cold) {
  for (int i = 0; i < n; ++i) {
    const std::string path = dir / ("f" + std::to_string(i));
    dir.Write("f" + std::to_string(i), std::string(kFileBytes, static_cast<char>('a' + i)));
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return false;
    if (cold &&
        (::fdatasync(fd.get()) != 0 || ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED) != 0)) {
      return false;
    }
    const int64_t resident = ResidentPages(fd.get(), kFileBytes);
    if (resident != (cold ? 0 : static_cast<int64_t>(kFileBytes / 4096))) return false;
  }
  // The file system must also let PageResidency tell.
  dir.Write("probe", "x");
  UniqueFd probe(::open((dir / "probe").c_str(), O_RDONLY | O_CLOEXEC));
  return probe.valid() && PageResidency(probe.get(), 0) != Residency::kUnknown;
}

UniqueFd OpenRoot(const testing::TempDir& dir) {
  return UniqueFd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

// Queues f0..f{n-1} under keys 1..n, in that order.
void EnqueueFiles(Prefetcher& p, int n) {
  for (int k = 0; k < n; ++k) p.Enqueue(k + 1, "f" + std::to_string(k), false, 0, 0);
}

TEST_CASE("readahead holds at most its budget and a freed window wakes the next read",
          "[prefetch]") {
  testing::TempDir dir;
  if (!MakeFiles(dir, 4, /*cold=*/true)) {
    WARN("cannot drop files from the page cache here, or cannot tell: skipped");
    return;
  }
  UniqueFd root = OpenRoot(dir);
  REQUIRE(root.valid());
  // One thread, so the samples are taken in order; room for one file, so a
  // second read must wait until the first sample is dispatched.
  Prefetcher p(root.get(), /*threads=*/1, /*budget_bytes=*/kFileBytes + kFileBytes / 2,
               /*max_file_bytes=*/0, /*simulate_latency_us=*/0);
  EnqueueFiles(p, 4);
  for (uint64_t k = 1; k <= 4; ++k) {
    // Sample k is read; the thread then waits for room with sample k + 1
    // until k is dispatched (after the last sample, nothing is left to wait).
    REQUIRE(WaitFor([&] {
      const Prefetcher::Stats s = p.stats();
      return s.files_read >= k && (k == 4 || s.waiting_for_room == 1);
    }));
    const Prefetcher::Stats s = p.stats();
    CAPTURE(k, s.files_read, s.files_cached, s.late, s.window_bytes);
    CHECK(s.window_bytes <= kFileBytes);
    p.Done(k);
  }
  REQUIRE(WaitFor([&] { return p.stats().window_bytes == 0; }));
  const Prefetcher::Stats s = p.stats();
  // Each file was cold when asked (the residency probe reads nothing), so
  // each was read, and each but the first waited for the room of the last.
  CHECK(s.files_read == 4);
  CHECK(s.files_cached == 0);
  CHECK(s.late == 0);
  CHECK(s.bytes_read == 4 * kFileBytes);
  CHECK(s.window_bytes_max == kFileBytes);  // never two files at once
  CHECK(s.cold_files == 4);
}

TEST_CASE("readahead leaves inputs that are already cached alone", "[prefetch]") {
  testing::TempDir dir;
  if (!MakeFiles(dir, 4, /*cold=*/false)) {
    WARN("this file system cannot say what is cached: skipped");
    return;
  }
  UniqueFd root = OpenRoot(dir);
  REQUIRE(root.valid());
  Prefetcher p(root.get(), 2, 1 << 20, 0, 0);
  EnqueueFiles(p, 4);
  REQUIRE(WaitFor([&] { return p.stats().files_cached == 4; }));
  const Prefetcher::Stats s = p.stats();
  CHECK(s.files_read == 0);
  CHECK(s.bytes_read == 0);
  CHECK(s.window_bytes_max == 0);
  for (uint64_t k = 1; k <= 4; ++k) p.Done(k);  // nothing held: nothing to free
  CHECK(p.stats().window_bytes == 0);
}

TEST_CASE("a sample dispatched before its turn is counted late, once", "[prefetch]") {
  testing::TempDir dir;
  MakeFiles(dir, 1, /*cold=*/false);
  UniqueFd root = OpenRoot(dir);
  REQUIRE(root.valid());
  // Each sample dispatched right after it is queued, as when the workers win
  // the race: the thread finds it queued, being checked, or being read.
  Prefetcher p(root.get(), 2, 1 << 20, 0, 0);
  for (uint64_t k = 1; k <= 200; ++k) {
    p.Enqueue(k, "f0", false, 0, 0);
    p.Done(k);
  }
  auto ends = [&] {
    const Prefetcher::Stats s = p.stats();
    return s.late + s.files_cached + s.files_read;
  };
  // Once nothing is queued and no thread holds an item, no count can move.
  REQUIRE(WaitFor([&] {
    const Prefetcher::Stats s = p.stats();
    return ends() >= 200 && s.queued == 0 && s.busy == 0;
  }));
  // Each sample ends exactly one way: late, found cached, or read.
  CHECK(ends() == 200);
  CHECK(p.stats().window_bytes == 0);
}

}  // namespace
}  // namespace stoker
