#include "server/volume/nifti.h"

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/posix.h"

namespace stoker::volume {
namespace {

// A NIfTI file written field by field (NIfTI-1 or -2, either byte order),
// for the header cases nibabel would not write. The voxels are given as
// bytes in this machine's order and swapped with the header.
struct NiftiFile {
  int version = 1;
  bool big_endian = false;
  std::vector<int64_t> dims = {4, 3, 2};
  int16_t datatype = 4;  // int16
  std::vector<double> pixdim = {1, 0.5, 0.75, 2.0, 0, 0, 0, 0};
  double vox_offset = -1;  // -1: right after the header
  double slope = 0, inter = 0;
  int qform = 0, sform = 1;
  double quatern[3] = {0, 0, 0}, qoffset[3] = {0, 0, 0};
  double srow[12] = {0.5, 0, 0, -10, 0, 0.75, 0, -20, 0, 0, 2.0, -30};
  std::string magic;  // empty: the version's
  std::vector<uint8_t> voxels;
  size_t elem = 2;

  template <typename T>
  void Put(std::vector<uint8_t>& b, size_t at, T v) const {
    uint8_t bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    if (big_endian) std::reverse(bytes, bytes + sizeof(T));
    std::memcpy(b.data() + at, bytes, sizeof(T));
  }

  std::vector<uint8_t> Bytes() const {
    const size_t hb = version == 1 ? 348 : 540;
    const int64_t off = vox_offset < 0 ? static_cast<int64_t>(hb) + 4 : static_cast<int64_t>(vox_offset);
    std::vector<uint8_t> b(std::max<size_t>(hb + 4, static_cast<size_t>(off)), 0);
    Put<int32_t>(b, 0, static_cast<int32_t>(hb));
    if (version == 1) {
      Put<int16_t>(b, 40, static_cast<int16_t>(dims.size()));
      for (size_t i = 0; i < dims.size(); ++i) Put<int16_t>(b, 42 + 2 * i, static_cast<int16_t>(dims[i]));
      Put<int16_t>(b, 70, datatype);
      Put<int16_t>(b, 72, static_cast<int16_t>(elem * 8));
      for (int i = 0; i < 8; ++i) Put<float>(b, 76 + 4 * i, static_cast<float>(pixdim[i]));
      Put<float>(b, 108, static_cast<float>(off));
      Put<float>(b, 112, static_cast<float>(slope));
      Put<float>(b, 116, static_cast<float>(inter));
      Put<int16_t>(b, 252, static_cast<int16_t>(qform));
      Put<int16_t>(b, 254, static_cast<int16_t>(sform));
      for (int i = 0; i < 3; ++i) Put<float>(b, 256 + 4 * i, static_cast<float>(quatern[i]));
      for (int i = 0; i < 3; ++i) Put<float>(b, 268 + 4 * i, static_cast<float>(qoffset[i]));
      for (int i = 0; i < 12; ++i) Put<float>(b, 280 + 4 * i, static_cast<float>(srow[i]));
      const std::string m = magic.empty() ? std::string("n+1\0", 4) : magic;
      std::memcpy(b.data() + 344, m.data(), 4);
    } else {
      const std::string m = magic.empty() ? std::string("n+2\0\r\n\032\n", 8) : magic;
      std::memcpy(b.data() + 4, m.data(), m.size());
      Put<int16_t>(b, 12, datatype);
      Put<int16_t>(b, 14, static_cast<int16_t>(elem * 8));
      Put<int64_t>(b, 16, static_cast<int64_t>(dims.size()));
      for (size_t i = 0; i < dims.size(); ++i) Put<int64_t>(b, 24 + 8 * i, dims[i]);
      for (int i = 0; i < 8; ++i) Put<double>(b, 104 + 8 * i, pixdim[i]);
      Put<int64_t>(b, 168, off);
      Put<double>(b, 176, slope);
      Put<double>(b, 184, inter);
      Put<int32_t>(b, 344, qform);
      Put<int32_t>(b, 348, sform);
      for (int i = 0; i < 3; ++i) Put<double>(b, 352 + 8 * i, quatern[i]);
      for (int i = 0; i < 3; ++i) Put<double>(b, 376 + 8 * i, qoffset[i]);
      for (int i = 0; i < 12; ++i) Put<double>(b, 400 + 8 * i, srow[i]);
    }
    std::vector<uint8_t> data = voxels;
    if (big_endian) {
      for (size_t i = 0; i + elem <= data.size(); i += elem) {
        std::reverse(data.begin() + i, data.begin() + i + elem);
      }
    }
    b.insert(b.end(), data.begin(), data.end());
    return b;
  }
};

std::vector<uint8_t> Int16Voxels(const std::vector<int16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<int16_t> Ramp(size_t n) {
  std::vector<int16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int16_t>(i * 397 % 4001) - 2000;
  return v;
}

// gzip of `data` in `members` concatenated members.
std::vector<uint8_t> Gzip(const std::vector<uint8_t>& data, int members = 1) {
  std::vector<uint8_t> out;
  const size_t per = (data.size() + members - 1) / members;
  for (int m = 0; m < members; ++m) {
    const size_t begin = std::min(data.size(), m * per);
    const size_t end = std::min(data.size(), begin + per);
    z_stream z{};
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::vector<uint8_t> chunk(deflateBound(&z, end - begin) + 64);
    z.next_in = const_cast<uint8_t*>(data.data() + begin);
    z.avail_in = static_cast<uInt>(end - begin);
    z.next_out = chunk.data();
    z.avail_out = static_cast<uInt>(chunk.size());
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    out.insert(out.end(), chunk.begin(), chunk.begin() + z.total_out);
    deflateEnd(&z);
  }
  return out;
}

UniqueFd MemFile(const std::vector<uint8_t>& bytes) {
  UniqueFd fd(memfd_create("stoker_nifti_test", MFD_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = write(fd.get(), bytes.data() + done, bytes.size() - done);
    REQUIRE(w > 0);
    done += static_cast<size_t>(w);
  }
  return fd;
}

absl::StatusOr<Volume> Read(const std::vector<uint8_t>& bytes, VolumeLimits limits = {}) {
  UniqueFd fd = MemFile(bytes);
  return ReadNifti(fd.get(), 0, 0, "v.nii", limits);
}

std::vector<float> Values(const Volume& v) {
  std::vector<float> out(static_cast<size_t>(v.Voxels()));
  REQUIRE(ToFloat32(v, out.data()).ok());
  return out;
}

NiftiFile RampFile() {
  NiftiFile f;
  f.voxels = Int16Voxels(Ramp(4 * 3 * 2));
  return f;
}

std::vector<float> RampFloats() {
  std::vector<float> want;
  for (int16_t x : Ramp(24)) want.push_back(x);
  return want;
}

TEST_CASE("A plain int16 NIfTI-1: shape, spacing, sform affine and voxels") {
  absl::StatusOr<Volume> v = Read(RampFile().Bytes());
  REQUIRE(v.ok());
  CHECK(v->type == VoxelType::kInt16);
  CHECK(v->shape == std::array<int64_t, 3>{4, 3, 2});
  CHECK(v->channels == 1);
  CHECK(v->spacing == std::array<double, 3>{0.5, 0.75, 2.0});
  CHECK(v->affine == std::array<double, 16>{0.5, 0, 0, -10, 0, 0.75, 0, -20, 0, 0, 2, -30, 0, 0,
                                            0, 1});
  CHECK_FALSE(v->scaled);
  CHECK(Values(*v) == RampFloats());
}

TEST_CASE("Big-endian, gzip'd, multi-member gzip and NIfTI-2 files read the same voxels") {
  NiftiFile big = RampFile();
  big.big_endian = true;
  NiftiFile two = RampFile();
  two.version = 2;
  NiftiFile two_big = two;
  two_big.big_endian = true;
  for (const std::vector<uint8_t>& bytes :
       {big.Bytes(), Gzip(RampFile().Bytes()), Gzip(RampFile().Bytes(), 3), two.Bytes(),
        Gzip(two_big.Bytes())}) {
    absl::StatusOr<Volume> v = Read(bytes);
    REQUIRE(v.ok());
    CHECK(v->shape == std::array<int64_t, 3>{4, 3, 2});
    CHECK(v->affine[3] == -10);
    CHECK(Values(*v) == RampFloats());
  }
}

TEST_CASE("A byte range of a larger file reads as the file") {
  std::vector<uint8_t> bytes(1000, 0x55);
  const std::vector<uint8_t> file = Gzip(RampFile().Bytes());
  bytes.insert(bytes.end(), file.begin(), file.end());
  bytes.resize(bytes.size() + 500, 0x1f);
  UniqueFd fd = MemFile(bytes);
  absl::StatusOr<Volume> v = ReadNifti(fd.get(), 1000, file.size(), "member.nii.gz", {});
  REQUIRE(v.ok());
  CHECK(Values(*v) == RampFloats());
}

TEST_CASE("4-D volumes become channels, in the file's order") {
  NiftiFile f;
  f.dims = {4, 3, 2, 3};
  f.voxels = Int16Voxels(Ramp(72));
  absl::StatusOr<Volume> v = Read(f.Bytes());
  REQUIRE(v.ok());
  CHECK(v->shape == std::array<int64_t, 3>{4, 3, 2});
  CHECK(v->channels == 3);
  CHECK(Values(*v).size() == 72);
  CHECK(Values(*v)[71] == Ramp(72)[71]);
}

TEST_CASE("Scaling as nibabel's get_slope_inter: zero or NaN slope is none, NaN inter fails") {
  NiftiFile f = RampFile();
  f.slope = 0.5;
  f.inter = -3.25;
  absl::StatusOr<Volume> v = Read(f.Bytes());
  REQUIRE(v.ok());
  CHECK(v->scaled);
  std::vector<float> want;
  for (int16_t x : Ramp(24)) want.push_back(static_cast<float>(x * 0.5 - 3.25));
  CHECK(Values(*v) == want);

  for (double slope : {0.0, static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
    f.slope = slope;
    v = Read(f.Bytes());
    REQUIRE(v.ok());
    CHECK_FALSE(v->scaled);
    CHECK(Values(*v) == RampFloats());
  }
  f.slope = 1;
  f.inter = 0;
  v = Read(f.Bytes());
  REQUIRE(v.ok());
  CHECK_FALSE(v->scaled);  // the identity
  f.slope = 2;
  f.inter = NAN;
  v = Read(f.Bytes());
  CHECK(v.status().code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(v.status().message()).find("intercept") != std::string::npos);
}

TEST_CASE("The qform's affine when there is no sform, the base affine when neither") {
  NiftiFile f = RampFile();
  f.sform = 0;
  f.qform = 1;
  // 90 degrees about z: (b, c, d) = (0, 0, sin 45).
  f.quatern[2] = std::sqrt(0.5);
  f.qoffset[0] = 5;
  f.qoffset[1] = 6;
  f.qoffset[2] = 7;
  f.pixdim[0] = -1;  // qfac: the third axis flipped
  absl::StatusOr<Volume> v = Read(f.Bytes());
  REQUIRE(v.ok());
  const std::array<double, 16> want = {0, -0.75, 0, 5, 0.5, 0, 0, 6, 0, 0, -2, 7, 0, 0, 0, 1};
  for (int i = 0; i < 16; ++i) CHECK(v->affine[i] == Approx(want[i]).margin(1e-6));

  f.qform = 0;
  v = Read(f.Bytes());
  REQUIRE(v.ok());
  // nibabel's shape_zoom_affine: x flipped, the centre at the origin.
  const std::array<double, 16> base = {-0.5, 0, 0, 0.75, 0, 0.75, 0, -0.75, 0, 0, 2, -1,
                                       0,    0, 0, 1};
  CHECK(v->affine == base);
}

TEST_CASE("Bad headers are DATA_LOSS naming the field") {
  struct Case {
    const char* field;
    void (*edit)(NiftiFile&);
  };
  const Case cases[] = {
      {"dim[2]", [](NiftiFile& f) { f.dims = {4, 0, 2}; }},
      {"dim[3]", [](NiftiFile& f) { f.dims = {4, 3, -2}; }},
      {"dim[0]", [](NiftiFile& f) { f.dims = {}; }},
      {"pixdim[1]", [](NiftiFile& f) { f.pixdim[1] = 0; }},
      {"pixdim[3]", [](NiftiFile& f) { f.pixdim[3] = -2; }},
      {"pixdim[2]", [](NiftiFile& f) { f.pixdim[2] = NAN; }},
      {"sform", [](NiftiFile& f) { f.srow[5] = NAN; }},
      {"quaternion", [](NiftiFile& f) {
         f.sform = 0;
         f.qform = 1;
         f.quatern[0] = 0.9;
         f.quatern[1] = 0.9;
       }},
      {"magic", [](NiftiFile& f) { f.magic = std::string("xyz\0", 4); }},
      {"sizeof_hdr", [](NiftiFile&) {}},  // overwritten below
  };
  for (const Case& c : cases) {
    NiftiFile f = RampFile();
    c.edit(f);
    std::vector<uint8_t> bytes = f.Bytes();
    if (std::string(c.field) == "sizeof_hdr") bytes[0] = 0x33;
    absl::StatusOr<Volume> v = Read(bytes);
    INFO(c.field);
    REQUIRE_FALSE(v.ok());
    CHECK(v.status().code() == absl::StatusCode::kDataLoss);
    CHECK(std::string(v.status().message()).find(c.field) != std::string::npos);
    CHECK(std::string(v.status().message()).find("v.nii") == 0);
  }
}

TEST_CASE("Unsupported datatypes and NIfTI pairs are UNIMPLEMENTED, named") {
  for (int16_t dt : {1, 32, 128, 1536, 1792, 2304, 999}) {
    NiftiFile f = RampFile();
    f.datatype = dt;
    absl::StatusOr<Volume> v = Read(f.Bytes());
    REQUIRE(v.status().code() == absl::StatusCode::kUnimplemented);
    CHECK(std::string(v.status().message()).find(std::to_string(dt)) != std::string::npos);
  }
  NiftiFile pair = RampFile();
  pair.magic = std::string("ni1\0", 4);
  absl::StatusOr<Volume> v = Read(pair.Bytes());
  CHECK(v.status().code() == absl::StatusCode::kUnimplemented);
  CHECK(std::string(v.status().message()).find(".img") != std::string::npos);
}

TEST_CASE("Truncated files: voxels past the end, plain or gzip'd, are DATA_LOSS") {
  std::vector<uint8_t> plain = RampFile().Bytes();
  plain.resize(plain.size() - 5);
  absl::StatusOr<Volume> v = Read(plain);
  CHECK(v.status().code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(v.status().message()).find("bytes of voxels") != std::string::npos);

  std::vector<uint8_t> gz = Gzip(RampFile().Bytes());
  gz.resize(gz.size() - 20);
  v = Read(gz);
  CHECK(v.status().code() == absl::StatusCode::kDataLoss);

  std::vector<uint8_t> header_only = RampFile().Bytes();
  header_only.resize(200);
  CHECK(Read(header_only).status().code() == absl::StatusCode::kDataLoss);
  CHECK(Read(Gzip(header_only)).status().code() == absl::StatusCode::kDataLoss);

  std::vector<uint8_t> corrupt = Gzip(RampFile().Bytes());
  for (size_t i = 20; i < corrupt.size() - 10; i += 7) corrupt[i] ^= 0x5a;
  CHECK_FALSE(Read(corrupt).ok());
}

TEST_CASE("A gzip bomb is inflated only as far as the header's voxels") {
  // 1000 voxels claimed, 64 MiB of zeros behind them.
  NiftiFile f;
  f.dims = {10, 10, 10};
  f.datatype = 2;
  f.elem = 1;
  f.voxels.assign(64u << 20, 0);
  const std::vector<uint8_t> bomb = Gzip(f.Bytes());
  CHECK(bomb.size() < (1u << 20));
  absl::StatusOr<Volume> v = Read(bomb);
  REQUIRE(v.ok());
  CHECK(v->voxels.size() == 1000);
  CHECK(v->voxels.capacity() < 4096);
}

TEST_CASE("Dims over the limits are refused before any allocation") {
  NiftiFile f = RampFile();
  f.dims = {30000, 30000, 30000};
  f.voxels.clear();
  absl::StatusOr<Volume> v = Read(f.Bytes());
  CHECK(v.status().code() == absl::StatusCode::kResourceExhausted);
  VolumeLimits small;
  small.max_voxels = 23;
  v = Read(RampFile().Bytes(), small);
  CHECK(v.status().code() == absl::StatusCode::kResourceExhausted);
  small.max_voxels = 24;
  CHECK(Read(RampFile().Bytes(), small).ok());
}

TEST_CASE("A vox_offset inside the header means right after it, a later one skips extensions") {
  NiftiFile f = RampFile();
  f.vox_offset = 0;
  absl::StatusOr<Volume> v = Read(f.Bytes());
  REQUIRE(v.ok());
  CHECK(Values(*v) == RampFloats());
  f.vox_offset = 352 + 64;
  v = Read(Gzip(f.Bytes()));
  REQUIRE(v.ok());
  CHECK(Values(*v) == RampFloats());
}

}  // namespace
}  // namespace stoker::volume
