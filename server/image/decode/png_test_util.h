// Helpers of the PNG decoder's tests (png_decoder_test.cc,
// png_paths_test.cc): images of every colour type and depth encoded by
// libspng, what PIL's convert("RGB") makes of them, and chunk surgery.

#ifndef STOKER_SERVER_IMAGE_DECODE_PNG_TEST_UTIL_H_
#define STOKER_SERVER_IMAGE_DECODE_PNG_TEST_UTIL_H_

#include <spng.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "server/image/decode/png_decoder.h"

namespace stoker::image::png_test {

using Bytes = std::vector<uint8_t>;

// The source of a test image: its samples, one uint16 per channel per pixel
// (whatever the depth), and what libspng's encoder gets.
struct Source {
  uint32_t width = 0, height = 0;
  uint8_t color_type = 0, depth = 8;
  bool interlaced = false;
  std::vector<uint16_t> samples;  // height * width * channels
  std::vector<uint8_t> palette;   // RGB triples (PLTE)
  Bytes trns;                     // tRNS chunk data, empty for none
};

inline int Channels(uint8_t color_type) {
  switch (color_type) {
    case 2:
      return 3;
    case 4:
      return 2;
    case 6:
      return 4;
    default:
      return 1;
  }
}

inline Source RandomSource(uint32_t w, uint32_t h, uint8_t color_type, uint8_t depth, bool interlaced,
                    uint32_t seed) {
  Source s;
  s.width = w;
  s.height = h;
  s.color_type = color_type;
  s.depth = depth;
  s.interlaced = interlaced;
  std::mt19937 rng(seed);
  const uint32_t max = (1u << depth) - 1;
  const size_t n = size_t{w} * h * Channels(color_type);
  for (size_t i = 0; i < n; ++i) {
    // Mostly a gradient plus noise, some raw noise: every filter gets used.
    const size_t px = i / Channels(color_type);
    const uint32_t grad = static_cast<uint32_t>((px % w + px / w) * max / (w + h));
    s.samples.push_back(static_cast<uint16_t>(
        (rng() % 4 == 0) ? rng() % (max + 1) : std::min<uint32_t>(max, grad + rng() % 3)));
  }
  if (color_type == 3) {
    // Shorter than the bit depth allows (for 8-bit): indices past it are gray.
    const uint32_t entries = depth == 8 ? 100 : (1u << depth) - 1;
    for (uint32_t i = 0; i < entries * 3; ++i) s.palette.push_back(static_cast<uint8_t>(rng()));
  }
  return s;
}

// The packed scanlines, as SPNG_FMT_PNG takes them (16-bit in host order).
inline Bytes Pack(const Source& s) {
  const int ch = Channels(s.color_type);
  const size_t row_bytes = (size_t{s.width} * ch * s.depth + 7) / 8;
  Bytes out(row_bytes * s.height, 0);
  for (uint32_t y = 0; y < s.height; ++y) {
    uint8_t* row = out.data() + y * row_bytes;
    for (size_t i = 0; i < size_t{s.width} * ch; ++i) {
      const uint16_t v = s.samples[y * size_t{s.width} * ch + i];
      if (s.depth == 16) {
        std::memcpy(row + 2 * i, &v, 2);
      } else if (s.depth == 8) {
        row[i] = static_cast<uint8_t>(v);
      } else {
        const size_t per = 8 / s.depth;
        row[i / per] |= static_cast<uint8_t>(v << (8 - s.depth * (1 + i % per)));
      }
    }
  }
  return out;
}

inline Bytes Encode(const Source& s) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  REQUIRE(ctx != nullptr);
  REQUIRE(spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1) == 0);
  spng_ihdr ihdr = {
      s.width, s.height, s.depth, s.color_type, 0, 0, static_cast<uint8_t>(s.interlaced ? 1 : 0)};
  REQUIRE(spng_set_ihdr(ctx, &ihdr) == 0);
  if (!s.palette.empty()) {
    spng_plte plte{};
    plte.n_entries = static_cast<uint32_t>(s.palette.size() / 3);
    for (uint32_t i = 0; i < plte.n_entries; ++i) {
      plte.entries[i].red = s.palette[3 * i];
      plte.entries[i].green = s.palette[3 * i + 1];
      plte.entries[i].blue = s.palette[3 * i + 2];
    }
    REQUIRE(spng_set_plte(ctx, &plte) == 0);
  }
  if (!s.trns.empty()) {
    spng_trns trns{};
    if (s.color_type == 3) {
      trns.n_type3_entries = static_cast<uint32_t>(s.trns.size());
      std::memcpy(trns.type3_alpha, s.trns.data(), s.trns.size());
    } else {
      trns.gray = static_cast<uint16_t>(s.trns[0] << 8 | s.trns[1]);
      if (s.trns.size() == 6) {
        trns.red = trns.gray;
        trns.green = static_cast<uint16_t>(s.trns[2] << 8 | s.trns[3]);
        trns.blue = static_cast<uint16_t>(s.trns[4] << 8 | s.trns[5]);
      }
    }
    REQUIRE(spng_set_trns(ctx, &trns) == 0);
  }
  const Bytes raw = Pack(s);
  REQUIRE(spng_encode_image(ctx, raw.data(), raw.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0);
  size_t len = 0;
  int err = 0;
  auto* buf = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  REQUIRE(err == 0);
  Bytes png(buf, buf + len);
  std::free(buf);
  spng_ctx_free(ctx);
  return png;
}

// What PIL's Image.open(f).convert("RGB") gives for the source.
inline Bytes Expected(const Source& s) {
  const int ch = Channels(s.color_type);
  Bytes out;
  for (size_t p = 0; p < size_t{s.width} * s.height; ++p) {
    const uint16_t* v = &s.samples[p * ch];
    uint8_t rgb[3];
    switch (s.color_type) {
      case 0:  // "1", "L" scaled up, "I" clipped
        rgb[0] = static_cast<uint8_t>(s.depth == 16 ? std::min<uint16_t>(v[0], 255)
                                                    : v[0] * 255 / ((1 << s.depth) - 1));
        rgb[1] = rgb[2] = rgb[0];
        break;
      case 3:
        for (int c = 0; c < 3; ++c) {
          rgb[c] =
              v[0] * 3u < s.palette.size() ? s.palette[v[0] * 3 + c] : static_cast<uint8_t>(v[0]);
        }
        break;
      case 4:
        rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(s.depth == 16 ? v[0] >> 8 : v[0]);
        break;
      default:
        for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(s.depth == 16 ? v[c] >> 8 : v[c]);
    }
    out.insert(out.end(), rgb, rgb + 3);
  }
  return out;
}

inline DecodeLimits Limits(uint64_t max_pixels = 64ull << 20) {
  DecodeLimits l;
  l.max_pixels = max_pixels;
  return l;
}

inline absl::Status DecodeWhole(ImageDecoder* d, const Bytes& png, Bytes* rgb, ImageHeader* h = nullptr,
                         const DecodeLimits& limits = Limits()) {
  ImageHeader header;
  absl::Status s = d->ReadHeader(png.data(), png.size(), limits, &header);
  if (h != nullptr) *h = header;
  if (!s.ok()) return s;
  rgb->assign(size_t{header.width} * header.height * 3, 0);
  return d->Decode(DecodeRegion{0, 0, header.height, header.width}, rgb->data(),
                   size_t{header.width} * 3);
}

// --- Hand-made files -------------------------------------------------------

inline Bytes Chunk(const char* type, const Bytes& data) {
  // Built by push_back: GCC 12 at -O2 warns (array-bounds, a false
  // positive) on inserting the type after a 4-byte initializer list.
  Bytes out;
  out.reserve(data.size() + 12);
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(data.size() >> (8 * i)));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(type[i]));
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(crc32(0, nullptr, 0), out.data() + 4, static_cast<uInt>(data.size() + 4));
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(crc >> (8 * i)));
  return out;
}

inline Bytes Be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

inline Bytes Ihdr(uint32_t w, uint32_t h, uint8_t depth, uint8_t color_type, uint8_t interlace = 0) {
  Bytes d = Be32(w);
  const Bytes hb = Be32(h);
  d.insert(d.end(), hb.begin(), hb.end());
  d.insert(d.end(), {depth, color_type, 0, 0, interlace});
  return Chunk("IHDR", d);
}

// zlib of `zeros` zero bytes, streamed (no buffer of that size).
inline Bytes ZlibZeros(size_t zeros) {
  z_stream z{};
  REQUIRE(deflateInit(&z, 9) == Z_OK);
  const Bytes in(1 << 16, 0);
  Bytes out, buf(1 << 16);
  size_t left = zeros;
  int flush = Z_NO_FLUSH;
  do {
    const size_t n = std::min(left, in.size());
    left -= n;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    z.next_in = const_cast<Bytef*>(in.data());
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, flush);
      out.insert(out.end(), buf.data(), buf.data() + (buf.size() - z.avail_out));
    } while (z.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&z);
  return out;
}

const Bytes kSig = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

inline Bytes Concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The file's chunks: (offset, length, type).
struct ChunkAt {
  size_t offset;
  uint32_t length;
  std::string type;
};
inline std::vector<ChunkAt> Chunks(const Bytes& png) {
  std::vector<ChunkAt> out;
  for (size_t pos = 8; pos + 12 <= png.size();) {
    const uint32_t len =
        uint32_t{png[pos]} << 24 | png[pos + 1] << 16 | png[pos + 2] << 8 | png[pos + 3];
    out.push_back({pos, len, std::string(png.begin() + pos + 4, png.begin() + pos + 8)});
    pos += 12 + size_t{len};
  }
  return out;
}

// png with `chunk` inserted before the chunk of type `before`.
inline Bytes InsertBefore(const Bytes& png, const char* before, const Bytes& chunk) {
  for (const ChunkAt& c : Chunks(png)) {
    if (c.type == before) {
      Bytes out(png.begin(), png.begin() + c.offset);
      out.insert(out.end(), chunk.begin(), chunk.end());
      out.insert(out.end(), png.begin() + c.offset, png.end());
      return out;
    }
  }
  FAIL("no chunk " << before);
  return {};
}

inline Bytes Fctl(uint32_t seq, uint32_t w, uint32_t h, uint32_t x = 0, uint32_t y = 0) {
  Bytes d = Concat({Be32(seq), Be32(w), Be32(h), Be32(x), Be32(y)});
  d.insert(d.end(), {0, 1, 0, 10, 0, 0});
  return Chunk("fcTL", d);
}

// An APNG: IDAT image `a`, then one more frame (fdAT) of `b`'s image data.
inline Bytes Apng(const Bytes& a, const Bytes& b, bool default_image) {
  const std::vector<ChunkAt> ca = Chunks(a);
  uint32_t w = uint32_t{a[16]} << 24 | a[17] << 16 | a[18] << 8 | a[19];
  uint32_t h = uint32_t{a[20]} << 24 | a[21] << 16 | a[22] << 8 | a[23];
  Bytes out = kSig;
  uint32_t seq = 0;
  for (const ChunkAt& c : ca) {
    const Bytes whole(a.begin() + c.offset, a.begin() + c.offset + 12 + c.length);
    if (c.type == "IDAT" && !default_image && seq == 0) {
      const Bytes f = Fctl(seq++, w, h);
      out.insert(out.end(), f.begin(), f.end());
    }
    if (c.type == "IEND") {
      const Bytes f = Fctl(seq++, w, h);
      out.insert(out.end(), f.begin(), f.end());
      for (const ChunkAt& cb : Chunks(b)) {
        if (cb.type != "IDAT") continue;
        Bytes d = Be32(seq++);
        d.insert(d.end(), b.begin() + cb.offset + 8, b.begin() + cb.offset + 8 + cb.length);
        const Bytes fd = Chunk("fdAT", d);
        out.insert(out.end(), fd.begin(), fd.end());
      }
    }
    out.insert(out.end(), whole.begin(), whole.end());
    if (c.type == "IHDR") {
      const Bytes actl = Chunk("acTL", Concat({Be32(default_image ? 1 : 2), Be32(0)}));
      out.insert(out.end(), actl.begin(), actl.end());
    }
  }
  return out;
}

// --- Tests -----------------------------------------------------------------

}  // namespace stoker::image::png_test

#endif  // STOKER_SERVER_IMAGE_DECODE_PNG_TEST_UTIL_H_
