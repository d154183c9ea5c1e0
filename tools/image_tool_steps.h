// stoker-image-tool's steps as JSON: what `render --steps-out` and `draw`
// write and `render --steps` and `labels --steps` read, so that tests can
// force torchvision to the parameters stoker drew. Internal to the tool.
//
// Steps as JSON (--steps-out, --steps, draw): a list of objects, each with
// "kind" (pipeline.h's StepKindName) and "op" (the index of the op that drew
// it), and by kind: crop "top" "left" "height" "width" (RandomIoUCrop's also
// "box_centers": true and "min_iou"); permute "permutation" [3]; resize "height"
// "width" "antialias" (and "interpolation": "bicubic" for Pillow's BICUBIC); pad "padding" [l, t, r, b] "padding_mode" "fill"
// [r, g, b]; color_jitter "order" (adjustment names, in order) and each
// one's factor under its name ("brightness", "contrast", "saturation",
// "hue"); gaussian_blur "kernel_size" [x, y] "sigma"; box_blur (PIL's
// ImageFilter.GaussianBlur) "radius"; affine "angle"
// "translate" [x, y] (integers) "scale" "shear" [x, y] "center" [x, y]
// (absent: the image's center) "interpolation" ("nearest" | "bilinear")
// "fill" [r, g, b]; rotate "angle" "center" (absent: PIL's) "interpolation"
// "fill"; posterize "bits"; solarize "threshold"; sharpness "factor";
// mix_begin and mix_chain "weight"; erase "top" "left" "height" "width" and
// "value" [3] or "random": true with "noise_seed" (a decimal string: JSON
// numbers are doubles); hflip, vflip, grayscale, autocontrast, equalize,
// invert and mix_end nothing more. Steps a policy drew also carry "aug"
// (torchvision's op name, "ShearX"), "bin" (-1: none) and "magnitude" (as
// _apply_op got it); --steps reads them back, and only a tensor step's
// ratio (1 + magnitude) runs from them. Steps that run torchvision's tensor
// kernels (AugMix's chains: pipeline.h's Step::tensor_kernels) carry
// "tensor": true, and affine and rotate ones with a fill "tensor_fill":
// true (absent: torchvision's fill None).

#ifndef STOKER_TOOLS_IMAGE_TOOL_STEPS_H_
#define STOKER_TOOLS_IMAGE_TOOL_STEPS_H_

#include <string>
#include <string_view>

#include "common/json_text.h"  // JsonString, FloatJson, DoubleJson
#include "server/image/steps.h"

namespace stoker::image {

// "antialias", "bilinear", "nearest".
std::string InterpolationName(Interpolation i);
// ColorJitter's adjustment names (stoker.v1.ColorJitter's fields).
std::string JitterName(uint32_t j);

// The steps as a JSON list, and back; ParseSteps says what is wrong on
// stderr and returns false for a list it cannot read.
std::string StepsJson(const SampleSteps& steps);
bool ParseSteps(const std::string& json, SampleSteps* steps);

}  // namespace stoker::image

#endif  // STOKER_TOOLS_IMAGE_TOOL_STEPS_H_
