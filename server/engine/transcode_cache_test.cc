// The transcode cache: its entry format (envelope, key, names, scan count)
// on real files, and the daemon's index over an in-memory folder (start-up
// load, LRU eviction within the budget, bad entries, failed writes).

#include "server/engine/transcode_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "testing/room_test_util.h"

namespace stoker {
namespace {

// A folder in memory: name -> (bytes, mtime); records what was removed.
using FakeDir = testing::FakeCacheDir;

CacheKey Key(uint64_t n) { return CacheKey{n, ~n}; }
std::string Name(uint64_t n) { return CacheEntryName(Key(n)); }

CacheReport Written(uint64_t n, uint64_t bytes, FakeDir* dir) {
  dir->files[Name(n)] = {bytes, 0};  // what the worker's rename did
  CacheReport r;
  r.event = kCacheMiss;
  r.key = Key(n);
  r.bytes_written = bytes;
  return r;
}

CacheReport Hit(uint64_t n, uint64_t bytes) {
  CacheReport r;
  r.event = kCacheHit;
  r.key = Key(n);
  r.entry_bytes = bytes;
  return r;
}

// A real JPEG of the tree (tests/data), or an encoder's output.
std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> Encode(bool progressive, const testing::ScratchDir& dir) {
  // cjpeg is in scripts/lib.sh's packages; a 96x64 gradient as its PPM input.
  const std::string ppm = dir.path() + "/in.ppm";
  {
    std::ofstream f(ppm, std::ios::binary);
    f << "P6\n96 64\n255\n";
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 96; ++x) f << char(x * 2) << char(y * 3) << char((x * y) & 255);
    }
  }
  const std::string out = dir.path() + (progressive ? "/p.jpg" : "/b.jpg");
  const std::string cmd = std::string("cjpeg -quality 85 ") + (progressive ? "-progressive " : "") +
                          "-outfile " + out + " " + ppm;
  REQUIRE(std::system(cmd.c_str()) == 0);
  return ReadFile(out);
}

TEST_CASE("CountScans tells progressive files from baseline ones") {
  testing::ScratchDir dir;
  const std::vector<uint8_t> baseline = Encode(false, dir);
  const std::vector<uint8_t> progressive = Encode(true, dir);
  CHECK(CountScans(baseline.data(), baseline.size()) == 1);
  CHECK(CountScans(progressive.data(), progressive.size()) > 1);
  const uint8_t junk[] = {'n', 'o', 't', ' ', 'j', 'p', 'e', 'g'};
  CHECK(CountScans(junk, sizeof(junk)) == 0);
  // A truncated file counts the scans that begin before the cut.
  CHECK(CountScans(progressive.data(), progressive.size() / 2) >= 1);
}

TEST_CASE("An envelope holds its payload and refuses every corruption") {
  testing::ScratchDir dir;
  const std::vector<uint8_t> payload = Encode(false, dir);
  std::vector<uint8_t> e;
  WriteEnvelope(12345, 678, payload.data(), payload.size(), &e);
  REQUIRE(e.size() == kEnvelopeBytes + payload.size());
  size_t off = 0, n = 0;
  REQUIRE(OpenEnvelope(e.data(), e.size(), 12345, 678, &off, &n).ok());
  CHECK(std::vector<uint8_t>(e.begin() + off, e.begin() + off + n) == payload);

  CHECK(absl::IsDataLoss(OpenEnvelope(e.data(), e.size(), 12346, 678, &off, &n)));  // size
  CHECK(absl::IsDataLoss(OpenEnvelope(e.data(), e.size(), 12345, 679, &off, &n)));  // mtime
  CHECK(absl::IsDataLoss(OpenEnvelope(e.data(), e.size() - 1, 12345, 678, &off, &n)));
  CHECK(absl::IsDataLoss(OpenEnvelope(e.data(), 10, 12345, 678, &off, &n)));
  for (size_t at : {size_t{3}, size_t{20}, kEnvelopeBytes + 100, e.size() - 1}) {
    std::vector<uint8_t> bad = e;
    bad[at] ^= 0x10;
    CHECK(absl::IsDataLoss(OpenEnvelope(bad.data(), bad.size(), 12345, 678, &off, &n)));
  }
}

TEST_CASE("Keys follow the file's identity and names round-trip") {
  SourceIdentity a;
  a.path = "ds/class_00/img_0001.jpg";
  a.file_size = 1000;
  a.mtime_ns = 1'700'000'000'123'456'789;
  a.inode = 42;
  const CacheKey k = CacheKeyFor(a);
  CHECK(CacheKeyFor(a) == k);  // stable: no per-process seed
  for (int field = 0; field < 6; ++field) {
    SourceIdentity b = a;
    if (field == 0) b.path = "ds/class_00/img_0002.jpg";
    if (field == 1) b.file_size = 1001;
    if (field == 2) b.mtime_ns += 1;
    if (field == 3) b.inode = 43;
    if (field == 4) b.has_range = true;
    if (field == 5) b.ctime_ns += 1;
    CHECK_FALSE(CacheKeyFor(b) == k);
  }
  const std::string name = CacheEntryName(k);
  CHECK(name.size() == 36);
  CacheKey back;
  REQUIRE(ParseCacheEntryName(name, &back));
  CHECK(back == k);
  CHECK_FALSE(ParseCacheEntryName(CacheTempName(k), nullptr));
  CHECK_FALSE(ParseCacheEntryName("0123456789ABCDEF0123456789abcdef.jpg", nullptr));
  // Hash64 covers every byte, lanes and tail alike.
  std::vector<uint8_t> buf(77, 7);
  const uint64_t h = Hash64(buf.data(), buf.size(), 1);
  for (size_t i = 0; i < buf.size(); ++i) {
    buf[i] ^= 1;
    CHECK(Hash64(buf.data(), buf.size(), 1) != h);
    buf[i] ^= 1;
  }
}

TEST_CASE("Load indexes entries oldest first, removes temporaries, keeps to the budget") {
  FakeDir dir;
  dir.files[Name(1)] = {400, 30};
  dir.files[Name(2)] = {400, 10};  // the oldest: evicted first
  dir.files[Name(3)] = {400, 20};
  dir.files[CacheTempName(Key(4))] = {50, 5};
  dir.files["notes.txt"] = {10, 1};
  TranscodeCache cache(&dir, 1000);
  REQUIRE(cache.Load().ok());
  TranscodeCache::Stats st = cache.stats();
  CHECK(st.loaded_entries == 3);
  CHECK(st.entries == 2);
  CHECK(st.bytes == 800);
  CHECK(st.evictions == 1);
  CHECK(dir.files.count(Name(2)) == 0);
  CHECK(dir.files.count(CacheTempName(Key(4))) == 0);
  CHECK(dir.files.count("notes.txt") == 1);  // not ours: left alone
  // Under the budget: writes allowed.
  CHECK(cache.WritesAllowed());
}

TEST_CASE("Writes evict the least recently used entries, hits keep theirs") {
  FakeDir dir;
  TranscodeCache cache(&dir, 1000);
  REQUIRE(cache.Load().ok());
  cache.OnReport(Written(1, 300, &dir));
  cache.OnReport(Written(2, 300, &dir));
  cache.OnReport(Written(3, 300, &dir));
  cache.OnReport(Hit(1, 300));            // 2 is now the least recently used
  CHECK_FALSE(cache.WritesAllowed());     // 900 + a mean entry is over the budget
  cache.OnReport(Written(4, 300, &dir));  // allowed earlier (in flight): 1200, 2 goes
  TranscodeCache::Stats st = cache.stats();
  CHECK(st.bytes == 900);
  CHECK(st.entries == 3);
  CHECK(st.evictions == 1);
  CHECK(st.writes == 4);
  CHECK(st.hits == 1);
  CHECK(st.misses == 4);
  CHECK(dir.files.count(Name(2)) == 0);
  CHECK(dir.files.count(Name(1)) == 1);
  CHECK(dir.files.count(Name(3)) == 1);
  // A copy larger than the whole budget does not stay.
  cache.OnReport(Written(5, 5000, &dir));
  st = cache.stats();
  CHECK(st.bytes <= 1000);
  CHECK(dir.files.count(Name(5)) == 0);
  // Rewriting an entry replaces its bytes, never counts them twice.
  cache.OnReport(Written(3, 100, &dir));
  CHECK(cache.stats().bytes <= 1000);
}

TEST_CASE("A full budget of entries this run used refuses writes, old ones give way") {
  FakeDir dir;
  dir.files[Name(1)] = {600, 1};  // left by an earlier run
  TranscodeCache cache(&dir, 1000);
  REQUIRE(cache.Load().ok());
  cache.OnReport(Written(2, 500, &dir));  // 1100: the old entry goes
  CHECK(dir.files.count(Name(1)) == 0);
  cache.OnReport(Written(3, 500, &dir));  // exactly full, all used this run
  CHECK_FALSE(cache.WritesAllowed());
  CacheReport refused;
  refused.event = kCacheMiss;
  refused.key = Key(9);
  cache.OnReport(refused);
  TranscodeCache::Stats st = cache.stats();
  CHECK(st.writes_refused == 1);
  CHECK(st.bytes == 1000);
}

TEST_CASE("Bad entries and failed writes are deleted and counted") {
  FakeDir dir;
  TranscodeCache cache(&dir, 1000);
  REQUIRE(cache.Load().ok());
  cache.OnReport(Written(1, 300, &dir));
  CacheReport bad;
  bad.event = kCacheBad;
  bad.key = Key(1);
  cache.OnReport(bad);
  CHECK(dir.files.count(Name(1)) == 0);
  CacheReport failed;
  failed.event = kCacheMiss;
  failed.key = Key(2);
  failed.write_errno = EACCES;
  failed.temp_left = true;
  dir.files[CacheTempName(Key(2))] = {10, 0};
  cache.OnReport(failed);
  CHECK(dir.files.count(CacheTempName(Key(2))) == 0);
  // An entry the index did not know (its write's report was lost) is adopted.
  cache.OnReport(Hit(7, 200));
  const TranscodeCache::Stats st = cache.stats();
  CHECK(st.bad_entries == 1);
  CHECK(st.write_failures == 1);
  CHECK(st.entries == 1);
  CHECK(st.bytes == 200);
}

TEST_CASE("A write that fails (a full disk) pauses writes, longer each time, and says why") {
  FakeDir dir;
  FakeClock clock;
  TranscodeCache cache(&dir, 1 << 30, &clock);
  REQUIRE(cache.Load().ok());
  CHECK(cache.WritesAllowed());
  CacheReport full;
  full.event = kCacheMiss;
  full.key = Key(3);
  full.write_errno = ENOSPC;
  CHECK(cache.OnReport(full));  // begins a pause: the caller logs it
  CHECK_FALSE(cache.OnReport(full));  // another in-flight write of the same pause: counted only
  CHECK_FALSE(cache.WritesAllowed());  // no file is re-coded that cannot be kept
  TranscodeCache::Stats st = cache.stats();
  CHECK(st.write_failures == 2);
  CHECK(st.write_pauses == 1);
  CHECK(st.writes_paused_reason == "No space left on device (ENOSPC)");
  CHECK(st.writes_paused_until_ns == clock.NowNs() + TranscodeCache::kWritePauseNs);
  clock.AdvanceMs(TranscodeCache::kWritePauseNs / 1'000'000 - 1);
  CHECK_FALSE(cache.WritesAllowed());
  clock.AdvanceMs(1);
  CHECK(cache.WritesAllowed());  // tries again
  CHECK(cache.stats().writes_paused_reason.empty());
  // Still full: a pause twice as long.
  full.write_errno = EDQUOT;
  CHECK(cache.OnReport(full));
  st = cache.stats();
  CHECK(st.writes_paused_until_ns == clock.NowNs() + 2 * TranscodeCache::kWritePauseNs);
  CHECK(st.writes_paused_reason == "Disk quota exceeded (EDQUOT)");
  // Hits go on while writes are off.
  cache.OnReport(Hit(9, 100));
  CHECK(cache.stats().hits == 1);
  // Pauses never grow past the cap.
  for (int i = 0; i < 12; ++i) {
    clock.AdvanceMs(TranscodeCache::kMaxWritePauseNs / 1'000'000);
    cache.OnReport(full);
  }
  CHECK(cache.stats().writes_paused_until_ns == clock.NowNs() + TranscodeCache::kMaxWritePauseNs);
}

TEST_CASE("OpenCacheDirectory makes an owner-only folder and the real one lists it") {
  testing::ScratchDir scratch;
  const std::string path = scratch.path() + "/a/b/cache";
  auto fd = OpenCacheDirectory(path);
  REQUIRE(fd.ok());
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
  // One daemon per folder: a second open fails while the first is held.
  auto busy = OpenCacheDirectory(path);
  CHECK(busy.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(busy.status().message()), Catch::Contains("in use by another stokerd"));
  ::close(*fd);
  auto again = OpenCacheDirectory(path);
  REQUIRE(again.ok());
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  {
    std::ofstream(path + "/" + Name(1)) << "0123456789";
    std::ofstream(path + "/" + CacheTempName(Key(2))) << "x";
  }
  auto dir = PosixCacheDir(*again);
  TranscodeCache cache(dir.get(), 1 << 20);
  REQUIRE(cache.Load().ok());
  CHECK(cache.stats().entries == 1);
  CHECK(cache.stats().bytes == 10);
  CHECK(::access((path + "/" + CacheTempName(Key(2))).c_str(), F_OK) != 0);
  ::close(*again);
}

}  // namespace
}  // namespace stoker
