// The pipeline contract's one definition: the keywords the front ends take,
// the presets, every default and every check of a stoker.v1.PipelineSpec
// (stoker.proto documents each op). The daemon, the C++ client (and so the
// Python module) and stokerctl all go through here; nothing else knows a
// default or a parameter's range.
//
//   front end                     here                          daemon
//   Loader(**kw) / transform=  -> SpecFromKeywordsJson() --+
//   stokerctl consume --flags  -> SpecFromKeywordsJson() --+--> Attach --> Effective()
//   AttachOptions::pipeline    -> SpecFromKeywordsJson() --+       (expand the preset, fill
//                                                                   defaults, check, size)
//
// Keywords (a JSON object; every one optional):
//   pipeline      "train" | "eval" | "decode": the preset (default "train"
//                 unless `ops` is given)
//   ops           an op list as stoker.proto's JSON mapping:
//                 [{"RandomCrop": {"size": [32], "padding": [4]}}, ...];
//                 [] is the image as decoded (the "decode" preset)
//   size          int or [h, w]: the preset's crop; with ops, the output
//                 size every sample must have (PipelineSpec.size)
//   height, width the same as size, one side each (both or neither)
//   resize_size   eval preset: Resize's size (default round(256*min(size)/224))
//   scale, ratio  train preset: RandomResizedCrop's
//   flip_prob     train preset: RandomHorizontalFlip's p
//   interpolation "bilinear" or "bicubic"; the preset's resampling op's
//   antialias     bool; the preset's resampling op's (default true)
//   dtype         "uint8" | "float32" | "float16"
//   layout        "nhwc" | "nchw"
//   mean, std     1 or 3 numbers
//   max_decode_pixels, exact_decode, apply_exif_orientation
//   views         multi-view samples: [{"ops": [...], "size": 224, "count": 2}, ...]
//                 (PipelineSpec.views); beside the output keywords only
// A keyword that the chosen preset has no op for (scale with "eval"), or a
// preset keyword beside `ops`, is INVALID_ARGUMENT naming both.
//
// Its parts: this file's pipeline_spec.cc (keywords, presets, Effective,
// Describe), op_defaults.h (each op's defaults and checks, its step bound)
// and spec_text.h (JSON into messages and back, the messages' text).
//
// Thread safety: all functions are pure (no state), safe from any thread.
// Errors: INVALID_ARGUMENT with a message that names the keyword, or the op
// by position and torchvision name ("ops[2] ColorJitter: hue [-0.6, 0.6]
// must be a range [min, max] within [-0.5, 0.5]"), and says what would be
// accepted.

#ifndef STOKER_PIPELINE_PIPELINE_SPEC_H_
#define STOKER_PIPELINE_PIPELINE_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::pipeline {

// The most ops a pipeline may have (image::PipelineParams holds this many;
// pipeline/lower_pipeline.cc checks that the two agree).
inline constexpr uint32_t kMaxOps = 32;
// The most views a multi-view sample may have (PipelineSpec.views, each
// view's count included; image::kMaxViews is the same).
inline constexpr uint32_t kMaxViews = 12;
// The largest output (each side, and in all), the largest size an op may
// name, and the largest max_decode_pixels.
inline constexpr uint32_t kMaxOutputSide = 8192;
inline constexpr uint64_t kMaxOutputPixels = 16ull << 20;
inline constexpr uint32_t kMaxResizeSide = 65500;
inline constexpr uint64_t kMaxMaxDecodePixels = 1ull << 32;

// RandomShortestSize's most min_size values (torchvision takes any; the
// detection reference's multi-scale recipe has 11). image::kMaxShortestSizes
// is the same (pipeline/lower_pipeline.cc asserts it).
inline constexpr uint32_t kMaxShortestSizes = 16;

// The policies' counts: RandAugment's num_ops, AugMix's mixture_width and
// chain_depth (torchvision takes any; a sample's steps are held in a fixed
// array, image::kMaxSteps). pipeline/lower_pipeline.cc asserts that they equal
// image's kMaxPolicyOps, kMaxAugMixWidth and kMaxAugMixDepth.
inline constexpr uint32_t kMaxPolicyOps = 8;
inline constexpr uint32_t kMaxAugMixWidth = 8;
inline constexpr uint32_t kMaxAugMixDepth = 8;
// The most magnitude bins a policy may have (torchvision takes any): the
// bins' values reproduce torch's float32 linspace bit for bit up to this
// many (server/image/ops/policy.h: TorchLinspace).
inline constexpr uint32_t kMaxMagnitudeBins = 32768;

// The most steps one sample's ops may make (image::kMaxSteps, which
// pipeline/lower_pipeline.cc asserts equal): what each op can make at most
// (a crop op 2, RandomCrop 3, AutoAugment 2, RandAugment num_ops,
// TrivialAugmentWide 1, AugMix 2 + mixture_width * (1 + depth, 3 for -1),
// any other op 1), summed over the list.
inline constexpr uint32_t kMaxSteps = 128;

// The resampling of the affine ops (RandomRotation, RandomAffine) and of the
// policies' geometric ops, as torchvision names it, in the order NEAREST,
// BILINEAR (pipeline/lower_pipeline.cc lowers them by name).
inline constexpr std::string_view kAffineInterpolations[] = {"nearest", "bilinear"};
// The resizes' resampling: Pillow's BILINEAR (antialias=false: plain 2-tap)
// and BICUBIC (antialiased only, as torchvision's PIL path does it).
inline constexpr std::string_view kResizeInterpolations[] = {"bilinear", "bicubic"};

// AutoAugment's policies (torchvision's AutoAugmentPolicy values), the
// default first, in the order of image::AutoAugmentPolicy (value index + 1).
inline constexpr std::string_view kAutoAugmentPolicies[] = {"imagenet", "cifar10", "svhn"};

// RandomCrop's padding modes as torchvision names them, the default first,
// in the order of image::PadMode (pipeline/lower_pipeline.cc lowers by index).
inline constexpr std::string_view kPaddingModes[] = {"constant", "edge", "reflect", "symmetric"};

// The request form of a pipeline from its keywords (a JSON object, as
// above; "" means "{}"). Only what the keywords say is set: defaults are
// left to Effective(), so every front end sends the same spec for the same
// request and the daemon alone decides the rest. A preset keyword (scale,
// resize_size, ...) expands the preset into its op list with only that
// parameter set, the preset's name kept in `preset`:
//   {"pipeline": "eval", "size": 160}  -> preset "eval", size [160]
//   {"flip_prob": 0}                   -> preset "train", ops
//                                         [RandomResizedCrop {}, RandomHorizontalFlip {p: 0}]
// In an op list a bare value stands for a 1-element list where the op takes
// a list ({"RandomCrop": {"size": 32, "padding": 4}}); JSON's null is unset;
// RandomErasing's "value": "random" (torchvision's spelling) sets its
// value_random.
absl::StatusOr<v1::PipelineSpec> SpecFromKeywordsJson(std::string_view keywords_json);

// The spec after defaults, as the daemon runs it and reports it: the preset
// expanded into ops (its name kept in `preset`), every op parameter and the
// output filled in, `size` set to the output size (empty: each image comes
// out at a size of its own; a batch of them is served as it is, each sample
// with its own height and width: clients list or pad them), every value
// checked. A spec may name a preset and hold ops only when the ops
// are that preset's list (op kinds in order; as Effective and the preset
// keywords make it); otherwise it is INVALID_ARGUMENT. RandomErasing works
// on the output tensor: only RandomErasing may follow it, its "random"
// value needs a float dtype, and with a uint8 output its values are whole
// numbers 0..255. Effective forms that differ from the request's: angle
// ranges [d] -> [-d, d] (RandomAffine's shear [s] -> [-s, s], still x only:
// 2 values draw one shear, 4 two), fills and RandomErasing's value 1 -> 3
// values; RandomAffine's translate, scale and shear and the affine ops'
// center stay empty when not given (torchvision's None).
// Effective(Effective(s)) == Effective(s).
absl::StatusOr<v1::PipelineSpec> Effective(const v1::PipelineSpec& spec);

// One line for people (stokerctl, logs): the preset's name and the op list,
// then the output, e.g. "train: RandomResizedCrop(size=[224, 224], ...),
// RandomHorizontalFlip(p=0.5) -> 224x224 uint8 nhwc" ("any size" for an
// any-size effective spec; mean/std for floats; then the flags that are
// set). A request spec is described as given, unset fields left out.
std::string Describe(const v1::PipelineSpec& spec);

// The ops a composition (RandomApply, RandomChoice, RandomOrder) holds, or
// nullptr for any other op: what Effective fills in and lowering flattens.
const google::protobuf::RepeatedPtrField<v1::Op>* ComposedOps(const v1::Op& op);

// The spec as JSON, and back: the proto's JSON mapping with the proto's
// field names (snake_case, as the keywords spell them), torchvision's op
// names, integers as numbers, floats in their shortest exact form, unset
// fields left out. SpecFromJson also reads the mapping's other spellings
// (camelCase names, 64-bit integers as strings). ToJson of an effective
// spec, given to SpecFromJson and Effective, gives the same spec.
std::string ToJson(const v1::PipelineSpec& spec);
absl::StatusOr<v1::PipelineSpec> SpecFromJson(std::string_view spec_json);

// The output's names and their ring enums (stoker/ring_layout.h): one table
// for every front end. 0 for an unknown name; "" for an unknown value.
uint32_t DTypeFromName(std::string_view name);
std::string_view DTypeName(uint32_t ring_dtype);
uint32_t LayoutFromName(std::string_view name);
std::string_view LayoutName(uint32_t ring_layout);

}  // namespace stoker::pipeline

#endif  // STOKER_PIPELINE_PIPELINE_SPEC_H_
