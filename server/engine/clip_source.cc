#include "server/engine/clip_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/video/clip_request.h"

namespace stoker {
namespace {

video::ClipIndex MakeIndex(const VideoTable& t, const video::ClipOptions& o) {
  std::vector<uint64_t> frames(t.videos());
  std::vector<double> fps(t.videos());
  for (uint64_t v = 0; v < t.videos(); ++v) {
    frames[v] = t.frames(v);
    fps[v] = t.info(v).fps;
  }
  return video::ClipIndex(frames, fps, o);
}

}  // namespace

ClipSource::ClipSource(std::shared_ptr<const VideoTable> videos, const ClipPlan& plan)
    : videos_(std::move(videos)), plan_(plan), index_(MakeIndex(*videos_, plan.options)) {
  for (size_t v = 0; v < index_.videos(); ++v) {
    const uint64_t c = index_.clips_of(v);
    if (c == 0) continue;
    ++videos_with_clips_;
    switch (plan_.sampling) {
      case video::ClipSampling::kAll: epoch_size_ += c; break;
      case video::ClipSampling::kRandom: epoch_size_ += std::min<uint64_t>(c, plan_.clips_per_video); break;
      case video::ClipSampling::kUniform: epoch_size_ += plan_.clips_per_video; break;
    }
  }
}

std::vector<uint64_t> ClipSource::Shard(const SamplerOptions& o, uint32_t epoch) const {
  if (plan_.sampling == video::ClipSampling::kAll) return ShardIndices(index_.size(), o, epoch);
  const std::vector<uint64_t> list =
      video::SampleClips(index_, plan_.sampling, plan_.clips_per_video, o.seed, epoch);
  std::vector<uint64_t> shard = ShardIndices(list.size(), o, epoch);
  for (uint64_t& i : shard) i = list[i];
  return shard;
}

uint64_t ClipSource::VideoOf(uint64_t clip) const {
  size_t v = 0;
  uint64_t c = 0;
  index_.Locate(clip, &v, &c);
  return v;
}

void ClipSource::FillTask(uint64_t clip, worker::ClipTask* task) const {
  size_t v = 0;
  uint64_t c = 0;
  index_.Locate(clip, &v, &c);
  const video::VideoClipPlan& plan = index_.plan(v);
  const int64_t* pts = videos_->pts(v);
  task->params = plan_.params;
  const uint32_t n = plan_.params.frames;
  for (uint32_t j = 0; j < n; ++j) task->pts[j] = pts[plan.ClipFrame(c, j)];
  const video::ClipRequest r =
      video::MakeClipRequest(pts, videos_->frames(v), videos_->keyframes(v),
                             videos_->keyframe_count(v), task->pts, n);
  task->first_frame = r.first_frame;
  task->last_frame = r.last_frame;
  task->has_keyframe = r.has_keyframe ? 1 : 0;
  task->keyframe_pts = r.keyframe_pts;
  task->keyframe_frame = r.keyframe_frame;
  task->has_earlier_keyframe = r.has_earlier_keyframe ? 1 : 0;
  task->earlier_keyframe_pts = r.earlier_keyframe_pts;
}

std::string ClipSource::Display(const Dataset& dataset, uint64_t clip) const {
  size_t v = 0;
  uint64_t c = 0;
  index_.Locate(clip, &v, &c);
  return absl::StrCat(dataset.display(v), " (clip ", c, " of ", index_.clips_of(v), ")");
}

}  // namespace stoker
