#include "server/image/pipeline.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/image/ops/box_blur.h"
#include "server/image/ops/boxes.h"
#include "server/image/param_checks.h"
#include "server/image/processor_impl.h"
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

using namespace internal;  // NOLINT: param_checks.h and processor_impl.h, this folder's own

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
