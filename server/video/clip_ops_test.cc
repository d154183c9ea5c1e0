#include "server/video/clip_ops.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "catch2/catch.hpp"

namespace stoker::video {
namespace {

// A clip of `frames` frames whose every byte differs (frame, row, column
// and channel all show).
std::vector<uint8_t> Pattern(uint32_t frames, uint32_t h, uint32_t w) {
  std::vector<uint8_t> clip(size_t{frames} * h * w * 3);
  for (size_t i = 0; i < clip.size(); ++i) clip[i] = static_cast<uint8_t>((i * 37 + i / 7) & 255);
  return clip;
}

std::vector<float> Run(const std::vector<uint8_t>& clip, uint32_t frames, uint32_t h, uint32_t w,
                       const ClipTransform& t) {
  std::vector<float> out(ClipOutputElements(frames, t, h, w), -1.0f);
  REQUIRE(ApplyClipTransform(clip.data(), frames, h, w, t, out.data()).ok());
  return out;
}

TEST_CASE("resize weights are torch's upsample_bilinear2d weights") {
  // One row of 340 with a single 255 at column 200, resized to 171: output
  // column 100 takes 0x1.4c5bp-2 of it (torch 1.13's value, printed from
  // torch.nn.functional.interpolate(..., mode="bilinear",
  // align_corners=False)), column 99 none.
  std::vector<uint8_t> row(340 * 3, 0);
  row[200 * 3] = 255;
  ClipTransform t;
  t.resize_height = 1;
  t.resize_width = 171;
  t.normalize = false;
  std::vector<float> out = Run(row, 1, 1, 340, t);
  CHECK(out[100] == 0x1.4c5bp-2f);
  CHECK(out[99] == 0.0f);
}

TEST_CASE("without a resize the values are ConvertImageDtype's x / 255, exactly") {
  const uint32_t h = 5, w = 7;
  std::vector<uint8_t> clip = Pattern(2, h, w);
  ClipTransform t;
  t.normalize = false;
  t.layout = ClipLayout::kTCHW;
  std::vector<float> out = Run(clip, 2, h, w, t);
  for (uint32_t f = 0; f < 2; ++f) {
    for (uint32_t c = 0; c < 3; ++c) {
      for (uint32_t y = 0; y < h; ++y) {
        for (uint32_t x = 0; x < w; ++x) {
          const float want = static_cast<float>(clip[((f * h + y) * w + x) * 3 + c]) / 255.0f;
          CHECK(out[((f * 3 + c) * h + y) * w + x] == want);
        }
      }
    }
  }
}

TEST_CASE("flip, crop, normalize and the layouts move the same values") {
  const uint32_t frames = 3, h = 24, w = 34;
  std::vector<uint8_t> clip = Pattern(frames, h, w);
  ClipTransform full;  // resized, flipped, normalized, not cropped, TCHW
  full.resize_height = 16;
  full.resize_width = 20;
  full.flip = true;
  full.layout = ClipLayout::kTCHW;
  std::vector<float> whole = Run(clip, frames, h, w, full);
  ClipTransform crop = full;  // the same with a 9 x 11 crop at (4, 6), CTHW
  crop.crop_top = 4;
  crop.crop_left = 6;
  crop.crop_height = 9;
  crop.crop_width = 11;
  crop.layout = ClipLayout::kCTHW;
  std::vector<float> part = Run(clip, frames, h, w, crop);
  for (uint32_t f = 0; f < frames; ++f) {
    for (uint32_t c = 0; c < 3; ++c) {
      for (uint32_t y = 0; y < 9; ++y) {
        for (uint32_t x = 0; x < 11; ++x) {
          CHECK(part[((c * frames + f) * 9 + y) * 11 + x] ==
                whole[((f * 3 + c) * 16 + 4 + y) * 20 + 6 + x]);
        }
      }
    }
  }
  // The flip mirrors each row of the unflipped frame; Normalize is
  // (x - mean) / std of the unnormalized value.
  ClipTransform plain = full;
  plain.flip = false;
  plain.normalize = false;
  std::vector<float> unflipped = Run(clip, frames, h, w, plain);
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t x = 0; x < 20; ++x) {
      const float v = unflipped[(c * 16 + 5) * 20 + (19 - x)];
      CHECK(whole[(c * 16 + 5) * 20 + x] == (v - full.mean[c]) / full.std[c]);
    }
  }
}

TEST_CASE("the uint8 form stores the nearest of each resized value times 255") {
  const uint32_t frames = 2, h = 24, w = 34;
  std::vector<uint8_t> clip = Pattern(frames, h, w);
  ClipTransform t;
  t.resize_height = 16;
  t.resize_width = 20;
  t.crop_height = 9;
  t.crop_width = 11;
  t.crop_top = 3;
  t.crop_left = 5;
  t.flip = true;
  t.normalize = false;
  std::vector<float> f = Run(clip, frames, h, w, t);
  std::vector<uint8_t> u(ClipOutputElements(frames, t, h, w));
  REQUIRE(ApplyClipTransform(clip.data(), frames, h, w, t, u.data()).ok());
  int rounded_up = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    CHECK(std::abs(u[i] / 255.0f - f[i]) <= 0.5f / 255 + 1e-6f);
    rounded_up += u[i] > f[i] * 255;
  }
  CHECK(rounded_up > 0);  // rounded, not truncated
  t.normalize = true;
  CHECK(ApplyClipTransform(clip.data(), frames, h, w, t, u.data()).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CenterCrop's offset rounds half to even, as Python's round") {
  CHECK(CenterCropOffset(128, 112) == 8);
  CHECK(CenterCropOffset(171, 112) == 30);  // 29.5
  CHECK(CenterCropOffset(5, 2) == 2);       // 1.5
  CHECK(CenterCropOffset(7, 2) == 2);       // 2.5
  CHECK(CenterCropOffset(100, 112) == 0);
}

TEST_CASE("a crop outside the resized frame, or a zero std, is refused by name") {
  std::vector<uint8_t> clip = Pattern(1, 8, 8);
  std::vector<float> out(3 * 8 * 8);
  ClipTransform t;
  t.crop_top = 2;
  t.crop_height = 7;
  t.crop_width = 4;
  absl::Status s = ApplyClipTransform(clip.data(), 1, 8, 8, t, out.data());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("does not lie inside") != std::string::npos);
  ClipTransform z;
  z.std[1] = 0;
  CHECK(ApplyClipTransform(clip.data(), 1, 8, 8, z, out.data()).code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::video
