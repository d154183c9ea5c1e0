#include "server/image/decode/png_unfilter.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <vector>

namespace stoker::image {
namespace {

using Bytes = std::vector<uint8_t>;

// The spec's filters (PNG section 9.2), written as it states them, byte by
// byte with the branchy predictor: what an encoder does.
uint8_t SpecPaeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  if (pb <= pc) return static_cast<uint8_t>(b);
  return static_cast<uint8_t>(c);
}

// Filters row `cur` (previous row `prev`, zeros for the first) with `type`.
Bytes Filter(uint8_t type, const Bytes& cur, const Bytes& prev, size_t bpp) {
  Bytes out(cur.size());
  for (size_t i = 0; i < cur.size(); ++i) {
    const int a = i >= bpp ? cur[i - bpp] : 0;
    const int b = prev[i];
    const int c = i >= bpp ? prev[i - bpp] : 0;
    int pred = 0;
    switch (type) {
      case 1:
        pred = a;
        break;
      case 2:
        pred = b;
        break;
      case 3:
        pred = (a + b) / 2;
        break;
      case 4:
        pred = SpecPaeth(a, b, c);
        break;
      default:
        break;
    }
    out[i] = static_cast<uint8_t>(cur[i] - pred);
  }
  return out;
}

TEST_CASE("PNG unfilter: every filter and pixel size restores what the spec's filters made",
          "[png]") {
  std::mt19937 rng(5);
  for (size_t bpp : {1, 2, 3, 4, 6, 8}) {
    for (size_t pixels : {1, 2, 3, 17, 64, 333}) {
      const size_t n = bpp * pixels;
      // Rows of noise, of runs near 0 and 255 (where Paeth's ties and the
      // byte wrap-around are), and smooth ones.
      std::vector<Bytes> image(6, Bytes(n));
      for (size_t y = 0; y < image.size(); ++y) {
        for (size_t i = 0; i < n; ++i) {
          const uint32_t r = rng();
          image[y][i] = y % 3 == 0   ? static_cast<uint8_t>(r)
                        : y % 3 == 1 ? static_cast<uint8_t>((r % 2) ? 255 - r % 3 : r % 3)
                                     : static_cast<uint8_t>(i * 3 + y * 7 + r % 2);
        }
      }
      for (uint8_t type = 0; type <= 4; ++type) {
        INFO("bpp " << bpp << " pixels " << pixels << " filter " << int{type});
        Bytes prev(n, 0);
        Bytes restored_prev;
        for (size_t y = 0; y < image.size(); ++y) {
          // Rows alternate this filter with the others, as encoders mix them.
          const uint8_t t = y % 2 == 0 ? type : static_cast<uint8_t>((type + y) % 5);
          Bytes row = Filter(t, image[y], prev, bpp);
          REQUIRE(UnfilterRow(t, row.data(), y == 0 ? nullptr : restored_prev.data(), n, bpp));
          REQUIRE(row == image[y]);
          restored_prev = row;
          prev = image[y];
        }
      }
    }
  }
}

TEST_CASE("PNG unfilter: a filter type over 4 or an unknown pixel size is refused, row untouched",
          "[png]") {
  Bytes row = {1, 2, 3, 4, 5, 6};
  const Bytes prev = {9, 9, 9, 9, 9, 9};
  for (uint8_t bad : {5, 6, 127, 255}) {
    CHECK_FALSE(UnfilterRow(bad, row.data(), prev.data(), row.size(), 3));
  }
  CHECK_FALSE(UnfilterRow(1, row.data(), prev.data(), row.size(), 5));
  CHECK(row == Bytes{1, 2, 3, 4, 5, 6});
  // None leaves it as it is; Up adds the row above.
  REQUIRE(UnfilterRow(0, row.data(), prev.data(), row.size(), 3));
  CHECK(row == Bytes{1, 2, 3, 4, 5, 6});
  REQUIRE(UnfilterRow(2, row.data(), prev.data(), row.size(), 3));
  CHECK(row == Bytes{10, 11, 12, 13, 14, 15});
}

}  // namespace
}  // namespace stoker::image
