#include "server/volume/augment.h"

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
