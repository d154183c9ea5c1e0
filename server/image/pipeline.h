// Decode + augment of one sample, from the bytes of a JPEG file to its place
// in a ring slot. Used by the worker processes, by the single-process bench
// loop and by tests. Pure computation: no I/O, no global state.
//
// Glossary
//   op     one torchvision transform with all its parameters (OpParams), as
//          the daemon lowers an effective stoker.v1.PipelineSpec
//          (server/lower_pipeline.h)
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

#ifndef STOKER_SERVER_IMAGE_PIPELINE_H_
#define STOKER_SERVER_IMAGE_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"

namespace stoker::image {

enum class Interpolation : uint32_t { kAntialias = 1, kBilinear = 2 };

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
};

enum class PadMode : uint32_t { kConstant = 0, kEdge = 1, kReflect = 2, kSymmetric = 3 };

// ColorJitter's adjustments, in torchvision's order (its randperm(4) indexes
// these).
enum JitterIndex : uint32_t { kBrightness = 0, kContrast = 1, kSaturation = 2, kHue = 3 };

inline constexpr uint32_t kMaxOps = 16;
// The limits the workers hold every pipeline to. The request checks
// (proto/stoker/pipeline_spec.h) have the same; server/lower_pipeline.cc
// asserts that they agree.
inline constexpr uint32_t kMaxOutputSide = 8192;
inline constexpr uint64_t kMaxOutputPixels = 16ull << 20;
inline constexpr uint32_t kMaxOpSide = 65500;  // any size an op names (JPEG's own limit)
inline constexpr uint64_t kMaxDecodePixelsLimit = 1ull << 32;

// torchvision's class name of an op kind ("RandomResizedCrop"), for
// messages and tools; "unknown" for a value outside OpKind.
const char* OpKindName(OpKind kind);

// One op with every parameter after defaults (the daemon lowers an
// effective stoker.v1.PipelineSpec into these: server/lower_pipeline.h).
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
};

// Plain-old-data so that it crosses the daemon -> worker socket verbatim.
// The daemon fills every field (defaults applied) from the Attach request.
struct PipelineParams {
  uint32_t op_count = 0;
  OpParams ops[kMaxOps];
  // The output's fixed shape, which every sample must have (one that does
  // not fails as a sample), or 0 x 0: each sample its own size (batch 1).
  uint32_t out_height = 0;
  uint32_t out_width = 0;
  // No defaults here (they are proto/stoker/pipeline_spec.cc's): a
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
};

// Checks every field: the op kinds and each op's parameters (sizes in
// 1..65500, scale/ratio ordered and positive, probabilities in [0, 1],
// jitter ranges, odd blur kernels, positive sigmas, ...), the output shape
// (both sides 0, or both in 1..8192 and at most 16 Mpx), dtype, layout,
// mean/std (std != 0). INVALID_ARGUMENT naming the op by position.
[[nodiscard]] absl::Status ValidateParams(const PipelineParams& p);

// Bytes one output sample takes: at the fixed output shape
// out_height * out_width * 3 * the dtype's size; for any-size outputs
// (0 x 0) max_decode_pixels * 3 * the dtype's size (no op makes an image
// larger than max_decode_pixels). 0 for an unknown dtype.
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
// its sigma. A step that would not change the image (a crop or resize to
// the same size) is left out. Steps are in displayed coordinates and apply
// in order, each to the image the previous one made.

enum class StepKind : uint32_t {
  kCrop = 1,            // top, left, height, width: inside the image
  kResize = 2,          // height, width, interpolation
  kPad = 3,             // pad (left, top, right, bottom), padding_mode, fill
  kHorizontalFlip = 4,
  kVerticalFlip = 5,
  kColorJitter = 6,     // jitter_order[0 .. jitter_count), factor
  kGrayscale = 7,       // PIL's convert("L"), copied to the 3 channels
  kGaussianBlur = 8,    // kernel_x, kernel_y (odd), sigma (both axes)
};

// "crop", "resize", "pad", "hflip", "vflip", "color_jitter", "grayscale",
// "gaussian_blur" (the image tool's step JSON); "unknown" otherwise.
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
};

// The most steps one op makes (RandomCrop: pad, pad, crop).
inline constexpr uint32_t kMaxStepsPerOp = 3;
inline constexpr uint32_t kMaxSteps = kMaxOps * kMaxStepsPerOp;

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
// range). Pure: the same arguments give the same steps. `p` must have
// passed ValidateParams. INVALID_ARGUMENT when an op cannot apply to the
// image as torchvision would raise (RandomCrop larger than the padded image).
[[nodiscard]] absl::Status DrawSteps(const PipelineParams& p, uint32_t height, uint32_t width,
                                     const SampleKey& key, SampleSteps* steps);

struct SampleResult {
  uint32_t height = 0;  // of the written sample
  uint32_t width = 0;
  uint32_t channels = 0;
  uint64_t bytes = 0;
  uint64_t decode_ns = 0;   // JPEG header + entropy decode + IDCT
  uint64_t augment_ns = 0;  // the steps, the output conversion and the write into `out`
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
  // only) are folded into the output conversion; every other step runs on
  // a uint8 RGB image (ops.h). With apply_exif the EXIF orientation is
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_PIPELINE_H_
