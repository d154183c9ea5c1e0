// libFuzzer target: the PNG decoder alone (server/image/decode/png_decoder.h) on
// arbitrary bytes, as the pipeline calls it: ReadHeader, then Decode of the
// whole image and of a region.
//
// Input: 5 bytes of parameters, then the file.
//   [0] [1] the region's top and left (mod the image's height, width)
//   [2] [3] its height and width - 1 (mod what is left below / right of it)
//   [4] flags: 1 rewrites every chunk's CRC to match its bytes first (on a
//       copy), so that mutations get past the CRC checks into libspng's
//       chunk parsing, inflate and defiltering
// Caps are small (4 Mpx) so that each input stays fast. Outputs go to
// buffers of exactly the region's size (so that ASan sees any write past
// them). Invariants: a header has a non-zero size within the cap and a mode;
// errors are INVALID_ARGUMENT or RESOURCE_EXHAUSTED only; when the whole
// decode succeeds the region's does too (it reads less of the file) and its
// pixels are the whole decode's, byte for byte. And the decoder's two paths
// (png_decoder.h) agree: libspng's row by row path alone gives the same
// status (code and message) and the same pixels, for the header, the whole
// image and the region.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "server/image/decode/png_decoder.h"

namespace {

constexpr size_t kParamBytes = 5;
constexpr uint64_t kMaxPixels = 4ull << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "png_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

void CheckError(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kResourceExhausted) {
    std::fprintf(stderr, "png_fuzzer: %s\n", s.ToString().c_str());
    Fail("an error other than INVALID_ARGUMENT or RESOURCE_EXHAUSTED");
  }
  if (s.message().empty()) Fail("an error without a message");
}

uint32_t Crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

// Walks the chunks by their lengths, as far as they fit, fixing each CRC.
void FixCrcs(std::vector<uint8_t>* png) {
  uint8_t* d = png->data();
  for (size_t pos = 8; png->size() >= 12 && pos <= png->size() - 12;) {
    const uint32_t length =
        uint32_t{d[pos]} << 24 | d[pos + 1] << 16 | d[pos + 2] << 8 | d[pos + 3];
    if (length > png->size() - 12 - pos) break;
    const uint32_t crc = Crc32(d + pos + 4, size_t{4} + length);
    for (int i = 0; i < 4; ++i) d[pos + 8 + length + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    pos += size_t{12} + length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stoker::image::DecodeRegion;
  if (size < kParamBytes) return 0;
  const uint8_t* q = data;
  data += kParamBytes;
  size -= kParamBytes;
  std::vector<uint8_t> fixed;
  if (q[4] & 1) {
    fixed.assign(data, data + size);
    FixCrcs(&fixed);
    data = fixed.data();
  }

  auto decoder = stoker::image::MakePngDecoder();
  auto rows_only =
      stoker::image::MakePngDecoder({stoker::image::PngDecoderOptions::Path::kRowByRow});
  stoker::image::DecodeLimits limits;
  limits.max_pixels = kMaxPixels;
  stoker::image::ImageHeader h, h2;
  absl::Status s = decoder->ReadHeader(data, size, limits, &h);
  if (rows_only->ReadHeader(data, size, limits, &h2) != s) Fail("the paths' headers differ");
  if (!s.ok()) {
    CheckError(s);
    return 0;
  }
  if (h.width == 0 || h.height == 0) Fail("a header with a zero size");
  if (uint64_t{h.width} * h.height > kMaxPixels) Fail("a header over the pixel cap");
  if (h.mode == nullptr || h.mode[0] == '\0') Fail("a header without a mode");

  // As a mask: a label map of 1 or 2 bytes a pixel, or a clear refusal.
  {
    std::vector<uint8_t> labels(size_t{h.width} * h.height * 2);
    uint32_t bpp = 0;
    const absl::Status ls = decoder->DecodeLabels(labels.data(), &bpp);
    if (!ls.ok()) {
      if (ls.code() != absl::StatusCode::kUnimplemented) CheckError(ls);
    } else if (bpp != 1 && bpp != 2) {
      Fail("a label map of neither 1 nor 2 bytes a value");
    }
  }

  std::vector<uint8_t> whole(size_t{h.width} * h.height * 3);
  const absl::Status whole_status =
      decoder->Decode(DecodeRegion{0, 0, h.height, h.width}, whole.data(), size_t{h.width} * 3);
  if (!whole_status.ok()) CheckError(whole_status);
  {
    std::vector<uint8_t> other(whole.size());
    if (rows_only->Decode(DecodeRegion{0, 0, h.height, h.width}, other.data(),
                          size_t{h.width} * 3) != whole_status ||
        (whole_status.ok() && other != whole)) {
      Fail("the row by row path decodes the whole image otherwise");
    }
  }

  DecodeRegion r;
  r.top = q[0] % h.height;
  r.left = q[1] % h.width;
  r.height = 1 + q[2] % (h.height - r.top);
  r.width = 1 + q[3] % (h.width - r.left);
  std::vector<uint8_t> part(size_t{r.width} * r.height * 3);
  s = decoder->Decode(r, part.data(), size_t{r.width} * 3);
  {
    std::vector<uint8_t> other(part.size());
    if (rows_only->Decode(r, other.data(), size_t{r.width} * 3) != s || (s.ok() && other != part)) {
      Fail("the row by row path decodes the region otherwise");
    }
  }
  if (!s.ok()) {
    CheckError(s);
    if (whole_status.ok()) Fail("a region failed where the whole image decoded");
    return 0;
  }
  if (whole_status.ok()) {
    for (uint32_t y = 0; y < r.height; ++y) {
      if (std::memcmp(part.data() + size_t{y} * r.width * 3,
                      whole.data() + (size_t{r.top + y} * h.width + r.left) * 3,
                      size_t{r.width} * 3) != 0) {
        Fail("a region's pixels differ from the whole decode's");
      }
    }
  }
  return 0;
}
