#include "server/image/decode/exif.h"

#include <catch2/catch.hpp>
#include <vector>

#include "server/image/ops/rng.h"
#include "testing/test_jpeg.h"

namespace stoker::image {
namespace {

TEST_CASE("EXIF orientation is read in both byte orders", "[exif]") {
  for (int o = 1; o <= 8; ++o) {
    for (bool big : {false, true}) {
      const std::vector<uint8_t> app1 = testing::ExifApp1(o, big);
      CHECK(ParseExifOrientation(app1.data(), app1.size()) == o);
    }
  }
}

TEST_CASE("EXIF orientation out of range or malformed is 1", "[exif]") {
  std::vector<uint8_t> app1 = testing::ExifApp1(9, false);
  CHECK(ParseExifOrientation(app1.data(), app1.size()) == 1);
  app1 = testing::ExifApp1(0, true);
  CHECK(ParseExifOrientation(app1.data(), app1.size()) == 1);
  app1 = testing::ExifApp1(6, false);
  app1[0] = 'X';  // not EXIF
  CHECK(ParseExifOrientation(app1.data(), app1.size()) == 1);
  app1 = testing::ExifApp1(6, false);
  app1[6] = 'Q';  // bad byte order
  CHECK(ParseExifOrientation(app1.data(), app1.size()) == 1);
  app1 = testing::ExifApp1(6, false);
  app1[10] = 0xF0;  // IFD0 offset far outside
  CHECK(ParseExifOrientation(app1.data(), app1.size()) == 1);
  CHECK(ParseExifOrientation(nullptr, 0) == 1);
}

TEST_CASE("EXIF parser survives every truncation and random bytes", "[exif][hostile]") {
  const std::vector<uint8_t> app1 = testing::ExifApp1(6, true);
  for (size_t n = 0; n < app1.size(); ++n) {
    const std::vector<uint8_t> cut(app1.begin(), app1.begin() + n);
    const int o = ParseExifOrientation(cut.data(), cut.size());
    CHECK((o == 1 || o == 6));
  }
  KeyedRng rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk = app1;
    for (int k = 0; k < 4; ++k) junk[6 + rng.Below(junk.size() - 6)] = rng.Next() & 0xff;
    const int o = ParseExifOrientation(junk.data(), junk.size());
    CHECK((o >= 1 && o <= 8));
  }
}

}  // namespace
}  // namespace stoker::image
