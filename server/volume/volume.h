// A 3-D volume as a reader gives it (server/volume/nifti.h; NumPy and HDF5
// readers to come): its voxels in the file's element type, converted to this
// machine's byte order but otherwise as stored, its shape, its affine and
// the scaling its values carry.
//
// Voxel order is the file's, NIfTI's (Fortran order: i fastest): voxel
// (i, j, k) of channel c is element ((c * nk + k) * nj + j) * ni + i. That
// is nibabel's array (shape (ni, nj, nk[, c])) read with order="F", and
// numpy's `arr.ravel(order="F")`. Channels are the dims past the third (a
// 4-D file's volumes: BraTS' four modalities, an fMRI run's time points).
//
// Values: voxel * slope + inter in float64 when `scaled`, else the voxel
// itself; ToFloat32 rounds that to float32 once. That is what MONAI's
// LoadImage makes of a NIfTI (nibabel's `np.asanyarray(img.dataobj)`,
// cast to float32), not nibabel's `get_fdata(dtype=np.float32)`, which
// scales in float32 and so may differ in the last bit (both tested).
//
// A Volume is a value: not shared, no locking.

#ifndef STOKER_SERVER_VOLUME_VOLUME_H_
#define STOKER_SERVER_VOLUME_VOLUME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::volume {

enum class VoxelType : uint8_t {
  kUint8,
  kInt8,
  kUint16,
  kInt16,
  kUint32,
  kInt32,
  kUint64,
  kInt64,
  kFloat32,
  kFloat64,
};

// Bytes of one voxel of `t`, and its numpy name ("int16", ...).
size_t VoxelBytes(VoxelType t);
const char* VoxelTypeName(VoxelType t);

struct Volume {
  VoxelType type = VoxelType::kUint8;
  std::array<int64_t, 3> shape = {1, 1, 1};  // (ni, nj, nk), each >= 1
  int64_t channels = 1;                     // the product of the dims past the third
  // Voxel (i, j, k) to world millimetres, row-major 4x4 (the last row 0 0 0 1).
  std::array<double, 16> affine = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  // The header's voxel sizes along i, j, k (NIfTI's pixdim[1..3]).
  std::array<double, 3> spacing = {1, 1, 1};
  bool scaled = false;  // values are voxel * slope + inter
  double slope = 1, inter = 0;
  std::vector<uint8_t> voxels;  // Voxels() * VoxelBytes(type) bytes, native byte order

  int64_t Voxels() const { return shape[0] * shape[1] * shape[2] * channels; }
};

// Appends `next`'s channels to `out`'s (arrays of one file stacked, as
// MONAI stacks them: npz.h, hdf5_volume.h). INVALID_ARGUMENT naming `name`,
// `a` and `b` when their spatial shapes or types differ; RESOURCE_EXHAUSTED
// past `limits` (nifti.h).
struct VolumeLimits;
absl::Status AppendChannels(Volume* out, Volume&& next, const VolumeLimits& limits,
                            const std::string& name, const std::string& a, const std::string& b);

// Writes the volume's Voxels() values, as the header above defines them, to
// `out` in voxel order. Fails (INTERNAL) only when `voxels` holds fewer
// bytes than the shape needs.
absl::Status ToFloat32(const Volume& v, float* out);

// A volume's values as float32, in the same voxel order, with its geometry:
// what the deterministic prefix's ops take and give (intensity.h,
// crop_foreground.h, orientation.h). A label volume is one too (its class
// numbers are exact in float32).
struct FloatVolume {
  std::array<int64_t, 3> shape = {1, 1, 1};
  int64_t channels = 1;
  std::array<double, 16> affine = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<float> values;  // Voxels() of them

  int64_t Voxels() const { return shape[0] * shape[1] * shape[2] * channels; }
  int64_t ChannelVoxels() const { return shape[0] * shape[1] * shape[2]; }
  // Element of voxel (i, j, k) of channel c.
  size_t At(int64_t c, int64_t i, int64_t j, int64_t k) const {
    return static_cast<size_t>(((c * shape[2] + k) * shape[1] + j) * shape[0] + i);
  }
};

// The volume's values (ToFloat32) with its shape, channels and affine.
absl::StatusOr<FloatVolume> ToFloatVolume(const Volume& v);

// The readers' byte range [offset, offset + length) of `fd`: `length`, or
// with length 0 the rest of the file from `offset` (0 past its end).
// INTERNAL naming `name` when the file's end cannot be found.
absl::StatusOr<uint64_t> RangeLength(int fd, uint64_t offset, uint64_t length,
                                     const std::string& name);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_VOLUME_H_
