#include "server/image/decode/tiff_decoder.h"

#include <tiffio.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace stoker::image {
namespace {

// ---- Writing TIFF files into memory with libtiff's own writer. ----

struct Sink {
  std::vector<uint8_t> bytes;
  uint64_t pos = 0;
};

tmsize_t SinkRead(thandle_t h, void* buf, tmsize_t n) {
  Sink* s = static_cast<Sink*>(h);
  const uint64_t k =
      s->pos >= s->bytes.size() ? 0 : std::min<uint64_t>(n, s->bytes.size() - s->pos);
  std::memcpy(buf, s->bytes.data() + s->pos, k);
  s->pos += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t SinkWrite(thandle_t h, void* buf, tmsize_t n) {
  Sink* s = static_cast<Sink*>(h);
  if (s->bytes.size() < s->pos + n) s->bytes.resize(s->pos + n);
  std::memcpy(s->bytes.data() + s->pos, buf, n);
  s->pos += n;
  return n;
}
toff_t SinkSeek(thandle_t h, toff_t off, int whence) {
  Sink* s = static_cast<Sink*>(h);
  s->pos = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : s->bytes.size()) + off;
  return s->pos;
}
int SinkClose(thandle_t) { return 0; }
toff_t SinkSize(thandle_t h) { return static_cast<Sink*>(h)->bytes.size(); }
int SinkMap(thandle_t, void**, toff_t*) { return 0; }
void SinkUnmap(thandle_t, void*, toff_t) {}
int Quiet(TIFF*, void*, const char*, const char*, va_list) { return 1; }

struct Spec {
  uint32_t width = 37, height = 29;
  uint16_t bits = 8, spp = 3, photometric = PHOTOMETRIC_RGB;
  std::vector<uint16_t> extras;
  uint16_t compression = COMPRESSION_NONE;
  uint16_t predictor = 1;
  bool planar = false, big_endian = false, lsb_first = false;
  uint32_t rows_per_strip = 7;
  uint32_t tile = 0;  // tile width and height when non-zero
  uint32_t pages = 1;
  int pattern = 0;  // 0 noise plus gradients, 1 smooth gradients, 2 zeros
};

// Samples of pixel (y, x), channel c: noise plus gradients, `bits` wide.
uint32_t SampleAt(const Spec& s, uint32_t y, uint32_t x, uint32_t c) {
  if (s.pattern == 2) return 0;
  if (s.pattern == 1) return (x * 4 + y * 3 + c * 40) & ((1u << s.bits) - 1);
  uint32_t v = (x * 2654435761u) ^ (y * 40503u) ^ (c * 977u);
  v ^= v >> 13;
  v = (v + x * 7 + y * 3) & ((1u << s.bits) - 1);
  if (c == 3 && s.spp >= 4 && (x % 5) == 0)
    v = x % 10 == 0 ? 0 : (1u << s.bits) - 1;  // alpha 0, max
  return v;
}

// A 2^bits palette of 16-bit entries.
std::vector<uint16_t> Palette(int bits, int channel) {
  std::vector<uint16_t> p(1u << bits);
  for (size_t i = 0; i < p.size(); ++i)
    p[i] = static_cast<uint16_t>(i * 4099u + channel * 20011u + 77);
  return p;
}

std::vector<uint8_t> Write(const Spec& s) {
  Sink sink;
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  TIFFOpenOptionsSetErrorHandlerExtR(opts, Quiet, nullptr);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, Quiet, nullptr);
  TIFF* t = TIFFClientOpenExt("mem", s.big_endian ? "wb" : "wl", &sink, SinkRead, SinkWrite,
                              SinkSeek, SinkClose, SinkSize, SinkMap, SinkUnmap, opts);
  TIFFOpenOptionsFree(opts);
  REQUIRE(t != nullptr);
  for (uint32_t page = 0; page < s.pages; ++page) {
    const uint32_t w = s.width + page, h = s.height + page;
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, s.bits);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, s.spp);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s.photometric);
    TIFFSetField(t, TIFFTAG_COMPRESSION, s.compression);
    if (s.predictor != 1) TIFFSetField(t, TIFFTAG_PREDICTOR, s.predictor);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, s.planar ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG);
    if (s.lsb_first) TIFFSetField(t, TIFFTAG_FILLORDER, FILLORDER_LSB2MSB);
    if (!s.extras.empty()) TIFFSetField(t, TIFFTAG_EXTRASAMPLES, s.extras.size(), s.extras.data());
    if (s.photometric == PHOTOMETRIC_PALETTE) {
      std::vector<uint16_t> r = Palette(s.bits, 0), g = Palette(s.bits, 1), b = Palette(s.bits, 2);
      TIFFSetField(t, TIFFTAG_COLORMAP, r.data(), g.data(), b.data());
    }
    if (s.compression == COMPRESSION_JPEG) {
      TIFFSetField(t, TIFFTAG_JPEGQUALITY, 90);
      if (s.photometric == PHOTOMETRIC_YCBCR)
        TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    }
    const uint32_t cw = s.tile ? s.tile : w, ch = s.tile ? s.tile : std::min(s.rows_per_strip, h);
    if (s.tile) {
      TIFFSetField(t, TIFFTAG_TILEWIDTH, s.tile);
      TIFFSetField(t, TIFFTAG_TILELENGTH, s.tile);
    } else {
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, ch);
    }
    const uint32_t per_chunk = s.planar ? 1 : s.spp;
    const size_t row_bytes = (size_t{cw} * per_chunk * s.bits + 7) / 8;
    const uint32_t planes = s.planar ? s.spp : 1;
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint32_t y0 = 0; y0 < h; y0 += ch) {
        for (uint32_t x0 = 0; x0 < (s.tile ? w : 1); x0 += cw) {
          std::vector<uint8_t> buf(row_bytes * ch);
          for (uint32_t y = 0; y < ch; ++y) {
            for (uint32_t x = 0; x < cw; ++x) {
              for (uint32_t c = 0; c < per_chunk; ++c) {
                const uint32_t v =
                    (y0 + y < h && x0 + x < w) ? SampleAt(s, y0 + y, x0 + x, s.planar ? p : c) : 0;
                const uint64_t i = uint64_t{x} * per_chunk + c;
                uint8_t* row = buf.data() + y * row_bytes;
                if (s.bits == 16) {
                  const uint16_t v16 = static_cast<uint16_t>(v);
                  std::memcpy(row + i * 2, &v16, 2);  // native order; libtiff swaps
                } else {
                  row[i * s.bits / 8] |= static_cast<uint8_t>(v << (8 - s.bits - i * s.bits % 8));
                }
              }
            }
          }
          const tmsize_t rows = s.tile ? ch : std::min(ch, h - y0);
          const tmsize_t n = s.tile ? static_cast<tmsize_t>(buf.size()) : rows * row_bytes;
          const tmsize_t r =
              s.tile ? TIFFWriteEncodedTile(t, TIFFComputeTile(t, x0, y0, 0, p), buf.data(), n)
                     : TIFFWriteEncodedStrip(t, TIFFComputeStrip(t, y0, p), buf.data(), n);
          REQUIRE(r >= 0);
        }
      }
    }
    REQUIRE(TIFFWriteDirectory(t) == 1);
  }
  TIFFClose(t);
  return sink.bytes;
}

// The RGB PIL's convert("RGB") gives pixel (y, x) of the spec's first page.
void Expected(const Spec& s, uint32_t y, uint32_t x, uint8_t rgb[3]) {
  auto v8 = [&](uint32_t c) {
    return static_cast<int>(s.bits == 16 ? SampleAt(s, y, x, c) >> 8 : SampleAt(s, y, x, c));
  };
  const uint32_t v = SampleAt(s, y, x, 0);
  switch (s.photometric) {
    case PHOTOMETRIC_MINISBLACK:
    case PHOTOMETRIC_MINISWHITE: {
      int g;
      if (s.bits == 16) {
        g = std::min<int>(v, 255);
      } else {
        g = v * (255 / ((1 << s.bits) - 1));
        if (s.photometric == PHOTOMETRIC_MINISWHITE) g = 255 - g;
      }
      rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(g);
      break;
    }
    case PHOTOMETRIC_PALETTE:
      for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(Palette(s.bits, c)[v] >> 8);
      break;
    case PHOTOMETRIC_SEPARATED: {
      const int nk = 255 - v8(3);
      for (int c = 0; c < 3; ++c) {
        const int t = v8(c) * nk + 128;
        rgb[c] = static_cast<uint8_t>(std::clamp(nk - ((t + (t >> 8)) >> 8), 0, 255));
      }
      break;
    }
    default: {
      const bool premultiplied = !s.extras.empty() && s.extras[0] == EXTRASAMPLE_ASSOCALPHA;
      const int a = s.spp >= 4 ? v8(3) : 255;
      for (int c = 0; c < 3; ++c) {
        int u = v8(c);
        if (premultiplied) u = a == 0 ? 0 : a == 255 ? u : std::min(255, u * 255 / a);
        rgb[c] = static_cast<uint8_t>(u);
      }
    }
  }
}

absl::Status DecodeTo(ImageDecoder& d, const std::vector<uint8_t>& f, std::vector<uint8_t>* px,
                      ImageHeader* h, const DecodeLimits& limits = {}) {
  absl::Status s = d.ReadHeader(f.data(), f.size(), limits, h);
  if (!s.ok()) return s;
  px->assign(size_t{h->width} * h->height * 3, 0);
  return d.Decode({0, 0, h->height, h->width}, px->data(), size_t{h->width} * 3);
}

void CheckPixels(const Spec& s, const char* mode) {
  const std::vector<uint8_t> f = Write(s);
  auto d = MakeTiffDecoder();
  ImageHeader h;
  std::vector<uint8_t> px;
  absl::Status st = DecodeTo(*d, f, &px, &h);
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(std::string(h.mode) == mode);
  REQUIRE(h.width == s.width);
  REQUIRE(h.height == s.height);
  int bad = 0;
  for (uint32_t y = 0; y < s.height; ++y) {
    for (uint32_t x = 0; x < s.width; ++x) {
      uint8_t want[3];
      Expected(s, y, x, want);
      if (std::memcmp(want, &px[(size_t{y} * s.width + x) * 3], 3) != 0 && bad++ < 3) {
        FAIL_CHECK("pixel " << y << "," << x << " got " << int(px[(y * s.width + x) * 3])
                            << " want " << int(want[0]));
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("TIFF: Gray, bilevel and palette at every bit depth", "[tiff]") {
  for (uint16_t photometric :
       {PHOTOMETRIC_MINISBLACK, PHOTOMETRIC_MINISWHITE, PHOTOMETRIC_PALETTE}) {
    for (uint16_t bits : {1, 2, 4, 8}) {
      for (bool lsb : {false, true}) {
        Spec s;
        s.photometric = photometric, s.bits = bits, s.spp = 1, s.lsb_first = lsb;
        s.compression = lsb ? COMPRESSION_LZW : COMPRESSION_PACKBITS;
        INFO("photometric " << photometric << " bits " << bits << " lsb " << lsb);
        CheckPixels(s, photometric == PHOTOMETRIC_PALETTE ? "P" : bits == 1 ? "1" : "L");
      }
    }
  }
}

TEST_CASE("TIFF: 16-bit gray clips, either byte order, either photometric (little-endian)",
          "[tiff]") {
  Spec s;
  s.bits = 16, s.spp = 1, s.photometric = PHOTOMETRIC_MINISBLACK, s.compression = COMPRESSION_LZW;
  s.predictor = 2;
  CheckPixels(s, "I;16");
  s.big_endian = true;
  CheckPixels(s, "I;16B");
  s.big_endian = false, s.photometric = PHOTOMETRIC_MINISWHITE;  // not inverted, as PIL
  Spec e = s;
  e.photometric = PHOTOMETRIC_MINISBLACK;
  std::vector<uint8_t> a, b;
  ImageHeader h;
  auto d = MakeTiffDecoder();
  REQUIRE(DecodeTo(*d, Write(s), &a, &h).ok());
  REQUIRE(DecodeTo(*d, Write(e), &b, &h).ok());
  CHECK(a == b);
  s.big_endian = true;  // (MM, min-is-white, 16) is not in PIL's table
  const std::vector<uint8_t> f = Write(s);
  CHECK(d->ReadHeader(f.data(), f.size(), {}, &h).code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("TIFF: Color layouts, contiguous and planar, strips and tiles, every codec", "[tiff]") {
  struct L {
    uint16_t photometric, spp, bits;
    std::vector<uint16_t> extras;
    const char* mode;
  };
  const std::vector<L> layouts = {
      {PHOTOMETRIC_RGB, 3, 8, {}, "RGB"},
      {PHOTOMETRIC_RGB, 4, 8, {EXTRASAMPLE_UNASSALPHA}, "RGBA"},
      {PHOTOMETRIC_RGB, 4, 8, {EXTRASAMPLE_ASSOCALPHA}, "RGBA"},
      {PHOTOMETRIC_RGB, 4, 8, {EXTRASAMPLE_UNSPECIFIED}, "RGBX"},
      {PHOTOMETRIC_RGB, 6, 8, {EXTRASAMPLE_ASSOCALPHA, 0, 0}, "RGBA"},
      {PHOTOMETRIC_RGB, 3, 16, {}, "RGB"},
      {PHOTOMETRIC_RGB, 4, 16, {EXTRASAMPLE_UNASSALPHA}, "RGBA"},
      {PHOTOMETRIC_RGB, 4, 16, {EXTRASAMPLE_ASSOCALPHA}, "RGBA"},
      {PHOTOMETRIC_SEPARATED, 4, 8, {}, "CMYK"},
      {PHOTOMETRIC_SEPARATED, 5, 8, {EXTRASAMPLE_UNSPECIFIED}, "CMYK"},
      {PHOTOMETRIC_SEPARATED, 4, 16, {}, "CMYK"},
      {PHOTOMETRIC_MINISBLACK, 2, 8, {EXTRASAMPLE_UNASSALPHA}, "LA"},
      {PHOTOMETRIC_PALETTE, 2, 8, {EXTRASAMPLE_UNASSALPHA}, "PA"},
  };
  const uint16_t codecs[] = {COMPRESSION_NONE, COMPRESSION_LZW, COMPRESSION_ADOBE_DEFLATE,
                             COMPRESSION_PACKBITS};
  for (const L& l : layouts) {
    for (bool planar : {false, true}) {
      for (uint32_t tile : {0u, 16u}) {
        for (uint16_t codec : codecs) {
          Spec s;
          s.photometric = l.photometric, s.spp = l.spp, s.bits = l.bits, s.extras = l.extras;
          s.planar = planar, s.tile = tile, s.compression = codec;
          s.predictor = codec == COMPRESSION_LZW ? 2 : 1;
          s.big_endian = codec == COMPRESSION_PACKBITS && l.photometric != PHOTOMETRIC_SEPARATED;
          INFO(l.mode << " spp " << l.spp << " bits " << l.bits << " planar " << planar << " tile "
                      << tile << " codec " << codec);
          CheckPixels(s, l.mode);
        }
      }
    }
  }
}

TEST_CASE("TIFF: JPEG: YCbCr converted by libjpeg, gray and RGB as coded", "[tiff]") {
  for (uint16_t photometric : {PHOTOMETRIC_YCBCR, PHOTOMETRIC_RGB, PHOTOMETRIC_MINISBLACK}) {
    for (uint32_t tile : {0u, 16u}) {
      Spec s;
      s.photometric = photometric, s.spp = photometric == PHOTOMETRIC_MINISBLACK ? 1 : 3;
      s.compression = COMPRESSION_JPEG, s.tile = tile, s.rows_per_strip = 16, s.pattern = 1;
      s.width = 40, s.height = 35;
      auto d = MakeTiffDecoder();
      ImageHeader h;
      std::vector<uint8_t> px;
      REQUIRE(DecodeTo(*d, Write(s), &px, &h).ok());
      CHECK(std::string(h.mode) == (s.spp == 1 ? "L" : "RGB"));
      // Lossy: close to the source on average.
      double err = 0;
      for (uint32_t y = 0; y < s.height; ++y) {
        for (uint32_t x = 0; x < s.width; ++x) {
          uint8_t want[3];
          Spec as_rgb = s;
          if (s.photometric == PHOTOMETRIC_YCBCR) as_rgb.photometric = PHOTOMETRIC_RGB;
          Expected(as_rgb, y, x, want);
          for (int c = 0; c < 3; ++c) err += std::abs(want[c] - px[(y * s.width + x) * 3 + c]);
        }
      }
      CHECK(err / (s.width * s.height * 3) < 6);
    }
  }
}

TEST_CASE("TIFF: Regions equal the whole decode's window", "[tiff]") {
  for (uint32_t tile : {0u, 16u}) {
    for (bool planar : {false, true}) {
      for (uint16_t bits : {uint16_t{8}, uint16_t{16}}) {
        Spec s;
        s.width = 61, s.height = 45, s.tile = tile, s.planar = planar, s.bits = bits;
        s.spp = 4, s.extras = {EXTRASAMPLE_ASSOCALPHA}, s.compression = COMPRESSION_LZW;
        const std::vector<uint8_t> f = Write(s);
        auto d = MakeTiffDecoder();
        ImageHeader h;
        std::vector<uint8_t> whole;
        REQUIRE(DecodeTo(*d, f, &whole, &h).ok());
        const DecodeRegion regions[] = {{0, 0, 1, 1},    {0, 0, 45, 61}, {44, 60, 1, 1},
                                        {7, 3, 20, 30},  {15, 15, 2, 2}, {16, 16, 16, 16},
                                        {0, 45, 45, 16}, {30, 0, 15, 61}};
        for (const DecodeRegion& r : regions) {
          std::vector<uint8_t> out(size_t{r.height} * (r.width * 3 + 5), 0xAB);
          const size_t stride = r.width * 3 + 5;
          REQUIRE(d->Decode(r, out.data(), stride).ok());
          for (uint32_t y = 0; y < r.height; ++y) {
            INFO("region " << r.top << "," << r.left << " " << r.height << "x" << r.width << " row "
                           << y);
            CHECK(std::memcmp(&out[y * stride], &whole[((r.top + y) * 61 + r.left) * 3],
                              r.width * 3) == 0);
          }
        }
        uint8_t px[3];
        CHECK(d->Decode({45, 0, 1, 1}, px, 3).code() == absl::StatusCode::kInvalidArgument);
        CHECK(d->Decode({0, 61, 1, 1}, px, 3).code() == absl::StatusCode::kInvalidArgument);
        CHECK(d->Decode({0, 0, 0, 1}, px, 3).code() == absl::StatusCode::kInvalidArgument);
      }
    }
  }
}

TEST_CASE("TIFF: Multi-page: the first page", "[tiff]") {
  Spec s;
  s.pages = 3, s.compression = COMPRESSION_ADOBE_DEFLATE;
  CheckPixels(s, "RGB");
}

// ---- Hostile files: byte surgery on little-endian classic TIFFs. ----

uint32_t Get32(const std::vector<uint8_t>& f, size_t at) {
  uint32_t v;
  std::memcpy(&v, &f[at], 4);
  return v;
}
void Put32(std::vector<uint8_t>& f, size_t at, uint32_t v) { std::memcpy(&f[at], &v, 4); }

// Offset of the first IFD's entry for `tag`, or 0.
size_t Entry(const std::vector<uint8_t>& f, uint16_t tag) {
  const uint32_t ifd = Get32(f, 4);
  uint16_t n;
  std::memcpy(&n, &f[ifd], 2);
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t t;
    std::memcpy(&t, &f[ifd + 2 + 12 * i], 2);
    if (t == tag) return ifd + 2 + 12 * i;
  }
  return 0;
}

// Sets a one-value tag to a LONG value.
void SetLong(std::vector<uint8_t>& f, uint16_t tag, uint32_t v) {
  const size_t e = Entry(f, tag);
  REQUIRE(e != 0);
  const uint16_t type = TIFF_LONG;
  std::memcpy(&f[e + 2], &type, 2);
  Put32(f, e + 4, 1);
  Put32(f, e + 8, v);
}

absl::StatusCode Code(const std::vector<uint8_t>& f, const DecodeLimits& limits = {}) {
  auto d = MakeTiffDecoder();
  ImageHeader h;
  std::vector<uint8_t> px;
  absl::Status s = DecodeTo(*d, f, &px, &h, limits);
  if (!s.ok()) CHECK_FALSE(s.message().empty());
  return s.code();
}

TEST_CASE("TIFF: Caps: huge declared sizes fail before allocating", "[tiff]") {
  Spec s;
  s.rows_per_strip = 1000;
  for (uint32_t dim : {65535u, 65536u, 1u << 20, 0xFFFFFFFFu}) {
    std::vector<uint8_t> f = Write(s);
    SetLong(f, TIFFTAG_IMAGEWIDTH, dim);
    SetLong(f, TIFFTAG_IMAGELENGTH, dim);
    const absl::StatusCode c = Code(f);
    INFO(dim);
    // 2^32 - 1: libtiff itself refuses the directory (its sizes overflow).
    CHECK(c == (dim == 0xFFFFFFFFu ? absl::StatusCode::kInvalidArgument
                                   : absl::StatusCode::kResourceExhausted));
  }
  // A valid 65535 x 2048 header (twice the default cap), one strip of 64
  // bytes that cannot inflate to it. (Not 65535 x 65535 decoded: a 4 GiB
  // strip buffer costs seconds and, under ASan, more memory than CI has.)
  Sink sink;
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  TIFFOpenOptionsSetErrorHandlerExtR(opts, Quiet, nullptr);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, Quiet, nullptr);
  TIFF* t = TIFFClientOpenExt("mem", "wl", &sink, SinkRead, SinkWrite, SinkSeek, SinkClose,
                              SinkSize, SinkMap, SinkUnmap, opts);
  TIFFOpenOptionsFree(opts);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 65535u);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, 2048u);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 2048u);
  uint8_t zero[64] = {};
  REQUIRE(TIFFWriteEncodedStrip(t, 0, zero, sizeof(zero)) >= 0);
  REQUIRE(TIFFWriteDirectory(t) == 1);
  TIFFClose(t);
  auto d = MakeTiffDecoder();
  ImageHeader h;
  CHECK(d->ReadHeader(sink.bytes.data(), sink.bytes.size(), {}, &h).code() ==
        absl::StatusCode::kResourceExhausted);
  DecodeLimits roomy;
  roomy.max_pixels = uint64_t{1} << 28;  // allowed: the strip is short, Decode fails cleanly
  REQUIRE(d->ReadHeader(sink.bytes.data(), sink.bytes.size(), roomy, &h).ok());
  std::vector<uint8_t> row(65535 * 3);
  CHECK_FALSE(d->Decode({0, 0, 1, 65535}, row.data(), row.size()).ok());
  // Tiles bigger than the cap.
  Spec tiles;
  tiles.tile = 64, tiles.width = 10, tiles.height = 10;
  DecodeLimits small;
  small.max_pixels = 1000;
  CHECK(Code(Write(tiles), small) == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("TIFF: A deflate strip expanding 1000x decodes within its strip, or fails", "[tiff]") {
  Spec s;
  s.width = 2000, s.height = 2000, s.spp = 1, s.photometric = PHOTOMETRIC_MINISBLACK;
  s.compression = COMPRESSION_ADOBE_DEFLATE, s.rows_per_strip = 2000, s.pattern = 2;
  std::vector<uint8_t> f = Write(s);
  CHECK(f.size() * 500 < size_t{2000} * 2000);
  CHECK(Code(f) == absl::StatusCode::kOk);
  SetLong(f, TIFFTAG_IMAGEWIDTH, 4000);  // more pixels than the stream holds
  CHECK(Code(f) == absl::StatusCode::kInvalidArgument);
  DecodeLimits small;
  small.max_pixels = 1 << 20;
  CHECK(Code(f, small) == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("TIFF: Truncation at every cut fails cleanly", "[tiff]") {
  for (uint16_t codec : {COMPRESSION_NONE, COMPRESSION_LZW, COMPRESSION_ADOBE_DEFLATE}) {
    for (uint32_t tile : {0u, 16u}) {
      Spec s;
      s.compression = codec, s.tile = tile;
      const std::vector<uint8_t> f = Write(s);
      auto d = MakeTiffDecoder();  // reused across the cuts
      for (size_t cut = 0; cut < f.size(); cut += (cut < 64 ? 1 : 7)) {
        std::vector<uint8_t> part(f.begin(), f.begin() + cut);
        ImageHeader h;
        std::vector<uint8_t> px;
        absl::Status st = DecodeTo(*d, part, &px, &h);
        INFO("codec " << codec << " cut " << cut << ": " << st.message());
        CHECK_FALSE(st.ok());
        CHECK(st.code() == absl::StatusCode::kInvalidArgument);
      }
    }
  }
}

TEST_CASE("TIFF: Corrupt compressed bytes fail cleanly (zlib's Adler-32)", "[tiff]") {
  Spec s;
  s.compression = COMPRESSION_ADOBE_DEFLATE, s.rows_per_strip = 100;
  std::vector<uint8_t> f = Write(s);
  const uint32_t offset = Get32(f, Entry(f, TIFFTAG_STRIPOFFSETS) + 8);
  const uint32_t count = Get32(f, Entry(f, TIFFTAG_STRIPBYTECOUNTS) + 8);
  std::vector<uint8_t> g = f;
  g[offset + count - 2] ^= 0x55;  // in the checksum
  CHECK(Code(g) == absl::StatusCode::kInvalidArgument);
  for (uint32_t i = 2; i < count; i += 13) {  // anywhere in the stream: no crash
    g = f;
    g[offset + i] ^= 0xFF;
    (void)Code(g);
  }
}

TEST_CASE("TIFF: Offsets, counts and IFDs pointing anywhere", "[tiff]") {
  Spec s;
  s.compression = COMPRESSION_LZW, s.rows_per_strip = 100;
  const std::vector<uint8_t> good = Write(s);
  std::vector<uint8_t> f = good;
  SetLong(f, TIFFTAG_STRIPOFFSETS, static_cast<uint32_t>(good.size()) + 10);
  CHECK(Code(f) == absl::StatusCode::kInvalidArgument);
  f = good;
  SetLong(f, TIFFTAG_STRIPBYTECOUNTS, 1u << 31);
  CHECK(Code(f) == absl::StatusCode::kInvalidArgument);
  f = good;
  Put32(f, 4, static_cast<uint32_t>(good.size()) + 100);  // first IFD past the end
  CHECK(Code(f) == absl::StatusCode::kInvalidArgument);
  f = good;
  Put32(f, 4, 0xFFFFFFF0u);
  CHECK(Code(f) == absl::StatusCode::kInvalidArgument);

  // The IFD chain pointing back to itself, or to the header: page 1 decodes.
  for (uint32_t next : {Get32(good, 4), 0u + 2u}) {
    f = good;
    const uint32_t ifd = Get32(f, 4);
    uint16_t n;
    std::memcpy(&n, &f[ifd], 2);
    Put32(f, ifd + 2 + 12 * n, next);
    CHECK(Code(f) == absl::StatusCode::kOk);
  }

  // A zero byte count among several strips.
  Spec multi;
  multi.compression = COMPRESSION_LZW, multi.rows_per_strip = 4;
  f = Write(multi);
  const uint32_t counts = Get32(f, Entry(f, TIFFTAG_STRIPBYTECOUNTS) + 8);
  Put32(f, counts + 4 * 3, 0);
  CHECK(Code(f) == absl::StatusCode::kInvalidArgument);

  // Tile sizes that do not divide the image, nor are multiples of 16.
  Spec t;
  t.tile = 16, t.width = 50, t.height = 33, t.compression = COMPRESSION_ADOBE_DEFLATE;
  CheckPixels(t, "RGB");
  for (uint32_t w : {10u, 1u, 17u, 100000u}) {
    f = Write(t);
    SetLong(f, TIFFTAG_TILEWIDTH, w);
    (void)Code(f);  // anything but a crash
  }
}

TEST_CASE("TIFF: Refused kinds are UNIMPLEMENTED and name what", "[tiff]") {
  struct R {
    uint16_t photometric, spp, bits, format;
    const char* word;
  };
  const R cases[] = {{PHOTOMETRIC_MINISBLACK, 1, 32, SAMPLEFORMAT_IEEEFP, "float"},
                     {PHOTOMETRIC_MINISBLACK, 1, 16, SAMPLEFORMAT_INT, "signed"},
                     {PHOTOMETRIC_MINISBLACK, 1, 12, SAMPLEFORMAT_UINT, "12 bits"},
                     {PHOTOMETRIC_CIELAB, 3, 8, SAMPLEFORMAT_UINT, "L*a*b*"},
                     {PHOTOMETRIC_YCBCR, 3, 8, SAMPLEFORMAT_UINT, "YCbCr"},
                     {PHOTOMETRIC_MINISBLACK, 2, 8, SAMPLEFORMAT_UINT, "extra samples"}};
  for (const R& r : cases) {
    Spec s;
    s.photometric = r.photometric, s.spp = r.spp, s.bits = r.bits;
    s.extras =
        r.spp == 2 ? std::vector<uint16_t>{EXTRASAMPLE_UNSPECIFIED} : std::vector<uint16_t>{};
    std::vector<uint8_t> f = r.bits == 32 || r.bits == 12 ? std::vector<uint8_t>{} : Write(s);
    if (f.empty()) {  // libtiff writes these too; only the tags matter
      s.bits = 8;
      f = Write(s);
      const size_t e = Entry(f, TIFFTAG_BITSPERSAMPLE);
      const uint16_t b = r.bits;
      std::memcpy(&f[e + 8], &b, 2);
    }
    if (r.format != SAMPLEFORMAT_UINT) {
      // Replace the (present, default) FillOrder-free slot: rewrite PlanarConfig's tag.
      const size_t e = Entry(f, TIFFTAG_PLANARCONFIG);
      const uint16_t tag = TIFFTAG_SAMPLEFORMAT, v = r.format;
      std::memcpy(&f[e], &tag, 2);
      std::memcpy(&f[e + 8], &v, 2);
    }
    auto d = MakeTiffDecoder();
    ImageHeader h;
    absl::Status st = d->ReadHeader(f.data(), f.size(), {}, &h);
    INFO(r.word << ": " << st.message());
    CHECK(st.code() == absl::StatusCode::kUnimplemented);
    CHECK(std::string(st.message()).find(r.word) != std::string::npos);
  }
}

TEST_CASE("TIFF: One decoder across files: nothing leaks", "[tiff]") {
  Spec pal;
  pal.photometric = PHOTOMETRIC_PALETTE, pal.spp = 1, pal.bits = 4;
  Spec rgb16;
  rgb16.bits = 16, rgb16.planar = true, rgb16.tile = 16, rgb16.compression = COMPRESSION_LZW;
  Spec cmyk;
  cmyk.photometric = PHOTOMETRIC_SEPARATED, cmyk.spp = 4, cmyk.width = 20, cmyk.height = 50;
  const std::vector<uint8_t> files[] = {Write(pal), Write(rgb16), Write(cmyk)};
  std::vector<uint8_t> fresh[3];
  for (int i = 0; i < 3; ++i) {
    auto d = MakeTiffDecoder();
    ImageHeader h;
    REQUIRE(DecodeTo(*d, files[i], &fresh[i], &h).ok());
  }
  auto d = MakeTiffDecoder();
  std::vector<uint8_t> garbage(files[1].begin(), files[1].begin() + files[1].size() / 2);
  for (int round = 0; round < 2; ++round) {
    for (int i : {2, 0, 1, 0}) {
      ImageHeader h;
      std::vector<uint8_t> px;
      CHECK_FALSE(DecodeTo(*d, garbage, &px, &h).ok());
      REQUIRE(DecodeTo(*d, files[i], &px, &h).ok());
      CHECK(px == fresh[i]);
    }
  }
  uint8_t px[3];
  ImageHeader h;
  CHECK_FALSE(d->ReadHeader(garbage.data(), garbage.size(), {}, &h).ok());
  CHECK(d->Decode({0, 0, 1, 1}, px, 3).code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace stoker::image
