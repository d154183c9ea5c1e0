#include "server/video/clips.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "server/image/ops/policy.h"
#include "server/image/ops/rng.h"

namespace stoker::video {
namespace {

// KeyedRng's third word: dataset indices stay below 2^63, so these streams
// never meet a sample's augmentation stream (seed, epoch, index).
constexpr uint64_t kPickStream = uint64_t{1} << 63;  // + the video
constexpr uint64_t kOrderStream = ~uint64_t{0};      // the epoch's order

uint64_t ClipsOf(uint64_t frames, uint32_t length, uint32_t step) {
  if (length == 0 || step == 0 || frames < length) return 0;
  return (frames - length) / step + 1;
}

}  // namespace

absl::Status ValidateClipOptions(const ClipOptions& o) {
  if (o.frames_per_clip == 0) {
    return absl::InvalidArgumentError("frames_per_clip must be at least 1");
  }
  if (o.step_between_clips == 0) {
    return absl::InvalidArgumentError("step_between_clips must be at least 1");
  }
  return absl::OkStatus();
}

VideoClipPlan::VideoClipPlan(uint64_t frames, double fps, const ClipOptions& o)
    : step_between_clips_(o.step_between_clips == 0 ? 1 : o.step_between_clips) {
  const double source_fps = fps > 0 ? fps : 1.0;
  const double target_fps = o.frame_rate != 0 ? static_cast<double>(o.frame_rate) : source_fps;
  const double step = source_fps / target_fps;
  uint64_t resampled;
  if (step == std::floor(step)) {
    stride_ = static_cast<uint64_t>(step);
    resampled = frames / stride_ + (frames % stride_ != 0 ? 1 : 0);
  } else {
    fractional_ = true;
    step_ = static_cast<float>(step);
    resampled = static_cast<uint64_t>(
        std::floor(static_cast<double>(frames) * (target_fps / source_fps)));
    // float32 rounding could name a frame past the end (torch would raise
    // IndexError for that video): such frames are left out.
    while (resampled > 0 && SourceFrame(resampled - 1) >= frames) --resampled;
  }
  clips_ = ClipsOf(resampled, o.frames_per_clip, step_between_clips_);
}

uint64_t VideoClipPlan::SourceFrame(uint64_t i) const {
  if (!fractional_) return i * stride_;
  return static_cast<uint64_t>(std::floor(static_cast<float>(i) * step_));
}

ClipIndex::ClipIndex(const std::vector<uint64_t>& frames_per_video, const std::vector<double>& fps,
                     const ClipOptions& o) {
  plans_.reserve(frames_per_video.size());
  cumulative_.reserve(frames_per_video.size());
  uint64_t total = 0;
  for (size_t v = 0; v < frames_per_video.size(); ++v) {
    plans_.emplace_back(frames_per_video[v], v < fps.size() ? fps[v] : 0.0, o);
    total += plans_.back().clips();
    cumulative_.push_back(total);
  }
}

void ClipIndex::Locate(uint64_t clip, size_t* video, uint64_t* clip_in_video) const {
  // bisect_right(cumulative_sizes, clip)
  const size_t v = static_cast<size_t>(
      std::upper_bound(cumulative_.begin(), cumulative_.end(), clip) - cumulative_.begin());
  *video = v;
  *clip_in_video = clip - first_clip(v);
}

std::vector<uint64_t> SampleClips(const ClipIndex& index, ClipSampling sampling,
                                  uint32_t clips_per_video, uint64_t seed, uint32_t epoch) {
  std::vector<uint64_t> order;
  switch (sampling) {
    case ClipSampling::kAll: {
      order.resize(index.size());
      for (uint64_t i = 0; i < order.size(); ++i) order[i] = i;
      return order;
    }
    case ClipSampling::kUniform: {
      if (clips_per_video == 0) return order;
      for (size_t v = 0; v < index.videos(); ++v) {
        const uint64_t n = index.clips_of(v);
        if (n == 0) continue;  // torchvision: "corner case where video decoding fails"
        const uint64_t s = index.first_clip(v);
        const float start = static_cast<float>(s);
        const float end = static_cast<float>(s + n - 1);
        for (uint32_t i = 0; i < clips_per_video; ++i) {
          order.push_back(static_cast<uint64_t>(
              std::floor(image::TorchLinspace(start, end, clips_per_video, i))));
        }
      }
      return order;
    }
    case ClipSampling::kRandom: {
      if (clips_per_video == 0) return order;
      for (size_t v = 0; v < index.videos(); ++v) {
        const uint64_t n = index.clips_of(v);
        const uint64_t s = index.first_clip(v);
        if (n <= clips_per_video) {
          for (uint64_t c = 0; c < n; ++c) order.push_back(s + c);
          continue;
        }
        // Floyd's sampling: clips_per_video distinct clips of n, in
        // O(clips_per_video) draws whatever n.
        KeyedRng rng(seed, epoch, kPickStream + v);
        std::unordered_set<uint64_t> chosen;
        chosen.reserve(clips_per_video * 2);
        for (uint64_t j = n - clips_per_video; j < n; ++j) {
          const uint64_t t = rng.Below(j + 1);
          const uint64_t pick = chosen.insert(t).second ? t : (chosen.insert(j), j);
          order.push_back(s + pick);
        }
      }
      KeyedRng rng(seed, epoch, kOrderStream);
      Shuffle(order.data(), order.size(), rng);
      return order;
    }
  }
  return order;
}

}  // namespace stoker::video
