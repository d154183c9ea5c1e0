#include "server/volume/volume.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/volume/nifti.h"

namespace stoker::volume {
namespace {

template <typename T>
void Convert(const uint8_t* bytes, int64_t n, bool scaled, double slope, double inter,
             float* out) {
  for (int64_t i = 0; i < n; ++i) {
    T x;
    std::memcpy(&x, bytes + i * sizeof(T), sizeof(T));
    if (!scaled) {
      out[i] = static_cast<float>(x);
      continue;
    }
    // nibabel's apply_read_scaling in float64: the multiply and the add
    // each rounded (no fused multiply-add: -ffp-contract=off), each skipped
    // when it is the identity as nibabel skips it.
    double v = static_cast<double>(x);
    if (slope != 1.0) v = v * slope;
    if (inter != 0.0) v = v + inter;
    out[i] = static_cast<float>(v);
  }
}

}  // namespace

size_t VoxelBytes(VoxelType t) {
  switch (t) {
    case VoxelType::kUint8:
    case VoxelType::kInt8:
      return 1;
    case VoxelType::kUint16:
    case VoxelType::kInt16:
      return 2;
    case VoxelType::kUint32:
    case VoxelType::kInt32:
    case VoxelType::kFloat32:
      return 4;
    case VoxelType::kUint64:
    case VoxelType::kInt64:
    case VoxelType::kFloat64:
      return 8;
  }
  return 1;
}

const char* VoxelTypeName(VoxelType t) {
  switch (t) {
    case VoxelType::kUint8: return "uint8";
    case VoxelType::kInt8: return "int8";
    case VoxelType::kUint16: return "uint16";
    case VoxelType::kInt16: return "int16";
    case VoxelType::kUint32: return "uint32";
    case VoxelType::kInt32: return "int32";
    case VoxelType::kUint64: return "uint64";
    case VoxelType::kInt64: return "int64";
    case VoxelType::kFloat32: return "float32";
    case VoxelType::kFloat64: return "float64";
  }
  return "?";
}

absl::Status AppendChannels(Volume* out, Volume&& next, const VolumeLimits& limits,
                            const std::string& name, const std::string& a, const std::string& b) {
  if (next.shape != out->shape || next.type != out->type) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": arrays '", a, "' and '", b,
        "' differ in shape or dtype: they cannot be stacked as channels (name the arrays to "
        "read: LoadImaged(npz_keys=...))"));
  }
  if (out->voxels.size() + next.voxels.size() > limits.max_bytes ||
      static_cast<uint64_t>(out->Voxels() + next.Voxels()) > limits.max_voxels) {
    return absl::ResourceExhaustedError(name + ": the stacked arrays are over the limits");
  }
  out->voxels.insert(out->voxels.end(), next.voxels.begin(), next.voxels.end());
  out->channels += next.channels;
  return absl::OkStatus();
}

absl::Status ToFloat32(const Volume& v, float* out) {
  const int64_t n = v.Voxels();
  if (n < 0 || v.voxels.size() < static_cast<uint64_t>(n) * VoxelBytes(v.type)) {
    return absl::InternalError("a volume holds fewer voxels than its shape");
  }
  const uint8_t* b = v.voxels.data();
  const bool s = v.scaled;
  switch (v.type) {
    case VoxelType::kUint8: Convert<uint8_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kInt8: Convert<int8_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kUint16: Convert<uint16_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kInt16: Convert<int16_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kUint32: Convert<uint32_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kInt32: Convert<int32_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kUint64: Convert<uint64_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kInt64: Convert<int64_t>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kFloat32: Convert<float>(b, n, s, v.slope, v.inter, out); break;
    case VoxelType::kFloat64: Convert<double>(b, n, s, v.slope, v.inter, out); break;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RangeLength(int fd, uint64_t offset, uint64_t length,
                                     const std::string& name) {
  if (length != 0) return length;
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return absl::InternalError(absl::StrCat(name, ": lseek: ", std::strerror(errno)));
  return static_cast<uint64_t>(end) > offset ? static_cast<uint64_t>(end) - offset : 0;
}

absl::StatusOr<FloatVolume> ToFloatVolume(const Volume& v) {
  FloatVolume f;
  f.shape = v.shape;
  f.channels = v.channels;
  f.affine = v.affine;
  f.values.resize(static_cast<size_t>(v.Voxels()));
  absl::Status st = ToFloat32(v, f.values.data());
  if (!st.ok()) return st;
  return f;
}

}  // namespace stoker::volume
