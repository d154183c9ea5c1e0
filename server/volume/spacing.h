// Spacing with MONAI's semantics (monai.transforms.Spacing with its
// defaults: diagonal=False, scale_extent=False, align_corners=False,
// padding_mode="border", float64 computation): resample a volume to voxels
// of `pixdim` millimetres, keeping its rotation.
//
// Geometry (PlanSpacing), as monai.data.utils.zoom_affine and
// compute_shape_offset define it: the new affine is the input's rotation
// (its linear part over the Cholesky factor of its Gram matrix) times
// diag(pixdim); the output shape is the rounded extent of the input's
// corners in the new voxel grid, plus one; its origin is the input corner
// that is smallest in every new axis (else the centres are aligned). When
// the voxel-to-voxel map is the identity within MONAI's AFFINE_TOL (1e-3)
// and the shape is unchanged, nothing is resampled.
//
// Values (Resample): each output voxel n samples the input at voxel
// coordinates inv(A_in) A_out n, clamped to the volume (border padding),
// trilinearly (the image) or at the nearest voxel, ties to even (a label),
// in float64, rounded once to float32.
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_SPACING_H_
#define STOKER_SERVER_VOLUME_SPACING_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "server/volume/volume.h"

namespace stoker::volume {

struct SpacingPlan {
  std::array<int64_t, 3> shape = {1, 1, 1};
  std::array<double, 16> affine{};
  bool unchanged = false;  // MONAI returns the input as it is
};

// INVALID_ARGUMENT for a pixdim that is not > 0 or an affine that is not
// invertible; RESOURCE_EXHAUSTED when the output would pass max_voxels.
absl::StatusOr<SpacingPlan> PlanSpacing(const std::array<double, 16>& affine,
                                        const std::array<int64_t, 3>& shape,
                                        const std::array<double, 3>& pixdim,
                                        uint64_t max_voxels = uint64_t{1} << 30);

enum class Interpolation { kTrilinear, kNearest };

// `v` resampled onto the plan's grid (every channel), its affine the plan's.
absl::Status Resample(const SpacingPlan& plan, Interpolation mode, FloatVolume* v);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_SPACING_H_
