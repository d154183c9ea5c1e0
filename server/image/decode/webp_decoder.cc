#include "server/image/decode/webp_decoder.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "webp/decode.h"
#include "webp/demux.h"

namespace stoker::image {
namespace {

uint32_t LoadLE32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t{p[3]} << 24);
}

// The first row (or column) of a VP8 crop covering [begin, end) of a frame
// `size` long, and one past its last: see the header.
uint32_t LossyCropBegin(uint32_t begin) { return begin == 0 ? 0 : (begin - 1) & ~1u; }
uint32_t LossyCropEnd(uint32_t end, uint32_t size) { return std::min(size, end | 1u); }

class WebpDecoder final : public ImageDecoder {
 public:
  absl::Status ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                          ImageHeader* header) override;
  absl::Status Decode(const DecodeRegion& region, uint8_t* out, size_t stride) override;

 private:
  absl::Status DecodeFrame(uint32_t x, uint32_t y, uint32_t w, uint32_t h, uint8_t* out,
                           size_t stride);

  bool ready_ = false;
  uint32_t canvas_width_ = 0, canvas_height_ = 0;
  // The first frame: its bitstream (ALPH and VP8, or VP8L) in the caller's
  // data, and its place on the canvas.
  const uint8_t* frame_data_ = nullptr;
  size_t frame_size_ = 0;
  uint32_t frame_x_ = 0, frame_y_ = 0, frame_width_ = 0, frame_height_ = 0;
  bool lossy_ = false;
  std::vector<uint8_t> crop_;
};

absl::Status WebpDecoder::ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                                     ImageHeader* header) {
  ready_ = false;
  if (size < 12) {
    return absl::InvalidArgumentError(
        absl::StrCat("WebP: truncated in the RIFF header (", size, " bytes)"));
  }
  if (std::memcmp(data, "RIFF", 4) != 0 || std::memcmp(data + 8, "WEBP", 4) != 0) {
    return absl::InvalidArgumentError("WebP: not a RIFF WEBP file");
  }
  // The sizes the first chunks declare, before anything is parsed further.
  WebPBitstreamFeatures features;
  const VP8StatusCode peek = WebPGetFeatures(data, size, &features);
  if (peek == VP8_STATUS_OK) {
    absl::Status s = CheckPixelCap("WebP", features.width, features.height, limits.max_pixels);
    if (!s.ok()) return s;
  }
  const uint64_t riff_end = uint64_t{LoadLE32(data + 4)} + 8;
  if (riff_end > size) {
    return absl::InvalidArgumentError(absl::StrCat("WebP: truncated: the file has ", size,
                                                   " bytes, its RIFF header says ", riff_end));
  }
  const WebPData whole = {data, size};
  WebPDemuxer* const demux = WebPDemux(&whole);
  if (demux == nullptr) {
    return absl::InvalidArgumentError(
        "WebP: invalid container (chunk sizes, flags or frame bounds) or image header");
  }
  canvas_width_ = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH);
  canvas_height_ = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
  WebPIterator frame;
  const bool got_frame = WebPDemuxGetFrame(demux, 1, &frame) != 0;
  // What is kept of the frame outlives the demuxer: its fragment is in `data`.
  WebPDemuxReleaseIterator(&frame);
  WebPDemuxDelete(demux);
  if (absl::Status s = CheckPixelCap("WebP", canvas_width_, canvas_height_, limits.max_pixels);
      !s.ok()) {
    return s;
  }
  WebPBitstreamFeatures frame_features;
  if (!got_frame || WebPGetFeatures(frame.fragment.bytes, frame.fragment.size, &frame_features) !=
                        VP8_STATUS_OK) {
    return absl::InvalidArgumentError("WebP: the first frame's image header is invalid");
  }
  frame_data_ = frame.fragment.bytes;
  frame_size_ = frame.fragment.size;
  frame_x_ = frame.x_offset;
  frame_y_ = frame.y_offset;
  frame_width_ = frame.width;
  frame_height_ = frame.height;
  lossy_ = frame_features.format != 2;
  header->format = ImageFormat::kWebp;
  header->width = canvas_width_;
  header->height = canvas_height_;
  // PIL's choice: RGBA unless WebPGetFeatures of the file says no alpha.
  header->mode = peek == VP8_STATUS_OK && !features.has_alpha ? "RGB" : "RGBA";
  ready_ = true;
  return absl::OkStatus();
}

// Decodes columns [x, x + w) of rows [y, y + h) of the first frame, RGB8, to
// out.
absl::Status WebpDecoder::DecodeFrame(uint32_t x, uint32_t y, uint32_t w, uint32_t h, uint8_t* out,
                                      size_t stride) {
  uint32_t cx = x, cy = y, cw = w, ch = h;
  if (lossy_) {
    cx = LossyCropBegin(x);
    cy = LossyCropBegin(y);
    cw = LossyCropEnd(x + w, frame_width_) - cx;
    ch = LossyCropEnd(y + h, frame_height_) - cy;
  }
  const bool direct = cw == w && ch == h;
  uint8_t* dst = out;
  size_t dst_stride = stride;
  if (!direct) {
    dst_stride = size_t{cw} * 3;
    try {
      crop_.resize(dst_stride * ch);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError("WebP: out of memory for the crop buffer");
    }
    dst = crop_.data();
  }
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return absl::InternalError("WebP: libwebp's decoder ABI does not match its header");
  }
  config.options.use_cropping = 1;
  config.options.crop_left = static_cast<int>(cx);
  config.options.crop_top = static_cast<int>(cy);
  config.options.crop_width = static_cast<int>(cw);
  config.options.crop_height = static_cast<int>(ch);
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = dst;
  config.output.u.RGBA.stride = static_cast<int>(dst_stride);
  config.output.u.RGBA.size = dst_stride * (ch - 1) + size_t{cw} * 3;
  const VP8StatusCode status = WebPDecode(frame_data_, frame_size_, &config);
  WebPFreeDecBuffer(&config.output);
  const char* const kind = lossy_ ? "lossy (VP8)" : "lossless (VP8L)";
  switch (status) {
    case VP8_STATUS_OK:
      break;
    case VP8_STATUS_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(absl::StrCat("WebP: out of memory decoding ", kind));
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return absl::UnimplementedError(
          absl::StrCat("WebP: the ", kind, " data uses a feature libwebp does not support"));
    case VP8_STATUS_NOT_ENOUGH_DATA:
    case VP8_STATUS_SUSPENDED:
      return absl::InvalidArgumentError(
          absl::StrCat("WebP: the ", kind, " data ends before the image does"));
    default:
      return absl::InvalidArgumentError(absl::StrCat("WebP: corrupt ", kind, " data"));
  }
  if (!direct) {
    const uint8_t* src = crop_.data() + (y - cy) * dst_stride + (x - cx) * 3;
    for (uint32_t row = 0; row < h; ++row) {
      std::memcpy(out + row * stride, src + row * dst_stride, size_t{w} * 3);
    }
  }
  return absl::OkStatus();
}

absl::Status WebpDecoder::Decode(const DecodeRegion& region, uint8_t* out, size_t stride) {
  if (!ready_) return absl::FailedPreconditionError("WebP: Decode without a successful ReadHeader");
  if (region.width == 0 || region.height == 0 ||
      uint64_t{region.left} + region.width > canvas_width_ ||
      uint64_t{region.top} + region.height > canvas_height_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WebP: region ", region.width, "x", region.height, " at (", region.left, ", ", region.top,
        ") is not inside the ", canvas_width_, "x", canvas_height_, " image"));
  }
  if (stride < size_t{region.width} * 3) {
    return absl::InvalidArgumentError("WebP: output stride is shorter than a row");
  }
  // The region's part on the first frame; the rest of the canvas is (0, 0, 0).
  const uint32_t x0 = std::max(region.left, frame_x_);
  const uint32_t y0 = std::max(region.top, frame_y_);
  const uint32_t x1 = std::min(region.left + region.width, frame_x_ + frame_width_);
  const uint32_t y1 = std::min(region.top + region.height, frame_y_ + frame_height_);
  if (x0 >= x1 || y0 >= y1 || x1 - x0 != region.width || y1 - y0 != region.height) {
    for (uint32_t row = 0; row < region.height; ++row) {
      std::memset(out + row * stride, 0, size_t{region.width} * 3);
    }
  }
  if (x0 >= x1 || y0 >= y1) return absl::OkStatus();
  return DecodeFrame(x0 - frame_x_, y0 - frame_y_, x1 - x0, y1 - y0,
                     out + (y0 - region.top) * stride + size_t{x0 - region.left} * 3, stride);
}

}  // namespace

std::unique_ptr<ImageDecoder> MakeWebpDecoder() { return std::make_unique<WebpDecoder>(); }

}  // namespace stoker::image
