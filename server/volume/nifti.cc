#include "server/volume/nifti.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/posix.h"

namespace stoker::volume {
namespace {

constexpr size_t kNifti1Bytes = 348;
constexpr size_t kNifti2Bytes = 540;

template <typename T>
T Load(const uint8_t* p, bool swapped) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swapped) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::DataLossError(absl::StrCat(name, ": ", what));
}

// The file's bytes from its start, plain or inflated from gzip, read in
// order: Read() gives exactly the bytes asked for or fails.
class ByteStream {
 public:
  ByteStream(int fd, uint64_t offset, uint64_t length, std::string name)
      : fd_(fd), offset_(offset), length_(length), name_(std::move(name)) {}
  ~ByteStream() {
    if (inflating_) inflateEnd(&z_);
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  absl::Status Open() {
    uint8_t magic[2] = {0, 0};
    size_t got = 0;
    absl::Status st = ReadRaw(0, magic, 2, &got);
    if (!st.ok()) return st;
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      std::memset(&z_, 0, sizeof(z_));
      if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) {
        return absl::ResourceExhaustedError(name_ + ": starting gzip's inflate");
      }
      inflating_ = true;
      in_.resize(256 << 10);
    }
    return absl::OkStatus();
  }

  bool gzip() const { return gzip_; }

  // The next n bytes into out; DATA_LOSS naming `what` when the file (or
  // its gzip stream) ends first.
  absl::Status Read(uint8_t* out, size_t n, const char* what) {
    if (!gzip_) {
      size_t got = 0;
      absl::Status st = ReadRaw(pos_, out, n, &got);
      if (!st.ok()) return st;
      pos_ += got;
      if (got < n) return Short(what, n, got);
      return absl::OkStatus();
    }
    size_t done = 0;
    while (done < n) {
      if (z_.avail_in == 0 && !file_done_) {
        size_t got = 0;
        absl::Status st = ReadRaw(pos_, in_.data(), in_.size(), &got);
        if (!st.ok()) return st;
        pos_ += got;
        if (got == 0) file_done_ = true;
        z_.next_in = in_.data();
        z_.avail_in = static_cast<uInt>(got);
      }
      if (stream_ended_) {
        // Another gzip member may follow (gzip's concatenation); anything
        // else after the stream is not data.
        if (z_.avail_in == 0 && file_done_) return Short(what, n, done);
        if (z_.avail_in == 0) continue;
        if (z_.next_in[0] != 0x1f) return Short(what, n, done);
        if (inflateReset(&z_) != Z_OK) return Bad(name_, "gzip: resetting for the next member");
        stream_ended_ = false;
      }
      const size_t want = std::min<size_t>(n - done, std::numeric_limits<uInt>::max());
      z_.next_out = out + done;
      z_.avail_out = static_cast<uInt>(want);
      const int r = inflate(&z_, Z_NO_FLUSH);
      done += want - z_.avail_out;
      if (r == Z_STREAM_END) {
        stream_ended_ = true;
      } else if (r == Z_BUF_ERROR) {
        if (z_.avail_in == 0 && file_done_) return Short(what, n, done);
      } else if (r != Z_OK) {
        return Bad(name_, absl::StrCat("gzip: ", z_.msg != nullptr ? z_.msg : "corrupt stream",
                                       " (", what, ")"));
      }
    }
    return absl::OkStatus();
  }

  // Skips n bytes (the header's extensions up to vox_offset).
  absl::Status Skip(uint64_t n) {
    if (!gzip_) {
      pos_ += n;
      return absl::OkStatus();
    }
    uint8_t scratch[4096];
    while (n != 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof(scratch)));
      absl::Status st = Read(scratch, k, "the header's extensions");
      if (!st.ok()) return st;
      n -= k;
    }
    return absl::OkStatus();
  }

  // The plain file's bytes from `pos` on (for its size check).
  uint64_t PlainRemaining() const {
    const uint64_t end = length_;
    return pos_ < end ? end - pos_ : 0;
  }

  absl::Status ResolveLength() {
    absl::StatusOr<uint64_t> length = RangeLength(fd_, offset_, length_, name_);
    if (!length.ok()) return length.status();
    length_ = *length;
    return absl::OkStatus();
  }

 private:
  absl::Status Short(const char* what, size_t n, size_t got) {
    return Bad(name_, absl::StrCat("the file ends within ", what, " (", got, " of ", n,
                                   " bytes", gzip_ ? " inflated" : "", ")"));
  }

  absl::Status ReadRaw(uint64_t at, uint8_t* out, size_t n, size_t* got) {
    *got = 0;
    if (at >= length_) return absl::OkStatus();
    n = static_cast<size_t>(std::min<uint64_t>(n, length_ - at));
    absl::StatusOr<size_t> r = ReadFullyAt(fd_, offset_ + at, out, n, name_);
    if (!r.ok()) return r.status();
    *got = *r;
    return absl::OkStatus();
  }

  int fd_;
  uint64_t offset_, length_;
  std::string name_;
  uint64_t pos_ = 0;  // in the file
  bool gzip_ = false, inflating_ = false, stream_ended_ = false, file_done_ = false;
  z_stream z_;
  std::vector<uint8_t> in_;
};

void SwapInPlace(uint8_t* p, size_t count, size_t width) {
  if (width == 1) return;
  for (size_t i = 0; i < count; ++i) std::reverse(p + i * width, p + (i + 1) * width);
}

}  // namespace

absl::StatusOr<VoxelType> NiftiVoxelType(int16_t datatype, const std::string& name) {
  switch (datatype) {
    case 2: return VoxelType::kUint8;
    case 4: return VoxelType::kInt16;
    case 8: return VoxelType::kInt32;
    case 16: return VoxelType::kFloat32;
    case 64: return VoxelType::kFloat64;
    case 256: return VoxelType::kInt8;
    case 512: return VoxelType::kUint16;
    case 768: return VoxelType::kUint32;
    case 1024: return VoxelType::kInt64;
    case 1280: return VoxelType::kUint64;
    default: break;
  }
  const char* what = datatype == 1      ? "binary (1 bit)"
                     : datatype == 32   ? "complex64"
                     : datatype == 128  ? "RGB24"
                     : datatype == 1536 ? "float128"
                     : datatype == 1792 ? "complex128"
                     : datatype == 2048 ? "complex256"
                     : datatype == 2304 ? "RGBA32"
                                        : "unknown";
  return absl::UnimplementedError(absl::StrCat(
      name, ": NIfTI datatype ", datatype, " (", what,
      ") is not read: stoker reads uint8, int8, (u)int16, (u)int32, (u)int64, float32 and "
      "float64 volumes"));
}

absl::StatusOr<NiftiHeader> ParseNiftiHeader(const uint8_t* b, size_t n, const std::string& name) {
  if (n < kNifti1Bytes) return Bad(name, "shorter than a NIfTI header (348 bytes), and not a .npy");
  NiftiHeader h;
  const int32_t size = Load<int32_t>(b, false);
  const int32_t swapped_size = Load<int32_t>(b, true);
  if (size == static_cast<int32_t>(kNifti1Bytes) || swapped_size == static_cast<int32_t>(kNifti1Bytes)) {
    h.version = 1;
    h.swapped = size != static_cast<int32_t>(kNifti1Bytes);
  } else if (size == static_cast<int32_t>(kNifti2Bytes) ||
             swapped_size == static_cast<int32_t>(kNifti2Bytes)) {
    h.version = 2;
    h.swapped = size != static_cast<int32_t>(kNifti2Bytes);
  } else {
    return Bad(name, "neither a NIfTI file (sizeof_hdr is neither 348 nor 540) nor a .npy");
  }
  const bool s = h.swapped;
  if (h.version == 1) {
    h.header_bytes = kNifti1Bytes;
    const char* magic = reinterpret_cast<const char*>(b + 344);
    if (std::memcmp(magic, "ni1\0", 4) == 0) {
      return absl::UnimplementedError(
          name + ": a NIfTI pair's header (.hdr, its voxels in a separate .img) is not read: "
                 "convert the pair to one .nii (nibabel.save(nibabel.load(hdr), 'x.nii'))");
    }
    if (std::memcmp(magic, "n+1\0", 4) != 0) return Bad(name, "no NIfTI-1 magic (n+1)");
    h.ndim = Load<int16_t>(b + 40, s);
    for (int i = 0; i < 8; ++i) h.dim[i] = Load<int16_t>(b + 40 + 2 * i, s);
    h.datatype = Load<int16_t>(b + 70, s);
    for (int i = 0; i < 8; ++i) h.pixdim[i] = Load<float>(b + 76 + 4 * i, s);
    const float vox = Load<float>(b + 108, s);
    if (!std::isfinite(vox) || vox < 0 || vox > 1e12f) return Bad(name, "vox_offset is not a size");
    h.vox_offset = static_cast<int64_t>(vox);
    h.scl_slope = Load<float>(b + 112, s);
    h.scl_inter = Load<float>(b + 116, s);
    h.qform_code = Load<int16_t>(b + 252, s);
    h.sform_code = Load<int16_t>(b + 254, s);
    for (int i = 0; i < 3; ++i) h.quatern[i] = Load<float>(b + 256 + 4 * i, s);
    for (int i = 0; i < 3; ++i) h.qoffset[i] = Load<float>(b + 268 + 4 * i, s);
    for (int i = 0; i < 12; ++i) h.srow[i] = Load<float>(b + 280 + 4 * i, s);
  } else {
    if (n < kNifti2Bytes) return Bad(name, "shorter than a NIfTI-2 header (540 bytes)");
    h.header_bytes = kNifti2Bytes;
    if (std::memcmp(b + 4, "n+2\0\r\n\032\n", 8) != 0) {
      if (std::memcmp(b + 4, "ni2\0", 4) == 0) {
        return absl::UnimplementedError(
            name + ": a NIfTI-2 pair's header (.hdr/.img) is not read: convert it to one .nii");
      }
      return Bad(name, "no NIfTI-2 magic (n+2)");
    }
    h.datatype = Load<int16_t>(b + 12, s);
    for (int i = 0; i < 8; ++i) h.dim[i] = Load<int64_t>(b + 16 + 8 * i, s);
    h.ndim = static_cast<int>(std::clamp<int64_t>(h.dim[0], -1, 8));
    for (int i = 0; i < 8; ++i) h.pixdim[i] = Load<double>(b + 104 + 8 * i, s);
    h.vox_offset = Load<int64_t>(b + 168, s);
    if (h.vox_offset < 0) return Bad(name, "vox_offset is negative");
    h.scl_slope = Load<double>(b + 176, s);
    h.scl_inter = Load<double>(b + 184, s);
    h.qform_code = Load<int32_t>(b + 344, s);
    h.sform_code = Load<int32_t>(b + 348, s);
    for (int i = 0; i < 3; ++i) h.quatern[i] = Load<double>(b + 352 + 8 * i, s);
    for (int i = 0; i < 3; ++i) h.qoffset[i] = Load<double>(b + 376 + 8 * i, s);
    for (int i = 0; i < 12; ++i) h.srow[i] = Load<double>(b + 400 + 8 * i, s);
  }
  if (h.ndim < 1 || h.ndim > 7) {
    return Bad(name, absl::StrCat("dim[0] is ", h.ndim, ": a NIfTI image has 1 to 7 dims"));
  }
  for (int i = 1; i <= h.ndim; ++i) {
    if (h.dim[i] < 1) {
      return Bad(name, absl::StrCat("dim[", i, "] is ", h.dim[i], ": every dim must be >= 1"));
    }
  }
  for (int i = 1; i <= std::min(h.ndim, 3); ++i) {
    if (!std::isfinite(h.pixdim[i]) || h.pixdim[i] <= 0) {
      return Bad(name, absl::StrCat("pixdim[", i, "] is ", h.pixdim[i],
                                    ": a voxel's size must be finite and > 0"));
    }
  }
  // A vox_offset inside the header (0 in some writers) means right after
  // it and its 4-byte extension flag, as nibabel reads such files.
  const int64_t min_offset = static_cast<int64_t>(h.header_bytes) + 4;
  if (h.vox_offset < min_offset) h.vox_offset = min_offset;
  absl::StatusOr<VoxelType> type = NiftiVoxelType(h.datatype, name);
  if (!type.ok()) return type.status();
  return h;
}

absl::StatusOr<std::array<double, 16>> NiftiAffine(const NiftiHeader& h, const std::string& name) {
  std::array<double, 16> a = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const char* which;
  if (h.sform_code != 0) {
    which = "sform";
    for (int i = 0; i < 12; ++i) a[i] = h.srow[i];
  } else if (h.qform_code != 0) {
    which = "qform";
    const double b = h.quatern[0], c = h.quatern[1], d = h.quatern[2];
    double w2 = 1.0 - (b * b + c * c + d * d);
    // nibabel's threshold for float32-stored quaternions: 3 float32 eps.
    if (w2 < 0) {
      if (w2 < -3.0 * std::numeric_limits<float>::epsilon()) {
        return Bad(name, absl::StrCat("the qform quaternion (", b, ", ", c, ", ", d,
                                      ") is not a unit one"));
      }
      w2 = 0;
    }
    const double w = std::sqrt(w2);
    const double nq = w * w + b * b + c * c + d * d;
    double r[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    if (nq >= std::numeric_limits<double>::epsilon()) {
      const double k = 2.0 / nq;
      const double X = b * k, Y = c * k, Z = d * k;
      const double wX = w * X, wY = w * Y, wZ = w * Z;
      const double xX = b * X, xY = b * Y, xZ = b * Z;
      const double yY = c * Y, yZ = c * Z, zZ = d * Z;
      const double m[9] = {1.0 - (yY + zZ), xY - wZ,         xZ + wY,
                           xY + wZ,         1.0 - (xX + zZ), yZ - wX,
                           xZ - wY,         yZ + wX,         1.0 - (xX + yY)};
      std::copy(m, m + 9, r);
    }
    // qfac: pixdim[0], which nibabel reads as 1 unless it is exactly -1.
    const double qfac = h.pixdim[0] == -1.0 ? -1.0 : 1.0;
    const double vox[3] = {h.pixdim[1], h.pixdim[2], h.pixdim[3] * qfac};
    for (int row = 0; row < 3; ++row) {
      for (int col = 0; col < 3; ++col) a[row * 4 + col] = r[row * 3 + col] * vox[col];
      a[row * 4 + 3] = h.qoffset[row];
    }
  } else {
    // Analyze's base affine: the centre of the volume at the origin, x
    // flipped.
    which = "base affine";
    for (int i = 0; i < 3; ++i) {
      const bool present = i < h.ndim;
      const double shape = present ? static_cast<double>(h.dim[i + 1]) : 1.0;
      double zoom = present ? h.pixdim[i + 1] : 1.0;
      if (i == 0) zoom = -zoom;
      a[i * 4 + i] = zoom;
      a[i * 4 + 3] = -((shape - 1) / 2.0) * zoom;
    }
  }
  for (double v : a) {
    if (!std::isfinite(v)) return Bad(name, absl::StrCat("the ", which, " is not finite"));
  }
  return a;
}

absl::StatusOr<Volume> ReadNifti(int fd, uint64_t offset, uint64_t length,
                                 const std::string& name, const VolumeLimits& limits) {
  ByteStream in(fd, offset, length, name);
  absl::Status st = in.ResolveLength();
  if (st.ok()) st = in.Open();
  if (!st.ok()) return st;
  uint8_t header[kNifti2Bytes];
  st = in.Read(header, kNifti1Bytes, "the header");
  if (!st.ok()) return st;
  const int32_t size = Load<int32_t>(header, false);
  const bool two = size == static_cast<int32_t>(kNifti2Bytes) ||
                   Load<int32_t>(header, true) == static_cast<int32_t>(kNifti2Bytes);
  if (two) {
    st = in.Read(header + kNifti1Bytes, kNifti2Bytes - kNifti1Bytes, "the header");
    if (!st.ok()) return st;
  }
  absl::StatusOr<NiftiHeader> h = ParseNiftiHeader(header, two ? kNifti2Bytes : kNifti1Bytes, name);
  if (!h.ok()) return h.status();
  absl::StatusOr<std::array<double, 16>> affine = NiftiAffine(*h, name);
  if (!affine.ok()) return affine.status();
  Volume v;
  v.type = *NiftiVoxelType(h->datatype, name);
  v.affine = *affine;
  uint64_t voxels = 1;
  for (int i = 1; i <= h->ndim; ++i) {
    const uint64_t d = static_cast<uint64_t>(h->dim[i]);
    if (voxels > limits.max_voxels / d) {
      voxels = limits.max_voxels + 1;
      break;
    }
    voxels *= d;
  }
  const uint64_t bytes = voxels * VoxelBytes(v.type);
  if (voxels > limits.max_voxels || bytes > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ": the header's dims (", h->dim[1], h->ndim > 1 ? " x ..." : "",
        ") are over the daemon's volume limits (", limits.max_voxels, " voxels, ",
        limits.max_bytes, " bytes)"));
  }
  for (int i = 0; i < 3; ++i) {
    v.shape[i] = i < h->ndim ? h->dim[i + 1] : 1;
    v.spacing[i] = i < h->ndim ? h->pixdim[i + 1] : 1.0;
  }
  v.channels = 1;
  for (int i = 4; i <= h->ndim; ++i) v.channels *= h->dim[i];
  // nibabel's get_slope_inter: no scaling for a zero or non-finite slope.
  if (h->scl_slope != 0 && std::isfinite(h->scl_slope)) {
    if (!std::isfinite(h->scl_inter)) {
      return Bad(name, absl::StrCat("scl_slope ", h->scl_slope, " with scl_inter ", h->scl_inter,
                                    ": a valid slope needs a finite intercept"));
    }
    v.scaled = !(h->scl_slope == 1.0 && h->scl_inter == 0.0);
    v.slope = h->scl_slope;
    v.inter = h->scl_inter;
  }
  const uint64_t skip = static_cast<uint64_t>(h->vox_offset) - (two ? kNifti2Bytes : kNifti1Bytes);
  if (!in.gzip()) {
    // A plain file's size is known: check it before allocating.
    if (in.PlainRemaining() < skip || in.PlainRemaining() - skip < bytes) {
      return Bad(name, absl::StrCat("the header's dims need ", bytes, " bytes of voxels from byte ",
                                    h->vox_offset, " and the file has ",
                                    in.PlainRemaining() + (two ? kNifti2Bytes : kNifti1Bytes),
                                    " bytes in all"));
    }
  }
  st = in.Skip(skip);
  if (!st.ok()) return st;
  v.voxels.resize(bytes);
  st = in.Read(v.voxels.data(), bytes, "the voxels");
  if (!st.ok()) return st;
  if (h->swapped) SwapInPlace(v.voxels.data(), voxels, VoxelBytes(v.type));
  return v;
}

}  // namespace stoker::volume
