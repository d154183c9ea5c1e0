#include "server/image/png_decoder.h"

#include <spng.h>
#include <zlib.h>

#include <array>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace stoker::image {
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
constexpr uint8_t kIendCrc[4] = {0xAE, 0x42, 0x60, 0x82};
constexpr uint32_t kPngMax = 0x7FFFFFFF;  // of chunk lengths, widths, heights
// What libspng may keep of ancillary chunks: one inflated zTXt/iTXt/iCCP,
// and all of text, iCCP, eXIf and sPLT together.
constexpr size_t kChunkSizeLimit = size_t{2} << 20;
constexpr size_t kChunkCacheLimit = size_t{16} << 20;

constexpr uint32_t kAdam7XStart[7] = {0, 4, 0, 2, 0, 1, 0};
constexpr uint32_t kAdam7XDelta[7] = {8, 8, 4, 4, 2, 2, 1};
constexpr uint32_t kAdam7YStart[7] = {0, 0, 4, 0, 2, 0, 1};
constexpr uint32_t kAdam7YDelta[7] = {8, 8, 8, 4, 4, 2, 2};

uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

uint16_t Host16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

bool IsType(const uint8_t* type, const char* name) { return std::memcmp(type, name, 4) == 0; }

// PIL's is_cid: \w\w\w\w on bytes.
bool ValidType(const uint8_t* type) {
  for (int i = 0; i < 4; ++i) {
    const uint8_t c = type[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

std::string TypeName(const uint8_t* type) {
  return std::string(reinterpret_cast<const char*>(type), 4);
}

uint32_t Crc32(const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(crc32(0, p, static_cast<uInt>(n)));  // chunks are < 2^31 bytes
}

struct SpngFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

class PngDecoder final : public ImageDecoder {
 public:
  absl::Status ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                          ImageHeader* header) override;
  absl::Status Decode(const DecodeRegion& region, uint8_t* out, size_t stride) override;
  absl::Status DecodeLabels(uint8_t* out, uint32_t* bpp) override;

 private:
  absl::Status WalkChunks(const uint8_t* data, size_t size, uint64_t max_pixels);
  absl::Status Open();
  absl::Status SpngError(int err) const;
  absl::Status DecodeRows(const DecodeRegion& region, uint8_t* out, size_t stride);
  void Convert(const uint8_t* scanline, uint32_t k, uint32_t n, uint8_t* dst, size_t step) const;
  // Convert's label-map counterpart (DecodeLabels): px_ bytes a value.
  void ConvertLabels(const uint8_t* scanline, uint32_t k, uint32_t n, uint8_t* dst,
                     size_t step) const;

  std::unique_ptr<spng_ctx, SpngFree> ctx_;
  bool ready_ = false;     // ReadHeader succeeded
  bool ctx_used_ = false;  // ctx_ has decoded: Decode needs a new one
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;  // up to the end of IEND
  uint32_t width_ = 0, height_ = 0;
  uint8_t depth_ = 0, color_type_ = 0;
  bool interlaced_ = false;
  std::array<uint8_t, 256 * 3> lut_{};  // gray <= 8 bit and palette: sample -> RGB
  std::vector<uint8_t> row_;
  // What DecodeRows writes: RGB (3 bytes a pixel), or labels (1 or 2).
  bool labels_ = false;
  size_t px_ = 3;
};

// The chunk chain, by lengths: IHDR, caps, every chunk inside the file with
// its CRC (here, whatever rows a region decode later reads: a damaged file
// fails whole), an IEND, PIL's APNG checks before IDAT.
absl::Status PngDecoder::WalkChunks(const uint8_t* data, size_t size, uint64_t max_pixels) {
  if (size < 8 || std::memcmp(data, kSignature, 8) != 0) {
    return absl::InvalidArgumentError("PNG: not a PNG file (bad signature)");
  }
  if (size < 8 + 8 + 13 + 4) return absl::InvalidArgumentError("PNG: truncated in IHDR chunk");
  if (Be32(data + 8) != 13 || !IsType(data + 12, "IHDR")) {
    return absl::InvalidArgumentError("PNG: the first chunk is not a 13-byte IHDR");
  }
  // Before the size is trusted for the cap.
  if (Crc32(data + 12, 17) != Be32(data + 29)) {
    return absl::InvalidArgumentError("PNG: bad CRC in IHDR chunk");
  }
  width_ = Be32(data + 16);
  height_ = Be32(data + 20);
  if (width_ == 0 || height_ == 0 || width_ > kPngMax || height_ > kPngMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("PNG: invalid image size ", width_, "x", height_));
  }
  if (absl::Status s = CheckPixelCap("PNG", width_, height_, max_pixels); !s.ok()) return s;
  bool seen_idat = false;
  int64_t fctl_seq = -1;
  size_t pos = 8;
  for (;;) {
    if (size - pos < 8) {
      return absl::InvalidArgumentError(pos == size ? "PNG: truncated (no IEND chunk)"
                                                    : "PNG: truncated in a chunk header");
    }
    const uint32_t length = Be32(data + pos);
    const uint8_t* type = data + pos + 4;
    if (!ValidType(type)) return absl::InvalidArgumentError("PNG: corrupt chunk type");
    if (length > kPngMax) {
      return absl::InvalidArgumentError(
          absl::StrCat("PNG: ", TypeName(type), " chunk length over the PNG maximum"));
    }
    if (size - pos - 8 < uint64_t{length} + 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("PNG: truncated in ", TypeName(type), " chunk"));
    }
    const uint8_t* body = data + pos + 8;
    if (Crc32(type, size_t{4} + length) != Be32(body + length)) {
      return absl::InvalidArgumentError(absl::StrCat("PNG: bad CRC in ", TypeName(type), " chunk"));
    }
    if (IsType(type, "IEND")) {
      if (length != 0 || std::memcmp(body, kIendCrc, 4) != 0) {
        return absl::InvalidArgumentError("PNG: corrupt IEND chunk");
      }
      size_ = pos + 12;
      return absl::OkStatus();
    }
    if (IsType(type, "IDAT")) seen_idat = true;
    if (!seen_idat && IsType(type, "acTL") && length < 8) {
      return absl::InvalidArgumentError("PNG: truncated acTL chunk (APNG)");
    }
    if (!seen_idat && IsType(type, "fcTL")) {
      if (length < 26) return absl::InvalidArgumentError("PNG: truncated fcTL chunk (APNG)");
      if (Be32(body) != fctl_seq + 1) {
        return absl::InvalidArgumentError("PNG: APNG frame sequence numbers out of order");
      }
      fctl_seq = Be32(body);
      if (Be32(body + 4) != width_ || Be32(body + 8) != height_ || Be32(body + 12) != 0 ||
          Be32(body + 16) != 0) {
        return absl::InvalidArgumentError(
            "PNG: the APNG's first frame (fcTL before IDAT) does not cover the whole image");
      }
    }
    pos += size_t{12} + length;
  }
}

absl::Status PngDecoder::SpngError(int err) const {
  switch (err) {
    case SPNG_EMEM:
      return absl::ResourceExhaustedError("PNG: out of memory");
    case SPNG_ECHUNK_LIMITS:
      return absl::ResourceExhaustedError(absl::StrCat(
          "PNG: text, ICC profile or EXIF chunks over stoker's limits (", kChunkSizeLimit >> 20,
          " MiB inflated for one, ", kChunkCacheLimit >> 20, " MiB in all)"));
    case SPNG_EIDAT_TOO_SHORT:
      return absl::InvalidArgumentError("PNG: the image data (IDAT) ends before the last row");
    case SPNG_EIDAT_STREAM:
    case SPNG_EZLIB:
      return absl::InvalidArgumentError("PNG: corrupt compressed image data (IDAT)");
    default:
      return absl::InvalidArgumentError(absl::StrCat("PNG: ", spng_strerror(err)));
  }
}

// A fresh libspng context on [data_, data_ + size_), read up to the first
// IDAT: CRCs and chunk order of everything before it checked.
absl::Status PngDecoder::Open() {
  ctx_.reset(spng_ctx_new(0));
  ctx_used_ = false;
  if (ctx_ == nullptr) return absl::ResourceExhaustedError("PNG: out of memory");
  spng_ctx* ctx = ctx_.get();
  // WalkChunks checked every CRC already.
  int err = spng_set_crc_action(ctx, SPNG_CRC_USE, SPNG_CRC_USE);
  if (!err) err = spng_set_chunk_limits(ctx, kChunkSizeLimit, kChunkCacheLimit);
  if (!err) err = spng_set_png_buffer(ctx, data_, size_);
  spng_ihdr ihdr;
  if (!err) err = spng_get_ihdr(ctx, &ihdr);
  if (err) return SpngError(err);
  depth_ = ihdr.bit_depth;
  color_type_ = ihdr.color_type;
  interlaced_ = ihdr.interlace_method != 0;

  if (color_type_ == SPNG_COLOR_TYPE_INDEXED) {
    spng_plte plte;
    err = spng_get_plte(ctx, &plte);
    if (err) return SpngError(err == SPNG_ECHUNKAVAIL ? SPNG_ENOPLTE : err);
    for (uint32_t i = 0; i < 256; ++i) {
      const bool in = i < plte.n_entries;
      lut_[3 * i] = in ? plte.entries[i].red : i;
      lut_[3 * i + 1] = in ? plte.entries[i].green : i;
      lut_[3 * i + 2] = in ? plte.entries[i].blue : i;
    }
  } else if (color_type_ == SPNG_COLOR_TYPE_GRAYSCALE && depth_ <= 8) {
    const uint32_t scale = 255 / ((1u << depth_) - 1);
    for (uint32_t i = 0; i < (1u << depth_); ++i) {
      std::memset(&lut_[3 * i], static_cast<int>(i * scale), 3);
    }
  }
  return absl::OkStatus();
}

absl::Status PngDecoder::ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                                    ImageHeader* header) {
  ready_ = false;
  ctx_.reset();
  data_ = data;
  size_ = 0;
  absl::Status s;
  try {
    s = WalkChunks(data, size, limits.max_pixels);
    if (s.ok()) s = Open();
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError("PNG: out of memory");
  }
  if (!s.ok()) {
    ctx_.reset();
    return s;
  }
  static constexpr const char* kModes[7] = {"L", "", "RGB", "P", "LA", "", "RGBA"};
  header->format = ImageFormat::kPng;
  header->width = width_;
  header->height = height_;
  header->mode = kModes[color_type_];
  if (color_type_ == SPNG_COLOR_TYPE_GRAYSCALE && depth_ == 1) header->mode = "1";
  if (color_type_ == SPNG_COLOR_TYPE_GRAYSCALE && depth_ == 16) header->mode = "I";
  if (color_type_ == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA && depth_ == 16) header->mode = "RGBA";
  ready_ = true;
  return absl::OkStatus();
}

// Samples k .. k + n - 1 of a raw scanline (SPNG_FMT_PNG: 16-bit samples in
// host order) to RGB8 at dst, dst + step, ...
void PngDecoder::Convert(const uint8_t* scanline, uint32_t k, uint32_t n, uint8_t* dst,
                         size_t step) const {
  const size_t end = size_t{k} + n;
  if (depth_ < 8) {
    const uint32_t per_byte = 8 / depth_, mask = (1u << depth_) - 1;
    for (size_t i = k; i < end; ++i, dst += step) {
      const uint32_t shift = 8 - depth_ * (1 + i % per_byte);
      std::memcpy(dst, &lut_[3 * ((scanline[i / per_byte] >> shift) & mask)], 3);
    }
    return;
  }
  const size_t channels = color_type_ == SPNG_COLOR_TYPE_TRUECOLOR         ? 3
                          : color_type_ == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
                          : color_type_ == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ? 2
                                                                           : 1;
  const bool color = channels >= 3;
  if (depth_ == 8) {
    if (channels == 1) {  // gray or palette
      for (size_t i = k; i < end; ++i, dst += step) std::memcpy(dst, &lut_[3 * scanline[i]], 3);
      return;
    }
    for (size_t i = k; i < end; ++i, dst += step) {
      const uint8_t* px = scanline + i * channels;
      dst[0] = px[0];
      dst[1] = px[color ? 1 : 0];
      dst[2] = px[color ? 2 : 0];
    }
    return;
  }
  if (channels == 1) {  // 16-bit gray, PIL's "I": clipped, not scaled
    for (size_t i = k; i < end; ++i, dst += step) {
      const uint16_t v = Host16(scanline + 2 * i);
      std::memset(dst, v > 255 ? 255 : v, 3);
    }
    return;
  }
  for (size_t i = k; i < end; ++i, dst += step) {
    const uint8_t* px = scanline + 2 * i * channels;
    dst[0] = static_cast<uint8_t>(Host16(px) >> 8);
    dst[1] = static_cast<uint8_t>(Host16(px + (color ? 2 : 0)) >> 8);
    dst[2] = static_cast<uint8_t>(Host16(px + (color ? 4 : 0)) >> 8);
  }
}

void PngDecoder::ConvertLabels(const uint8_t* scanline, uint32_t k, uint32_t n, uint8_t* dst,
                               size_t step) const {
  const size_t end = size_t{k} + n;
  if (depth_ < 8) {
    const uint32_t per_byte = 8 / depth_, mask = (1u << depth_) - 1;
    // "P" keeps the index; "1" is 0/1; 2- and 4-bit "L" are scaled to 0..255.
    const uint32_t scale = color_type_ == SPNG_COLOR_TYPE_INDEXED || depth_ == 1
                               ? 1
                               : 255 / ((1u << depth_) - 1);
    for (size_t i = k; i < end; ++i, dst += step) {
      const uint32_t shift = 8 - depth_ * (1 + i % per_byte);
      *dst = static_cast<uint8_t>(((scanline[i / per_byte] >> shift) & mask) * scale);
    }
    return;
  }
  if (depth_ == 8) {
    for (size_t i = k; i < end; ++i, dst += step) *dst = scanline[i];
    return;
  }
  for (size_t i = k; i < end; ++i, dst += step) std::memcpy(dst, scanline + 2 * i, 2);
}

absl::Status PngDecoder::DecodeLabels(uint8_t* out, uint32_t* bpp) {
  if (!ready_) {
    return absl::FailedPreconditionError("PNG: DecodeLabels without a successful ReadHeader");
  }
  if (color_type_ != SPNG_COLOR_TYPE_GRAYSCALE && color_type_ != SPNG_COLOR_TYPE_INDEXED) {
    static constexpr const char* kModes[7] = {"L", "", "RGB", "P", "LA", "", "RGBA"};
    return absl::UnimplementedError(absl::StrCat(
        "PNG: a mask must be a single-channel image (gray or palette), this one is ",
        kModes[color_type_ % 7]));
  }
  labels_ = true;
  px_ = depth_ == 16 ? 2 : 1;
  *bpp = static_cast<uint32_t>(px_);
  absl::Status s;
  try {
    s = ctx_used_ ? Open() : absl::OkStatus();
    if (s.ok()) s = DecodeRows({0, 0, height_, width_}, out, size_t{width_} * px_);
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError("PNG: out of memory");
  }
  labels_ = false;
  px_ = 3;
  return s;
}

absl::Status PngDecoder::DecodeRows(const DecodeRegion& region, uint8_t* out, size_t stride) {
  spng_ctx* ctx = ctx_.get();
  ctx_used_ = true;
  int err = spng_decode_image(ctx, nullptr, 0, SPNG_FMT_PNG, SPNG_DECODE_PROGRESSIVE);
  if (err) return SpngError(err);
  const size_t channels = color_type_ == SPNG_COLOR_TYPE_TRUECOLOR         ? 3
                          : color_type_ == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
                          : color_type_ == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ? 2
                                                                           : 1;
  row_.resize((size_t{width_} * channels * depth_ + 7) / 8);
  int last_pass = 0;
  if (interlaced_) {
    for (int p = 0; p < 7; ++p) {
      if (width_ > kAdam7XStart[p] && height_ > kAdam7YStart[p]) last_pass = p;
    }
  }
  const uint32_t top = region.top, bottom = region.top + region.height;
  const uint32_t left = region.left, right = region.left + region.width;
  for (;;) {
    spng_row_info ri;
    err = spng_get_row_info(ctx, &ri);
    if (err == SPNG_EOI) break;
    if (err) return SpngError(err);
    // No later scanline has a pixel of the region: stop reading.
    if (ri.pass == last_pass && ri.row_num >= bottom) return absl::OkStatus();
    err = spng_decode_scanline(ctx, row_.data(), row_.size());
    if (err && err != SPNG_EOI) return SpngError(err);
    if (ri.row_num >= top && ri.row_num < bottom) {
      const uint32_t x0 = interlaced_ ? kAdam7XStart[ri.pass] : 0;
      const uint32_t dx = interlaced_ ? kAdam7XDelta[ri.pass] : 1;
      // This pass's samples k0 .. k1 - 1 are the columns in [left, right).
      const uint32_t k0 = left <= x0 ? 0 : (left - x0 + dx - 1) / dx;
      const uint32_t k1 = right <= x0 ? 0 : (right - x0 + dx - 1) / dx;
      if (k1 > k0) {
        uint8_t* dst =
            out + size_t{ri.row_num - top} * stride + (size_t{x0} + size_t{k0} * dx - left) * px_;
        if (labels_) {
          ConvertLabels(row_.data(), k0, k1 - k0, dst, size_t{dx} * px_);
        } else {
          Convert(row_.data(), k0, k1 - k0, dst, size_t{dx} * 3);
        }
      }
    }
    if (err == SPNG_EOI) break;
  }
  // The whole image was read: the chunks after it up to IEND, CRCs included.
  err = spng_decode_chunks(ctx);
  return err ? SpngError(err) : absl::OkStatus();
}

absl::Status PngDecoder::Decode(const DecodeRegion& region, uint8_t* out, size_t stride) {
  if (!ready_) return absl::FailedPreconditionError("PNG: Decode without a successful ReadHeader");
  if (region.height == 0 || region.width == 0 || uint64_t{region.top} + region.height > height_ ||
      uint64_t{region.left} + region.width > width_) {
    return absl::InvalidArgumentError(
        absl::StrCat("PNG: region ", region.width, "x", region.height, " at (", region.left, ", ",
                     region.top, ") is not inside the ", width_, "x", height_, " image"));
  }
  if (out == nullptr || stride < size_t{region.width} * 3) {
    return absl::InvalidArgumentError("PNG: output stride smaller than the region's row");
  }
  try {
    absl::Status s = ctx_used_ ? Open() : absl::OkStatus();
    if (s.ok()) s = DecodeRows(region, out, stride);
    return s;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("PNG: out of memory");
  }
}

}  // namespace

std::unique_ptr<ImageDecoder> MakePngDecoder() { return std::make_unique<PngDecoder>(); }

}  // namespace stoker::image
