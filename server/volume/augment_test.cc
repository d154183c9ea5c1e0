#include "server/volume/augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"

namespace stoker::volume {
namespace {

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST_CASE("RandFlip: flips the drawn axes, twice is the identity, prob is its frequency") {
  const Shape3 s = {4, 3, 2};
  std::vector<float> v = Ramp(24);
  FlipDraw d;
  d.flip = {true, false, true};
  ApplyFlip(d, s, 1, v.data());
  CHECK(v[0] == 3 + 12);  // (0,0,0) <- (3,0,1)
  CHECK(v[5] == 2 + 4 + 12);  // (1,1,0) <- (2,1,1)
  ApplyFlip(d, s, 1, v.data());
  CHECK(v == Ramp(24));
  KeyedRng rng(5);
  int applied = 0;
  for (int n = 0; n < 10000; ++n) applied += DrawRandFlip(rng, 0.3, {true, true, true}).flip[0];
  CHECK(std::abs(applied - 3000) < 4 * 46);  // binomial sd 45.8
}

TEST_CASE("RandRotate90 is torch.rot90: shapes, k = 2 flips both, four turns are the identity") {
  const Shape3 s = {4, 3, 2};
  const std::vector<float> v = Ramp(24);
  Rot90Draw d;
  d.k = 1;
  d.a = 0;
  d.b = 1;
  CHECK(Rot90Shape(d, s) == Shape3{3, 4, 2});
  std::vector<float> r(24);
  ApplyRot90(d, s, 1, v.data(), r.data());
  // out[p, q] = in[q, n_b - 1 - p]: out (0, 0) = in (0, 2), out (2, 1) = in (1, 0).
  CHECK(r[0] == v[0 + 4 * 2]);
  CHECK(r[2 + 3 * 1] == v[1 + 4 * 0]);
  std::vector<float> x = v, y(24);
  Shape3 xs = s;
  for (int t = 0; t < 4; ++t) {
    ApplyRot90(d, xs, 1, x.data(), y.data());
    xs = Rot90Shape(d, xs);
    x = y;
  }
  CHECK(xs == s);
  CHECK(x == v);
  d.k = 2;
  ApplyRot90(d, s, 1, v.data(), r.data());
  std::vector<float> f = v;
  FlipDraw both;
  both.flip = {true, true, false};
  ApplyFlip(both, s, 1, f.data());
  CHECK(r == f);
  d.k = 3;
  std::vector<float> r3(24), back(24);
  ApplyRot90(d, s, 1, v.data(), r3.data());
  d.k = 1;
  ApplyRot90(d, Rot90Shape(d, s), 1, r3.data(), back.data());
  CHECK(back == v);

  KeyedRng rng(9);
  int counts[4] = {0, 0, 0, 0};
  for (int n = 0; n < 9000; ++n) ++counts[DrawRandRotate90(rng, 1.0, 3, 0, 1).k];
  CHECK(counts[0] == 0);
  double chi2 = 0;
  for (int k = 1; k <= 3; ++k) chi2 += (counts[k] - 3000.0) * (counts[k] - 3000.0) / 3000.0;
  CHECK(chi2 < 18.4);  // 2 degrees of freedom, 0.9999 quantile
}

TEST_CASE("RandScaleIntensity and RandShiftIntensity: the formula, uniform parameters") {
  std::vector<float> v = {1.5f, -2.f, 0.1f};
  ApplyScaleIntensity(0.1, v.data(), 3);
  CHECK(v[0] == 1.5f * static_cast<float>(1.1));
  CHECK(v[2] == 0.1f * static_cast<float>(1.1));
  ApplyShiftIntensity(-0.25, v.data(), 3);
  CHECK(v[1] == -2.f * static_cast<float>(1.1) + -0.25f);
  KeyedRng rng(3);
  double sum = 0, lo = 1, hi = -1;
  int applied = 0;
  for (int n = 0; n < 20000; ++n) {
    const IntensityDraw d = DrawUniform(rng, 0.5, -0.1, 0.1);
    applied += d.apply;
    sum += d.value;
    lo = std::min(lo, d.value);
    hi = std::max(hi, d.value);
  }
  CHECK(lo >= -0.1);
  CHECK(hi < 0.1);
  CHECK(std::abs(sum / 20000) < 4 * 0.1 / std::sqrt(3.0) / std::sqrt(20000.0));
  CHECK(std::abs(applied - 10000) < 4 * 71);
}

TEST_CASE("RandGaussianNoise: the drawn std, the noise's mean and spread") {
  KeyedRng rng(11);
  NoiseDraw d = DrawRandGaussianNoise(rng, 1.0, 0.0, 0.1);
  REQUIRE(d.apply);
  CHECK(d.std >= 0);
  CHECK(d.std < 0.1);
  d.std = 0.05;
  d.mean = 0.2;
  std::vector<float> v(100000, 1.f);
  ApplyGaussianNoise(d, rng, v.data(), static_cast<int64_t>(v.size()));
  double m = 0, q = 0;
  for (float x : v) m += x - 1.0;
  m /= static_cast<double>(v.size());
  for (float x : v) q += (x - 1.0 - m) * (x - 1.0 - m);
  const double sd = std::sqrt(q / static_cast<double>(v.size()));
  CHECK(std::abs(m - 0.2) < 4 * 0.05 / std::sqrt(100000.0));
  CHECK(std::abs(sd - 0.05) < 0.001);
  NoiseDraw off;
  std::vector<float> w(10, 1.f);
  ApplyGaussianNoise(off, rng, w.data(), 10);
  CHECK(w == std::vector<float>(10, 1.f));
}

TEST_CASE("AdjustContrast: the patch's range kept, gamma bends the values between") {
  std::vector<float> v = {-1.f, 0.f, 1.f, 3.f};
  std::vector<float> g = v;
  ApplyAdjustContrast(2.0, g.data(), 4);
  CHECK(g[0] == -1.f);
  CHECK(g[3] == Approx(3.f).epsilon(1e-6));
  CHECK(g[1] == Approx(std::pow(0.25, 2.0) * 4 - 1).epsilon(1e-5));
  CHECK(g[2] == Approx(std::pow(0.5, 2.0) * 4 - 1).epsilon(1e-5));
  std::vector<float> same = v;
  ApplyAdjustContrast(1.0, same.data(), 4);
  for (int i = 0; i < 4; ++i) CHECK(same[i] == Approx(v[i]).margin(1e-6));
}

}  // namespace
}  // namespace stoker::volume

namespace stoker::volume {
namespace {

// A ramp along axis 0 (value = i), 4 x 3 x 2.
std::vector<float> Ramp(const Shape3& s) {
  std::vector<float> v;
  for (int64_t k = 0; k < s[2]; ++k) {
    for (int64_t j = 0; j < s[1]; ++j) {
      for (int64_t i = 0; i < s[0]; ++i) v.push_back(static_cast<float>(i));
    }
  }
  return v;
}

AffineDraw Scale0(double f) {
  AffineDraw d;
  d.apply = true;
  d.m = {f, 0, 0, 0, 1, 0, 0, 0, 1};
  return d;
}

TEST_CASE("RandAffine: the identity, a quarter turn, and torch's padding by hand") {
  const Shape3 s = {4, 3, 2};
  const std::vector<float> ramp = Ramp(s);
  std::vector<float> out(ramp.size());
  ApplyAffine(Scale0(1), s, 1, AffinePad::kReflection, ramp.data(), out.data());
  CHECK(out == ramp);
  // Zoom in x2 (coordinates halved about the centre 1.5): a linear ramp is
  // sampled exactly: 0.75, 1.25, 1.75, 2.25.
  ApplyAffine(Scale0(0.5), s, 1, AffinePad::kReflection, ramp.data(), out.data());
  CHECK(out[0] == Approx(0.75).margin(1e-6));
  CHECK(out[3] == Approx(2.25).margin(1e-6));
  // Zoom out x2: i = 0 samples x = -1.5, i = 3 x = 4.5. grid_sample
  // (align_corners=False): reflection about -0.5 and 3.5 gives 0.5 and 2.5;
  // border clamps to 0 and 3; zeros: both taps outside.
  ApplyAffine(Scale0(2), s, 1, AffinePad::kReflection, ramp.data(), out.data());
  CHECK(out[0] == Approx(0.5).margin(1e-6));
  CHECK(out[3] == Approx(2.5).margin(1e-6));
  CHECK(out[1] == Approx(0.5).margin(1e-6));  // x = 0.5: inside
  ApplyAffine(Scale0(2), s, 1, AffinePad::kBorder, ramp.data(), out.data());
  CHECK(out[0] == 0.0f);
  CHECK(out[3] == 3.0f);
  ApplyAffine(Scale0(2), s, 1, AffinePad::kZeros, ramp.data(), out.data());
  CHECK(out[0] == 0.0f);
  CHECK(out[3] == 0.0f);
  CHECK(out[1] == Approx(0.5).margin(1e-6));
  // x = 3.5 (i = 3, factor 4/3): zeros weigh voxel 3 by a half; border and
  // reflection (3.5 reflects onto itself, then is clipped) give voxel 3.
  ApplyAffine(Scale0(4.0 / 3), s, 1, AffinePad::kZeros, ramp.data(), out.data());
  CHECK(out[3] == Approx(1.5).margin(1e-6));
  ApplyAffine(Scale0(4.0 / 3), s, 1, AffinePad::kBorder, ramp.data(), out.data());
  CHECK(out[3] == Approx(3.0).margin(1e-6));
  ApplyAffine(Scale0(4.0 / 3), s, 1, AffinePad::kReflection, ramp.data(), out.data());
  CHECK(out[3] == Approx(3.0).margin(1e-6));

  // A quarter turn about axis 2 on a square plane is rot90: out(i, j) =
  // in(n - 1 - j, i).
  const Shape3 q = {3, 3, 1};
  std::vector<float> in(9), turned(9);
  for (int n = 0; n < 9; ++n) in[n] = static_cast<float>(n * n);
  KeyedRng rng(1);
  const double quarter[3] = {0, 0, M_PI / 2};
  AffineDraw d = DrawRandAffine(rng, 1.0, quarter, 3, nullptr, 0);
  d.m = {0, -1, 0, 1, 0, 0, 0, 0, 1};  // the drawn angle's exact quarter
  ApplyAffine(d, q, 1, AffinePad::kZeros, in.data(), turned.data());
  std::vector<uint8_t> lin(9), lout(9);
  for (int n = 0; n < 9; ++n) lin[n] = static_cast<uint8_t>(n);
  ApplyAffineNearest(d, q, AffinePad::kZeros, lin.data(), lout.data());
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t i = 0; i < 3; ++i) {
      CHECK(turned[j * 3 + i] == Approx(in[i * 3 + (2 - j)]).margin(1e-4));
      CHECK(lout[j * 3 + i] == lin[i * 3 + (2 - j)]);
    }
  }
}

TEST_CASE("RandAffine's draws: angles and factors uniform in their ranges, prob kept") {
  const double rotate[3] = {0.1, 0.2, 0.3}, scale[2] = {0.1, 0.2};
  int applied = 0;
  double most = 0;
  for (uint64_t n = 0; n < 4000; ++n) {
    KeyedRng rng(7, n);
    const AffineDraw d = DrawRandAffine(rng, 0.25, rotate, 3, scale, 2);
    if (!d.apply) {
      CHECK(d.m == AffineDraw{}.m);
      continue;
    }
    ++applied;
    // det(R S) = the factors' product: within (0.9 * 0.8, 1.1 * 1.2).
    const auto& m = d.m;
    const double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                       m[2] * (m[3] * m[7] - m[4] * m[6]);
    CHECK(det > 0.72);
    CHECK(det < 1.32);
    most = std::max(most, std::fabs(det - 1));
  }
  CHECK(std::abs(applied - 1000) < 4 * std::sqrt(4000 * 0.25 * 0.75));
  CHECK(most > 0.15);  // the ranges are used, not just their middle
}

}  // namespace
}  // namespace stoker::volume
