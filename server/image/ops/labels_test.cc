// Label maps: decoded from single-channel PNGs (palette indices, gray
// values, 16-bit values) and moved by an image's steps. Exact agreement with
// torchvision's functional ops on PIL masks is checked in
// tests/python/test_mask_geometry.py; here the properties that need no
// reference: values are moved, never made; flips undo themselves; a region
// lands where the geometry says; what fails.

#include "server/image/ops/labels.h"

#include <spng.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "server/image/decode/image_decoder.h"

namespace stoker::image {
namespace {

std::vector<uint8_t> EncodeGray(const std::vector<uint8_t>& samples, uint32_t h, uint32_t w,
                                uint8_t depth, uint8_t color_type, int palette = 0) {
  spng_ctx* enc = spng_ctx_new(SPNG_CTX_ENCODER);
  REQUIRE(enc != nullptr);
  spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = w;
  ihdr.height = h;
  ihdr.bit_depth = depth;
  ihdr.color_type = color_type;
  REQUIRE(spng_set_ihdr(enc, &ihdr) == 0);
  if (palette > 0) {
    spng_plte plte{};
    plte.n_entries = static_cast<uint32_t>(palette);
    for (int i = 0; i < palette; ++i) {
      plte.entries[i].red = static_cast<uint8_t>(i * 7);
      plte.entries[i].green = static_cast<uint8_t>(255 - i);
      plte.entries[i].blue = 9;
    }
    REQUIRE(spng_set_plte(enc, &plte) == 0);
  }
  REQUIRE(spng_encode_image(enc, samples.data(), samples.size(), SPNG_FMT_PNG,
                            SPNG_ENCODE_FINALIZE) == 0);
  size_t size = 0;
  int err = 0;
  void* png = spng_get_png_buffer(enc, &size, &err);
  REQUIRE(png != nullptr);
  std::vector<uint8_t> out(static_cast<uint8_t*>(png), static_cast<uint8_t*>(png) + size);
  std::free(png);
  spng_ctx_free(enc);
  return out;
}

LabelMap Decode(const std::vector<uint8_t>& png, absl::Status* status = nullptr) {
  auto dec = MakeDecoder(ImageFormat::kPng);
  ImageHeader h;
  REQUIRE(dec->ReadHeader(png.data(), png.size(), DecodeLimits{}, &h).ok());
  LabelMap m;
  m.height = h.height;
  m.width = h.width;
  m.data.resize(m.bytes() * 2);
  absl::Status s = dec->DecodeLabels(m.data.data(), &m.bpp);
  if (status != nullptr) *status = s;
  m.data.resize(m.bytes());
  return m;
}

// A map whose value at (y, x) is 1 + (y * 7 + x) % 200, with a 0 border.
LabelMap Pattern(uint32_t h, uint32_t w) {
  LabelMap m;
  m.height = h;
  m.width = w;
  m.data.resize(m.bytes());
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      m.data[size_t{y} * w + x] =
          y == 0 || x == 0 ? 0 : static_cast<uint8_t>(1 + (y * 7 + x) % 200);
    }
  }
  return m;
}

Step Make(StepKind k) {
  Step s;
  s.kind = k;
  return s;
}

TEST_CASE("masks decode as PIL opens them: palette indices, gray values, 16-bit values") {
  const uint32_t h = 5, w = 7;
  std::vector<uint8_t> idx(h * w);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint8_t>(i % 21 == 0 ? 255 : i % 21);
  SECTION("palette: the index, not the colour") {
    LabelMap m = Decode(EncodeGray(idx, h, w, 8, SPNG_COLOR_TYPE_INDEXED, 256));
    CHECK(m.bpp == 1);
    CHECK(m.data == idx);
  }
  SECTION("8-bit gray: the value") {
    LabelMap m = Decode(EncodeGray(idx, h, w, 8, SPNG_COLOR_TYPE_GRAYSCALE));
    CHECK(m.data == idx);
  }
  SECTION("16-bit gray: two bytes, the whole value") {
    std::vector<uint16_t> v(h * w);
    std::vector<uint8_t> be(h * w * 2);  // the samples' bytes
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<uint16_t>(i * 1500);
      std::memcpy(&be[2 * i], &v[i], 2);  // SPNG_FMT_PNG takes 16-bit samples in host order
    }
    LabelMap m = Decode(EncodeGray(be, h, w, 16, SPNG_COLOR_TYPE_GRAYSCALE));
    CHECK(m.bpp == 2);
    std::vector<uint16_t> got(h * w);
    std::memcpy(got.data(), m.data.data(), m.data.size());
    CHECK(got == v);
  }
  SECTION("4-bit gray is scaled by 17, as PIL opens it as L") {
    std::vector<uint8_t> packed((w + 1) / 2 * h, 0);
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const uint8_t v = static_cast<uint8_t>((y + x) % 16);
        packed[y * ((w + 1) / 2) + x / 2] |= static_cast<uint8_t>(x % 2 == 0 ? v << 4 : v);
      }
    }
    LabelMap m = Decode(EncodeGray(packed, h, w, 4, SPNG_COLOR_TYPE_GRAYSCALE));
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) CHECK(m.data[y * w + x] == ((y + x) % 16) * 17);
    }
  }
  SECTION("a colour PNG is refused, naming its mode") {
    std::vector<uint8_t> rgb(h * w * 3, 1);
    absl::Status s;
    Decode(EncodeGray(rgb, h, w, 8, SPNG_COLOR_TYPE_TRUECOLOR), &s);
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK(std::string(s.message()).find("single-channel") != std::string::npos);
  }
}

TEST_CASE("steps move label values and never make new ones") {
  LabelMap m = Pattern(40, 60);
  std::set<uint8_t> before(m.data.begin(), m.data.end());
  SampleSteps steps;
  steps.steps[steps.count++] = Make(StepKind::kColorJitter);  // ignored
  Step crop = Make(StepKind::kCrop);
  crop.top = 3, crop.left = 5, crop.height = 30, crop.width = 41;
  steps.steps[steps.count++] = crop;
  Step resize = Make(StepKind::kResize);
  resize.height = 77, resize.width = 13;
  steps.steps[steps.count++] = resize;
  Step pad = Make(StepKind::kPad);
  pad.pad[0] = 2, pad.pad[1] = 0, pad.pad[2] = 4, pad.pad[3] = 9;
  steps.steps[steps.count++] = pad;
  Step rot = Make(StepKind::kRotate);
  rot.angle = 23;
  rot.interpolation = Interpolation::kBilinear;  // masks are moved NEAREST regardless
  steps.steps[steps.count++] = rot;
  std::vector<uint8_t> scratch;
  REQUIRE(ApplyLabelSteps(steps, 255, &m, &scratch).ok());
  CHECK(m.height == 86);
  CHECK(m.width == 19);
  before.insert(255);
  for (uint8_t v : m.data) CHECK(before.count(v) == 1);
  CHECK(std::count(m.data.begin(), m.data.end(), 255) > 0);
}

TEST_CASE("a region lands where the crop and flip put it, flips twice are the identity") {
  LabelMap m = Pattern(20, 30);
  const LabelMap orig = m;
  SampleSteps steps;
  Step crop = Make(StepKind::kCrop);
  crop.top = 4, crop.left = 6, crop.height = 10, crop.width = 12;
  steps.steps[steps.count++] = crop;
  steps.steps[steps.count++] = Make(StepKind::kHorizontalFlip);
  std::vector<uint8_t> scratch;
  REQUIRE(ApplyLabelSteps(steps, 255, &m, &scratch).ok());
  for (uint32_t y = 0; y < 10; ++y) {
    for (uint32_t x = 0; x < 12; ++x) {
      CHECK(m.data[y * 12 + x] == orig.data[(4 + y) * 30 + (6 + 11 - x)]);
    }
  }
  LabelMap twice = orig;
  SampleSteps flips;
  flips.steps[flips.count++] = Make(StepKind::kVerticalFlip);
  flips.steps[flips.count++] = Make(StepKind::kHorizontalFlip);
  flips.steps[flips.count++] = Make(StepKind::kHorizontalFlip);
  flips.steps[flips.count++] = Make(StepKind::kVerticalFlip);
  REQUIRE(ApplyLabelSteps(flips, 255, &twice, &scratch).ok());
  CHECK(twice.data == orig.data);
}

TEST_CASE("AugMix's chains leave labels alone, a crop outside the map fails") {
  LabelMap m = Pattern(16, 16);
  const LabelMap orig = m;
  SampleSteps steps;
  steps.steps[steps.count++] = Make(StepKind::kMixBegin);
  steps.steps[steps.count++] = Make(StepKind::kMixChain);
  Step rot = Make(StepKind::kRotate);
  rot.angle = 40;
  steps.steps[steps.count++] = rot;
  steps.steps[steps.count++] = Make(StepKind::kMixEnd);
  std::vector<uint8_t> scratch;
  REQUIRE(ApplyLabelSteps(steps, 255, &m, &scratch).ok());
  CHECK(m.data == orig.data);

  SampleSteps bad;
  Step crop = Make(StepKind::kCrop);
  crop.top = 10, crop.left = 0, crop.height = 10, crop.width = 4;
  bad.steps[bad.count++] = crop;
  absl::Status s = ApplyLabelSteps(bad, 255, &m, &scratch);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()).find("outside the 16x16 mask") != std::string::npos);
}

TEST_CASE("16-bit labels keep their whole value through resize and pad") {
  LabelMap m;
  m.height = 3, m.width = 4, m.bpp = 2;
  std::vector<uint16_t> v = {0, 300, 65000, 7, 1, 2, 3, 4, 40000, 5, 6, 8};
  m.data.resize(m.bytes());
  std::memcpy(m.data.data(), v.data(), m.data.size());
  SampleSteps steps;
  Step resize = Make(StepKind::kResize);
  resize.height = 6, resize.width = 8;
  steps.steps[steps.count++] = resize;
  Step pad = Make(StepKind::kPad);
  pad.pad[2] = 1;
  steps.steps[steps.count++] = pad;
  std::vector<uint8_t> scratch;
  REQUIRE(ApplyLabelSteps(steps, 1000, &m, &scratch).ok());
  std::vector<uint16_t> got(m.height * m.width);
  std::memcpy(got.data(), m.data.data(), m.data.size());
  CHECK(got[0 * 9 + 4] == 65000);  // a 2x upscale: (0, 4) reads (0, 2)
  CHECK(got[4 * 9 + 0] == 40000);
  CHECK(got[0 * 9 + 8] == 1000);   // the pad's fill
}

}  // namespace
}  // namespace stoker::image
