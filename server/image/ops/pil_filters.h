// Pillow's point filters (Geometry.c: bilinear_filter32RGB, nearest_filter*),
// which its generic transform engine (ImagingGenericTransform: Image.transform
// with PERSPECTIVE, or AFFINE with BILINEAR) applies at each output pixel's
// source point. Internal to stoker_image: ops.cc and perspective.cc.

#ifndef STOKER_SERVER_IMAGE_OPS_PIL_FILTERS_H_
#define STOKER_SERVER_IMAGE_OPS_PIL_FILTERS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stoker::image::internal {

// bilinear_filter32RGB at (xin, yin) of an RGB image: false (nothing
// written) outside [0, width) x [0, height); else the 2x2 neighbours of the
// point less half a pixel, clipped to the image (past the last row Pillow
// reads the clipped row for both), interpolated in double along x then y,
// truncated into out[0..2].
inline bool PilBilinearRgb(const uint8_t* src, uint32_t height, uint32_t width, double xin,
                           double yin, uint8_t* out) {
  if (!(xin >= 0.0 && xin < static_cast<double>(width) && yin >= 0.0 &&
        yin < static_cast<double>(height))) {
    return false;
  }
  xin -= 0.5;
  yin -= 0.5;
  // FLOOR of values >= -0.5.
  const int64_t ix = xin < 0.0 ? -1 : static_cast<int64_t>(xin);
  const int64_t iy = yin < 0.0 ? -1 : static_cast<int64_t>(yin);
  const double dx = xin - static_cast<double>(ix), dy = yin - static_cast<double>(iy);
  const int64_t last_x = int64_t{width} - 1, last_y = int64_t{height} - 1;
  const size_t row = size_t{width} * 3;
  const uint8_t *p00, *p01, *p10, *p11;
  if (ix >= 0 && ix < last_x && iy >= 0 && iy < last_y) {
    p00 = src + static_cast<size_t>(iy) * row + static_cast<size_t>(ix) * 3;
    p01 = p00 + 3;
    p10 = p00 + row;
    p11 = p10 + 3;
  } else {
    // XCLIP / YCLIP; past the last row Pillow uses the first row's value
    // for both (v2 = v1).
    const size_t x0 = static_cast<size_t>(std::clamp<int64_t>(ix, 0, last_x)) * 3;
    const size_t x1 = static_cast<size_t>(std::clamp<int64_t>(ix + 1, 0, last_x)) * 3;
    const uint8_t* r0 = src + static_cast<size_t>(std::clamp<int64_t>(iy, 0, last_y)) * row;
    const uint8_t* r1 = iy + 1 <= last_y ? src + static_cast<size_t>(iy + 1) * row : r0;
    p00 = r0 + x0, p01 = r0 + x1, p10 = r1 + x0, p11 = r1 + x1;
  }
  for (int c = 0; c < 3; ++c) {
    const double v1 = p00[c] + (p01[c] - p00[c]) * dx;
    const double v2 = p10[c] + (p11[c] - p10[c]) * dx;
    out[c] = static_cast<uint8_t>(v1 + (v2 - v1) * dy);
  }
  return true;
}

// nearest_filter8/16/32 at (xin, yin) of an image of kBpp bytes a pixel:
// the pixel whose square holds the point (COORD: truncation, -1 below 0),
// false outside.
template <size_t kBpp>
inline bool PilNearest(const uint8_t* src, uint32_t height, uint32_t width, double xin,
                       double yin, uint8_t* out) {
  const int64_t x = xin < 0.0 ? -1 : static_cast<int64_t>(xin);
  const int64_t y = yin < 0.0 ? -1 : static_cast<int64_t>(yin);
  if (x < 0 || x >= int64_t{width} || y < 0 || y >= int64_t{height}) return false;
  std::memcpy(out, src + (static_cast<size_t>(y) * width + static_cast<size_t>(x)) * kBpp, kBpp);
  return true;
}

}  // namespace stoker::image::internal

#endif  // STOKER_SERVER_IMAGE_OPS_PIL_FILTERS_H_
