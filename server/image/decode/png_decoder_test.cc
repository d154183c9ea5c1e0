#include "server/image/decode/png_decoder.h"
#include "server/image/decode/png_test_util.h"

#include <spng.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace stoker::image {
namespace {

using namespace png_test;  // NOLINT: png_test_util.h

TEST_CASE("PNG: every colour type and bit depth decodes as PIL converts it", "[png]") {
  struct Mode {
    uint8_t color_type, depth;
    const char* pil_mode;
  };
  const Mode modes[] = {{0, 1, "1"},     {0, 2, "L"},    {0, 4, "L"},    {0, 8, "L"},
                        {0, 16, "I"},    {2, 8, "RGB"},  {2, 16, "RGB"}, {3, 1, "P"},
                        {3, 2, "P"},     {3, 4, "P"},    {3, 8, "P"},    {4, 8, "LA"},
                        {4, 16, "RGBA"}, {6, 8, "RGBA"}, {6, 16, "RGBA"}};
  auto dec = MakePngDecoder();
  uint32_t seed = 1;
  for (const Mode& m : modes) {
    for (bool interlaced : {false, true}) {
      for (bool trns : {false, true}) {
        if (trns && (m.color_type == 4 || m.color_type == 6)) continue;
        for (auto [w, h] : {std::pair<uint32_t, uint32_t>{37, 23}, {1, 1}, {3, 9}}) {
          Source s = RandomSource(w, h, m.color_type, m.depth, interlaced, seed++);
          if (trns) {
            s.trns = m.color_type == 3   ? Bytes{0, 128, 255}.size() * 3 > s.palette.size()
                                               ? Bytes{0}
                                               : Bytes{0, 128, 255}
                       : m.color_type == 0 ? Bytes{0, 1}
                                         : Bytes{0, 1, 0, 2, 0, 3};
          }
          INFO("type " << int{m.color_type} << " depth " << int{m.depth} << " interlaced "
                       << interlaced << " tRNS " << trns << " " << w << "x" << h);
          const Bytes png = Encode(s);
          Bytes rgb;
          ImageHeader h2;
          REQUIRE(DecodeWhole(dec.get(), png, &rgb, &h2).ok());
          CHECK(h2.format == ImageFormat::kPng);
          CHECK(h2.width == w);
          CHECK(h2.height == h);
          CHECK(std::string(h2.mode) == m.pil_mode);
          CHECK(rgb == Expected(s));
        }
      }
    }
  }
}

TEST_CASE("PNG: 16-bit gray clips at 255, 16-bit colour keeps the high byte", "[png]") {
  Source s;
  s.width = 4;
  s.height = 1;
  s.color_type = 0;
  s.depth = 16;
  s.samples = {0, 255, 256, 65535};
  Bytes rgb;
  auto dec = MakePngDecoder();
  REQUIRE(DecodeWhole(dec.get(), Encode(s), &rgb).ok());
  CHECK(rgb == Bytes{0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 255});
  s.color_type = 2;
  s.width = 1;
  s.samples = {0x12FF, 0xAB00, 0x00FF};
  REQUIRE(DecodeWhole(dec.get(), Encode(s), &rgb).ok());
  CHECK(rgb == Bytes{0x12, 0xAB, 0x00});
}

TEST_CASE("PNG: regions equal the whole decode's window", "[png]") {
  auto dec = MakePngDecoder();
  struct File {
    uint8_t color_type, depth;
    bool interlaced;
  };
  for (const File& f : {File{2, 8, false}, File{3, 2, true}, File{6, 16, true}, File{0, 1, false},
                        File{0, 4, true}, File{4, 16, false}}) {
    const uint32_t w = 45, h = 31;
    const Source s = RandomSource(w, h, f.color_type, f.depth, f.interlaced, 99);
    const Bytes png = Encode(s);
    Bytes whole;
    REQUIRE(DecodeWhole(dec.get(), png, &whole).ok());
    const DecodeRegion regions[] = {
        {0, 0, h, w},  {0, 0, 1, 1},         {h - 1, w - 1, 1, 1}, {0, 0, 5, w},  {h - 3, 0, 3, w},
        {7, 3, 9, 17}, {1, 1, h - 2, w - 2}, {12, 0, 1, w},        {0, 44, h, 1}, {5, 9, 8, 8}};
    for (const DecodeRegion& r : regions) {
      INFO("type " << int{f.color_type} << " depth " << int{f.depth} << " interlaced "
                   << f.interlaced << " region " << r.top << "," << r.left << " " << r.height << "x"
                   << r.width);
      ImageHeader header;
      REQUIRE(dec->ReadHeader(png.data(), png.size(), Limits(), &header).ok());
      const size_t stride = size_t{r.width} * 3 + 5;  // padded rows
      Bytes out(stride * r.height, 0xEE);
      REQUIRE(dec->Decode(r, out.data(), stride).ok());
      for (uint32_t y = 0; y < r.height; ++y) {
        const uint8_t* want = whole.data() + (size_t{r.top + y} * w + r.left) * 3;
        REQUIRE(std::memcmp(out.data() + y * stride, want, size_t{r.width} * 3) == 0);
        REQUIRE(out[y * stride + r.width * 3] == 0xEE);  // padding untouched
      }
    }
    // Several decodes after one ReadHeader.
    ImageHeader header;
    REQUIRE(dec->ReadHeader(png.data(), png.size(), Limits(), &header).ok());
    Bytes a(9), b(size_t{w} * h * 3);
    REQUIRE(dec->Decode({2, 2, 1, 3}, a.data(), 9).ok());
    REQUIRE(dec->Decode({0, 0, h, w}, b.data(), size_t{w} * 3).ok());
    CHECK(b == whole);
  }
}

TEST_CASE("PNG: regions outside the image and bad calls fail", "[png]") {
  auto dec = MakePngDecoder();
  Bytes out(1000);
  CHECK(dec->Decode({0, 0, 1, 1}, out.data(), 3).code() == absl::StatusCode::kFailedPrecondition);
  const Bytes png = Encode(RandomSource(10, 10, 2, 8, false, 3));
  ImageHeader h;
  REQUIRE(dec->ReadHeader(png.data(), png.size(), Limits(), &h).ok());
  for (const DecodeRegion& r :
       {DecodeRegion{0, 0, 0, 1}, DecodeRegion{0, 0, 1, 0}, DecodeRegion{10, 0, 1, 1},
        DecodeRegion{0, 9, 1, 2}, DecodeRegion{0xFFFFFFFF, 0, 2, 1}}) {
    CHECK(dec->Decode(r, out.data(), 30).code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(dec->Decode({0, 0, 1, 10}, out.data(), 29).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("PNG: declared sizes over the cap fail before anything is allocated", "[png]") {
  auto dec = MakePngDecoder();
  ImageHeader h;
  // Only a header and a tiny IDAT: a decoder that allocated for the declared
  // size would need 12 GiB (65535^2 * 3) or more.
  for (auto [w, ht] : {std::pair<uint32_t, uint32_t>{65535, 65535},
                       {0x7FFFFFFF, 1},
                       {0x7FFFFFFF, 0x7FFFFFFF},
                       {1, 0x7FFFFFFF}}) {
    const Bytes png =
        Concat({kSig, Ihdr(w, ht, 8, 6), Chunk("IDAT", ZlibZeros(100)), Chunk("IEND", {})});
    CHECK(dec->ReadHeader(png.data(), png.size(), Limits(), &h).code() ==
          absl::StatusCode::kResourceExhausted);
  }
  // The cap is limits.max_pixels.
  const Bytes png = Encode(RandomSource(20, 10, 2, 8, false, 5));
  CHECK(dec->ReadHeader(png.data(), png.size(), Limits(199), &h).code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(dec->ReadHeader(png.data(), png.size(), Limits(200), &h).ok());
  // Zero and over-2^31 sizes are invalid.
  for (auto [w, ht] : {std::pair<uint32_t, uint32_t>{0, 5}, {5, 0}, {0x80000000u, 1}}) {
    const Bytes bad =
        Concat({kSig, Ihdr(w, ht, 8, 2), Chunk("IDAT", ZlibZeros(100)), Chunk("IEND", {})});
    CHECK(dec->ReadHeader(bad.data(), bad.size(), Limits(), &h).code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("PNG: a file cut anywhere fails cleanly", "[png]") {
  auto dec = MakePngDecoder();
  for (bool interlaced : {false, true}) {
    Source s = RandomSource(23, 17, 3, 4, interlaced, 11);
    s.trns = {0, 255};
    const Bytes png = Encode(s);
    Bytes rgb;
    REQUIRE(DecodeWhole(dec.get(), png, &rgb).ok());
    for (size_t cut = 0; cut < png.size(); ++cut) {
      INFO("cut at " << cut << " of " << png.size());
      const Bytes part(png.begin(), png.begin() + cut);
      ImageHeader h;
      absl::Status st = dec->ReadHeader(part.data(), part.size(), Limits(), &h);
      if (st.ok()) {  // never: the chunk chain lacks IEND
        Bytes out(3);
        st = dec->Decode({0, 0, 1, 1}, out.data(), 3);
      }
      REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
    }
    // Cut in the middle of IDAT: the message says where.
    for (const ChunkAt& c : Chunks(png)) {
      if (c.type != "IDAT") continue;
      const Bytes part(png.begin(), png.begin() + c.offset + 8 + c.length / 2);
      ImageHeader h;
      const absl::Status st = dec->ReadHeader(part.data(), part.size(), Limits(), &h);
      CHECK(st.message() == "PNG: truncated in IDAT chunk");
    }
  }
}

TEST_CASE("PNG: wrong CRCs fail, in every chunk", "[png]") {
  auto dec = MakePngDecoder();
  Source s = RandomSource(30, 20, 3, 8, false, 12);
  s.trns = {0, 10, 20};
  Bytes png = Encode(s);
  // A text chunk after the image data too (PIL does not check those CRCs).
  png = InsertBefore(png, "IEND", Chunk("tEXt", Bytes{'k', 0, 'v'}));
  Bytes rgb;
  REQUIRE(DecodeWhole(dec.get(), png, &rgb).ok());
  for (const ChunkAt& c : Chunks(png)) {
    if (c.type == "IEND") continue;  // checked by value
    for (size_t at : {c.offset + 4, c.offset + 8, c.offset + 8 + c.length}) {
      if (at >= c.offset + 8 + c.length + 4) continue;
      if (c.length == 0 && at == c.offset + 8) continue;
      INFO(c.type << " byte " << at);
      Bytes bad = png;
      bad[at] ^= 0x01;
      // A flipped type byte makes another (valid) type name: still a CRC error.
      const absl::Status st = DecodeWhole(dec.get(), bad, &rgb);
      REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
    }
  }
  Bytes bad = png;
  for (const ChunkAt& c : Chunks(png)) {
    if (c.type == "IDAT") bad[c.offset + 8 + c.length + 2] ^= 0x40;  // its CRC
  }
  CHECK(DecodeWhole(dec.get(), bad, &rgb).message() == "PNG: bad CRC in IDAT chunk");
  bad = png;
  bad[png.size() - 1] ^= 1;  // IEND's CRC
  CHECK(DecodeWhole(dec.get(), bad, &rgb).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("PNG: corrupt bytes with right CRCs fail or decode, never crash", "[png]") {
  auto dec = MakePngDecoder();
  for (bool interlaced : {false, true}) {
    const Bytes png = Encode(RandomSource(40, 30, 6, 16, interlaced, 13));
    std::mt19937 rng(7);
    for (int i = 0; i < 300; ++i) {
      Bytes bad = png;
      // Flip a byte inside a chunk's data, then fix its CRC.
      const std::vector<ChunkAt> chunks = Chunks(bad);
      const ChunkAt& c = chunks[rng() % chunks.size()];
      if (c.length == 0) continue;
      bad[c.offset + 8 + rng() % c.length] ^= static_cast<uint8_t>(1 + rng() % 255);
      const Bytes fixed = Chunk(
          c.type.c_str(), Bytes(bad.begin() + c.offset + 8, bad.begin() + c.offset + 8 + c.length));
      std::copy(fixed.begin(), fixed.end(), bad.begin() + c.offset);
      Bytes rgb;
      const absl::Status st = DecodeWhole(dec.get(), bad, &rgb);
      if (!st.ok()) {
        CHECK((st.code() == absl::StatusCode::kInvalidArgument ||
               st.code() == absl::StatusCode::kResourceExhausted));
      }
    }
  }
}

TEST_CASE("PNG: hostile chunk structures", "[png]") {
  auto dec = MakePngDecoder();
  const Bytes good = Encode(RandomSource(16, 8, 2, 8, false, 14));
  Bytes rgb;
  REQUIRE(DecodeWhole(dec.get(), good, &rgb).ok());

  SECTION("missing IEND") {
    const Bytes bad(good.begin(), good.end() - 12);
    CHECK(DecodeWhole(dec.get(), bad, &rgb).message() == "PNG: truncated (no IEND chunk)");
  }
  SECTION("bytes after IEND are ignored") {
    Bytes more = good;
    more.insert(more.end(), {1, 2, 3, 4, 5});
    Bytes rgb2;
    REQUIRE(DecodeWhole(dec.get(), more, &rgb2).ok());
    CHECK(rgb2 == rgb);
  }
  SECTION("a chunk length past the end of the file") {
    for (uint32_t length : {1000u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu}) {
      const Bytes bad = InsertBefore(good, "IDAT", Concat({Be32(length), {'t', 'E', 'X', 't'}}));
      CHECK(DecodeWhole(dec.get(), bad, &rgb).code() == absl::StatusCode::kInvalidArgument);
    }
  }
  SECTION("a corrupt chunk type") {
    const Bytes bad = InsertBefore(good, "IEND",
                                   Chunk("a\x01"
                                         "cd",
                                         {}));
    CHECK(DecodeWhole(dec.get(), bad, &rgb).message() == "PNG: corrupt chunk type");
  }
  SECTION("not a PNG") {
    Bytes bad = good;
    bad[1] = 'Q';
    CHECK(DecodeWhole(dec.get(), bad, &rgb).code() == absl::StatusCode::kInvalidArgument);
    CHECK(DecodeWhole(dec.get(), Bytes{}, &rgb).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a palette image without PLTE, an unknown critical chunk, no IDAT") {
    const Bytes idat = Chunk("IDAT", ZlibZeros(9 * 4));
    for (const Bytes& bad : {Concat({kSig, Ihdr(8, 4, 8, 3), idat, Chunk("IEND", {})}),
                             InsertBefore(good, "IDAT", Chunk("ABCD", {1, 2})),
                             Concat({kSig, Ihdr(8, 4, 8, 0), Chunk("IEND", {})}),
                             Concat({kSig, Ihdr(8, 4, 8, 9), idat, Chunk("IEND", {})}),
                             Concat({kSig, Ihdr(8, 4, 3, 0), idat, Chunk("IEND", {})})}) {
      CHECK(DecodeWhole(dec.get(), bad, &rgb).code() == absl::StatusCode::kInvalidArgument);
    }
  }
  SECTION("image data ending before the last row") {
    const Bytes bad =
        Concat({kSig, Ihdr(8, 4, 8, 0), Chunk("IDAT", ZlibZeros(9 * 3)), Chunk("IEND", {})});
    CHECK(DecodeWhole(dec.get(), bad, &rgb).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a zlib stream expanding 1000x decodes fast, without allocating it") {
    // 64x64 gray declares 4160 bytes of scanlines; the stream inflates to 100 MiB.
    const Bytes bomb =
        Concat({kSig, Ihdr(64, 64, 8, 0), Chunk("IDAT", ZlibZeros(100 << 20)), Chunk("IEND", {})});
    REQUIRE(bomb.size() < (200 << 10));
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(DecodeWhole(dec.get(), bomb, &rgb).ok());
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));
    CHECK(rgb == Bytes(64 * 64 * 3, 0));
  }
  SECTION("huge ancillary chunks") {
    // Kept by libspng (text): over the limit, RESOURCE_EXHAUSTED.
    Bytes text = {'k', 0};
    text.resize(20 << 20, 'x');
    CHECK(DecodeWhole(dec.get(), InsertBefore(good, "IDAT", Chunk("tEXt", text)), &rgb).code() ==
          absl::StatusCode::kResourceExhausted);
    // A small zTXt inflating to 50 MiB.
    Bytes ztxt = {'k', 0, 0};
    const Bytes z = ZlibZeros(50 << 20);
    ztxt.insert(ztxt.end(), z.begin(), z.end());
    CHECK(DecodeWhole(dec.get(), InsertBefore(good, "IDAT", Chunk("zTXt", ztxt)), &rgb).code() ==
          absl::StatusCode::kResourceExhausted);
    // Skipped unread (unknown ancillary): any size.
    Bytes blob(20 << 20, 7);
    CHECK(DecodeWhole(dec.get(), InsertBefore(good, "IEND", Chunk("prIv", blob)), &rgb).ok());
    // Small text chunks are fine.
    CHECK(DecodeWhole(dec.get(), InsertBefore(good, "IDAT", Chunk("tEXt", {'k', 0, 'v'})), &rgb)
              .ok());
  }
  SECTION("gAMA, sBIT, iCCP-free chunks change nothing") {
    Bytes with = InsertBefore(good, "IDAT", Chunk("gAMA", Be32(100000)));
    with = InsertBefore(with, "IDAT", Chunk("sBIT", {3, 3, 3}));
    Bytes rgb2;
    REQUIRE(DecodeWhole(dec.get(), with, &rgb2).ok());
    CHECK(rgb2 == rgb);
  }
}

TEST_CASE("PNG: APNG: the IDAT image, whether or not it is the first frame", "[png]") {
  auto dec = MakePngDecoder();
  const Source sa = RandomSource(20, 12, 2, 8, false, 21);
  const Source sb = RandomSource(20, 12, 2, 8, false, 22);
  const Bytes a = Encode(sa), b = Encode(sb);
  for (bool default_image : {false, true}) {
    Bytes rgb;
    REQUIRE(DecodeWhole(dec.get(), Apng(a, b, default_image), &rgb).ok());
    CHECK(rgb == Expected(sa));
  }
  // The first frame's fcTL (before IDAT) must cover the image, sequence from 0.
  for (const Bytes& fctl :
       {Fctl(0, 10, 12), Fctl(0, 20, 12, 1, 0), Fctl(1, 20, 12), Chunk("fcTL", Be32(0))}) {
    const Bytes bad = InsertBefore(a, "IDAT", fctl);
    Bytes rgb;
    CHECK(DecodeWhole(dec.get(), bad, &rgb).code() == absl::StatusCode::kInvalidArgument);
  }
}

// --- The two decode paths --------------------------------------------------


}  // namespace
}  // namespace stoker::image
