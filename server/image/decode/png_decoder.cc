#include "server/image/decode/png_decoder.h"

#include <libdeflate.h>
#include <spng.h>

#include <array>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/image/decode/png_unfilter.h"

namespace stoker::image {
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
constexpr uint8_t kIendCrc[4] = {0xAE, 0x42, 0x60, 0x82};
constexpr uint32_t kPngMax = 0x7FFFFFFF;  // of chunk lengths, widths, heights
// What libspng may keep of ancillary chunks: one inflated zTXt/iTXt/iCCP,
// and all of text, iCCP, eXIf and sPLT together.
constexpr size_t kChunkSizeLimit = size_t{2} << 20;
constexpr size_t kChunkCacheLimit = size_t{16} << 20;
// The whole-buffer path's bound on the inflated image (filter bytes
// included): larger images take libspng's row by row path. Buffers over
// kKeepBytes are freed at the next ReadHeader, not kept for the next file.
constexpr size_t kWholeBufferMaxBytes = size_t{64} << 20;
constexpr size_t kKeepBytes = size_t{8} << 20;

constexpr uint32_t kAdam7XStart[7] = {0, 4, 0, 2, 0, 1, 0};
constexpr uint32_t kAdam7XDelta[7] = {8, 8, 4, 4, 2, 2, 1};
constexpr uint32_t kAdam7YStart[7] = {0, 0, 4, 0, 2, 0, 1};

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

// zlib's CRC-32, computed by libdeflate (several times faster).
uint32_t Crc32(const uint8_t* p, size_t n) { return libdeflate_crc32(0, p, n); }

struct SpngFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

struct InflaterFree {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

class PngDecoder final : public ImageDecoder {
 public:
  explicit PngDecoder(PngDecoderOptions::Path path) : path_(path) {}
  absl::Status ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                          ImageHeader* header) override;
  absl::Status Decode(const DecodeRegion& region, uint8_t* out, size_t stride) override;
  absl::Status DecodeLabels(uint8_t* out, uint32_t* bpp) override;

 private:
  absl::Status WalkChunks(const uint8_t* data, size_t size, uint64_t max_pixels);
  absl::Status Open();
  absl::Status SpngError(int err) const;
  absl::Status DecodeRows(const DecodeRegion& region, uint8_t* out, size_t stride);
  // The whole-buffer path (png_decoder.h): inflates the image data in one
  // call (once per ReadHeader) and restores rows up to `bottom`. False when
  // the file is not one it takes or anything is amiss: libspng's path then
  // decodes (and judges) the file, so this path never decides an error.
  bool InflateWhole(uint32_t bottom);
  void EmitRow(const uint8_t* scanline, const DecodeRegion& region, uint8_t* dst) const;
  // Samples a pixel: 3 (RGB), 4 (RGBA), 2 (gray + alpha) or 1.
  size_t Channels() const {
    return color_type_ == SPNG_COLOR_TYPE_TRUECOLOR         ? 3
           : color_type_ == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
           : color_type_ == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ? 2
                                                            : 1;
  }
  // Bytes of one scanline, its filter byte not counted.
  size_t ScanlineBytes() const { return (size_t{width_} * Channels() * depth_ + 7) / 8; }
  void Convert(const uint8_t* scanline, uint32_t k, uint32_t n, uint8_t* dst, size_t step) const;
  // Convert's label-map counterpart (DecodeLabels): px_ bytes a value.
  void ConvertLabels(const uint8_t* scanline, uint32_t k, uint32_t n, uint8_t* dst,
                     size_t step) const;

  const PngDecoderOptions::Path path_;
  std::unique_ptr<spng_ctx, SpngFree> ctx_;
  std::unique_ptr<libdeflate_decompressor, InflaterFree> inflater_;
  bool ready_ = false;     // ReadHeader succeeded
  bool ctx_used_ = false;  // ctx_ has decoded: Decode needs a new one
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;  // up to the end of IEND
  uint32_t width_ = 0, height_ = 0;
  uint8_t depth_ = 0, color_type_ = 0;
  bool interlaced_ = false;
  std::array<uint8_t, 256 * 3> lut_{};  // gray <= 8 bit and palette: sample -> RGB
  std::vector<uint8_t> row_;
  // The IDAT chunks' data (WalkChunks), whether they form one run with
  // nothing but IEND after them, and the whole-buffer path's state:
  // the inflated rows (filter byte + scanline each), how many of them are
  // restored, and whether inflating failed for this file.
  std::vector<std::pair<size_t, uint32_t>> idat_;
  bool idat_plain_ = false;
  std::vector<uint8_t> idat_data_;
  std::vector<uint8_t> raw_;
  uint32_t rows_restored_ = 0;
  bool inflated_ = false, inflate_failed_ = false;
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
  bool seen_idat = false, after_idat = false;
  idat_.clear();
  idat_plain_ = true;
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
    if (IsType(type, "IDAT")) {
      if (after_idat) idat_plain_ = false;  // a second run
      seen_idat = true;
      idat_.emplace_back(pos + 8, length);
    } else if (seen_idat && !IsType(type, "IEND")) {
      // libspng reads what follows the image data only on a whole decode:
      // the whole-buffer path leaves such files to it.
      after_idat = true;
      idat_plain_ = false;
    }
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
  // Every chunk before the image data, parsed and judged now (libspng would
  // otherwise read them lazily, at its first decode call).
  if (!err) err = spng_decode_chunks(ctx);
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
  inflated_ = inflate_failed_ = false;
  rows_restored_ = 0;
  if (raw_.capacity() > kKeepBytes) std::vector<uint8_t>().swap(raw_);
  if (idat_data_.capacity() > kKeepBytes) std::vector<uint8_t>().swap(idat_data_);
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
  const size_t channels = Channels();
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
    const uint32_t scale =
        color_type_ == SPNG_COLOR_TYPE_INDEXED || depth_ == 1 ? 1 : 255 / ((1u << depth_) - 1);
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
    return absl::UnimplementedError(
        absl::StrCat("PNG: a mask must be a single-channel image (gray or palette), this one is ",
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

bool PngDecoder::InflateWhole(uint32_t bottom) {
  if (path_ == PngDecoderOptions::Path::kRowByRow || inflate_failed_ || interlaced_ || depth_ > 8 ||
      !idat_plain_ || idat_.empty()) {
    return false;
  }
  const size_t line = ScanlineBytes();
  if (!inflated_) {
    inflate_failed_ = true;  // until it succeeds
    if (uint64_t{height_} * (line + 1) > kWholeBufferMaxBytes) return false;
    const size_t raw_bytes = size_t{height_} * (line + 1);
    if (inflater_ == nullptr) inflater_.reset(libdeflate_alloc_decompressor());
    if (inflater_ == nullptr) return false;
    const uint8_t* in = data_ + idat_[0].first;
    size_t in_bytes = idat_[0].second;
    if (idat_.size() > 1) {
      in_bytes = 0;
      for (const auto& [offset, length] : idat_) in_bytes += length;
      idat_data_.resize(in_bytes);
      uint8_t* p = idat_data_.data();
      for (const auto& [offset, length] : idat_) {
        std::memcpy(p, data_ + offset, length);
        p += length;
      }
      in = idat_data_.data();
    }
    raw_.resize(raw_bytes);
    size_t in_used = 0, out_used = 0;
    // Only a stream that ends exactly at the last row and at the end of the
    // image data, with a good Adler-32, is taken.
    if (libdeflate_zlib_decompress_ex(inflater_.get(), in, in_bytes, raw_.data(), raw_bytes,
                                      &in_used, &out_used) != LIBDEFLATE_SUCCESS ||
        in_used != in_bytes || out_used != raw_bytes) {
      return false;
    }
    // libspng reads a row ahead: a bad filter type fails even a region
    // above it there. So the file is taken only if every row's is valid.
    for (uint32_t y = 0; y < height_; ++y) {
      if (raw_[size_t{y} * (line + 1)] > 4) return false;
    }
    inflated_ = true;
    inflate_failed_ = false;
  }
  const size_t bpp = std::max<size_t>(1, Channels() * depth_ / 8);
  for (; rows_restored_ < bottom; ++rows_restored_) {
    uint8_t* row = raw_.data() + size_t{rows_restored_} * (line + 1);
    const uint8_t* prev = rows_restored_ == 0 ? nullptr : row - line;
    if (!UnfilterRow(row[0], row + 1, prev, line, bpp)) {
      inflate_failed_ = true;
      return false;
    }
  }
  return true;
}

void PngDecoder::EmitRow(const uint8_t* scanline, const DecodeRegion& region, uint8_t* dst) const {
  if (labels_) {
    ConvertLabels(scanline, region.left, region.width, dst, px_);
  } else {
    Convert(scanline, region.left, region.width, dst, 3);
  }
}

absl::Status PngDecoder::DecodeRows(const DecodeRegion& region, uint8_t* out, size_t stride) {
  if (InflateWhole(region.top + region.height)) {
    const size_t row_bytes = ScanlineBytes() + 1;  // filter byte + scanline
    for (uint32_t y = 0; y < region.height; ++y) {
      EmitRow(raw_.data() + size_t{region.top + y} * row_bytes + 1, region,
              out + size_t{y} * stride);
    }
    return absl::OkStatus();
  }
  if (path_ == PngDecoderOptions::Path::kWholeBufferOnly) {
    return absl::UnimplementedError("PNG: not taken by the whole-buffer path");
  }
  spng_ctx* ctx = ctx_.get();
  ctx_used_ = true;
  int err = spng_decode_image(ctx, nullptr, 0, SPNG_FMT_PNG, SPNG_DECODE_PROGRESSIVE);
  if (err) return SpngError(err);
  row_.resize(ScanlineBytes());
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

std::unique_ptr<ImageDecoder> MakePngDecoder(const PngDecoderOptions& options) {
  return std::make_unique<PngDecoder>(options.path);
}

}  // namespace stoker::image
