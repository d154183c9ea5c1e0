// torchvision's video classification presets (references/video_classification
// /presets.py) on one decoded clip, the same drawn parameters for every frame:
//
//   VideoClassificationPresetTrain: ConvertImageDtype(float32),
//     Resize(resize_size, antialias=False), RandomHorizontalFlip,
//     Normalize(mean, std), RandomCrop(crop_size), ConvertBCHWtoCBHW
//   VideoClassificationPresetEval: the same with CenterCrop, no flip.
//
// The input is what ClipDecoder writes, uint8 [T, H, W, 3]; the output
// float32 [T, 3, h, w] (TCHW, torchvision's output_format="TCHW") or
// [3, T, h, w] (CTHW: after ConvertBCHWtoCBHW), h x w the crop; or uint8
// in the same layouts with Normalize left to the device.
//
// Arithmetic, against torch 1.13's CPU kernels:
//   - ConvertImageDtype: float32(x) / 255 (exact: one IEEE division);
//   - Resize: upsample_bilinear2d, align_corners=False: scale = float32(in)
//     / float32(out), source coordinate max(0, scale * (i + 0.5) - 0.5) in
//     double, weights w1 = float32(its fraction), w0 = 1 - w1 (torch's
//     weights exactly, for every (in, out) tried); each row's two taps
//     mixed, then the two rows, in float32. torch builds this kernel per CPU
//     capability and its compiler orders and fuses the sums its own way:
//     two values in three or more are equal, the rest one float32 ulp
//     apart (at most 1.2e-7 on [0, 1] values, 8e-7 after Normalize: both
//     asserted by tests/python/test_video_fidelity.py);
//   - Normalize: (x - float32(mean)) / float32(std), as F.normalize's sub_
//     and div_ (exact given the resized value);
//   - the flip and the crops move values, nothing else.
// Only the crop's pixels are computed (the crop commutes with the
// per-pixel steps before it). Pure function: thread-safe.

#ifndef STOKER_SERVER_VIDEO_CLIP_OPS_H_
#define STOKER_SERVER_VIDEO_CLIP_OPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace stoker::video {

enum class ClipLayout { kTCHW = 0, kCTHW = 1 };

struct ClipTransform {
  // Resize's output (0 x 0: the frame's own size).
  uint32_t resize_height = 0;
  uint32_t resize_width = 0;
  // Whether RandomHorizontalFlip flipped (drawn once per clip).
  bool flip = false;
  // The crop in the resized (and flipped) frame: RandomCrop's drawn
  // (top, left), or CenterCrop's; crop 0 x 0: none.
  uint32_t crop_top = 0;
  uint32_t crop_left = 0;
  uint32_t crop_height = 0;
  uint32_t crop_width = 0;
  bool normalize = true;
  float mean[3] = {0.43216f, 0.394666f, 0.37645f};  // the reference's Kinetics values
  float std[3] = {0.22803f, 0.22145f, 0.216989f};
  ClipLayout layout = ClipLayout::kCTHW;
};

// CenterCrop's (top, left) for a crop of crop x crop in size: torchvision's
// int(round((size - crop) / 2.0)), Python's round (half to even).
uint32_t CenterCropOffset(uint32_t size, uint32_t crop);

// The output's element count for a clip of `frames` frames.
size_t ClipOutputElements(uint32_t frames, const ClipTransform& t, uint32_t height,
                          uint32_t width);

// Applies `t` to `clip` (uint8 [frames, height, width, 3]) into `out`
// (ClipOutputElements float32s). INVALID_ARGUMENT when the crop does not
// lie inside the resized frame or a std is 0.
absl::Status ApplyClipTransform(const uint8_t* clip, uint32_t frames, uint32_t height,
                                uint32_t width, const ClipTransform& t, float* out);
// The same to uint8 (ClipOutputElements bytes), for Normalize on the device
// as images do: each resized value v in [0, 1] stored as the nearest of
// v * 255, so that value / 255 is within 0.5 / 255 of the float32 path's
// (plus its one ulp). INVALID_ARGUMENT when t.normalize is set.
absl::Status ApplyClipTransform(const uint8_t* clip, uint32_t frames, uint32_t height,
                                uint32_t width, const ClipTransform& t, uint8_t* out);

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_CLIP_OPS_H_
