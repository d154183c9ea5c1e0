// What a pipeline is, as the workers run it: its ops with every parameter
// after defaults (OpParams, PipelineParams: plain-old-data that crosses the
// daemon -> worker socket verbatim), the limits every pipeline is held to,
// and the bounds of what it may make (ValidateParams, MaxOutputPixels,
// MaxSampleBytes). Pure functions: thread-safe.
//
// The daemon lowers an effective stoker.v1.PipelineSpec into these
// (pipeline/lower_pipeline.h); steps.h draws each sample's steps from them;
// pipeline.h's SampleProcessor runs those.

#ifndef STOKER_SERVER_IMAGE_PIPELINE_PARAMS_H_
#define STOKER_SERVER_IMAGE_PIPELINE_PARAMS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "server/image/op_list.h"

namespace stoker::image {

// kAntialias, kBicubic, kBilinear: the resizes (Pillow's resize BILINEAR or
// BICUBIC, or plain 2-tap bilinear). kNearest, kBilinear: the affine ops (RandomRotation,
// RandomAffine, the policies' geometric ops), as PIL's Image.transform /
// Image.rotate resample them (NEAREST, BILINEAR).
enum class Interpolation : uint32_t { kAntialias = 1, kBilinear = 2, kNearest = 3, kBicubic = 4 };

// The ops a pipeline is made of: torchvision's transforms of the same names,
// as op_list.h lists them (stoker.proto's Op documents each one's semantics).
enum class OpKind : uint32_t {
  kNone = 0,
#define STOKER_OP_KIND(kind, number, ...) kind = number,
  STOKER_OP_LIST(STOKER_OP_KIND)
#undef STOKER_OP_KIND
};

// Whether `kind` is a composition (RandomApply, RandomChoice, RandomOrder):
// its op_list.h flags hold kOpHoldsOps.
inline constexpr bool IsComposition(OpKind kind) {
#define STOKER_OP_HOLDS(k, number, name, moves, source, flags) \
  if (kind == OpKind::k) return ((flags) & kOpHoldsOps) != 0;
  STOKER_OP_LIST(STOKER_OP_HOLDS)
#undef STOKER_OP_HOLDS
  return false;
}
// The most ops one composition holds.
inline constexpr uint32_t kMaxChildren = 8;

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

inline constexpr uint32_t kMaxOps = 32;
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
  float sigma[2] = {0, 0};    // GaussianBlur: [min, max], > 0; ImageFilterGaussianBlur: radius
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
  // The compositions (IsComposition): the ops right after this one that are
  // its own, 1..kMaxChildren; RandomApply's chance is `p`, RandomChoice's
  // weights are `weights` (one per child, >= 0, a positive sum).
  uint32_t children = 0;
  float weights[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  // RandomPerspective: distortion_scale in [0, 1] (p, interpolation, fill above).
  float distortion = 0;
  // ElasticTransform: alpha and sigma per axis [x, y] (interpolation, fill above).
  float elastic_alpha[2] = {0, 0};
  float elastic_sigma[2] = {0, 0};
};

// RandomShortestSize's most sizes (the detection reference's multi-scale
// recipe has 11).
inline constexpr uint32_t kMaxShortestSizes = 16;
static_assert(sizeof(OpParams::shortest) / sizeof(uint32_t) == kMaxShortestSizes);
static_assert(sizeof(OpParams::weights) / sizeof(float) == kMaxChildren);

// Bounds of the policies' own counts (ValidateParams).
inline constexpr uint32_t kMaxPolicyOps = 8;    // RandAugment num_ops
inline constexpr uint32_t kMaxAugMixWidth = 8;
inline constexpr uint32_t kMaxAugMixDepth = 8;
inline constexpr uint32_t kMaxAugMixSeverity = 10;  // torchvision's _PARAMETER_MAX

// The other ops' parameter ranges, checked by the front ends' keywords
// (pipeline/op_defaults.cc) and the workers' ValidateParams alike: each
// bound is written here only.
inline constexpr uint32_t kMaxPosterizeBits = 8;      // RandomPosterize: 0..8
inline constexpr float kMaxHueShift = 0.5f;           // ColorJitter's hue: [-0.5, 0.5]
inline constexpr float kMaxZoomOutSide = 16.0f;       // RandomZoomOut: 1 <= side_range <= 16
inline constexpr uint32_t kMaxIoUOptions = 8;         // RandomIoUCrop's sampler_options
inline constexpr uint32_t kMaxIoUTrials = 1000;       // and trials: 1..1000
inline constexpr float kMaxElasticSigma = 1000.0f;    // ElasticTransform: a kernel of 8001 taps
// ImageFilterGaussianBlur's radius: wider than any image it meets (every pixel
// tends to the image's mean long before), small enough that Pillow's 32-bit
// box sums (ops/box_blur.h) cannot overflow.
inline constexpr float kMaxBoxBlurRadius = 1000.0f;
// RandAugment's and TrivialAugmentWide's num_magnitude_bins: 2..this (the
// bins are torch's float32 linspace values, reproduced up to this many:
// policy.h's TorchLinspace).
inline constexpr uint32_t kMaxMagnitudeBins = 32768;

// A multi-view pipeline's views (stoker.proto's PipelineSpec.views): one
// view's ops are PipelineParams::ops [first_op, first_op + op_count), run on
// the sample's decoded image `copies` times, each drawn anew, each making
// an out_height x out_width output.
struct ViewParams {
  uint32_t first_op = 0;
  uint32_t op_count = 0;
  uint32_t out_height = 0;
  uint32_t out_width = 0;
  uint32_t copies = 0;
};
// The most views of a sample, copies included (pipeline::kMaxViews).
inline constexpr uint32_t kMaxViews = 12;

// Plain-old-data so that it crosses the daemon -> worker socket verbatim.
// The daemon fills every field (defaults applied) from the Attach request.
struct PipelineParams {
  uint32_t op_count = 0;
  OpParams ops[kMaxOps];
  // 0: one output per sample, made by all of `ops`. Else the views, which
  // partition `ops` in order; out_height x out_width is then views[0]'s.
  uint32_t view_count = 0;
  ViewParams views[kMaxViews];
  // The output's fixed shape, which every sample must have (one that does
  // not fails as a sample), or 0 x 0: each sample its own size (at most
  // MaxOutputPixels).
  uint32_t out_height = 0;
  uint32_t out_width = 0;
  // No defaults here (they are pipeline/'s, pipeline_spec.h): a
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

// The outputs a sample of `p` makes: the views with their copies (view
// order, each view's copies together), or 1 without views.
uint32_t OutputCount(const PipelineParams& p);
// Which view output `k` (< OutputCount(p)) of a multi-view pipeline is.
uint32_t ViewOfOutput(const PipelineParams& p, uint32_t k);
// The pipeline of view `v` (< p.view_count) alone: p with that view's ops
// and output size, and no views. What DrawSteps and the worker run for it.
void ViewPipeline(const PipelineParams& p, uint32_t v, PipelineParams* out);

// Checks every field: the op kinds and each op's parameters (sizes in
// 1..65500, scale/ratio ordered and positive, probabilities in [0, 1],
// jitter ranges, odd blur kernels, positive sigmas, the affine ops' ranges
// and nearest / bilinear resampling, the policies' counts and bins, ...),
// RandomErasing only after every other op (and, for uint8 outputs, whole
// values and no noise), at most kMaxSteps steps from all the ops together
// (each op's most), the output shape (both sides 0, or both in 1..8192 and
// at most 16 Mpx), dtype, layout, mean/std (std != 0); with views, each
// view as a pipeline of its own (a fixed output shape, no RandomIoUCrop),
// the views covering the ops in order, 1..kMaxViews outputs in all.
// INVALID_ARGUMENT naming the op by position.
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

// The most steps one sample may have; ValidateParams refuses op lists that
// could make more (each op's most: RandomCrop 3, RandAugment num_ops, AugMix
// 2 + width * (1 + depth), ...).
inline constexpr uint32_t kMaxSteps = 128;

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_PIPELINE_PARAMS_H_
