// Label maps (segmentation masks) through the same geometry as their image.
//
// A sample's mask is decoded whole (ImageDecoder::DecodeLabels: palette
// indices, gray values) and then moved by the steps its image was given
// (pipeline.h's SampleSteps, drawn once for the image's size), as
// torchvision's segmentation reference transforms and its v2 joint
// transforms move a target with its image:
//   crop               the same box
//   pad                the same amounts; constant padding with the mask's
//                      own fill (255, "ignore", by default: the reference's
//                      pad_if_smaller), other modes as the image's
//   resize             to the same size with NEAREST, whatever the image's
//                      interpolation (PIL's Image.resize(NEAREST))
//   hflip, vflip       the same
//   affine, rotate     the same matrix with NEAREST, the mask's fill outside
//   everything else    nothing: colour and point ops, grayscale, blur,
//                      RandomErasing (it erases the image tensor only), and
//                      AugMix's chains (between mix_begin and mix_end; they
//                      blend images, which has no meaning for labels)
// The label map must be in the image's displayed orientation and of its
// size: a mask whose size differs from its image's is the caller's sample
// failure, before any step runs.
//
// Values are moved, never computed: every value of the result is a value
// of the input or the fill. Pure computation; not thread-safe per object
// (LabelMap and its scratch belong to one thread).

#ifndef STOKER_SERVER_IMAGE_OPS_LABELS_H_
#define STOKER_SERVER_IMAGE_OPS_LABELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/image/steps.h"

namespace stoker::image {

// Rows packed, `bpp` bytes a value (1 or 2; host order).
struct LabelMap {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t bpp = 1;
  // PIL's mode "1" (a 1-bit PNG): values 0 and 1, and a fill is 1 when not
  // 0, as PIL stores it (so the reference's 255 "ignore" becomes 1).
  bool binary = false;
  std::vector<uint8_t> data;

  size_t bytes() const { return size_t{height} * width * bpp; }
};

// Runs the geometric steps of `steps` on `labels` (above), `fill` outside
// the image (truncated to bpp bytes). INVALID_ARGUMENT when a step does not
// fit the map (a crop outside it: the steps were drawn for another size).
// `scratch` is reused between calls.
[[nodiscard]] absl::Status ApplyLabelSteps(const SampleSteps& steps, uint32_t fill,
                                           LabelMap* labels, std::vector<uint8_t>* scratch);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_LABELS_H_
