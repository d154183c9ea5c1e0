// Clips as torchvision's VideoClips defines them, and the clip samplers of
// its video classification reference (RandomClipSampler,
// UniformClipSampler).
//
// A clip is `frames_per_clip` frames of one video. With frame_rate unset the
// clips of a video of n frames start at frames 0, step, 2 * step, ... and
// take consecutive frames; there are (n - frames_per_clip) / step + 1 of them
// (none when n < frames_per_clip). With frame_rate set, the video is first
// resampled from its fps (VideoClips._resample_video_idx):
//   - fps / frame_rate an integer s: every s-th frame (0, s, 2s, ...:
//     ceil(n / s) frames);
//   - else floor(n * frame_rate / fps) frames, frame i of them the source
//     frame floor(float32(i) * float32(fps / frame_rate)) -- torch's float32
//     arithmetic, reproduced; a frame rate above fps repeats frames.
// and clips are cut from the resampled frames as above. A video whose fps is
// unknown (0) is taken as 1 fps, as torchvision does.
// Frame indices are positions in the video's sorted pts (VideoIndex::pts):
// clip c of a video is the pts at ClipFrame(c, 0..frames_per_clip).
//
// Pure functions and immutable values: thread-safe.

#ifndef STOKER_SERVER_VIDEO_CLIPS_H_
#define STOKER_SERVER_VIDEO_CLIPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace stoker::video {

struct ClipOptions {
  uint32_t frames_per_clip = 16;     // VideoClips' clip_length_in_frames
  uint32_t step_between_clips = 1;   // frames_between_clips
  uint32_t frame_rate = 0;           // 0: the video's own (frame_rate=None)
};

// INVALID_ARGUMENT for frames_per_clip or step_between_clips 0, naming the
// parameter.
absl::Status ValidateClipOptions(const ClipOptions& o);

// One video's clips under ClipOptions.
class VideoClipPlan {
 public:
  // `frames`: the video's frame count (its pts); `fps`: its average rate
  // (0: unknown).
  VideoClipPlan(uint64_t frames, double fps, const ClipOptions& o);

  uint64_t clips() const { return clips_; }
  // Source frame index of frame j (< frames_per_clip) of clip c (< clips()).
  uint64_t ClipFrame(uint64_t c, uint32_t j) const {
    return SourceFrame(c * step_between_clips_ + j);
  }
  // Source frame of resampled frame i.
  uint64_t SourceFrame(uint64_t i) const;

 private:
  uint64_t clips_ = 0;
  uint32_t step_between_clips_ = 1;
  uint64_t stride_ = 1;       // integer resampling: every stride-th frame
  bool fractional_ = false;   // else floor(float32(i) * step_)
  float step_ = 1;
};

// The clips of a dataset of videos, numbered as VideoClips numbers them:
// video 0's clips first, then video 1's, ... (get_clip_location).
class ClipIndex {
 public:
  ClipIndex(const std::vector<uint64_t>& frames_per_video, const std::vector<double>& fps,
            const ClipOptions& o);
  uint64_t size() const { return cumulative_.empty() ? 0 : cumulative_.back(); }
  size_t videos() const { return plans_.size(); }
  uint64_t clips_of(size_t video) const { return plans_[video].clips(); }
  // The first clip number of `video`.
  uint64_t first_clip(size_t video) const { return video == 0 ? 0 : cumulative_[video - 1]; }
  // (video, clip within it) of clip number `clip` < size().
  void Locate(uint64_t clip, size_t* video, uint64_t* clip_in_video) const;
  const VideoClipPlan& plan(size_t video) const { return plans_[video]; }

 private:
  std::vector<VideoClipPlan> plans_;
  std::vector<uint64_t> cumulative_;  // VideoClips.cumulative_sizes
};

// Which clips an epoch visits, and in what order.
enum class ClipSampling {
  // Every clip, in clip-number order (the dataset order a plain sampler
  // sees: stoker's own shuffle then applies).
  kAll = 0,
  // RandomClipSampler(max_clips_per_video): from each video
  // min(clips, clips_per_video) distinct clips chosen at random, then all
  // chosen clips in a random order; drawn anew each epoch from (seed,
  // epoch). torch's own random stream is not reproduced: the draw is
  // stoker's (KeyedRng), the same for a seed whatever the worker count.
  kRandom = 1,
  // UniformClipSampler(num_clips_per_video): from each video with clips,
  // clips_per_video clips equally spaced, torchvision's exact numbers
  // (floor of torch.linspace(s, s + clips - 1, clips_per_video) in
  // float32, repeating clips when a video has fewer); same every epoch.
  kUniform = 2,
};

// The clip numbers epoch `epoch` visits, in order, before rank sharding.
// clips_per_video is ignored for kAll (and must be > 0 for the others).
std::vector<uint64_t> SampleClips(const ClipIndex& index, ClipSampling sampling,
                                  uint32_t clips_per_video, uint64_t seed, uint32_t epoch);

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_CLIPS_H_
