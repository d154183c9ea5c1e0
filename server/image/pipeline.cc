#include "server/image/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/image/ops/box_blur.h"
#include "server/image/ops/boxes.h"
#include "server/image/param_checks.h"
#include "server/image/decode/decode_planner.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/decode/jpeg_decoder.h"
#include "server/image/ops/ops.h"
#include "server/image/ops/perspective.h"
#include "server/image/ops/policy.h"
#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using namespace internal;  // NOLINT: param_checks.h, this folder's own

// "47 49 46 38 39 61 (\"GIF89a\")": a file's first bytes, for the message
// naming a format stoker does not read.
std::string StartBytes(const uint8_t* data, size_t size) {
  if (size == 0) return "nothing (an empty file)";
  const size_t n = std::min<size_t>(size, 6);
  std::string hex, text;
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppend(&hex, i == 0 ? "" : " ", absl::Hex(data[i], absl::kZeroPad2));
    const bool shown = data[i] >= 0x20 && data[i] < 0x7f && data[i] != '"';
    text.push_back(shown ? static_cast<char>(data[i]) : '.');
  }
  return absl::StrCat(hex, " (\"", text, "\")");
}

// One axis' resample plan for a resize's interpolation (kAntialias,
// kBicubic or kBilinear).
void BuildPlan(Interpolation interpolation, const AxisSpec& spec, uint32_t size, AxisPlan* plan) {
  if (interpolation == Interpolation::kBilinear) {
    BuildBilinearPlan(spec, size, plan);
  } else if (interpolation == Interpolation::kBicubic) {
    BuildAntialiasPlan(spec, size, plan, PilFilter::kBicubic);
  } else {
    BuildAntialiasPlan(spec, size, plan);
  }
}

constexpr uint32_t kChunkRows = 16;
constexpr uint32_t kCropMargin = 16;  // decoded pixels, see DecodeFused

// A DCT-scaled decode filters differently from Pillow's full decode + resize
// (each 8x8 block's spectrum truncated; chroma upsampling and the clipping of
// the RGB pixels done at the reduced size), an error that fades only when the
// resize after it still averages several decoded pixels per output pixel.
// The fewest (per output pixel, on each axis) that keep the mean absolute
// error against Pillow under 0.8 levels of 255 on finely textured images
// (print, fur, woven fabric at 4:2:0 and 4:4:4: tests/python/
// textured_corpus.py), measured: worst 0.72 at half scale, fabric, 32 px
// output. At 1 (scaled whenever the crop stayed as large as the output) the
// worst was 11 levels; at 4, 0.94; at 5, 0.81.
constexpr double kMinDecodedPerOutput = 6.5;


uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Grows `v` to at least n elements, never shrinking its storage.
template <typename T>
T* Room(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

namespace {

// The leading steps the decode can do itself: [crop] [resize [crop]], as
// one resample of a decoded region. `next` is the first step left.
struct FusedGeometry {
  bool fused = false;
  AxisSpec y, x;  // in displayed coordinates
  Interpolation interpolation = Interpolation::kAntialias;
  uint32_t next = 0;
};

// Whether a step changes its image where it lies (else it writes a new one).
bool WorksInPlace(StepKind k) {
  switch (k) {
    case StepKind::kCrop:
    case StepKind::kResize:
    case StepKind::kPad:
    case StepKind::kGaussianBlur:
    case StepKind::kAffine:
    case StepKind::kRotate:
    case StepKind::kPerspective:
    case StepKind::kElastic:
    case StepKind::kBoxBlur:
      return false;
    default:
      return true;
  }
}

FusedGeometry PlanFused(const SampleSteps& steps, uint32_t height, uint32_t width) {
  FusedGeometry g;
  uint32_t i = 0;
  uint32_t top = 0, left = 0, crop_h = height, crop_w = width;
  if (i < steps.count && steps.steps[i].kind == StepKind::kCrop) {
    const Step& s = steps.steps[i++];
    top = s.top, left = s.left, crop_h = s.height, crop_w = s.width;
    g.fused = true;
  }
  uint32_t resized_h = crop_h, resized_w = crop_w;
  uint32_t off_y = 0, off_x = 0, out_h = crop_h, out_w = crop_w;
  if (i < steps.count && steps.steps[i].kind == StepKind::kResize) {
    const Step& s = steps.steps[i++];
    resized_h = out_h = s.height;
    resized_w = out_w = s.width;
    g.interpolation = s.interpolation;
    g.fused = true;
    if (i < steps.count && steps.steps[i].kind == StepKind::kCrop) {
      const Step& c = steps.steps[i++];
      off_y = c.top, off_x = c.left, out_h = c.height, out_w = c.width;
    }
  }
  if (!g.fused) return g;
  g.y = CropResizeCropAxis(top, crop_h, resized_h, static_cast<int32_t>(off_y), out_h);
  g.x = CropResizeCropAxis(left, crop_w, resized_w, static_cast<int32_t>(off_x), out_w);
  g.next = i;
  return g;
}

}  // namespace

struct SampleProcessor::Impl {
  // The next draw's boxes (set_boxes; not owned).
  const float* boxes = nullptr;
  uint32_t box_count = 0;
  // Constant after construction: none. Everything below is scratch reused
  // between samples; it grows to the largest sample seen and stays.
  JpegDecoder decoder;
  // The other formats' decoders, made on first use (MakeDecoder).
  std::unique_ptr<ImageDecoder> decoders[kImageFormatCount];
  // The current sample's: its format, and its decoder unless a JPEG. For
  // the other formats `header` holds the size, orientation 1.
  ImageFormat format = ImageFormat::kJpeg;
  ImageDecoder* other = nullptr;
  JpegHeader header;
  std::vector<uint8_t> chunk;  // kChunkRows decoded rows
  std::vector<uint8_t> region;  // a non-JPEG image's rows the fused geometry reads
  std::vector<uint8_t*> row_ptrs;
  std::vector<uint8_t> rgb_row;  // one row converted from CMYK
  std::vector<uint8_t> hpass;    // horizontal pass output, one row per source row
  std::vector<uint8_t> decoded;  // a multi-view sample's image, decoded once
  std::vector<uint8_t> image;    // the image the steps work on
  std::vector<uint8_t> spare;    // where a step that cannot work in place writes
  std::vector<int32_t> acc;
  std::vector<float> blur;
  std::vector<float> field;     // an elastic step's displacement
  std::vector<uint8_t> scratch8;   // sharpness's copy of the image; a box blur's line
  std::vector<uint8_t> mix_start;  // the image at kMixBegin
  std::vector<float> mix_acc;      // AugMix's weighted sum
  AxisPlan plan_x, plan_y;
  SampleSteps drawn;
  uint64_t decode_ns = 0;
  bool skip_unneeded_scans = true;
  bool inputs_are_baseline_copies = false;
  DecodePath decode_path = DecodePath::kWhole;  // of the current sample
  uint32_t dct_scale = 8;

  absl::Status Open(const uint8_t* jpeg, size_t size, const PipelineParams& p);
  // `source`: the image already decoded whole (raw orientation, header's
  // size), which Execute reads and leaves as it is; nullptr: decode it here.
  absl::Status Execute(const PipelineParams& p, const SampleSteps& steps, void* out,
                       size_t capacity, SampleResult* result,
                       const uint8_t* source = nullptr);
  absl::Status DecodeFused(const PipelineParams& p, const FusedGeometry& g, uint8_t* dst);
  absl::Status DecodeWhole(uint8_t* dst);
  absl::Status DecodeFusedOther(const PipelineParams& p, const FusedGeometry& g, uint8_t* dst);
  absl::Status ResizeImage(const uint8_t* src, uint32_t h, uint32_t w, const Step& s,
                           uint64_t max_pixels, uint8_t* dst);

  uint32_t OrientedHeight() const {
    return SwapsAxes(header.orientation) ? header.width : header.height;
  }
  uint32_t OrientedWidth() const {
    return SwapsAxes(header.orientation) ? header.height : header.width;
  }

  // Reads up to `rows` rows into the chunk buffer; timed as decode.
  absl::Status ReadChunk(uint32_t rows, uint32_t* got) {
    const uint64_t t0 = NowNs();
    absl::Status s = decoder.ReadRows(row_ptrs.data(), rows, got);
    decode_ns += NowNs() - t0;
    if (s.ok() && *got == 0) return absl::InternalError("libjpeg returned no rows");
    return s;
  }

  // The frame of Process and ProcessSteps: checks, Open, then `render`
  // with the oriented height and width. A failed sample leaves the decoder
  // reset and an empty result; both report their stage times.
  template <typename Render>
  absl::Status Run(const uint8_t* jpeg, size_t size, const PipelineParams& p, const void* out,
                   SampleResult* result, Render&& render) {
    const uint64_t start = NowNs();
    *result = SampleResult();
    decode_ns = 0;
    decode_path = DecodePath::kWhole;
    dct_scale = 8;
    format = ImageFormat::kUnknown;
    other = nullptr;
    absl::Status s = ValidateParams(p);
    if (!s.ok()) return s;
    if (out == nullptr) return absl::InvalidArgumentError("no output buffer");
    try {
      s = Open(jpeg, size, p);
      if (s.ok()) s = render(OrientedHeight(), OrientedWidth());
    } catch (const std::bad_alloc&) {
      s = absl::ResourceExhaustedError("out of memory while decoding");
    }
    if (!s.ok()) {
      decoder.Abort();
      *result = SampleResult();
    }
    result->format = format;
    const uint64_t total = NowNs() - start;
    result->decode_ns = decode_ns;
    result->augment_ns = total > decode_ns ? total - decode_ns : 0;
    if (s.ok()) {
      result->decode_path = decode_path;
      result->dct_scale = dct_scale;
      result->progressive = header.progressive;
    }
    return s;
  }
};

absl::Status SampleProcessor::Impl::Open(const uint8_t* jpeg, size_t size,
                                         const PipelineParams& p) {
  DecodeLimits limits;
  limits.max_pixels = p.max_decode_pixels;
  limits.read_exif = p.apply_exif != 0;
  const uint64_t t0 = NowNs();
  format = SniffFormat(jpeg, size);
  absl::Status s;
  if (format == ImageFormat::kJpeg) {
    s = decoder.ReadHeader(jpeg, size, limits, &header);
  } else if (format == ImageFormat::kUnknown) {
    s = absl::UnimplementedError(absl::StrCat(
        "not an image format stoker reads (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM): the file starts "
        "with ",
        StartBytes(jpeg, size)));
  } else {
    std::unique_ptr<ImageDecoder>& d = decoders[static_cast<uint32_t>(format)];
    if (d == nullptr) d = MakeDecoder(format);
    ImageHeader h;
    s = d->ReadHeader(jpeg, size, limits, &h);
    header = JpegHeader();
    if (s.ok()) {
      header.width = h.width;
      header.height = h.height;
      header.components = 3;
      other = d.get();
    }
  }
  decode_ns += NowNs() - t0;
  return s;
}

absl::Status SampleProcessor::Impl::Execute(const PipelineParams& p, const SampleSteps& steps,
                                            void* out, size_t capacity, SampleResult* result,
                                            const uint8_t* source) {
  const uint32_t oh = OrientedHeight(), ow = OrientedWidth();
  uint32_t fh = 0, fw = 0;
  absl::Status s = CheckSteps(steps, oh, ow, p.max_decode_pixels, &fh, &fw);
  if (!s.ok()) return s;
  if (p.out_height != 0 && (fh != p.out_height || fw != p.out_width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image is ", fw, "x", fh,
        steps.count == 0 ? "" : absl::StrCat(" after its ops (", ow, "x", oh, " decoded)"),
        ", the pipeline wants ", p.out_width, "x", p.out_height, " (width x height)"));
  }
  const uint64_t bytes = uint64_t{fh} * fw * 3 * ring::DTypeBytes(p.dtype);
  if (bytes > capacity) {
    const std::string what =
        absl::StrCat("image is ", fw, "x", fh, ": needs ", bytes, " bytes, capacity is ", capacity);
    return p.out_height != 0 ? absl::InvalidArgumentError(what)
                             : absl::ResourceExhaustedError(what);
  }

  // The plan: fused geometry [0, g.next), steps on the image [g.next, tail),
  // then flips (folded into the output's orientation) mixed with per-pixel
  // steps (run on the image, in order) up to the end.
  // A decoded source is never fused: every view starts from all of it.
  const FusedGeometry g = source != nullptr ? FusedGeometry{} : PlanFused(steps, oh, ow);
  // Erase steps (always last: CheckSteps) run on the output once written.
  uint32_t image_end = steps.count;
  while (image_end > g.next && steps.steps[image_end - 1].kind == StepKind::kErase) --image_end;
  uint32_t tail = image_end;
  while (tail > g.next &&
         (IsFlip(steps.steps[tail - 1].kind) || IsPerPixel(steps.steps[tail - 1].kind))) {
    --tail;
  }
  bool hflip = false, vflip = false;
  for (uint32_t i = tail; i < image_end; ++i) {
    const StepKind k = steps.steps[i].kind;
    hflip ^= k == StepKind::kHorizontalFlip;
    vflip ^= k == StepKind::kVerticalFlip;
  }
  int orientation = header.orientation;
  // Straight into the slot when nothing moves pixels after the decode: the
  // per-pixel steps of the tail then run in place there.
  const bool direct = tail == g.next && ComposeOrientation(orientation, hflip, vflip) == 1 &&
                      p.dtype == ring::kUint8 && p.layout == ring::kNHWC;

  // The decoded (and fused) image, raw orientation.
  const bool swap = SwapsAxes(orientation);
  uint32_t h = g.fused ? (swap ? g.x.out_size : g.y.out_size) : header.height;
  uint32_t w = g.fused ? (swap ? g.y.out_size : g.x.out_size) : header.width;
  uint8_t* cur = nullptr;
  if (source != nullptr && !direct && tail > g.next &&
      (orientation != 1 || !WorksInPlace(steps.steps[g.next].kind))) {
    // The first thing done reads the source into a new image.
    cur = const_cast<uint8_t*>(source);
  } else {
    cur = direct ? static_cast<uint8_t*>(out) : Room(image, size_t{h} * w * 3 + kResamplePadBytes);
    if (source != nullptr) {
      std::copy_n(source, size_t{h} * w * 3, cur);
    } else {
      s = g.fused ? (other != nullptr ? DecodeFusedOther(p, g, cur) : DecodeFused(p, g, cur))
                  : DecodeWhole(cur);
      if (!s.ok()) return s;
    }
  }
  {
    // Steps other than per-pixel ones work in displayed coordinates.
    if (tail > g.next && orientation != 1) {
      PipelineParams plain;
      plain.dtype = ring::kUint8;
      plain.layout = ring::kNHWC;
      uint8_t* dst = Room(spare, size_t{h} * w * 3 + kResamplePadBytes);
      EmitSample(cur, h, w, orientation, false, plain, dst);
      if (swap) std::swap(h, w);
      std::swap(image, spare);
      cur = dst;
      orientation = 1;
    }
    float mix_weight = 0;  // of the chain running, while mixing
    bool in_chain = false;
    for (uint32_t i = g.next; i < image_end; ++i) {
      const Step& st = steps.steps[i];
      if (i >= tail && IsFlip(st.kind)) continue;  // folded into the output
      const size_t pixels = size_t{h} * w;
      uint32_t nh = h, nw = w;
      uint8_t* dst = nullptr;  // set by the steps that do not work in place
      switch (st.kind) {
        case StepKind::kCrop: {
          nh = st.height, nw = st.width;
          dst = Room(spare, size_t{nh} * nw * 3 + kResamplePadBytes);
          CropBox box{st.top, st.left, st.height, st.width};
          CropImage(cur, w, box, dst);
          break;
        }
        case StepKind::kResize:
          nh = st.height, nw = st.width;
          dst = Room(spare, size_t{nh} * nw * 3 + kResamplePadBytes);
          s = ResizeImage(cur, h, w, st, p.max_decode_pixels, dst);
          if (!s.ok()) return s;
          break;
        case StepKind::kPad:
          nh = h + st.pad[1] + st.pad[3];
          nw = w + st.pad[0] + st.pad[2];
          dst = Room(spare, size_t{nh} * nw * 3 + kResamplePadBytes);
          PadImage(cur, h, w, st.pad, st.padding_mode, st.fill, dst);
          break;
        case StepKind::kHorizontalFlip:
          FlipHorizontal(cur, h, w);
          break;
        case StepKind::kVerticalFlip:
          FlipVertical(cur, h, w);
          break;
        case StepKind::kColorJitter:
          ColorJitter(cur, pixels, st);
          break;
        case StepKind::kGrayscale:
          ToGrayscale(cur, pixels);
          break;
        case StepKind::kGaussianBlur: {
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          float* scratch = Room(blur, GaussianBlurScratch(h, w, st.kernel_x, st.kernel_y));
          GaussianBlur(cur, h, w, st.kernel_x, st.kernel_y, st.sigma, scratch, dst);
          break;
        }
        case StepKind::kAffine:
        case StepKind::kRotate: {
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          double center[2] = {st.center[0], st.center[1]};
          if (st.tensor_kernels != 0) {
            // F.affine / F.rotate for a tensor: the center relative to the
            // image's, rotate's angle negated.
            double center_f[2] = {0.0, 0.0};
            if (st.has_center != 0) {
              center_f[0] = center[0] - w * 0.5, center_f[1] = center[1] - h * 0.5;
            }
            const bool rotate = st.kind == StepKind::kRotate;
            const double translate[2] = {rotate ? 0.0 : static_cast<double>(st.translate[0]),
                                         rotate ? 0.0 : static_cast<double>(st.translate[1])};
            const double no_shear[2] = {0.0, 0.0};
            double matrix[6];
            InverseAffineMatrix(center_f, rotate ? -static_cast<double>(st.angle) : st.angle,
                                translate, rotate ? 1.0 : st.affine_scale,
                                rotate ? no_shear : st.shear, matrix);
            for (double m : matrix) {
              if (!std::isfinite(m)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "step ", i, " (", StepKindName(st.kind),
                    "): its inverse matrix is not finite (scale, shear or angle too extreme)"));
              }
            }
            TensorAffine(cur, h, w, matrix, st.interpolation,
                         st.tensor_fill != 0 ? st.fill : nullptr, dst);
            break;
          }
          if (st.kind == StepKind::kRotate) {
            RotateImage(cur, h, w, st.angle, st.has_center != 0 ? center : nullptr,
                        st.interpolation, st.fill, dst);
            break;
          }
          double matrix[6];
          if (!AffineStepMatrix(st, h, w, matrix)) {
            return absl::InvalidArgumentError(
                absl::StrCat("step ", i,
                             " (affine): its inverse matrix is not finite (scale, shear or "
                             "angle too extreme)"));
          }
          AffineTransform(cur, h, w, matrix, st.interpolation, st.fill, dst);
          break;
        }
        case StepKind::kBoxBlur:
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          BoxBlur(cur, h, w, st.sigma, Room(scratch8, BoxBlurScratch(h, w)), dst);
          break;
        case StepKind::kElastic: {
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          const float sigma[2] = {st.elastic[2], st.elastic[3]};
          float* f = Room(field, pixels * 2);
          ElasticDisplacement(h, w, st.elastic, sigma, st.noise_seed, f,
                              Room(blur, ElasticScratch(h, w, sigma)));
          ElasticTransform(cur, h, w, f, st.interpolation, st.fill, dst);
          break;
        }
        case StepKind::kPerspective: {
          dst = Room(spare, pixels * 3 + kResamplePadBytes);
          double coeffs[8];
          if (!PerspectiveStepCoeffs(st, h, w, coeffs)) {
            return absl::InvalidArgumentError(
                absl::StrCat("step ", i, " (perspective): its corners give no transform"));
          }
          PerspectiveTransform(cur, h, w, coeffs, st.interpolation, st.fill, dst);
          break;
        }
        case StepKind::kPosterize:
          Posterize(cur, pixels, st.bits);
          break;
        case StepKind::kSolarize:
          Solarize(cur, pixels, st.threshold);
          break;
        case StepKind::kSharpness:
          if (st.tensor_kernels != 0) {
            // _apply_op's ratio, 1.0 + magnitude in double, for a policy's.
            const double ratio = st.from_policy != 0 ? 1.0 + static_cast<double>(st.aug_magnitude)
                                                     : static_cast<double>(st.factor[0]);
            TensorAdjustSharpness(cur, h, w, ratio, Room(scratch8, pixels * 3));
          } else {
            AdjustSharpness(cur, h, w, st.factor[0], Room(scratch8, pixels * 3));
          }
          break;
        case StepKind::kAutocontrast:
          if (st.tensor_kernels != 0) {
            TensorAutocontrast(cur, pixels);
          } else {
            Autocontrast(cur, pixels);
          }
          break;
        case StepKind::kEqualize:
          Equalize(cur, pixels);
          break;
        case StepKind::kInvert:
          Invert(cur, pixels);
          break;
        case StepKind::kChannelPermute: {
          const uint32_t* q = st.permutation;
          for (size_t k = 0; k < pixels; ++k) {
            uint8_t* px = cur + 3 * k;
            const uint8_t v[3] = {px[0], px[1], px[2]};
            px[0] = v[q[0]], px[1] = v[q[1]], px[2] = v[q[2]];
          }
          break;
        }
        case StepKind::kMixBegin:
          // Chains keep the size (CheckSteps): each restarts from this copy.
          std::copy_n(cur, pixels * 3, Room(mix_start, pixels * 3));
          MixStart(cur, pixels, st.mix_weight, Room(mix_acc, pixels * 3));
          in_chain = false;
          break;
        case StepKind::kMixChain:
          if (in_chain) {
            MixAdd(cur, pixels, mix_weight, mix_acc.data());
            std::copy_n(mix_start.data(), pixels * 3, cur);
          }
          in_chain = true;
          mix_weight = st.mix_weight;
          break;
        case StepKind::kMixEnd:
          if (in_chain) MixAdd(cur, pixels, mix_weight, mix_acc.data());
          MixFinish(mix_acc.data(), pixels, cur);
          in_chain = false;
          break;
        case StepKind::kErase:  // only after image_end
          return absl::InternalError("erase step on the image");
      }
      if (dst != nullptr) {
        std::swap(image, spare);
        cur = dst;
        h = nh, w = nw;
      }
    }
    if (!direct) {
      EmitSample(cur, h, w, ComposeOrientation(orientation, hflip, vflip), false, p, out);
    }
    for (uint32_t i = image_end; i < steps.count; ++i) {
      EraseOutput(out, fh, fw, p.dtype, p.layout, steps.steps[i]);
    }
  }
  result->height = fh;
  result->width = fw;
  result->channels = 3;
  result->bytes = bytes;
  return absl::OkStatus();
}

absl::Status SampleProcessor::Impl::DecodeFused(const PipelineParams& p, const FusedGeometry& g,
                                                uint8_t* dst) {
  const int o = header.orientation;
  const bool swap = SwapsAxes(o);
  // The resample runs in raw (as coded) coordinates; the orientation and
  // the flips are applied when the small result is written out.
  AxisSpec rx = swap ? g.y : g.x;
  AxisSpec ry = swap ? g.x : g.y;
  const bool mirror_x = o == 2 || o == 3 || o == 7 || o == 8;
  const bool mirror_y = o == 3 || o == 4 || o == 6 || o == 7;
  if (mirror_x) rx = MirrorAxis(rx, header.width);
  if (mirror_y) ry = MirrorAxis(ry, header.height);

  // The smallest DCT scale M/8 that keeps the decoded crop at least
  // kMinDecodedPerOutput times the output in both directions. Only M = 1, 2,
  // 4 (and 8): libjpeg-turbo has SIMD IDCTs for those; the other scaled
  // IDCTs are plain C and measured slower than decoding at the next power of
  // two. A scale the daemon's calibration disabled (decode_planner.h) is
  // passed over for the next larger allowed one; 8 is always allowed.
  // Bicubic's bound was not measured: it decodes at full scale.
  int num = 8;
  if (p.exact_decode == 0 && g.interpolation != Interpolation::kBicubic) {
    for (int m : {1, 2, 4}) {
      if ((p.disabled_dct_scales & DctScaleBit(m)) != 0) continue;
      if (rx.scale * m >= 8.0 * kMinDecodedPerOutput &&
          ry.scale * m >= 8.0 * kMinDecodedPerOutput) {
        num = m;
        break;
      }
    }
  }
  if (num == 1 && inputs_are_baseline_copies && skip_unneeded_scans) {
    return absl::AbortedError(
        "a baseline copy at DCT scale 1/8: its progressive original decodes faster");
  }
  // At 1/8 a progressive file's AC scans of 1x1-IDCT components are never
  // read: the decoder leaves them out (same pixels, jpeg_decoder.h).
  const ScanSelection scans = num == 1 && header.progressive && skip_unneeded_scans
                                  ? ScanSelection::kNeeded
                                  : ScanSelection::kAll;
  DecodeInfo info;
  uint64_t t0 = NowNs();
  absl::Status s = decoder.Start(num, &info, scans);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  dct_scale = static_cast<uint32_t>(num);
  decode_path = info.skipped_scans ? DecodePath::kDcScans : DecodePath::kWhole;
  const AxisSpec sx = ScaleAxis(rx, num, info.width);
  const AxisSpec sy = ScaleAxis(ry, num, info.height);
  BuildPlan(g.interpolation, sx, info.width, &plan_x);
  BuildPlan(g.interpolation, sy, info.height, &plan_y);
  const auto y0 = static_cast<uint32_t>(plan_y.min_index);
  const auto y1 = static_cast<uint32_t>(plan_y.end_index);
  uint32_t x0 = static_cast<uint32_t>(plan_x.min_index);
  uint32_t width = static_cast<uint32_t>(plan_x.end_index) - x0;
  if (y1 <= y0 || width == 0 || y1 > info.height || x0 + width > info.width) {
    return absl::InternalError("empty resample region");
  }
  // libjpeg's fancy upsampling treats the edges of a cropped region as image
  // edges; a margin keeps the columns we read identical to a full decode.
  if (x0 > 0 || width < info.width) {
    const uint32_t left = x0 > kCropMargin ? x0 - kCropMargin : 0;
    width = std::min(info.width, x0 + width + kCropMargin) - left;
    x0 = left;
  }
  t0 = NowNs();
  bool seeked = false;  // columns may widen to an iMCU boundary
  s = decoder.Window(&x0, &width, y0, &seeked);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  if (seeked) decode_path = DecodePath::kRestartWindow;

  if (uint64_t{plan_x.out_size} * (y1 - y0) > p.max_decode_pixels) {
    return absl::ResourceExhaustedError(
        "the resample's intermediate image is over max_decode_pixels");
  }
  const size_t src_row_bytes = size_t{width} * info.channels;
  const size_t hrow = size_t{plan_x.out_size} * 3;
  uint8_t* chunk_data = Room(chunk, src_row_bytes * kChunkRows + kResamplePadBytes);
  Room(row_ptrs, kChunkRows);
  for (uint32_t i = 0; i < kChunkRows; ++i) row_ptrs[i] = chunk_data + i * src_row_bytes;
  uint8_t* rgb =
      info.channels == 4 ? Room(rgb_row, size_t{width} * 3 + kResamplePadBytes) : nullptr;
  uint8_t* hp = Room(hpass, hrow * (y1 - y0));
  for (uint32_t y = y0; y < y1;) {
    uint32_t got = 0;
    s = ReadChunk(std::min(kChunkRows, y1 - y), &got);
    if (!s.ok()) return s;
    for (uint32_t i = 0; i < got; ++i, ++y) {
      const uint8_t* row = row_ptrs[i];
      if (rgb != nullptr) {
        CmykRowToRgb(row, width, rgb);
        row = rgb;
      }
      ResampleRow(row, static_cast<int32_t>(x0), plan_x, hp + size_t{y - y0} * hrow);
    }
  }
  t0 = NowNs();
  s = decoder.Stop();  // checks the rest of the file is there
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  ResampleColumns(hp, hrow, static_cast<int32_t>(y0), hrow, plan_y, dst, hrow, Room(acc, hrow));
  return absl::OkStatus();
}

absl::Status SampleProcessor::Impl::DecodeFusedOther(const PipelineParams& p,
                                                     const FusedGeometry& g, uint8_t* dst) {
  // No DCT scaling, no orientation: the region the resample reads is
  // decoded, exactly the whole decode's pixels there (image_decoder.h).
  const AxisSpec sx = ScaleAxis(g.x, 8, header.width);
  const AxisSpec sy = ScaleAxis(g.y, 8, header.height);
  BuildPlan(g.interpolation, sx, header.width, &plan_x);
  BuildPlan(g.interpolation, sy, header.height, &plan_y);
  DecodeRegion r;
  r.top = static_cast<uint32_t>(plan_y.min_index);
  r.left = static_cast<uint32_t>(plan_x.min_index);
  r.height = static_cast<uint32_t>(plan_y.end_index) - r.top;
  r.width = static_cast<uint32_t>(plan_x.end_index) - r.left;
  if (r.height == 0 || r.width == 0 || r.top + r.height > header.height ||
      r.left + r.width > header.width) {
    return absl::InternalError("empty resample region");
  }
  if (uint64_t{plan_x.out_size} * r.height > p.max_decode_pixels) {
    return absl::ResourceExhaustedError(
        "the resample's intermediate image is over max_decode_pixels");
  }
  const size_t row_bytes = size_t{r.width} * 3;
  uint8_t* rows = Room(region, row_bytes * r.height + kResamplePadBytes);
  const uint64_t t0 = NowNs();
  absl::Status s = other->Decode(r, rows, row_bytes);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  const size_t hrow = size_t{plan_x.out_size} * 3;
  uint8_t* hp = Room(hpass, hrow * r.height);
  for (uint32_t y = 0; y < r.height; ++y) {
    ResampleRow(rows + y * row_bytes, static_cast<int32_t>(r.left), plan_x, hp + y * hrow);
  }
  ResampleColumns(hp, hrow, static_cast<int32_t>(r.top), hrow, plan_y, dst, hrow, Room(acc, hrow));
  return absl::OkStatus();
}

absl::Status SampleProcessor::Impl::DecodeWhole(uint8_t* dst) {
  if (other != nullptr) {
    const uint64_t t0 = NowNs();
    absl::Status s = other->Decode(DecodeRegion{0, 0, header.height, header.width}, dst,
                                   size_t{header.width} * 3);
    decode_ns += NowNs() - t0;
    return s;
  }
  DecodeInfo info;
  uint64_t t0 = NowNs();
  absl::Status s = decoder.Start(8, &info);
  decode_ns += NowNs() - t0;
  if (!s.ok()) return s;
  if (info.width != header.width || info.height != header.height) {
    return absl::InternalError("libjpeg's output size is not the header's");
  }
  const size_t row_bytes = size_t{info.width} * 3;
  const size_t src_row_bytes = size_t{info.width} * info.channels;
  Room(row_ptrs, kChunkRows);
  uint8_t* chunk_data = info.channels == 4 ? Room(chunk, src_row_bytes * kChunkRows) : nullptr;
  for (uint32_t y = 0; y < info.height;) {
    const uint32_t want = std::min(kChunkRows, info.height - y);
    for (uint32_t i = 0; i < want; ++i) {
      row_ptrs[i] =
          chunk_data != nullptr ? chunk_data + i * src_row_bytes : dst + size_t{y + i} * row_bytes;
    }
    uint32_t got = 0;
    s = ReadChunk(want, &got);
    if (!s.ok()) return s;
    if (chunk_data != nullptr) {
      for (uint32_t i = 0; i < got; ++i) {
        CmykRowToRgb(row_ptrs[i], info.width, dst + size_t{y + i} * row_bytes);
      }
    }
    y += got;
  }
  t0 = NowNs();
  s = decoder.Finish();
  decode_ns += NowNs() - t0;
  return s;
}

absl::Status SampleProcessor::Impl::ResizeImage(const uint8_t* src, uint32_t h, uint32_t w,
                                                const Step& s, uint64_t max_pixels, uint8_t* dst) {
  const AxisSpec ay = ResizeCropAxis(h, s.height, 0, s.height);
  const AxisSpec ax = ResizeCropAxis(w, s.width, 0, s.width);
  BuildPlan(s.interpolation, ax, w, &plan_x);
  BuildPlan(s.interpolation, ay, h, &plan_y);
  const size_t hrow = size_t{s.width} * 3;
  const auto y0 = static_cast<uint32_t>(plan_y.min_index);
  const auto y1 = static_cast<uint32_t>(plan_y.end_index);
  if (uint64_t{s.width} * (y1 - y0) > max_pixels) {
    return absl::ResourceExhaustedError(
        "the resize's intermediate image is over max_decode_pixels");
  }
  uint8_t* hp = Room(hpass, hrow * (y1 - y0));
  // Rows are contiguous and `src` has kResamplePadBytes after its last row.
  for (uint32_t y = y0; y < y1; ++y) {
    ResampleRow(src + size_t{y} * w * 3, 0, plan_x, hp + size_t{y - y0} * hrow);
  }
  ResampleColumns(hp, hrow, static_cast<int32_t>(y0), hrow, plan_y, dst, hrow, Room(acc, hrow));
  return absl::OkStatus();
}

const char* DecodePathName(DecodePath path) {
  switch (path) {
    case DecodePath::kWhole:
      return "whole";
    case DecodePath::kDcScans:
      return "dc_scans";
    case DecodePath::kRestartWindow:
      return "restart_window";
    case DecodePath::kBaseline:
      return "baseline";
  }
  return "unknown";
}

SampleProcessor::SampleProcessor() : impl_(std::make_unique<Impl>()) {}
SampleProcessor::~SampleProcessor() = default;

void SampleProcessor::set_skip_unneeded_scans(bool on) { impl_->skip_unneeded_scans = on; }

void SampleProcessor::set_inputs_are_baseline_copies(bool on) {
  impl_->inputs_are_baseline_copies = on;
}

bool SampleProcessor::TrimBuffers(size_t max_bytes) {
  Impl& m = *impl_;
  bool big = false;
  auto trim = [&](auto& v) {
    if (v.capacity() * sizeof(v[0]) > max_bytes) {
      std::decay_t<decltype(v)>().swap(v);
      big = true;
    }
  };
  trim(m.chunk);
  trim(m.region);
  trim(m.row_ptrs);
  trim(m.rgb_row);
  trim(m.hpass);
  trim(m.image);
  trim(m.spare);
  trim(m.acc);
  trim(m.blur);
  trim(m.scratch8);
  trim(m.mix_start);
  trim(m.mix_acc);
  trim(m.decoded);
  trim(m.field);
  if (big) {
    for (auto& d : m.decoders) d.reset();  // made again on first use
    m.other = nullptr;
  }
  return big;
}

void SampleProcessor::set_boxes(const float* xyxy, uint32_t count) {
  impl_->boxes = xyxy;
  impl_->box_count = xyxy != nullptr ? count : 0;
}

absl::Status SampleProcessor::Process(const uint8_t* jpeg, size_t size, const PipelineParams& p,
                                      const SampleKey& key, void* out, size_t capacity,
                                      SampleResult* result, SampleSteps* drawn) {
  Impl& im = *impl_;
  SampleSteps* steps = drawn != nullptr ? drawn : &im.drawn;
  steps->count = 0;
  if (p.view_count != 0) {
    *result = SampleResult();
    return absl::InvalidArgumentError("a multi-view pipeline: use ProcessViews");
  }
  return im.Run(jpeg, size, p, out, result, [&](uint32_t h, uint32_t w) {
    result->drawn_height = h;
    result->drawn_width = w;
    absl::Status s = DrawSteps(p, h, w, key, steps, im.boxes, im.box_count);
    if (!s.ok()) return s;
    return im.Execute(p, *steps, out, capacity, result);
  });
}

absl::Status SampleProcessor::ProcessViews(const uint8_t* data, size_t size,
                                          const PipelineParams& p, const SampleKey& key,
                                          void* const* outs, const size_t* capacities,
                                          SampleResult* result, SampleSteps* drawn) {
  Impl& im = *impl_;
  if (p.view_count == 0) return absl::InvalidArgumentError("ProcessViews needs a view pipeline");
  return im.Run(data, size, p, outs, result, [&](uint32_t h, uint32_t w) -> absl::Status {
    for (uint32_t k = 0; k < OutputCount(p); ++k) {
      if (outs[k] == nullptr) return absl::InvalidArgumentError("no output buffer");
    }
    uint8_t* src = Room(im.decoded, size_t{im.header.height} * im.header.width * 3 +
                                        kResamplePadBytes);
    if (absl::Status s = im.DecodeWhole(src); !s.ok()) return s;
    PipelineParams view;
    SampleSteps steps;
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < OutputCount(p); ++k) {
      ViewPipeline(p, ViewOfOutput(p, k), &view);
      SampleKey view_key = key;
      view_key.output = k;
      if (absl::Status s = DrawSteps(view, h, w, view_key, &steps); !s.ok()) return s;
      if (drawn != nullptr) drawn[k] = steps;
      SampleResult one;
      if (absl::Status s = im.Execute(view, steps, outs[k], capacities[k], &one, src); !s.ok()) {
        return s;
      }
      if (k == 0) *result = one;
      bytes += one.bytes;
    }
    result->bytes = bytes;
    result->drawn_height = h;
    result->drawn_width = w;
    return absl::OkStatus();
  });
}

absl::Status SampleProcessor::ProcessSteps(const uint8_t* jpeg, size_t size,
                                           const PipelineParams& p, const SampleSteps& steps,
                                           void* out, size_t capacity, SampleResult* result) {
  Impl& im = *impl_;
  return im.Run(jpeg, size, p, out, result,
                [&](uint32_t, uint32_t) { return im.Execute(p, steps, out, capacity, result); });
}

}  // namespace stoker::image
