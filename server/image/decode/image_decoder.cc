#include "server/image/decode/image_decoder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/image/decode/png_decoder.h"
#include "server/image/decode/stb_decoder.h"
#include "server/image/decode/tiff_decoder.h"
#include "server/image/decode/webp_decoder.h"

namespace stoker::image {
namespace {

bool StartsWith(const uint8_t* data, size_t size, size_t at, const char* magic, size_t n) {
  return size >= at + n && std::memcmp(data + at, magic, n) == 0;
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kUnknown:
      return "unknown";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kTiff:
      return "tiff";
    case ImageFormat::kBmp:
      return "bmp";
    case ImageFormat::kPnm:
      return "pnm";
  }
  return "unknown";
}

ImageFormat SniffFormat(const uint8_t* data, size_t size) {
  if (StartsWith(data, size, 0, "\xFF\xD8\xFF", 3)) return ImageFormat::kJpeg;
  if (StartsWith(data, size, 0, "\x89PNG\r\n\x1A\n", 8)) return ImageFormat::kPng;
  if (StartsWith(data, size, 0, "RIFF", 4) && StartsWith(data, size, 8, "WEBP", 4) &&
      (StartsWith(data, size, 12, "VP8 ", 4) || StartsWith(data, size, 12, "VP8L", 4) ||
       StartsWith(data, size, 12, "VP8X", 4))) {
    return ImageFormat::kWebp;
  }
  // PIL's TiffImagePlugin.PREFIXES: the two byte orders, each also with the
  // version's bytes swapped ("invalid, assume ..."), and BigTIFF.
  static constexpr const char* kTiff[] = {"MM\x00\x2A", "II\x2A\x00", "MM\x2A\x00",
                                          "II\x00\x2A", "MM\x00\x2B", "II\x2B\x00"};
  for (const char* magic : kTiff) {
    if (StartsWith(data, size, 0, magic, 4)) return ImageFormat::kTiff;
  }
  if (StartsWith(data, size, 0, "BM", 2)) return ImageFormat::kBmp;
  // PIL's PpmImagePlugin accepts 'P' then any of "0123456y"; of those only
  // P1..P6 are images it opens (P0 and Py fail in its _open).
  if (size >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6') return ImageFormat::kPnm;
  // A file cut inside JPEG's or PNG's magic (2 bytes at least: nothing else
  // starts so) is that format, truncated: its decoder says so.
  if (size >= 2 && size < 3 && StartsWith(data, size, 0, "\xFF\xD8", 2)) return ImageFormat::kJpeg;
  if (size >= 2 && size < 8 && std::memcmp(data, "\x89PNG\r\n\x1A\n", size) == 0) {
    return ImageFormat::kPng;
  }
  return ImageFormat::kUnknown;
}

absl::Status ImageDecoder::DecodeLabels(uint8_t*, uint32_t*) {
  return absl::UnimplementedError(
      "label maps (masks) are read from PNG files only: save the masks as PNG");
}

absl::Status CheckPixelCap(const char* format, uint64_t width, uint64_t height,
                           uint64_t max_pixels) {
  // Sides above 2^32 do not occur (every format's are 32-bit at most); the
  // division keeps the product from wrapping if one ever did.
  if (width == 0 || height <= max_pixels / width) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(format, ": image is ", width, "x", height,
                                                   ", over the cap of ", max_pixels, " pixels"));
}

std::unique_ptr<ImageDecoder> MakeDecoder(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return MakePngDecoder();
    case ImageFormat::kWebp:
      return MakeWebpDecoder();
    case ImageFormat::kTiff:
      return MakeTiffDecoder();
    case ImageFormat::kBmp:
      return MakeBmpDecoder();
    case ImageFormat::kPnm:
      return MakePnmDecoder();
    case ImageFormat::kJpeg:
    case ImageFormat::kUnknown:
      break;
  }
  return nullptr;
}

}  // namespace stoker::image
