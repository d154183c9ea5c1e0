#include "server/image/jpeg_decoder.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "server/image/rng.h"
#include "server/image/test_jpeg.h"

namespace stoker::image {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::MakePhoto;

std::vector<uint8_t> SmallJpeg(const EncodeOptions& o = {}, uint32_t h = 48, uint32_t w = 64) {
  return EncodeJpeg(MakePhoto(h, w, 3, 1), h, w, 3, o);
}

// Offset of the marker FF `code`, or npos.
size_t FindMarker(const std::vector<uint8_t>& j, uint8_t code) {
  for (size_t i = 0; i + 1 < j.size(); ++i) {
    if (j[i] == 0xFF && j[i + 1] == code) return i;
  }
  return std::string::npos;
}

// Decodes every row; returns the first error.
absl::Status DecodeAll(JpegDecoder& d, const std::vector<uint8_t>& jpeg,
                       const DecodeLimits& limits = {}) {
  JpegHeader header;
  absl::Status s = d.ReadHeader(jpeg.data(), jpeg.size(), limits, &header);
  if (!s.ok()) return s;
  DecodeInfo info;
  s = d.Start(8, &info);
  if (!s.ok()) return s;
  std::vector<uint8_t> row(size_t{info.width} * info.channels);
  uint8_t* rows[1] = {row.data()};
  while (d.next_row() < info.height) {
    uint32_t got = 0;
    s = d.ReadRows(rows, 1, &got);
    if (!s.ok()) return s;
  }
  return d.Finish();
}

TEST_CASE("Header of ordinary files", "[jpeg]") {
  JpegDecoder d;
  JpegHeader h;
  std::vector<uint8_t> j = SmallJpeg();
  REQUIRE(d.ReadHeader(j.data(), j.size(), {}, &h).ok());
  CHECK(h.width == 64);
  CHECK(h.height == 48);
  CHECK(h.components == 3);
  CHECK(h.orientation == 1);
  CHECK_FALSE(h.progressive);
  d.Abort();

  EncodeOptions o;
  o.progressive = true;
  o.app1 = testing::ExifApp1(6, false);
  j = SmallJpeg(o);
  REQUIRE(d.ReadHeader(j.data(), j.size(), {}, &h).ok());
  CHECK(h.progressive);
  CHECK(h.orientation == 6);
  DecodeLimits no_exif;
  no_exif.read_exif = false;
  REQUIRE(d.ReadHeader(j.data(), j.size(), no_exif, &h).ok());
  CHECK(h.orientation == 1);
  d.Abort();
}

TEST_CASE("Every coding decodes", "[jpeg]") {
  JpegDecoder d;
  for (int sub : {444, 422, 420, 440}) {
    for (bool prog : {false, true}) {
      for (bool arith : {false, true}) {
        EncodeOptions o;
        o.subsampling = sub;
        o.progressive = prog;
        o.arithmetic = arith;
        o.restart_rows = arith ? 0 : 1;
        CAPTURE(sub, prog, arith);
        CHECK(DecodeAll(d, SmallJpeg(o, 37, 53)).ok());
      }
    }
  }
}

TEST_CASE("Hostile inputs return a status", "[jpeg][hostile]") {
  JpegDecoder d;
  JpegHeader h;
  auto header = [&](const std::vector<uint8_t>& bytes) {
    return d.ReadHeader(bytes.data(), bytes.size(), {}, &h);
  };
  CHECK(header({}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(d.ReadHeader(nullptr, 0, {}, &h).code() == absl::StatusCode::kInvalidArgument);
  CHECK(header({0xFF}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(header({0xFF, 0xD8}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(header({0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13}).code() ==
        absl::StatusCode::kInvalidArgument);
  const std::string text = "hello, this is not an image\n";
  CHECK(header(std::vector<uint8_t>(text.begin(), text.end())).code() ==
        absl::StatusCode::kInvalidArgument);

  KeyedRng rng(99);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> junk(1 + rng.Below(4000));
    for (auto& b : junk) b = rng.Next() & 0xff;
    if (i % 2 == 0) junk[0] = 0xFF, junk[1 % junk.size()] = 0xD8;
    CHECK_FALSE(DecodeAll(d, junk).ok());
  }
}

TEST_CASE("Corrupted real files never crash", "[jpeg][hostile]") {
  JpegDecoder d;
  EncodeOptions prog;
  prog.progressive = true;
  for (const auto& good : {SmallJpeg(), SmallJpeg(prog)}) {
    KeyedRng rng(7);
    for (int i = 0; i < 400; ++i) {
      std::vector<uint8_t> bad = good;
      const int flips = 1 + static_cast<int>(rng.Below(8));
      for (int k = 0; k < flips; ++k) bad[rng.Below(bad.size())] = rng.Next() & 0xff;
      (void)DecodeAll(d, bad);  // any status; must not crash
    }
    CHECK(DecodeAll(d, good).ok());  // and the decoder is still usable
  }
}

TEST_CASE("Truncated files fail", "[jpeg][hostile]") {
  JpegDecoder d;
  EncodeOptions prog;
  prog.progressive = true;
  for (const auto& good : {SmallJpeg(), SmallJpeg(prog)}) {
    REQUIRE(DecodeAll(d, good).ok());
    for (size_t n = 0; n + 2 <= good.size(); n += 1 + n / 16) {
      const std::vector<uint8_t> cut(good.begin(), good.begin() + n);
      CAPTURE(n, good.size());
      CHECK_FALSE(DecodeAll(d, cut).ok());
    }
  }
}

TEST_CASE("A header claiming 65500x65500 is refused before decoding", "[jpeg][hostile]") {
  std::vector<uint8_t> j = SmallJpeg();
  const size_t sof = FindMarker(j, 0xC0);
  REQUIRE(sof != std::string::npos);
  // FF C0, length(2), precision(1), height(2), width(2)
  j[sof + 5] = 0xFF, j[sof + 6] = 0xDC;
  j[sof + 7] = 0xFF, j[sof + 8] = 0xDC;
  JpegDecoder d;
  JpegHeader h;
  const absl::Status s = d.ReadHeader(j.data(), j.size(), {}, &h);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(s.message()), Catch::Contains("65500x65500"));
}

TEST_CASE("12-bit and lossless files are UNIMPLEMENTED", "[jpeg][hostile]") {
  JpegDecoder d;
  JpegHeader h;
  std::vector<uint8_t> j = SmallJpeg();
  const size_t sof = FindMarker(j, 0xC0);
  REQUIRE(sof != std::string::npos);
  std::vector<uint8_t> twelve = j;
  twelve[sof + 4] = 12;
  absl::Status s = d.ReadHeader(twelve.data(), twelve.size(), {}, &h);
  CHECK(s.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(s.message()), Catch::Contains("12"));
  std::vector<uint8_t> lossless = j;
  lossless[sof + 1] = 0xC3;
  s = d.ReadHeader(lossless.data(), lossless.size(), {}, &h);
  CHECK(s.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(s.message()), Catch::Contains("lossless"));
}

TEST_CASE("The scan cap stops many-scan files", "[jpeg][hostile]") {
  EncodeOptions o;
  o.progressive = true;
  const std::vector<uint8_t> j = SmallJpeg(o);  // simple progression: 10 scans
  JpegDecoder d;
  DecodeLimits limits;
  limits.max_scans = 3;
  const absl::Status s = DecodeAll(d, j, limits);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(DecodeAll(d, j).ok());
}

TEST_CASE("Pixel cap", "[jpeg][hostile]") {
  const std::vector<uint8_t> j = SmallJpeg();
  JpegDecoder d;
  JpegHeader h;
  DecodeLimits limits;
  limits.max_pixels = 64 * 48 - 1;
  CHECK(d.ReadHeader(j.data(), j.size(), limits, &h).code() ==
        absl::StatusCode::kResourceExhausted);
  limits.max_pixels = 64 * 48;
  CHECK(d.ReadHeader(j.data(), j.size(), limits, &h).ok());
  d.Abort();
}

}  // namespace
}  // namespace stoker::image
