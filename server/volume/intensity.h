// The deterministic prefix's intensity ops, with MONAI's documented
// semantics (monai.transforms.ScaleIntensityRange, NormalizeIntensity), on a
// FloatVolume in place.
//
// ScaleIntensityRange is torch's float32 arithmetic step by step (each
// scalar rounded to float32 as torch rounds a Python number against a
// float32 tensor; no fused multiply-add): equal to MONAI's output bit for
// bit. NormalizeIntensity takes its mean and (population) std in float64
// where MONAI reduces in float32: within a few float32 ulps of a float64
// reference of the formula (tests/python/test_volume_ops.py states the
// bound).
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_INTENSITY_H_
#define STOKER_SERVER_VOLUME_INTENSITY_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "server/volume/volume.h"

namespace stoker::volume {

struct ScaleIntensityRangeParams {
  double a_min = 0, a_max = 1;
  std::optional<double> b_min, b_max;  // both or the scaling to b is skipped
  bool clip = false;                   // to b_min / b_max (an absent one: that side unclipped)
};

// (x - a_min) / (a_max - a_min), then * (b_max - b_min) + b_min, then the
// clip; a_min == a_max: x - a_min (+ b_min), as MONAI does (it warns).
void ScaleIntensityRange(const ScaleIntensityRangeParams& p, FloatVolume* v);

struct NormalizeIntensityParams {
  std::vector<double> subtrahend, divisor;  // empty: the mean, the std
  bool nonzero = false;       // statistics over, and normalizing of, voxels != 0 only
  bool channel_wise = false;  // per channel (subtrahend/divisor one per channel)
};

// (x - mean) / std over the volume or each channel; a zero std divides by
// 1; nonzero with no nonzero voxel leaves the values as they are.
// INVALID_ARGUMENT when channel_wise subtrahend/divisor do not have one
// value per channel (MONAI's ValueError), or when not channel_wise they have
// more than one.
absl::Status NormalizeIntensity(const NormalizeIntensityParams& p, FloatVolume* v);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_INTENSITY_H_
