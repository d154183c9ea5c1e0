// libFuzzer target: the TIFF decoder (server/image/decode/tiff_decoder.h) alone, on
// arbitrary bytes: ReadHeader, Decode of the whole image, then Decode of a
// region derived from the first bytes of the input, with one decoder object
// reused across inputs (as a worker reuses it). Caps are small (4 Mpx) so
// that each input stays fast.
//
// Invariants (abort with a message on stderr when broken): a failure has a
// message; a success has a non-zero size within the cap and a mode; the
// region's pixels equal the whole decode's at the same place.
//
// Seeds: fuzz/make_seeds.py (small TIFFs of PIL's modes and codecs).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "server/image/decode/tiff_decoder.h"

namespace {

constexpr uint64_t kMaxPixels = 4ull << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tiff_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

void CheckFailure(const absl::Status& s) {
  if (!s.ok() && s.message().empty()) Fail("a failure without a reason");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<stoker::image::ImageDecoder> decoder = stoker::image::MakeTiffDecoder();
  stoker::image::DecodeLimits limits;
  limits.max_pixels = kMaxPixels;
  stoker::image::ImageHeader h;
  absl::Status s = decoder->ReadHeader(data, size, limits, &h);
  CheckFailure(s);
  if (!s.ok()) return 0;
  if (h.width == 0 || h.height == 0) Fail("a success with a zero size");
  if (uint64_t{h.width} * h.height > kMaxPixels) Fail("a size over the cap");
  if (h.mode == nullptr || h.mode[0] == '\0') Fail("a success without a mode");

  std::vector<uint8_t> whole(size_t{h.width} * h.height * 3);
  s = decoder->Decode({0, 0, h.height, h.width}, whole.data(), size_t{h.width} * 3);
  CheckFailure(s);
  const bool whole_ok = s.ok();

  // A region from the bytes after the 8-byte header (mostly the IFD offset).
  uint32_t q[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < 4 && 4 + i < size; ++i) q[i] = data[4 + i];
  stoker::image::DecodeRegion r;
  r.top = (q[0] * 131) % h.height;
  r.left = (q[1] * 197) % h.width;
  r.height = 1 + (q[2] * 61) % (h.height - r.top);
  r.width = 1 + (q[3] * 89) % (h.width - r.left);
  const size_t stride = size_t{r.width} * 3 + 1;
  std::vector<uint8_t> part(stride * r.height);
  s = decoder->Decode(r, part.data(), stride);
  CheckFailure(s);
  if (s.ok() && whole_ok) {
    for (uint32_t y = 0; y < r.height; ++y) {
      if (std::memcmp(&part[y * stride], &whole[(size_t{r.top + y} * h.width + r.left) * 3],
                      size_t{r.width} * 3) != 0) {
        Fail("a region differs from the whole decode");
      }
    }
  }
  return 0;
}
