// PerspectiveCoeffs and PIL's PERSPECTIVE transform (perspective.h); pixels
// against torchvision are tests/python/test_image_ops.py's.

#include "server/image/ops/perspective.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "server/image/steps.h"

namespace stoker::image {
namespace {

void Map(const double a[8], double x, double y, double* u, double* v) {
  const double den = a[6] * x + a[7] * y + 1;
  *u = (a[0] * x + a[1] * y + a[2]) / den;
  *v = (a[3] * x + a[4] * y + a[5]) / den;
}

TEST_CASE("PerspectiveCoeffs maps each end point to its start point", "[perspective]") {
  const double start[8] = {0, 0, 99, 0, 99, 79, 0, 79};
  const double end[8] = {7, 3, 90, 11, 95, 70, 2, 77};
  double a[8];
  REQUIRE(PerspectiveCoeffs(start, end, a));
  for (int i = 0; i < 4; ++i) {
    double u, v;
    Map(a, end[2 * i], end[2 * i + 1], &u, &v);
    CHECK(u == Approx(start[2 * i]).margin(1e-9));
    CHECK(v == Approx(start[2 * i + 1]).margin(1e-9));
  }
  // Unmoved corners: the identity.
  REQUIRE(PerspectiveCoeffs(start, start, a));
  const double identity[8] = {1, 0, 0, 0, 1, 0, 0, 0};
  for (int k = 0; k < 8; ++k) CHECK(a[k] == Approx(identity[k]).margin(1e-12));
  // Three corners on one point: no transform.
  const double bad[8] = {5, 5, 5, 5, 5, 5, 0, 79};
  CHECK_FALSE(PerspectiveCoeffs(start, bad, a));
}

TEST_CASE("PerspectiveTransform: identity copies, outside is fill, labels move nearest",
          "[perspective]") {
  const uint32_t h = 6, w = 9;
  std::vector<uint8_t> src(h * w * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  const double identity[8] = {1, 0, 0, 0, 1, 0, 0, 0};
  const uint8_t fill[3] = {1, 2, 3};
  for (Interpolation in : {Interpolation::kBilinear, Interpolation::kNearest}) {
    std::vector<uint8_t> dst(src.size());
    PerspectiveTransform(src.data(), h, w, identity, in, fill, dst.data());
    CHECK(dst == src);
  }
  // A shift left by 2.5 pixels: the last columns read past the edge.
  const double shift[8] = {1, 0, 2.5, 0, 1, 0, 0, 0};
  std::vector<uint8_t> dst(src.size());
  PerspectiveTransform(src.data(), h, w, shift, Interpolation::kNearest, fill, dst.data());
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      const uint8_t* d = &dst[(y * w + x) * 3];
      if (x + 3 < w) {  // source x + 0.5 + 2.5 = x + 3
        CHECK(d[0] == src[(y * w + x + 3) * 3]);
      } else {
        CHECK(d[0] == 1);
        CHECK(d[2] == 3);
      }
    }
  }
  std::vector<uint8_t> labels(h * w), moved(h * w);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i);
  const uint8_t label_fill = 255;
  PerspectiveLabels(labels.data(), h, w, 1, shift, &label_fill, moved.data());
  CHECK(moved[0] == 3);
  CHECK(moved[w - 1] == 255);
}

TEST_CASE("a perspective step's coefficients come from its image's corners", "[perspective]") {
  Step s;
  s.kind = StepKind::kPerspective;
  const int32_t corners[8] = {0, 0, 63, 0, 63, 47, 0, 47};
  std::copy(corners, corners + 8, s.corners);
  double a[8];
  REQUIRE(PerspectiveStepCoeffs(s, 48, 64, a));
  CHECK(a[0] == Approx(1).margin(1e-12));
  CHECK(a[2] == Approx(0).margin(1e-9));
  CHECK_FALSE(PerspectiveStepCoeffs(s, 0, 64, a));
}

}  // namespace
}  // namespace stoker::image
