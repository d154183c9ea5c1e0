// Detection boxes through the same geometry as their image.
//
// A sample's boxes are XYXY in pixels of its image as displayed (x1, y1
// the top left corner, x2, y2 the bottom right; the image spans [0, width]
// x [0, height], pixel (i, j) the unit square from (i, j)). They are moved
// by the steps the image was given (pipeline.h's SampleSteps, drawn once
// for the image's size), as torchvision's detection reference transforms
// and its v2 joint transforms move BoundingBoxes:
//   crop            shifted by the crop's corner, then clamped to it (a
//                   RandomIoUCrop's crop first drops the boxes whose
//                   centers are not strictly inside it, as the detection
//                   reference does)
//   pad             shifted by the left and top padding (any mode)
//   resize          scaled by new / old size on each axis
//   hflip, vflip    mirrored: x1' = width - x2, x2' = width - x1
//   affine, rotate  the four corners through the image's forward map (the
//                   inverse of the PIL matrix its pixels are sampled by),
//                   the box that holds them, clamped to the image (v2's
//                   affine and rotate with expand off)
//   everything else nothing (colour and point ops, RandomErasing, AugMix's
//                   chains, which keep the image's geometry)
// Before the steps each input box is checked (a NaN, an infinity, or x2 <
// x1 or y2 < y1 is not a box: the sample fails) and clamped to its image,
// as the detection reference's ConvertCocoPolysToMask clamps COCO's boxes.
// After them a box is kept when its width and height are both > 0 and >=
// min_size, and its visibility (its area over the area the same steps give
// it with no clamping after the input's) >= min_visibility; kept boxes stay
// in their order and their labels and flags follow them.
//
// Pure computation in double, stored as float32; thread-compatible.

#ifndef STOKER_SERVER_IMAGE_OPS_BOXES_H_
#define STOKER_SERVER_IMAGE_OPS_BOXES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/image/steps.h"

namespace stoker::image {

struct BoxRules {
  float min_size = 0;        // pixels, on both sides (0: any area > 0)
  float min_visibility = 0;  // 0..1
};

// A sample's boxes, in place: `count` of them, `xyxy` 4 floats each,
// `labels` and `flags` (COCO's iscrowd) one each. Not owned.
struct BoxSet {
  float* xyxy = nullptr;
  int64_t* labels = nullptr;
  uint8_t* flags = nullptr;
  uint32_t count = 0;
};

// Moves `boxes` by the geometric steps of `steps` (drawn for an image of
// height x width), drops those the rules drop and compacts the survivors to
// the front of the three arrays; boxes->count becomes their number.
// INVALID_ARGUMENT naming the box when an input is not a box (above), or
// when a step does not fit the image (the steps were drawn for another
// size); the arrays are then unspecified. `scratch` is reused between calls.
[[nodiscard]] absl::Status ApplyBoxSteps(const SampleSteps& steps, uint32_t height,
                                         uint32_t width, const BoxRules& rules, BoxSet* boxes,
                                         std::vector<double>* scratch);

// The boxes `xyxy` (`count`, of a height x width image) where `steps` leave
// them, clamped as above, without the rules: those a step dropped and those
// that are not boxes left out; 4 doubles a box into `out`. What the ops
// drawn so far did to the boxes, for RandomIoUCrop's draw (DrawSteps).
void MoveBoxes(const SampleSteps& steps, uint32_t height, uint32_t width, const float* xyxy,
               uint32_t count, std::vector<double>* out);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_BOXES_H_
