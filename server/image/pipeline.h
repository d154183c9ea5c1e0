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
//
// Its parts: pipeline_params.h (the ops and their limits), steps.h (the
// draw), this file (the decode and the run).

#ifndef STOKER_SERVER_IMAGE_PIPELINE_H_
#define STOKER_SERVER_IMAGE_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/pipeline_params.h"
#include "server/image/steps.h"

namespace stoker::image {

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

  // A multi-view sample (p.view_count > 0; Process refuses those): the
  // image is decoded once, whole and at full scale (never fused nor DCT
  // scaled, so each view equals torchvision's on PIL's full decode), and
  // each of its OutputCount(p) outputs is made from it by its view's ops
  // (ViewPipeline), drawn from `key` with key.output = the output's index,
  // into outs[k] (capacities[k] bytes, at least that view's sample bytes).
  // `result` is output 0's, with `bytes` the sum over all outputs and the
  // decode counted once. `drawn`, when not null, gets OutputCount(p) entries.
  // Errors as Process's; the first output that fails fails the sample.
  [[nodiscard]] absl::Status ProcessViews(const uint8_t* data, size_t size,
                                          const PipelineParams& p, const SampleKey& key,
                                          void* const* outs, const size_t* capacities,
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
