// libFuzzer target: the WebP decoder (webp_decoder.h) on arbitrary bytes,
// one decoder object reused across inputs as in a worker.
//
// Input: the file itself; its bytes [16..23] (inside the VP8X/VP8 headers
// of a real file, so mutations move both) also pick a region: top, left,
// height, width, each mod the image's size. On each input: ReadHeader with
// a 4 Mpx cap, Decode of the whole image, Decode of the region. Outputs go
// to buffers of exactly the region's size (ASan sees any write past them).
// Invariants: a success describes a non-empty image within the cap; every
// failure has a message; a region where the whole decodes is its window.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "server/image/decode/webp_decoder.h"

namespace {

constexpr uint64_t kMaxPixels = 4ull << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "webp_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

void CheckFailure(const absl::Status& s) {
  if (s.message().empty()) Fail("a failure without a reason");
}

uint32_t Pick(const uint8_t* data, size_t size, size_t at, uint32_t n) {
  const uint32_t v = at + 1 < size ? data[at] | (data[at + 1] << 8) : 0;
  return v % n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto decoder = stoker::image::MakeWebpDecoder();
  stoker::image::DecodeLimits limits;
  limits.max_pixels = kMaxPixels;
  stoker::image::ImageHeader header;
  absl::Status s = decoder->ReadHeader(data, size, limits, &header);
  if (!s.ok()) {
    CheckFailure(s);
    return 0;
  }
  const uint32_t w = header.width, h = header.height;
  if (w == 0 || h == 0) Fail("a header with a zero size");
  if (uint64_t{w} * h > kMaxPixels) Fail("a header over the cap");
  if (header.mode == nullptr || header.mode[0] == '\0') Fail("a header without a mode");

  std::vector<uint8_t> whole(size_t{w} * h * 3);
  s = decoder->Decode({0, 0, h, w}, whole.data(), size_t{w} * 3);
  if (!s.ok()) CheckFailure(s);
  const bool whole_ok = s.ok();

  stoker::image::DecodeRegion r;
  r.top = Pick(data, size, 16, h);
  r.left = Pick(data, size, 18, w);
  r.height = 1 + Pick(data, size, 20, h - r.top);
  r.width = 1 + Pick(data, size, 22, w - r.left);
  std::vector<uint8_t> part(size_t{r.width} * r.height * 3);
  s = decoder->Decode(r, part.data(), size_t{r.width} * 3);
  if (!s.ok()) {
    CheckFailure(s);
    if (whole_ok) Fail("a region fails where the whole image decodes");
    return 0;
  }
  // A region may succeed where the whole fails (it stops after its last
  // row); where both succeed, it is the whole's window.
  if (whole_ok) {
    for (uint32_t y = 0; y < r.height; ++y) {
      for (size_t i = 0; i < size_t{r.width} * 3; ++i) {
        if (part[size_t{y} * r.width * 3 + i] != whole[(size_t{r.top + y} * w + r.left) * 3 + i]) {
          Fail("a region differs from the whole decode's window");
        }
      }
    }
  }
  return 0;
}
