// Orientation with MONAI's semantics (monai.transforms.Orientation, which
// uses nibabel's orientation functions): the voxel axes are flipped and
// permuted, never resampled, so that they run along the world axes the
// target codes name ("RAS": i towards Right, j Anterior, k Superior; any
// permutation of one of L/R, P/A, I/S each), and the affine follows
// (nibabel's inv_ornt_aff).
//
// Which world axis each voxel axis runs along is nibabel's io_orientation:
// the closest rotation to the affine's normalized linear part (its polar
// factor), then for each voxel axis in turn the world axis of largest
// magnitude not yet taken.
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_ORIENTATION_H_
#define STOKER_SERVER_VOLUME_ORIENTATION_H_

#include <array>
#include <string>

#include "absl/status/statusor.h"
#include "server/volume/volume.h"

namespace stoker::volume {

// Per voxel axis: the world axis (0 x, 1 y, 2 z) it runs along and whether
// it runs the opposite way (-1) or the same (1).
struct AxisOrientation {
  int axis = 0;
  int flip = 1;
};
using Orientation3 = std::array<AxisOrientation, 3>;

// nibabel's io_orientation of a 4x4 row-major affine; FAILED_PRECONDITION
// when a voxel axis maps to no world axis (a degenerate affine).
absl::StatusOr<Orientation3> IoOrientation(const std::array<double, 16>& affine);

// The axis codes ("RAS", "LPS", "PLI", ...) of an orientation, and back
// (INVALID_ARGUMENT naming a code that is not three of R/L, A/P, S/I, one of
// each pair).
std::string AxisCodes(const Orientation3& o);
absl::StatusOr<Orientation3> FromAxisCodes(const std::string& codes);

// Reorients `v` to `codes`.
absl::Status Reorient(const std::string& codes, FloatVolume* v);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_ORIENTATION_H_
