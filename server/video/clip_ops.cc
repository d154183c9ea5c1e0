#include "server/video/clip_ops.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace stoker::video {
namespace {

// One output coordinate's two source taps and weights along one axis
// (torch's compute_indices_weights_linear, align_corners=False).
struct Tap {
  uint32_t i0 = 0;
  uint32_t i1 = 0;
  float w0 = 1;
  float w1 = 0;
};

// The scale is float32 (in / out), the source coordinate double, the
// weights float32 with w0 = 1 - w1 (matched against torch's weights for
// many (in, out) pairs).
Tap LinearTap(uint32_t in, uint32_t out, uint32_t o) {
  const double scale = static_cast<float>(in) / static_cast<float>(out);
  double real = scale * (o + 0.5) - 0.5;
  if (real < 0) real = 0;
  Tap t;
  t.i0 = static_cast<uint32_t>(real);
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  t.w1 = static_cast<float>(std::min(std::max(real - t.i0, 0.0), 1.0));
  t.w0 = 1.0f - t.w1;
  return t;
}

// The resized frame's size and the crop's (each defaulting to the size
// before it), for a frame of height x width.
struct Sizes {
  uint32_t resized_height, resized_width, crop_height, crop_width;
};

Sizes SizesOf(const ClipTransform& t, uint32_t height, uint32_t width) {
  Sizes z;
  z.resized_height = t.resize_height != 0 ? t.resize_height : height;
  z.resized_width = t.resize_width != 0 ? t.resize_width : width;
  z.crop_height = t.crop_height != 0 ? t.crop_height : z.resized_height;
  z.crop_width = t.crop_width != 0 ? t.crop_width : z.resized_width;
  return z;
}

// The resized value's store: float32 as it is, or uint8 as the nearest
// of v * 255 (for Normalize on the device).
inline void Store(float v, float* o) { *o = v; }
inline void Store(float v, uint8_t* o) {
  const long q = std::lrint(v * 255.0f);
  *o = static_cast<uint8_t>(q < 0 ? 0 : q > 255 ? 255 : q);
}

template <typename Out>
absl::Status Apply(const uint8_t* clip, uint32_t frames, uint32_t height, uint32_t width,
                   const ClipTransform& t, Out* out) {
  const Sizes z = SizesOf(t, height, width);
  const uint32_t rh = z.resized_height;
  const uint32_t rw = z.resized_width;
  const uint32_t ch = z.crop_height;
  const uint32_t cw = z.crop_width;
  if (height == 0 || width == 0 || rh == 0 || rw == 0) {
    return absl::InvalidArgumentError("a clip transform of an empty frame");
  }
  if (uint64_t{t.crop_top} + ch > rh || uint64_t{t.crop_left} + cw > rw) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the crop (", ch, "x", cw, " at ", t.crop_top, ",", t.crop_left,
        ") does not lie inside the resized frame (", rh, "x", rw, ")"));
  }
  if (t.normalize && (t.std[0] == 0 || t.std[1] == 0 || t.std[2] == 0)) {
    return absl::InvalidArgumentError("Normalize's std must not be 0");
  }
  // The crop's rows and columns, as taps into the decoded frame.
  std::vector<Tap> rows(ch);
  std::vector<Tap> cols(cw);
  for (uint32_t y = 0; y < ch; ++y) rows[y] = LinearTap(height, rh, t.crop_top + y);
  for (uint32_t x = 0; x < cw; ++x) {
    const uint32_t c = t.crop_left + x;
    cols[x] = LinearTap(width, rw, t.flip ? rw - 1 - c : c);
  }
  // ConvertImageDtype once per value: a table.
  float unit[256];
  for (int v = 0; v < 256; ++v) unit[v] = static_cast<float>(v) / 255.0f;

  const size_t plane = size_t{ch} * cw;
  const size_t frame_bytes = size_t{height} * width * 3;
  for (uint32_t f = 0; f < frames; ++f) {
    const uint8_t* src = clip + f * frame_bytes;
    for (uint32_t c = 0; c < 3; ++c) {
      // TCHW: [f][c]; CTHW: [c][f].
      Out* dst = out + (t.layout == ClipLayout::kTCHW ? (size_t{f} * 3 + c) * plane
                                                      : (size_t{c} * frames + f) * plane);
      const float mean = t.mean[c];
      const float std = t.std[c];
      for (uint32_t y = 0; y < ch; ++y) {
        const Tap& r = rows[y];
        const uint8_t* row0 = src + size_t{r.i0} * width * 3 + c;
        const uint8_t* row1 = src + size_t{r.i1} * width * 3 + c;
        Out* o = dst + size_t{y} * cw;
        for (uint32_t x = 0; x < cw; ++x) {
          const Tap& k = cols[x];
          const float top = unit[row0[3 * k.i0]] * k.w0 + unit[row0[3 * k.i1]] * k.w1;
          const float bottom = unit[row1[3 * k.i0]] * k.w0 + unit[row1[3 * k.i1]] * k.w1;
          float v = top * r.w0 + bottom * r.w1;
          if (t.normalize) v = (v - mean) / std;
          Store(v, o + x);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t CenterCropOffset(uint32_t size, uint32_t crop) {
  if (crop >= size) return 0;
  return static_cast<uint32_t>(std::nearbyint((static_cast<double>(size) - crop) / 2.0));
}

size_t ClipOutputElements(uint32_t frames, const ClipTransform& t, uint32_t height,
                          uint32_t width) {
  const Sizes z = SizesOf(t, height, width);
  return size_t{frames} * 3 * z.crop_height * z.crop_width;
}

absl::Status ApplyClipTransform(const uint8_t* clip, uint32_t frames, uint32_t height,
                                uint32_t width, const ClipTransform& t, float* out) {
  return Apply(clip, frames, height, width, t, out);
}

absl::Status ApplyClipTransform(const uint8_t* clip, uint32_t frames, uint32_t height,
                                uint32_t width, const ClipTransform& t, uint8_t* out) {
  if (t.normalize) {
    return absl::InvalidArgumentError(
        "a uint8 clip leaves Normalize to the device: set normalize = false");
  }
  return Apply(clip, frames, height, width, t, out);
}

}  // namespace stoker::video
