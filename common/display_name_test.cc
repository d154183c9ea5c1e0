#include "common/display_name.h"

#include <catch2/catch.hpp>

namespace stoker {
namespace {

TEST_CASE("IsUtf8 takes what protobuf takes as a string") {
  CHECK(IsUtf8(""));
  CHECK(IsUtf8("class/img_0001.jpg"));
  CHECK(IsUtf8("caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.jpg"));  // café/日本.jpg
  CHECK(IsUtf8("\xf0\x9f\x90\xb1"));                         // U+1F431
  CHECK_FALSE(IsUtf8("caf\xe9"));                            // Latin-1 é
  CHECK_FALSE(IsUtf8("\xc0\xaf"));                           // overlong '/'
  CHECK_FALSE(IsUtf8("\xed\xa0\x80"));                       // a surrogate
  CHECK_FALSE(IsUtf8("\xf4\x90\x80\x80"));                   // past U+10FFFF
  CHECK_FALSE(IsUtf8("\xe6\x97"));                           // cut short
  CHECK_FALSE(IsUtf8("\xff"));
}

TEST_CASE("DisplayName leaves UTF-8 names alone and escapes the bytes of the others") {
  CHECK(DisplayName("caf\xc3\xa9.jpg") == "caf\xc3\xa9.jpg");
  CHECK(DisplayName("caf\xe9/img\xff.jpg") == "caf\\xe9/img\\xff.jpg");
  CHECK(DisplayName("\xe6\x97/\xe6\x97\xa5") == "\\xe6\\x97/\xe6\x97\xa5");
  CHECK(IsUtf8(DisplayName("\x80\x81\xfe\xff\xc0")));
}

}  // namespace
}  // namespace stoker
