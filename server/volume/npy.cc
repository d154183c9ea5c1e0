#include "server/volume/npy.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/posix.h"

namespace stoker::volume {
namespace {

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::DataLossError(absl::StrCat(name, ": ", what));
}

// numpy's header: a Python dict literal of 'descr', 'fortran_order' and
// 'shape', written by numpy.lib.format; read token by token.
class DictReader {
 public:
  DictReader(const char* p, size_t n) : p_(p), end_(p + n) {}

  void Space() {
    while (p_ < end_ && std::isspace(static_cast<unsigned char>(*p_))) ++p_;
  }
  bool Eat(char c) {
    Space();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    Space();
    return p_ < end_ && *p_ == c;
  }
  bool String(std::string* out) {
    Space();
    if (p_ >= end_ || (*p_ != '\'' && *p_ != '"')) return false;
    const char quote = *p_++;
    out->clear();
    while (p_ < end_ && *p_ != quote) out->push_back(*p_++);
    if (p_ >= end_) return false;
    ++p_;
    return true;
  }
  bool Word(std::string* out) {
    Space();
    out->clear();
    while (p_ < end_ && std::isalpha(static_cast<unsigned char>(*p_))) out->push_back(*p_++);
    return !out->empty();
  }
  bool Int(int64_t* out) {
    Space();
    const char* start = p_;
    int64_t v = 0;
    bool negative = false;
    if (p_ < end_ && *p_ == '-') {
      negative = true;
      ++p_;
    }
    while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) {
      if (v > (int64_t{1} << 50)) return false;  // no array has such a dim
      v = v * 10 + (*p_++ - '0');
    }
    if (p_ == start || (negative && p_ == start + 1)) return false;
    if (p_ < end_ && *p_ == 'L') ++p_;  // Python 2's long
    *out = negative ? -v : v;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

absl::Status ParseDescr(const std::string& d, NpyHeader* h, const std::string& name) {
  if (d.size() < 2) return Bad(name, absl::StrCat("dtype '", d, "' is not numpy's"));
  const char order = d[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return Bad(name, absl::StrCat("dtype '", d, "' has no byte order"));
  }
  h->big_endian = order == '>';
  const std::string t = d.substr(1);
  if (t == "b1") {
    h->is_bool = true;
    h->type = VoxelType::kUint8;
  } else if (t == "u1") {
    h->type = VoxelType::kUint8;
  } else if (t == "i1") {
    h->type = VoxelType::kInt8;
  } else if (t == "u2") {
    h->type = VoxelType::kUint16;
  } else if (t == "i2") {
    h->type = VoxelType::kInt16;
  } else if (t == "u4") {
    h->type = VoxelType::kUint32;
  } else if (t == "i4") {
    h->type = VoxelType::kInt32;
  } else if (t == "u8") {
    h->type = VoxelType::kUint64;
  } else if (t == "i8") {
    h->type = VoxelType::kInt64;
  } else if (t == "f4") {
    h->type = VoxelType::kFloat32;
  } else if (t == "f8") {
    h->type = VoxelType::kFloat64;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        name, ": dtype '", d,
        "' is not read: stoker reads bool, (u)int8..(u)int64, float32 and float64 arrays "
        "(save float16 as float32: arr.astype(np.float32))"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(const uint8_t* b, size_t n, const std::string& name) {
  if (n < 10 || std::memcmp(b, "\x93NUMPY", 6) != 0) return Bad(name, "no NUMPY magic: not a .npy");
  const int major = b[6];
  size_t start, len;
  if (major == 1) {
    start = 10;
    len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8;
  } else if (major == 2 || major == 3) {
    if (n < 12) return Bad(name, "the .npy header is cut short");
    start = 12;
    len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8 |
          static_cast<size_t>(b[10]) << 16 | static_cast<size_t>(b[11]) << 24;
  } else {
    return Bad(name, absl::StrCat(".npy format version ", major, " is not one numpy writes"));
  }
  if (len > n - start) return Bad(name, "the .npy header is cut short");
  NpyHeader h;
  h.data_offset = start + len;
  DictReader r(reinterpret_cast<const char*>(b + start), len);
  if (!r.Eat('{')) return Bad(name, "the .npy header is not a dict");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!r.Eat('}')) {
    std::string key;
    if (!r.String(&key) || !r.Eat(':')) return Bad(name, "the .npy header is not a dict");
    if (key == "descr") {
      std::string d;
      if (!r.String(&d)) {
        return absl::UnimplementedError(
            name + ": a structured dtype is not read: save one plain array per file");
      }
      absl::Status st = ParseDescr(d, &h, name);
      if (!st.ok()) return st;
      have_descr = true;
    } else if (key == "fortran_order") {
      std::string w;
      if (!r.Word(&w) || (w != "True" && w != "False")) {
        return Bad(name, "fortran_order is neither True nor False");
      }
      h.fortran_order = w == "True";
      have_order = true;
    } else if (key == "shape") {
      if (!r.Eat('(')) return Bad(name, "shape is not a tuple");
      while (!r.Eat(')')) {
        int64_t d;
        if (!r.Int(&d)) return Bad(name, "shape is not a tuple of ints");
        h.shape.push_back(d);
        if (h.shape.size() > 32) return Bad(name, "shape has too many dims");
        if (!r.Eat(',') && !r.Peek(')')) return Bad(name, "shape is not a tuple of ints");
      }
      have_shape = true;
    } else {
      return Bad(name, absl::StrCat("the .npy header has an unknown key '", key, "'"));
    }
    if (!r.Eat(',') && !r.Peek('}')) return Bad(name, "the .npy header is not a dict");
  }
  if (!have_descr || !have_order || !have_shape) {
    return Bad(name, "the .npy header lacks descr, fortran_order or shape");
  }
  if (h.shape.empty()) return Bad(name, "a scalar (shape ()), not an array");
  if (h.shape.size() > 4) {
    return absl::UnimplementedError(absl::StrCat(
        name, ": an array of ", h.shape.size(),
        " dims: stoker reads 2-D slices, 3-D volumes and 4-D channel-first volumes"));
  }
  for (int64_t d : h.shape) {
    if (d < 1) return Bad(name, absl::StrCat("shape has a dim of ", d, ": every dim must be >= 1"));
  }
  return h;
}

namespace {

// The array from `length` bytes that pread_all(at, out, n) reads (a file's
// range, or memory).
template <typename Read>
absl::StatusOr<Volume> ReadNpyFrom(Read&& pread_all, uint64_t length, const std::string& name,
                                   const VolumeLimits& limits,
                                   const std::array<double, 3>& spacing) {
  // numpy pads its header to 64 bytes (at most 65535 + 10 in version 1;
  // a header past 1 MiB is not numpy's).
  std::vector<uint8_t> head(std::min<uint64_t>(length, 1 << 20));
  absl::StatusOr<size_t> got = pread_all(0, head.data(), head.size());
  if (!got.ok()) return got.status();
  absl::StatusOr<NpyHeader> h = ParseNpyHeader(head.data(), *got, name);
  if (!h.ok()) return h.status();

  Volume v;
  v.type = h->type;
  const size_t nd = h->shape.size();
  // Logical axes (i, j, k, c) and their dims.
  int64_t dims[4] = {1, 1, 1, 1};
  int axis_of[4] = {-1, -1, -1, -1};  // the file's axis holding i, j, k, c
  if (nd == 4) {
    axis_of[3] = 0;
    for (int a = 0; a < 3; ++a) axis_of[a] = a + 1;
  } else {
    for (size_t a = 0; a < nd; ++a) axis_of[a] = static_cast<int>(a);
  }
  uint64_t voxels = 1;
  for (int a = 0; a < 4; ++a) {
    if (axis_of[a] < 0) continue;
    dims[a] = h->shape[static_cast<size_t>(axis_of[a])];
    const uint64_t d = static_cast<uint64_t>(dims[a]);
    if (voxels > limits.max_voxels / d) {
      voxels = limits.max_voxels + 1;
      break;
    }
    voxels *= d;
  }
  const size_t elem = VoxelBytes(v.type);
  const uint64_t bytes = voxels * elem;
  if (voxels > limits.max_voxels || bytes > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ": the array is over the daemon's volume limits (", limits.max_voxels,
        " voxels, ", limits.max_bytes, " bytes)"));
  }
  if (length < h->data_offset || length - h->data_offset < bytes) {
    return Bad(name, absl::StrCat("the header's shape needs ", bytes, " bytes from byte ",
                                  h->data_offset, " and the file has ", length));
  }
  std::vector<uint8_t> raw(bytes);
  got = pread_all(h->data_offset, raw.data(), raw.size());
  if (!got.ok()) return got.status();
  if (*got != bytes) return Bad(name, "the file ends within the array");
  if (h->big_endian && elem > 1) {
    for (uint64_t i = 0; i < voxels; ++i) std::reverse(&raw[i * elem], &raw[i * elem] + elem);
  }
  if (h->is_bool) {
    for (uint8_t& x : raw) x = x != 0 ? 1 : 0;
  }
  // The file's element strides of each logical axis.
  int64_t file_stride[4] = {0, 0, 0, 0};
  {
    std::vector<int64_t> strides(nd);
    int64_t s = 1;
    if (h->fortran_order) {
      for (size_t a = 0; a < nd; ++a) {
        strides[a] = s;
        s *= h->shape[a];
      }
    } else {
      for (size_t a = nd; a-- > 0;) {
        strides[a] = s;
        s *= h->shape[a];
      }
    }
    for (int a = 0; a < 4; ++a) {
      if (axis_of[a] >= 0) file_stride[a] = strides[static_cast<size_t>(axis_of[a])];
    }
  }
  const bool in_order = file_stride[0] <= 1 && (dims[1] == 1 || file_stride[1] == dims[0]) &&
                        (dims[2] == 1 || file_stride[2] == dims[0] * dims[1]) &&
                        (dims[3] == 1 || file_stride[3] == dims[0] * dims[1] * dims[2]);
  if (in_order) {
    v.voxels = std::move(raw);
  } else {
    v.voxels.resize(bytes);
    uint8_t* out = v.voxels.data();
    for (int64_t c = 0; c < dims[3]; ++c) {
      for (int64_t k = 0; k < dims[2]; ++k) {
        for (int64_t j = 0; j < dims[1]; ++j) {
          const int64_t base = c * file_stride[3] + k * file_stride[2] + j * file_stride[1];
          for (int64_t i = 0; i < dims[0]; ++i) {
            std::memcpy(out, &raw[static_cast<size_t>((base + i * file_stride[0]) * elem)], elem);
            out += elem;
          }
        }
      }
    }
  }
  v.shape = {dims[0], dims[1], dims[2]};
  v.channels = dims[3];
  if (spacing[0] != 0 || spacing[1] != 0 || spacing[2] != 0) {
    for (int a = 0; a < 3; ++a) {
      if (!(spacing[a] > 0) || spacing[a] > 1e12) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": spacing ", spacing[a], " along axis ", a, " is not > 0"));
      }
      v.spacing[a] = spacing[a];
      v.affine[a * 4 + a] = spacing[a];
    }
  }
  return v;
}

}  // namespace

absl::StatusOr<Volume> ReadNpy(int fd, uint64_t offset, uint64_t length, const std::string& name,
                               const VolumeLimits& limits, const std::array<double, 3>& spacing) {
  absl::StatusOr<uint64_t> resolved = RangeLength(fd, offset, length, name);
  if (!resolved.ok()) return resolved.status();
  length = *resolved;
  auto pread_all = [&](uint64_t at, uint8_t* out, size_t n) -> absl::StatusOr<size_t> {
    if (at >= length) return size_t{0};
    return ReadFullyAt(fd, offset + at, out, static_cast<size_t>(std::min<uint64_t>(n, length - at)),
                       name);
  };
  return ReadNpyFrom(pread_all, length, name, limits, spacing);
}

absl::StatusOr<Volume> ReadNpyBytes(const uint8_t* data, size_t length, const std::string& name,
                                    const VolumeLimits& limits,
                                    const std::array<double, 3>& spacing) {
  auto copy = [&](uint64_t at, uint8_t* out, size_t n) -> absl::StatusOr<size_t> {
    if (at >= length) return size_t{0};
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, length - at));
    std::memcpy(out, data + at, k);
    return k;
  };
  return ReadNpyFrom(copy, length, name, limits, spacing);
}

}  // namespace stoker::volume
