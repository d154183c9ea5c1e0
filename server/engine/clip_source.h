// A video session's samples: clips of the dataset's videos, numbered as
// torchvision's VideoClips numbers them, chosen per epoch by the session's
// clip sampler, and what a worker's task carries of one (its frames' pts
// and where decoding may start).
//
// A session's sample index is a clip number; its dataset entry is the video
// (VideoOf); its label the video's. Sharding and batching are the image
// sampler's (server/dataset/sampler.h) over each epoch's clip list:
//   kAll      the list is every clip, 0..n-1, and the sampler's shuffle
//             (seed, epoch) permutes it: DataLoader's RandomSampler over
//             VideoClips;
//   kRandom   RandomClipSampler's list, drawn from (seed, epoch), already
//             shuffled; kUniform UniformClipSampler's, in video order.
// Rank r takes positions r, r + world_size, ... of the list (padded as
// DistributedSampler pads), exactly once per epoch whatever the workers.
// Immutable after construction: thread-safe.

#ifndef STOKER_SERVER_ENGINE_CLIP_SOURCE_H_
#define STOKER_SERVER_ENGINE_CLIP_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/clip_pipeline.h"
#include "server/dataset/dataset.h"
#include "server/dataset/sampler.h"
#include "server/dataset/video_table.h"
#include "server/video/clips.h"
#include "server/worker/worker_protocol.h"

namespace stoker {

class ClipSource {
 public:
  ClipSource(std::shared_ptr<const VideoTable> videos, const ClipPlan& plan);

  // Clips in the dataset (VideoClips.num_clips()).
  uint64_t clips() const { return index_.size(); }
  // Samples each epoch visits before sharding: every clip (kAll), or the
  // sampler's count (the same every epoch).
  uint64_t epoch_size() const { return epoch_size_; }
  // Videos that have at least one clip.
  uint64_t videos_with_clips() const { return videos_with_clips_; }
  // This rank's clip numbers of `epoch`, in delivery order.
  std::vector<uint64_t> Shard(const SamplerOptions& o, uint32_t epoch) const;
  // The video (dataset entry) of clip `clip`.
  uint64_t VideoOf(uint64_t clip) const;
  // Fills `task` for clip `clip` (ClipParams, the frames' pts, keyframes).
  void FillTask(uint64_t clip, worker::ClipTask* task) const;
  // "path (clip 3 of 12)" for messages.
  std::string Display(const Dataset& dataset, uint64_t clip) const;
  const video::ClipIndex& index() const { return index_; }
  const VideoTable& videos() const { return *videos_; }

 private:
  std::shared_ptr<const VideoTable> videos_;
  ClipPlan plan_;
  video::ClipIndex index_;
  uint64_t epoch_size_ = 0;
  uint64_t videos_with_clips_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_CLIP_SOURCE_H_
