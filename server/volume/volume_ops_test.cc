#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "server/volume/crop_foreground.h"
#include "server/volume/intensity.h"
#include "server/volume/orientation.h"
#include "server/volume/prefix.h"
#include "server/volume/spacing.h"

namespace stoker::volume {
namespace {

FloatVolume Ramp(std::array<int64_t, 3> shape, int64_t channels = 1) {
  FloatVolume v;
  v.shape = shape;
  v.channels = channels;
  v.values.resize(static_cast<size_t>(v.Voxels()));
  for (size_t n = 0; n < v.values.size(); ++n) v.values[n] = static_cast<float>(n);
  return v;
}

TEST_CASE("ScaleIntensityRange: torch's float32 steps, the clip, a_min == a_max") {
  FloatVolume v;
  v.values = {-1000.f, -57.f, 0.f, 53.5f, 164.f, 3000.f};
  ScaleIntensityRangeParams p;
  p.a_min = -57;
  p.a_max = 164;
  p.b_min = 0.0;
  p.b_max = 1.0;
  p.clip = true;
  ScaleIntensityRange(p, &v);
  std::vector<float> want;
  for (float x : {-1000.f, -57.f, 0.f, 53.5f, 164.f, 3000.f}) {
    float y = (x - -57.f) / 221.f;
    y = y * 1.f + 0.f;
    want.push_back(std::min(1.f, std::max(0.f, y)));
  }
  CHECK(v.values == want);
  CHECK(v.values.front() == 0.f);
  CHECK(v.values.back() == 1.f);

  v.values = {5.f, 7.f};
  p.a_max = p.a_min;
  ScaleIntensityRange(p, &v);
  CHECK(v.values == std::vector<float>{62.f, 64.f});  // x - a_min + b_min
}

TEST_CASE("NormalizeIntensity: whole, nonzero, channel-wise, given values, zero std") {
  FloatVolume v = Ramp({2, 2, 1}, 2);  // channel 0: 0 1 2 3, channel 1: 4 5 6 7
  NormalizeIntensityParams p;
  REQUIRE(NormalizeIntensity(p, &v).ok());
  const double mean = 3.5, sd = std::sqrt(5.25);
  for (size_t n = 0; n < 8; ++n) {
    CHECK(v.values[n] == static_cast<float>((static_cast<float>(n) - static_cast<float>(mean)) /
                                            static_cast<float>(sd)));
  }
  v = Ramp({2, 2, 1}, 2);
  p.nonzero = true;
  p.channel_wise = true;
  REQUIRE(NormalizeIntensity(p, &v).ok());
  CHECK(v.values[0] == 0.f);  // zero stays
  CHECK(v.values[2] == 0.f);  // channel 0's nonzero: 1 2 3, mean 2
  CHECK(v.values[5] == Approx((5 - 5.5) / std::sqrt(1.25)));

  v.values.assign(8, 4.f);
  p = {};
  REQUIRE(NormalizeIntensity(p, &v).ok());
  CHECK(v.values == std::vector<float>(8, 0.f));  // std 0: divided by 1

  v = Ramp({2, 2, 1}, 2);
  p.channel_wise = true;
  p.subtrahend = {1, 2, 3};
  CHECK(NormalizeIntensity(p, &v).code() == absl::StatusCode::kInvalidArgument);
  p.subtrahend = {1, 2};
  p.divisor = {2, 4};
  REQUIRE(NormalizeIntensity(p, &v).ok());
  CHECK(v.values[3] == 1.f);  // (3 - 1) / 2
  CHECK(v.values[7] == 1.25f);  // (7 - 2) / 4
}

TEST_CASE("CropForeground: the box, margin, allow_smaller, k_divisible, the affine") {
  FloatVolume v;
  v.shape = {10, 8, 6};
  v.values.assign(static_cast<size_t>(v.Voxels()), 0.f);
  v.values[v.At(0, 3, 2, 1)] = 1.f;
  v.values[v.At(0, 5, 4, 2)] = 0.5f;
  v.affine = {2, 0, 0, -10, 0, 3, 0, -20, 0, 0, 4, -30, 0, 0, 0, 1};
  CropForegroundParams p;
  absl::StatusOr<Box> b = ForegroundBox(v, p, "v");
  REQUIRE(b.ok());
  CHECK(b->start == std::array<int64_t, 3>{3, 2, 1});
  CHECK(b->end == std::array<int64_t, 3>{6, 5, 3});
  p.margin = {4, 1, 0};
  b = ForegroundBox(v, p, "v");
  REQUIRE(b.ok());
  CHECK(b->start == std::array<int64_t, 3>{-1, 1, 1});  // past the edge: padded
  p.allow_smaller = true;
  b = ForegroundBox(v, p, "v");
  REQUIRE(b.ok());
  CHECK(b->start == std::array<int64_t, 3>{0, 1, 1});
  CHECK(b->end == std::array<int64_t, 3>{10, 6, 3});
  p.k_divisible = {4, 4, 4};
  b = ForegroundBox(v, p, "v");
  REQUIRE(b.ok());
  // Sizes 10 -> 12, 5 -> 8, 2 -> 4, each start moved back by half the growth.
  CHECK(b->start == std::array<int64_t, 3>{-1, 0, 0});
  CHECK(b->end == std::array<int64_t, 3>{11, 8, 4});

  FloatVolume c = v;
  CropToBox(*b, &c);
  CHECK(c.shape == std::array<int64_t, 3>{12, 8, 4});
  CHECK(c.values[c.At(0, 4, 2, 1)] == 1.f);  // (3, 2, 1) - start
  CHECK(c.values[c.At(0, 0, 0, 0)] == 0.f);
  CHECK(c.affine[3] == -12);  // -10 + 2 * -1
  CHECK(c.affine[7] == -20);  // -20 + 3 * 0
  CHECK(c.affine[11] == -30);

  v.values.assign(v.values.size(), -1.f);
  CHECK(ForegroundBox(v, p, "v").status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("Orientation: codes, io_orientation of rotated affines, reorienting to RAS and back") {
  FloatVolume v = Ramp({4, 3, 2});
  // LPS-style: i towards Left, j Posterior, k Superior.
  v.affine = {-0.8, 0, 0, 50, 0, -0.8, 0, 60, 0, 0, 2.5, -70, 0, 0, 0, 1};
  absl::StatusOr<Orientation3> o = IoOrientation(v.affine);
  REQUIRE(o.ok());
  CHECK(AxisCodes(*o) == "LPS");
  FloatVolume ras = v;
  REQUIRE(Reorient("RAS", &ras).ok());
  CHECK(AxisCodes(*IoOrientation(ras.affine)) == "RAS");
  CHECK(ras.values[ras.At(0, 0, 0, 0)] == v.values[v.At(0, 3, 2, 0)]);
  // The world position of a voxel is unchanged: new (0, 0, 0) is old (3, 2, 0).
  CHECK(ras.affine[3] == Approx(50 - 0.8 * 3));
  CHECK(ras.affine[7] == Approx(60 - 0.8 * 2));
  FloatVolume back = ras;
  REQUIRE(Reorient("LPS", &back).ok());
  CHECK(back.values == v.values);
  CHECK(back.affine == v.affine);

  // Axes swapped and slightly rotated: i runs along y, j along -x.
  const double t = 0.1;
  v.affine = {0, -std::cos(t), 0, 0, std::cos(t) * 1.0, -std::sin(t), 0, 0, std::sin(t), 0, 1, 0,
              0, 0, 0, 1};
  o = IoOrientation(v.affine);
  REQUIRE(o.ok());
  CHECK(AxisCodes(*o) == "ALS");
  FloatVolume perm = v;
  REQUIRE(Reorient("RAS", &perm).ok());
  CHECK(perm.shape == std::array<int64_t, 3>{3, 4, 2});

  CHECK(FromAxisCodes("RAR").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(FromAxisCodes("RA").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(FromAxisCodes("xyz").status().code() == absl::StatusCode::kInvalidArgument);
  v.affine = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  CHECK(IoOrientation(v.affine).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("Spacing: the plan's shape and affine, the identity shortcut, the limits") {
  const std::array<double, 16> a = {0.75, 0, 0, -10, 0, 0.75, 0, -20, 0, 0, 2.5, -30, 0, 0, 0, 1};
  absl::StatusOr<SpacingPlan> p = PlanSpacing(a, {100, 80, 20}, {1.5, 1.5, 2.0});
  REQUIRE(p.ok());
  // Extents 99 * 0.75 / 1.5 + 1 = 50.5 -> 50 (half to even), 40.5 -> 40,
  // 19 * 2.5 / 2 + 1 = 24.75 -> 25; the origin stays the first voxel's.
  CHECK(p->shape == std::array<int64_t, 3>{50, 40, 25});
  CHECK(p->affine == std::array<double, 16>{1.5, 0, 0, -10, 0, 1.5, 0, -20, 0, 0, 2, -30, 0, 0,
                                            0, 1});
  CHECK_FALSE(p->unchanged);

  p = PlanSpacing(a, {100, 80, 20}, {0.75, 0.75, 2.5});
  REQUIRE(p.ok());
  CHECK(p->unchanged);
  FloatVolume v = Ramp({100, 80, 20});
  v.affine = a;
  const std::vector<float> before = v.values;
  REQUIRE(Resample(*p, Interpolation::kTrilinear, &v).ok());
  CHECK(v.values == before);

  CHECK(PlanSpacing(a, {100, 80, 20}, {0, 1, 1}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(PlanSpacing(a, {100, 80, 20}, {0.001, 0.001, 0.001}).status().code() ==
        absl::StatusCode::kResourceExhausted);
  std::array<double, 16> flat = a;
  flat[10] = 0;
  CHECK(PlanSpacing(flat, {100, 80, 20}, {1, 1, 1}).status().code() ==
        absl::StatusCode::kInvalidArgument);

  // Halving a ramp's spacing along i: trilinear midpoints.
  FloatVolume r = Ramp({4, 1, 1});
  r.affine = {2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  p = PlanSpacing(r.affine, r.shape, {1, 1, 1});
  REQUIRE(p.ok());
  REQUIRE(Resample(*p, Interpolation::kTrilinear, &r).ok());
  CHECK(r.values == std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f, 3});
}

Volume Int16Volume(std::array<int64_t, 3> shape, int16_t fill) {
  Volume v;
  v.type = VoxelType::kInt16;
  v.shape = shape;
  v.voxels.resize(static_cast<size_t>(v.Voxels()) * 2);
  for (size_t n = 0; n < v.voxels.size(); n += 2) std::memcpy(&v.voxels[n], &fill, 2);
  return v;
}

TEST_CASE("Prefix ops from text, the recipe hash, and what Prepare refuses") {
  CHECK(ParsePrefixOp("Spacing:1.5,1.5,2")->pixdim == std::array<double, 3>{1.5, 1.5, 2});
  CHECK(ParsePrefixOp("ScaleIntensityRange:-57,164,0,1,clip")->scale.clip);
  CHECK(ParsePrefixOp("CropForeground:3,allow_smaller,k=16")->crop.k_divisible[2] == 16);
  for (const char* bad : {"Spacing:1,2", "Spacing:a,b,c", "ScaleIntensityRange:1", "Resize:3",
                          "NormalizeIntensity:sometimes", "CropForeground:-1",
                          "ScaleIntensityRange:0,1,0,1,maybe"}) {
    INFO(bad);
    CHECK(ParsePrefixOp(bad).status().code() == absl::StatusCode::kInvalidArgument);
  }
  PrefixRecipe a, b;
  a.ops = {*ParsePrefixOp("Orientation:RAS"), *ParsePrefixOp("Spacing:1.5,1.5,2")};
  b.ops = {*ParsePrefixOp("Orientation:RAS"), *ParsePrefixOp("Spacing:1.5,1.5,2.5")};
  CHECK(RecipeHash(a) != RecipeHash(b));
  b.ops[1] = a.ops[1];
  CHECK(RecipeHash(a) == RecipeHash(b));
  b.image_threshold = 0.5;
  CHECK(RecipeHash(a) != RecipeHash(b));

  const Volume img = Int16Volume({4, 3, 2}, 5);
  Volume lab = Int16Volume({4, 3, 2}, 1);
  absl::StatusOr<PreparedVolume> p = Prepare({img, img}, lab, a, "s");
  REQUIRE(p.ok());
  CHECK(p->image.channels == 2);
  CHECK(p->image.shape == std::array<int64_t, 3>{3, 2, 2});  // 1 mm voxels to 1.5 x 1.5 x 2
  CHECK(p->foreground.size() == 12);
  Volume other = Int16Volume({4, 3, 3}, 1);
  CHECK(Prepare({img}, other, a, "s").status().code() == absl::StatusCode::kDataLoss);
  CHECK(Prepare({img, other}, std::nullopt, a, "s").status().code() ==
        absl::StatusCode::kDataLoss);
  lab.affine[3] = 1.0;
  CHECK(Prepare({img}, lab, a, "s").status().code() == absl::StatusCode::kDataLoss);
  Volume fractional = Int16Volume({4, 3, 2}, 1);
  fractional.scaled = true;
  fractional.slope = 0.5;
  CHECK(Prepare({img}, fractional, PrefixRecipe{}, "s").status().code() ==
        absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stoker::volume
