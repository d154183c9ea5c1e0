// The sampler: DistributedSampler's sharding and padding, DataLoader's
// batch counts, and the documented Fisher-Yates permutation.

#include "server/dataset/sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "server/image/ops/rng.h"

namespace stoker {
namespace {

SamplerOptions Options(uint64_t seed, bool shuffle, uint32_t rank = 0, uint32_t world_size = 1) {
  SamplerOptions o;
  o.seed = seed;
  o.shuffle = shuffle;
  o.rank = rank;
  o.world_size = world_size;
  return o;
}

// The whole epoch's order (world_size 1 shards nothing).
std::vector<uint64_t> Permutation(uint64_t n, uint64_t seed, uint32_t epoch) {
  return ShardIndices(n, Options(seed, true), epoch);
}

std::vector<uint64_t> Iota(uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_CASE("Sampler: the shuffle is a permutation, a function of (seed, epoch)",
          "[dataset][sampler]") {
  const uint64_t n = 1000;
  std::vector<uint64_t> p = Permutation(n, 42, 3);
  REQUIRE(p.size() == n);
  std::vector<uint64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == Iota(n));
  CHECK(p != Iota(n));

  CHECK(Permutation(n, 42, 3) == p);
  CHECK(Permutation(n, 42, 4) != p);
  CHECK(Permutation(n, 43, 3) != p);
  CHECK(Permutation(1, 42, 3) == std::vector<uint64_t>{0});
  CHECK(Permutation(0, 42, 3).empty());
}

TEST_CASE("Sampler: the permutation is the documented Fisher-Yates", "[dataset][sampler]") {
  const uint64_t n = 257;
  std::vector<uint64_t> expected = Iota(n);
  KeyedRng rng(7, 2, ~uint64_t{0});
  for (uint64_t i = n - 1; i > 0; --i) std::swap(expected[i], expected[rng.Below(i + 1)]);
  CHECK(Permutation(n, 7, 2) == expected);
}

TEST_CASE("Sampler: every order of three comes about equally often", "[dataset][sampler]") {
  std::map<std::vector<uint64_t>, int> counts;
  const int kSeeds = 60000;
  for (int seed = 0; seed < kSeeds; ++seed) ++counts[Permutation(3, seed, 0)];
  REQUIRE(counts.size() == 6);
  for (const auto& [order, count] : counts) {
    CHECK(count > 9500);  // expected 10000, sigma about 91
    CHECK(count < 10500);
  }
}

TEST_CASE("Sampler: without shuffle, identity order then sharding", "[dataset][sampler]") {
  CHECK(ShardIndices(5, Options(9, false), 0) == Iota(5));
  CHECK(ShardIndices(5, Options(9, false), 7) == Iota(5));
  // n = 10, W = 3: padded to 12 with positions 10, 11 holding 0, 1.
  CHECK(ShardIndices(10, Options(9, false, 0, 3), 0) == std::vector<uint64_t>{0, 3, 6, 9});
  CHECK(ShardIndices(10, Options(9, false, 1, 3), 0) == std::vector<uint64_t>{1, 4, 7, 0});
  CHECK(ShardIndices(10, Options(9, false, 2, 3), 0) == std::vector<uint64_t>{2, 5, 8, 1});
}

TEST_CASE("Sampler: ranks are disjoint but for the padding, and cover the dataset",
          "[dataset][sampler]") {
  const uint64_t n = GENERATE(1001, 1000, 7, 3);
  const uint32_t world = GENERATE(1, 4, 8);
  INFO("n = " << n << ", world_size = " << world);
  const std::vector<uint64_t> perm = Permutation(n, 5, 11);
  // DistributedSampler: the permutation padded by its own first entries,
  // rank r taking positions r, r + W, ...
  std::vector<uint64_t> padded = perm;
  const uint64_t shard = ShardSize(n, Options(5, true, 0, world));
  CHECK(shard == (n + world - 1) / world);
  while (padded.size() < shard * world) padded.push_back(perm[padded.size() % n]);

  std::multiset<uint64_t> seen;
  for (uint32_t r = 0; r < world; ++r) {
    std::vector<uint64_t> got = ShardIndices(n, Options(5, true, r, world), 11);
    std::vector<uint64_t> expected;
    for (uint64_t p = r; p < padded.size(); p += world) expected.push_back(padded[p]);
    CHECK(got == expected);
    seen.insert(got.begin(), got.end());
  }
  // Every index at least once; the extra ones are the first of the epoch.
  const uint64_t padding = shard * world - n;
  CHECK(padding < world);
  if (padding <= n) {
    std::multiset<uint64_t> expected(perm.begin(), perm.end());
    expected.insert(perm.begin(), perm.begin() + padding);
    CHECK(seen == expected);
  }
  CHECK(std::set<uint64_t>(seen.begin(), seen.end()).size() == n);
}

TEST_CASE("Sampler: more ranks than samples repeat the permutation", "[dataset][sampler]") {
  const std::vector<uint64_t> perm = Permutation(3, 1, 0);
  for (uint32_t r = 0; r < 5; ++r) {
    CHECK(ShardIndices(3, Options(1, true, r, 5), 0) == std::vector<uint64_t>{perm[r % 3]});
  }
}

TEST_CASE("Sampler: shard and batch counts", "[dataset][sampler]") {
  SamplerOptions o;
  o.world_size = 3;
  o.batch_size = 3;
  CHECK(ShardSize(10, o) == 4);
  CHECK(BatchesPerEpoch(10, o) == 2);
  o.drop_last = true;
  CHECK(BatchesPerEpoch(10, o) == 1);
  CHECK(ShardSize(9, o) == 3);
  CHECK(BatchesPerEpoch(9, o) == 1);
  o.batch_size = 5;
  CHECK(BatchesPerEpoch(9, o) == 0);  // a shard smaller than a batch, all dropped
  o.drop_last = false;
  CHECK(BatchesPerEpoch(9, o) == 1);
  CHECK(ShardSize(0, o) == 0);
  CHECK(BatchesPerEpoch(0, o) == 0);

  SamplerOptions odd;  // world_size 0 and batch_size 0 mean 1
  odd.world_size = 0;
  odd.batch_size = 0;
  CHECK(ShardSize(10, odd) == 10);
  CHECK(BatchesPerEpoch(10, odd) == 10);
  CHECK(ShardIndices(4, odd, 0).size() == 4);
}

TEST_CASE("Sampler: a rank beyond the world gets nothing", "[dataset][sampler]") {
  CHECK(ShardIndices(10, Options(1, true, 3, 3), 0).empty());
  CHECK(ShardIndices(10, Options(1, false, 4, 3), 0).empty());
}

TEST_CASE("Sampler: a million entries", "[dataset][sampler][large]") {
  const uint64_t n = 1'281'167;  // ImageNet's train set
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint64_t> shard = ShardIndices(n, Options(3, true, 1, 8), 0);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  WARN("ShardIndices for " << n << " entries, 8 ranks: " << ms << " ms");
  CHECK(shard.size() == (n + 7) / 8);
  CHECK(std::set<uint64_t>(shard.begin(), shard.end()).size() == shard.size());
}

}  // namespace
}  // namespace stoker
