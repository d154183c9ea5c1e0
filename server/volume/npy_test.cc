#include "server/volume/npy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/posix.h"
#include "server/volume/reader.h"

namespace stoker::volume {
namespace {

// A .npy file as numpy.lib.format writes it (version 1, the header padded
// to 64 bytes); `data` already in the file's byte order and axis order.
std::vector<uint8_t> Npy(const std::string& dict, const std::vector<uint8_t>& data,
                         int version = 1) {
  const size_t prefix = version == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(version), 0};
  const size_t n = header.size();
  b.push_back(static_cast<uint8_t>(n & 0xff));
  b.push_back(static_cast<uint8_t>(n >> 8));
  if (version != 1) {
    b.push_back(0);
    b.push_back(0);
  }
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v, bool big = false) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  if (big) {
    for (size_t i = 0; i < b.size(); i += sizeof(T)) std::reverse(&b[i], &b[i] + sizeof(T));
  }
  return b;
}

absl::StatusOr<Volume> Read(const std::vector<uint8_t>& bytes, VolumeLimits limits = {},
                            std::array<double, 3> spacing = {0, 0, 0}) {
  UniqueFd fd(memfd_create("stoker_npy_test", MFD_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  REQUIRE(write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  return ReadVolume(fd.get(), 0, 0, "a.npy", limits, spacing);
}

std::vector<float> Values(const Volume& v) {
  std::vector<float> out(static_cast<size_t>(v.Voxels()));
  REQUIRE(ToFloat32(v, out.data()).ok());
  return out;
}

// Element (i, j, k) of a 2 x 3 x 4 array: 100 i + 10 j + k.
int16_t At(int i, int j, int k) { return static_cast<int16_t>(100 * i + 10 * j + k); }

std::vector<float> VolumeOrder() {  // i fastest
  std::vector<float> out;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) out.push_back(At(i, j, k));
  return out;
}

TEST_CASE("C-order and Fortran-order arrays read as the same volume, axis 0 being i") {
  std::vector<int16_t> c_order, f_order;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) c_order.push_back(At(i, j, k));
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) f_order.push_back(At(i, j, k));
  for (const auto& file :
       {Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3, 4), }", Bytes(c_order)),
        Npy("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", Bytes(f_order)),
        Npy("{'descr': '>i2', 'fortran_order': False, 'shape': (2, 3, 4), }",
            Bytes(c_order, true), 2)}) {
    absl::StatusOr<Volume> v = Read(file);
    REQUIRE(v.ok());
    CHECK(v->type == VoxelType::kInt16);
    CHECK(v->shape == std::array<int64_t, 3>{2, 3, 4});
    CHECK(v->channels == 1);
    CHECK(v->affine == Volume().affine);
    CHECK(Values(*v) == VolumeOrder());
  }
}

TEST_CASE("4-D arrays are channel-first, 2-D ones a slice, and a given spacing makes the affine") {
  std::vector<float> data;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) data.push_back(1000.f * c + At(i, j, k));
  absl::StatusOr<Volume> v =
      Read(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 3, 4), }", Bytes(data)),
           {}, {0.7, 0.8, 2.5});
  REQUIRE(v.ok());
  CHECK(v->shape == std::array<int64_t, 3>{2, 3, 4});
  CHECK(v->channels == 2);
  std::vector<float> want = VolumeOrder();
  for (float x : VolumeOrder()) want.push_back(1000.f + x);
  CHECK(Values(*v) == want);
  CHECK(v->spacing == std::array<double, 3>{0.7, 0.8, 2.5});
  CHECK(v->affine[0] == 0.7);
  CHECK(v->affine[10] == 2.5);

  v = Read(Npy("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }",
               {0, 1, 2, 0, 255, 1}));
  REQUIRE(v.ok());
  CHECK(v->shape == std::array<int64_t, 3>{2, 3, 1});
  CHECK(Values(*v) == std::vector<float>{0, 0, 1, 1, 1, 1});  // i fastest: (0,0) (1,0) (0,1)...
}

TEST_CASE("Bad .npy files are named errors") {
  struct Case {
    std::vector<uint8_t> bytes;
    absl::StatusCode code;
    const char* words;
  };
  const std::vector<uint8_t> four(24 * 2, 0);
  const Case cases[] = {
      {{'n', 'o', 't', ' ', 'n', 'p', 'y', '!', '!', '!', '!', '!'},
       absl::StatusCode::kDataLoss, "ends within the header"},
      {Npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3, 4), }", four),
       absl::StatusCode::kUnimplemented, "'<f2'"},
      {Npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3, 4), }", four),
       absl::StatusCode::kUnimplemented, "'<c8'"},
      {Npy("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }", four),
       absl::StatusCode::kUnimplemented, "structured"},
      {Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 0, 4), }", four),
       absl::StatusCode::kDataLoss, "dim of 0"},
      {Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (), }", four),
       absl::StatusCode::kDataLoss, "scalar"},
      {Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (1, 1, 2, 3, 4), }", four),
       absl::StatusCode::kUnimplemented, "5 dims"},
      {Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3, 5), }", four),
       absl::StatusCode::kDataLoss, "needs 60 bytes"},
      {Npy("{'descr': '<i2', 'fortran_order': Maybe, 'shape': (2, 3, 4), }", four),
       absl::StatusCode::kDataLoss, "fortran_order"},
      {Npy("{'descr': '<i2', 'shape': (2, 3, 4), }", four), absl::StatusCode::kDataLoss,
       "lacks"},
      {Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3, 4)", four),
       absl::StatusCode::kDataLoss, "dict"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Volume> v = Read(c.bytes);
    INFO(c.words);
    REQUIRE_FALSE(v.ok());
    CHECK(v.status().code() == c.code);
    CHECK(std::string(v.status().message()).find(c.words) != std::string::npos);
  }
}

TEST_CASE("An array over the limits is refused before it is read") {
  VolumeLimits small;
  small.max_voxels = 23;
  const std::vector<uint8_t> data(48, 0);
  absl::StatusOr<Volume> v =
      Read(Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3, 4), }", data), small);
  CHECK(v.status().code() == absl::StatusCode::kResourceExhausted);
  v = Read(Npy("{'descr': '<i2', 'fortran_order': False, 'shape': (100000, 100000, 100000), }",
               data));
  CHECK(v.status().code() == absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace stoker::volume
