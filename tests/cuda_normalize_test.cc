// The device normalize's formula, compiled for the host (client/src/
// cuda_normalize.h is what the kernel runs), checked against straightforward
// computations written independently here: nearest-even rounding decided in
// double precision from the decoded neighbours, not by bit tricks.

#include "cuda_normalize.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace stoker::cuda {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Exact value of a half's bit pattern (finite ones).
double HalfValue(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double BFloat16Value(uint16_t b) { return FromBits(uint32_t{b} << 16); }

// True when `got` is the representable value nearest to f, ties to the even
// pattern, overflowing to infinity from `overflow` (max + half an ulp).
template <typename Decode>
bool NearestEven(float f, uint16_t got, uint16_t inf_bits, double overflow, Decode decode) {
  const double d = std::fabs(static_cast<double>(f));
  const uint16_t mag = got & 0x7fff;
  if (((got & 0x8000) != 0) != std::signbit(f)) return false;
  if (mag == inf_bits) return d >= overflow;
  if (mag > inf_bits || d >= overflow) return false;
  const double err = std::fabs(d - decode(mag));
  if (mag > 0) {
    const double below = std::fabs(d - decode(static_cast<uint16_t>(mag - 1)));
    if (err > below || (err == below && (mag & 1) != 0)) return false;
  }
  if (mag + 1 < inf_bits) {
    const double above = std::fabs(d - decode(static_cast<uint16_t>(mag + 1)));
    if (err > above || (err == above && (mag & 1) != 0)) return false;
  }
  return true;
}

bool HalfOk(float f) { return NearestEven(f, FloatToHalfBits(f), 0x7c00, 65520.0, HalfValue); }

bool BFloat16Ok(float f) {
  const double max = BFloat16Value(0x7f7f);
  const double overflow = max + (max - BFloat16Value(0x7f7e)) / 2;
  return NearestEven(f, FloatToBFloat16Bits(f), 0x7f80, overflow, BFloat16Value);
}

// Counts the failures over many values; reports the first.
struct Tally {
  uint64_t checked = 0, failed = 0;
  float first = 0;
  void Add(bool ok, float f) {
    ++checked;
    if (!ok && failed++ == 0) first = f;
  }
};

#define REQUIRE_TALLY(t)                                                         \
  do {                                                                           \
    INFO((t).failed << " of " << (t).checked << " wrong; first: " << (t).first); \
    REQUIRE((t).failed == 0);                                                    \
  } while (0)

void CheckHalf(float f) {
  INFO("float " << f);
  REQUIRE(HalfOk(f));
}

void CheckBFloat16(float f) {
  INFO("float " << f);
  REQUIRE(BFloat16Ok(f));
}

TEST_CASE("float to half rounds to nearest even", "[cuda][normalize]") {
  CHECK(FloatToHalfBits(0.0f) == 0x0000);
  CHECK(FloatToHalfBits(-0.0f) == 0x8000);
  CHECK(FloatToHalfBits(1.0f) == 0x3c00);
  CHECK(FloatToHalfBits(-2.0f) == 0xc000);
  CHECK(FloatToHalfBits(0.1f) == 0x2e66);
  CHECK(FloatToHalfBits(65504.0f) == 0x7bff);
  CHECK(FloatToHalfBits(65519.0f) == 0x7bff);
  CHECK(FloatToHalfBits(65520.0f) == 0x7c00);
  CHECK(FloatToHalfBits(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(FloatToHalfBits(std::ldexp(1.0f, -25)) == 0x0000);     // a tie: to even (0)
  CHECK(FloatToHalfBits(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 units: to even (2)
  CHECK(FloatToHalfBits(std::ldexp(1023.5f, -24)) == 0x0400);  // carries into the exponent
  CHECK(FloatToHalfBits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK((FloatToHalfBits(std::numeric_limits<float>::quiet_NaN()) & 0x7c00) == 0x7c00);
  CHECK((FloatToHalfBits(std::numeric_limits<float>::quiet_NaN()) & 0x3ff) != 0);

  // Every midpoint between neighbouring halves, and the floats on either side.
  Tally t;
  for (uint32_t m = 0; m < 0x7bff; ++m) {
    const float mid = static_cast<float>(
        (HalfValue(static_cast<uint16_t>(m)) + HalfValue(static_cast<uint16_t>(m + 1))) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      t.Add(HalfOk(f), f);
      t.Add(HalfOk(-f), -f);
    }
  }
  // A sweep over the float bit patterns (finite ones).
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) {
    const float f = FromBits(static_cast<uint32_t>(u));
    if (std::isfinite(f)) t.Add(HalfOk(f), f);
  }
  REQUIRE_TALLY(t);
}

TEST_CASE("float to bfloat16 rounds to nearest even", "[cuda][normalize]") {
  CHECK(FloatToBFloat16Bits(1.0f) == 0x3f80);
  CHECK(FloatToBFloat16Bits(FromBits(0x3f808000u)) == 0x3f80);  // a tie, even below
  CHECK(FloatToBFloat16Bits(FromBits(0x3f818000u)) == 0x3f82);  // a tie, even above
  CHECK(FloatToBFloat16Bits(FromBits(0x3f808001u)) == 0x3f81);
  CHECK(FloatToBFloat16Bits(FromBits(0x7f7fffffu)) == 0x7f80);  // overflows to inf
  CHECK(FloatToBFloat16Bits(-0.0f) == 0x8000);
  CHECK(FloatToBFloat16Bits(std::numeric_limits<float>::infinity()) == 0x7f80);
  const uint16_t nan = FloatToBFloat16Bits(std::numeric_limits<float>::quiet_NaN());
  CHECK(((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0));
  CHECK((FloatToBFloat16Bits(FromBits(0x7f800001u)) & 0x7f) != 0);  // a NaN stays a NaN

  Tally t;
  for (uint32_t m = 0; m < 0x7f7f; ++m) {
    const uint32_t mid = (m << 16) | 0x8000u;
    for (uint32_t u : {mid, mid - 1, mid + 1}) {
      t.Add(BFloat16Ok(FromBits(u)), FromBits(u));
      t.Add(BFloat16Ok(FromBits(u | 0x80000000u)), FromBits(u | 0x80000000u));
    }
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) {
    const float f = FromBits(static_cast<uint32_t>(u));
    if (std::isfinite(f)) t.Add(BFloat16Ok(f), f);
  }
  REQUIRE_TALLY(t);
}

// The reference against a plain loop over (n, c, y, x), and the element
// order of each layout.
TEST_CASE("normalize reference: every dtype and layout", "[cuda][normalize]") {
  std::mt19937 rng(20240605);
  const uint32_t n = 3, h = 5, w = 7;
  std::vector<uint8_t> src(size_t{n} * h * w * 3);
  for (auto& v : src) v = static_cast<uint8_t>(rng());
  src[0] = 0;
  src[1] = 255;
  const float mean[3] = {0.5f, 0.25f, 0.125f}, sd[3] = {0.3f, 0.2f, 0.7f};

  for (OutDType dtype : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16}) {
    for (bool nchw : {true, false}) {
      NormalizeParams p;
      p.n = n;
      p.h = h;
      p.w = w;
      p.dtype = dtype;
      p.nchw = nchw;
      std::copy(mean, mean + 3, p.mean);
      std::copy(sd, sd + 3, p.std);
      REQUIRE(NormalizeOutBytes(p) == src.size() * OutDTypeBytes(dtype));
      std::vector<uint8_t> out(NormalizeOutBytes(p), 0xee);
      NormalizeReference(src.data(), out.data(), p);
      for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t c = 0; c < 3; ++c) {
          for (uint32_t y = 0; y < h; ++y) {
            for (uint32_t x = 0; x < w; ++x) {
              const uint8_t v = src[((size_t{i} * h + y) * w + x) * 3 + c];
              // torchvision's ToTensor + Normalize, in float32.
              const float t = static_cast<float>(v) / 255.0f;
              const float want = (t - mean[c]) / sd[c];
              const size_t at = nchw ? ((size_t{i} * 3 + c) * h + y) * w + x
                                     : ((size_t{i} * h + y) * w + x) * 3 + c;
              INFO("dtype " << int(dtype) << " nchw " << nchw << " at " << at);
              if (dtype == OutDType::kFloat32) {
                float got;
                std::memcpy(&got, &out[at * 4], 4);
                REQUIRE(got == want);
              } else {
                uint16_t got;
                std::memcpy(&got, &out[at * 2], 2);
                const double value =
                    dtype == OutDType::kFloat16 ? HalfValue(got) : BFloat16Value(got);
                // Within half an ulp of the float32 value, and the nearest-even pattern.
                if (dtype == OutDType::kFloat16) {
                  CheckHalf(want);
                  REQUIRE(std::fabs(value - want) <=
                          std::fabs(want) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25));
                } else {
                  CheckBFloat16(want);
                  REQUIRE(std::fabs(value - want) <= std::fabs(want) * std::ldexp(1.0, -8));
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("normalize formula matches the daemon's float pipeline formula", "[cuda][normalize]") {
  // server/image/ops/transform.cc: lut[c][v] = (v / 255.0f - mean[c]) / std[c].
  const float mean = 0.485f, sd = 0.229f;
  for (int v = 0; v < 256; ++v) {
    REQUIRE(NormalizeValue(static_cast<uint8_t>(v), mean, sd) ==
            (static_cast<float>(v) / 255.0f - mean) / sd);
  }
}

}  // namespace
}  // namespace stoker::cuda
