#include "server/image/decode/tiff_decoder.h"

#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace stoker::image {
namespace {

// How a pixel's samples become RGB (tiff_decoder.h lists the modes).
enum class Kind {
  kGray,           // 1/2/4/8 bits, scaled to 8, maybe inverted
  kGray16,         // min(v, 255)
  kPalette,        // sample 0 indexes palette_
  kRgb,            // samples 0..2 (16-bit: high bytes)
  kPremultiplied,  // samples 0..2 un-premultiplied by sample 3
  kCmyk,           // samples 0..3, PIL's cmyk2rgb
};

struct Layout {
  const char* mode = "";
  Kind kind = Kind::kGray;
  int bands = 1;  // PIL's bands: the planes PIL reads from planar files
  bool invert = false;
};

// The file as presented to libtiff.
struct Source {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t pos = 0;
};

tmsize_t ReadProc(thandle_t h, void* buf, tmsize_t n) {
  Source* s = static_cast<Source*>(h);
  if (n <= 0 || s->pos >= s->size) return 0;
  const uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(n), s->size - s->pos);
  std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return static_cast<tmsize_t>(k);
}

tmsize_t WriteProc(thandle_t, void*, tmsize_t) { return -1; }

toff_t SeekProc(thandle_t h, toff_t off, int whence) {
  Source* s = static_cast<Source*>(h);
  uint64_t base = whence == SEEK_CUR ? s->pos : whence == SEEK_END ? s->size : 0;
  if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
    return static_cast<toff_t>(-1);
  s->pos = base + off;  // past the end is allowed; reads there return 0 bytes
  return s->pos;
}

int CloseProc(thandle_t) { return 0; }
toff_t SizeProc(thandle_t h) { return static_cast<Source*>(h)->size; }
int MapProc(thandle_t, void**, toff_t*) { return 0; }
void UnmapProc(thandle_t, void*, toff_t) {}

class TiffDecoder final : public ImageDecoder {
 public:
  ~TiffDecoder() override { Close(); }

  absl::Status ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                          ImageHeader* header) override;
  absl::Status Decode(const DecodeRegion& region, uint8_t* out, size_t stride) override;

 private:
  absl::Status Parse(const DecodeLimits& limits);
  static int OnError(TIFF*, void* self, const char* module, const char* fmt, va_list ap);
  static int OnWarning(TIFF*, void* self, const char* module, const char* fmt, va_list ap);

  void Close();
  absl::Status Open(const DecodeLimits& limits);
  absl::Status Classify();
  absl::Status CheckChunks();
  // An error status for a libtiff failure while doing `what`.
  absl::Status LibtiffError(const std::string& what) const;
  absl::Status DecodeChunks(const DecodeRegion& region, uint8_t* out, size_t stride);
  // Reads chunk (strip or tile) `index` of every plane read into chunk_.
  absl::Status ReadChunk(uint32_t index, uint32_t rows, bool* short_read);
  // Converts n pixels from column x0 of one contiguous row of samples.
  void ConvertRow(const uint8_t* row, uint32_t x0, uint32_t n, uint8_t* out) const;

  Source source_;
  TIFF* tif_ = nullptr;
  std::string error_;  // libtiff's first error for the current call
  bool over_memory_cap_ = false;
  bool extras_synthesized_ = false;  // libtiff made up ExtraSamples

  bool ready_ = false;
  uint32_t width_ = 0, height_ = 0;
  uint16_t bits_ = 0, spp_ = 0, compression_ = 0;
  bool planar_ = false;  // separate planes (and more than one sample)
  bool tiled_ = false;
  uint32_t chunk_w_ = 0, chunk_h_ = 0;  // a strip is image-wide
  uint64_t plane_row_bytes_ = 0;        // one row of one chunk, one plane
  Layout layout_;
  uint8_t palette_[256 * 3] = {};
  std::vector<uint8_t> chunk_;  // planes read x chunk_h_ x plane_row_bytes_
  std::vector<uint8_t> row_;    // a planar row made contiguous
};

int TiffDecoder::OnError(TIFF*, void* self, const char* module, const char* fmt, va_list ap) {
  TiffDecoder* d = static_cast<TiffDecoder*>(self);
  if (std::strstr(fmt, "limit defined in open options") != nullptr) d->over_memory_cap_ = true;
  if (d->error_.empty()) {
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    d->error_ = module != nullptr && *module != '\0' ? absl::StrCat(module, ": ", buf) : buf;
  }
  return 1;  // handled: libtiff's global handlers (stderr) are not called
}

int TiffDecoder::OnWarning(TIFF*, void* self, const char*, const char* fmt, va_list) {
  if (std::strstr(fmt, "Defining non-color channels as ExtraSamples") != nullptr) {
    static_cast<TiffDecoder*>(self)->extras_synthesized_ = true;
  }
  return 1;
}

void TiffDecoder::Close() {
  if (tif_ != nullptr) TIFFClose(tif_);
  tif_ = nullptr;
  ready_ = false;
}

absl::Status TiffDecoder::LibtiffError(const std::string& what) const {
  const std::string msg =
      absl::StrCat("TIFF: ", what, error_.empty() ? "" : ": ", error_.empty() ? "" : error_);
  if (over_memory_cap_) return absl::ResourceExhaustedError(msg);
  return absl::InvalidArgumentError(msg);
}

absl::Status TiffDecoder::Open(const DecodeLimits& limits) {
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  if (opts == nullptr) return absl::ResourceExhaustedError("TIFF: out of memory");
  const uint64_t cap = std::min<uint64_t>(limits.max_pixels, uint64_t{1} << 40) * 16 + (1 << 20);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, static_cast<tmsize_t>(cap));
  TIFFOpenOptionsSetErrorHandlerExtR(opts, &TiffDecoder::OnError, this);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, &TiffDecoder::OnWarning, this);
  // "m": never map the "file"; reads go through ReadProc.
  tif_ = TIFFClientOpenExt("tiff", "rm", &source_, ReadProc, WriteProc, SeekProc, CloseProc,
                           SizeProc, MapProc, UnmapProc, opts);
  TIFFOpenOptionsFree(opts);
  if (tif_ == nullptr) return LibtiffError("not a readable TIFF file");
  return absl::OkStatus();
}

absl::Status TiffDecoder::ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                                     ImageHeader* header) {
  Close();
  error_.clear();
  over_memory_cap_ = extras_synthesized_ = false;
  source_ = Source{data, size, 0};
  if (size < 8) return absl::InvalidArgumentError("TIFF: file too short for a TIFF header");
  absl::Status s;
  try {
    s = Parse(limits);
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError("TIFF: out of memory reading the header");
  }
  if (!s.ok()) {
    Close();
    return s;
  }
  ready_ = true;
  header->format = ImageFormat::kTiff;
  header->width = width_;
  header->height = height_;
  header->mode = layout_.mode;
  return absl::OkStatus();
}

absl::Status TiffDecoder::Parse(const DecodeLimits& limits) {
  absl::Status s = Open(limits);
  if (!s.ok()) return s;

  TIFFGetField(tif_, TIFFTAG_IMAGEWIDTH, &width_);
  TIFFGetField(tif_, TIFFTAG_IMAGELENGTH, &height_);
  if (width_ == 0 || height_ == 0)
    return absl::InvalidArgumentError("TIFF: the image has no pixels");
  if (absl::Status c = CheckPixelCap("TIFF", width_, height_, limits.max_pixels); !c.ok()) {
    return c;
  }
  s = Classify();
  if (s.ok()) {
    tiled_ = TIFFIsTiled(tif_) != 0;
    if (tiled_) {
      TIFFGetField(tif_, TIFFTAG_TILEWIDTH, &chunk_w_);
      TIFFGetField(tif_, TIFFTAG_TILELENGTH, &chunk_h_);
      if (chunk_w_ == 0 || chunk_h_ == 0) {
        s = absl::InvalidArgumentError("TIFF: tiles of zero size");
      } else if (uint64_t{chunk_w_} * chunk_h_ > limits.max_pixels) {
        s = absl::ResourceExhaustedError(absl::StrCat("TIFF: tiles of ", chunk_w_, "x", chunk_h_,
                                                      " pixels are over the limit of ",
                                                      limits.max_pixels));
      }
    } else {
      chunk_w_ = width_;
      TIFFGetFieldDefaulted(tif_, TIFFTAG_ROWSPERSTRIP, &chunk_h_);
      chunk_h_ = std::min(std::max<uint32_t>(chunk_h_, 1), height_);
    }
  }
  if (s.ok()) {
    const uint64_t samples = planar_ ? 1 : spp_;
    plane_row_bytes_ = (uint64_t{chunk_w_} * samples * bits_ + 7) / 8;
    // What libtiff will write for one chunk must fit what stoker reads.
    const uint64_t want = plane_row_bytes_ * chunk_h_;
    const uint64_t lib = tiled_ ? TIFFTileSize64(tif_) : TIFFStripSize64(tif_);
    if (lib == 0 || lib > want) {
      s = LibtiffError(absl::StrCat("unexpected ", tiled_ ? "tile" : "strip", " size ", lib,
                                    " (expected at most ", want, ")"));
    }
  }
  if (s.ok()) s = CheckChunks();
  return s;
}

absl::Status TiffDecoder::Classify() {
  uint16_t photometric = 0, sample_format = 1, fill_order = 1, planar_config = 1;
  uint16_t extra_count = 0;
  uint16_t* extra = nullptr;
  TIFFGetFieldDefaulted(tif_, TIFFTAG_BITSPERSAMPLE, &bits_);
  TIFFGetFieldDefaulted(tif_, TIFFTAG_SAMPLESPERPIXEL, &spp_);
  TIFFGetFieldDefaulted(tif_, TIFFTAG_COMPRESSION, &compression_);
  TIFFGetFieldDefaulted(tif_, TIFFTAG_SAMPLEFORMAT, &sample_format);
  TIFFGetFieldDefaulted(tif_, TIFFTAG_FILLORDER, &fill_order);
  TIFFGetFieldDefaulted(tif_, TIFFTAG_PLANARCONFIG, &planar_config);
  TIFFGetFieldDefaulted(tif_, TIFFTAG_EXTRASAMPLES, &extra_count, &extra);
  if (TIFFGetField(tif_, TIFFTAG_PHOTOMETRIC, &photometric) != 1) photometric = 0;
  const bool big_endian = TIFFIsBigEndian(tif_) != 0;
  planar_ = planar_config == PLANARCONFIG_SEPARATE && spp_ > 1;

  // Extra samples as the file gave them: libtiff invents unspecified ones
  // when ExtraSamples is missing (and warns), PIL sees none.
  std::vector<uint16_t> extras(extra, extra + (extra == nullptr ? 0 : extra_count));
  if (extras_synthesized_ && std::all_of(extras.begin(), extras.end(),
                                         [](uint16_t e) { return e == EXTRASAMPLE_UNSPECIFIED; })) {
    extras.clear();
  }

  // Compressions of PIL's COMPRESSION_INFO, less old-style JPEG and LZMA.
  static constexpr uint16_t kKnown[] = {1,     2,     3,     4,     5,     7,     8,    32771,
                                        32773, 32809, 32946, 34676, 34677, 50000, 50001};
  if (compression_ == COMPRESSION_OJPEG) {
    return absl::UnimplementedError("TIFF: old-style JPEG compression is not supported");
  }
  if (compression_ == COMPRESSION_LZMA) {
    // liblzma allocates the dictionary a stream declares (up to 4 GiB), past
    // libtiff's allocation cap: no bound could be kept.
    return absl::UnimplementedError(
        "TIFF: LZMA compression is not supported (its decoder's memory cannot be bounded)");
  }
  if (std::find(std::begin(kKnown), std::end(kKnown), compression_) == std::end(kKnown) ||
      TIFFIsCODECConfigured(compression_) == 0) {
    return absl::UnimplementedError(
        absl::StrCat("TIFF: compression ", compression_, " is not supported"));
  }
  if (sample_format == SAMPLEFORMAT_IEEEFP) {
    return absl::UnimplementedError(
        absl::StrCat("TIFF: ", bits_, "-bit float samples are not supported"));
  }
  if (sample_format != SAMPLEFORMAT_UINT) {
    return absl::UnimplementedError(absl::StrCat(
        "TIFF: ", bits_, "-bit ", sample_format == SAMPLEFORMAT_INT ? "signed" : "complex",
        " samples are not supported"));
  }

  const size_t ne = extras.size();
  const uint16_t e0 = ne > 0 ? extras[0] : 0;
  // Extras after the first, all unspecified (PIL's ...X and ...XX).
  const bool rest_unspecified =
      std::all_of(extras.begin() + std::min<size_t>(ne, 1), extras.end(),
                  [](uint16_t e) { return e == EXTRASAMPLE_UNSPECIFIED; });
  const bool lsb_first = fill_order == FILLORDER_LSB2MSB;
  bool ok = false;
  switch (photometric) {
    case PHOTOMETRIC_MINISWHITE:
    case PHOTOMETRIC_MINISBLACK: {
      const bool white = photometric == PHOTOMETRIC_MINISWHITE;
      if (spp_ == 1 && ne == 0 && (bits_ == 1 || bits_ == 2 || bits_ == 4 || bits_ == 8)) {
        layout_ = {bits_ == 1 ? "1" : "L", Kind::kGray, 1, white};
        ok = true;
      } else if (spp_ == 1 && ne == 0 && bits_ == 16) {
        // (II, 0|1, 16) "I;16", (II, 1, LSB first) too, (MM, 1) "I;16B".
        ok = big_endian ? !white && !lsb_first : !(white && lsb_first);
        layout_ = {big_endian ? "I;16B" : "I;16", Kind::kGray16, 1, false};
      } else if (spp_ == 2 && ne == 1 && e0 == EXTRASAMPLE_UNASSALPHA && bits_ == 8 && !white &&
                 !lsb_first) {
        layout_ = {"LA", Kind::kGray, 2, false};
        ok = true;
      }
      break;
    }
    case PHOTOMETRIC_PALETTE:
      if (spp_ == 1 && ne == 0 && (bits_ == 1 || bits_ == 2 || bits_ == 4 || bits_ == 8)) {
        layout_ = {"P", Kind::kPalette, 1, false};
        ok = true;
      } else if (spp_ == 2 && ne == 1 && e0 == EXTRASAMPLE_UNASSALPHA && bits_ == 8 && !lsb_first) {
        layout_ = {"PA", Kind::kPalette, 2, false};
        ok = true;
      }
      if (ok) {
        uint16_t *r = nullptr, *g = nullptr, *b = nullptr;
        if (TIFFGetField(tif_, TIFFTAG_COLORMAP, &r, &g, &b) != 1 || r == nullptr) {
          return absl::InvalidArgumentError("TIFF: palette image without a ColorMap");
        }
        for (int i = 0; i < (1 << bits_); ++i) {
          palette_[3 * i] = static_cast<uint8_t>(r[i] >> 8);
          palette_[3 * i + 1] = static_cast<uint8_t>(g[i] >> 8);
          palette_[3 * i + 2] = static_cast<uint8_t>(b[i] >> 8);
        }
      }
      break;
    case PHOTOMETRIC_RGB:
      if (lsb_first && !(bits_ == 8 && spp_ == 3)) break;
      if (spp_ == 3 && ne == 0 && (bits_ == 8 || bits_ == 16)) {
        layout_ = {"RGB", Kind::kRgb, 3, false};
        ok = true;
      } else if (spp_ >= 4 && (bits_ == 8 ? spp_ <= 6 : bits_ == 16 && spp_ == 4) &&
                 (ne == 0 ? spp_ == 4 : ne == size_t{spp_} - 3u && rest_unspecified) &&
                 (ne == 0 || e0 <= EXTRASAMPLE_UNASSALPHA)) {
        ok = true;
        if (ne > 0 && e0 == EXTRASAMPLE_UNSPECIFIED) {
          layout_ = {"RGBX", Kind::kRgb, 4, false};
        } else if (e0 == EXTRASAMPLE_ASSOCALPHA ||
                   // PIL's libtiff path un-premultiplies planar RGBA whose
                   // alpha libtiff reports as unspecified (no ExtraSamples).
                   (ne == 0 && planar_ && compression_ != COMPRESSION_NONE)) {
          layout_ = {"RGBA", Kind::kPremultiplied, 4, false};
        } else {
          layout_ = {"RGBA", Kind::kRgb, 4, false};
        }
      }
      break;
    case PHOTOMETRIC_SEPARATED:
      if (!lsb_first && ((bits_ == 8 && spp_ >= 4 && spp_ <= 6 && ne == size_t{spp_} - 4u &&
                          rest_unspecified && (ne == 0 || e0 == EXTRASAMPLE_UNSPECIFIED)) ||
                         (bits_ == 16 && spp_ == 4 && ne == 0 && !big_endian))) {
        layout_ = {"CMYK", Kind::kCmyk, 4, false};
        ok = true;
      }
      break;
    case PHOTOMETRIC_YCBCR:
      if (compression_ != COMPRESSION_JPEG || planar_config != PLANARCONFIG_CONTIG) {
        return absl::UnimplementedError(
            "TIFF: YCbCr is supported only JPEG-compressed in one plane");
      }
      if (spp_ == 3 && ne == 0 && bits_ == 8 && !lsb_first) {
        // libjpeg converts to RGB (and upsamples), as in PIL.
        if (TIFFSetField(tif_, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB) != 1) {
          return LibtiffError("cannot convert YCbCr to RGB");
        }
        layout_ = {"RGB", Kind::kRgb, 3, false};
        ok = true;
      }
      break;
    case PHOTOMETRIC_CIELAB:
    case PHOTOMETRIC_ICCLAB:
    case PHOTOMETRIC_ITULAB:
      return absl::UnimplementedError("TIFF: L*a*b* images are not supported");
    default:
      return absl::UnimplementedError(
          absl::StrCat("TIFF: photometric interpretation ", photometric, " is not supported"));
  }
  if (!ok) {
    std::string extra_text;
    for (uint16_t e : extras) absl::StrAppend(&extra_text, extra_text.empty() ? "" : ",", e);
    return absl::UnimplementedError(
        absl::StrCat("TIFF: ", spp_, " samples of ", bits_,
                     " bits with photometric interpretation ", photometric, ", extra samples (",
                     extra_text, ")", lsb_first ? ", LSB-first fill order" : "",
                     big_endian ? ", big-endian" : "", " are not supported"));
  }
  if (planar_ && bits_ != 8 && bits_ != 16) {
    return absl::UnimplementedError("TIFF: separate planes of fewer than 8 bits are not supported");
  }
  return absl::OkStatus();
}

absl::Status TiffDecoder::CheckChunks() {
  const uint32_t count = tiled_ ? TIFFNumberOfTiles(tif_) : TIFFNumberOfStrips(tif_);
  const char* what = tiled_ ? "tile" : "strip";
  if (count == 0) return LibtiffError(absl::StrCat("no ", what, "s"));
  for (uint32_t i = 0; i < count; ++i) {
    int err = 0;
    const uint64_t offset = TIFFGetStrileOffsetWithErr(tif_, i, &err);
    const uint64_t bytes = err == 0 ? TIFFGetStrileByteCountWithErr(tif_, i, &err) : 0;
    if (err != 0) return LibtiffError(absl::StrCat("cannot locate ", what, " ", i));
    if (bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("TIFF: ", what, " ", i, " has no data"));
    }
    if (offset > source_.size || bytes > source_.size - offset) {
      return absl::InvalidArgumentError(absl::StrCat("TIFF: truncated: ", what, " ", i,
                                                     " ends at byte ", offset + bytes,
                                                     " of a file of ", source_.size));
    }
  }
  return absl::OkStatus();
}

absl::Status TiffDecoder::Decode(const DecodeRegion& region, uint8_t* out, size_t stride) {
  if (!ready_) return absl::FailedPreconditionError("TIFF: Decode without a successful ReadHeader");
  if (region.width == 0 || region.height == 0 || uint64_t{region.top} + region.height > height_ ||
      uint64_t{region.left} + region.width > width_) {
    return absl::InvalidArgumentError("TIFF: region outside the image");
  }
  if (stride < size_t{region.width} * 3) {
    return absl::InvalidArgumentError("TIFF: stride shorter than a row");
  }
  error_.clear();
  over_memory_cap_ = false;
  try {
    return DecodeChunks(region, out, stride);
  } catch (const std::bad_alloc&) {
    chunk_.clear();
    chunk_.shrink_to_fit();
    return absl::ResourceExhaustedError("TIFF: out of memory for a strip or tile");
  }
}

absl::Status TiffDecoder::ReadChunk(uint32_t index, uint32_t rows, bool* short_read) {
  const int planes = planar_ ? std::min<int>(layout_.bands, spp_) : 1;
  const uint64_t plane_bytes = plane_row_bytes_ * chunk_h_;
  const uint64_t want = tiled_ ? plane_bytes : plane_row_bytes_ * rows;
  const uint32_t per_plane =
      tiled_ ? TIFFNumberOfTiles(tif_) / spp_ : TIFFNumberOfStrips(tif_) / spp_;
  for (int p = 0; p < planes; ++p) {
    const uint32_t i = index + (planar_ ? p * per_plane : 0);
    uint8_t* buf = chunk_.data() + p * plane_bytes;
    const tmsize_t got = tiled_
                             ? TIFFReadEncodedTile(tif_, i, buf, static_cast<tmsize_t>(plane_bytes))
                             : TIFFReadEncodedStrip(tif_, i, buf, static_cast<tmsize_t>(want));
    if (got < 0) return LibtiffError(absl::StrCat("cannot read ", tiled_ ? "tile " : "strip ", i));
    if (static_cast<uint64_t>(got) < want) *short_read = true;
  }
  return absl::OkStatus();
}

absl::Status TiffDecoder::DecodeChunks(const DecodeRegion& region, uint8_t* out, size_t stride) {
  const int planes = planar_ ? std::min<int>(layout_.bands, spp_) : 1;
  chunk_.resize(planes * plane_row_bytes_ * chunk_h_);
  if (planar_) row_.resize(size_t{chunk_w_} * spp_ * (bits_ / 8));
  const uint32_t bottom = region.top + region.height, right = region.left + region.width;
  const uint32_t across = tiled_ ? (width_ + chunk_w_ - 1) / chunk_w_ : 1;
  const int sample_bytes = bits_ / 8;
  for (uint32_t cy = region.top / chunk_h_; cy <= (bottom - 1) / chunk_h_; ++cy) {
    const uint32_t y0 = cy * chunk_h_;
    const uint32_t rows = std::min(chunk_h_, height_ - y0);
    const uint32_t cx_first = tiled_ ? region.left / chunk_w_ : 0;
    const uint32_t cx_last = tiled_ ? (right - 1) / chunk_w_ : 0;
    for (uint32_t cx = cx_first; cx <= cx_last; ++cx) {
      bool short_read = false;
      absl::Status s = ReadChunk(cy * across + cx, rows, &short_read);
      if (!s.ok()) return s;
      if (short_read) {
        return absl::InvalidArgumentError(absl::StrCat("TIFF: ", tiled_ ? "tile " : "strip ",
                                                       cy * across + cx, " decodes short"));
      }
      const uint32_t x0 = cx * chunk_w_;
      const uint32_t from = std::max(region.left, x0);
      const uint32_t to = std::min(right, x0 + chunk_w_);
      for (uint32_t y = std::max(region.top, y0); y < std::min(bottom, y0 + rows); ++y) {
        const uint8_t* src = chunk_.data() + (y - y0) * plane_row_bytes_;
        uint32_t col = from - x0;
        if (planar_) {
          // Interleave the planes read; unread ones (extras) stay as they were.
          const uint64_t plane_bytes = plane_row_bytes_ * chunk_h_;
          for (int p = 0; p < planes; ++p) {
            const uint8_t* ps = src + p * plane_bytes;
            for (uint32_t x = col; x < col + (to - from); ++x) {
              std::memcpy(&row_[(size_t{x - col} * spp_ + p) * sample_bytes],
                          ps + size_t{x} * sample_bytes, sample_bytes);
            }
          }
          src = row_.data();
          col = 0;
        }
        ConvertRow(src, col, to - from,
                   out + size_t{y - region.top} * stride + size_t{from - region.left} * 3);
      }
    }
  }
  return absl::OkStatus();
}

inline uint8_t Clip8(int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); }

void TiffDecoder::ConvertRow(const uint8_t* row, uint32_t x0, uint32_t n, uint8_t* out) const {
  const uint32_t spp = spp_;
  // Sample c of pixel x, 8 bits (16-bit samples: the high byte, native order).
  auto sample8 = [&](uint32_t x, uint32_t c) -> int {
    if (bits_ == 8) return row[size_t{x} * spp + c];
    uint16_t v;
    std::memcpy(&v, row + (size_t{x} * spp + c) * 2, 2);
    return v >> 8;
  };
  // The first sample of pixel x, whole bytes or packed (bits_ < 8, MSB first).
  auto first_sample = [&](uint32_t x) -> int {
    if (bits_ >= 8) return row[size_t{x} * spp];
    const uint64_t bit = uint64_t{x} * bits_;
    return (row[bit / 8] >> (8 - bits_ - bit % 8)) & ((1 << bits_) - 1);
  };
  for (uint32_t i = 0; i < n; ++i, out += 3) {
    const uint32_t x = x0 + i;
    switch (layout_.kind) {
      case Kind::kGray: {
        int v = first_sample(x);
        if (bits_ < 8) v *= 255 / ((1 << bits_) - 1);
        if (layout_.invert) v = 255 - v;
        out[0] = out[1] = out[2] = static_cast<uint8_t>(v);
        break;
      }
      case Kind::kGray16: {
        uint16_t v;
        std::memcpy(&v, row + size_t{x} * 2, 2);
        out[0] = out[1] = out[2] = static_cast<uint8_t>(std::min<int>(v, 255));
        break;
      }
      case Kind::kPalette: {
        const int v = first_sample(x);
        std::memcpy(out, palette_ + 3 * v, 3);
        break;
      }
      case Kind::kRgb:
        for (int c = 0; c < 3; ++c) out[c] = static_cast<uint8_t>(sample8(x, c));
        break;
      case Kind::kPremultiplied: {
        const int a = sample8(x, 3);
        for (int c = 0; c < 3; ++c) {
          const int v = sample8(x, c);
          out[c] = a == 0 ? 0 : a == 255 ? static_cast<uint8_t>(v) : Clip8(v * 255 / a);
        }
        break;
      }
      case Kind::kCmyk: {
        const int nk = 255 - sample8(x, 3);
        for (int c = 0; c < 3; ++c) {
          const int t = sample8(x, c) * nk + 128;
          out[c] = Clip8(nk - ((t + (t >> 8)) >> 8));
        }
        break;
      }
    }
  }
}

}  // namespace

std::unique_ptr<ImageDecoder> MakeTiffDecoder() { return std::make_unique<TiffDecoder>(); }

}  // namespace stoker::image
