// The prepared cache's budget (prepared_cache_budget.h) over a fake folder: what
// Load counts and cleans, FIFO eviction, rewrites. No files, no process.

#include "server/engine/prepared_cache_budget.h"

#include "testing/room_test_util.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace stoker {
namespace {

using Folder = testing::FakeCacheDir;

constexpr int64_t kSecond = 1'000'000'000;

TEST_CASE("prepared cache: Load counts entries oldest first and removes stale temporaries") {
  Folder dir;
  dir.files[volume::VolumeEntryName(3)] = {300, 30 * kSecond};
  dir.files[volume::VolumeEntryName(1)] = {100, 10 * kSecond};
  dir.files[volume::VolumeEntryName(2)] = {200, 20 * kSecond};
  dir.files[".tmp-" + volume::VolumeEntryName(9)] = {5, 0};                // died long ago
  dir.files[".tmp-" + volume::VolumeEntryName(8)] = {5, 1000 * kSecond};    // being written now
  dir.files["notes.txt"] = {7, 0};                                  // not ours
  PreparedCacheBudget budget(&dir, 450);
  REQUIRE(budget.Load(1000 * kSecond).ok());
  // 600 bytes over a 450 budget: the oldest go (1, then 2) until it fits.
  CHECK(dir.removed == std::vector<std::string>{".tmp-" + volume::VolumeEntryName(9), volume::VolumeEntryName(1),
                                                volume::VolumeEntryName(2)});
  const auto s = budget.stats();
  CHECK(s.entries == 1);
  CHECK(s.bytes == 300);
  CHECK(s.temps_removed == 1);
  CHECK(dir.files.count("notes.txt") == 1);
  CHECK(dir.files.count(".tmp-" + volume::VolumeEntryName(8)) == 1);
}

TEST_CASE("prepared cache: written entries evict the oldest, FIFO") {
  Folder dir;
  PreparedCacheBudget budget(&dir, 1000);
  REQUIRE(budget.Load(0).ok());
  for (uint64_t n = 1; n <= 4; ++n) {
    dir.files[volume::VolumeEntryName(n)] = {300, 0};
    budget.Added(volume::VolumeEntryName(n), 300);
  }
  CHECK(dir.removed == std::vector<std::string>{volume::VolumeEntryName(1)});
  CHECK(budget.stats().bytes == 900);
  CHECK(budget.stats().evicted == 1);
  // A rewrite (a changed source, the same name) replaces its old size.
  budget.Added(volume::VolumeEntryName(3), 100);
  CHECK(budget.stats().bytes == 700);
  CHECK(budget.stats().entries == 3);
  // An entry larger than the budget goes too, after every other.
  budget.Added(volume::VolumeEntryName(7), 5000);
  CHECK(budget.stats().entries == 0);
  CHECK(budget.stats().bytes == 0);
  CHECK(dir.removed.back() == volume::VolumeEntryName(7));
  CHECK(budget.stats().written == 6);
  CHECK(budget.stats().volume_writes == 6);
  budget.Added("00000000000000ff.stki", 10);
  budget.Hit(true);
  budget.Hit(false);
  budget.Hit(false);
  CHECK(budget.stats().image_writes == 1);
  CHECK(budget.stats().volume_hits == 1);
  CHECK(budget.stats().image_hits == 2);
}

}  // namespace
}  // namespace stoker
