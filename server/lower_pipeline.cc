#include "server/lower_pipeline.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "stoker/pipeline_spec.h"

namespace stoker {
namespace {

static_assert(pipeline::kMaxOutputSide == image::kMaxOutputSide &&
                  pipeline::kMaxOutputPixels == image::kMaxOutputPixels &&
                  pipeline::kMaxResizeSide == image::kMaxOpSide &&
                  pipeline::kMaxMaxDecodePixels == image::kMaxDecodePixelsLimit,
              "the request checks and the workers' own must hold the same limits");
static_assert(pipeline::kMaxOps == image::kMaxOps,
              "the contract's op limit and the worker's op array must agree");
static_assert(std::size(pipeline::kPaddingModes) == 4 &&
                  static_cast<uint32_t>(image::PadMode::kConstant) == 0 &&
                  static_cast<uint32_t>(image::PadMode::kEdge) == 1 &&
                  static_cast<uint32_t>(image::PadMode::kReflect) == 2 &&
                  static_cast<uint32_t>(image::PadMode::kSymmetric) == 3,
              "kPaddingModes is lowered by index into image::PadMode");

absl::Status NotEffective(int i, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("ops[", i, "]: ", absl::string_view(what.data(), what.size()),
                   " (not an effective spec: give it to pipeline::Effective first)"));
}

template <typename Size>
bool TwoSides(const Size& size, image::OpParams* o) {
  if (size.size() != 2) return false;
  o->height = size.Get(0);
  o->width = size.Get(1);
  return true;
}

template <typename Range>
bool Pair(const Range& r, float (&out)[2]) {
  if (r.size() != 2) return false;
  out[0] = r.Get(0);
  out[1] = r.Get(1);
  return true;
}

template <typename Op>
bool Resampling(const Op& op, image::OpParams* o) {
  if (op.interpolation().empty() || !op.has_antialias()) return false;
  o->interpolation =
      op.antialias() ? image::Interpolation::kAntialias : image::Interpolation::kBilinear;
  return true;
}

absl::Status LowerOp(const v1::Op& op, int i, image::OpParams* o) {
  switch (op.op_case()) {
    case v1::Op::kRandomResizedCrop: {
      const auto& r = op.random_resized_crop();
      o->kind = image::OpKind::kRandomResizedCrop;
      if (!TwoSides(r.size(), o) || !Pair(r.scale(), o->scale) || !Pair(r.ratio(), o->ratio) ||
          !Resampling(r, o)) {
        return NotEffective(i,
                            "RandomResizedCrop needs size [h, w], scale, ratio, "
                            "interpolation and antialias");
      }
      return absl::OkStatus();
    }
    case v1::Op::kResize: {
      const auto& r = op.resize();
      o->kind = image::OpKind::kResize;
      if (r.size_size() == 1) {
        o->height = r.size(0);  // the shorter side
        o->width = 0;
        o->max_size = r.has_max_size() ? r.max_size() : 0;
      } else if (!TwoSides(r.size(), o)) {
        return NotEffective(i, "Resize needs size [s] or [h, w]");
      }
      if (!Resampling(r, o)) return NotEffective(i, "Resize needs interpolation and antialias");
      return absl::OkStatus();
    }
    case v1::Op::kCenterCrop:
      o->kind = image::OpKind::kCenterCrop;
      if (!TwoSides(op.center_crop().size(), o)) {
        return NotEffective(i, "CenterCrop needs size [h, w]");
      }
      return absl::OkStatus();
    case v1::Op::kRandomCrop: {
      const auto& r = op.random_crop();
      o->kind = image::OpKind::kRandomCrop;
      const auto mode = std::find(std::begin(pipeline::kPaddingModes),
                                  std::end(pipeline::kPaddingModes), r.padding_mode());
      if (!TwoSides(r.size(), o) || r.padding_size() != 4 || r.fill_size() != 3 ||
          mode == std::end(pipeline::kPaddingModes)) {
        return NotEffective(i,
                            "RandomCrop needs size [h, w], 4 paddings, 3 fills and a "
                            "padding_mode");
      }
      for (int k = 0; k < 4; ++k) o->padding[k] = r.padding(k);
      for (int k = 0; k < 3; ++k) {
        if (r.fill(k) > 255) return NotEffective(i, "RandomCrop's fill is over 255");
        o->fill[k] = static_cast<uint8_t>(r.fill(k));
      }
      o->pad_if_needed = r.pad_if_needed() ? 1 : 0;
      o->padding_mode = static_cast<image::PadMode>(mode - std::begin(pipeline::kPaddingModes));
      return absl::OkStatus();
    }
    case v1::Op::kRandomHorizontalFlip:
      o->kind = image::OpKind::kHorizontalFlip;
      if (!op.random_horizontal_flip().has_p())
        return NotEffective(i, "RandomHorizontalFlip needs p");
      o->p = op.random_horizontal_flip().p();
      return absl::OkStatus();
    case v1::Op::kRandomVerticalFlip:
      o->kind = image::OpKind::kVerticalFlip;
      if (!op.random_vertical_flip().has_p()) return NotEffective(i, "RandomVerticalFlip needs p");
      o->p = op.random_vertical_flip().p();
      return absl::OkStatus();
    case v1::Op::kColorJitter: {
      const auto& r = op.color_jitter();
      o->kind = image::OpKind::kColorJitter;
      const google::protobuf::RepeatedField<float>* factors[4] = {};
      factors[image::kBrightness] = &r.brightness();
      factors[image::kContrast] = &r.contrast();
      factors[image::kSaturation] = &r.saturation();
      factors[image::kHue] = &r.hue();
      for (uint32_t k = 0; k < 4; ++k) {
        if (factors[k]->empty()) continue;  // not made
        if (!Pair(*factors[k], o->jitter[k])) {
          return NotEffective(i, "ColorJitter's factors must be ranges [min, max] or empty");
        }
        o->jitter_set |= 1u << k;
      }
      return absl::OkStatus();
    }
    case v1::Op::kGrayscale:
      o->kind = image::OpKind::kGrayscale;
      if (op.grayscale().num_output_channels() != 3) {
        return NotEffective(i, "Grayscale needs num_output_channels 3");
      }
      return absl::OkStatus();
    case v1::Op::kRandomGrayscale:
      o->kind = image::OpKind::kRandomGrayscale;
      if (!op.random_grayscale().has_p()) return NotEffective(i, "RandomGrayscale needs p");
      o->p = op.random_grayscale().p();
      return absl::OkStatus();
    case v1::Op::kGaussianBlur: {
      const auto& r = op.gaussian_blur();
      o->kind = image::OpKind::kGaussianBlur;
      if (r.kernel_size_size() != 2 || !Pair(r.sigma(), o->sigma)) {
        return NotEffective(i, "GaussianBlur needs kernel_size [x, y] and sigma [min, max]");
      }
      o->kernel_x = r.kernel_size(0);
      o->kernel_y = r.kernel_size(1);
      return absl::OkStatus();
    }
    case v1::Op::OP_NOT_SET:
      break;
  }
  return NotEffective(i, "no op set");
}

}  // namespace

absl::StatusOr<image::PipelineParams> LowerPipeline(const v1::PipelineSpec& effective) {
  image::PipelineParams p;
  if (effective.ops_size() > static_cast<int>(image::kMaxOps)) {
    return absl::InvalidArgumentError(
        absl::StrCat(effective.ops_size(), " ops, more than the ", image::kMaxOps, " allowed"));
  }
  p.op_count = static_cast<uint32_t>(effective.ops_size());
  for (int i = 0; i < effective.ops_size(); ++i) {
    if (absl::Status st = LowerOp(effective.ops(i), i, &p.ops[i]); !st.ok()) return st;
  }
  if (effective.size_size() == 2) {
    p.out_height = effective.size(0);
    p.out_width = effective.size(1);
  } else if (effective.size_size() != 0) {
    return absl::InvalidArgumentError(
        "size must be [h, w] or empty (any size) in an effective spec");
  }
  const v1::Output& out = effective.output();
  p.dtype = pipeline::DTypeFromName(out.dtype());
  p.layout = pipeline::LayoutFromName(out.layout());
  if (p.dtype == 0 || p.layout == 0 || out.mean_size() != 3 || out.std_size() != 3 ||
      effective.max_decode_pixels() == 0) {
    return absl::InvalidArgumentError(
        "the output needs a dtype, a layout, 3 means and 3 stds, and max_decode_pixels (not an "
        "effective spec: give it to pipeline::Effective first)");
  }
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = out.mean(c);
    p.stdev[c] = out.std(c);
  }
  p.max_decode_pixels = effective.max_decode_pixels();
  p.exact_decode = effective.exact_decode() ? 1 : 0;
  p.apply_exif = effective.apply_exif_orientation() ? 1 : 0;
  if (absl::Status st = image::ValidateParams(p); !st.ok()) return st;
  return p;
}

}  // namespace stoker
