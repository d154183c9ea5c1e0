#include "server/image/decode/jpeg_markers.h"

#include <catch2/catch.hpp>
#include <vector>

namespace stoker::image {
namespace {

using Bytes = std::vector<uint8_t>;

TEST_CASE("JPEG markers: fill bytes, segments, the end of entropy-coded data", "[jpeg]") {
  SECTION("a marker after fill bytes, and what is not one") {
    const Bytes d = {0xFF, 0xFF, 0xFF, 0xDB, 0x12, 0xFF};
    size_t pos = 0;
    CHECK(ReadMarker(d.data(), d.size(), &pos) == 0xDB);
    CHECK(pos == 4);
    CHECK(ReadMarker(d.data(), d.size(), &pos) == -1);  // 0x12 is no marker
    CHECK(pos == 4);
    pos = 5;
    CHECK(ReadMarker(d.data(), d.size(), &pos) == -1);  // ends inside the fill
    CHECK(pos == 5);
  }
  SECTION("segments: the length counts itself and must fit") {
    const Bytes d = {0x00, 0x05, 'a', 'b', 'c', 0x00, 0x01};
    size_t pos = 0;
    const uint8_t* body = nullptr;
    uint32_t len = 0;
    REQUIRE(ReadSegment(d.data(), d.size(), &pos, &body, &len));
    CHECK(body == d.data() + 2);
    CHECK(len == 3);
    CHECK(pos == 5);
    CHECK_FALSE(ReadSegment(d.data(), d.size(), &pos, &body, &len));  // length 1
    const Bytes too_long = {0x00, 0x09, 'a'};
    pos = 0;
    CHECK_FALSE(ReadSegment(too_long.data(), too_long.size(), &pos, &body, &len));
    pos = 3;
    CHECK_FALSE(ReadSegment(too_long.data(), too_long.size(), &pos, &body, &len));
    CHECK(pos == 3);
  }
  SECTION("entropy-coded data: stuffed zeros skipped, fill bytes counted in the marker") {
    const Bytes d = {0x01, 0xFF, 0x00, 0x02, 0xFF, 0xFF, 0xD3, 0x04, 0xFF, 0xD9};
    size_t at = 0, code_at = 0;
    REQUIRE(NextMarkerInData(d.data(), d.size(), 0, &at, &code_at));
    CHECK(at == 4);
    CHECK(code_at == 6);
    CHECK(IsRestartMarker(d[code_at]));
    REQUIRE(NextMarkerInData(d.data(), d.size(), code_at + 1, &at, &code_at));
    CHECK(at == 8);
    CHECK(d[code_at] == 0xD9);
    CHECK_FALSE(IsRestartMarker(0xD9));
    CHECK_FALSE(IsRestartMarker(0xCF));
    // Data that ends first: no FF, a stuffed zero last, FF fill last.
    CHECK_FALSE(NextMarkerInData(d.data(), 4, 0, &at, &code_at));
    CHECK_FALSE(NextMarkerInData(d.data(), 3, 0, &at, &code_at));
    CHECK_FALSE(NextMarkerInData(d.data(), 6, 3, &at, &code_at));
    CHECK_FALSE(NextMarkerInData(d.data(), d.size(), d.size(), &at, &code_at));
  }
}

}  // namespace
}  // namespace stoker::image
