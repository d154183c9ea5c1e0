// torchvision's RandomPerspective on a PIL image: F.perspective's
// coefficients (_get_perspective_coeffs) and PIL's Image.transform(size,
// PERSPECTIVE, coeffs, resample, fillcolor) on RGB images and on label maps.
// Internal to stoker_image; pure functions, thread-safe.

#ifndef STOKER_SERVER_IMAGE_OPS_PERSPECTIVE_H_
#define STOKER_SERVER_IMAGE_OPS_PERSPECTIVE_H_

#include <cstdint>

#include "server/image/pipeline_params.h"

namespace stoker::image {

// The coefficients a0..a7 of the map from output points to input points,
//   x_in = (a0 x + a1 y + a2) / (a6 x + a7 y + 1), y_in likewise with a3..a5,
// that takes each of the four `end` points (x, y pairs) to its `start` point:
// torchvision's _get_perspective_coeffs(startpoints, endpoints), which solves
// the 8 x 8 system by least squares (LAPACK's gels, double); here Gaussian
// elimination with partial pivoting in long double, rounded to double (the
// two agree to a few units in the last place). False when the points give
// no transform (the system is singular or the result not finite).
bool PerspectiveCoeffs(const double start[8], const double end[8], double coeffs[8]);

// dst = src.transform((width, height), PERSPECTIVE, coeffs, resample,
// fillcolor=fill) for an RGB image: Pillow's generic engine, each output
// pixel's center (x + 0.5, y + 0.5) mapped afresh, then its bilinear filter
// (kBilinear) or nearest (kNearest); `fill` outside. src and dst may not
// overlap.
void PerspectiveTransform(const uint8_t* src, uint32_t height, uint32_t width,
                          const double coeffs[8], Interpolation interpolation,
                          const uint8_t fill[3], uint8_t* dst);

// The same, nearest, for a label map of `bpp` bytes a value (1, 2 or 4;
// another does nothing), `fill` (bpp bytes) outside: masks moved with their
// image.
void PerspectiveLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp,
                       const double coeffs[8], const uint8_t* fill, uint8_t* dst);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_PERSPECTIVE_H_
