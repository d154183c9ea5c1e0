// The PNG decoder's two paths (png_decoder.h): the whole-buffer path takes
// plain files and gives the row-by-row path's pixels; what it passes on,
// the row-by-row path decodes and judges; one decoder across files.

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "server/image/decode/png_decoder.h"
#include "server/image/decode/png_test_util.h"

namespace stoker::image {
namespace {

using namespace png_test;  // NOLINT: png_test_util.h
using Path = PngDecoderOptions::Path;

struct Outcome {
  absl::Status status;
  Bytes pixels;
};

// Decodes `region` (the whole image when empty) on one path.
Outcome Run(Path path, const Bytes& png, DecodeRegion region = {}) {
  auto dec = MakePngDecoder({path});
  Outcome o;
  ImageHeader h;
  o.status = dec->ReadHeader(png.data(), png.size(), Limits(), &h);
  if (!o.status.ok()) return o;
  if (region.height == 0) region = {0, 0, h.height, h.width};
  o.pixels.assign(size_t{region.width} * region.height * 3, 0);
  o.status = dec->Decode(region, o.pixels.data(), size_t{region.width} * 3);
  return o;
}

// zlib (level 6) of `raw`.
Bytes Zlib(const Bytes& raw) {
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  Bytes z(n);
  REQUIRE(compress2(z.data(), &n, raw.data(), static_cast<uLong>(raw.size()), 6) == Z_OK);
  z.resize(n);
  return z;
}

// A file of the zlib stream `z`, cut into IDAT chunks of `chunk` bytes.
Bytes FromZlib(uint32_t w, uint32_t h, uint8_t depth, uint8_t color_type, const Bytes& z,
               size_t chunk = 1 << 16) {
  Bytes out = Concat({kSig, Ihdr(w, h, depth, color_type)});
  for (size_t pos = 0; pos < z.size(); pos += chunk) {
    const Bytes part =
        Chunk("IDAT", Bytes(z.begin() + pos, z.begin() + std::min(z.size(), pos + chunk)));
    out.insert(out.end(), part.begin(), part.end());
  }
  const Bytes iend = Chunk("IEND", {});
  out.insert(out.end(), iend.begin(), iend.end());
  return out;
}

// Random scanlines of `w` x `h` RGB8 with random filter bytes 0..4: any bytes
// are valid filtered data, so every filter runs on every kind of input.
Bytes RandomRaw(uint32_t w, uint32_t h, uint32_t seed, size_t bytes_per_pixel = 3) {
  std::mt19937 rng(seed);
  const size_t line = size_t{w} * bytes_per_pixel;
  Bytes raw(size_t{h} * (line + 1));
  for (uint32_t y = 0; y < h; ++y) {
    raw[y * (line + 1)] = static_cast<uint8_t>(rng() % 5);
    for (size_t i = 1; i <= line; ++i) {
      raw[y * (line + 1) + i] = static_cast<uint8_t>(rng() % 8 == 0 ? rng() : rng() % 4);
    }
  }
  return raw;
}

TEST_CASE("PNG: the whole-buffer path takes plain files and gives the row by row path's pixels",
          "[png]") {
  struct Mode {
    uint8_t color_type, depth;
  };
  const Mode modes[] = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {2, 8}, {3, 1},
                        {3, 2}, {3, 4}, {3, 8}, {4, 8}, {6, 8}};
  uint32_t seed = 500;
  for (const Mode& m : modes) {
    for (auto [w, h] : {std::pair<uint32_t, uint32_t>{37, 23}, {1, 1}, {3, 9}, {211, 40}}) {
      const Source src = RandomSource(w, h, m.color_type, m.depth, false, seed++);
      const Bytes png = Encode(src);
      const DecodeRegion regions[] = {{},
                                      {0, 0, 1, 1},
                                      {h - 1, w - 1, 1, 1},
                                      {h / 2, w / 3, h - h / 2, w - w / 3},
                                      {0, w / 2, (h + 1) / 2, (w + 1) / 2}};
      for (const DecodeRegion& r : regions) {
        INFO("type " << int{m.color_type} << " depth " << int{m.depth} << " " << w << "x" << h
                     << " region " << r.top << "," << r.left << " " << r.height << "x" << r.width);
        const Outcome whole = Run(Path::kWholeBufferOnly, png, r);
        const Outcome rows = Run(Path::kRowByRow, png, r);
        REQUIRE(whole.status.ok());
        REQUIRE(rows.status.ok());
        CHECK(whole.pixels == rows.pixels);
        if (r.height == 0) CHECK(whole.pixels == Expected(src));
      }
    }
  }
  // Every filter type on every kind of row, RGB and RGBA, and the image data
  // cut into many IDAT chunks (1 byte, 7 bytes, one chunk).
  for (size_t bpp : {3, 4}) {
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{1} << 20}) {
      const Bytes raw = RandomRaw(53, 31, static_cast<uint32_t>(bpp * 100 + chunk), bpp);
      const Bytes png = FromZlib(53, 31, 8, bpp == 3 ? 2 : 6, Zlib(raw), chunk);
      const Outcome whole = Run(Path::kWholeBufferOnly, png);
      const Outcome rows = Run(Path::kRowByRow, png);
      INFO("bpp " << bpp << " chunk " << chunk);
      REQUIRE(whole.status.ok());
      REQUIRE(rows.status.ok());
      CHECK(whole.pixels == rows.pixels);
    }
  }
}

TEST_CASE("PNG: what the whole-buffer path passes on, the row by row path decodes and judges",
          "[png]") {
  const uint32_t w = 20, h = 10;
  const Bytes raw = RandomRaw(w, h, 77);
  const Bytes z = Zlib(raw);
  Bytes bad_filter = raw;
  bad_filter[6 * (w * 3 + 1)] = 5;  // row 6's filter type
  Bytes bad_adler = z;
  bad_adler[bad_adler.size() - 1] ^= 1;  // (not .back(): GCC 12 warns, a false positive)
  Bytes junk = z;
  junk.insert(junk.end(), {1, 2, 3});
  const Bytes half1(z.begin(), z.begin() + z.size() / 2), half2(z.begin() + z.size() / 2, z.end());
  struct Case {
    const char* name;
    Bytes png;
    DecodeRegion region;
    bool whole_buffer_takes;
  };
  const std::vector<Case> cases = {
      {"interlaced", Encode(RandomSource(w, h, 2, 8, true, 3)), {}, false},
      {"16-bit samples", Encode(RandomSource(w, h, 2, 16, false, 4)), {}, false},
      {"bytes after the zlib stream", FromZlib(w, h, 8, 2, junk), {}, false},
      {"a bad Adler-32", FromZlib(w, h, 8, 2, bad_adler), {}, false},
      {"a stream that inflates past the last row",
       FromZlib(w, h, 8, 2, Zlib(RandomRaw(w, h + 3, 1))),
       {},
       false},
      {"a stream that ends before the last row",
       FromZlib(w, h, 8, 2, Zlib(Bytes(raw.begin(), raw.end() - 40))),
       {},
       false},
      {"a filter type of 5 in row 6, whole image",
       FromZlib(w, h, 8, 2, Zlib(bad_filter)),
       {},
       false},
      {"a filter type of 5 in row 6, rows above it",
       FromZlib(w, h, 8, 2, Zlib(bad_filter)),
       {1, 2, 5, 10},
       false},
      {"IDAT in two runs",
       Concat({kSig, Ihdr(w, h, 8, 2), Chunk("IDAT", half1), Chunk("tEXt", {'k', 0, 'v'}),
               Chunk("IDAT", half2), Chunk("IEND", {})}),
       {},
       false},
      {"a critical chunk after IDAT",
       InsertBefore(FromZlib(w, h, 8, 2, z), "IEND", Chunk("PLTE", {1, 2, 3})),
       {},
       false},
      {"an ancillary chunk after IDAT",
       InsertBefore(FromZlib(w, h, 8, 2, z), "IEND", Chunk("tEXt", {'k', 0, 'v'})),
       {},
       false},
      {"a huge text chunk after IDAT",
       InsertBefore(FromZlib(w, h, 8, 2, z), "IEND",
                    Chunk("tEXt",
                          [] {
                            Bytes t = {'k', 0};
                            t.resize(20 << 20, 'x');
                            return t;
                          }())),
       {},
       false},
      {"the plain file", FromZlib(w, h, 8, 2, z), {}, true},
      {"the plain file, a region", FromZlib(w, h, 8, 2, z), {3, 4, 2, 7}, true},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Outcome whole = Run(Path::kWholeBufferOnly, c.png, c.region);
    const Outcome rows = Run(Path::kRowByRow, c.png, c.region);
    const Outcome chosen = Run(Path::kAuto, c.png, c.region);
    if (c.whole_buffer_takes) {
      REQUIRE(whole.status.ok());
      CHECK(whole.pixels == rows.pixels);
    } else {
      CHECK(whole.status.code() == absl::StatusCode::kUnimplemented);
    }
    // What stoker runs is the row by row path's verdict, whatever it is.
    CHECK(chosen.status == rows.status);
    CHECK(chosen.pixels == rows.pixels);
  }
}

TEST_CASE("PNG: one decoder across files: nothing leaks from one to the next", "[png]") {
  auto dec = MakePngDecoder();
  // A full palette, then a short one: the second's indices past its PLTE
  // are gray, not the first file's colours.
  Source full = RandomSource(16, 16, 3, 8, false, 31);
  full.palette.resize(256 * 3, 200);
  Source short_plte = RandomSource(16, 16, 3, 8, false, 32);
  short_plte.palette.resize(3 * 3);
  const Source gray16 = RandomSource(16, 16, 0, 16, true, 33);
  const Bytes full_png = Encode(full);
  const Bytes broken(full_png.begin(), full_png.end() - 20);
  Bytes rgb;
  for (int round = 0; round < 2; ++round) {
    REQUIRE(DecodeWhole(dec.get(), full_png, &rgb).ok());
    CHECK(rgb == Expected(full));
    CHECK(!DecodeWhole(dec.get(), broken, &rgb).ok());
    REQUIRE(DecodeWhole(dec.get(), Encode(short_plte), &rgb).ok());
    CHECK(rgb == Expected(short_plte));
    REQUIRE(DecodeWhole(dec.get(), Encode(gray16), &rgb).ok());
    CHECK(rgb == Expected(gray16));
  }
  // A failed ReadHeader leaves no image to decode.
  ImageHeader h;
  CHECK(!dec->ReadHeader(broken.data(), broken.size(), Limits(), &h).ok());
  CHECK(dec->Decode({0, 0, 1, 1}, rgb.data(), 3).code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace stoker::image
