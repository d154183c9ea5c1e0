// Decode + augment of one sample, from the bytes of a JPEG file to its place
// in a ring slot. Used by the worker processes, by the single-process bench
// loop and by tests. Pure computation: no I/O, no global state.
//
// Glossary
//   op     one torchvision transform with all its parameters (OpParams), as
//          the daemon lowers an effective stoker.v1.PipelineSpec
//          (pipeline/lower_pipeline.h)
//   step   what an op does to one sample, its randomness drawn (Step): a
//          crop box, a resize target, pad amounts, a flip, jitter factors
//   fused  leading steps the decode does itself: only the region they read
//          is decoded, maybe at a reduced DCT scale, and resampled once
//
// One sample (SampleProcessor::Process):
//   1. the JPEG header: the image's size and (apply_exif) its orientation
//   2. DrawSteps: the ops become steps, drawn from KeyedRng(seed, epoch,
//      dataset index) for that size
//   3. the steps are checked against the images they make (caps, the fixed
//      output shape) before any pixel is decoded
//   4. [crop] [resize [crop]] at the front: region decode + DCT scaling +
//      one resample (transform.h); otherwise the whole image is decoded
//   5. the other steps run on a uint8 RGB image (ops.h), except flips at the
//      end (or followed only by per-pixel steps), which fold into 6
//   6. EmitSample: orientation and flips, dtype, layout, normalization,
//      written into the caller's buffer (the ring slot)
//   7. RandomErasing's erase steps, on that output (after normalization, as
//      torchvision erases the tensor)

#ifndef STOKER_SERVER_IMAGE_PIPELINE_H_
#define STOKER_SERVER_IMAGE_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "server/image/decode/image_decoder.h"

namespace stoker::image {

// kAntialias, kBilinear: the resizes (Pillow's resize BILINEAR, or plain
// 2-tap bilinear). kNearest, kBilinear: the affine ops (RandomRotation,
// RandomAffine, the policies' geometric ops), as PIL's Image.transform /
// Image.rotate resample them (NEAREST, BILINEAR).
enum class Interpolation : uint32_t { kAntialias = 1, kBilinear = 2, kNearest = 3 };

// The ops a pipeline is made of: torchvision's transforms of the same names
// (stoker.proto's Op documents each one's semantics).
enum class OpKind : uint32_t {
  kNone = 0,
  kRandomResizedCrop = 1,
  kResize = 2,
  kCenterCrop = 3,
  kRandomCrop = 4,
  kHorizontalFlip = 5,   // RandomHorizontalFlip
  kVerticalFlip = 6,     // RandomVerticalFlip
  kColorJitter = 7,
  kGrayscale = 8,
  kRandomGrayscale = 9,
  kGaussianBlur = 10,
  kRandomRotation = 11,
  kRandomAffine = 12,
  kRandomPosterize = 13,
  kRandomSolarize = 14,
  kRandomAdjustSharpness = 15,
  kRandomAutocontrast = 16,
  kRandomEqualize = 17,
  kRandomInvert = 18,
  kAutoAugment = 19,
  kRandAugment = 20,
  kTrivialAugmentWide = 21,
  kAugMix = 22,
  kRandomErasing = 23,  // on the output tensor: only after every other op
  kRandomResize = 24,
  // torchvision's detection reference transforms (references/detection/
  // transforms.py; v2 has the same), for SSD-style recipes.
  kRandomZoomOut = 25,
  kRandomIoUCrop = 26,              // needs the sample's boxes (DrawSteps)
  kRandomPhotometricDistort = 27,
  kRandomShortestSize = 28,  // v2's and the detection reference's
};

// torchvision's AutoAugmentPolicy.
enum class AutoAugmentPolicy : uint32_t { kImageNet = 1, kCifar10 = 2, kSvhn = 3 };

// The ops of torchvision's augmentation spaces (autoaugment.py's _apply_op
// names), which the policies draw from.
enum class AugOp : uint32_t {
  kIdentity = 0,
  kShearX = 1,
  kShearY = 2,
  kTranslateX = 3,
  kTranslateY = 4,
  kRotate = 5,
  kBrightness = 6,
  kColor = 7,
  kContrast = 8,
  kSharpness = 9,
  kPosterize = 10,
  kSolarize = 11,
  kAutoContrast = 12,
  kEqualize = 13,
  kInvert = 14,
};

enum class PadMode : uint32_t { kConstant = 0, kEdge = 1, kReflect = 2, kSymmetric = 3 };

// ColorJitter's adjustments, in torchvision's order (its randperm(4) indexes
// these).
enum JitterIndex : uint32_t { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };

inline constexpr uint32_t kMaxOps = 16;
// The limits the workers hold every pipeline to. The request checks
// (pipeline/pipeline_spec.h) have the same; pipeline/lower_pipeline.cc
// asserts that they agree.
inline constexpr uint32_t kMaxOutputSide = 8192;
inline constexpr uint64_t kMaxOutputPixels = 16ull << 20;
inline constexpr uint32_t kMaxOpSide = 65500;  // any size an op names (JPEG's own limit)
inline constexpr uint64_t kMaxDecodePixelsLimit = 1ull << 32;

// torchvision's class name of an op kind ("RandomResizedCrop"), for
// messages and tools; "unknown" for a value outside OpKind.
const char* OpKindName(OpKind kind);

// One op with every parameter after defaults (the daemon lowers an
// effective stoker.v1.PipelineSpec into these: pipeline/lower_pipeline.h).
// Plain-old-data; the fields an op does not use stay zero.
struct OpParams {
  OpKind kind = OpKind::kNone;
  // RandomResizedCrop, Resize.
  Interpolation interpolation = Interpolation::kAntialias;
  // RandomResizedCrop, CenterCrop, RandomCrop, Resize([h, w]): the output.
  // Resize([s]): height = s (the shorter side), width = 0.
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t max_size = 0;      // Resize([s]): 0 = none
  // RandomResize: the shorter side's range [min, max), max excluded.
  uint32_t resize_range[2] = {0, 0};
  // RandomShortestSize: the shorter side's choices (max_size above caps the
  // longer; 0: none).
  uint32_t shortest_count = 0;
  uint32_t shortest[16] = {};  // kMaxShortestSizes
  // RandomZoomOut: the canvas' side ratio range (p, fill above).
  float side_range[2] = {0, 0};
  // RandomIoUCrop: the crop's side scale range and aspect ratio range, the
  // minimum IoU options (>= 1: leave the image as it is) and the attempts
  // per option.
  float iou_scale[2] = {0, 0};
  float iou_aspect[2] = {0, 0};
  uint32_t iou_option_count = 0;
  float iou_options[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t iou_trials = 0;
  // RandomPhotometricDistort: jitter[JitterIndex] the factor ranges (all
  // four set), p each adjustment's (and the channel shuffle's) chance.
  float scale[2] = {0, 0};    // RandomResizedCrop
  float ratio[2] = {0, 0};
  float p = 0;                // the flips, RandomGrayscale
  uint32_t padding[4] = {0, 0, 0, 0};  // RandomCrop: left, top, right, bottom
  uint32_t pad_if_needed = 0;          // RandomCrop: 0 or 1
  PadMode padding_mode = PadMode::kConstant;
  uint8_t fill[4] = {0, 0, 0, 0};      // RandomCrop constant fill: R, G, B
  // ColorJitter: [min, max] of each adjustment (JitterIndex); bit i of
  // jitter_set says adjustment i is made.
  float jitter[4][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
  uint32_t jitter_set = 0;
  uint32_t kernel_x = 0;      // GaussianBlur: odd, >= 1
  uint32_t kernel_y = 0;
  float sigma[2] = {0, 0};    // GaussianBlur: [min, max], > 0
  // RandomRotation, RandomAffine: the angle range in degrees, [min, max].
  float degrees[2] = {0, 0};
  // RandomAffine: translate fractions [x, y] (has_translate), scale range
  // [min, max] (has_scale), shear ranges x [min, max], y [min, max]
  // (shear_count 0, 2 or 4 values used, torchvision's rule).
  uint32_t has_translate = 0;
  float translate[2] = {0, 0};
  uint32_t has_scale = 0;
  float affine_scale[2] = {0, 0};
  uint32_t shear_count = 0;
  float shear[4] = {0, 0, 0, 0};
  // RandomRotation, RandomAffine: center [x, y] in pixels when has_center,
  // else the image's center. Their fill, and the policies', is `fill`
  // (R, G, B); their resampling `interpolation` (kNearest or kBilinear).
  // center and threshold are doubles: torchvision hands PIL the Python
  // floats given.
  uint32_t has_center = 0;
  double center[2] = {0, 0};
  uint32_t bits = 0;          // RandomPosterize: 0..8
  double threshold = 0;       // RandomSolarize: pixels >= threshold invert
  float sharpness_factor = 0; // RandomAdjustSharpness: >= 0
  // The policies.
  AutoAugmentPolicy policy = AutoAugmentPolicy::kImageNet;  // AutoAugment
  uint32_t num_ops = 0;              // RandAugment: 0..kMaxPolicyOps
  uint32_t magnitude = 0;            // RandAugment: < num_magnitude_bins
  uint32_t num_magnitude_bins = 0;   // RandAugment, TrivialAugmentWide: >= 2
  uint32_t severity = 0;             // AugMix: 1..10
  uint32_t mixture_width = 0;        // AugMix: 1..kMaxAugMixWidth
  int32_t chain_depth = 0;           // AugMix: -1 (1..3 drawn) or 1..kMaxAugMixDepth
  float alpha = 0;                   // AugMix: > 0
  uint32_t all_ops = 0;              // AugMix: 0 or 1
  // RandomErasing: p, erase_scale [min, max] of the area, erase_ratio
  // [min, max] aspect; erase_random 1: normal noise, else erase_value (per
  // channel, in the output's units: after normalization for floats; whole
  // values in 0..255 for uint8 outputs, which cannot take noise).
  float erase_scale[2] = {0, 0};
  float erase_ratio[2] = {0, 0};
  uint32_t erase_random = 0;
  float erase_value[3] = {0, 0, 0};
};

// RandomShortestSize's most sizes (the detection reference's multi-scale
// recipe has 11).
inline constexpr uint32_t kMaxShortestSizes = 16;
static_assert(sizeof(OpParams::shortest) / sizeof(uint32_t) == kMaxShortestSizes);

// Bounds of the policies' own counts (ValidateParams).
inline constexpr uint32_t kMaxPolicyOps = 8;    // RandAugment num_ops
inline constexpr uint32_t kMaxAugMixWidth = 8;
inline constexpr uint32_t kMaxAugMixDepth = 8;
// RandAugment's and TrivialAugmentWide's num_magnitude_bins: 2..this (the
// bins are torch's float32 linspace values, reproduced up to this many:
// policy.h's TorchLinspace).
inline constexpr uint32_t kMaxMagnitudeBins = 32768;

// Plain-old-data so that it crosses the daemon -> worker socket verbatim.
// The daemon fills every field (defaults applied) from the Attach request.
struct PipelineParams {
  uint32_t op_count = 0;
  OpParams ops[kMaxOps];
  // The output's fixed shape, which every sample must have (one that does
  // not fails as a sample), or 0 x 0: each sample its own size (at most
  // MaxOutputPixels).
  uint32_t out_height = 0;
  uint32_t out_width = 0;
  // No defaults here (they are pipeline/pipeline_spec.cc's): a
  // PipelineParams left as constructed fails ValidateParams (dtype 0,
  // max_decode_pixels 0), and mean/std start as the identity.
  uint32_t dtype = 0;          // ring::DType: uint8 / float32 / float16
  uint32_t layout = 0;         // ring::Layout: NHWC / NCHW
  float mean[3] = {0.0f, 0.0f, 0.0f};  // float outputs: (x/255 - mean) / std
  float stdev[3] = {1.0f, 1.0f, 1.0f};
  uint64_t max_decode_pixels = 0;  // refuse larger images before allocating
  uint32_t exact_decode = 0;   // 1: never use DCT scaling
  uint32_t apply_exif = 0;     // 1: turn the image as its EXIF orientation says
                               // (0, as torchvision's ImageFolder: as coded)
  // Bit M-1 set: never decode at DCT scale M/8 (M in 1, 2, 4), the next
  // larger allowed scale is used instead. Not a pipeline keyword: the
  // daemon sets it from its start-up calibration (decode_planner.h), the
  // same for every session and worker, so a scale that this machine decodes
  // slower than a larger one is never chosen. 0: all allowed.
  uint32_t disabled_dct_scales = 0;
  // Segmentation sets (tasks that carry a mask): the masks' bytes a value
  // in the ring (1 uint8, 2 uint16) and their fill (labels.h).
  uint32_t mask_bpp = 1;
  uint32_t mask_fill = 255;
  // Detection sets (tasks that carry boxes): boxes.h's BoxRules.
  float box_min_size = 0;
  float box_min_visibility = 0;
};

// Checks every field: the op kinds and each op's parameters (sizes in
// 1..65500, scale/ratio ordered and positive, probabilities in [0, 1],
// jitter ranges, odd blur kernels, positive sigmas, the affine ops' ranges
// and nearest / bilinear resampling, the policies' counts and bins, ...),
// RandomErasing only after every other op (and, for uint8 outputs, whole
// values and no noise), at most kMaxSteps steps from all the ops together
// (each op's most), the output shape (both sides 0, or both in 1..8192 and
// at most 16 Mpx), dtype, layout, mean/std (std != 0). INVALID_ARGUMENT
// naming the op by position.
[[nodiscard]] absl::Status ValidateParams(const PipelineParams& p);

// The most pixels an output sample can have: out_height * out_width for a
// fixed output shape; for any-size outputs (0 x 0) a bound from the ops (a
// fixed-size op's size; Resize's and RandomShortestSize's max_size cap the
// longer side, their size the shorter; RandomZoomOut grows what it is given
// by side_range's max; RandomIoUCrop only shrinks), never over
// max_decode_pixels (no step makes an image larger: CheckSteps).
uint64_t MaxOutputPixels(const PipelineParams& p);

// Bytes one output sample takes at most: MaxOutputPixels * 3 * the dtype's
// size. 0 for an unknown dtype.
uint64_t MaxSampleBytes(const PipelineParams& p);

// What keys a sample's randomness: the same key gives the same pixels.
struct SampleKey {
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint64_t dataset_index = 0;
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
};

// "crop", "resize", "pad", "hflip", "vflip", "color_jitter", "grayscale",
// "gaussian_blur", "affine", "rotate", "posterize", "solarize", "sharpness",
// "autocontrast", "equalize", "invert", "mix_begin", "mix_chain", "mix_end",
// "erase" (the image tool's step JSON); "unknown" otherwise.
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

// The most steps one sample may have; ValidateParams refuses op lists that
// could make more (each op's most: RandomCrop 3, RandAugment num_ops, AugMix
// 2 + width * (1 + depth), ...).
inline constexpr uint32_t kMaxSteps = 128;

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
// range; RandomResize: the shorter side, a uniform integer in [min, max);
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

// Checks that each step applies to the image the steps before it make,
// from a height x width image, and gives the final size. INVALID_ARGUMENT
// for a step that does not apply (a crop outside its image, ...);
// RESOURCE_EXHAUSTED when an image made on the way has over max_pixels.
[[nodiscard]] absl::Status CheckSteps(const SampleSteps& steps, uint32_t height, uint32_t width,
                                      uint64_t max_pixels, uint32_t* out_height,
                                      uint32_t* out_width);

// How a sample's JPEG was decoded (SampleResult::decode_path; counted per
// session in Status). Every path gives the same pixels as kWhole at the
// same DCT scale: only the work differs.
enum class DecodePath : uint32_t {
  kWhole = 0,     // every scan of the file as read
  kDcScans = 1,   // progressive file at DCT scale 1/8: only the scans that
                  // scale reads (the DC scans, and the AC scans of components
                  // whose reduced IDCT is larger than 1x1)
  kBaseline = 2,  // the worker decoded the transcode cache's baseline copy
                  // of a progressive file (set by the worker, not here)
  kRestartWindow = 3,  // baseline file with restart markers: only the restart
                       // intervals the crop's rows and columns need
                       // (JpegDecoder::Window)
};
inline constexpr uint32_t kDecodePathCount = 4;

// The name of a path in Status (DecodePathStatus.path), stokerctl and
// stoker-image-tool: "whole", "dc_scans", "baseline", "restart_window";
// "unknown" out of range.
const char* DecodePathName(DecodePath path);

struct SampleResult {
  uint32_t height = 0;  // of the written sample
  uint32_t width = 0;
  uint32_t channels = 0;
  uint64_t bytes = 0;
  uint64_t decode_ns = 0;   // JPEG header + entropy decode + IDCT
  uint64_t augment_ns = 0;  // the steps, the output conversion and the write into `out`
  DecodePath decode_path = DecodePath::kWhole;
  uint32_t dct_scale = 8;   // the DCT scale used, scale/8 (8: full size)
  bool progressive = false; // the file decoded was progressive
  // The file's format by its content; set whether or not the sample
  // succeeded (kUnknown: not a format stoker reads, or not sniffed: invalid
  // params).
  ImageFormat format = ImageFormat::kUnknown;
  // The image's size (displayed orientation) its steps were drawn for, once
  // known (Process): a mask moved by the same steps must have it.
  uint32_t drawn_height = 0;
  uint32_t drawn_width = 0;
};

// Reuses its buffers between samples; one per thread (not thread-safe).
class SampleProcessor {
 public:
  SampleProcessor();
  ~SampleProcessor();
  SampleProcessor(const SampleProcessor&) = delete;
  SampleProcessor& operator=(const SampleProcessor&) = delete;

  // Decodes `jpeg`, runs the ops of `p` with the randomness of `key`
  // (DrawSteps) and writes the sample to `out` (at most `capacity` bytes; at
  // least MaxSampleBytes(p) for fixed-shape outputs) as p's dtype and
  // layout. A bad or hostile file returns a non-OK status whose message is
  // the reason (INVALID_ARGUMENT for corrupt data or a sample whose size is
  // not the fixed output shape, UNIMPLEMENTED for unsupported JPEG kinds,
  // RESOURCE_EXHAUSTED for caps: no image, decoded or made by an op, may
  // have more than max_decode_pixels pixels); it never crashes or aborts.
  //
  // Execution: when the steps start with geometry it can fuse (a crop, one
  // resize, a crop inside the resized image: what RandomResizedCrop, Resize
  // and Resize + CenterCrop give), only the rows and columns that geometry
  // reads are decoded, at a reduced DCT scale when it reads many
  // (pipeline.cc: kMinDecodedPerOutput) decoded pixels per output pixel on
  // both axes (never with exact_decode), and resampled in one pass.
  // Resampling follows Pillow's BILINEAR resize (kAntialias) or plain
  // bilinear (kBilinear). Flips at the end (or followed by per-pixel ops
  // only: color jitter, grayscale, the point ops, autocontrast, equalize)
  // are folded into the output conversion; every other step runs on a uint8
  // RGB image (ops.h): affine and rotate into a second buffer, AugMix's
  // chains each from a copy of the image at kMixBegin into a float32 sum.
  // Erase steps run on the output once it is written. With apply_exif the EXIF orientation is
  // applied first; by default it is not (PIL's Image.open + convert, what
  // torchvision's ImageFolder gives, does not turn the image).
  //
  // `drawn`, when not null, receives the steps drawn (count 0 when the
  // sample failed before its draw: a bad file, invalid params).
  [[nodiscard]] absl::Status Process(const uint8_t* jpeg, size_t size, const PipelineParams& p,
                                     const SampleKey& key, void* out, size_t capacity,
                                     SampleResult* result, SampleSteps* drawn = nullptr);

  // Like Process, but runs the given steps instead of drawing them from
  // p's ops (p's ops are ignored; its output fields apply): for tests, tools
  // and fidelity checks. INVALID_ARGUMENT if a step does not apply to the
  // image it gets (a crop not inside it, an unknown kind, an even kernel,
  // ...) or the result is not p's fixed output shape.
  [[nodiscard]] absl::Status ProcessSteps(const uint8_t* jpeg, size_t size,
                                          const PipelineParams& p, const SampleSteps& steps,
                                          void* out, size_t capacity, SampleResult* result);

  // On (the default), a progressive file decoded at DCT scale 1/8 skips the
  // AC scans that scale never reads (DecodePath::kDcScans; same pixels).
  // Off, every file is decoded whole: for tests and measurements.
  void set_skip_unneeded_scans(bool on);

  // On, the inputs given are baseline copies of progressive originals (the
  // transcode cache's): where the original would decode faster, at DCT
  // scale 1/8 (DecodePath::kDcScans reads only its DC scans), Process stops
  // before the decode and returns ABORTED, and the caller decodes the
  // original instead. Off by default.
  void set_inputs_are_baseline_copies(bool on);

  // The sample's boxes for the next Process's draw (RandomIoUCrop reads
  // them: DrawSteps), `count` XYXY boxes in pixels of the decoded image;
  // not owned, read during Process only. nullptr, 0: none.
  void set_boxes(const float* xyxy, uint32_t count);

  // Gives back the working buffers larger than `max_bytes` (they grow to
  // the largest sample seen and stay: a 64 Mpx PNG left 190 MB), and the
  // other formats' decoders with theirs when any was. Between samples only.
  // True when it gave something back.
  bool TrimBuffers(size_t max_bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_PIPELINE_H_
