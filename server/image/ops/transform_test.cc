#include "server/image/ops/transform.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "server/image/ops/rng.h"
#include "testing/test_jpeg.h"
#include "testing/test_params.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using testing::MeanAbsDiff;
using testing::RefAxis;

TEST_CASE("Train crop stays inside the image and is keyed", "[transform][crop]") {
  const PipelineParams p = testing::TrainParams();
  KeyedRng sizes(1);
  for (int i = 0; i < 3000; ++i) {
    const auto h = static_cast<uint32_t>(1 + sizes.Below(3000));
    const auto w = static_cast<uint32_t>(1 + sizes.Below(3000));
    KeyedRng rng(42, 0, i);
    const CropBox b = ChooseTrainCrop(h, w, p.ops[0], rng);
    CAPTURE(h, w, b.top, b.left, b.height, b.width);
    REQUIRE(b.height >= 1);
    REQUIRE(b.width >= 1);
    REQUIRE(b.top + b.height <= h);
    REQUIRE(b.left + b.width <= w);
  }
  auto box = [&](uint64_t seed, uint32_t epoch, uint64_t index) {
    KeyedRng rng(seed, epoch, index);
    const CropBox b = ChooseTrainCrop(375, 500, p.ops[0], rng);
    return std::make_tuple(b.top, b.left, b.height, b.width, ChooseFlip(p.ops[1].p, rng));
  };
  CHECK(box(1, 2, 3) == box(1, 2, 3));
  std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, bool>> distinct;
  for (uint64_t i = 0; i < 100; ++i) distinct.insert(box(1, 0, i));
  for (uint32_t e = 0; e < 100; ++e) distinct.insert(box(1, e, 7));
  CHECK(distinct.size() > 190);
  CHECK(box(1, 0, 5) != box(2, 0, 5));
}

TEST_CASE("Train crop area and ratio follow the parameters", "[transform][crop]") {
  PipelineParams p = testing::TrainParams();
  p.ops[0].scale[0] = 0.25f;
  p.ops[0].scale[1] = 0.5f;
  int in_range = 0;
  for (int i = 0; i < 500; ++i) {
    KeyedRng rng(3, 0, i);
    const CropBox b = ChooseTrainCrop(1000, 1000, p.ops[0], rng);
    const double area = static_cast<double>(b.height) * b.width / 1e6;
    const double ratio = static_cast<double>(b.width) / b.height;
    in_range += area > 0.24 && area < 0.51 && ratio > 0.74 && ratio < 1.34;
  }
  CHECK(in_range == 500);
  double flips = 0;
  for (int i = 0; i < 2000; ++i) {
    KeyedRng rng(4, 0, i);
    flips += ChooseFlip(p.ops[1].p, rng);
  }
  CHECK(std::abs(flips / 2000 - 0.5) < 0.05);
}

TEST_CASE("Train crop falls back to the central crop", "[transform][crop]") {
  OpParams p = testing::TrainParams().ops[0];
  p.ratio[0] = 10.0f;  // impossible on a square image at scale <= 1
  p.ratio[1] = 20.0f;
  p.scale[0] = 0.9f;
  KeyedRng rng(1);
  const CropBox b = ChooseTrainCrop(400, 400, p, rng);
  CHECK(b.width == 400);
  CHECK(b.height == 40);  // round(400 / 10)
  CHECK(b.top == 180);
  CHECK(b.left == 0);
  p.ratio[0] = 0.05f;
  p.ratio[1] = 0.1f;
  const CropBox c = ChooseTrainCrop(300, 400, p, rng);
  CHECK(c.height == 300);
  CHECK(c.width == 30);  // round(300 * 0.1)
  CHECK(c.left == 185);
}

TEST_CASE("Eval geometry follows Resize + CenterCrop", "[transform][eval]") {
  const OpParams resize = testing::EvalParams().ops[0];  // 256 -> 224
  uint32_t rh, rw;
  ResizeOutputSize(375, 500, resize, &rh, &rw);
  CHECK(rh == 256);
  CHECK(rw == 341);  // int(256 * 500 / 375)
  CHECK(CenterCropOffset(rh, 224) == 16);
  CHECK(CenterCropOffset(rw, 224) == 58);  // round(58.5) = 58, half to even
  ResizeOutputSize(683, 1024, resize, &rh, &rw);
  CHECK(rw == 383);
  CHECK(CenterCropOffset(rw, 224) == 80);  // round(79.5) = 80
  ResizeOutputSize(3000, 2000, resize, &rh, &rw);
  CHECK(rw == 256);
  CHECK(rh == 384);
  CHECK(CenterCropOffset(rh, 224) == 80);
}

// Runs both passes of a resample over a whole RGB image.
std::vector<uint8_t> RunPlans(const std::vector<uint8_t>& img, uint32_t h, uint32_t w,
                              const AxisSpec& sy, const AxisSpec& sx, bool antialias) {
  AxisPlan py, px;
  if (antialias) {
    BuildAntialiasPlan(sy, h, &py);
    BuildAntialiasPlan(sx, w, &px);
  } else {
    BuildBilinearPlan(sy, h, &py);
    BuildBilinearPlan(sx, w, &px);
  }
  const size_t hrow = size_t{px.out_size} * 3;
  std::vector<uint8_t> tmp(hrow * h), out(hrow * py.out_size);
  std::vector<uint8_t> row(size_t{w} * 3 + kResamplePadBytes, 0xEE);  // padding is read
  for (int32_t y = py.min_index; y < py.end_index; ++y) {
    std::memcpy(row.data(), &img[size_t(y) * w * 3], size_t{w} * 3);
    ResampleRow(row.data(), 0, px, &tmp[size_t(y) * hrow]);
  }
  std::vector<int32_t> acc(hrow);
  ResampleColumns(tmp.data(), hrow, 0, hrow, py, out.data(), hrow, acc.data());
  return out;
}

TEST_CASE("Antialias plans are normalized and in range", "[transform][resample]") {
  KeyedRng rng(11);
  for (int i = 0; i < 200; ++i) {
    const auto size = static_cast<uint32_t>(1 + rng.Below(2000));
    const auto pos = static_cast<uint32_t>(rng.Below(size));
    const auto len = static_cast<uint32_t>(1 + rng.Below(size - pos));
    const auto out = static_cast<uint32_t>(1 + rng.Below(400));
    AxisPlan plan;
    BuildAntialiasPlan(CropResizeAxis(pos, len, out), size, &plan);
    for (uint32_t o = 0; o < out; ++o) {
      int64_t sum = 0;
      for (int32_t t = 0; t < plan.count[o]; ++t) sum += plan.coeffs[o * plan.ksize + t];
      CAPTURE(size, pos, len, out, o);
      REQUIRE(plan.count[o] >= 1);
      REQUIRE(plan.first[o] >= static_cast<int32_t>(pos));
      REQUIRE(plan.first[o] + plan.count[o] <= static_cast<int32_t>(pos + len));
      REQUIRE(std::abs(sum - (1 << 22)) <= plan.count[o]);
    }
  }
}

TEST_CASE("Resample matches a double-precision reference", "[transform][resample]") {
  KeyedRng rng(12);
  for (int i = 0; i < 60; ++i) {
    const auto h = static_cast<uint32_t>(8 + rng.Below(300));
    const auto w = static_cast<uint32_t>(8 + rng.Below(300));
    const std::vector<uint8_t> img = testing::MakePhoto(h, w, 3, i);
    const auto top = static_cast<uint32_t>(rng.Below(h / 2));
    const auto left = static_cast<uint32_t>(rng.Below(w / 2));
    const auto ch = static_cast<uint32_t>(1 + rng.Below(h - top));
    const auto cw = static_cast<uint32_t>(1 + rng.Below(w - left));
    const auto oh = static_cast<uint32_t>(1 + rng.Below(150));
    const auto ow = static_cast<uint32_t>(1 + rng.Below(150));
    for (bool antialias : {true, false}) {
      const std::vector<uint8_t> got =
          RunPlans(img, h, w, CropResizeAxis(top, ch, oh), CropResizeAxis(left, cw, ow), antialias);
      const std::vector<uint8_t> want = testing::ReferenceResample(
          img, w, testing::RefCrop(top, ch, oh), testing::RefCrop(left, cw, ow), antialias);
      int worst = 0;
      const double mae = MeanAbsDiff(got.data(), want.data(), got.size(), &worst);
      CAPTURE(h, w, top, left, ch, cw, oh, ow, antialias, mae);
      CHECK(worst <= 1);  // rounding between the passes, as Pillow does
      CHECK(mae < 0.3);
    }
  }
}

TEST_CASE("Every SIMD level gives the same bytes", "[transform][resample]") {
  KeyedRng rng(13);
  for (int i = 0; i < 40; ++i) {
    const auto h = static_cast<uint32_t>(8 + rng.Below(400));
    const auto w = static_cast<uint32_t>(8 + rng.Below(400));
    const std::vector<uint8_t> img = testing::MakePhoto(h, w, 3, 100 + i);
    const auto oh = static_cast<uint32_t>(1 + rng.Below(100));
    const auto ow = static_cast<uint32_t>(1 + rng.Below(100));
    for (bool antialias : {true, false}) {
      std::vector<std::vector<uint8_t>> results;
      for (int level = 2; level >= 0; --level) {
        const int got_level = SetSimdLevelForTesting(level);
        REQUIRE(got_level <= level);
        results.push_back(
            RunPlans(img, h, w, CropResizeAxis(0, h, oh), CropResizeAxis(0, w, ow), antialias));
      }
      SetSimdLevelForTesting(2);
      CAPTURE(h, w, oh, ow, antialias);
      CHECK(results[0] == results[2]);
      CHECK(results[1] == results[2]);
    }
  }
}

TEST_CASE("Resize then crop equals one resample of the region", "[transform][resample]") {
  const uint32_t h = 120, w = 170;
  const std::vector<uint8_t> img = testing::MakePhoto(h, w, 3, 5);
  // Resize to 80x113, then crop 64x64 at (8, 24).
  const std::vector<uint8_t> full =
      RunPlans(img, h, w, ResizeCropAxis(h, 80, 0, 80), ResizeCropAxis(w, 113, 0, 113), true);
  const std::vector<uint8_t> region =
      RunPlans(img, h, w, ResizeCropAxis(h, 80, 8, 64), ResizeCropAxis(w, 113, 24, 64), true);
  for (uint32_t y = 0; y < 64; ++y) {
    REQUIRE(std::memcmp(&full[((y + 8) * 113 + 24) * 3], &region[y * 64 * 3], 64 * 3) == 0);
  }
}

TEST_CASE("A mirrored spec samples the mirrored image", "[transform][resample]") {
  const uint32_t h = 90, w = 131;
  const std::vector<uint8_t> img = testing::MakePhoto(h, w, 3, 9);
  std::vector<uint8_t> mirrored(img.size());
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      std::memcpy(&mirrored[(y * w + x) * 3], &img[(y * w + (w - 1 - x)) * 3], 3);
    }
  }
  const AxisSpec sy = CropResizeAxis(10, 70, 33);
  const AxisSpec sx = ResizeCropAxis(w, 100, 20, 47);
  const std::vector<uint8_t> a = RunPlans(img, h, w, sy, sx, true);
  const std::vector<uint8_t> b = RunPlans(mirrored, h, w, sy, MirrorAxis(sx, w), true);
  int worst = 0;
  std::vector<uint8_t> b_back(b.size());
  for (uint32_t y = 0; y < 33; ++y) {
    for (uint32_t x = 0; x < 47; ++x) {
      std::memcpy(&b_back[(y * 47 + x) * 3], &b[(y * 47 + (46 - x)) * 3], 3);
    }
  }
  MeanAbsDiff(a.data(), b_back.data(), a.size(), &worst);
  CHECK(worst <= 1);
}

TEST_CASE("Emit applies orientation then flip", "[transform][emit]") {
  // 2 rows x 3 columns, pixel value = 10 * row + column in every channel.
  const uint32_t h = 2, w = 3;
  std::vector<uint8_t> src(h * w * 3);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) src[(y * w + x) * 3 + c] = static_cast<uint8_t>(10 * y + x);
    }
  }
  auto at = [](uint32_t r, uint32_t c) { return static_cast<uint8_t>(10 * r + c); };
  // Expected oriented images, as PIL's exif_transpose produces them.
  struct Case {
    int orientation;
    uint32_t oh, ow;
    std::vector<uint8_t> want;
  };
  const std::vector<Case> cases = {
      {1, 2, 3, {at(0, 0), at(0, 1), at(0, 2), at(1, 0), at(1, 1), at(1, 2)}},
      {2, 2, 3, {at(0, 2), at(0, 1), at(0, 0), at(1, 2), at(1, 1), at(1, 0)}},
      {3, 2, 3, {at(1, 2), at(1, 1), at(1, 0), at(0, 2), at(0, 1), at(0, 0)}},
      {4, 2, 3, {at(1, 0), at(1, 1), at(1, 2), at(0, 0), at(0, 1), at(0, 2)}},
      {5, 3, 2, {at(0, 0), at(1, 0), at(0, 1), at(1, 1), at(0, 2), at(1, 2)}},
      {6, 3, 2, {at(1, 0), at(0, 0), at(1, 1), at(0, 1), at(1, 2), at(0, 2)}},
      {7, 3, 2, {at(1, 2), at(0, 2), at(1, 1), at(0, 1), at(1, 0), at(0, 0)}},
      {8, 3, 2, {at(0, 2), at(1, 2), at(0, 1), at(1, 1), at(0, 0), at(1, 0)}},
  };
  PipelineParams p;
  p.dtype = ring::kUint8;
  p.layout = ring::kNHWC;
  for (const Case& c : cases) {
    for (bool flip : {false, true}) {
      std::vector<uint8_t> out(h * w * 3);
      EmitSample(src.data(), h, w, c.orientation, flip, p, out.data());
      for (uint32_t y = 0; y < c.oh; ++y) {
        for (uint32_t x = 0; x < c.ow; ++x) {
          const uint32_t sx = flip ? c.ow - 1 - x : x;
          CAPTURE(c.orientation, flip, y, x);
          CHECK(out[(y * c.ow + x) * 3] == c.want[y * c.ow + sx]);
        }
      }
    }
  }
}

TEST_CASE("Float outputs use (x/255 - mean)/std in both layouts", "[transform][emit]") {
  const uint32_t h = 3, w = 4;
  std::vector<uint8_t> src(h * w * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 21 + 3);
  PipelineParams p;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};
  std::copy(mean, mean + 3, p.mean);
  std::copy(stdev, stdev + 3, p.stdev);
  for (uint32_t dtype : {ring::kFloat32, ring::kFloat16}) {
    for (uint32_t layout : {ring::kNHWC, ring::kNCHW}) {
      p.dtype = dtype;
      p.layout = layout;
      std::vector<uint8_t> out(h * w * 3 * 4);
      EmitSample(src.data(), h, w, 1, false, p, out.data());
      for (uint32_t y = 0; y < h; ++y) {
        for (uint32_t x = 0; x < w; ++x) {
          for (int c = 0; c < 3; ++c) {
            const float want = (src[(y * w + x) * 3 + c] / 255.0f - p.mean[c]) / p.stdev[c];
            const size_t i = layout == ring::kNCHW ? (c * h + y) * w + x : (y * w + x) * 3 + c;
            float got;
            if (dtype == ring::kFloat32) {
              std::memcpy(&got, &out[i * 4], 4);
              CHECK(got == want);
            } else {
              uint16_t half;
              std::memcpy(&half, &out[i * 2], 2);
              got = HalfToFloat(half);
              CHECK(std::abs(got - want) <= std::abs(want) * 1e-3f + 1e-4f);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("FloatToHalf rounds to nearest even", "[transform][emit]") {
  CHECK(FloatToHalf(0.0f) == 0x0000);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(FloatToHalf(1.0f) == 0x3c00);
  CHECK(FloatToHalf(-2.0f) == 0xc000);
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(70000.0f) == 0x7c00);
  CHECK(FloatToHalf(1.0f + 1.0f / 2048) == 0x3c00);     // tie, even stays
  CHECK(FloatToHalf(1.0f + 3.0f / 2048) == 0x3c02);     // tie, odd rounds up
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(FloatToHalf(std::ldexp(1.0f, -26)) == 0x0000);
#if defined(__FLT16_MAX__)
  KeyedRng rng(8);
  for (int i = 0; i < 100000; ++i) {
    const float f =
        static_cast<float>(rng.Uniform(-8.0, 8.0) * std::ldexp(1.0, -int(rng.Below(20))));
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &ref, 2);
    REQUIRE(FloatToHalf(f) == bits);
    REQUIRE(HalfToFloat(bits) == static_cast<float>(ref));
  }
#endif
}

TEST_CASE("CMYK converts the way PIL does", "[transform]") {
  // Stored (inverted) CMYK: 255 = no ink.
  const uint8_t cmyk[] = {255, 255, 255, 255,  // white
                          0,   255, 255, 255,  // full cyan
                          255, 255, 255, 0,    // full black
                          128, 64,  200, 100};
  uint8_t rgb[12];
  CmykRowToRgb(cmyk, 4, rgb);
  CHECK(rgb[0] == 255);
  CHECK(rgb[1] == 255);
  CHECK(rgb[3] == 0);
  CHECK(rgb[4] == 255);
  CHECK(rgb[6] == 0);
  CHECK(rgb[8] == 0);
  // 100 - round(127 * 100 / 255) = 100 - 50
  CHECK(rgb[9] == 50);
}

}  // namespace
}  // namespace stoker::image
