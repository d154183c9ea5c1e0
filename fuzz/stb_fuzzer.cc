// libFuzzer target: the BMP and PNM decoders (server/image/decode/stb_decoder.h)
// alone, on arbitrary bytes.
//
// Input: 4 bytes of parameters, then the file ('B' first: the BMP decoder,
// else the PNM one).
//   [0] [1] the region's top and left, [2] [3] its height and width, each
//       as a fraction n / 255 of the image's (at least one row / column)
// On each input: ReadHeader (cap 4 Mpx), Decode of the whole image, Decode
// of the region; each output goes to a buffer of exactly its size (so that
// ASan sees any write past it). Invariants: a header success has a non-zero
// size within the cap, its format and a mode; Decode after a good header
// fails only for memory (stb checks nothing that ReadHeader has not); the
// region's pixels are the whole decode's at the same place.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "server/image/decode/stb_decoder.h"

namespace {

constexpr size_t kParamBytes = 4;
constexpr uint64_t kMaxPixels = 4ull << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "stb_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

uint32_t Part(uint32_t n, uint8_t q) { return static_cast<uint32_t>(uint64_t{n} * q / 255); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::image;
  if (size < kParamBytes) return 0;
  const uint8_t* q = data;
  data += kParamBytes;
  size -= kParamBytes;
  const bool bmp = size > 0 && data[0] == 'B';
  std::unique_ptr<ImageDecoder> decoder = bmp ? MakeBmpDecoder() : MakePnmDecoder();

  DecodeLimits limits;
  limits.max_pixels = kMaxPixels;
  ImageHeader header;
  if (!decoder->ReadHeader(data, size, limits, &header).ok()) return 0;
  const uint32_t w = header.width, h = header.height;
  if (w == 0 || h == 0) Fail("header success with a zero size");
  if (uint64_t{w} * h > kMaxPixels) Fail("header success over the pixel cap");
  if (header.format != (bmp ? ImageFormat::kBmp : ImageFormat::kPnm)) Fail("wrong format");
  if (header.mode == nullptr || header.mode[0] == '\0') Fail("no mode");

  std::vector<uint8_t> whole(size_t{w} * h * 3);
  const absl::Status s = decoder->Decode(DecodeRegion{0, 0, h, w}, whole.data(), size_t{w} * 3);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kResourceExhausted) Fail("Decode failed after a good header");
    return 0;
  }

  DecodeRegion r;
  r.top = std::min(h - 1, Part(h, q[0]));
  r.left = std::min(w - 1, Part(w, q[1]));
  r.height = std::max(1u, Part(h - r.top, q[2]));
  r.width = std::max(1u, Part(w - r.left, q[3]));
  std::vector<uint8_t> part(size_t{r.width} * r.height * 3);
  if (!decoder->Decode(r, part.data(), size_t{r.width} * 3).ok()) Fail("region Decode failed");
  for (uint32_t y = 0; y < r.height; ++y) {
    if (std::memcmp(part.data() + size_t{y} * r.width * 3,
                    whole.data() + ((size_t{r.top} + y) * w + r.left) * 3,
                    size_t{r.width} * 3) != 0) {
      Fail("region differs from the whole decode");
    }
  }
  return 0;
}
