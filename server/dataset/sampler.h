// The order in which a session sees the dataset: a permutation per epoch
// from (seed, epoch), sharded by (rank, world_size) as torch's
// DistributedSampler shards it, then cut into batches as DataLoader does.
//
// Sharding: every rank gets ceil(n / world_size) samples per epoch; when n is
// not a multiple of world_size the permutation is padded by repeating its
// first entries (DistributedSampler with drop_last=False), so a few samples
// are seen twice per epoch across all ranks. Rank r takes positions
// r, r + world_size, r + 2 * world_size, ... of the padded permutation.
// Batching: consecutive shard positions; with drop_last the last, partial
// batch of each epoch is dropped (DataLoader's drop_last).
//
// The permutation (shuffle = true) is rng.h's Shuffle (Fisher-Yates) driven
// by KeyedRng(seed, epoch, ~0) from server/image/ops/rng.h (the third word
// keeps it apart from the per-sample augmentation streams), starting from
// the identity:
//   for i = n-1 down to 1: j = rng.Below(i + 1); swap(perm[i], perm[j])
// so any implementation (a test, a Python reference) can reproduce it.
// world_size 0 is taken as 1, batch_size 0 as 1. Pure functions: thread-safe.

#ifndef STOKER_SERVER_DATASET_SAMPLER_H_
#define STOKER_SERVER_DATASET_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace stoker {

struct SamplerOptions {
  uint64_t seed = 0;
  bool shuffle = true;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t batch_size = 1;
  bool drop_last = false;
};

// Samples per rank per epoch.
uint64_t ShardSize(uint64_t dataset_size, const SamplerOptions& o);
// Batches per rank per epoch.
uint64_t BatchesPerEpoch(uint64_t dataset_size, const SamplerOptions& o);
// The dataset indices of this rank's shard for `epoch`, in delivery order
// (ShardSize entries). Without shuffle: 0, 1, 2, ... before sharding.
// Empty for an empty dataset or a rank >= world_size. O(n) time and memory
// with shuffle (milliseconds for a million entries), O(ShardSize) without.
std::vector<uint64_t> ShardIndices(uint64_t dataset_size, const SamplerOptions& o,
                                   uint32_t epoch);

}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_SAMPLER_H_
