// Tests of the BMP and PNM decoders (stb_decoder.h). Files are built here
// byte by byte (and one by stb's own BMP writer); the expected pixels are
// PIL 9.4's convert("RGB") conversions, computed from the source values.

#include "server/image/decode/stb_decoder.h"

#include <stb/stb_image_write.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace stoker::image {
namespace {

using Bytes = std::vector<uint8_t>;
using Rgb = std::array<uint8_t, 3>;

uint32_t Noise(uint32_t x, uint32_t y, uint32_t seed) {
  uint32_t v = x * 73856093u ^ y * 19349663u ^ seed * 83492791u;
  v ^= v >> 13;
  v *= 0x5bd1e995u;
  return v ^ v >> 15;
}

// Photo-like: a gradient plus noise, in [0, range).
uint32_t Photo(uint32_t x, uint32_t y, uint32_t seed, uint64_t range) {
  return static_cast<uint32_t>((x * 5 + y * 3 + Noise(x, y, seed) % 17) % range);
}

void Put16(Bytes* b, uint32_t v) {
  b->push_back(v & 255);
  b->push_back(v >> 8 & 255);
}
void Put32(Bytes* b, uint32_t v) {
  Put16(b, v & 0xFFFF);
  Put16(b, v >> 16);
}

struct Bmp {
  uint32_t width = 13, height = 7;
  uint32_t hsz = 40;
  uint32_t bits = 24;
  uint32_t compression = 0;
  std::vector<uint32_t> masks;  // 3 after a 40-byte header, else 4 inside it
  std::vector<Rgb> palette;     // written as BGR(X)
  uint32_t colors_used = 0;
  bool top_down = false;
  // Per pixel: a palette index, a 16/32-bit word, or 0xRRGGBB for 24 bits.
  std::function<uint32_t(uint32_t, uint32_t)> value;

  uint32_t Stride() const { return (width * bits + 31) / 32 * 4; }

  Bytes Encode() const {
    Bytes info;
    if (hsz == 12) {
      Put32(&info, 12);
      Put16(&info, width);
      Put16(&info, height);
      Put16(&info, 1);
      Put16(&info, bits);
    } else {
      Put32(&info, hsz);
      Put32(&info, width);
      Put32(&info, top_down ? 0u - height : height);
      Put16(&info, 1);
      Put16(&info, bits);
      Put32(&info, compression);
      Put32(&info, Stride() * height);
      Put32(&info, 2835);
      Put32(&info, 2835);
      Put32(&info, colors_used);
      Put32(&info, 0);
      for (size_t i = 0; hsz > 40 && i < 4; ++i) Put32(&info, i < masks.size() ? masks[i] : 0);
      info.resize(hsz, 0);
      for (size_t i = 0; hsz == 40 && i < masks.size(); ++i) Put32(&info, masks[i]);
    }
    for (const Rgb& c : palette) {
      info.insert(info.end(), {c[2], c[1], c[0]});
      if (hsz != 12) info.push_back(0);
    }
    Bytes file = {'B', 'M'};
    Put32(&file, static_cast<uint32_t>(14 + info.size() + Stride() * height));
    Put32(&file, 0);
    Put32(&file, static_cast<uint32_t>(14 + info.size()));
    file.insert(file.end(), info.begin(), info.end());
    for (uint32_t r = 0; r < height; ++r) {
      const uint32_t y = top_down ? r : height - 1 - r;
      Bytes row(Stride(), 0);
      for (uint32_t x = 0; x < width; ++x) {
        const uint32_t v = value(x, y);
        if (bits < 8) {
          row[x * bits / 8] |= v << (8 - bits - x * bits % 8);
        } else if (bits == 8) {
          row[x] = v;
        } else if (bits == 16) {
          row[2 * x] = v & 255, row[2 * x + 1] = v >> 8;
        } else if (bits == 24) {
          row[3 * x] = v & 255, row[3 * x + 1] = v >> 8 & 255, row[3 * x + 2] = v >> 16;
        } else {
          for (int i = 0; i < 4; ++i) row[4 * x + i] = v >> (8 * i) & 255;
        }
      }
      file.insert(file.end(), row.begin(), row.end());
    }
    return file;
  }

  // PIL's convert("RGB") of pixel (x, y).
  Rgb Expected(uint32_t x, uint32_t y) const {
    const uint32_t v = value(x, y);
    if (bits <= 8) {
      const uint32_t colors = colors_used ? colors_used : 1u << bits;
      if (v < colors && v < palette.size()) return palette[v];
      return {uint8_t(v), uint8_t(v), uint8_t(v)};
    }
    if (bits == 16) {
      const bool rgb565 = !masks.empty() && masks[0] == 0xF800;
      const uint32_t r = rgb565 ? v >> 11 & 31 : v >> 10 & 31,
                     g = rgb565 ? v >> 5 & 63 : v >> 5 & 31;
      return {uint8_t(r * 255 / 31), uint8_t(g * 255 / (rgb565 ? 63 : 31)),
              uint8_t((v & 31) * 255 / 31)};
    }
    if (bits == 24) return {uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
    uint32_t m[3] = {0xFF0000, 0xFF00, 0xFF};
    if (compression == 3 && masks[0] != 0) std::copy(masks.begin(), masks.begin() + 3, m);
    Rgb out;
    for (int c = 0; c < 3; ++c) {
      int shift = 0;
      while (!(m[c] >> shift & 1)) ++shift;
      out[c] = static_cast<uint8_t>((v & m[c]) >> shift);
    }
    return out;
  }

  Bytes ExpectedImage() const {
    Bytes out;
    for (uint32_t y = 0; y < height; ++y) {
      for (uint32_t x = 0; x < width; ++x) {
        const Rgb c = Expected(x, y);
        out.insert(out.end(), c.begin(), c.end());
      }
    }
    return out;
  }
};

std::vector<Rgb> RandomPalette(size_t n, uint32_t seed) {
  std::vector<Rgb> p(n);
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) p[i][c] = Noise(static_cast<uint32_t>(i), c, seed) & 255;
  }
  return p;
}

// P5 ([h][w]) or P6 ([h][w][3]) samples from value(x, y, c), after `header`.
Bytes Pnm(const std::string& header, uint32_t w, uint32_t h, int channels, uint32_t maxval,
          const std::function<uint32_t(uint32_t, uint32_t, int)>& value) {
  Bytes file(header.begin(), header.end());
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        const uint32_t v = value(x, y, c);
        if (maxval > 255) file.push_back(v >> 8);
        file.push_back(v & 255);
      }
    }
  }
  return file;
}

std::string PnmHeader(char kind, uint32_t w, uint32_t h, uint32_t maxval) {
  return "P" + std::string(1, kind) + "\n" + std::to_string(w) + " " + std::to_string(h) + "\n" +
         std::to_string(maxval) + "\n";
}

// PIL's PpmDecoder: min(out_max, round(v / maxval * out_max)), then clipped
// to 255 by convert (mode I).
uint8_t PilPnm(uint32_t v, uint32_t maxval, uint32_t out_max) {
  const double r = std::nearbyint(static_cast<double>(v) / maxval * out_max);
  return static_cast<uint8_t>(std::min(255.0, std::min<double>(out_max, r)));
}

absl::Status DecodeAll(ImageDecoder* d, const Bytes& file, Bytes* out,
                       ImageHeader* header = nullptr, uint64_t max_pixels = 64ull << 20) {
  DecodeLimits limits;
  limits.max_pixels = max_pixels;
  ImageHeader h;
  absl::Status s = d->ReadHeader(file.data(), file.size(), limits, &h);
  if (header != nullptr) *header = h;
  if (!s.ok()) return s;
  if (h.width == 0 || h.height == 0) return absl::InternalError("zero size");
  out->assign(size_t{h.width} * h.height * 3, 0);
  return d->Decode(DecodeRegion{0, 0, h.height, h.width}, out->data(), size_t{h.width} * 3);
}

void CheckBmp(const Bmp& bmp, const char* mode) {
  auto d = MakeBmpDecoder();
  Bytes got;
  ImageHeader h;
  const absl::Status s = DecodeAll(d.get(), bmp.Encode(), &got, &h);
  INFO("bits " << bmp.bits << " hsz " << bmp.hsz << " compression " << bmp.compression << ": "
               << s.ToString());
  REQUIRE(s.ok());
  CHECK(h.format == ImageFormat::kBmp);
  CHECK(h.width == bmp.width);
  CHECK(h.height == bmp.height);
  CHECK(std::string(h.mode) == mode);
  CHECK(got == bmp.ExpectedImage());
}

Bmp Palette(uint32_t bits, uint32_t hsz, uint32_t seed) {
  Bmp b;
  b.bits = bits;
  b.hsz = hsz;
  b.palette = RandomPalette(size_t{1} << bits, seed);
  b.value = [bits, seed](uint32_t x, uint32_t y) { return Photo(x, y, seed, 1u << bits); };
  return b;
}

absl::StatusCode HeaderCode(const Bytes& file, bool bmp = true, uint64_t max_pixels = 64ull << 20) {
  auto d = bmp ? MakeBmpDecoder() : MakePnmDecoder();
  DecodeLimits limits;
  limits.max_pixels = max_pixels;
  ImageHeader h;
  return d->ReadHeader(file.data(), file.size(), limits, &h).code();
}

std::string HeaderMessage(const Bytes& file, bool bmp) {
  auto d = bmp ? MakeBmpDecoder() : MakePnmDecoder();
  ImageHeader h;
  return std::string(d->ReadHeader(file.data(), file.size(), DecodeLimits{}, &h).message());
}

void Set32(Bytes* b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*b)[at + i] = v >> (8 * i) & 255;
}

TEST_CASE("BMP: palettes, every depth and header size", "[stb]") {
  for (uint32_t bits : {1u, 4u, 8u}) {
    for (uint32_t hsz : {12u, 40u, 64u, 108u, 124u}) {
      for (bool top_down : {false, true}) {
        if (hsz == 12 && top_down) continue;
        Bmp b = Palette(bits, hsz, bits * 100 + hsz);
        b.top_down = top_down;
        CheckBmp(b, "P");
      }
    }
  }
}

TEST_CASE("BMP: short palettes: entries past biClrUsed are grey", "[stb]") {
  Bmp b = Palette(8, 40, 3);
  b.palette.resize(5);
  b.colors_used = 5;
  CheckBmp(b, "P");
  Bmp four = Palette(4, 40, 4);
  four.palette.resize(3);
  four.colors_used = 3;
  CheckBmp(four, "P");
}

TEST_CASE("BMP: grey palettes: modes 1 and L", "[stb]") {
  Bmp one = Palette(1, 40, 5);
  one.palette = {{0, 0, 0}, {255, 255, 255}};
  CheckBmp(one, "1");
  Bmp inverted = one;
  inverted.palette = {{255, 255, 255}, {0, 0, 0}};
  CheckBmp(inverted, "P");
  Bmp grey = Palette(8, 40, 6);
  for (uint32_t i = 0; i < 256; ++i) grey.palette[i] = {uint8_t(i), uint8_t(i), uint8_t(i)};
  CheckBmp(grey, "L");
  grey.palette.resize(30);
  grey.colors_used = 30;
  CheckBmp(grey, "L");
}

TEST_CASE("BMP: 16-bit 555 and 565: PIL's v * 255 / max, every word", "[stb]") {
  Bmp b;
  b.width = b.height = 256;
  b.bits = 16;
  b.value = [](uint32_t x, uint32_t y) { return y * 256 + x; };
  CheckBmp(b, "RGB");  // BI_RGB: 555
  b.compression = 3;
  b.masks = {0x7C00, 0x3E0, 0x1F};
  CheckBmp(b, "RGB");
  b.masks = {0xF800, 0x7E0, 0x1F};
  CheckBmp(b, "RGB");
  b.hsz = 124;
  b.masks = {0xF800, 0x7E0, 0x1F, 0x0};
  CheckBmp(b, "RGB");
  b.masks = {0x7C00, 0x3E0, 0x1F, 0x8000};  // alpha mask ignored
  CheckBmp(b, "RGB");
}

TEST_CASE("BMP: 24-bit, bottom-up and top-down, every header", "[stb]") {
  for (uint32_t hsz : {12u, 40u, 64u, 108u, 124u}) {
    for (bool top_down : {false, true}) {
      if (hsz == 12 && top_down) continue;
      Bmp b;
      b.hsz = hsz;
      b.top_down = top_down;
      b.width = 17;
      b.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 7) & 0xFFFFFF; };
      CheckBmp(b, "RGB");
    }
  }
  Bmp fields;
  fields.compression = 3;
  fields.masks = {0xFF0000, 0xFF00, 0xFF};
  fields.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 8) & 0xFFFFFF; };
  CheckBmp(fields, "RGB");
}

TEST_CASE("BMP: 32-bit: BI_RGB and every bit field layout PIL reads", "[stb]") {
  struct Case {
    uint32_t hsz, compression;
    std::vector<uint32_t> masks;
    const char* mode;
  };
  const Case cases[] = {
      {40, 0, {}, "RGB"},
      {124, 0, {0xFF, 0xFF00, 0xFF0000, 0xFF000000}, "RGB"},
      {40, 3, {0xFF0000, 0xFF00, 0xFF}, "RGB"},
      {40, 3, {0xFF000000, 0xFF0000, 0xFF00}, "RGB"},
      {108, 3, {0xFF0000, 0xFF00, 0xFF, 0}, "RGB"},
      {108, 3, {0xFF000000, 0xFF0000, 0xFF00, 0xFF}, "RGBA"},
      {108, 3, {0xFF, 0xFF00, 0xFF0000, 0xFF000000}, "RGBA"},
      {124, 3, {0xFF0000, 0xFF00, 0xFF, 0xFF000000}, "RGBA"},
      {124, 3, {0, 0, 0, 0}, "RGBA"},
  };
  for (const Case& c : cases) {
    Bmp b;
    b.bits = 32;
    b.hsz = c.hsz;
    b.compression = c.compression;
    b.masks = c.masks;
    b.top_down = true;
    b.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 9) + x * 0x50505; };
    CheckBmp(b, c.mode);
  }
}

TEST_CASE("BMP: written by stb_image_write decodes to its source", "[stb]") {
  const int w = 31, h = 9;
  Bytes src(w * h * 3);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = Photo(static_cast<uint32_t>(i % (w * 3)), i / (w * 3), 10, 256);
  Bytes file;
  REQUIRE(stbi_write_bmp_to_func(
      [](void* ctx, void* data, int size) {
        auto* f = static_cast<Bytes*>(ctx);
        f->insert(f->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
      },
      &file, w, h, 3, src.data()));
  auto d = MakeBmpDecoder();
  Bytes got;
  REQUIRE(DecodeAll(d.get(), file, &got).ok());
  CHECK(got == src);
}

TEST_CASE("BMP: pixel data offsets as PIL reads them", "[stb]") {
  Bmp b = Palette(8, 40, 11);
  const Bytes plain = b.Encode();
  Bytes want;
  auto d = MakeBmpDecoder();
  REQUIRE(DecodeAll(d.get(), plain, &want).ok());
  const size_t data_at = 14 + 40 + 1024;

  SECTION("a gap before the pixels") {
    Bytes f = plain;
    f.insert(f.begin() + data_at, 37, 0xAB);
    Set32(&f, 10, data_at + 37);
    Bytes got;
    REQUIRE(DecodeAll(d.get(), f, &got).ok());
    CHECK(got == want);
  }
  SECTION("offset 0: right after the palette") {
    Bytes f = plain;
    Set32(&f, 10, 0);
    Bytes got;
    REQUIRE(DecodeAll(d.get(), f, &got).ok());
    CHECK(got == want);
  }
  SECTION("offset right after the header: moved past 4 * colours") {
    Bytes f = plain;
    Set32(&f, 10, 54);
    Bytes got;
    REQUIRE(DecodeAll(d.get(), f, &got).ok());
    CHECK(got == want);
  }
  SECTION("the last row's padding may be missing, nothing else") {
    REQUIRE(b.Stride() > b.width);
    for (size_t cut = 1; cut <= 8; ++cut) {
      Bytes f(plain.begin(), plain.end() - cut);
      Bytes got;
      const absl::Status s = DecodeAll(d.get(), f, &got);
      if (cut <= b.Stride() - b.width) {
        REQUIRE(s.ok());
        CHECK(got == want);
      } else {
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      }
    }
  }
}

TEST_CASE("PNM: P5 and P6 at every maxval kind, every sample value", "[stb]") {
  for (uint32_t maxval : {1u, 2u, 10u, 100u, 254u, 255u, 256u, 300u, 1000u, 4095u, 65535u}) {
    for (int channels : {1, 3}) {
      const uint32_t w = 256, h = maxval > 255 ? 256 : 1;
      const auto value = [](uint32_t x, uint32_t y, int c) { return (y * 256 + x) ^ (c * 0x1111); };
      const uint32_t limit = maxval > 255 ? 65536 : 256;
      const auto sample = [&](uint32_t x, uint32_t y, int c) { return value(x, y, c) % limit; };
      const char kind = channels == 3 ? '6' : '5';
      const Bytes file = Pnm(PnmHeader(kind, w, h, maxval), w, h, channels, maxval, sample);
      auto d = MakePnmDecoder();
      Bytes got;
      ImageHeader header;
      const absl::Status s = DecodeAll(d.get(), file, &got, &header);
      INFO("P" << kind << " maxval " << maxval << ": " << s.ToString());
      REQUIRE(s.ok());
      CHECK(header.format == ImageFormat::kPnm);
      CHECK(std::string(header.mode) == (channels == 3 ? "RGB" : maxval > 255 ? "I" : "L"));
      const uint32_t out_max = channels == 1 && maxval > 255 ? 65535 : 255;
      Bytes want;
      for (uint32_t y = 0; y < h; ++y) {
        for (uint32_t x = 0; x < w; ++x) {
          for (int c = 0; c < 3; ++c)
            want.push_back(PilPnm(sample(x, y, channels == 3 ? c : 0), maxval, out_max));
        }
      }
      CHECK(got == want);
    }
  }
}

TEST_CASE("PNM: headers: comments and whitespace as PIL reads them", "[stb]") {
  const auto value = [](uint32_t x, uint32_t y, int c) { return Photo(x, y, 20 + c, 256); };
  const Bytes want_file = Pnm(PnmHeader('6', 45, 7, 255), 45, 7, 3, 255, value);
  auto d = MakePnmDecoder();
  Bytes want;
  REQUIRE(DecodeAll(d.get(), want_file, &want).ok());
  for (const char* header :
       {"P6\n# by hand\n45 7\n255\n", "P6 45\t7\r255\r", "P6\n4# inside a token\r5 7 # more\n255\n",
        "P6\n45 7\n255#after\n\n", "P6\f45\v7 0255 "}) {
    Bytes got;
    const absl::Status s = DecodeAll(d.get(), Pnm(header, 45, 7, 3, 255, value), &got);
    INFO(header << ": " << s.ToString());
    REQUIRE(s.ok());
    CHECK(got == want);
  }
}

TEST_CASE("BMP/PNM: Regions equal the whole decode's window", "[stb]") {
  Bmp palette = Palette(4, 40, 30);
  palette.width = 37;
  palette.height = 23;
  Bmp words;
  words.width = 29;
  words.height = 19;
  words.bits = 16;
  words.compression = 3;
  words.masks = {0xF800, 0x7E0, 0x1F};
  words.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 31) & 0xFFFF; };
  const Bytes files[] = {
      palette.Encode(),
      words.Encode(),
      Pnm(PnmHeader('6', 33, 21, 1000), 33, 21, 3, 1000,
          [](uint32_t x, uint32_t y, int c) { return Photo(x, y, 32 + c, 1100); }),
      Pnm(PnmHeader('5', 33, 21, 77), 33, 21, 1, 77,
          [](uint32_t x, uint32_t y, int) { return Photo(x, y, 35, 80); }),
  };
  for (const Bytes& file : files) {
    auto d = file[0] == 'B' ? MakeBmpDecoder() : MakePnmDecoder();
    Bytes whole;
    ImageHeader h;
    REQUIRE(DecodeAll(d.get(), file, &whole, &h).ok());
    const uint32_t W = h.width, H = h.height;
    const DecodeRegion regions[] = {{0, 0, H, W},         {0, 0, 1, 1},        {H - 1, W - 1, 1, 1},
                                    {0, W - 5, H, 5},     {H - 4, 0, 4, W},    {3, 7, 9, 11},
                                    {H / 2, 1, 1, W - 2}, {1, W / 2, H - 2, 1}};
    for (const DecodeRegion& r : regions) {
      const size_t stride = r.width * 3 + 5;
      Bytes out(stride * r.height, 0xEE);
      REQUIRE(d->Decode(r, out.data(), stride).ok());
      for (uint32_t y = 0; y < r.height; ++y) {
        const uint8_t* want = whole.data() + ((size_t{r.top} + y) * W + r.left) * 3;
        INFO("region " << r.top << "," << r.left << " " << r.height << "x" << r.width << " row "
                       << y);
        CHECK(std::memcmp(out.data() + y * stride, want, r.width * 3) == 0);
        for (size_t i = r.width * 3; i < stride; ++i) CHECK(out[y * stride + i] == 0xEE);
      }
    }
    Bytes out(size_t{W} * H * 3 + 64);
    for (const DecodeRegion& bad :
         {DecodeRegion{0, 0, 0, 1}, DecodeRegion{0, 0, 1, 0}, DecodeRegion{H, 0, 1, 1},
          DecodeRegion{0, W, 1, 1}, DecodeRegion{1, 0, H, 1}, DecodeRegion{0, 1, 1, W},
          DecodeRegion{0xFFFFFFFF, 0, 2, 1}}) {
      CHECK(d->Decode(bad, out.data(), size_t{W} * 3).code() == absl::StatusCode::kInvalidArgument);
    }
    CHECK(d->Decode(DecodeRegion{0, 0, 1, 4}, out.data(), 11).code() ==
          absl::StatusCode::kInvalidArgument);
  }
  auto fresh = MakeBmpDecoder();
  Bytes out(3);
  CHECK(fresh->Decode(DecodeRegion{0, 0, 1, 1}, out.data(), 3).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("BMP/PNM: Caps: declared sizes over max_pixels fail before any allocation", "[stb]") {
  // Tiny files declaring huge images: ReadHeader refuses them.
  Bytes bmp = Palette(8, 40, 40).Encode();
  for (uint32_t side : {65535u, 70000u, 0x7FFFFFFFu}) {
    Set32(&bmp, 18, side);
    Set32(&bmp, 22, side);
    CHECK(HeaderCode(bmp) == absl::StatusCode::kResourceExhausted);
    const std::string h = PnmHeader('6', side, side, 255);
    CHECK(HeaderCode(Bytes(h.begin(), h.end()), false) == absl::StatusCode::kResourceExhausted);
  }
  // The cap is exact: w * h == max_pixels passes.
  Bmp b;
  b.value = [](uint32_t x, uint32_t y) { return x + y; };
  CHECK(HeaderCode(b.Encode(), true, 13 * 7) == absl::StatusCode::kOk);
  CHECK(HeaderCode(b.Encode(), true, 13 * 7 - 1) == absl::StatusCode::kResourceExhausted);
  const Bytes pnm =
      Pnm(PnmHeader('5', 13, 7, 255), 13, 7, 1, 255, [](uint32_t, uint32_t, int) { return 1u; });
  CHECK(HeaderCode(pnm, false, 13 * 7) == absl::StatusCode::kOk);
  CHECK(HeaderCode(pnm, false, 13 * 7 - 1) == absl::StatusCode::kResourceExhausted);
  // A side over stb's 2^24, even under the cap.
  const std::string wide = PnmHeader('5', (1u << 24) + 1, 1, 255);
  CHECK(HeaderCode(Bytes(wide.begin(), wide.end()), false, 1ull << 40) ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("BMP: hostile sizes, palettes and offsets", "[stb]") {
  const Bytes base = Palette(8, 40, 50).Encode();
  const auto with32 = [&base](size_t at, uint32_t v) {
    Bytes f = base;
    Set32(&f, at, v);
    return f;
  };
  using Code = absl::StatusCode;
  CHECK(HeaderCode(with32(18, 0x80000000u)) == Code::kResourceExhausted);  // width 2^31
  CHECK(HeaderCode(with32(18, 0xFFFFFFFFu)) == Code::kResourceExhausted);  // width -1
  CHECK(HeaderCode(with32(22, 0x80000000u)) ==
        Code::kResourceExhausted);  // height -2^31: bottom-up
  CHECK(HeaderCode(with32(22, 0xFF000000u)) == Code::kResourceExhausted);  // 2^24 rows top-down
  CHECK(HeaderCode(with32(18, 0)) == Code::kInvalidArgument);
  CHECK(HeaderCode(with32(22, 0)) == Code::kInvalidArgument);
  CHECK(HeaderCode(with32(46, 257)) == Code::kInvalidArgument);  // colours
  CHECK(HeaderCode(with32(46, 0xFFFFFFFFu)) == Code::kInvalidArgument);
  CHECK(HeaderCode(with32(10, static_cast<uint32_t>(base.size()))) == Code::kInvalidArgument);
  CHECK(HeaderCode(with32(10, 0xFFFFFFFFu)) == Code::kInvalidArgument);
  CHECK(HeaderMessage(with32(10, 0xFFFFFFF0u), true).find("offset") != std::string::npos);
  // A palette running past the end of the file.
  Bytes short_palette(base.begin(), base.begin() + 54 + 400);
  CHECK(HeaderCode(short_palette) == Code::kInvalidArgument);
  CHECK(HeaderMessage(short_palette, true).find("palette") != std::string::npos);
  // Height 0xFFFFFFFF is one row, top-down: valid.
  Bmp one = Palette(8, 40, 51);
  one.height = 1;
  one.top_down = true;
  CheckBmp(one, "P");
}

TEST_CASE("BMP/PNM: Refused kinds are UNIMPLEMENTED and named", "[stb]") {
  using Code = absl::StatusCode;
  Bytes base = Palette(8, 40, 60).Encode();
  const auto patch = [](Bytes f, size_t at, uint32_t v, int bytes = 4) {
    for (int i = 0; i < bytes; ++i) f[at + i] = v >> (8 * i) & 255;
    return f;
  };
  const struct {
    Bytes file;
    Code code;
    const char* word;
  } cases[] = {
      {patch(base, 30, 1), Code::kUnimplemented, "RLE8"},
      {patch(base, 30, 2), Code::kUnimplemented, "RLE4"},
      {patch(base, 30, 4), Code::kUnimplemented, "compression"},
      {patch(base, 30, 3), Code::kUnimplemented, "bit fields"},  // bitfields at 8 bits
      {patch(base, 28, 2, 2), Code::kUnimplemented, "2-bit"},
      {patch(base, 14, 56), Code::kUnimplemented, "56-byte"},
      {patch(base, 14, 41), Code::kInvalidArgument, "header size"},
      {patch(base, 0, 'X', 1), Code::kInvalidArgument, "BM"},
  };
  for (const auto& c : cases) {
    auto d = MakeBmpDecoder();
    ImageHeader h;
    const absl::Status s = d->ReadHeader(c.file.data(), c.file.size(), DecodeLimits{}, &h);
    INFO(s.ToString());
    CHECK(s.code() == c.code);
    CHECK(std::string(s.message()).find(c.word) != std::string::npos);
  }
  // Grey palettes PIL reads as something else than palette lookups.
  Bmp grey4 = Palette(4, 40, 61);
  for (uint32_t i = 0; i < 16; ++i) grey4.palette[i] = {uint8_t(i), uint8_t(i), uint8_t(i)};
  CHECK(HeaderCode(grey4.Encode()) == Code::kUnimplemented);
  Bmp bw8 = Palette(8, 40, 62);
  bw8.palette = {{0, 0, 0}, {255, 255, 255}};
  bw8.colors_used = 2;
  CHECK(HeaderCode(bw8.Encode()) == Code::kUnimplemented);
  Bmp masks;
  masks.bits = 32;
  masks.hsz = 108;
  masks.compression = 3;
  masks.masks = {0xFF00, 0xFF, 0xFF0000, 0};
  masks.value = [](uint32_t x, uint32_t) { return x; };
  CHECK(HeaderCode(masks.Encode()) == Code::kUnimplemented);

  const struct {
    const char* text;
    Code code;
    const char* word;
  } pnm[] = {
      {"P1\n2 1\n0 1\n", Code::kUnimplemented, "P1"},
      {"P2\n2 1\n255\n0 255\n", Code::kUnimplemented, "P2"},
      {"P3\n1 1\n255\n1 2 3\n", Code::kUnimplemented, "P3"},
      {"P4\n8 1\n\xAA", Code::kUnimplemented, "P4"},
      {"P6#x\n1 1\n255\n123", Code::kInvalidArgument, "whitespace"},
      {"P6\n+1 1\n255\n123", Code::kInvalidArgument, "+1"},
      {"P6\n1 1\n0\n123", Code::kInvalidArgument, "maxval"},
      {"P6\n1 1\n65536\n123456", Code::kInvalidArgument, "maxval"},
      {"P6\n0 1\n255\n", Code::kInvalidArgument, "zero"},
      {"P6\n12345678901 1\n255\n", Code::kInvalidArgument, "too long"},
      {"P6\n1 1\n", Code::kInvalidArgument, "truncated"},
      {"P7\n1 1\n255\n123", Code::kInvalidArgument, "PNM"},
  };
  for (const auto& c : pnm) {
    const Bytes f(c.text, c.text + std::strlen(c.text));
    auto d = MakePnmDecoder();
    ImageHeader h;
    const absl::Status s = d->ReadHeader(f.data(), f.size(), DecodeLimits{}, &h);
    INFO(c.text << ": " << s.ToString());
    CHECK(s.code() == c.code);
    CHECK(std::string(s.message()).find(c.word) != std::string::npos);
  }
  // Each factory reads its own format only.
  const std::string p6 = PnmHeader('6', 1, 1, 255) + "abc";
  CHECK(HeaderCode(Bytes(p6.begin(), p6.end()), true) == Code::kInvalidArgument);
  CHECK(HeaderCode(base, false) == Code::kInvalidArgument);
}

TEST_CASE("BMP/PNM: Truncation at every cut point fails cleanly", "[stb]") {
  Bmp rgb;  // 24-bit, 4 pixels wide: rows without padding
  rgb.width = 4;
  rgb.height = 5;
  rgb.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 70) & 0xFFFFFF; };
  Bmp os2 = Palette(8, 12, 71);
  os2.width = 8;
  Bmp fields;
  fields.width = 2;
  fields.height = 3;
  fields.bits = 16;
  fields.compression = 3;
  fields.masks = {0xF800, 0x7E0, 0x1F};
  fields.value = [](uint32_t x, uint32_t y) { return x * 999 + y; };
  const Bytes files[] = {
      rgb.Encode(),
      os2.Encode(),
      fields.Encode(),
      Pnm(PnmHeader('5', 3, 4, 65535), 3, 4, 1, 65535,
          [](uint32_t x, uint32_t y, int) { return x * 7000 + y; }),
      Pnm("P6 # c\n2 2\n9\n", 2, 2, 3, 9, [](uint32_t x, uint32_t y, int c) { return x + y + c; }),
  };
  for (const Bytes& file : files) {
    auto d = file[0] == 'B' ? MakeBmpDecoder() : MakePnmDecoder();
    Bytes whole;
    REQUIRE(DecodeAll(d.get(), file, &whole).ok());
    for (size_t cut = 0; cut < file.size(); ++cut) {
      const Bytes part(file.begin(), file.begin() + cut);
      Bytes out;
      const absl::Status s = DecodeAll(d.get(), part, &out);
      INFO("cut at " << cut << " of " << file.size() << ": " << s.ToString());
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST_CASE("BMP/PNM: Corrupt bytes never crash, successes are well formed", "[stb]") {
  // Neither format has a checksum: flipped bytes either fail cleanly or
  // decode to an image of the declared size.
  const Bytes seeds[] = {Palette(4, 40, 80).Encode(), Palette(8, 12, 81).Encode(),
                         Pnm(PnmHeader('6', 5, 4, 300), 5, 4, 3, 300,
                             [](uint32_t x, uint32_t y, int c) { return x * y * c; })};
  for (const Bytes& seed : seeds) {
    auto d = seed[0] == 'B' ? MakeBmpDecoder() : MakePnmDecoder();
    for (uint32_t i = 0; i < 600; ++i) {
      Bytes f = seed;
      const uint32_t r = Noise(i, 0, 82);
      f[r % std::min<size_t>(f.size(), 64)] ^= 1 + (r >> 8) % 255;
      f[(r >> 16) % f.size()] ^= 0x80;
      Bytes out;
      ImageHeader h;
      const absl::Status s = DecodeAll(d.get(), f, &out, &h, 1 << 16);
      if (s.ok()) CHECK(uint64_t{h.width} * h.height <= (1u << 16));
    }
  }
}

TEST_CASE("BMP/PNM: One decoder across files: nothing leaks from one to the next", "[stb]") {
  Bmp pal = Palette(8, 40, 90);
  Bmp grey = Palette(4, 124, 91);
  grey.palette.resize(2);
  grey.colors_used = 2;
  Bmp words;
  words.bits = 16;
  words.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 92) & 0xFFFF; };
  Bmp rgba;
  rgba.bits = 32;
  rgba.hsz = 108;
  rgba.compression = 3;
  rgba.masks = {0xFF, 0xFF00, 0xFF0000, 0xFF000000};
  rgba.value = [](uint32_t x, uint32_t y) { return Noise(x, y, 93); };
  Bytes truncated = pal.Encode();
  truncated.resize(truncated.size() - 20);
  const Bytes bmps[] = {pal.Encode(),   truncated,     grey.Encode(),
                        words.Encode(), rgba.Encode(), pal.Encode()};
  const Bytes pnms[] = {
      Pnm(PnmHeader('5', 7, 3, 1000), 7, 3, 1, 1000,
          [](uint32_t x, uint32_t y, int) { return x * 130 + y; }),
      Pnm(PnmHeader('6', 4, 9, 255), 4, 9, 3, 255,
          [](uint32_t x, uint32_t y, int c) { return x * 60 + y + c; }),
      Bytes{'P', '6', '\n', '9'},
      Pnm(PnmHeader('5', 7, 3, 10), 7, 3, 1, 10, [](uint32_t x, uint32_t y, int) { return x + y; }),
      Pnm(PnmHeader('6', 4, 9, 3000), 4, 9, 3, 3000,
          [](uint32_t x, uint32_t y, int c) { return x * 700 + y + c; }),
  };
  for (bool bmp : {true, false}) {
    auto reused = bmp ? MakeBmpDecoder() : MakePnmDecoder();
    for (const Bytes& f : bmp ? std::vector<Bytes>(std::begin(bmps), std::end(bmps))
                              : std::vector<Bytes>(std::begin(pnms), std::end(pnms))) {
      auto fresh = bmp ? MakeBmpDecoder() : MakePnmDecoder();
      Bytes a, b;
      ImageHeader ha, hb;
      const absl::Status sa = DecodeAll(reused.get(), f, &a, &ha);
      const absl::Status sb = DecodeAll(fresh.get(), f, &b, &hb);
      CHECK(sa.code() == sb.code());
      if (sa.ok() && sb.ok()) {
        CHECK(a == b);
        CHECK(std::string(ha.mode) == hb.mode);
      }
    }
  }
}

}  // namespace
}  // namespace stoker::image
