// NumPy .npy arrays as volumes (nnU-Net's preprocessed data, and any array
// saved with np.save): format versions 1.0, 2.0 and 3.0, little- or
// big-endian, C or Fortran order, bool, (u)int8..(u)int64, float32 and
// float64.
//
// Axes: a 2-D array (a slice) is (ni, nj) with nk = 1; a 3-D array is
// (ni, nj, nk), axis 0 being i as numpy and MONAI index it; a 4-D array is
// channel-first, (c, ni, nj, nk), as nnU-Net stores its modalities. The
// voxels are reordered into volume.h's order (i fastest) whatever the
// file's. A .npy holds no geometry: the affine is the identity and the
// spacing 1, unless the caller passes the spacing the dataset gives
// (then the affine is diag(spacing)).
//
// Errors, each naming the file:
//  - DATA_LOSS: no NUMPY magic, a header that is not the dict numpy writes,
//    a shape with a zero or negative dim, voxels past the end of the file;
//  - UNIMPLEMENTED: float16, complex, object, structured or string dtypes,
//    more than 4 dims;
//  - RESOURCE_EXHAUSTED: over the limits (nifti.h's VolumeLimits).
//
// Thread-safe: no shared state.

#ifndef STOKER_SERVER_VOLUME_NPY_H_
#define STOKER_SERVER_VOLUME_NPY_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/volume/nifti.h"
#include "server/volume/volume.h"

namespace stoker::volume {

// What a .npy header says.
struct NpyHeader {
  VoxelType type = VoxelType::kUint8;
  bool is_bool = false;         // '|b1': read as uint8 0/1
  bool big_endian = false;
  bool fortran_order = false;
  std::vector<int64_t> shape;   // as numpy gives it
  uint64_t data_offset = 0;     // where the array starts
};

// Parses the header from the file's first `n` bytes.
absl::StatusOr<NpyHeader> ParseNpyHeader(const uint8_t* bytes, size_t n, const std::string& name);

// The whole array in bytes [offset, offset + length) of `fd` (length 0: to
// the end of the file). `spacing`, when not all zero, becomes the volume's
// spacing and diagonal affine.
absl::StatusOr<Volume> ReadNpy(int fd, uint64_t offset, uint64_t length, const std::string& name,
                               const VolumeLimits& limits,
                               const std::array<double, 3>& spacing = {0, 0, 0});

// The same from `length` bytes in memory (an .npz member inflated, npz.h).
absl::StatusOr<Volume> ReadNpyBytes(const uint8_t* data, size_t length, const std::string& name,
                                    const VolumeLimits& limits,
                                    const std::array<double, 3>& spacing = {0, 0, 0});

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_NPY_H_
