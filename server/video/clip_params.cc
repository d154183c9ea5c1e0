#include "server/video/clip_params.h"

#include "absl/strings/str_cat.h"
#include "server/image/ops/rng.h"

namespace stoker::video {

uint64_t ClipOutputBytes(const ClipParams& p) {
  return uint64_t{p.frames} * 3 * p.out_height * p.out_width * (p.normalize != 0 ? 4 : 1);
}

absl::StatusOr<ClipTransform> DrawClipTransform(const ClipParams& p, uint32_t height,
                                                uint32_t width, uint64_t seed, uint32_t epoch,
                                                uint64_t clip) {
  ClipTransform t;
  t.resize_height = p.resize_height;
  t.resize_width = p.resize_width;
  const uint32_t h = p.resize_height != 0 ? p.resize_height : height;
  const uint32_t w = p.resize_width != 0 ? p.resize_width : width;
  KeyedRng rng(seed, epoch, clip);
  if (p.flip_p > 0) t.flip = rng.Uniform() < p.flip_p;
  if (p.crop != ClipCrop::kNone) {
    if (p.crop_height > h || p.crop_width > w) {
      return absl::InvalidArgumentError(absl::StrCat("the crop (", p.crop_height, " x ",
                                                     p.crop_width, ") is larger than the frame (",
                                                     h, " x ", w, ")"));
    }
    t.crop_height = p.crop_height;
    t.crop_width = p.crop_width;
    if (p.crop == ClipCrop::kCenter) {
      t.crop_top = CenterCropOffset(h, p.crop_height);
      t.crop_left = CenterCropOffset(w, p.crop_width);
    } else {
      t.crop_top = static_cast<uint32_t>(rng.Below(h - p.crop_height + 1));
      t.crop_left = static_cast<uint32_t>(rng.Below(w - p.crop_width + 1));
    }
  } else if (h != p.out_height || w != p.out_width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a frame of ", h, " x ", w, " where the session's clips are ", p.out_height, " x ",
        p.out_width, " (give the pipeline a Resize to [h, w] or a crop)"));
  }
  t.normalize = p.normalize != 0;
  for (int c = 0; c < 3; ++c) {
    t.mean[c] = p.mean[c];
    t.std[c] = p.std[c];
  }
  t.layout = p.layout;
  return t;
}

}  // namespace stoker::video
