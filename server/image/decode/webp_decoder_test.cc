#include "server/image/decode/webp_decoder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "webp/decode.h"
#include "webp/demux.h"
#include "webp/encode.h"

namespace stoker::image {
namespace {

using Bytes = std::vector<uint8_t>;

struct Pixels {
  uint32_t width = 0, height = 0;
  int channels = 3;
  Bytes data;
};

// Photo-like content: gradients plus noise, and for RGBA an alpha with
// bands of 0, of 255 and of everything between.
Pixels Photo(uint32_t width, uint32_t height, int channels, uint32_t seed) {
  Pixels p{width, height, channels, Bytes(size_t{width} * height * channels)};
  uint32_t state = seed * 2654435761u + 1;
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      uint8_t* px = &p.data[(size_t{y} * width + x) * channels];
      for (int c = 0; c < channels; ++c) {
        state = state * 1664525u + 1013904223u;
        const int noise = static_cast<int>(state >> 27) - 16;
        const int base = c == 0   ? x * 255 / std::max(1u, width - 1)
                         : c == 1 ? y * 255 / std::max(1u, height - 1)
                                  : (x + 2 * y) * 7;
        px[c] = static_cast<uint8_t>(std::clamp(base % 256 + noise, 0, 255));
      }
      if (channels == 4) {
        px[3] = y < height / 4 ? 0 : y < height / 3 ? 255 : static_cast<uint8_t>(x * 5 + y);
      }
    }
  }
  return p;
}

struct EncodeOptions {
  bool lossless = false;
  float quality = 75;
  int filter_type = 1;  // 0 simple, 1 strong
  int filter_strength = 60;
  int segments = 4;
  int alpha_filtering = 1;
  int alpha_quality = 100;
};

Bytes Encode(const Pixels& p, const EncodeOptions& o) {
  WebPConfig config;
  REQUIRE(WebPConfigInit(&config));
  config.lossless = o.lossless;
  config.quality = o.quality;
  config.exact = 1;
  config.filter_type = o.filter_type;
  config.filter_strength = o.filter_strength;
  config.segments = o.segments;
  config.alpha_filtering = o.alpha_filtering;
  config.alpha_quality = o.alpha_quality;
  REQUIRE(WebPValidateConfig(&config));
  WebPPicture pic;
  REQUIRE(WebPPictureInit(&pic));
  pic.width = static_cast<int>(p.width);
  pic.height = static_cast<int>(p.height);
  pic.use_argb = o.lossless;
  const int stride = static_cast<int>(p.width) * p.channels;
  REQUIRE((p.channels == 4 ? WebPPictureImportRGBA(&pic, p.data.data(), stride)
                           : WebPPictureImportRGB(&pic, p.data.data(), stride)));
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  pic.writer = WebPMemoryWrite;
  pic.custom_ptr = &writer;
  const int ok = WebPEncode(&config, &pic);
  WebPPictureFree(&pic);
  Bytes out(writer.mem, writer.mem + writer.size);
  WebPMemoryWriterClear(&writer);
  REQUIRE(ok);
  return out;
}

// What PIL gives: libwebp's RGBA decode of the file, alpha dropped. Empty
// when libwebp fails.
Bytes LibwebpRgb(const Bytes& file) {
  int w = 0, h = 0;
  uint8_t* rgba = WebPDecodeRGBA(file.data(), file.size(), &w, &h);
  if (rgba == nullptr) return {};
  Bytes rgb(size_t(w) * h * 3);
  for (size_t i = 0; i < size_t(w) * h; ++i) std::memcpy(&rgb[i * 3], &rgba[i * 4], 3);
  WebPFree(rgba);
  return rgb;
}

// PIL's path itself: WebPAnimDecoder's first frame (RGBA on a cleared
// canvas), alpha dropped. Empty when it fails.
Bytes PilRgb(const Bytes& file) {
  const WebPData data = {file.data(), file.size()};
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&data, nullptr);
  if (dec == nullptr) return {};
  WebPAnimInfo info;
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  Bytes rgb;
  if (WebPAnimDecoderGetInfo(dec, &info) && WebPAnimDecoderGetNext(dec, &rgba, &timestamp)) {
    const size_t n = size_t{info.canvas_width} * info.canvas_height;
    rgb.resize(n * 3);
    for (size_t i = 0; i < n; ++i) std::memcpy(&rgb[i * 3], &rgba[i * 4], 3);
  }
  WebPAnimDecoderDelete(dec);
  return rgb;
}

Bytes DropAlpha(const Pixels& p) {
  if (p.channels == 3) return p.data;
  Bytes rgb(size_t{p.width} * p.height * 3);
  for (size_t i = 0; i < size_t{p.width} * p.height; ++i)
    std::memcpy(&rgb[i * 3], &p.data[i * 4], 3);
  return rgb;
}

void Append(Bytes* b, const void* p, size_t n) {
  const auto* q = static_cast<const uint8_t*>(p);
  b->insert(b->end(), q, q + n);
}
void Le(Bytes* b, uint32_t v, int n) {
  for (int i = 0; i < n; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
Bytes Chunk(const char* tag, const Bytes& payload) {
  Bytes c;
  Append(&c, tag, 4);
  Le(&c, static_cast<uint32_t>(payload.size()), 4);
  Append(&c, payload.data(), payload.size());
  if (payload.size() & 1) c.push_back(0);
  return c;
}
Bytes Riff(const Bytes& chunks) {
  Bytes f;
  Append(&f, "RIFF", 4);
  Le(&f, static_cast<uint32_t>(chunks.size() + 4), 4);
  Append(&f, "WEBP", 4);
  Append(&f, chunks.data(), chunks.size());
  return f;
}
Bytes Vp8x(uint8_t flags, uint32_t width, uint32_t height) {
  Bytes p = {flags, 0, 0, 0};
  Le(&p, width - 1, 3);
  Le(&p, height - 1, 3);
  return Chunk("VP8X", p);
}
void Append(Bytes* b, const Bytes& more) { Append(b, more.data(), more.size()); }

// The chunks of a RIFF file: (tag, payload).
std::vector<std::pair<std::string, Bytes>> ChunksOf(const Bytes& file) {
  std::vector<std::pair<std::string, Bytes>> chunks;
  for (size_t at = 12; at + 8 <= file.size();) {
    const size_t n =
        file[at + 4] | (file[at + 5] << 8) | (file[at + 6] << 16) | (size_t{file[at + 7]} << 24);
    chunks.emplace_back(std::string(file.begin() + at, file.begin() + at + 4),
                        Bytes(file.begin() + at + 8, file.begin() + at + 8 + n));
    at += 8 + n + (n & 1);
  }
  return chunks;
}

// The image chunks of an encoded file (VP8L, VP8, or ALPH then VP8): what an
// ANMF chunk holds after its header.
Bytes ImageChunks(const Bytes& file) {
  size_t at = 12;
  if (std::memcmp(&file[12], "VP8X", 4) == 0) at += 18;
  return Bytes(file.begin() + at, file.end());
}
struct AnimFrame {
  uint32_t x = 0, y = 0;  // even
  uint32_t width = 0, height = 0;
  Bytes image;  // ImageChunks
};
Bytes Animation(uint32_t width, uint32_t height, const std::vector<AnimFrame>& frames) {
  Bytes chunks = Vp8x(0x12, width, height);  // animation + alpha
  Bytes anim;
  Le(&anim, 0xff0000ffu, 4);  // a background colour the decode must ignore
  Le(&anim, 0, 2);
  const Bytes anim_chunk = Chunk("ANIM", anim);
  Append(&chunks, anim_chunk.data(), anim_chunk.size());
  for (const AnimFrame& f : frames) {
    Bytes p;
    Le(&p, f.x / 2, 3);
    Le(&p, f.y / 2, 3);
    Le(&p, f.width - 1, 3);
    Le(&p, f.height - 1, 3);
    Le(&p, 100, 3);
    p.push_back(0);
    Append(&p, f.image.data(), f.image.size());
    const Bytes c = Chunk("ANMF", p);
    Append(&chunks, c.data(), c.size());
  }
  return Riff(chunks);
}

struct Decoded {
  absl::Status status;
  ImageHeader header;
  Bytes rgb;
};

Decoded DecodeWhole(ImageDecoder* dec, const Bytes& file, uint64_t max_pixels = 64ull << 20) {
  Decoded d;
  DecodeLimits limits;
  limits.max_pixels = max_pixels;
  d.status = dec->ReadHeader(file.data(), file.size(), limits, &d.header);
  if (!d.status.ok()) return d;
  d.rgb.assign(size_t{d.header.width} * d.header.height * 3, 0xAB);
  d.status = dec->Decode(DecodeRegion{0, 0, d.header.height, d.header.width}, d.rgb.data(),
                         size_t{d.header.width} * 3);
  return d;
}

Decoded DecodeWhole(const Bytes& file, uint64_t max_pixels = 64ull << 20) {
  auto dec = MakeWebpDecoder();
  return DecodeWhole(dec.get(), file, max_pixels);
}

// Decodes `r` with a stride wider than the row (guard bytes must survive)
// and checks it against the whole decode's window.
void CheckRegion(ImageDecoder* dec, const Bytes& file, const Bytes& whole, uint32_t width,
                 const DecodeRegion& r) {
  CAPTURE(r.top, r.left, r.height, r.width);
  DecodeLimits limits;
  ImageHeader header;
  REQUIRE(dec->ReadHeader(file.data(), file.size(), limits, &header).ok());
  const size_t stride = size_t{r.width} * 3 + 5;
  Bytes out(stride * r.height, 0xCD);
  REQUIRE(dec->Decode(r, out.data(), stride).ok());
  for (uint32_t y = 0; y < r.height; ++y) {
    const uint8_t* want = &whole[(size_t{r.top + y} * width + r.left) * 3];
    REQUIRE(std::memcmp(&out[y * stride], want, size_t{r.width} * 3) == 0);
    for (size_t g = size_t{r.width} * 3; g < stride; ++g) REQUIRE(out[y * stride + g] == 0xCD);
  }
}

// Edges, corners, single pixels and rows, odd and even offsets, and a
// deterministic spread of other windows.
void CheckRegions(const Bytes& file) {
  auto dec = MakeWebpDecoder();
  const Decoded whole = DecodeWhole(dec.get(), file);
  REQUIRE(whole.status.ok());
  const uint32_t W = whole.header.width, H = whole.header.height;
  std::vector<DecodeRegion> regions = {
      {0, 0, H, W},     {0, 0, 1, 1},         {H - 1, W - 1, 1, 1}, {0, W - 1, H, 1},
      {H - 1, 0, 1, W}, {1, 1, H - 2, W - 2}, {H / 2, 0, 1, W},     {0, W / 2, H, 1},
      {1, 0, 1, 1},     {2, 2, 2, 2},         {3, 3, 3, 3},         {H - 2, W - 3, 2, 3},
  };
  uint32_t state = 12345;
  auto next = [&state](uint32_t n) {
    state = state * 1103515245u + 12345u;
    return (state >> 8) % n;
  };
  for (int i = 0; i < 80; ++i) {
    DecodeRegion r;
    r.top = next(H);
    r.left = next(W);
    r.height = 1 + next(i % 3 == 0 ? std::min(4u, H - r.top) : H - r.top);
    r.width = 1 + next(i % 3 == 0 ? std::min(4u, W - r.left) : W - r.left);
    regions.push_back(r);
  }
  for (const DecodeRegion& r : regions) CheckRegion(dec.get(), file, whole.rgb, W, r);
}

TEST_CASE("WebP: lossless RGB and RGBA give the coded colours, alpha dropped", "[webp]") {
  for (int channels : {3, 4}) {
    for (auto [w, h] : {std::pair{1u, 1u}, {64u, 48u}, {33u, 17u}}) {
      CAPTURE(channels, w, h);
      const Pixels src = Photo(w, h, channels, w + channels);
      EncodeOptions o;
      o.lossless = true;
      const Bytes file = Encode(src, o);
      const Decoded d = DecodeWhole(file);
      REQUIRE(d.status.ok());
      CHECK(d.header.format == ImageFormat::kWebp);
      CHECK(d.header.width == w);
      CHECK(d.header.height == h);
      CHECK(std::string(d.header.mode) == (channels == 4 ? "RGBA" : "RGB"));
      CHECK(d.rgb == DropAlpha(src));  // colour under alpha 0 included (exact)
    }
  }
}

TEST_CASE("WebP: lossy RGB and RGBA (ALPH) match libwebp's RGBA decode", "[webp]") {
  for (int channels : {3, 4}) {
    for (int filter_type : {0, 1}) {
      for (auto [w, h] : {std::pair{1u, 1u}, {2u, 3u}, {61u, 45u}, {64u, 64u}}) {
        CAPTURE(channels, filter_type, w, h);
        const Pixels src = Photo(w, h, channels, w * 3 + h);
        EncodeOptions o;
        o.filter_type = filter_type;
        o.alpha_quality = 60;
        const Bytes file = Encode(src, o);
        const Decoded d = DecodeWhole(file);
        REQUIRE(d.status.ok());
        CHECK(std::string(d.header.mode) == (channels == 4 ? "RGBA" : "RGB"));
        CHECK(d.rgb == LibwebpRgb(file));
        CHECK(d.rgb == PilRgb(file));
        // And it is the picture: lossy, but close to the source on average
        // (not at 2x3, where 4:2:0 averages away a full-range gradient).
        const Bytes rgb = DropAlpha(src);
        double err = 0;
        for (size_t i = 0; i < rgb.size(); ++i) err += std::abs(int(rgb[i]) - int(d.rgb[i]));
        if (w > 8) CHECK(err / rgb.size() < 24);
      }
    }
  }
}

TEST_CASE("WebP: regions equal the whole decode's window", "[webp]") {
  const Pixels rgb = Photo(97, 70, 3, 1), rgba = Photo(97, 70, 4, 2);
  EncodeOptions lossy, simple, nofilter, lossless;
  simple.filter_type = 0;
  simple.quality = 30;
  nofilter.filter_strength = 0;
  nofilter.segments = 1;
  lossless.lossless = true;
  SECTION("lossy, strong filter") { CheckRegions(Encode(rgb, lossy)); }
  SECTION("lossy, simple filter") { CheckRegions(Encode(rgb, simple)); }
  SECTION("lossy, no filter") { CheckRegions(Encode(rgb, nofilter)); }
  SECTION("lossy with alpha") { CheckRegions(Encode(rgba, lossy)); }
  SECTION("lossless") { CheckRegions(Encode(rgba, lossless)); }
}

TEST_CASE("WebP: animation: the first frame at its offset on a cleared canvas", "[webp]") {
  const Pixels f1 = Photo(20, 12, 4, 3), f2 = Photo(40, 30, 4, 4);
  EncodeOptions ll, lossy;
  ll.lossless = true;
  const Bytes first_ll = ImageChunks(Encode(f1, ll));
  const Bytes first_lossy = ImageChunks(Encode(f1, lossy));
  const Bytes second = ImageChunks(Encode(f2, ll));
  for (const Bytes* first : {&first_ll, &first_lossy}) {
    const Bytes file = Animation(40, 30, {{6, 4, 20, 12, *first}, {0, 0, 40, 30, second}});
    const Decoded d = DecodeWhole(file);
    REQUIRE(d.status.ok());
    CHECK(d.header.width == 40);
    CHECK(d.header.height == 30);
    CHECK(std::string(d.header.mode) == "RGBA");
    // The frame alone, as libwebp decodes it.
    Bytes frame = first == &first_ll ? DropAlpha(f1) : LibwebpRgb(Riff([&] {
      Bytes c = Vp8x(0x10, 20, 12);
      Append(&c, first->data(), first->size());
      return c;
    }()));
    REQUIRE(frame.size() == 20 * 12 * 3);
    Bytes want(40 * 30 * 3, 0);
    for (int y = 0; y < 12; ++y) std::memcpy(&want[((4 + y) * 40 + 6) * 3], &frame[y * 20 * 3], 60);
    CHECK(d.rgb == want);
    CHECK(d.rgb == PilRgb(file));
    CheckRegions(file);
  }
}

TEST_CASE("WebP: animation: invalid frames are refused, many frames are cheap", "[webp]") {
  EncodeOptions ll;
  ll.lossless = true;
  const Bytes tiny = ImageChunks(Encode(Photo(4, 4, 4, 5), ll));
  SECTION("frame outside the canvas") {
    for (auto [x, y] : {std::pair{14u, 0u}, {0u, 14u}, {16u, 16u}, {1u << 20, 0u}}) {
      const Decoded d = DecodeWhole(Animation(16, 16, {{x, y, 4, 4, tiny}}));
      CHECK(d.status.code() == absl::StatusCode::kInvalidArgument);
    }
  }
  SECTION("no frame") {
    CHECK(DecodeWhole(Animation(16, 16, {})).status.code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a huge frame count") {
    const std::vector<AnimFrame> frames(100000, AnimFrame{2, 2, 4, 4, tiny});
    const Bytes file = Animation(16, 16, frames);
    const Decoded d = DecodeWhole(file);
    REQUIRE(d.status.ok());
    CHECK(d.rgb[0] == 0);
    CHECK(d.rgb == PilRgb(file));
  }
}

TEST_CASE("WebP: caps: declared sizes over max_pixels fail before any decoding", "[webp]") {
  constexpr uint64_t kCap = 4 << 20;
  // Headers only: nothing to decode, so only a check made first can give
  // RESOURCE_EXHAUSTED (the rest of each file is missing).
  for (auto [w, h] : {std::pair{16383u, 16383u}, {65535u, 65535u}, {4097u, 1024u}}) {
    CAPTURE(w, h);
    Bytes vp8x = Riff(Vp8x(0x10, w, h));
    vp8x[5] = 0x10;  // the RIFF size promises 4 KiB more
    CHECK(DecodeWhole(vp8x, kCap).status.code() == absl::StatusCode::kResourceExhausted);
  }
  // A VP8L header of 16383x16383 (14-bit sizes), then nothing.
  Bytes vp8l_header = {0x2f};
  Le(&vp8l_header, 16382u | (16382u << 14), 4);
  Bytes vp8l = Riff(Chunk("VP8L", vp8l_header));
  CHECK(DecodeWhole(vp8l, kCap).status.code() == absl::StatusCode::kResourceExhausted);
  // A VP8 key frame header of 16383x16383.
  Bytes vp8_header = {0x30, 0x00, 0x00, 0x9d, 0x01, 0x2a, 0xff, 0x3f, 0xff, 0x3f};
  Bytes vp8 = Riff(Chunk("VP8 ", vp8_header));
  CHECK(DecodeWhole(vp8, kCap).status.code() == absl::StatusCode::kResourceExhausted);
  // An animation canvas of 16383x16383 with a 4x4 frame.
  EncodeOptions ll;
  ll.lossless = true;
  const Bytes tiny = ImageChunks(Encode(Photo(4, 4, 4, 5), ll));
  CHECK(DecodeWhole(Animation(16383, 16383, {{0, 0, 4, 4, tiny}}), kCap).status.code() ==
        absl::StatusCode::kResourceExhausted);
  // At the cap exactly: fine.
  const Bytes at_cap = Encode(Photo(64, 32, 3, 6), ll);
  CHECK(DecodeWhole(at_cap, 64 * 32).status.ok());
  CHECK(DecodeWhole(at_cap, 64 * 32 - 1).status.code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("WebP: truncation at every cut point fails cleanly", "[webp]") {
  EncodeOptions lossy, ll;
  ll.lossless = true;
  const Pixels rgba = Photo(24, 18, 4, 7);
  const Bytes still_lossy = Encode(rgba, lossy);
  const Bytes still_ll = Encode(rgba, ll);
  const Bytes anim =
      Animation(24, 18,
                {{0, 0, 24, 18, ImageChunks(still_lossy)},
                 {2, 2, 24 - 2, 18 - 2, ImageChunks(Encode(Photo(22, 16, 4, 8), ll))}});
  auto dec = MakeWebpDecoder();
  for (const Bytes* file : {&still_lossy, &still_ll, &anim}) {
    REQUIRE(DecodeWhole(dec.get(), *file).status.ok());
    for (size_t cut = 0; cut < file->size(); ++cut) {
      CAPTURE(file->size(), cut);
      const Bytes part(file->begin(), file->begin() + cut);
      const Decoded d = DecodeWhole(dec.get(), part);
      REQUIRE(d.status.code() == absl::StatusCode::kInvalidArgument);
      REQUIRE(!d.status.message().empty());
    }
  }
  SECTION("RIFF size past the end of the file") {
    Bytes longer = still_ll;
    longer[4] += 2;
    const Decoded d = DecodeWhole(longer);
    CHECK(d.status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(d.status.message().find("truncated") != absl::string_view::npos);
  }
  SECTION("a chunk past the RIFF end") {
    Bytes shorter = still_ll;
    shorter[4] -= 2;
    CHECK(DecodeWhole(shorter).status.code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("bitstream shorter than the image, container consistent") {
    // The last chunk (VP8L, or VP8 after VP8X and ALPH) keeps half its
    // payload; every size is rewritten to agree.
    for (const Bytes* file : {&still_lossy, &still_ll}) {
      const std::vector<std::pair<std::string, Bytes>> chunks = ChunksOf(*file);
      Bytes rebuilt;
      for (size_t i = 0; i < chunks.size(); ++i) {
        Bytes payload = chunks[i].second;
        if (i + 1 == chunks.size()) payload.resize(payload.size() / 2);
        Append(&rebuilt, Chunk(chunks[i].first.c_str(), payload));
      }
      CHECK(DecodeWhole(Riff(rebuilt)).status.code() == absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST_CASE("WebP: corrupt bitstreams fail as libwebp fails, or decode as it decodes", "[webp]") {
  EncodeOptions lossy, ll;
  ll.lossless = true;
  const Pixels rgba = Photo(40, 30, 4, 9);
  for (const Bytes& file :
       {Encode(rgba, lossy), Encode(rgba, ll), Encode(Photo(40, 30, 3, 9), lossy)}) {
    auto dec = MakeWebpDecoder();
    int failures = 0;
    for (size_t at = 12; at < file.size(); at += 3) {
      for (uint8_t flip : {0x01, 0x80, 0xff}) {
        CAPTURE(file.size(), at, flip);
        Bytes bad = file;
        bad[at] ^= flip;
        const Decoded d = DecodeWhole(dec.get(), bad);
        const Bytes want = PilRgb(bad);
        REQUIRE(d.status.ok() == !want.empty());
        if (d.status.ok()) {
          REQUIRE(d.rgb == want);
        } else {
          ++failures;
          REQUIRE(d.status.code() == absl::StatusCode::kInvalidArgument);
          REQUIRE(!d.status.message().empty());
        }
      }
    }
    CHECK(failures > 0);
  }
  SECTION("a bad VP8 start code, a bad VP8L signature, bad alpha") {
    Bytes vp8 = Encode(Photo(16, 16, 3, 1), lossy);
    REQUIRE(std::memcmp(&vp8[12], "VP8 ", 4) == 0);
    vp8[20 + 3] ^= 0x40;  // 9d 01 2a
    CHECK(DecodeWhole(vp8).status.code() == absl::StatusCode::kInvalidArgument);
    Bytes vp8l = Encode(Photo(16, 16, 3, 1), ll);
    vp8l[20] = 0x2e;
    CHECK(DecodeWhole(vp8l).status.code() == absl::StatusCode::kInvalidArgument);
    Bytes alpha = Encode(Photo(16, 16, 4, 1), lossy);
    REQUIRE(std::memcmp(&alpha[30], "ALPH", 4) == 0);
    alpha[38] |= 3;  // compression method 3 does not exist
    const Decoded d = DecodeWhole(alpha);
    CHECK(d.status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(PilRgb(alpha).empty());
  }
}

TEST_CASE("WebP: errors of the calls themselves", "[webp]") {
  auto dec = MakeWebpDecoder();
  Bytes out(64 * 3);
  CHECK(dec->Decode({0, 0, 1, 1}, out.data(), 3).code() == absl::StatusCode::kFailedPrecondition);
  for (const Bytes& junk :
       {Bytes{}, Bytes{'R', 'I', 'F', 'F'}, Bytes(40, 0), Riff(Chunk("JUNK", Bytes(8, 1)))}) {
    CHECK(DecodeWhole(dec.get(), junk).status.code() == absl::StatusCode::kInvalidArgument);
  }
  EncodeOptions ll;
  ll.lossless = true;
  const Bytes file = Encode(Photo(8, 8, 3, 1), ll);
  DecodeLimits limits;
  ImageHeader header;
  REQUIRE(dec->ReadHeader(file.data(), file.size(), limits, &header).ok());
  for (const DecodeRegion& r :
       {DecodeRegion{0, 0, 0, 1}, DecodeRegion{0, 0, 1, 0}, DecodeRegion{8, 0, 1, 1},
        DecodeRegion{0, 7, 1, 2}, DecodeRegion{0xffffffffu, 0, 2, 1}}) {
    CHECK(dec->Decode(r, out.data(), 64 * 3).code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(dec->Decode({0, 0, 1, 8}, out.data(), 23).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("WebP: one decoder across files: nothing leaks from one file to the next", "[webp]") {
  EncodeOptions lossy, ll;
  ll.lossless = true;
  const Bytes a = Animation(30, 20, {{4, 2, 10, 8, ImageChunks(Encode(Photo(10, 8, 4, 1), ll))}});
  const Bytes b = Encode(Photo(31, 21, 3, 2), lossy);
  const Bytes c = Encode(Photo(12, 40, 4, 3), ll);
  const Bytes bad = Bytes(b.begin(), b.begin() + b.size() / 2);
  auto dec = MakeWebpDecoder();
  for (int round = 0; round < 2; ++round) {
    for (const Bytes* f : {&a, &b, &bad, &c, &a}) {
      const Decoded shared = DecodeWhole(dec.get(), *f);
      const Decoded fresh = DecodeWhole(*f);
      REQUIRE(shared.status.code() == fresh.status.code());
      REQUIRE(std::string(shared.header.mode) == fresh.header.mode);
      REQUIRE(shared.header.width == fresh.header.width);
      REQUIRE(shared.rgb == fresh.rgb);
    }
  }
  // A failed ReadHeader leaves no image to decode.
  DecodeLimits limits;
  ImageHeader header;
  REQUIRE(dec->ReadHeader(c.data(), c.size(), limits, &header).ok());
  REQUIRE(!dec->ReadHeader(bad.data(), bad.size(), limits, &header).ok());
  Bytes out(3);
  CHECK(dec->Decode({0, 0, 1, 1}, out.data(), 3).code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace stoker::image
