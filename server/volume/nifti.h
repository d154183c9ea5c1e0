// NIfTI-1 and NIfTI-2 volumes (.nii, and .nii.gz found by its gzip magic,
// never by its name) read as nibabel reads them: the header's dims,
// datatype, pixdim, scaling and best affine (sform when its code is set,
// else qform, else the Analyze base affine from the dims and pixdim), the
// voxels from vox_offset on.
//
// Call sequence: ReadNifti(fd, offset, length, name, limits) -> Volume
// (volume.h), then ToFloat32 for the values. ParseNiftiHeader alone reads
// the header from bytes in memory (the index and the fuzz target use it).
//
// Bounded: a header whose voxels pass the limits is refused before any
// allocation; a gzip stream is inflated only up to the bytes the header
// needs (a stream that inflates to more is never inflated past that: a
// bomb costs what its header claims, which the limits bound), and one that
// ends early is DATA_LOSS. Reads go through pread on the caller's fd within
// [offset, offset + length): a member of a tar shard reads as a file.
//
// Errors, each naming the file and the field:
//  - DATA_LOSS: not a NIfTI (no 348 or 540 sizeof_hdr in either byte
//    order, no n+1/n+2 magic), dims that are zero, negative or past the
//    file, pixdim[1..3] that are not finite and > 0 for the dims present,
//    a quaternion that is not a unit one, a non-finite affine, a valid
//    slope with a non-finite intercept, a truncated or corrupt gzip stream;
//  - UNIMPLEMENTED: datatypes stoker does not read (binary, complex,
//    RGB24, RGBA32, float128), a NIfTI pair's header (.hdr/.img: "ni1");
//  - RESOURCE_EXHAUSTED: over limits.max_voxels or limits.max_bytes.
//
// Thread-safe: no shared state.

#ifndef STOKER_SERVER_VOLUME_NIFTI_H_
#define STOKER_SERVER_VOLUME_NIFTI_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/volume/volume.h"

namespace stoker::volume {

struct VolumeLimits {
  uint64_t max_voxels = uint64_t{1} << 30;  // a 1024^3 volume
  uint64_t max_bytes = uint64_t{4} << 30;   // of voxels, as stored
};

// The header fields a reader uses, widened to NIfTI-2's types.
struct NiftiHeader {
  int version = 1;        // 1 or 2
  bool swapped = false;   // the file's byte order is not this machine's
  size_t header_bytes = 348;
  int ndim = 0;                   // dim[0], 1..7
  std::array<int64_t, 8> dim{};   // dim[1..ndim] >= 1
  int16_t datatype = 0;           // NIfTI's code (2 uint8, 4 int16, ...)
  std::array<double, 8> pixdim{};
  int64_t vox_offset = 0;         // where the voxels start (>= header_bytes + 4)
  double scl_slope = 0, scl_inter = 0;
  int qform_code = 0, sform_code = 0;
  std::array<double, 3> quatern{};  // b, c, d
  std::array<double, 3> qoffset{};
  std::array<double, 12> srow{};    // srow_x, srow_y, srow_z
};

// Reads and checks a header from the first `n` bytes of a file (at least
// 348, or 540 for NIfTI-2): the errors above that the header alone shows.
absl::StatusOr<NiftiHeader> ParseNiftiHeader(const uint8_t* bytes, size_t n,
                                             const std::string& name);

// The voxel type of a NIfTI datatype code, or UNIMPLEMENTED naming it.
absl::StatusOr<VoxelType> NiftiVoxelType(int16_t datatype, const std::string& name);

// nibabel's get_best_affine of a checked header (row-major 4x4); DATA_LOSS
// when it is not finite or the quaternion is not a unit one.
absl::StatusOr<std::array<double, 16>> NiftiAffine(const NiftiHeader& h, const std::string& name);

// The whole volume in bytes [offset, offset + length) of `fd` (length 0:
// to the end of the file).
absl::StatusOr<Volume> ReadNifti(int fd, uint64_t offset, uint64_t length,
                                 const std::string& name, const VolumeLimits& limits);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_NIFTI_H_
