// Every op's defaults and checks (FillOp), and the most steps each makes
// (MostSteps): torchvision's defaults, computed as it computes them.

#include "pipeline/op_defaults.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/op_table.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/spec_text.h"
#include "stoker/ring_layout.h"

namespace stoker::pipeline::internal {

using v1::Op;
using Sizes = pb::RepeatedField<uint32_t>;
using Floats = pb::RepeatedField<float>;
using Doubles = pb::RepeatedField<double>;

// The ranges, written once for this file and the workers' ValidateParams.
using image::kMaxElasticSigma;
using image::kMaxHueShift;
using image::kMaxIoUOptions;
using image::kMaxIoUTrials;
using image::kMaxPosterizeBits;
using image::kMaxZoomOutSide;

namespace {

// torchvision's RandomResizedCrop defaults, computed as it computes them.
constexpr float kDefaultScale[2] = {0.08f, 1.0f};
constexpr float kDefaultRatio[2] = {static_cast<float>(3.0 / 4.0), static_cast<float>(4.0 / 3.0)};
constexpr absl::string_view kBilinear = "bilinear";
constexpr bool kDefaultAntialias = true;
constexpr float kDefaultFlipP = 0.5f;
constexpr float kDefaultPerspectiveP = 0.5f;           // RandomPerspective's p
constexpr float kDefaultDistortionScale = 0.5f;        // and distortion_scale
constexpr absl::string_view kDefaultPerspectiveInterpolation = "bilinear";
constexpr float kDefaultElasticAlpha = 50.0f;  // ElasticTransform's
constexpr float kDefaultElasticSigma = 5.0f;
constexpr float kDefaultGrayscaleP = 0.1f;
// ImageFilterGaussianBlur's: DINO's and MoCo's radius range; applied always
// unless p says otherwise (MoCo's class has no p).
constexpr float kDefaultBoxBlurRadius[2] = {0.1f, 2.0f};
constexpr float kDefaultBoxBlurP = 1.0f;
constexpr uint32_t kDefaultGrayscaleChannels = 1;  // torchvision's, which is refused
constexpr uint32_t kServedGrayscaleChannels = 3;
constexpr float kDefaultSigma[2] = {0.1f, 2.0f};
// The affine ops' and the policies' (torchvision 0.14's defaults).
constexpr absl::string_view kNearest = "nearest";
constexpr absl::string_view kDefaultAffineInterpolation = kNearest;  // AugMix's is bilinear
constexpr uint32_t kDefaultFill = 0;     // torchvision's 0 (the policies' None is 0 on PIL)
constexpr float kDefaultRandomP = 0.5f;  // RandomPosterize ... RandomInvert, RandomErasing
// The detection reference's RandomZoomOut, RandomIoUCrop and
// RandomPhotometricDistort.
constexpr float kDefaultZoomOutSides[2] = {1.0f, 4.0f};
constexpr float kDefaultIoUScale[2] = {0.3f, 1.0f};
constexpr float kDefaultIoUAspect[2] = {0.5f, 2.0f};
constexpr float kDefaultIoUOptions[7] = {0.0f, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, 1.0f};
constexpr uint32_t kDefaultIoUTrials = 40;
constexpr float kDefaultDistortBrightness[2] = {0.875f, 1.125f};
constexpr float kDefaultDistortContrast[2] = {0.5f, 1.5f};
constexpr float kDefaultDistortSaturation[2] = {0.5f, 1.5f};
constexpr float kDefaultDistortHue[2] = {-0.05f, 0.05f};

}  // namespace


absl::Status CheckInterpolation(absl::string_view value, absl::string_view what) {
  for (std::string_view name : kResizeInterpolations) {
    if (value == AV(name)) return absl::OkStatus();
  }
  if (value == "antialias") {
    return Bad(what,
               " 'antialias' is stoker 0.1's name: drop it (antialiased bilinear is "
               "the default; antialias=false gives plain 2-tap bilinear)");
  }
  return Bad(what, " '", value,
             "' is not served: use 'bilinear' (antialias=false gives the plain 2-tap kind) "
             "or 'bicubic'");
}


// A crop's (or the output's) size: [v] -> [v, v]; every side and the area
// within the output limits.
absl::Status OutputSize(Sizes* size, absl::string_view what, bool required) {
  if (size->empty()) return required ? Bad(what, " is required") : absl::OkStatus();
  if (size->size() == 1) size->Add(uint32_t{size->Get(0)});
  if (size->size() != 2) {
    return Bad(what, " must be 1 value or 2 ([height, width]), not ", absl::StrCat(size->size()),
               " values");
  }
  for (uint32_t side : *size) {
    if (side < 1 || side > kMaxOutputSide) {
      return Bad(what, " ", ListText(*size), ": each side must be within 1..",
                 absl::StrCat(kMaxOutputSide));
    }
  }
  if (uint64_t{size->Get(0)} * size->Get(1) > kMaxOutputPixels) {
    return Bad(what, " ", ListText(*size), " has more than ", absl::StrCat(kMaxOutputPixels),
               " pixels");
  }
  return absl::OkStatus();
}


// [min, max] with 0 < min <= max, both finite; empty -> the default.
absl::Status PositiveRange(Floats* r, const float (&def)[2], absl::string_view what) {
  if (r->empty()) r->Add(def, def + 2);
  if (r->size() != 2) {
    return Bad(what, " must be [min, max], not ", absl::StrCat(r->size()), " values");
  }
  const float lo = r->Get(0), hi = r->Get(1);
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo > 0) || !(lo <= hi)) {
    return Bad(what, " ", ListText(*r), " must be finite with 0 < min <= max");
  }
  return absl::OkStatus();
}

namespace {


template <typename T>
absl::Status Probability(T* op, float def, absl::string_view what) {
  if (!op->has_p()) op->set_p(def);
  if (!(op->p() >= 0 && op->p() <= 1)) {
    return Bad(what, "p must be within [0, 1], not ", FloatText(op->p()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Resampling(T* op, absl::string_view at) {
  if (op->interpolation().empty()) op->set_interpolation(std::string(kBilinear));
  if (absl::Status st = CheckInterpolation(op->interpolation(), absl::StrCat(at, "interpolation"));
      !st.ok()) {
    return st;
  }
  if (!op->has_antialias()) op->set_antialias(kDefaultAntialias);
  if (op->interpolation() == AV(kResizeInterpolations[1]) && !op->antialias()) {
    return Bad(at, "interpolation 'bicubic' is served antialiased only (torchvision's PIL "
                   "path): drop antialias=false or use 'bilinear'");
  }
  return absl::OkStatus();
}

// ColorJitter's factor as torchvision's ColorJitter._check_input makes it: v
// -> [max(0, center - v), center + v] (hue: [-v, v]), or the range given;
// within [lo, hi]; [center, center] is "not made" and left empty.
absl::Status JitterRange(Floats* r, double center, double lo, double hi, bool clip_at_zero,
                         absl::string_view what) {
  if (r->empty()) return absl::OkStatus();
  for (float v : *r) {
    if (!std::isfinite(v)) return Bad(what, " ", ListText(*r), " must be finite");
  }
  if (r->size() == 1) {
    const double v = r->Get(0);
    if (v < 0) {
      return Bad(what, " is a single number, so it must be >= 0, not ", FloatText(r->Get(0)));
    }
    double a = center - v, b = center + v;
    if (clip_at_zero) a = std::max(a, 0.0);
    r->Clear();
    r->Add(static_cast<float>(a));
    r->Add(static_cast<float>(b));
  } else if (r->size() != 2) {
    return Bad(what, " must be 1 value or 2 ([min, max]), not ", absl::StrCat(r->size()),
               " values");
  }
  const double a = r->Get(0), b = r->Get(1);
  if (!(lo <= a && a <= b && b <= hi)) {
    return Bad(what, " ", ListText(*r), " must be a range [min, max] within [",
               FloatText(static_cast<float>(lo)), ", ",
               std::isinf(hi) ? std::string("inf") : FloatText(static_cast<float>(hi)), "]");
  }
  if (a == center && b == center) r->Clear();
  return absl::OkStatus();
}

}  // namespace

// A constant fill: [v] -> [v, v, v]; 3 values, each 0..255.
absl::Status FillValues(Sizes* fill, absl::string_view at) {
  if (fill->empty()) fill->Add(kDefaultFill);
  if (fill->size() == 1) fill->Resize(3, uint32_t{fill->Get(0)});
  if (fill->size() != 3) {
    return Bad(at, "fill must be 1 value or 3 (R, G, B), not ", absl::StrCat(fill->size()));
  }
  for (uint32_t v : *fill) {
    if (v > 255) return Bad(at, "fill ", ListText(*fill), ": each value must be within 0..255");
  }
  return absl::OkStatus();
}

namespace {


// An angle range as torchvision's _setup_angle makes it: [d] -> [-d, d]
// (d >= 0), else 2 values (or, with `four`, 2 or 4: shear's x and y ranges),
// each pair [min, max] with min <= max (torch's uniform_ refuses the other).
absl::Status AngleRange(Floats* r, absl::string_view name, bool four, absl::string_view at) {
  for (float v : *r) {
    if (!std::isfinite(v)) return Bad(at, name, " ", ListText(*r), " must be finite");
  }
  if (r->size() == 1) {
    const float d = r->Get(0);
    if (d < 0) {
      return Bad(at, "If ", name, " is a single number, it must be positive (not ", FloatText(d),
                 ")");
    }
    r->Clear();
    r->Add(-d);
    r->Add(d);
  }
  if (r->size() != 2 && !(four && r->size() == 4)) {
    return Bad(at, name, " should be a sequence of length ", four ? "2 or 4" : "2",
               " (or a single number), not ", absl::StrCat(r->size()), " values");
  }
  for (int k = 0; k < r->size(); k += 2) {
    if (!(r->Get(k) <= r->Get(k + 1))) {
      return Bad(at, name, " ", ListText(*r), " must be ranges [min, max] with min <= max");
    }
  }
  return absl::OkStatus();
}

}  // namespace

// The affine ops' resampling: empty -> `def`; nearest or bilinear.
absl::Status AffineInterpolation(std::string* v, absl::string_view def, absl::string_view at) {
  if (v->empty()) *v = std::string(def);
  for (std::string_view name : kAffineInterpolations) {
    if (AV(name) == *v) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (std::string_view name : kAffineInterpolations)
    names.push_back(absl::StrCat("'", AV(name), "'"));
  return Bad(at, "interpolation '", *v, "' is not served: use ", absl::StrJoin(names, " or "));
}

namespace {


// [x, y] or empty (the image's center).
absl::Status Center(const Doubles& c, absl::string_view at) {
  if (c.empty()) return absl::OkStatus();
  if (c.size() != 2) {
    return Bad(at, "center should be a sequence of length 2 ([x, y]), not ", absl::StrCat(c.size()),
               " values");
  }
  for (double v : c) {
    if (!std::isfinite(v)) return Bad(at, "center ", ListText(c), " must be finite");
  }
  return absl::OkStatus();
}

}  // namespace

namespace {


// RandomCrop's and Pad's padding (1, 2 or 4 values, as torchvision reads
// them, made 4: left, top, right, bottom), fill and padding_mode.
template <typename T>
absl::Status FillPadding(T* o, const std::string& at) {
  Sizes* pad = o->mutable_padding();
  if (pad->empty() || pad->size() == 3 || pad->size() > 4) {
    return Bad(at, "padding must be 1, 2 or 4 values, not ", absl::StrCat(pad->size()));
  }
  if (pad->size() == 1) pad->Resize(4, uint32_t{pad->Get(0)});  // (a copy: Resize reallocates)
  if (pad->size() == 2) {                                       // [left/right, top/bottom]
    const uint32_t lr = pad->Get(0), tb = pad->Get(1);
    pad->Clear();
    for (uint32_t v : {lr, tb, lr, tb}) pad->Add(v);
  }
  for (uint32_t v : *pad) {
    if (v > kMaxResizeSide) {
      return Bad(at, "padding ", ListText(*pad), ": each side must be at most ",
                 absl::StrCat(kMaxResizeSide));
    }
  }
  if (absl::Status st = FillValues(o->mutable_fill(), at); !st.ok()) return st;
  if (o->padding_mode().empty()) o->set_padding_mode(std::string(kPaddingModes[0]));
  if (std::find(std::begin(kPaddingModes), std::end(kPaddingModes), o->padding_mode()) ==
      std::end(kPaddingModes)) {
    std::vector<absl::string_view> modes;
    for (std::string_view m : kPaddingModes) modes.push_back(AV(m));
    return Bad(at, "padding_mode '", o->padding_mode(), "' is not one of ",
               absl::StrJoin(modes, ", "));
  }
  return absl::OkStatus();
}

// A composition's transforms (RandomApply, RandomChoice, RandomOrder): 1 to
// image::kMaxChildren ops, each of an op-table row that moves pixels only
// and holds no ops of its own, each filled in as a top-level op is.
absl::Status FillComposed(pb::RepeatedPtrField<Op>* transforms, const std::string& at) {
  if (transforms->empty() || transforms->size() > static_cast<int>(image::kMaxChildren)) {
    return Bad(at, "transforms must hold 1..", absl::StrCat(image::kMaxChildren), " ops, not ",
               absl::StrCat(transforms->size()));
  }
  for (int k = 0; k < transforms->size(); ++k) {
    Op* child = transforms->Mutable(k);
    const std::string where = absl::StrCat(at, "transforms[", k, "] ", OpName(*child), ": ");
    const OpRow* row = FindOp(static_cast<image::OpKind>(child->op_case()));
    if (row == nullptr) return Bad(where, "no op set");
    if (row->holds_ops) {
      return Bad(where, "a composition cannot hold another (give its ops to this one, or "
                        "make them separate ops)");
    }
    if (row->moves != OpMoves::kPixels) {
      return Bad(where, row->moves == OpMoves::kGeometry ? "moves the image's geometry"
                                                         : "works on the output tensor",
                 "; RandomApply, RandomChoice and RandomOrder hold only ops that change "
                 "pixels (ColorJitter, GaussianBlur, Grayscale, RandomSolarize, ...): put it "
                 "outside");
    }
    if (absl::Status st = FillOp(child, where); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillOp(Op* op, const std::string& at) {  // `at`: "ops[i] Name: "
  switch (op->op_case()) {
    case Op::kRandomResizedCrop: {
      v1::RandomResizedCrop* o = op->mutable_random_resized_crop();
      if (absl::Status st = OutputSize(o->mutable_size(), absl::StrCat(at, "size"), true);
          !st.ok()) {
        return st;
      }
      if (absl::Status st = PositiveRange(o->mutable_scale(), kDefaultScale, at + "scale");
          !st.ok()) {
        return st;
      }
      if (absl::Status st = PositiveRange(o->mutable_ratio(), kDefaultRatio, at + "ratio");
          !st.ok()) {
        return st;
      }
      return Resampling(o, at);
    }
    case Op::kResize: {
      v1::Resize* o = op->mutable_resize();
      Sizes* size = o->mutable_size();
      if (size->empty()) return Bad(at, "size is required");
      if (size->size() > 2) {
        return Bad(at, "size must be [shorter side] or [height, width], not ",
                   absl::StrCat(size->size()), " values");
      }
      for (uint32_t side : *size) {
        if (side < 1 || side > kMaxResizeSide) {
          return Bad(at, "size ", ListText(*size), ": each side must be within 1..",
                     absl::StrCat(kMaxResizeSide));
        }
      }
      if (o->has_max_size()) {
        if (size->size() != 1) {
          return Bad(at,
                     "max_size should only be passed if size specifies the length of the "
                     "smaller edge, i.e. size should be one value");
        }
        if (o->max_size() <= size->Get(0)) {
          return Bad(at, "max_size = ", absl::StrCat(o->max_size()),
                     " must be strictly greater than the requested size for the smaller edge "
                     "size = ",
                     absl::StrCat(size->Get(0)));
        }
        if (o->max_size() > kMaxResizeSide) {
          return Bad(at, "max_size must be at most ", absl::StrCat(kMaxResizeSide));
        }
      }
      return Resampling(o, at);
    }
    case Op::kRandomShortestSize: {
      v1::RandomShortestSize* o = op->mutable_random_shortest_size();
      if (o->min_size().empty() || o->min_size_size() > static_cast<int>(kMaxShortestSizes)) {
        return Bad(at, "min_size must be 1 to ", absl::StrCat(kMaxShortestSizes), " sizes, not ",
                   absl::StrCat(o->min_size_size()));
      }
      for (uint32_t v : o->min_size()) {
        if (v < 1 || v > kMaxResizeSide) {
          return Bad(at, "min_size ", ListText(o->min_size()), ": each must be within 1..",
                     absl::StrCat(kMaxResizeSide));
        }
      }
      if (o->has_max_size() && (o->max_size() < 1 || o->max_size() > kMaxResizeSide)) {
        return Bad(at, "max_size must be within 1..", absl::StrCat(kMaxResizeSide));
      }
      return Resampling(o, at);
    }
    case Op::kRandomZoomOut: {
      v1::RandomZoomOut* o = op->mutable_random_zoom_out();
      if (absl::Status st = FillValues(o->mutable_fill(), at); !st.ok()) return st;
      if (o->side_range().empty()) {
        for (float v : kDefaultZoomOutSides) o->add_side_range(v);
      }
      if (o->side_range_size() != 2 || !(o->side_range(0) >= 1) ||
          !(o->side_range(0) <= o->side_range(1)) || !(o->side_range(1) <= kMaxZoomOutSide)) {
        return Bad(at, "side_range ", ListText(o->side_range()),
                   " must be [min, max] with 1 <= min <= max <= ", FloatText(kMaxZoomOutSide));
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomIouCrop: {
      v1::RandomIoUCrop* o = op->mutable_random_iou_crop();
      if (!o->has_min_scale()) o->set_min_scale(kDefaultIoUScale[0]);
      if (!o->has_max_scale()) o->set_max_scale(kDefaultIoUScale[1]);
      if (!o->has_min_aspect_ratio()) o->set_min_aspect_ratio(kDefaultIoUAspect[0]);
      if (!o->has_max_aspect_ratio()) o->set_max_aspect_ratio(kDefaultIoUAspect[1]);
      if (o->sampler_options().empty()) {
        for (float v : kDefaultIoUOptions) o->add_sampler_options(v);
      }
      if (!o->has_trials()) o->set_trials(kDefaultIoUTrials);
      if (!(o->min_scale() > 0 && o->min_scale() <= o->max_scale() && o->max_scale() <= 1)) {
        return Bad(at, "need 0 < min_scale <= max_scale <= 1, not ", FloatText(o->min_scale()),
                   " and ", FloatText(o->max_scale()));
      }
      if (!(o->min_aspect_ratio() > 0 && o->min_aspect_ratio() <= o->max_aspect_ratio() &&
            std::isfinite(o->max_aspect_ratio()))) {
        return Bad(at, "need 0 < min_aspect_ratio <= max_aspect_ratio (finite)");
      }
      if (o->sampler_options_size() > static_cast<int>(kMaxIoUOptions)) {
        return Bad(at, "at most ", absl::StrCat(kMaxIoUOptions), " sampler_options");
      }
      for (float v : o->sampler_options()) {
        if (!(v >= 0) || !std::isfinite(v)) {
          return Bad(at, "sampler_options ", ListText(o->sampler_options()),
                     " must be finite and >= 0 (>= 1: leave the image as it is)");
        }
      }
      if (o->trials() < 1 || o->trials() > kMaxIoUTrials) {
        return Bad(at, "trials must be within 1..", absl::StrCat(kMaxIoUTrials));
      }
      return absl::OkStatus();
    }
    case Op::kRandomPhotometricDistort: {
      v1::RandomPhotometricDistort* o = op->mutable_random_photometric_distort();
      constexpr double kInf = std::numeric_limits<double>::infinity();
      struct Part {
        Floats* range;
        const float* def;
        double center, lo, hi;
        bool clip;
        const char* name;
      };
      const Part parts[] = {
          {o->mutable_brightness(), kDefaultDistortBrightness, 1, 0, kInf, true, "brightness"},
          {o->mutable_contrast(), kDefaultDistortContrast, 1, 0, kInf, true, "contrast"},
          {o->mutable_saturation(), kDefaultDistortSaturation, 1, 0, kInf, true, "saturation"},
          {o->mutable_hue(), kDefaultDistortHue, 0, -kMaxHueShift, kMaxHueShift, false, "hue"},
      };
      for (const Part& part : parts) {
        if (part.range->empty()) part.range->Add(part.def, part.def + 2);
        if (absl::Status st = JitterRange(part.range, part.center, part.lo, part.hi, part.clip,
                                          at + part.name);
            !st.ok()) {
          return st;
        }
        // A range at its center is "not made" for ColorJitter; here it is
        // an adjustment by that factor (the identity): keep both ends.
        if (part.range->empty()) {
          part.range->Add(static_cast<float>(part.center));
          part.range->Add(static_cast<float>(part.center));
        }
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomResize: {
      v1::RandomResize* o = op->mutable_random_resize();
      if (o->min_size() < 1 || o->min_size() > kMaxResizeSide) {
        return Bad(at, "min_size must be within 1..", absl::StrCat(kMaxResizeSide), ", not ",
                   absl::StrCat(o->min_size()));
      }
      if (o->max_size() <= o->min_size() || o->max_size() > kMaxResizeSide + 1) {
        return Bad(at, "max_size must be within min_size + 1..", absl::StrCat(kMaxResizeSide + 1),
                   " (the size is drawn from [min_size, max_size)), not ",
                   absl::StrCat(o->max_size()));
      }
      return Resampling(o, at);
    }
    case Op::kCenterCrop:
      return OutputSize(op->mutable_center_crop()->mutable_size(), at + "size", true);
    case Op::kRandomCrop: {
      v1::RandomCrop* o = op->mutable_random_crop();
      if (absl::Status st = OutputSize(o->mutable_size(), at + "size", true); !st.ok()) return st;
      if (o->padding().empty()) o->add_padding(0);
      return FillPadding(o, at);
    }
    case Op::kPad: {
      v1::Pad* o = op->mutable_pad();
      if (o->padding().empty()) return Bad(at, "padding is required");
      return FillPadding(o, at);
    }
    case Op::kElasticTransform: {
      v1::ElasticTransform* o = op->mutable_elastic_transform();
      const auto pair = [&](Floats* v, float def, absl::string_view name) -> absl::Status {
        if (v->empty()) v->Add(def);
        if (v->size() == 1) v->Add(v->Get(0));
        if (v->size() != 2) {
          return Bad(at, name, " should be a number or a sequence of 2 ([x, y]), not ",
                     absl::StrCat(v->size()), " values");
        }
        for (float x : *v) {
          if (!std::isfinite(x)) return Bad(at, name, " ", ListText(*v), " must be finite");
        }
        return absl::OkStatus();
      };
      if (absl::Status st = pair(o->mutable_alpha(), kDefaultElasticAlpha, "alpha"); !st.ok()) {
        return st;
      }
      if (absl::Status st = pair(o->mutable_sigma(), kDefaultElasticSigma, "sigma"); !st.ok()) {
        return st;
      }
      const float sx = o->sigma(0), sy = o->sigma(1);
      if (sx < 0 || sy < 0 || sx > kMaxElasticSigma || sy > kMaxElasticSigma ||
          ((sx == 0) != (sy == 0))) {
        return Bad(at, "sigma ", ListText(o->sigma()), " must be within 0..",
                   absl::StrCat(static_cast<int>(kMaxElasticSigma)),
                   ", both 0 (no blur) or both > 0 (torchvision's gaussian_blur takes positive "
                   "values only)");
      }
      if (absl::Status st = AffineInterpolation(o->mutable_interpolation(),
                                                kDefaultPerspectiveInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomPerspective: {
      v1::RandomPerspective* o = op->mutable_random_perspective();
      if (!o->has_distortion_scale()) o->set_distortion_scale(kDefaultDistortionScale);
      if (!(o->distortion_scale() >= 0 && o->distortion_scale() <= 1)) {
        return Bad(at, "distortion_scale must be within [0, 1], not ",
                   FloatText(o->distortion_scale()));
      }
      if (absl::Status st = Probability(o, kDefaultPerspectiveP, at); !st.ok()) return st;
      if (absl::Status st = AffineInterpolation(o->mutable_interpolation(),
                                                kDefaultPerspectiveInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomHorizontalFlip:
      return Probability(op->mutable_random_horizontal_flip(), kDefaultFlipP, at);
    case Op::kRandomVerticalFlip:
      return Probability(op->mutable_random_vertical_flip(), kDefaultFlipP, at);
    case Op::kColorJitter: {
      v1::ColorJitter* o = op->mutable_color_jitter();
      constexpr double kInf = std::numeric_limits<double>::infinity();
      if (absl::Status st =
              JitterRange(o->mutable_brightness(), 1, 0, kInf, true, at + "brightness");
          !st.ok()) {
        return st;
      }
      if (absl::Status st = JitterRange(o->mutable_contrast(), 1, 0, kInf, true, at + "contrast");
          !st.ok()) {
        return st;
      }
      if (absl::Status st =
              JitterRange(o->mutable_saturation(), 1, 0, kInf, true, at + "saturation");
          !st.ok()) {
        return st;
      }
      return JitterRange(o->mutable_hue(), 0, -kMaxHueShift, kMaxHueShift, false, at + "hue");
    }
    case Op::kGrayscale: {
      v1::Grayscale* o = op->mutable_grayscale();
      if (!o->has_num_output_channels()) o->set_num_output_channels(kDefaultGrayscaleChannels);
      if (o->num_output_channels() == kServedGrayscaleChannels) return absl::OkStatus();
      if (o->num_output_channels() == 1) {
        return Bad(at.substr(0, at.size() - 2),
                   "(num_output_channels=1): stoker's samples have 3 channels; use "
                   "Grayscale(num_output_channels=3)");
      }
      return Bad(at,
                 "num_output_channels must be 3 (torchvision takes 1 or 3; stoker's samples "
                 "have 3 channels), not ",
                 absl::StrCat(o->num_output_channels()));
    }
    case Op::kRandomGrayscale:
      return Probability(op->mutable_random_grayscale(), kDefaultGrayscaleP, at);
    case Op::kGaussianBlur: {
      v1::GaussianBlur* o = op->mutable_gaussian_blur();
      Sizes* k = o->mutable_kernel_size();
      if (k->empty()) return Bad(at, "kernel_size is required");
      if (k->size() == 1) k->Add(uint32_t{k->Get(0)});
      if (k->size() != 2) {
        return Bad(at, "kernel_size should be a single number or a list of 2 ([x, y]), not ",
                   absl::StrCat(k->size()), " values");
      }
      for (uint32_t v : *k) {
        if (v < 1 || v % 2 == 0) {
          return Bad(at, "kernel_size ", ListText(*k),
                     ": kernel size value should be an odd and positive number");
        }
      }
      Floats* sigma = o->mutable_sigma();
      if (sigma->size() == 1) {
        if (!(sigma->Get(0) > 0) || !std::isfinite(sigma->Get(0))) {
          return Bad(at, "sigma is a single number, so it must be positive and finite, not ",
                     FloatText(sigma->Get(0)));
        }
        sigma->Add(float{sigma->Get(0)});
      }
      if (sigma->size() > 2) {
        return Bad(at, "sigma should be a single number or a list of 2 ([min, max]), not ",
                   absl::StrCat(sigma->size()), " values");
      }
      return PositiveRange(sigma, kDefaultSigma, at + "sigma");
    }
    case Op::kRandomRotation: {
      v1::RandomRotation* o = op->mutable_random_rotation();
      if (o->degrees().empty()) return Bad(at, "degrees is required");
      if (absl::Status st = AngleRange(o->mutable_degrees(), "degrees", false, at); !st.ok()) {
        return st;
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      if (!o->has_expand()) o->set_expand(false);
      if (o->expand()) {
        return Bad(at,
                   "expand=true is not served: it makes the output larger than the input "
                   "(by an amount that depends on the angle drawn), which a batch of one "
                   "shape cannot hold; leave expand false");
      }
      if (absl::Status st = Center(o->center(), at); !st.ok()) return st;
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomAffine: {
      v1::RandomAffine* o = op->mutable_random_affine();
      if (o->degrees().empty()) return Bad(at, "degrees is required");
      if (absl::Status st = AngleRange(o->mutable_degrees(), "degrees", false, at); !st.ok()) {
        return st;
      }
      const Floats& t = o->translate();
      if (!t.empty()) {
        if (t.size() != 2) {
          return Bad(at, "translate should be a sequence of length 2 ([fx, fy]), not ",
                     absl::StrCat(t.size()), " values");
        }
        for (float v : t) {
          if (!(v >= 0 && v <= 1)) {
            return Bad(at, "translate ", ListText(t),
                       ": translation values should be between 0 and 1");
          }
        }
      }
      const Floats& sc = o->scale();
      if (!sc.empty()) {
        if (sc.size() != 2) {
          return Bad(at, "scale should be a sequence of length 2 ([min, max]), not ",
                     absl::StrCat(sc.size()), " values");
        }
        for (float v : sc) {
          if (!(v > 0) || !std::isfinite(v)) {
            return Bad(at, "scale ", ListText(sc),
                       ": scale values should be positive (and finite)");
          }
        }
        if (!(sc.Get(0) <= sc.Get(1))) {
          return Bad(at, "scale ", ListText(sc), " must be [min, max] with min <= max");
        }
      }
      if (!o->shear().empty()) {
        if (absl::Status st = AngleRange(o->mutable_shear(), "shear", true, at); !st.ok()) {
          return st;
        }
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      if (absl::Status st = Center(o->center(), at); !st.ok()) return st;
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomPosterize: {
      v1::RandomPosterize* o = op->mutable_random_posterize();
      if (!o->has_bits()) return Bad(at, "bits is required");
      if (o->bits() > kMaxPosterizeBits) {
        return Bad(at, "The number of bits should be between 0 and ",
                   absl::StrCat(kMaxPosterizeBits), ". Got ", absl::StrCat(o->bits()));
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kImageFilterGaussianBlur: {
      v1::ImageFilterGaussianBlur* o = op->mutable_image_filter_gaussian_blur();
      Floats* r = o->mutable_radius();
      if (r->empty()) r->Add(kDefaultBoxBlurRadius, kDefaultBoxBlurRadius + 2);
      if (r->size() == 1) r->Add(r->Get(0));
      if (r->size() != 2 || !(r->Get(0) >= 0) || !(r->Get(0) <= r->Get(1)) ||
          !(r->Get(1) <= image::kMaxBoxBlurRadius)) {
        return Bad(at, "radius ", ListText(*r), " must be one value or [min, max] with 0 <= min "
                   "<= max <= ", absl::StrCat(static_cast<int>(image::kMaxBoxBlurRadius)));
      }
      return Probability(o, kDefaultBoxBlurP, at);
    }
    case Op::kRandomSolarize: {
      v1::RandomSolarize* o = op->mutable_random_solarize();
      if (!o->has_threshold()) return Bad(at, "threshold is required");
      if (!std::isfinite(o->threshold())) {
        return Bad(at, "threshold must be finite, not ", DoubleText(o->threshold()));
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomAdjustSharpness: {
      v1::RandomAdjustSharpness* o = op->mutable_random_adjust_sharpness();
      if (!o->has_sharpness_factor()) return Bad(at, "sharpness_factor is required");
      if (!(o->sharpness_factor() >= 0) || !std::isfinite(o->sharpness_factor())) {
        return Bad(at, "sharpness_factor (", FloatText(o->sharpness_factor()),
                   ") is not non-negative (and finite).");
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomAutocontrast:
      return Probability(op->mutable_random_autocontrast(), kDefaultRandomP, at);
    case Op::kRandomEqualize:
      return Probability(op->mutable_random_equalize(), kDefaultRandomP, at);
    case Op::kRandomInvert:
      return Probability(op->mutable_random_invert(), kDefaultRandomP, at);
    case Op::kAutoAugment:
    case Op::kRandAugment:
    case Op::kTrivialAugmentWide:
    case Op::kAugMix:
    case Op::kRandomErasing:
      return FillPolicyOp(op, at);
    case Op::kRandomApply: {
      v1::RandomApply* o = op->mutable_random_apply();
      if (absl::Status st = FillComposed(o->mutable_transforms(), at); !st.ok()) return st;
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomChoice: {
      v1::RandomChoice* o = op->mutable_random_choice();
      if (absl::Status st = FillComposed(o->mutable_transforms(), at); !st.ok()) return st;
      if (o->p().empty()) {  // torchvision's p=None: equal chances
        for (int k = 0; k < o->transforms_size(); ++k) o->add_p(1.0f);
      }
      if (o->p_size() != o->transforms_size()) {
        return Bad(at, "p has ", absl::StrCat(o->p_size()), " weights for ",
                   absl::StrCat(o->transforms_size()), " transforms: give one each, or none");
      }
      double sum = 0;
      for (float w : o->p()) {
        if (!(w >= 0) || !std::isfinite(w)) {
          return Bad(at, "p ", ListText(o->p()), ": each weight must be >= 0 (and finite)");
        }
        sum += w;
      }
      if (!(sum > 0)) return Bad(at, "p ", ListText(o->p()), ": the weights must sum to > 0");
      return absl::OkStatus();
    }
    case Op::kRandomOrder:
      return FillComposed(op->mutable_random_order()->mutable_transforms(), at);
    case Op::OP_NOT_SET:
      break;
  }
  return Bad(at.substr(0, at.find(' ')), ": no op set (an op is one of ",
             FieldNames(Op::descriptor(), /*json_names=*/true), ")");
}


// The most steps `op` makes for one sample (image's DrawSteps; kMaxSteps).
uint32_t MostSteps(const Op& op) {
  switch (op.op_case()) {
    case Op::kRandomResizedCrop:
    case Op::kCenterCrop:
      return 2;  // a crop (or pad) and a resize (or crop)
    case Op::kRandomCrop:
      return 3;  // two pads and a crop
    case Op::kRandomPhotometricDistort:
      return 5;  // four adjustments and a channel shuffle
    case Op::kAutoAugment:
      return 2;
    case Op::kRandAugment:
      return op.rand_augment().num_ops();
    case Op::kTrivialAugmentWide:
      return 1;
    case Op::kAugMix: {
      const int32_t depth = op.aug_mix().chain_depth();
      return 2 + op.aug_mix().mixture_width() * (1 + (depth > 0 ? depth : 3));
    }
    case Op::kRandomApply:
    case Op::kRandomChoice:
    case Op::kRandomOrder: {
      uint32_t steps = 0;
      for (const Op& child : *ComposedOps(op)) steps += MostSteps(child);
      return steps;
    }
    default:
      return 1;
  }
}



}  // namespace stoker::pipeline::internal
