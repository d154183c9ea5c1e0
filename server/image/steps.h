// A sample's steps: what the ops of a pipeline do to one image, their random
// parameters drawn from the sample's key (DrawSteps), and the check that
// they apply to the images they make (CheckSteps). Pure functions:
// thread-safe.

#ifndef STOKER_SERVER_IMAGE_STEPS_H_
#define STOKER_SERVER_IMAGE_STEPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/image/pipeline_params.h"

namespace stoker::image {

// What keys a sample's randomness: the same key gives the same pixels.
// A multi-view sample's outputs each have their own (`output`, 0 for the
// first and for a single-output pipeline, whose draws it leaves as they
// were).
struct SampleKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint64_t dataset_index = 0;
  uint32_t output = 0;
};

// A crop in pixels, in the image's displayed orientation (after EXIF when
// apply_exif, else as coded).
struct CropBox {
  uint32_t top = 0;
  uint32_t left = 0;
  uint32_t height = 0;
  uint32_t width = 0;
};

// ---------------------------------------------------------------------------
// Steps: what the ops of one sample do, their random parameters drawn.
//
// Each op becomes zero or more concrete steps once the image's size is known
// and its randomness drawn (DrawSteps): RandomResizedCrop a crop and a resize,
// CenterCrop a zero pad (image smaller than the crop) and/or a crop,
// RandomCrop up to two pads (`padding`, then pad_if_needed) and a crop, a
// random flip a flip or nothing, ColorJitter one step with its order and
// factors, RandomGrayscale a grayscale or nothing, GaussianBlur a blur with
// its sigma, RandomRotation a rotate, RandomAffine an affine, the Random*
// point ops their step or nothing, the policies the steps of the ops they
// drew (policy.h; AugMix inside mix markers), RandomErasing an erase or
// nothing. A step that would not change the image (a crop or resize to the
// same size) is left out. Steps are in displayed coordinates and apply in
// order, each to the image the previous one made; erase steps to the output
// tensor.

enum class StepKind : uint32_t {
  kCrop = 1,            // top, left, height, width: inside the image
  kResize = 2,          // height, width, interpolation
  kPad = 3,             // pad (left, top, right, bottom), padding_mode, fill
  kHorizontalFlip = 4,
  kVerticalFlip = 5,
  kColorJitter = 6,     // jitter_order[0 .. jitter_count), factor
  kGrayscale = 7,       // PIL's convert("L"), copied to the 3 channels
  kGaussianBlur = 8,    // kernel_x, kernel_y (odd), sigma (both axes)
  // torchvision F.affine on a PIL image (on a uint8 tensor with
  // tensor_kernels): angle, translate (integers, in pixels), affine_scale,
  // shear [x, y] (degrees), center (has_center, else the image's center),
  // interpolation (kNearest / kBilinear), fill.
  kAffine = 9,
  // torchvision F.rotate on a PIL image (PIL's Image.rotate, expand off; on
  // a uint8 tensor with tensor_kernels): angle (degrees, counter-clockwise),
  // center (has_center), interpolation, fill.
  kRotate = 10,
  kPosterize = 11,      // bits: keep the top `bits` bits of each channel
  kSolarize = 12,       // threshold: v >= threshold becomes 255 - v
  kSharpness = 13,      // factor[0]: PIL's ImageEnhance.Sharpness
  kAutocontrast = 14,   // PIL's ImageOps.autocontrast (cutoff 0)
  kEqualize = 15,       // PIL's ImageOps.equalize
  kInvert = 16,         // 255 - v
  // AugMix's mixing, around its chains' steps:
  //   kMixBegin(mix_weight = the original's weight)
  //   kMixChain(mix_weight = this chain's weight) the chain's steps ...
  //   (kMixChain ...)*  kMixEnd
  // Each chain starts from the image at kMixBegin; the result is the
  // weighted sum of the original and every chain, in float32, truncated to
  // uint8 (torchvision's AugMix on a PIL image). Inside, only steps that
  // keep the image's size. torchvision runs the chains' ops with its tensor
  // kernels on the uint8 tensor; so do the chain steps AugMix draws
  // (Step::tensor_kernels, policy.h).
  kMixBegin = 17,
  kMixChain = 18,
  kMixEnd = 19,
  // RandomErasing, on the output tensor (always the last steps): the box
  // top, left, height, width of the output; erase_random 1: each value
  // normal(0, 1) from KeyedRng(noise_seed), in channel, row, column order,
  // else erase_value per channel; in the output's dtype.
  kErase = 20,
  // RandomPhotometricDistort's channel shuffle: output channel c is input
  // channel permutation[c] (exact: torchvision's PIL -> float -> PIL round
  // trip gives back every byte).
  kChannelPermute = 21,
  // torchvision F.perspective on a PIL image: the image's corners (top-left,
  // top-right, bottom-right, bottom-left of a height x width image: (0, 0),
  // (w - 1, 0), (w - 1, h - 1), (0, h - 1)) moved to `corners` (x, y
  // pairs), interpolation (kNearest / kBilinear), fill.
  kPerspective = 22,
  // torchvision F.elastic_transform on a PIL image: the displacement
  // ElasticDisplacement (ops.h) makes from noise_seed with elastic =
  // {alpha x, alpha y, sigma x, sigma y}, interpolation, fill.
  kElastic = 23,
  // PIL's ImageFilter.GaussianBlur(sigma): three box blurs per axis
  // (ops/box_blur.h); sigma is its radius, 0..kMaxBoxBlurRadius.
  kBoxBlur = 24,
};
// The last kind: kinds are numbered 1..kLastStepKind without gaps.
inline constexpr StepKind kLastStepKind = StepKind::kBoxBlur;

// "crop", "resize", "pad", "hflip", "vflip", "color_jitter", "grayscale",
// "gaussian_blur", "affine", "rotate", "posterize", "solarize", "sharpness",
// "autocontrast", "equalize", "invert", "mix_begin", "mix_chain", "mix_end",
// "erase", "permute", "perspective", "elastic", "box_blur" (the image tool's
// step JSON);
// "unknown" otherwise.
const char* StepKindName(StepKind kind);

// Plain-old-data; the fields a kind does not use stay zero.
struct Step {
  StepKind kind = StepKind::kCrop;
  uint32_t op = 0;  // index in PipelineParams.ops of the op that made it
  // kCrop: the box; kResize: height and width are the new size.
  uint32_t top = 0;
  uint32_t left = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  Interpolation interpolation = Interpolation::kAntialias;
  uint32_t pad[4] = {0, 0, 0, 0};  // left, top, right, bottom
  PadMode padding_mode = PadMode::kConstant;
  uint8_t fill[4] = {0, 0, 0, 0};  // R, G, B (constant mode)
  // kColorJitter: the adjustments made (JitterIndex values), in the order
  // they run, and each one's factor (indexed by JitterIndex; hue's is the
  // hue shift in [-0.5, 0.5]).
  uint32_t jitter_count = 0;
  uint32_t jitter_order[4] = {0, 0, 0, 0};
  float factor[4] = {0, 0, 0, 0};
  uint32_t kernel_x = 0;
  uint32_t kernel_y = 0;
  float sigma = 0;
  // kAffine, kRotate (interpolation and fill above).
  float angle = 0;
  int32_t translate[2] = {0, 0};
  float affine_scale = 1;
  // Double: a policy's shear is degrees(atan(m)), which F.affine gets as a
  // Python float.
  double shear[2] = {0, 0};
  uint32_t has_center = 0;
  double center[2] = {0, 0};
  int32_t corners[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // kPerspective: the end points
  float elastic[4] = {0, 0, 0, 0};                // kElastic: alpha x, y; sigma x, y
  uint32_t bits = 0;       // kPosterize
  double threshold = 0;    // kSolarize
  float mix_weight = 0;    // kMixBegin, kMixChain
  // kErase (the box in top, left, height, width).
  uint32_t erase_random = 0;
  float erase_value[3] = {0, 0, 0};
  uint64_t noise_seed = 0;
  // Steps a policy drew (policy.h) have from_policy 1 and torchvision's op
  // (aug), its magnitude bin (-1: an op without bins, or AutoAugment's
  // None) and the magnitude _apply_op got (signed). Not used to run them.
  uint32_t from_policy = 0;
  AugOp aug = AugOp::kIdentity;
  int32_t aug_bin = -1;
  float aug_magnitude = 0;
  // tensor_kernels 1: the step runs torchvision's tensor kernel (ops.h's
  // Tensor* functions), not the PIL one: what AugMix's chains do (policy.h).
  // It changes affine and rotate (the grid_sample path: center relative to
  // the image's center, rotate's angle negated, no PIL shortcuts), a
  // color_jitter's contrast and saturation (_blend with ratio 1 +
  // aug_magnitude in double for a policy's step, else the factor), sharpness
  // and autocontrast; the other kinds' tensor kernels give what their PIL
  // ones give. tensor_fill (affine, rotate): 1 blends in `fill` through the
  // mask channel (a fill given to torchvision), 0 is torchvision's fill None
  // (points outside read 0).
  uint32_t tensor_kernels = 0;
  uint32_t tensor_fill = 0;
  uint32_t permutation[3] = {0, 1, 2};  // kChannelPermute
  // kCrop from RandomIoUCrop: boxes whose centers are not strictly inside
  // the crop are dropped (boxes.h), and the IoU its option asked for.
  uint32_t box_centers = 0;
  float min_iou = 0;
};


struct SampleSteps {
  uint32_t count = 0;
  Step steps[kMaxSteps];
};

// Draws the random parameters of every op of `p`, in op order, from
// KeyedRng(key.seed, key.epoch, key.dataset_index), for an image of
// height x width (displayed orientation), following torchvision's sampling
// rules (RandomResizedCrop: ChooseTrainCrop in transform.h; a random flip or
// RandomGrayscale: one U[0,1) draw, applied when below p; RandomCrop: the top
// offset then the left one, uniform integers, no draw when the padded image
// is the crop's size; ColorJitter: a uniform permutation of the four
// adjustments, then each set factor uniform in its range, in the order
// brightness, contrast, saturation, hue; GaussianBlur: sigma uniform in its
// range; ImageFilterGaussianBlur: with probability p (one draw, as a flip),
// the radius uniform in its range; RandomResize: the shorter side, a uniform integer in [min, max);
// RandomShortestSize: one of its sizes, uniformly;
// RandomRotation: the angle; RandomAffine (get_params): the angle,
// then when given the translations x then y (int(round(U(-d, d))), d =
// translate[0] * width, translate[1] * height), the scale, the shear x then
// (4 values) y; the Random* point ops: one U[0,1) draw against p; the
// policies: policy.h's DrawPolicy; RandomErasing (get_params) on the output:
// the p draw, then up to 10 attempts of an area U(scale) * H * W and an
// aspect exp(U(log ratio)), sides round(sqrt(area * aspect)) and round(
// sqrt(area / aspect)), the first that fits (sides below H and W) placed at
// a uniform top then left, with "random" a noise seed drawn first; no erase
// when none fits; the detection reference's ops as it draws them:
// RandomZoomOut the p draw, the side ratio, then the left and top shares
// (canvas int(side * ratio), offset int(room * share)), a constant pad;
// RandomPhotometricDistort its seven p draws first, then each adjustment's
// factor as it is made (brightness, contrast before or after saturation and
// hue by the second draw), a channel shuffle a uniform permutation;
// RandomIoUCrop an option, then per trial the two scales, the aspect check,
// the left and top shares, and the check that a box's center lies strictly
// inside and the most IoU of those boxes reaches the option, a crop that
// drops the boxes whose centers are outside; an option >= 1 leaves the
// image, as do 64 options without a crop).
// Pure: the same arguments give the same steps. `p` must
// have passed ValidateParams. RandomIoUCrop reads `boxes` (`box_count`
// XYXY boxes in pixels of the height x width image, moved by the steps
// before it; nullptr: none). INVALID_ARGUMENT when an op cannot apply to
// the image as torchvision would raise (RandomCrop larger than the padded
// image).
[[nodiscard]] absl::Status DrawSteps(const PipelineParams& p, uint32_t height, uint32_t width,
                                     const SampleKey& key, SampleSteps* steps,
                                     const float* boxes = nullptr, uint32_t box_count = 0);

// A perspective step's coefficients (perspective.h) for the height x width
// image it applies to: its image's corners mapped from `corners`. False
// when they give no transform.
bool PerspectiveStepCoeffs(const Step& s, uint32_t height, uint32_t width, double coeffs[8]);

// Checks that each step applies to the image the steps before it make,
// from a height x width image, and gives the final size. INVALID_ARGUMENT
// for a step that does not apply (a crop outside its image, ...);
// RESOURCE_EXHAUSTED when an image made on the way has over max_pixels.
[[nodiscard]] absl::Status CheckSteps(const SampleSteps& steps, uint32_t height, uint32_t width,
                                      uint64_t max_pixels, uint32_t* out_height,
                                      uint32_t* out_width);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_STEPS_H_
