// The checks that pipeline_params.cc (ValidateParams), steps.cc (DrawSteps,
// CheckSteps) and pipeline.cc (the run) share: the ranges of op parameters
// and the kinds of steps. Internal to server/image/.

#ifndef STOKER_SERVER_IMAGE_PARAM_CHECKS_H_
#define STOKER_SERVER_IMAGE_PARAM_CHECKS_H_

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/image/pipeline_params.h"
#include "server/image/steps.h"

namespace stoker::image::internal {

// GaussianBlur's kernel sides: reflect padding needs kernel / 2 < the
// image's side, so no kernel larger than this can ever apply.
inline constexpr uint32_t kMaxKernel = 2 * kMaxOpSide + 1;

inline bool ValidKernel(uint32_t k) { return k >= 1 && k <= kMaxKernel && k % 2 == 1; }

inline bool Finite(float v) { return std::isfinite(v); }
inline bool Finite(double v) { return std::isfinite(v); }

inline bool ValidInterpolation(Interpolation i) {
  return i == Interpolation::kAntialias || i == Interpolation::kBilinear ||
         i == Interpolation::kBicubic;
}

// The affine ops' resampling (PIL's Image.transform / rotate: NEAREST,
// BILINEAR).
inline bool ValidAffineInterpolation(Interpolation i) {
  return i == Interpolation::kNearest || i == Interpolation::kBilinear;
}

inline bool ValidPadMode(PadMode m) {
  return m == PadMode::kConstant || m == PadMode::kEdge || m == PadMode::kReflect ||
         m == PadMode::kSymmetric;
}

inline bool InSide(uint32_t v) { return v >= 1 && v <= kMaxOpSide; }

inline bool IsFlip(StepKind k) {
  return k == StepKind::kHorizontalFlip || k == StepKind::kVerticalFlip;
}

// Steps that change each pixel by its own value only (and the image's
// statistics: contrast's mean, autocontrast's and equalize's histograms):
// they commute with flips and orientations, bit for bit. Not sharpness:
// its 3x3 sums run in float32 in Pillow's order, which a flip reverses.
inline bool IsPerPixel(StepKind k) {
  switch (k) {
    case StepKind::kColorJitter:
    case StepKind::kGrayscale:
    case StepKind::kPosterize:
    case StepKind::kSolarize:
    case StepKind::kAutocontrast:
    case StepKind::kEqualize:
    case StepKind::kInvert:
    case StepKind::kChannelPermute:
      return true;
    default:
      return false;
  }
}

inline absl::Status OpError(uint32_t i, OpKind kind, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ops[", i, "] ", OpKindName(kind), ": ", what));
}

// ColorJitter's brightness, contrast, saturation (>= 0) and hue ([-0.5, 0.5])
// bounds.
inline bool JitterInRange(uint32_t j, float v) {
  if (!Finite(v)) return false;
  return j == kHue ? v >= -kMaxHueShift && v <= kMaxHueShift : v >= 0.0f;
}

}  // namespace stoker::image::internal

#endif  // STOKER_SERVER_IMAGE_PARAM_CHECKS_H_
