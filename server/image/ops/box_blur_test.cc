// BoxBlur and GaussianBoxWeights (box_blur.h). The goldens are Pillow 9.4's
// own output for the same input (Image.fromarray(a).filter(
// ImageFilter.GaussianBlur(r))); tests/python/test_image_ops.py compares
// whole images, photo-like and textured, through the daemon's steps.

#include "server/image/ops/box_blur.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

namespace stoker::image {
namespace {

// 5 rows x 7 columns x RGB, a pattern with no symmetry.
std::vector<uint8_t> Pattern() {
  std::vector<uint8_t> a;
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      for (int c = 0; c < 3; ++c) a.push_back(((x * 37 + y * 91 + c * 53) * (x + 2 * y + 1)) % 256);
    }
  }
  return a;
}

std::vector<uint8_t> Blur(std::vector<uint8_t> img, uint32_t h, uint32_t w, float radius) {
  std::vector<uint8_t> out(img.size()), scratch(BoxBlurScratch(h, w));
  BoxBlur(img.data(), h, w, radius, scratch.data(), out.data());
  return out;
}

TEST_CASE("GaussianBoxWeights: Pillow's box radius and 24-bit weights", "[box_blur]") {
  const BoxWeights r2 = GaussianBoxWeights(2.0f);  // box 1.375
  CHECK(r2.radius == 1);
  CHECK(r2.inner == 4473924u);
  CHECK(r2.outer == 1677722u);
  const BoxWeights small = GaussianBoxWeights(0.1f);  // box 0.00167
  CHECK(small.radius == 0);
  CHECK(small.inner == 16721291u);
  CHECK(small.outer == 27962u);
  const BoxWeights wide = GaussianBoxWeights(7.3f);  // box 6.783
  CHECK(wide.radius == 6);
  CHECK(wide.inner == 1151789u);
  CHECK(wide.outer == 901979u);
  const BoxWeights none = GaussianBoxWeights(0.0f);
  CHECK(none.radius == 0);
  CHECK(none.inner == 1u << 24);
  CHECK(none.outer == 0u);
}

TEST_CASE("BoxBlur equals Pillow's GaussianBlur, inside and past the image's size",
          "[box_blur]") {
  const std::vector<uint8_t> r15 = {
      60,  135, 98,  79,  141, 98,  106, 152, 105, 125, 160, 125, 123, 166, 155, 102, 165, 184,
      83,  162, 201, 70,  138, 107, 82,  140, 107, 98,  146, 112, 111, 153, 126, 109, 160, 149,
      95,  164, 173, 81,  163, 188, 92,  143, 118, 93,  138, 117, 93,  138, 118, 93,  143, 126,
      90,  154, 140, 82,  162, 158, 75,  167, 170, 121, 146, 125, 112, 136, 124, 97,  131, 122,
      83,  135, 124, 74,  149, 132, 69,  162, 146, 67,  169, 156, 142, 148, 128, 127, 135, 126,
      104, 127, 122, 80,  131, 122, 65,  148, 128, 60,  163, 140, 61,  172, 148};
  CHECK(Blur(Pattern(), 5, 7, 1.5f) == r15);
  // A radius of 9: the box is wider than both sides (Pillow's other branch).
  const std::vector<uint8_t> r9 = {
      88, 138, 147, 88, 138, 147, 88, 138, 148, 87, 138, 148, 87, 138, 148, 86, 138, 149,
      86, 138, 150, 88, 138, 147, 88, 138, 147, 88, 138, 148, 87, 138, 148, 87, 138, 148,
      86, 138, 149, 86, 138, 150, 88, 138, 146, 88, 138, 147, 88, 138, 147, 87, 138, 148,
      87, 138, 148, 86, 138, 149, 86, 138, 149, 88, 138, 146, 88, 138, 147, 88, 138, 147,
      88, 138, 148, 87, 138, 148, 87, 139, 149, 87, 139, 149, 88, 138, 146, 88, 138, 147,
      88, 138, 147, 88, 138, 148, 87, 138, 148, 87, 139, 149, 87, 139, 149};
  CHECK(Blur(Pattern(), 5, 7, 9.0f) == r9);
}

TEST_CASE("BoxBlur: radius 0 is the identity, a flat image stays flat, 1x1 works",
          "[box_blur]") {
  CHECK(Blur(Pattern(), 5, 7, 0.0f) == Pattern());
  const std::vector<uint8_t> flat(4 * 6 * 3, 77);
  CHECK(Blur(flat, 4, 6, 3.7f) == flat);
  const std::vector<uint8_t> one = {1, 2, 250};
  CHECK(Blur(one, 1, 1, 1000.0f) == one);
}

}  // namespace
}  // namespace stoker::image
