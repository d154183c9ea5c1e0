#include "server/image/ops/perspective.h"

#include <cmath>
#include <cstddef>
#include <utility>

#include "server/image/ops/pil_filters.h"

namespace stoker::image {

bool PerspectiveCoeffs(const double start[8], const double end[8], double coeffs[8]) {
  // Rows as torchvision builds them: for each end point p1 and its start
  // point p2, [p1x, p1y, 1, 0, 0, 0, -p2x p1x, -p2x p1y] = p2x and
  // [0, 0, 0, p1x, p1y, 1, -p2y p1x, -p2y p1y] = p2y.
  long double a[8][9];
  for (int i = 0; i < 4; ++i) {
    const long double x = end[2 * i], y = end[2 * i + 1];
    const long double u = start[2 * i], v = start[2 * i + 1];
    long double* r0 = a[2 * i];
    long double* r1 = a[2 * i + 1];
    const long double row0[9] = {x, y, 1, 0, 0, 0, -u * x, -u * y, u};
    const long double row1[9] = {0, 0, 0, x, y, 1, -v * x, -v * y, v};
    for (int k = 0; k < 9; ++k) r0[k] = row0[k], r1[k] = row1[k];
  }
  for (int col = 0; col < 8; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 8; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    if (!(std::fabs(a[pivot][col]) > 1e-12L)) return false;
    if (pivot != col) {
      for (int k = 0; k < 9; ++k) std::swap(a[pivot][k], a[col][k]);
    }
    for (int r = col + 1; r < 8; ++r) {
      const long double f = a[r][col] / a[col][col];
      for (int k = col; k < 9; ++k) a[r][k] -= f * a[col][k];
    }
  }
  long double x[8];
  for (int r = 7; r >= 0; --r) {
    long double sum = a[r][8];
    for (int k = r + 1; k < 8; ++k) sum -= a[r][k] * x[k];
    x[r] = sum / a[r][r];
  }
  for (int k = 0; k < 8; ++k) {
    coeffs[k] = static_cast<double>(x[k]);
    if (!std::isfinite(coeffs[k])) return false;
  }
  return true;
}

namespace {

// Geometry.c's perspective_transform at output pixel (x, y), in its order.
inline void MapPoint(const double a[8], uint32_t x, uint32_t y, double* sx, double* sy) {
  const double xin = static_cast<double>(x) + 0.5, yin = static_cast<double>(y) + 0.5;
  const double den = a[6] * xin + a[7] * yin + 1;
  *sx = (a[0] * xin + a[1] * yin + a[2]) / den;
  *sy = (a[3] * xin + a[4] * yin + a[5]) / den;
}

template <size_t kBpp>
void NearestPerspective(const uint8_t* src, uint32_t height, uint32_t width, const double a[8],
                        const uint8_t* fill, uint8_t* dst) {
  for (uint32_t y = 0; y < height; ++y) {
    uint8_t* d = dst + size_t{y} * width * kBpp;
    for (uint32_t x = 0; x < width; ++x, d += kBpp) {
      double sx, sy;
      MapPoint(a, x, y, &sx, &sy);
      if (!internal::PilNearest<kBpp>(src, height, width, sx, sy, d)) {
        for (size_t c = 0; c < kBpp; ++c) d[c] = fill[c];
      }
    }
  }
}

}  // namespace

void PerspectiveTransform(const uint8_t* src, uint32_t height, uint32_t width,
                          const double coeffs[8], Interpolation interpolation,
                          const uint8_t fill[3], uint8_t* dst) {
  if (interpolation == Interpolation::kNearest) {
    NearestPerspective<3>(src, height, width, coeffs, fill, dst);
    return;
  }
  for (uint32_t y = 0; y < height; ++y) {
    uint8_t* d = dst + size_t{y} * width * 3;
    for (uint32_t x = 0; x < width; ++x, d += 3) {
      double sx, sy;
      MapPoint(coeffs, x, y, &sx, &sy);
      if (!internal::PilBilinearRgb(src, height, width, sx, sy, d)) {
        d[0] = fill[0], d[1] = fill[1], d[2] = fill[2];
      }
    }
  }
}

void PerspectiveLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp,
                       const double coeffs[8], const uint8_t* fill, uint8_t* dst) {
  switch (bpp) {
    case 1:
      NearestPerspective<1>(src, height, width, coeffs, fill, dst);
      break;
    case 2:
      NearestPerspective<2>(src, height, width, coeffs, fill, dst);
      break;
    case 4:
      NearestPerspective<4>(src, height, width, coeffs, fill, dst);
      break;
    default:
      break;
  }
}

}  // namespace stoker::image
