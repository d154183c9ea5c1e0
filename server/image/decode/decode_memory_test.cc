#include "server/image/decode/decode_memory.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// AddressSanitizer brings its own malloc, which ignores mallopt.
#if defined(__SANITIZE_ADDRESS__)
#define STOKER_OWN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STOKER_OWN_MALLOC 1
#endif
#endif
#if !defined(STOKER_OWN_MALLOC) && defined(__GLIBC__)
#define STOKER_GLIBC_MALLOC 1
#endif

#include <catch2/catch.hpp>

namespace stoker::image {
namespace {

#if defined(STOKER_GLIBC_MALLOC)
long MinorFaults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
#endif

// What libjpeg does per progressive image: a large buffer allocated, zeroed
// and freed. With glibc's defaults, in a fresh process (ctest runs each test
// case in its own), a block this size is mapped and unmapped again, so each
// image faults every page of it anew.
TEST_CASE("KeepDecoderMemory: a freed decode buffer stays on the heap and is reused",
          "[decode_memory]") {
#if defined(STOKER_GLIBC_MALLOC)
  REQUIRE(KeepDecoderMemory());
  const size_t bytes = size_t{30} << 20;  // ~10 MP of 4:2:0 coefficients
  static_assert(size_t{30} << 20 < kHeapBlockBytes);
  const size_t mapped_before = ::mallinfo2().hblkhd;
  void* p = std::malloc(bytes);
  REQUIRE(p != nullptr);
  std::memset(p, 1, bytes);
  CHECK(::mallinfo2().hblkhd == mapped_before);  // from the heap, not a mapping
  std::free(p);
  // Its pages stay at the top of the heap (under kKeepFreeBytes)...
  CHECK(::mallinfo2().keepcost >= bytes);
  // ...and the next image's buffer reuses them without a page fault.
  const long before = MinorFaults();
  p = std::malloc(bytes);
  REQUIRE(p != nullptr);
  std::memset(p, 2, bytes);
  std::free(p);
  CHECK(MinorFaults() - before < 64);  // the block alone is 7680 pages
#else
  CHECK_FALSE(KeepDecoderMemory());
#endif
}

}  // namespace
}  // namespace stoker::image
