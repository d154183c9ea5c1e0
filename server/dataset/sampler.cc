#include "server/dataset/sampler.h"

#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "server/image/ops/rng.h"

namespace stoker {
namespace {

constexpr uint64_t kShuffleStream = ~uint64_t{0};  // never a dataset index

uint64_t WorldSize(const SamplerOptions& o) { return o.world_size == 0 ? 1 : o.world_size; }

// The epoch's permutation of 0..n-1 in T (uint32_t halves the memory traffic
// of the random swaps whenever n allows it).
template <typename T>
std::vector<T> Permutation(uint64_t n, uint64_t seed, uint32_t epoch) {
  std::vector<T> perm(n);
  std::iota(perm.begin(), perm.end(), T{0});
  // The third key word keeps this stream apart from every sample's
  // augmentation stream, keyed (seed, epoch, dataset index).
  KeyedRng rng(seed, epoch, kShuffleStream);
  Shuffle(perm.data(), n, rng);
  return perm;
}

// Positions rank, rank + W, ... of the padded order (DistributedSampler:
// position p holds order[p % n], the padding repeating the first entries).
template <typename Order>
std::vector<uint64_t> TakeShard(uint64_t n, uint64_t shard_size, uint64_t rank, uint64_t world,
                                const Order& order) {
  std::vector<uint64_t> shard(shard_size);
  uint64_t position = rank;
  for (uint64_t k = 0; k < shard_size; ++k, position += world) {
    shard[k] = order(position < n ? position : position % n);
  }
  return shard;
}

}  // namespace

uint64_t ShardSize(uint64_t dataset_size, const SamplerOptions& o) {
  const uint64_t world = WorldSize(o);
  return dataset_size / world + (dataset_size % world != 0 ? 1 : 0);
}

uint64_t BatchesPerEpoch(uint64_t dataset_size, const SamplerOptions& o) {
  const uint64_t shard = ShardSize(dataset_size, o);
  const uint64_t batch = o.batch_size == 0 ? 1 : o.batch_size;
  return o.drop_last ? shard / batch : shard / batch + (shard % batch != 0 ? 1 : 0);
}

std::vector<uint64_t> ShardIndices(uint64_t dataset_size, const SamplerOptions& o, uint32_t epoch) {
  const uint64_t world = WorldSize(o);
  if (dataset_size == 0 || o.rank >= world) return {};
  const uint64_t shard_size = ShardSize(dataset_size, o);
  if (!o.shuffle) {
    return TakeShard(dataset_size, shard_size, o.rank, world, [](uint64_t p) { return p; });
  }
  if (dataset_size <= std::numeric_limits<uint32_t>::max()) {
    std::vector<uint32_t> perm = Permutation<uint32_t>(dataset_size, o.seed, epoch);
    return TakeShard(dataset_size, shard_size, o.rank, world,
                     [&](uint64_t p) { return uint64_t{perm[p]}; });
  }
  std::vector<uint64_t> perm = Permutation<uint64_t>(dataset_size, o.seed, epoch);
  return TakeShard(dataset_size, shard_size, o.rank, world, [&](uint64_t p) { return perm[p]; });
}

}  // namespace stoker
