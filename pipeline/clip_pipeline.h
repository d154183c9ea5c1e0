// A video session's pipeline: from an AttachRequest's PipelineSpec and
// ClipSpec to what its workers run on every clip (video::ClipParams), what
// the client is told (the effective spec), and how clips are cut and chosen.
// The op table (op_table.h's on_clips) decides which ops a clip may have;
// the output's defaults and checks are pipeline::Effective's, as for
// images. Pure; thread-safe.

#ifndef STOKER_PIPELINE_CLIP_PIPELINE_H_
#define STOKER_PIPELINE_CLIP_PIPELINE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/video/clip_params.h"
#include "server/video/clips.h"
#include "server/video/video_probe.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

// The video file names a video folder's walk lists when the request gives
// none: torchvision's Kinetics' ("avi", "mp4"), and WebM and Matroska.
inline constexpr const char* kVideoExtensions[] = {"avi", "mp4", "webm", "mkv", "mov"};

struct ClipPlan {
  video::ClipParams params;
  v1::PipelineSpec effective;  // the ops with their defaults, the output
  video::ClipOptions options;
  video::ClipSampling sampling = video::ClipSampling::kAll;
  uint32_t clips_per_video = 0;
};

// INVALID_ARGUMENT "clips: ..." or "pipeline: ..." naming the fix for:
// frames_per_clip 0 or over video::kMaxClipFrames; clips_per_video 0 with
// the RANDOM or UNIFORM sampler; a layout other than "TCHW"/"CTHW"; an op
// the op table does not allow on clips (naming those it allows); ops out of
// the order Resize, RandomHorizontalFlip, then one crop; a Resize that is
// not to [h, w], or with max_size, antialias or an interpolation other than
// bilinear; a RandomCrop with padding; a dtype other than float32/uint8; an
// output of no fixed size (no crop, no Resize to [h, w], no `size`);
// Effective's own refusals. `limits` are the daemon's decoding bounds.
absl::StatusOr<ClipPlan> PlanClipPipeline(const v1::PipelineSpec& spec, const v1::ClipSpec& clips,
                                          const video::VideoLimits& limits);

}  // namespace stoker

#endif  // STOKER_PIPELINE_CLIP_PIPELINE_H_
