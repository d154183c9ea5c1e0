// PIL's affine engine as torchvision's PIL path drives it (ops.h declares
// it): F.affine's inverse matrix, Image.transform(AFFINE) with NEAREST (its
// three Geometry.c paths) and BILINEAR, Image.rotate with its shortcuts and
// rounded matrix, and the same maps for label maps.
//
// Built with -ffp-contract=off (CMakeLists.txt), as ops.cc: Pillow's double
// arithmetic, no fused multiply-add.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>

#include "server/image/ops/ops.h"
#include "server/image/ops/pil_filters.h"

namespace stoker::image {

namespace {

constexpr double kDegToRad = std::numbers::pi / 180.0;  // CPython's math.radians factor

// Python's round(x, 15): x correctly rounded to 15 decimals, read back.
// glibc's printf and strtod both round exactly, as CPython's dtoa does.
double Round15(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.15f", x);
  return std::strtod(buf, nullptr);
}

// Python's x % 360.0 (the result takes the divisor's sign).
double PyMod360(double x) {
  double m = std::fmod(x, 360.0);
  if (m != 0.0) {
    if (m < 0.0) m += 360.0;
  } else {
    m = 0.0;
  }
  return m;
}

// Geometry.c's FLOOR for the values it is given (|v| < 2^31).
inline int64_t PilFloor(double v) {
  return v < 0.0 ? static_cast<int64_t>(std::floor(v)) : static_cast<int64_t>(v);
}

inline void Fill(uint8_t* d, const uint8_t fill[3]) {
  d[0] = fill[0], d[1] = fill[1], d[2] = fill[2];
}

// The NEAREST engines below read a source of sh x sw pixels and write a
// destination of dh x dw, kBpp bytes a pixel (RGB images 3, label maps 1,
// 2 or 4); PIL's Image.transform and Image.resize(NEAREST) run them.
struct NearestGeometry {
  const uint8_t* src;
  uint32_t sh, sw;
  uint8_t* dst;
  uint32_t dh, dw;
  const uint8_t* fill;  // kBpp bytes
};

// Geometry.c's ImagingScaleAffine (NEAREST, m1 == m3 == 0): positions
// accumulated from the first pixel center.
template <size_t kBpp>
void ScaleNearest(const NearestGeometry& g, const double m[6]) {
  const double w = g.sw, h = g.sh;
  double yo = m[5] + m[4] * 0.5;
  const double xo0 = m[2] + m[0] * 0.5;
  for (uint32_t y = 0; y < g.dh; ++y, yo += m[4]) {
    uint8_t* d = g.dst + size_t{y} * g.dw * kBpp;
    if (!(yo >= 0.0 && yo < h)) {  // COORD(v) < 0 or >= ysize, NaN too
      for (uint32_t x = 0; x < g.dw; ++x) std::memcpy(d + kBpp * x, g.fill, kBpp);
      continue;
    }
    const uint8_t* s = g.src + static_cast<size_t>(yo) * g.sw * kBpp;
    double xo = xo0;
    for (uint32_t x = 0; x < g.dw; ++x, xo += m[0]) {
      if (xo >= 0.0 && xo < w) {
        std::memcpy(d + kBpp * x, s + kBpp * static_cast<size_t>(xo), kBpp);
      } else {
        std::memcpy(d + kBpp * x, g.fill, kBpp);
      }
    }
  }
}

// Geometry.c's check_fixed for one corner.
inline bool FitsFixed(const double m[6], double x, double y) {
  return std::fabs(x * m[0] + y * m[1] + m[2]) < 32768.0 &&
         std::fabs(x * m[3] + y * m[4] + m[5]) < 32768.0;
}

// Geometry.c's affine_fixed (NEAREST, 16.16 fixed point, incremental).
template <size_t kBpp>
void FixedNearest(const NearestGeometry& g, const double m[6]) {
  auto fix = [](double v) { return PilFloor(v * 65536.0 + 0.5); };
  const int64_t a0 = fix(m[0]), a1 = fix(m[1]), a3 = fix(m[3]), a4 = fix(m[4]);
  int64_t a2 = fix(m[2] + m[0] * 0.5 + m[1] * 0.5);
  int64_t a5 = fix(m[5] + m[3] * 0.5 + m[4] * 0.5);
  const int64_t w = g.sw, h = g.sh;
  for (uint32_t y = 0; y < g.dh; ++y, a2 += a1, a5 += a4) {
    uint8_t* d = g.dst + size_t{y} * g.dw * kBpp;
    int64_t xx = a2, yy = a5;
    for (uint32_t x = 0; x < g.dw; ++x, xx += a0, yy += a3) {
      const int64_t xi = xx >> 16, yi = yy >> 16;
      if (xi >= 0 && xi < w && yi >= 0 && yi < h) {
        std::memcpy(d + kBpp * x,
                    g.src + (static_cast<size_t>(yi) * g.sw + static_cast<size_t>(xi)) * kBpp,
                    kBpp);
      } else {
        std::memcpy(d + kBpp * x, g.fill, kBpp);
      }
    }
  }
}

// The rest of ImagingTransformAffine (NEAREST, doubles, incremental): only
// when a corner maps 2^15 pixels or more away.
template <size_t kBpp>
void FloatNearest(const NearestGeometry& g, const double m[6]) {
  const double w = g.sw, h = g.sh;
  double xo = m[2] + m[1] * 0.5 + m[0] * 0.5;
  double yo = m[5] + m[4] * 0.5 + m[3] * 0.5;
  for (uint32_t y = 0; y < g.dh; ++y, xo += m[1], yo += m[4]) {
    uint8_t* d = g.dst + size_t{y} * g.dw * kBpp;
    double xx = xo, yy = yo;
    for (uint32_t x = 0; x < g.dw; ++x, xx += m[0], yy += m[3]) {
      if (xx >= 0.0 && xx < w && yy >= 0.0 && yy < h) {
        std::memcpy(d + kBpp * x,
                    g.src + (static_cast<size_t>(yy) * g.sw + static_cast<size_t>(xx)) * kBpp,
                    kBpp);
      } else {
        std::memcpy(d + kBpp * x, g.fill, kBpp);
      }
    }
  }
}

// ImagingTransformAffine's choice of engine for NEAREST (the output's
// corners decide fixed point).
template <size_t kBpp>
void AffineNearest(const NearestGeometry& g, const double m[6]) {
  if (g.dh == 0 || g.dw == 0) return;
  if (m[1] == 0.0 && m[3] == 0.0) {
    ScaleNearest<kBpp>(g, m);
    return;
  }
  const double w = g.dw, h = g.dh;
  if (FitsFixed(m, 0, 0) && FitsFixed(m, w, h) && FitsFixed(m, 0, h) && FitsFixed(m, w, 0)) {
    FixedNearest<kBpp>(g, m);
  } else {
    FloatNearest<kBpp>(g, m);
  }
}

// The whole-pixel offsets (dx, dy) when `m` only moves the image by whole
// pixels (input point = output point + (dx, dy)). Then every engine's
// result is that pixel or the fill: NEAREST's point lands inside the pixel,
// BILINEAR's on its center with both weights 0. torchvision's TranslateX/Y
// of the policies pass whole pixels (int(magnitude)).
bool WholePixelShift(const double m[6], uint32_t height, uint32_t width, int64_t* dx, int64_t* dy) {
  if (m[0] != 1.0 || m[1] != 0.0 || m[3] != 0.0 || m[4] != 1.0) return false;
  const double lx = width, ly = height;
  if (!(std::abs(m[2]) <= lx && std::abs(m[5]) <= ly)) {
    return false;  // the engine fills everything; not worth a path
  }
  if (std::floor(m[2]) != m[2] || std::floor(m[5]) != m[5]) return false;
  *dx = static_cast<int64_t>(m[2]);
  *dy = static_cast<int64_t>(m[5]);
  return true;
}

// dst(x, y) = src(x + dx, y + dy) where that is inside, else fill.
void ShiftCopy(const uint8_t* src, uint32_t height, uint32_t width, int64_t dx, int64_t dy,
               const uint8_t fill[3], uint8_t* dst) {
  const int64_t w = width, h = height;
  const size_t row = size_t{width} * 3;
  // Output columns [x0, x1) read the source; the rest are fill.
  const int64_t x0 = std::clamp<int64_t>(-dx, 0, w), x1 = std::clamp<int64_t>(w - dx, x0, w);
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* d = dst + static_cast<size_t>(y) * row;
    const int64_t sy = y + dy;
    if (sy < 0 || sy >= h) {
      for (int64_t x = 0; x < w; ++x) Fill(d + 3 * x, fill);
      continue;
    }
    for (int64_t x = 0; x < x0; ++x) Fill(d + 3 * x, fill);
    std::memcpy(d + 3 * x0, src + static_cast<size_t>(sy) * row + 3 * (x0 + dx),
                static_cast<size_t>(x1 - x0) * 3);
    for (int64_t x = x1; x < w; ++x) Fill(d + 3 * x, fill);
  }
}

// ImagingGenericTransform with affine_transform and bilinear_filter32RGB:
// each output pixel's source point computed afresh (no accumulation), in
// Pillow's order; the 2x2 neighbours clipped to the image, interpolated in
// double along x then y, truncated.
void BilinearAffine(const uint8_t* src, uint32_t height, uint32_t width, const double m[6],
                    const uint8_t fill[3], uint8_t* dst) {
  const size_t row = size_t{width} * 3;
  for (uint32_t y = 0; y < height; ++y) {
    uint8_t* d = dst + y * row;
    const double yin = static_cast<double>(y) + 0.5;
    const double row_x = m[1] * yin, row_y = m[4] * yin;
    double xin = 0.5;  // x + 0.5, exact
    for (uint32_t x = 0; x < width; ++x, xin += 1.0, d += 3) {
      const double sx = m[0] * xin + row_x + m[2];
      const double sy = m[3] * xin + row_y + m[5];
      if (!internal::PilBilinearRgb(src, height, width, sx, sy, d)) Fill(d, fill);
    }
  }
}

}  // namespace

void InverseAffineMatrix(const double center[2], double angle, const double translate[2],
                         double scale, const double shear[2], double matrix[6]) {
  const double rot = angle * kDegToRad;
  const double sx = shear[0] * kDegToRad;
  const double sy = shear[1] * kDegToRad;
  const double cx = center[0], cy = center[1];
  const double tx = translate[0], ty = translate[1];
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  matrix[0] = d / scale;
  matrix[1] = -b / scale;
  matrix[2] = 0.0 / scale;
  matrix[3] = -c / scale;
  matrix[4] = a / scale;
  matrix[5] = 0.0 / scale;
  matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty);
  matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty);
  matrix[2] += cx;
  matrix[5] += cy;
}

void AffineTransform(const uint8_t* src, uint32_t height, uint32_t width, const double matrix[6],
                     Interpolation interpolation, const uint8_t fill[3], uint8_t* dst) {
  if (height == 0 || width == 0) return;
  int64_t shift_x = 0, shift_y = 0;
  if (WholePixelShift(matrix, height, width, &shift_x, &shift_y)) {
    ShiftCopy(src, height, width, shift_x, shift_y, fill, dst);
    return;
  }
  if (interpolation != Interpolation::kNearest) {
    BilinearAffine(src, height, width, matrix, fill, dst);
    return;
  }
  AffineNearest<3>({src, height, width, dst, height, width, fill}, matrix);
}

namespace {

// PIL's Image.rotate shortcuts (no center given): 0 a copy, 180 a
// transpose, 90 and 270 a transpose on square images. True when it was one
// (dst written); `angle` already taken mod 360.
template <size_t kBpp>
bool RotateTranspose(const uint8_t* src, uint32_t height, uint32_t width, double angle,
                     const double* center, uint8_t* dst) {
  if (center != nullptr) return false;
  const size_t row = size_t{width} * kBpp;
  if (angle == 0.0) {
    std::memcpy(dst, src, size_t{height} * row);
    return true;
  }
  if (angle == 180.0) {
    for (uint32_t y = 0; y < height; ++y) {
      const uint8_t* s = src + size_t{height - 1 - y} * row;
      uint8_t* d = dst + y * row;
      for (uint32_t x = 0; x < width; ++x) {
        std::memcpy(d + kBpp * x, s + kBpp * size_t{width - 1 - x}, kBpp);
      }
    }
    return true;
  }
  if ((angle == 90.0 || angle == 270.0) && width == height) {
    const uint32_t n = width;
    for (uint32_t r = 0; r < n; ++r) {
      uint8_t* d = dst + r * row;
      for (uint32_t c = 0; c < n; ++c) {
        // ROTATE_90 (counter-clockwise): dst(r, c) = src(c, n-1-r);
        // ROTATE_270: dst(r, c) = src(n-1-c, r).
        const size_t s = angle == 90.0 ? size_t{c} * n + (n - 1 - r) : size_t{n - 1 - c} * n + r;
        std::memcpy(d + kBpp * c, src + kBpp * s, kBpp);
      }
    }
    return true;
  }
  return false;
}

// Image.rotate's matrix (angle already mod 360), rounded to 15 digits.
void RotateMatrix(uint32_t height, uint32_t width, double angle, const double* center,
                  double m[6]) {
  const double cx = center != nullptr ? center[0] : width / 2.0;
  const double cy = center != nullptr ? center[1] : height / 2.0;
  const double rad = -(angle * kDegToRad);
  m[0] = Round15(std::cos(rad));
  m[1] = Round15(std::sin(rad));
  m[2] = 0.0;
  m[3] = Round15(-std::sin(rad));
  m[4] = Round15(std::cos(rad));
  m[5] = 0.0;
  const double x = -cx, y = -cy;
  m[2] = m[0] * x + m[1] * y + m[2];
  m[5] = m[3] * x + m[4] * y + m[5];
  m[2] += cx;
  m[5] += cy;
}

template <size_t kBpp>
void LabelsNearest(const NearestGeometry& g, const double m[6]) {
  AffineNearest<kBpp>(g, m);
}

void LabelsAffine(const NearestGeometry& g, uint32_t bpp, const double m[6]) {
  switch (bpp) {
    case 1: return LabelsNearest<1>(g, m);
    case 2: return LabelsNearest<2>(g, m);
    case 4: return LabelsNearest<4>(g, m);
    default: return;
  }
}

}  // namespace

bool AffineStepMatrix(const Step& step, uint32_t height, uint32_t width, double matrix[6]) {
  const double center[2] = {step.has_center != 0 ? step.center[0] : width * 0.5,
                            step.has_center != 0 ? step.center[1] : height * 0.5};
  const double translate[2] = {static_cast<double>(step.translate[0]),
                               static_cast<double>(step.translate[1])};
  InverseAffineMatrix(center, step.angle, translate, step.affine_scale, step.shear, matrix);
  return std::all_of(matrix, matrix + 6, [](double m) { return std::isfinite(m); });
}

void RotateStepMatrix(uint32_t height, uint32_t width, double angle, const double* center,
                      double matrix[6]) {
  RotateMatrix(height, width, PyMod360(angle), center, matrix);
}

void RotateImage(const uint8_t* src, uint32_t height, uint32_t width, double angle,
                 const double* center, Interpolation interpolation, const uint8_t fill[3],
                 uint8_t* dst) {
  angle = PyMod360(angle);
  if (RotateTranspose<3>(src, height, width, angle, center, dst)) return;
  double m[6];
  RotateMatrix(height, width, angle, center, m);
  AffineTransform(src, height, width, m, interpolation, fill, dst);
}

void ResizeLabels(const uint8_t* src, uint32_t src_height, uint32_t src_width, uint32_t bpp,
                  uint8_t* dst, uint32_t height, uint32_t width) {
  if (height == src_height && width == src_width) {
    std::memcpy(dst, src, size_t{height} * width * bpp);
    return;
  }
  const double m[6] = {static_cast<double>(src_width) / width, 0.0, 0.0,
                       0.0, static_cast<double>(src_height) / height, 0.0};
  const uint8_t zero[4] = {0, 0, 0, 0};  // never read: every point is inside
  LabelsAffine({src, src_height, src_width, dst, height, width, zero}, bpp, m);
}

void AffineLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp,
                  const double matrix[6], const uint8_t* fill, uint8_t* dst) {
  LabelsAffine({src, height, width, dst, height, width, fill}, bpp, matrix);
}

void RotateLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp, double angle,
                  const double* center, const uint8_t* fill, uint8_t* dst) {
  angle = PyMod360(angle);
  bool done = false;
  switch (bpp) {
    case 1: done = RotateTranspose<1>(src, height, width, angle, center, dst); break;
    case 2: done = RotateTranspose<2>(src, height, width, angle, center, dst); break;
    case 4: done = RotateTranspose<4>(src, height, width, angle, center, dst); break;
    default: return;
  }
  if (done) return;
  double m[6];
  RotateMatrix(height, width, angle, center, m);
  AffineLabels(src, height, width, bpp, m, fill, dst);
}


}  // namespace stoker::image
