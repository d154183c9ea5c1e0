#include "server/volume/npy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "catch2/catch.hpp"
#include "common/posix.h"
#include "server/volume/npz.h"
#include "server/volume/reader.h"

#include <zlib.h>

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


// A zip archive as numpy's np.savez writes one (no zip64 here: npz_test in
// tests/python reads numpy's own): each member stored (method 0) or raw
// deflate (8); `stated` overrides a member's uncompressed size.
struct ZipMember {
  std::string name;
  std::vector<uint8_t> data;
  uint16_t method = 0;
  int64_t stated = -1;
};

std::vector<uint8_t> Zip(const std::vector<ZipMember>& members) {
  std::vector<uint8_t> out, cd;
  auto put16 = [](std::vector<uint8_t>* v, uint32_t x) {
    v->push_back(x & 255);
    v->push_back(x >> 8 & 255);
  };
  auto put32 = [&](std::vector<uint8_t>* v, uint32_t x) {
    put16(v, x & 0xffff);
    put16(v, x >> 16);
  };
  for (const ZipMember& m : members) {
    std::vector<uint8_t> body = m.data;
    if (m.method == 8) {
      z_stream z{};
      REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
      body.resize(deflateBound(&z, m.data.size()));
      z.next_in = const_cast<uint8_t*>(m.data.data());
      z.avail_in = static_cast<uInt>(m.data.size());
      z.next_out = body.data();
      z.avail_out = static_cast<uInt>(body.size());
      REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
      body.resize(z.total_out);
      deflateEnd(&z);
    }
    const uint32_t size = m.stated >= 0 ? static_cast<uint32_t>(m.stated)
                                        : static_cast<uint32_t>(m.data.size());
    const uint32_t offset = static_cast<uint32_t>(out.size());
    for (std::vector<uint8_t>* v : {&out, &cd}) {
      const bool central = v == &cd;
      put32(v, central ? 0x02014b50 : 0x04034b50);
      if (central) put16(v, 20);
      put16(v, 20);
      put16(v, 0);
      put16(v, m.method);
      put32(v, 0);  // time, date
      put32(v, 0);  // crc: not checked by stoker (numpy's reader does)
      put32(v, static_cast<uint32_t>(body.size()));
      put32(v, size);
      put16(v, static_cast<uint32_t>(m.name.size()));
      put16(v, 0);
      if (central) {
        put16(v, 0);
        put16(v, 0);
        put16(v, 0);
        put32(v, 0);
        put32(v, offset);
      }
      v->insert(v->end(), m.name.begin(), m.name.end());
      if (!central) v->insert(v->end(), body.begin(), body.end());
    }
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), cd.begin(), cd.end());
  put32(&out, 0x06054b50);
  put32(&out, 0);
  put16(&out, static_cast<uint32_t>(members.size()));
  put16(&out, static_cast<uint32_t>(members.size()));
  put32(&out, static_cast<uint32_t>(cd.size()));
  put32(&out, cd_offset);
  put16(&out, 0);
  return out;
}

absl::StatusOr<Volume> ReadZip(const std::vector<uint8_t>& bytes,
                               const std::vector<std::string>& keys, VolumeLimits limits = {}) {
  UniqueFd fd(memfd_create("stoker_npz_test", MFD_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  REQUIRE(write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  return ReadVolume(fd.get(), 0, 0, "case.npz", limits, {0, 0, 0}, keys);
}

std::vector<uint8_t> SmallNpy(int16_t base) {
  std::vector<int16_t> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int16_t>(base + i);
  return Npy("{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", Bytes(v));
}

TEST_CASE("npz: stored and deflated members, chosen by key or all stacked as channels") {
  const std::vector<uint8_t> zip = Zip({{"data.npy", SmallNpy(0), 0},
                                        {"seg.npy", SmallNpy(1000), 8}});
  for (const auto& [keys, first, channels] :
       std::vector<std::tuple<std::vector<std::string>, float, int64_t>>{
           {{"data"}, 0.0f, 1}, {{"seg"}, 1000.0f, 1}, {{}, 0.0f, 2}, {{"seg", "data"}, 1000.0f, 2}}) {
    auto v = ReadZip(zip, keys);
    REQUIRE(v.ok());
    CHECK(v->channels == channels);
    CHECK((v->shape == std::array<int64_t, 3>{2, 3, 4}));
    const std::vector<float> values = Values(*v);
    CHECK(values[0] == first);
    CHECK(values[23] == first + 23);
    if (channels == 2) CHECK(values[24] == (first == 0 ? 1000.0f : 0.0f));
  }
}

TEST_CASE("npz: bombs, other methods, missing keys and damage are named errors") {
  // Deflated to far more than its stated size: inflating stops at the size.
  std::vector<uint8_t> big = SmallNpy(0);
  big.resize(1 << 20, 0);
  auto bomb = ReadZip(Zip({{"data.npy", big, 8, 4096}}), {"data"});
  CHECK(bomb.status().code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(bomb.status().message()).find("case.npz:data.npy") != std::string::npos);
  // A stated size over the limits is refused before inflating.
  VolumeLimits small;
  small.max_bytes = 1000;
  auto over = ReadZip(Zip({{"data.npy", big, 8, 1 << 30}}), {"data"}, small);
  CHECK(over.status().code() == absl::StatusCode::kResourceExhausted);
  auto bzip = ReadZip(Zip({{"data.npy", SmallNpy(0), 12}}), {});
  CHECK(bzip.status().code() == absl::StatusCode::kUnimplemented);
  auto missing = ReadZip(Zip({{"data.npy", SmallNpy(0), 0}}), {"image"});
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("it holds data") != std::string::npos);
  std::vector<uint8_t> cut = Zip({{"data.npy", SmallNpy(0), 0}});
  cut.resize(cut.size() - 30);
  CHECK(ReadZip(cut, {}).status().code() == absl::StatusCode::kDataLoss);
  std::vector<uint8_t> moved = Zip({{"data.npy", SmallNpy(0), 0}});
  moved[moved.size() - 6] = 0xff;  // the central directory's offset, past the end
  CHECK(ReadZip(moved, {}).status().code() == absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stoker::volume
