#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/image/ops/ops.h"

namespace stoker::image {
namespace {

// Pillow 9.4's rgb2hsv_row and hsv2rgb (Convert.c) for one pixel, its
// statements one for one in the same float and double types, around
// torchvision's wrapping add to H: the definition AdjustHue's tables
// reproduce.
void ReferenceHue(uint8_t* px, uint8_t shift) {
  const uint8_t r = px[0], g = px[1], b = px[2];
  const uint8_t maxc = std::max(r, std::max(g, b));
  const uint8_t minc = std::min(r, std::min(g, b));
  uint8_t uh = 0, us = 0;
  const uint8_t uv = maxc;
  if (minc != maxc) {
    const float cr = static_cast<float>(maxc - minc);
    const float s = cr / static_cast<float>(maxc);
    const float rc = static_cast<float>(maxc - r) / cr;
    const float gc = static_cast<float>(maxc - g) / cr;
    const float bc = static_cast<float>(maxc - b) / cr;
    float h;
    if (r == maxc) {
      h = bc - gc;
    } else if (g == maxc) {
      h = static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc));
    } else {
      h = static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
    }
    h = static_cast<float>(std::fmod(static_cast<double>(h) / 6.0 + 1.0, 1.0));
    const int hi = static_cast<int>(static_cast<double>(h) * 255.0);
    const int si = static_cast<int>(static_cast<double>(s) * 255.0);
    uh = static_cast<uint8_t>(std::clamp(hi, 0, 255));
    us = static_cast<uint8_t>(std::clamp(si, 0, 255));
  }
  const auto h = static_cast<uint8_t>(uh + shift);
  const uint8_t s = us, v = uv;
  if (s == 0) {
    px[0] = px[1] = px[2] = v;
    return;
  }
  const int i = static_cast<int>(std::floor(static_cast<double>(static_cast<float>(h)) * 6.0 / 255.0));
  const auto f = static_cast<float>(static_cast<double>(static_cast<float>(h)) * 6.0 / 255.0 -
                                    static_cast<double>(static_cast<float>(i)));
  const auto fs = static_cast<float>(static_cast<double>(static_cast<float>(s)) / 255.0);
  const double fv = static_cast<double>(static_cast<float>(v));
  const auto round = [](double x) { return static_cast<int>(std::round(x)); };
  const int p = round(fv * (1.0 - static_cast<double>(fs)));
  const int q = round(fv * (1.0 - static_cast<double>(fs * f)));
  const int t = round(fv * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f))));
  const auto up = static_cast<uint8_t>(std::clamp(p, 0, 255));
  const auto uq = static_cast<uint8_t>(std::clamp(q, 0, 255));
  const auto ut = static_cast<uint8_t>(std::clamp(t, 0, 255));
  const uint8_t out[6][3] = {{v, ut, up}, {uq, v, up}, {up, v, ut},
                             {up, uq, v}, {ut, up, v}, {v, up, uq}};
  for (int c = 0; c < 3; ++c) px[c] = out[i % 6][c];
}

// Every colour of one 256 x 256 plane of the cube per red value, through
// AdjustHue and the reference.
size_t CountDifferences(int red_step, float hue) {
  const auto shift =
      static_cast<uint8_t>(static_cast<int>(static_cast<double>(hue) * 255.0) & 0xff);
  std::vector<uint8_t> got(256 * 256 * 3), want;
  size_t differ = 0;
  for (int r = 0; r < 256; r += red_step) {
    for (int i = 0; i < 256 * 256; ++i) {
      got[3 * i] = static_cast<uint8_t>(r);
      got[3 * i + 1] = static_cast<uint8_t>(i >> 8);
      got[3 * i + 2] = static_cast<uint8_t>(i & 255);
    }
    want = got;
    AdjustHue(got.data(), 256 * 256, hue);
    for (int i = 0; i < 256 * 256; ++i) ReferenceHue(&want[3 * i], shift);
    for (size_t k = 0; k < got.size(); ++k) differ += got[k] != want[k];
  }
  return differ;
}

// Pixels and their hue shifts by 0.5, -0.23 and 0 under Pillow 9.4 /
// torchvision 0.14 (torchvision.transforms.functional.adjust_hue on
// Image.fromarray); a shift of 0 is not the identity: PIL's HSV round trip
// is lossy.
TEST_CASE("Hue is torchvision's adjust_hue through PIL's HSV", "[ops]") {
  struct Golden {
    uint8_t in[3], half[3], minus_023[3], zero[3];
  };
  constexpr Golden kGoldens[] = {
      {{255, 0, 0}, {0, 255, 252}, {168, 0, 255}, {255, 0, 0}},
      {{0, 255, 0}, {252, 0, 255}, {255, 162, 0}, {0, 255, 0}},
      {{0, 0, 255}, {255, 246, 0}, {0, 255, 162}, {0, 0, 255}},
      {{10, 200, 90}, {200, 10, 126}, {193, 200, 10}, {10, 200, 86}},
      {{128, 128, 128}, {128, 128, 128}, {128, 128, 128}, {128, 128, 128}},
      {{250, 3, 177}, {4, 250, 68}, {4, 21, 250}, {250, 4, 178}},
      {{1, 2, 3}, {3, 2, 1}, {1, 3, 1}, {1, 2, 3}},
      {{77, 66, 55}, {55, 67, 77}, {77, 55, 74}, {77, 66, 55}},
  };
  for (const Golden& g : kGoldens) {
    CAPTURE(int{g.in[0]}, int{g.in[1]}, int{g.in[2]});
    const std::pair<float, const uint8_t*> shifts[] = {
        {0.5f, g.half}, {-0.23f, g.minus_023}, {0.0f, g.zero}};
    for (const auto& [hue, want] : shifts) {
      CAPTURE(hue);
      uint8_t px[3] = {g.in[0], g.in[1], g.in[2]};
      AdjustHue(px, 1, hue);
      CHECK(std::vector<uint8_t>(px, px + 3) == std::vector<uint8_t>(want, want + 3));
    }
  }
}

TEST_CASE("Hue equals Pillow's HSV round trip on every RGB colour", "[ops]") {
  CHECK(CountDifferences(1, -0.23f) == 0);
}

TEST_CASE("Hue equals Pillow's HSV round trip for every shift", "[ops]") {
  // The shifts of hue in [-0.5, 0.5], each over the red planes 0 and 255.
  for (int k = -127; k <= 127; ++k) {
    const float hue = static_cast<float>(k) / 255.0f;
    CAPTURE(hue);
    CHECK(CountDifferences(255, hue) == 0);
  }
}

}  // namespace
}  // namespace stoker::image
