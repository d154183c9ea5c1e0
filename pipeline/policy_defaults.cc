// The augmentation policies' and RandomErasing's defaults and checks: the
// part of FillOp (op_defaults.h) for AutoAugment, RandAugment,
// TrivialAugmentWide, AugMix and RandomErasing, torchvision's defaults
// computed as it computes them.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeline/op_defaults.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/spec_text.h"
#include "server/image/pipeline_params.h"
#include "stoker/ring_layout.h"

namespace stoker::pipeline::internal {

using v1::Op;
using Floats = google::protobuf::RepeatedField<float>;
using image::kMaxAugMixDepth;
using image::kMaxAugMixSeverity;
using image::kMaxAugMixWidth;
using image::kMaxMagnitudeBins;
using image::kMaxPolicyOps;

namespace {

// The policies resample as torchvision's do by default: nearest; AugMix
// bilinear.
constexpr absl::string_view kDefaultPolicyInterpolation = "nearest";
constexpr absl::string_view kDefaultAugMixInterpolation = "bilinear";
constexpr float kDefaultEraseP = 0.5f;
constexpr uint32_t kDefaultRandAugmentOps = 2;
constexpr uint32_t kDefaultRandAugmentMagnitude = 9;
constexpr uint32_t kDefaultMagnitudeBins = 31;  // RandAugment, TrivialAugmentWide
constexpr uint32_t kMinMagnitudeBins = 2;       // Posterize's bins divide by bins - 1
constexpr uint32_t kDefaultAugMixSeverity = 3;
constexpr uint32_t kDefaultAugMixWidth = 3;
constexpr int32_t kDefaultAugMixDepth = -1;  // drawn from 1..3 per chain
constexpr float kDefaultAugMixAlpha = 1.0f;
constexpr bool kDefaultAugMixAllOps = true;
constexpr float kDefaultEraseScale[2] = {0.02f, 0.33f};
constexpr float kDefaultEraseRatio[2] = {0.3f, 3.3f};
constexpr float kDefaultEraseValue = 0;

// A policy's magnitude bins: default 31, within 2..kMaxMagnitudeBins.
absl::Status MagnitudeBins(uint32_t bins, absl::string_view at) {
  if (bins < kMinMagnitudeBins) {
    return Bad(at, "num_magnitude_bins must be at least ", absl::StrCat(kMinMagnitudeBins),
               " (torchvision's Posterize magnitudes divide by num_magnitude_bins - 1), not ",
               absl::StrCat(bins));
  }
  if (bins > kMaxMagnitudeBins) {
    return Bad(at, "num_magnitude_bins must be at most ", absl::StrCat(kMaxMagnitudeBins),
               " (stoker's limit: its magnitudes are torch's float32 linspace values up to "
               "that many bins), not ",
               absl::StrCat(bins));
  }
  return absl::OkStatus();
}

// [min, max] within [0, 1], min <= max; empty -> the default.
absl::Status EraseScale(Floats* r, absl::string_view at) {
  if (r->empty()) r->Add(kDefaultEraseScale, kDefaultEraseScale + 2);
  if (r->size() != 2) {
    return Bad(at, "scale must be [min, max], not ", absl::StrCat(r->size()), " values");
  }
  if (!(r->Get(0) >= 0 && r->Get(1) <= 1)) {
    return Bad(at, "Scale should be between 0 and 1 (not ", ListText(*r), ")");
  }
  if (!(r->Get(0) <= r->Get(1))) {
    return Bad(at, "scale ", ListText(*r), " must be [min, max] with min <= max");
  }
  return absl::OkStatus();
}

}  // namespace

// RandomErasing's checks that depend on the output: "random" needs a float
// dtype; a uint8 output takes whole values 0..255. `at`: "ops[i] RandomErasing: ".
absl::Status CheckEraseForOutput(const v1::RandomErasing& o, uint32_t dtype,
                                 const std::string& at) {
  if (dtype != ring::kUint8) return absl::OkStatus();
  if (o.value_random()) {
    return Bad(at,
               "value 'random' with a uint8 output: torchvision would cast normal(0, 1) noise "
               "to uint8; use a float dtype (float32 or float16), where the noise is in "
               "normalized units");
  }
  for (float v : o.value()) {
    if (!(v >= 0 && v <= 255 && v == std::floor(v))) {
      return Bad(at, "value ", ListText(o.value()),
                 " with a uint8 output: each value must be a whole number within 0..255");
    }
  }
  return absl::OkStatus();
}

absl::Status FillPolicyOp(Op* op, const std::string& at) {
  switch (op->op_case()) {
    case Op::kAutoAugment: {
      v1::AutoAugment* o = op->mutable_auto_augment();
      if (o->policy().empty()) o->set_policy(std::string(kAutoAugmentPolicies[0]));
      if (std::find(std::begin(kAutoAugmentPolicies), std::end(kAutoAugmentPolicies),
                    o->policy()) == std::end(kAutoAugmentPolicies)) {
        std::vector<absl::string_view> names;
        for (std::string_view n : kAutoAugmentPolicies) names.push_back(AV(n));
        return Bad(at, "policy '", o->policy(), "' is not a valid AutoAugmentPolicy: use ",
                   absl::StrJoin(names, ", "));
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultPolicyInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandAugment: {
      v1::RandAugment* o = op->mutable_rand_augment();
      if (!o->has_num_ops()) o->set_num_ops(kDefaultRandAugmentOps);
      if (!o->has_magnitude()) o->set_magnitude(kDefaultRandAugmentMagnitude);
      if (!o->has_num_magnitude_bins()) o->set_num_magnitude_bins(kDefaultMagnitudeBins);
      if (o->num_ops() > kMaxPolicyOps) {
        return Bad(at, "num_ops must be at most ", absl::StrCat(kMaxPolicyOps),
                   " (stoker's limit), not ", absl::StrCat(o->num_ops()));
      }
      if (absl::Status st = MagnitudeBins(o->num_magnitude_bins(), at); !st.ok()) return st;
      if (o->magnitude() >= o->num_magnitude_bins()) {
        return Bad(at, "magnitude ", absl::StrCat(o->magnitude()),
                   " must be below num_magnitude_bins ", absl::StrCat(o->num_magnitude_bins()),
                   " (it indexes the magnitude bins)");
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultPolicyInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kTrivialAugmentWide: {
      v1::TrivialAugmentWide* o = op->mutable_trivial_augment_wide();
      if (!o->has_num_magnitude_bins()) o->set_num_magnitude_bins(kDefaultMagnitudeBins);
      if (absl::Status st = MagnitudeBins(o->num_magnitude_bins(), at); !st.ok()) return st;
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultPolicyInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kAugMix: {
      v1::AugMix* o = op->mutable_aug_mix();
      if (!o->has_severity()) o->set_severity(kDefaultAugMixSeverity);
      if (!o->has_mixture_width()) o->set_mixture_width(kDefaultAugMixWidth);
      // torchvision draws each chain's depth for any chain_depth <= 0.
      if (!o->has_chain_depth() || o->chain_depth() <= 0) o->set_chain_depth(kDefaultAugMixDepth);
      if (!o->has_alpha()) o->set_alpha(kDefaultAugMixAlpha);
      if (!o->has_all_ops()) o->set_all_ops(kDefaultAugMixAllOps);
      if (o->severity() < 1 || o->severity() > kMaxAugMixSeverity) {
        return Bad(at, "The severity must be between [1, ", absl::StrCat(kMaxAugMixSeverity),
                   "]. Got ", absl::StrCat(o->severity()), " instead.");
      }
      if (o->mixture_width() < 1 || o->mixture_width() > kMaxAugMixWidth) {
        return Bad(at, "mixture_width must be within 1..", absl::StrCat(kMaxAugMixWidth),
                   " (stoker's limit), not ", absl::StrCat(o->mixture_width()));
      }
      if (o->chain_depth() != -1 && o->chain_depth() > static_cast<int32_t>(kMaxAugMixDepth)) {
        return Bad(at, "chain_depth must be <= 0 (each chain's depth drawn from 1..3) or within 1..",
                   absl::StrCat(kMaxAugMixDepth), " (stoker's limit), not ",
                   absl::StrCat(o->chain_depth()));
      }
      if (!(o->alpha() > 0) || !std::isfinite(o->alpha())) {
        return Bad(at,
                   "alpha must be positive and finite (the Dirichlet and Beta "
                   "concentration), not ",
                   FloatText(o->alpha()));
      }
      if (absl::Status st = AffineInterpolation(o->mutable_interpolation(), kDefaultAugMixInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomErasing: {
      v1::RandomErasing* o = op->mutable_random_erasing();
      if (!o->has_p()) o->set_p(kDefaultEraseP);
      if (!(o->p() >= 0 && o->p() <= 1)) {
        return Bad(at, "p ", FloatText(o->p()),
                   ": Random erasing probability should be between 0 and 1");
      }
      if (absl::Status st = EraseScale(o->mutable_scale(), at); !st.ok()) return st;
      if (absl::Status st = PositiveRange(o->mutable_ratio(), kDefaultEraseRatio, at + "ratio");
          !st.ok()) {
        return st;
      }
      Floats* value = o->mutable_value();
      if (o->value_random()) {
        if (!value->empty()) {
          return Bad(at, "value ", ListText(*value),
                     " and value_random both given: give one ('random' is normal noise)");
        }
        return absl::OkStatus();
      }
      if (value->empty()) value->Add(kDefaultEraseValue);
      if (value->size() == 1) value->Resize(3, float{value->Get(0)});
      if (value->size() != 3) {
        return Bad(at,
                   "If value is a sequence, it should have either a single value or 3 (number "
                   "of input channels), not ",
                   absl::StrCat(value->size()));
      }
      for (float v : *value) {
        if (!std::isfinite(v)) return Bad(at, "value ", ListText(*value), " must be finite");
      }
      return absl::OkStatus();
    }
    default:
      return Bad(at, "not a policy op");
  }
}

}  // namespace stoker::pipeline::internal
