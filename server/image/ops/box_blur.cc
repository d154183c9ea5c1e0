#include "server/image/ops/box_blur.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace stoker::image {
namespace {

constexpr int kPasses = 3;

// One pass along a line of n values, `stride` bytes apart (3 for a row's
// channel, 3 * width for a column's), from `in` to `out` (not overlapping).
// Pillow's ImagingLineBoxBlur: the window's sum moves along the line, the
// two pixels just outside it weigh `outer`; indexes past either end read the
// end pixel. The unsigned wrap-around of the running sum is Pillow's too.
void BoxLine(const uint8_t* in, uint8_t* out, size_t stride, int32_t n, const BoxWeights& w) {
  const int32_t r = w.radius;
  const int32_t last = n - 1;
  const int32_t edge_a = std::min(r + 1, n);
  const int32_t edge_b = std::max(n - r - 1, 0);
  auto at = [&](int32_t i) -> uint32_t { return in[static_cast<size_t>(i) * stride]; };
  uint32_t acc = at(0) * static_cast<uint32_t>(r + 1);
  for (int32_t x = 0; x < edge_a - 1; ++x) acc += at(x);
  acc += at(last) * static_cast<uint32_t>(r - edge_a + 1);
  auto step = [&](int32_t x, int32_t sub, int32_t add, int32_t left, int32_t right) {
    acc += at(add) - at(sub);
    const uint32_t bulk = acc * w.inner + (at(left) + at(right)) * w.outer;
    out[static_cast<size_t>(x) * stride] = static_cast<uint8_t>((bulk + (1u << 23)) >> 24);
  };
  if (edge_a <= edge_b) {
    for (int32_t x = 0; x < edge_a; ++x) step(x, 0, x + r, 0, x + r + 1);
    for (int32_t x = edge_a; x < edge_b; ++x) step(x, x - r - 1, x + r, x - r - 1, x + r + 1);
    for (int32_t x = edge_b; x <= last; ++x) step(x, x - r - 1, last, x - r - 1, last);
  } else {
    for (int32_t x = 0; x < edge_b; ++x) step(x, 0, x + r, 0, x + r + 1);
    for (int32_t x = edge_b; x < edge_a; ++x) step(x, 0, last, 0, last);
    for (int32_t x = edge_a; x <= last; ++x) step(x, x - r - 1, last, x - r - 1, last);
  }
}

}  // namespace

BoxWeights GaussianBoxWeights(float radius) {
  // Pillow's float arithmetic, statement by statement (the library builds
  // without FMA contraction).
  const float sigma2 = radius * radius / kPasses;
  const float big_l = static_cast<float>(std::sqrt(12.0 * sigma2 + 1.0));
  const float l = static_cast<float>(std::floor((big_l - 1.0) / 2.0));
  float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
  a /= 6 * (sigma2 - (l + 1) * (l + 1));
  const float box = l + a;
  BoxWeights w;
  w.radius = static_cast<int32_t>(box);
  w.inner = static_cast<uint32_t>(static_cast<float>(1u << 24) / (box * 2 + 1));
  w.outer = ((1u << 24) - static_cast<uint32_t>(w.radius * 2 + 1) * w.inner) / 2;
  return w;
}

size_t BoxBlurScratch(uint32_t height, uint32_t width) {
  return size_t{std::max(height, width)} * 3;
}

void BoxBlur(uint8_t* img, uint32_t height, uint32_t width, float radius, uint8_t* scratch,
             uint8_t* dst) {
  const BoxWeights w = GaussianBoxWeights(radius);
  const size_t row = size_t{width} * 3;
  // Rows in place, one line buffer: each pass reads the previous pass' row.
  for (uint32_t y = 0; y < height; ++y) {
    uint8_t* line = img + y * row;
    for (int pass = 0; pass < kPasses; ++pass) {
      for (int c = 0; c < 3; ++c) BoxLine(line + c, scratch + c, 3, static_cast<int32_t>(width), w);
      std::memcpy(line, scratch, row);
    }
  }
  // Columns: img -> dst -> img -> dst.
  uint8_t* from = img;
  uint8_t* to = dst;
  for (int pass = 0; pass < kPasses; ++pass) {
    for (size_t col = 0; col < row; ++col) {
      BoxLine(from + col, to + col, row, static_cast<int32_t>(height), w);
    }
    std::swap(from, to);
  }
}

}  // namespace stoker::image
