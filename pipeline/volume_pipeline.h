// A volume session's pipeline: from an AttachRequest's VolumeSpec (MONAI's
// transforms as data) to what its workers run on every volume
// (volume::VolumeTaskParams) and what the client is told (the effective
// spec: every default filled in). The one place a volume op's defaults and
// checks live; the Python module's stoker.volume classes only name them.
// Pure; thread-safe.
//
// Defaults are MONAI 1.5's: Orientation "RAS"; RandCropByPosNegLabel pos 1,
// neg 1, num_samples 1, image_threshold 0; RandSpatialCrop random_center;
// every random op's prob 0.1; RandFlip every axis; RandRotate90 max_k 3 in
// the plane (0, 1); RandGaussianNoise mean 0, std 0.1; RandAdjustContrast
// gamma (0.5, 4.5); dtype float32, label_dtype uint8, channels 1.

#ifndef STOKER_PIPELINE_VOLUME_PIPELINE_H_
#define STOKER_PIPELINE_VOLUME_PIPELINE_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "server/volume/volume_task.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

struct VolumePlan {
  volume::VolumeTaskParams params;
  v1::VolumeSpec effective;
};

// INVALID_ARGUMENT "volumes: ops[i] Name: ..." naming the fix for: no patch
// op, or more than one; a deterministic op after the patch op, or a random
// one before it; more than 8 deterministic or 12 random ops; an op with no
// parameters set (an empty oneof); values out of MONAI's ranges (a pixdim,
// spatial_size or roi_size that is not 1 or 3 positive numbers; pos and neg
// both 0 or negative; num_samples over 64; an axis outside 0..2; a prob
// outside [0, 1]; axcodes that are not one of each of R/L, A/P, S/I); a
// RandRotate90 plane whose two patch sides differ (the patch's shape would
// change); a dtype, label_dtype or channel count stoker does not serve.
absl::StatusOr<VolumePlan> PlanVolumePipeline(const v1::VolumeSpec& spec);

// The spec from its JSON form (the proto's JSON mapping: {"ops":
// [{"Spacing": {"pixdim": [1.5, 1.5, 2]}}, ...], "dtype": ...}), as the
// clients send it. INVALID_ARGUMENT with the parser's words.
absl::StatusOr<v1::VolumeSpec> VolumeSpecFromJson(std::string_view json);
std::string VolumeSpecToJson(const v1::VolumeSpec& spec);

// One line for people (stokerctl): the transforms by name, then each
// sample's patches, e.g. "Orientation, Spacing, ScaleIntensityRange,
// CropForeground, RandCropByPosNegLabel, RandFlip -> 4 x [1, 96, 96, 96]
// float32, labels uint8".
std::string DescribeVolumes(const v1::VolumeSpec& spec);

}  // namespace stoker

#endif  // STOKER_PIPELINE_VOLUME_PIPELINE_H_
