// The decoders of the image formats other than JPEG, behind one interface
// that the pipeline calls (pipeline.cc). JPEG keeps its own decoder
// (jpeg_decoder.h): DCT scaling, column cropping and scan selection have no
// counterpart in the other formats.
//
// Which decoder reads a file is chosen by its first bytes (SniffFormat), as
// PIL's Image.open chooses, never by its name: a PNG named x.jpg decodes as
// a PNG. Every decoder gives what `PIL.Image.open(f).convert("RGB")` gives
// (Pillow 9.4, Debian 12's python3-pil), byte for byte: the conversions of
// each mode PIL opens a file as (P, LA, RGBA: alpha dropped, I;16, 1-bit,
// CMYK ...) are those of PIL, documented in each decoder's header.
//
// Usage per image (a decoder object is reused across images, one thread):
//   1. ReadHeader(data, size, limits, &header)  caps checked, nothing big
//                                                allocated before
//   2. Decode(region, out, stride)              the region's RGB8 rows
// ReadHeader starts from a fresh state every time (nothing of an earlier
// file is used); any error leaves the object ready for the next ReadHeader.
//
// Hostile input: every decoder checks the declared size against
// limits.max_pixels before it allocates for pixels, allocates at most a
// small multiple of max_pixels (16-bit samples, palettes, a strip or a row
// of a compressed stream), never reads outside [data, data + size), and
// returns a Status for anything wrong: INVALID_ARGUMENT (corrupt, truncated,
// bad CRC, offsets past the end), UNIMPLEMENTED (a valid file of a kind
// this decoder does not read, the message says which), RESOURCE_EXHAUSTED
// (over a cap). It does nothing else: no file, no thread, no environment,
// no output on stdout/stderr (the worker's seccomp filter allows memory and
// the sockets it was given, little more).

#ifndef STOKER_SERVER_IMAGE_DECODE_IMAGE_DECODER_H_
#define STOKER_SERVER_IMAGE_DECODE_IMAGE_DECODER_H_

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "server/image/decode/jpeg_decoder.h"  // DecodeLimits

namespace stoker::image {

// A file's format, by its content. Values cross the worker protocol and
// index Status's per-format counts: append only.
enum class ImageFormat : uint32_t {
  kUnknown = 0,  // none of the below: an unsupported sample
  kJpeg = 1,     // FF D8 FF
  kPng = 2,      // 89 'PNG' 0D 0A 1A 0A
  kWebp = 3,     // 'RIFF' size 'WEBP' then 'VP8 ', 'VP8L' or 'VP8X'
  kTiff = 4,     // 'II' 2A 00, 'MM' 00 2A, the two swapped forms, BigTIFF 2B
  kBmp = 5,      // 'BM'
  kPnm = 6,      // 'P' then one of '1'..'6' (PBM, PGM, PPM; PIL's PpmImagePlugin)
};
inline constexpr uint32_t kImageFormatCount = 7;

// "unknown", "jpeg", "png", "webp", "tiff", "bmp", "pnm": Status's
// FormatStatus.format, stokerctl, stoker-image-tool. "unknown" out of range.
const char* ImageFormatName(ImageFormat format);

// The format PIL's Image.open would pick for a file starting with these
// bytes (each plugin's _accept, above), or kUnknown. A file of 2 bytes or
// more cut inside JPEG's or PNG's magic is that format (truncated: its
// decoder fails it as such, where PIL cannot even identify it). Reads at
// most the first 16 bytes; any size, 0 included.
ImageFormat SniffFormat(const uint8_t* data, size_t size);

// torchvision's IMG_EXTENSIONS, in its order: the file names its
// ImageFolder lists (in any case), and so stoker's ImageFolder indexer and
// tools. Every one names a format stoker reads, though a file is decoded by
// its content whatever its name.
inline constexpr const char* kImageFolderExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                         ".pgm", ".tif",  ".tiff", ".webp"};

// Whether `name` ends with one of kImageFolderExtensions, in any case
// (torchvision's has_file_allowed_extension).
inline bool HasImageFolderExtension(std::string_view name) {
  for (const char* ext : kImageFolderExtensions) {
    const size_t n = std::strlen(ext);
    if (name.size() >= n &&
        std::equal(ext, ext + n, name.end() - n, [](char e, char c) {
          return e == std::tolower(static_cast<unsigned char>(c));
        })) {
      return true;
    }
  }
  return false;
}

struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  uint32_t width = 0;  // of the image Decode gives (the first frame / page)
  uint32_t height = 0;
  // PIL's mode for the file as Image.open gives it ("RGB", "RGBA", "P",
  // "L", "LA", "I", "I;16", "1", "CMYK", ...): for messages, tests and
  // tools. Points to a string literal.
  const char* mode = "";
};

// Rows [top, top + height) and columns [left, left + width) of the image;
// inside it, non-empty.
struct DecodeRegion {
  uint32_t top = 0;
  uint32_t left = 0;
  uint32_t height = 0;
  uint32_t width = 0;
};

class ImageDecoder {
 public:
  virtual ~ImageDecoder() = default;

  // Parses the file's header. `data` must stay valid until Decode returns.
  // Errors as above; RESOURCE_EXHAUSTED when width * height is over
  // limits.max_pixels (limits.max_scans and read_exif are JPEG's only).
  [[nodiscard]] virtual absl::Status ReadHeader(const uint8_t* data, size_t size,
                                                const DecodeLimits& limits,
                                                ImageHeader* header) = 0;

  // Writes the region of the image, as PIL's convert("RGB") gives it, to
  // out: region.height rows of region.width * 3 bytes, `stride` bytes apart
  // (stride >= region.width * 3). The pixels are those of the whole image's
  // decode at the same place, whatever the region. A decoder may stop
  // reading the file after the last row the region needs; it then still
  // checks that the file is whole where that is cheap (the PNG's IEND
  // chunk is there), so that a truncated file fails as it fails PIL. A
  // region outside the image is INVALID_ARGUMENT. On error `out` holds
  // anything. Only after a successful ReadHeader.
  [[nodiscard]] virtual absl::Status Decode(const DecodeRegion& region, uint8_t* out,
                                            size_t stride) = 0;

  // The whole image as a label map (a segmentation mask): the values
  // np.array(Image.open(f)) gives for a single-channel mode, *bpp bytes a
  // pixel (host order), rows packed: "P" the palette index and "L" the
  // value (1 byte; 2- and 4-bit gray scaled as PIL opens them: v * 85,
  // v * 17), "1" 0 or 1 (1 byte), "I" (16-bit gray) the value (2 bytes).
  // `out` holds width * height * 2 bytes at least. UNIMPLEMENTED for a
  // colour image ("RGB", "RGBA", "LA": a mask must be single-channel) and
  // for formats that read no label maps (all but PNG). Only after a
  // successful ReadHeader.
  [[nodiscard]] virtual absl::Status DecodeLabels(uint8_t* out, uint32_t* bpp);
};

// The pixel cap every decoder applies, with one message: OK when width *
// height <= max_pixels (no overflow for 32-bit sides), else
// RESOURCE_EXHAUSTED "<format>: image is WxH, over the cap of N pixels".
// `format` names the file's format in the message ("PNG").
[[nodiscard]] absl::Status CheckPixelCap(const char* format, uint64_t width, uint64_t height,
                                         uint64_t max_pixels);

// One per format; each documents its library, the modes it reads and their
// conversions: png_decoder.h (libspng), webp_decoder.h (libwebp),
// tiff_decoder.h (libtiff), stb_decoder.h (BMP and PNM, libstb).
// MakeDecoder(kJpeg) and MakeDecoder(kUnknown) are nullptr.
std::unique_ptr<ImageDecoder> MakeDecoder(ImageFormat format);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_IMAGE_DECODER_H_
