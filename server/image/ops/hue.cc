// torchvision's adjust_hue for PIL (ops.h: AdjustHue): Pillow's rgb2hsv and
// hsv2rgb (Convert.c) around a wrapping add to H, reproduced exactly.
// Pillow's locals are float but its literals (2.0, 6.0, 255.0) double: each
// expression is evaluated in double and rounded to float where it is
// assigned; kept so (built with -ffp-contract=off, CMakeLists.txt).
//
// Everything that depends on one or two bytes is a table built once, H
// included: it depends only on which channels are the maximum and minimum,
// max - min and max - mid. A pixel costs a few table reads and one double
// rounding, about half of the direct arithmetic's time on a photo.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "server/image/ops/ops.h"

namespace stoker::image {
namespace {

// Python's and C's round() for x >= 0 (half away from zero), exactly:
// x - trunc(x) is exact.
inline int RoundHalfUp(double x) {
  const auto t = static_cast<int>(x);
  return t + (x - static_cast<double>(t) >= 0.5 ? 1 : 0);
}

// rgb2hsv's H of a pixel that is not grey (max != min), as the byte Pillow
// stores. cr = max - min. The quotient (max - c) / cr of the minimum
// channel is 1 exactly, so it depends on max only through the differences.
uint8_t HueByte(uint8_t r, uint8_t g, uint8_t b, uint8_t maxc, uint8_t minc) {
  const float cr = static_cast<float>(maxc - minc);
  auto q = [&](uint8_t c) { return static_cast<float>(maxc - c) / cr; };
  float h;
  if (r == maxc) {
    h = q(b) - q(g);
  } else if (g == maxc) {
    h = static_cast<float>(2.0 + static_cast<double>(q(r)) - static_cast<double>(q(b)));
  } else {
    h = static_cast<float>(4.0 + static_cast<double>(q(g)) - static_cast<double>(q(r)));
  }
  // fmod(h / 6.0 + 1.0, 1.0): the argument lies in [5/6, 11/6), where the
  // subtraction is exact.
  double x = static_cast<double>(h) / 6.0 + 1.0;
  if (x >= 1.0) x -= 1.0;
  const float hf = static_cast<float>(x);
  const int hi = static_cast<int>(static_cast<double>(hf) * 255.0);
  return static_cast<uint8_t>(hi < 0 ? 0 : hi > 255 ? 255 : hi);
}

// Which of rgb2hsv's three branches a pixel takes and which of the other
// two channels is the minimum: H is then a function of that case, cr and
// d = max - mid, where mid is the third channel.
enum HueCase : uint8_t {
  kRMaxBMin,  // r == max, b == min: mid g
  kRMaxGMin,  // r == max, b != min (so g == min): mid b
  kGMaxBMin,  // r != max, g == max, b == min: mid r
  kGMaxRMin,  // r != max, g == max, b != min (so r == min): mid b
  kBMaxRMin,  // b the only max, r == min: mid g
  kBMaxGMin,  // b the only max, r != min (so g == min): mid r
};

// hsv2rgb's six sectors as positions in {v, q or t, p}: sectors 1, 3, 5
// use q, sectors 0, 2, 4 use t.
constexpr uint8_t kSectorOrder[6][3] = {{0, 1, 2}, {1, 0, 2}, {2, 0, 1},
                                        {2, 1, 0}, {1, 2, 0}, {0, 2, 1}};

class HueTables {
 public:
  static const HueTables& Get() {
    static const HueTables* tables = new HueTables;
    return *tables;
  }

  // H, S and V of a pixel that is not grey, H shifted by `shift` (mod 256),
  // back to RGB into px.
  void Shift(uint8_t* px, uint8_t shift) const {
    const uint8_t r = px[0], g = px[1], b = px[2];
    const uint8_t maxc = std::max(r, std::max(g, b));
    const uint8_t minc = std::min(r, std::min(g, b));
    const int cr = maxc - minc;
    const bool r_max = r == maxc;
    const bool g_max = !r_max && g == maxc;
    const int hue_case = r_max ? (b != minc) : g_max ? 2 + (b != minc) : 4 + (r != minc);
    const int mid = r + g + b - maxc - minc;
    const auto h = static_cast<uint8_t>(hue_[hue_case][cr][maxc - mid] + shift);
    const uint8_t s = sat_[maxc][cr];
    const uint8_t v = maxc;
    const uint8_t sector = sector_[h];
    const float fs = fs_[s];
    const double x = (sector & 1) != 0 ? static_cast<double>(fs * f_[h])
                                       : static_cast<double>(fs) * one_minus_f_[h];
    const int qt = RoundHalfUp(static_cast<double>(static_cast<float>(v)) * (1.0 - x));
    const uint8_t vals[3] = {v, static_cast<uint8_t>(qt > 255 ? 255 : qt), p_[s][v]};
    // hsv2rgb gives (v, v, v) for S = 0.
    const uint8_t* order = kSectorOrder[sector];
    const bool grey = s == 0;
    px[0] = grey ? v : vals[order[0]];
    px[1] = grey ? v : vals[order[1]];
    px[2] = grey ? v : vals[order[2]];
  }

 private:
  HueTables() {
    for (int cr = 1; cr < 256; ++cr) {
      const auto minc = static_cast<uint8_t>(255 - cr);
      for (int d = 0; d <= cr; ++d) {
        const auto mid = static_cast<uint8_t>(255 - d);
        hue_[kRMaxBMin][cr][d] = HueByte(255, mid, minc, 255, minc);
        hue_[kRMaxGMin][cr][d] = HueByte(255, minc, mid, 255, minc);
        hue_[kGMaxBMin][cr][d] = HueByte(mid, 255, minc, 255, minc);
        hue_[kGMaxRMin][cr][d] = HueByte(minc, 255, mid, 255, minc);
        hue_[kBMaxRMin][cr][d] = HueByte(minc, mid, 255, 255, minc);
        hue_[kBMaxGMin][cr][d] = HueByte(mid, minc, 255, 255, minc);
      }
    }
    for (int maxc = 1; maxc < 256; ++maxc) {
      for (int cr = 1; cr <= maxc; ++cr) {
        const float sf = static_cast<float>(cr) / static_cast<float>(maxc);
        const int si = static_cast<int>(static_cast<double>(sf) * 255.0);
        sat_[maxc][cr] = static_cast<uint8_t>(si < 0 ? 0 : si > 255 ? 255 : si);
      }
    }
    for (int h = 0; h < 256; ++h) {
      const double h6 = static_cast<double>(static_cast<float>(h)) * 6.0 / 255.0;
      const int i = static_cast<int>(std::floor(h6));
      f_[h] = static_cast<float>(h6 - static_cast<double>(static_cast<float>(i)));
      one_minus_f_[h] = 1.0 - static_cast<double>(f_[h]);
      sector_[h] = static_cast<uint8_t>(i % 6);
    }
    for (int s = 0; s < 256; ++s) {
      fs_[s] = static_cast<float>(static_cast<double>(static_cast<float>(s)) / 255.0);
      for (int v = 0; v < 256; ++v) {
        const int p = RoundHalfUp(static_cast<double>(static_cast<float>(v)) *
                                  (1.0 - static_cast<double>(fs_[s])));
        p_[s][v] = static_cast<uint8_t>(p > 255 ? 255 : p);
      }
    }
  }

  uint8_t hue_[6][256][256] = {};  // [HueCase][cr][max - mid]
  uint8_t sat_[256][256] = {};     // [max][cr]
  float f_[256];
  double one_minus_f_[256];
  uint8_t sector_[256];
  float fs_[256];
  uint8_t p_[256][256];  // [s][v]
};

}  // namespace

void AdjustHue(uint8_t* img, size_t pixels, float hue) {
  // np.uint8(hue_factor * 255): the double product truncated toward zero,
  // then taken modulo 256.
  const auto shift =
      static_cast<uint8_t>(static_cast<int>(static_cast<double>(hue) * 255.0) & 0xff);
  const HueTables& t = HueTables::Get();
  for (size_t i = 0; i < pixels; ++i) {
    uint8_t* px = img + 3 * i;
    // Grey: H = S = 0, and hsv2rgb gives (v, v, v) back.
    if (px[0] == px[1] && px[1] == px[2]) continue;
    t.Shift(px, shift);
  }
}

}  // namespace stoker::image
