// What a video session's workers run on every clip: the clip pipeline as
// plain-old-data (it crosses the daemon -> worker socket verbatim in each
// task, as image::PipelineParams does), and each clip's draw from it.
//
// The daemon makes ClipParams from the request (pipeline/clip_pipeline.h,
// where the op table decides which ops a clip may have); the worker draws a
// clip's ClipTransform (clip_ops.h) from them with DrawClipTransform, keyed
// by (seed, epoch, clip number) alone: the same clip gets the same flip and
// crop whatever worker decodes it, and whatever the number of workers.
//
// Pure functions: thread-safe.

#ifndef STOKER_SERVER_VIDEO_CLIP_PARAMS_H_
#define STOKER_SERVER_VIDEO_CLIP_PARAMS_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/statusor.h"
#include "server/video/clip_ops.h"

namespace stoker::video {

// The most frames one clip may have (a task carries every frame's pts).
inline constexpr uint32_t kMaxClipFrames = 256;

enum class ClipCrop : uint32_t { kNone = 0, kCenter = 1, kRandom = 2 };

struct ClipParams {
  uint32_t frames = 0;  // frames_per_clip
  // Resize((resize_height, resize_width)); 0 x 0: none.
  uint32_t resize_height = 0;
  uint32_t resize_width = 0;
  // RandomHorizontalFlip(p): 0 for none.
  float flip_p = 0;
  ClipCrop crop = ClipCrop::kNone;
  uint32_t crop_height = 0;
  uint32_t crop_width = 0;
  // The output's frame size (every clip's): the crop, else the resize, else
  // the size the request gave (frames of another size fail as samples).
  uint32_t out_height = 0;
  uint32_t out_width = 0;
  uint32_t normalize = 1;  // float32 output: (x / 255 - mean) / std; 0: uint8
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
  ClipLayout layout = ClipLayout::kTCHW;
  // Decoding's bounds (VideoLimits').
  uint64_t max_decode_pixels = 0;
  uint32_t max_frames_per_clip = 0;
  uint32_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<ClipParams>);

// Bytes of one clip's output: frames x 3 x out_height x out_width values.
uint64_t ClipOutputBytes(const ClipParams& p);

// Clip `clip`'s transform for a decoded frame of `height` x `width`, drawn
// from KeyedRng(seed, epoch, clip): the flip (when flip_p > 0), then
// RandomCrop's (top, left), in the reference preset's order.
// INVALID_ARGUMENT, naming the sizes, when the crop is larger than the
// (resized) frame, or the frame (without resize and crop) is not
// out_height x out_width.
absl::StatusOr<ClipTransform> DrawClipTransform(const ClipParams& p, uint32_t height,
                                                uint32_t width, uint64_t seed, uint32_t epoch,
                                                uint64_t clip);

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_CLIP_PARAMS_H_
