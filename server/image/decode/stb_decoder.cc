#include "server/image/decode/stb_decoder.h"

#include <stb/stb_image.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"

namespace stoker::image {
namespace {

constexpr uint64_t kStbMaxSide = 1u << 24;  // STBI_MAX_DIMENSIONS

void Put16(std::vector<uint8_t>* v, uint32_t x) {
  v->push_back(x & 255);
  v->push_back(x >> 8 & 255);
}
void Put32(std::vector<uint8_t>* v, uint32_t x) {
  Put16(v, x & 0xFFFF);
  Put16(v, x >> 16);
}

// What stb reads: `head` (written here), then `body` (the file's pixels).
struct Stream {
  const uint8_t* head;
  size_t head_size;
  const uint8_t* body;
  size_t body_size;
  size_t pos;
};

int StreamRead(void* user, char* out, int size) {
  Stream* s = static_cast<Stream*>(user);
  const size_t total = s->head_size + s->body_size;
  const size_t n = std::min(static_cast<size_t>(size), total - s->pos);
  for (size_t done = 0; done < n;) {
    const size_t at = s->pos + done;
    const bool in_head = at < s->head_size;
    const uint8_t* src = in_head ? s->head + at : s->body + (at - s->head_size);
    const size_t run = std::min(n - done, in_head ? s->head_size - at : total - at);
    std::memcpy(out + done, src, run);
    done += run;
  }
  s->pos += n;
  return static_cast<int>(n);
}

void StreamSkip(void* user, int n) {
  Stream* s = static_cast<Stream*>(user);
  const size_t total = s->head_size + s->body_size;
  s->pos = n < 0 ? s->pos : std::min(total, s->pos + static_cast<size_t>(n));
}

int StreamEof(void* user) {
  const Stream* s = static_cast<const Stream*>(user);
  return s->pos >= s->head_size + s->body_size;
}

// Python's round() of a double: halves to even.
double RoundHalfEven(double x) {
  const double f = std::floor(x);
  const double d = x - f;
  if (d != 0.5) return d < 0.5 ? f : f + 1;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

bool IsPnmSpace(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

class StbDecoder final : public ImageDecoder {
 public:
  explicit StbDecoder(ImageFormat format) : format_(format) {}

  absl::Status ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                          ImageHeader* header) override {
    ready_ = false;
    absl::Status s;
    try {
      s = format_ == ImageFormat::kBmp ? ParseBmp(data, size, limits)
                                       : ParsePnm(data, size, limits);
    } catch (const std::bad_alloc&) {
      s = absl::ResourceExhaustedError(absl::StrCat(Name(), ": out of memory reading the header"));
    }
    if (!s.ok()) return s;
    header->format = format_;
    header->width = width_;
    header->height = height_;
    header->mode = mode_;
    ready_ = true;
    return absl::OkStatus();
  }

  absl::Status Decode(const DecodeRegion& region, uint8_t* out, size_t stride) override {
    if (!ready_) {
      return absl::FailedPreconditionError(
          absl::StrCat(Name(), ": Decode before a successful ReadHeader"));
    }
    if (region.width == 0 || region.height == 0 || uint64_t{region.top} + region.height > height_ ||
        uint64_t{region.left} + region.width > width_ || stride < size_t{region.width} * 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(Name(), ": region ", region.width, "x", region.height, " at (", region.left,
                       ", ", region.top, ") is not inside the ", width_, "x", height_, " image"));
    }
    try {
      return DecodeWhole(region, out, stride);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat(Name(), ": out of memory decoding"));
    }
  }

 private:
  const char* Name() const { return format_ == ImageFormat::kBmp ? "BMP" : "PNM"; }

  absl::Status CheckSize(uint64_t width, uint64_t height, const DecodeLimits& limits) {
    if (width == 0 || height == 0) {
      return absl::InvalidArgumentError(absl::StrCat(Name(), ": zero width or height"));
    }
    // First: PNM sides of 10 digits would overflow the product.
    if (width > kStbMaxSide || height > kStbMaxSide) {
      return absl::ResourceExhaustedError(absl::StrCat(
          Name(), ": ", width, "x", height, " has a side over stb's limit of ", kStbMaxSide));
    }
    if (absl::Status s = CheckPixelCap(Name(), width, height, limits.max_pixels); !s.ok()) {
      return s;
    }
    width_ = static_cast<uint32_t>(width);
    height_ = static_cast<uint32_t>(height);
    return absl::OkStatus();
  }

  absl::Status ParseBmp(const uint8_t* data, size_t size, const DecodeLimits& limits);
  absl::Status ParsePnm(const uint8_t* data, size_t size, const DecodeLimits& limits);
  absl::Status DecodeWhole(const DecodeRegion& region, uint8_t* out, size_t stride);

  const ImageFormat format_;
  bool ready_ = false;
  // Set by ReadHeader for Decode.
  uint32_t width_ = 0;
  uint32_t height_ = 0;
  const char* mode_ = "";
  std::vector<uint8_t> head_;
  const uint8_t* body_ = nullptr;
  size_t body_size_ = 0;
  int channels_ = 3;                 // of stb's output
  bool wide_ = false;                // 16-bit samples (PNM maxval > 255)
  int channel_bits_[3] = {8, 8, 8};  // BMP: of R, G, B in the file
  uint32_t maxval_ = 255;            // PNM
  uint32_t out_max_ = 255;           // PNM: PIL's intermediate range (65535 for mode I)
  std::vector<uint8_t> lut_;         // sample -> RGB8 value, per channel for BMP
};

// The 32-bit BI_BITFIELDS masks PIL reads (R, G, B, A).
struct Masks32 {
  uint32_t m[4];
  bool alpha;  // PIL's mode RGBA
};
constexpr Masks32 kMasks32[] = {
    {{0xFF0000, 0xFF00, 0xFF, 0}, false},         {{0xFF000000, 0xFF0000, 0xFF00, 0}, false},
    {{0xFF000000, 0xFF0000, 0xFF00, 0xFF}, true}, {{0xFF, 0xFF00, 0xFF0000, 0xFF000000}, true},
    {{0xFF0000, 0xFF00, 0xFF, 0xFF000000}, true}, {{0, 0, 0, 0}, true},
};

absl::Status StbDecoder::ParseBmp(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  if (size < 2 || data[0] != 'B' || data[1] != 'M') {
    return absl::InvalidArgumentError("BMP: not a BMP file (no 'BM' signature)");
  }
  if (size < 18) return absl::InvalidArgumentError("BMP: truncated in the file header");
  const uint32_t offset = LoadLe32(data + 10);
  const uint32_t hsz = LoadLe32(data + 14);
  if (hsz == 56)
    return absl::UnimplementedError("BMP: 56-byte (V3) info headers are not supported");
  if (hsz != 12 && hsz != 40 && hsz != 64 && hsz != 108 && hsz != 124) {
    return absl::InvalidArgumentError(absl::StrCat("BMP: unknown info header size ", hsz));
  }
  if (size < 14 + hsz) {
    return absl::InvalidArgumentError(
        absl::StrCat("BMP: truncated in the ", hsz, "-byte info header"));
  }
  const uint8_t* h = data + 14;
  uint64_t width, height;
  uint32_t bits, compression = 0, colors_used = 0;
  bool top_down = false;
  if (hsz == 12) {
    width = LoadLe16(h + 4);
    height = LoadLe16(h + 6);
    bits = LoadLe16(h + 10);
  } else {
    width = LoadLe32(h + 4);
    top_down = h[11] == 0xFF;
    height = top_down ? (uint64_t{1} << 32) - LoadLe32(h + 8) : LoadLe32(h + 8);
    bits = LoadLe16(h + 14);
    compression = LoadLe32(h + 16);
    colors_used = LoadLe32(h + 32);
  }
  absl::Status s = CheckSize(width, height, limits);
  if (!s.ok()) return s;
  if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32) {
    return absl::UnimplementedError(absl::StrCat("BMP: ", bits, "-bit pixels are not supported"));
  }
  if (compression == 1 || compression == 2) {
    return absl::UnimplementedError(
        absl::StrCat("BMP: ", compression == 1 ? "RLE8" : "RLE4", " compression is not supported"));
  }
  if (compression != 0 && compression != 3) {
    return absl::UnimplementedError(
        absl::StrCat("BMP: compression type ", compression,
                     " (JPEG, PNG or alpha bit fields) is not supported"));
  }

  // What stb is given: BI_BITFIELDS with these R, G, B masks for 16 and 32
  // bits, BI_RGB for 24, a full 2^bits palette below that.
  uint32_t masks[3] = {0, 0, 0};
  mode_ = "RGB";
  std::fill(channel_bits_, channel_bits_ + 3, 8);
  if (bits == 16) {
    masks[0] = 0x7C00, masks[1] = 0x3E0, masks[2] = 0x1F;
    std::fill(channel_bits_, channel_bits_ + 3, 5);
  } else if (bits == 32) {
    masks[0] = 0xFF0000, masks[1] = 0xFF00, masks[2] = 0xFF;
  }
  size_t after_header = 14 + hsz;
  if (compression == 3) {
    uint32_t m[4] = {0, 0, 0, 0};
    if (hsz == 40) {
      if (size < 14 + 40 + 12)
        return absl::InvalidArgumentError("BMP: truncated in the bit field masks");
      for (int i = 0; i < 3; ++i) m[i] = LoadLe32(data + 54 + 4 * i);
      after_header += 12;
    } else {
      for (int i = 0; i < 4; ++i) m[i] = LoadLe32(h + 40 + 4 * i);
    }
    bool known = false;
    if (bits == 32) {
      for (const Masks32& k : kMasks32) {
        if (!std::equal(m, m + 4, k.m)) continue;
        known = true;
        if (m[0] != 0) std::copy(m, m + 3, masks);
        if (k.alpha) mode_ = "RGBA";
      }
    } else if (bits == 24) {
      known = m[0] == 0xFF0000 && m[1] == 0xFF00 && m[2] == 0xFF;
    } else if (bits == 16) {
      const bool rgb565 = m[0] == 0xF800 && m[1] == 0x7E0 && m[2] == 0x1F;
      known = rgb565 || (m[0] == 0x7C00 && m[1] == 0x3E0 && m[2] == 0x1F);
      if (rgb565) {
        std::copy(m, m + 3, masks);
        channel_bits_[1] = 6;
      }
    }
    if (!known) {
      return absl::UnimplementedError(absl::StrCat(
          "BMP: ", bits, "-bit bit fields with masks R ", absl::Hex(m[0]), " G ", absl::Hex(m[1]),
          " B ", absl::Hex(m[2]), " A ", absl::Hex(m[3]), " are not supported"));
    }
  }

  uint64_t data_offset = offset;
  const uint8_t* palette = nullptr;
  uint64_t colors = 0;
  const size_t entry = hsz == 12 ? 3 : 4;
  if (bits <= 8) {
    colors = colors_used != 0 ? colors_used : 1u << bits;
    if (colors > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("BMP: palette of ", colors, " colours (at most 256)"));
    }
    if (size - after_header < entry * colors) {
      return absl::InvalidArgumentError(
          absl::StrCat("BMP: palette of ", colors, " colours runs past the end of the file"));
    }
    palette = data + after_header;
    after_header += entry * colors;
    bool grey = true;
    for (uint32_t i = 0; i < colors; ++i) {
      const uint8_t want = colors == 2 ? (i == 0 ? 0 : 255) : static_cast<uint8_t>(i);
      const uint8_t* e = palette + entry * i;
      grey = grey && e[0] == want && e[1] == want && e[2] == want;
    }
    if (grey && (colors == 2 ? bits != 1 : bits != 8)) {
      return absl::UnimplementedError(
          absl::StrCat("BMP: a ", bits, "-bit file with a ", colors,
                       "-entry grey palette is not supported (PIL reads its pixels as ",
                       colors == 2 ? "1-bit" : "8-bit", " grey)"));
    }
    mode_ = grey ? (colors == 2 ? "1" : "L") : "P";
    if (offset == 14 + hsz) data_offset += 4 * colors;
  }
  if (offset == 0) data_offset = after_header;

  const uint64_t stride = (width * bits + 31) / 32 * 4;
  const uint64_t needed = (height - 1) * stride + (width * bits + 7) / 8;
  if (data_offset >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BMP: pixel data offset ", data_offset, " is past the end of the file (", size, " bytes)"));
  }
  if (size - data_offset < needed) {
    return absl::InvalidArgumentError(absl::StrCat("BMP: truncated in the pixel data (",
                                                   size - data_offset, " of ", needed, " bytes)"));
  }
  body_ = data + data_offset;
  body_size_ = static_cast<size_t>(std::min<uint64_t>(size - data_offset, height * stride));

  const bool bitfields = masks[0] != 0;
  const uint32_t entries = bits <= 8 ? 1u << bits : 0;
  head_.clear();
  head_.push_back('B');
  head_.push_back('M');
  Put32(&head_, 0);  // file size, unread
  Put32(&head_, 0);
  Put32(&head_, 54 + (bitfields ? 12 : 0) + 4 * entries);
  Put32(&head_, 40);
  Put32(&head_, width_);
  Put32(&head_, top_down ? 0u - height_ : height_);
  Put16(&head_, 1);
  Put16(&head_, bits);
  Put32(&head_, bitfields ? 3 : 0);
  for (int i = 0; i < 5; ++i) Put32(&head_, 0);
  for (int i = 0; bitfields && i < 3; ++i) Put32(&head_, masks[i]);
  // Entries past the file's are grey, as in PIL's palette.
  for (uint32_t i = 0; i < entries; ++i) {
    for (int c = 0; c < 3; ++c)
      head_.push_back(i < colors ? palette[entry * i + c] : static_cast<uint8_t>(i));
    head_.push_back(0);
  }
  channels_ = 3;
  wide_ = false;
  return absl::OkStatus();
}

absl::Status StbDecoder::ParsePnm(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  if (size < 2 || data[0] != 'P' || data[1] < '1' || data[1] > '6') {
    return absl::InvalidArgumentError("PNM: not a PNM file (no P1..P6 signature)");
  }
  // PIL: the magic is what precedes the first whitespace (at most 6 bytes).
  if (size > 2 && !IsPnmSpace(data[2])) {
    return absl::InvalidArgumentError("PNM: no whitespace after the magic number");
  }
  const char kind = static_cast<char>(data[1]);
  if (kind != '5' && kind != '6') {
    static const char* const kNames[] = {"P1 (plain PBM)", "P2 (plain PGM)", "P3 (plain PPM)",
                                         "P4 (PBM bitmap)"};
    return absl::UnimplementedError(
        absl::StrCat("PNM: ", kNames[kind - '1'], " files are not supported"));
  }
  size_t pos = std::min<size_t>(3, size);
  uint64_t value[3];
  for (uint64_t& v : value) {
    // PIL's _read_token: skips leading whitespace, drops '#' comments up to
    // CR/LF, ends at whitespace (consumed) or EOF, at most 10 bytes.
    std::string token;
    while (token.size() <= 10 && pos < size) {
      const uint8_t c = data[pos++];
      if (IsPnmSpace(c)) {
        if (token.empty()) continue;
        break;
      }
      if (c == '#') {
        while (pos < size && data[pos] != '\r' && data[pos] != '\n') ++pos;
        pos += pos < size;
        continue;
      }
      token.push_back(static_cast<char>(c));
    }
    if (token.empty()) return absl::InvalidArgumentError("PNM: truncated in the header");
    if (token.size() > 10) return absl::InvalidArgumentError("PNM: number too long in the header");
    v = 0;
    for (char c : token) {
      if (c < '0' || c > '9') {
        return absl::InvalidArgumentError(
            absl::StrCat("PNM: bad number '", token, "' in the header"));
      }
      v = v * 10 + (c - '0');
    }
  }
  absl::Status s = CheckSize(value[0], value[1], limits);
  if (!s.ok()) return s;
  maxval_ = static_cast<uint32_t>(std::min<uint64_t>(value[2], 65536));
  if (maxval_ == 0 || maxval_ > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("PNM: maxval ", value[2], " is not in 1..65535"));
  }
  channels_ = kind == '6' ? 3 : 1;
  wide_ = maxval_ > 255;
  mode_ = kind == '6' ? "RGB" : wide_ ? "I" : "L";
  out_max_ = kind == '5' && wide_ ? 65535 : 255;
  const uint64_t needed = uint64_t{width_} * height_ * channels_ * (wide_ ? 2 : 1);
  if (size - pos < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("PNM: truncated in the pixel data (", size - pos, " of ", needed, " bytes)"));
  }
  body_ = data + pos;
  body_size_ = static_cast<size_t>(needed);
  const std::string head =
      absl::StrCat("P", std::string(1, kind), "\n", width_, " ", height_, "\n", maxval_, "\n");
  head_.assign(head.begin(), head.end());
  return absl::OkStatus();
}

absl::Status StbDecoder::DecodeWhole(const DecodeRegion& region, uint8_t* out, size_t stride) {
  Stream stream{head_.data(), head_.size(), body_, body_size_, 0};
  const stbi_io_callbacks callbacks{StreamRead, StreamSkip, StreamEof};
  const int req_comp = format_ == ImageFormat::kBmp ? 3 : 0;
  int x = 0, y = 0, comp = 0;
  void* const pixels = wide_
                           ? static_cast<void*>(stbi_load_16_from_callbacks(&callbacks, &stream, &x,
                                                                            &y, &comp, req_comp))
                           : stbi_load_from_callbacks(&callbacks, &stream, &x, &y, &comp, req_comp);
  if (pixels == nullptr) {
    const char* why = stbi_failure_reason();
    const std::string message =
        absl::StrCat(Name(), ": stb_image failed: ", why ? why : "unknown error");
    const bool memory =
        why && (std::strcmp(why, "outofmem") == 0 || std::strcmp(why, "too large") == 0);
    return memory ? absl::ResourceExhaustedError(message) : absl::InvalidArgumentError(message);
  }
  const std::unique_ptr<void, void (*)(void*)> owned(pixels, stbi_image_free);
  if (static_cast<uint32_t>(x) != width_ || static_cast<uint32_t>(y) != height_ ||
      (req_comp != 0 ? req_comp : comp) != channels_) {
    return absl::InternalError(absl::StrCat(Name(), ": stb_image decoded ", x, "x", y, "x", comp,
                                            ", the header said ", width_, "x", height_, "x",
                                            channels_));
  }

  // lut_[c * lut_channel + sample]: the RGB8 value PIL gives.
  size_t lut_channel = 0;
  if (format_ == ImageFormat::kBmp) {
    // stb replicates a k-bit value v into 8 bits; its high k bits are v.
    lut_channel = 256;
    lut_.resize(3 * 256);
    for (int c = 0; c < 3; ++c) {
      const int k = channel_bits_[c];
      for (uint32_t i = 0; i < 256; ++i) {
        lut_[c * 256 + i] =
            static_cast<uint8_t>(k == 8 ? i : (i >> (8 - k)) * 255 / ((1u << k) - 1));
      }
    }
  } else {
    lut_.resize(wide_ ? 65536 : 256);
    for (size_t v = 0; v < lut_.size(); ++v) {
      const double scaled = RoundHalfEven(static_cast<double>(v) / maxval_ * out_max_);
      lut_[v] = static_cast<uint8_t>(std::min(255.0, std::min<double>(out_max_, scaled)));
    }
  }

  // stb 2.27 leaves 16-bit PNM samples as the file stores them, big-endian.
  const size_t bytes = wide_ ? 2 : 1;
  const size_t pixel = channels_ * bytes;
  const uint8_t* const base = static_cast<const uint8_t*>(pixels);
  bool identity = !wide_ && channels_ == 3;
  for (size_t i = 0; identity && i < lut_.size(); ++i) identity = lut_[i] == (i & 255);
  for (uint32_t row = 0; row < region.height; ++row) {
    const uint8_t* src = base + ((size_t{region.top} + row) * width_ + region.left) * pixel;
    uint8_t* dst = out + row * stride;
    if (identity) {
      std::memcpy(dst, src, size_t{region.width} * 3);
      continue;
    }
    for (uint32_t i = 0; i < region.width; ++i, src += pixel, dst += 3) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t* sample = src + (channels_ == 1 ? 0 : c) * bytes;
        const uint32_t v = wide_ ? (sample[0] << 8 | sample[1]) : sample[0];
        dst[c] = lut_[c * lut_channel + v];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<ImageDecoder> MakeBmpDecoder() {
  return std::make_unique<StbDecoder>(ImageFormat::kBmp);
}

std::unique_ptr<ImageDecoder> MakePnmDecoder() {
  return std::make_unique<StbDecoder>(ImageFormat::kPnm);
}

}  // namespace stoker::image
