// CropForeground with MONAI's semantics (monai.transforms.CropForeground and
// generate_spatial_bounding_box): the box of the voxels > 0 of the source
// volume (any of its channels, or those named), widened by `margin` each
// side, clamped to the volume when allow_smaller (else padded with zeros
// past its edges), then grown to a multiple of k_divisible about its
// centre; every volume of a sample (the image and its label) is cropped to
// the same box, and its affine moved to the box's first voxel.
//
// Where MONAI would return an empty volume (no voxel > 0), ForegroundBox
// fails FAILED_PRECONDITION naming it: a sample failure, not an empty
// patch.
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_CROP_FOREGROUND_H_
#define STOKER_SERVER_VOLUME_CROP_FOREGROUND_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/volume/volume.h"

namespace stoker::volume {

struct CropForegroundParams {
  std::array<int64_t, 3> margin = {0, 0, 0};
  bool allow_smaller = false;  // MONAI's default since 1.5
  std::array<int64_t, 3> k_divisible = {1, 1, 1};
  std::vector<int64_t> channel_indices;  // empty: all channels
};

// [start, end) per axis; start may be < 0 and end past the shape (padding).
struct Box {
  std::array<int64_t, 3> start = {0, 0, 0}, end = {0, 0, 0};
};

absl::StatusOr<Box> ForegroundBox(const FloatVolume& source, const CropForegroundParams& p,
                                  const std::string& name);

// Crops (and zero-pads) `v` to `box`: its values and affine.
void CropToBox(const Box& box, FloatVolume* v);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_CROP_FOREGROUND_H_
