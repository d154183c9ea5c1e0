// The format sniffer, and the pipeline on the formats other than JPEG: each
// file goes to its format's decoder by its content, the fused geometry reads
// a decoded region, and the sample's format is reported. The decoders' own
// tests are <format>_decoder_test.cc.
#include "server/image/decode/image_decoder.h"

#include <spng.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/image/pipeline.h"
#include "testing/test_jpeg.h"
#include "testing/test_params.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using testing::DecodeParams;
using testing::RegionSteps;
using testing::TrainParams;

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Photo-like RGB: gradients plus noise, so that PNG's filters all show up.
std::vector<uint8_t> Pixels(uint32_t h, uint32_t w, uint32_t seed) {
  std::vector<uint8_t> px(size_t{h} * w * 3);
  uint32_t x = seed * 2654435761u + 1;
  for (uint32_t r = 0; r < h; ++r) {
    for (uint32_t c = 0; c < w; ++c) {
      for (uint32_t k = 0; k < 3; ++k) {
        x = x * 1664525u + 1013904223u;
        const uint32_t v = (r * 255 / h + c * 255 / w * (k + 1) / 3 + (x >> 28)) & 0xFF;
        px[(size_t{r} * w + c) * 3 + k] = static_cast<uint8_t>(v);
      }
    }
  }
  return px;
}

// An 8-bit RGB PNG of `px`, by libspng's encoder.
std::vector<uint8_t> EncodePng(const std::vector<uint8_t>& px, uint32_t h, uint32_t w) {
  spng_ctx* enc = spng_ctx_new(SPNG_CTX_ENCODER);
  REQUIRE(enc != nullptr);
  spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = w;
  ihdr.height = h;
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  REQUIRE(spng_set_ihdr(enc, &ihdr) == 0);
  REQUIRE(spng_encode_image(enc, px.data(), px.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) == 0);
  size_t size = 0;
  int err = 0;
  void* png = spng_get_png_buffer(enc, &size, &err);
  REQUIRE(png != nullptr);
  std::vector<uint8_t> out(static_cast<uint8_t*>(png), static_cast<uint8_t*>(png) + size);
  std::free(png);
  spng_ctx_free(enc);
  return out;
}

absl::Status Run(SampleProcessor& proc, const std::vector<uint8_t>& file, const PipelineParams& p,
                 const SampleSteps* steps, std::vector<uint8_t>* out, SampleResult* r) {
  out->assign(MaxSampleBytes(p), 0);
  const absl::Status s =
      steps != nullptr
          ? proc.ProcessSteps(file.data(), file.size(), p, *steps, out->data(), out->size(), r)
          : proc.Process(file.data(), file.size(), p, {}, out->data(), out->size(), r);
  if (s.ok()) out->resize(r->bytes);
  return s;
}

TEST_CASE("SniffFormat picks the format PIL's Image.open would, by content", "[image_decoder]") {
  struct Case {
    std::string head;
    ImageFormat want;
  };
  const Case cases[] = {
      {std::string("\xFF\xD8\xFF\xE0", 4), ImageFormat::kJpeg},
      {std::string("\xFF\xD8\x00", 3), ImageFormat::kUnknown},  // PIL wants FF D8 FF
      {"\x89PNG\r\n\x1A\n....", ImageFormat::kPng},
      {"\x89PNG\r\n\x1A", ImageFormat::kPng},  // cut inside the magic: a truncated PNG
      {"\x89PNG\r\n\x1Ax", ImageFormat::kUnknown},
      {std::string("\xFF\xD8", 2), ImageFormat::kJpeg},  // a truncated JPEG
      {std::string("\xFF", 1), ImageFormat::kUnknown},
      {std::string("RIFF\x10\0\0\0WEBPVP8 ", 16), ImageFormat::kWebp},
      {std::string("RIFF\x10\0\0\0WEBPVP8L", 16), ImageFormat::kWebp},
      {std::string("RIFF\x10\0\0\0WEBPVP8X", 16), ImageFormat::kWebp},
      {std::string("RIFF\x10\0\0\0WAVEfmt ", 16), ImageFormat::kUnknown},
      {std::string("RIFF\x10\0\0\0WEBPXXXX", 16), ImageFormat::kUnknown},
      {std::string("II\x2A\0", 4), ImageFormat::kTiff},
      {std::string("MM\0\x2A", 4), ImageFormat::kTiff},
      {std::string("II\0\x2A", 4), ImageFormat::kTiff},
      {std::string("MM\x2A\0", 4), ImageFormat::kTiff},
      {std::string("II\x2B\0", 4), ImageFormat::kTiff},  // BigTIFF
      {std::string("MM\0\x2B", 4), ImageFormat::kTiff},
      {std::string("II\x2C\0", 4), ImageFormat::kUnknown},
      {"BM\x36\x10", ImageFormat::kBmp},
      {"P6\n3 2\n255\n", ImageFormat::kPnm},
      {"P5 ", ImageFormat::kPnm},
      {"P1", ImageFormat::kPnm},
      {"P7", ImageFormat::kUnknown},  // PAM
      {"GIF89a", ImageFormat::kUnknown},
      {"", ImageFormat::kUnknown},
  };
  for (const Case& c : cases) {
    INFO(c.head);
    const std::vector<uint8_t> b = Bytes(c.head);
    CHECK(SniffFormat(b.data(), b.size()) == c.want);
  }
  CHECK(SniffFormat(nullptr, 0) == ImageFormat::kUnknown);
  CHECK(std::string(ImageFormatName(ImageFormat::kWebp)) == "webp");
  CHECK(std::string(ImageFormatName(static_cast<ImageFormat>(kImageFormatCount))) == "unknown");
  for (uint32_t f = 0; f < kImageFormatCount; ++f) {
    const auto format = static_cast<ImageFormat>(f);
    const bool has = format != ImageFormat::kJpeg && format != ImageFormat::kUnknown;
    CHECK((MakeDecoder(format) != nullptr) == has);
  }
}

TEST_CASE("The pipeline decodes a PNG by its content, whatever the sample's name",
          "[image_decoder][pipeline]") {
  const uint32_t h = 37, w = 53;
  const std::vector<uint8_t> px = Pixels(h, w, 1);
  const std::vector<uint8_t> png = EncodePng(px, h, w);
  SampleProcessor proc;
  std::vector<uint8_t> out;
  SampleResult r;
  REQUIRE(Run(proc, png, DecodeParams(), nullptr, &out, &r).ok());
  CHECK(r.height == h);
  CHECK(r.width == w);
  CHECK(r.format == ImageFormat::kPng);
  CHECK(r.dct_scale == 8);
  CHECK(!r.progressive);
  CHECK(out == px);

  // The same processor goes back and forth between formats.
  const std::vector<uint8_t> jpeg = testing::EncodeJpeg(px, h, w, 3, testing::EncodeOptions());
  REQUIRE(Run(proc, jpeg, DecodeParams(), nullptr, &out, &r).ok());
  CHECK(r.format == ImageFormat::kJpeg);
  REQUIRE(Run(proc, png, DecodeParams(), nullptr, &out, &r).ok());
  CHECK(out == px);
}

TEST_CASE("A PNG's fused crop and resize equal the same steps run on the whole decode",
          "[image_decoder][pipeline]") {
  const uint32_t h = 301, w = 419;
  const std::vector<uint8_t> png = EncodePng(Pixels(h, w, 2), h, w);
  SampleProcessor proc;
  const PipelineParams p = TrainParams(64, 48);
  const CropBox boxes[] = {
      {0, 0, h, w}, {10, 20, 100, 150}, {h - 40, w - 33, 40, 33}, {150, 0, 151, 419}, {1, 1, 7, 5}};
  for (const CropBox& box : boxes) {
    for (bool flip : {false, true}) {
      INFO("box " << box.top << " " << box.left << " " << box.height << " " << box.width << " flip "
                  << flip);
      const SampleSteps fused = RegionSteps(p, box, flip);
      // An identity step first (posterize to 8 bits) keeps the crop and
      // resize from fusing: they then run on the whole decoded image.
      SampleSteps plain;
      plain.count = fused.count + 1;
      plain.steps[0].kind = StepKind::kPosterize;
      plain.steps[0].bits = 8;
      for (uint32_t i = 0; i < fused.count; ++i) plain.steps[i + 1] = fused.steps[i];
      std::vector<uint8_t> a, b;
      SampleResult ra, rb;
      REQUIRE(Run(proc, png, p, &fused, &a, &ra).ok());
      REQUIRE(Run(proc, png, p, &plain, &b, &rb).ok());
      CHECK(ra.height == 64);
      CHECK(ra.width == 48);
      CHECK(a == b);
    }
  }
}

TEST_CASE("A file in no format stoker reads is UNIMPLEMENTED, naming its first bytes",
          "[image_decoder][pipeline]") {
  SampleProcessor proc;
  std::vector<uint8_t> out;
  SampleResult r;
  const std::vector<uint8_t> gif = Bytes("GIF89a\x01\0\x01\0");
  absl::Status s = Run(proc, gif, DecodeParams(), nullptr, &out, &r);
  CHECK(absl::IsUnimplemented(s));
  INFO(s.message());
  CHECK(std::string(s.message()).find("47 49 46 38 39 61 (\"GIF89a\")") != std::string::npos);
  CHECK(std::string(s.message()).find("PNG, WebP, TIFF, BMP") != std::string::npos);
  CHECK(r.format == ImageFormat::kUnknown);
  s = Run(proc, {}, DecodeParams(), nullptr, &out, &r);
  CHECK(absl::IsUnimplemented(s));
  CHECK(std::string(s.message()).find("an empty file") != std::string::npos);

  // A truncated PNG: its decoder's error, the format still reported.
  const std::vector<uint8_t> png = EncodePng(Pixels(20, 20, 3), 20, 20);
  const std::vector<uint8_t> cut(png.begin(), png.begin() + png.size() / 2);
  s = Run(proc, cut, DecodeParams(), nullptr, &out, &r);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(r.format == ImageFormat::kPng);
}

}  // namespace
}  // namespace stoker::image
