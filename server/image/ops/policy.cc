#include "server/image/ops/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace stoker::image {
namespace {

using A = AugOp;

// The sub-policies of AutoAugment._get_policies, in its order (generated once
// from torchvision 0.14: -1 for a magnitude of None).
constexpr SubPolicyOp kImageNetPolicy[][2] = {
    {{A::kPosterize, 0.4f, 8}, {A::kRotate, 0.6f, 9}},
    {{A::kSolarize, 0.6f, 5}, {A::kAutoContrast, 0.6f, -1}},
    {{A::kEqualize, 0.8f, -1}, {A::kEqualize, 0.6f, -1}},
    {{A::kPosterize, 0.6f, 7}, {A::kPosterize, 0.6f, 6}},
    {{A::kEqualize, 0.4f, -1}, {A::kSolarize, 0.2f, 4}},
    {{A::kEqualize, 0.4f, -1}, {A::kRotate, 0.8f, 8}},
    {{A::kSolarize, 0.6f, 3}, {A::kEqualize, 0.6f, -1}},
    {{A::kPosterize, 0.8f, 5}, {A::kEqualize, 1.0f, -1}},
    {{A::kRotate, 0.2f, 3}, {A::kSolarize, 0.6f, 8}},
    {{A::kEqualize, 0.6f, -1}, {A::kPosterize, 0.4f, 6}},
    {{A::kRotate, 0.8f, 8}, {A::kColor, 0.4f, 0}},
    {{A::kRotate, 0.4f, 9}, {A::kEqualize, 0.6f, -1}},
    {{A::kEqualize, 0.0f, -1}, {A::kEqualize, 0.8f, -1}},
    {{A::kInvert, 0.6f, -1}, {A::kEqualize, 1.0f, -1}},
    {{A::kColor, 0.6f, 4}, {A::kContrast, 1.0f, 8}},
    {{A::kRotate, 0.8f, 8}, {A::kColor, 1.0f, 2}},
    {{A::kColor, 0.8f, 8}, {A::kSolarize, 0.8f, 7}},
    {{A::kSharpness, 0.4f, 7}, {A::kInvert, 0.6f, -1}},
    {{A::kShearX, 0.6f, 5}, {A::kEqualize, 1.0f, -1}},
    {{A::kColor, 0.4f, 0}, {A::kEqualize, 0.6f, -1}},
    {{A::kEqualize, 0.4f, -1}, {A::kSolarize, 0.2f, 4}},
    {{A::kSolarize, 0.6f, 5}, {A::kAutoContrast, 0.6f, -1}},
    {{A::kInvert, 0.6f, -1}, {A::kEqualize, 1.0f, -1}},
    {{A::kColor, 0.6f, 4}, {A::kContrast, 1.0f, 8}},
    {{A::kEqualize, 0.8f, -1}, {A::kEqualize, 0.6f, -1}},
};
constexpr SubPolicyOp kCifar10Policy[][2] = {
    {{A::kInvert, 0.1f, -1}, {A::kContrast, 0.2f, 6}},
    {{A::kRotate, 0.7f, 2}, {A::kTranslateX, 0.3f, 9}},
    {{A::kSharpness, 0.8f, 1}, {A::kSharpness, 0.9f, 3}},
    {{A::kShearY, 0.5f, 8}, {A::kTranslateY, 0.7f, 9}},
    {{A::kAutoContrast, 0.5f, -1}, {A::kEqualize, 0.9f, -1}},
    {{A::kShearY, 0.2f, 7}, {A::kPosterize, 0.3f, 7}},
    {{A::kColor, 0.4f, 3}, {A::kBrightness, 0.6f, 7}},
    {{A::kSharpness, 0.3f, 9}, {A::kBrightness, 0.7f, 9}},
    {{A::kEqualize, 0.6f, -1}, {A::kEqualize, 0.5f, -1}},
    {{A::kContrast, 0.6f, 7}, {A::kSharpness, 0.6f, 5}},
    {{A::kColor, 0.7f, 7}, {A::kTranslateX, 0.5f, 8}},
    {{A::kEqualize, 0.3f, -1}, {A::kAutoContrast, 0.4f, -1}},
    {{A::kTranslateY, 0.4f, 3}, {A::kSharpness, 0.2f, 6}},
    {{A::kBrightness, 0.9f, 6}, {A::kColor, 0.2f, 8}},
    {{A::kSolarize, 0.5f, 2}, {A::kInvert, 0.0f, -1}},
    {{A::kEqualize, 0.2f, -1}, {A::kAutoContrast, 0.6f, -1}},
    {{A::kEqualize, 0.2f, -1}, {A::kEqualize, 0.6f, -1}},
    {{A::kColor, 0.9f, 9}, {A::kEqualize, 0.6f, -1}},
    {{A::kAutoContrast, 0.8f, -1}, {A::kSolarize, 0.2f, 8}},
    {{A::kBrightness, 0.1f, 3}, {A::kColor, 0.7f, 0}},
    {{A::kSolarize, 0.4f, 5}, {A::kAutoContrast, 0.9f, -1}},
    {{A::kTranslateY, 0.9f, 9}, {A::kTranslateY, 0.7f, 9}},
    {{A::kAutoContrast, 0.9f, -1}, {A::kSolarize, 0.8f, 3}},
    {{A::kEqualize, 0.8f, -1}, {A::kInvert, 0.1f, -1}},
    {{A::kTranslateY, 0.7f, 9}, {A::kAutoContrast, 0.9f, -1}},
};
constexpr SubPolicyOp kSvhnPolicy[][2] = {
    {{A::kShearX, 0.9f, 4}, {A::kInvert, 0.2f, -1}},
    {{A::kShearY, 0.9f, 8}, {A::kInvert, 0.7f, -1}},
    {{A::kEqualize, 0.6f, -1}, {A::kSolarize, 0.6f, 6}},
    {{A::kInvert, 0.9f, -1}, {A::kEqualize, 0.6f, -1}},
    {{A::kEqualize, 0.6f, -1}, {A::kRotate, 0.9f, 3}},
    {{A::kShearX, 0.9f, 4}, {A::kAutoContrast, 0.8f, -1}},
    {{A::kShearY, 0.9f, 8}, {A::kInvert, 0.4f, -1}},
    {{A::kShearY, 0.9f, 5}, {A::kSolarize, 0.2f, 6}},
    {{A::kInvert, 0.9f, -1}, {A::kAutoContrast, 0.8f, -1}},
    {{A::kEqualize, 0.6f, -1}, {A::kRotate, 0.9f, 3}},
    {{A::kShearX, 0.9f, 4}, {A::kSolarize, 0.3f, 3}},
    {{A::kShearY, 0.8f, 8}, {A::kInvert, 0.7f, -1}},
    {{A::kEqualize, 0.9f, -1}, {A::kTranslateY, 0.6f, 6}},
    {{A::kInvert, 0.9f, -1}, {A::kEqualize, 0.6f, -1}},
    {{A::kContrast, 0.3f, 3}, {A::kRotate, 0.8f, 4}},
    {{A::kInvert, 0.8f, -1}, {A::kTranslateY, 0.0f, 2}},
    {{A::kShearY, 0.7f, 6}, {A::kSolarize, 0.4f, 8}},
    {{A::kInvert, 0.6f, -1}, {A::kRotate, 0.8f, 4}},
    {{A::kShearY, 0.3f, 7}, {A::kTranslateX, 0.9f, 3}},
    {{A::kShearX, 0.1f, 6}, {A::kInvert, 0.6f, -1}},
    {{A::kSolarize, 0.7f, 2}, {A::kTranslateY, 0.6f, 7}},
    {{A::kShearY, 0.8f, 4}, {A::kInvert, 0.8f, -1}},
    {{A::kShearX, 0.7f, 9}, {A::kTranslateY, 0.8f, 3}},
    {{A::kShearY, 0.8f, 5}, {A::kAutoContrast, 0.7f, -1}},
    {{A::kShearX, 0.7f, 2}, {A::kInvert, 0.1f, -1}},
};

constexpr AugOp kAutoAugmentOps[] = {
    A::kShearX,     A::kShearY,       A::kTranslateX, A::kTranslateY, A::kRotate,
    A::kBrightness, A::kColor,        A::kContrast,   A::kSharpness,  A::kPosterize,
    A::kSolarize,   A::kAutoContrast, A::kEqualize,   A::kInvert};
constexpr AugOp kRandAugmentOps[] = {
    A::kIdentity,  A::kShearX,     A::kShearY,       A::kTranslateX, A::kTranslateY,
    A::kRotate,    A::kBrightness, A::kColor,        A::kContrast,   A::kSharpness,
    A::kPosterize, A::kSolarize,   A::kAutoContrast, A::kEqualize};
// AugMix's dict: its 9 ops, then (all_ops) the 4 update() adds at the end.
constexpr AugOp kAugMixOps[] = {A::kShearX,   A::kShearY,     A::kTranslateX, A::kTranslateY,
                                A::kRotate,   A::kPosterize,  A::kSolarize,   A::kAutoContrast,
                                A::kEqualize, A::kBrightness, A::kColor,      A::kContrast,
                                A::kSharpness};

// 8 - round(float32(i) / float32((n - 1) / k)), k = 4 or 6, as torch's
// arange / scalar, round (half to even) and int() give it; n 1 gives
// int32(nan), INT32_MIN on x86-64, and the 8 - that wraps.
float PosterizeBin(int32_t top, double k, uint32_t n, uint32_t i) {
  const float d = static_cast<float>((static_cast<double>(n) - 1.0) / k);
  const float q = std::nearbyint(static_cast<float>(i) / d);
  if (!std::isfinite(q)) {
    return static_cast<float>(
        static_cast<int32_t>(static_cast<uint32_t>(top) - static_cast<uint32_t>(INT32_MIN)));
  }
  return static_cast<float>(top - static_cast<int32_t>(q));
}

// Python's float(uniform draw), a torch.rand value: 24 bits in [0, 1).
float Rand24(KeyedRng& rng) { return static_cast<float>(rng.Next() >> 40) * 0x1.0p-24f; }

// torch.randint(2): 1 negates a signed magnitude (RandAugment,
// TrivialAugmentWide, AugMix); AutoAugment negates on 0: the same odds.
bool DrawNegative(KeyedRng& rng) { return rng.Below(2) == 1; }

PolicySpace AugMixSpace(const OpParams& op) {
  return op.all_ops != 0 ? PolicySpace::kAugMixAllOps : PolicySpace::kAugMix;
}

}  // namespace

float TorchLinspace(float start, float end, uint32_t steps, uint32_t i) {
  if (steps <= 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const uint32_t half = steps / 2;
  auto scalar = [&](uint32_t idx) {
    return idx < half ? std::fma(step, static_cast<float>(idx), start)
                      : std::fma(-step, static_cast<float>(steps - 1 - idx), end);
  };
  constexpr uint32_t kLanes = 8;
  const uint32_t vector_end = steps / (2 * kLanes) * (2 * kLanes);
  if (i >= vector_end) return scalar(i);
  const uint32_t base = i / kLanes * kLanes;
  // Vectorized<float>::arange(base value, step): base + k * step, two
  // roundings (this file is built without contraction).
  const float k_step = static_cast<float>(i - base) * step;
  return scalar(base) + k_step;
}

uint32_t SpaceOps(PolicySpace space, const AugOp** ops) {
  switch (space) {
    case PolicySpace::kAutoAugment:
      *ops = kAutoAugmentOps;
      return 14;
    case PolicySpace::kRandAugment:
    case PolicySpace::kTrivialAugmentWide:
      *ops = kRandAugmentOps;
      return 14;
    case PolicySpace::kAugMix:
      *ops = kAugMixOps;
      return 9;
    case PolicySpace::kAugMixAllOps:
      *ops = kAugMixOps;
      return 13;
  }
  *ops = nullptr;
  return 0;
}

bool HasBins(AugOp op) {
  return op != A::kIdentity && op != A::kAutoContrast && op != A::kEqualize && op != A::kInvert;
}

bool IsSignedOp(AugOp op) {
  switch (op) {
    case A::kShearX:
    case A::kShearY:
    case A::kTranslateX:
    case A::kTranslateY:
    case A::kRotate:
    case A::kBrightness:
    case A::kColor:
    case A::kContrast:
    case A::kSharpness:
      return true;
    default:
      return false;
  }
}

float SpaceMagnitude(PolicySpace space, AugOp op, uint32_t num_bins, uint32_t bin, uint32_t height,
                     uint32_t width) {
  const bool wide = space == PolicySpace::kTrivialAugmentWide;
  const bool augmix = space == PolicySpace::kAugMix || space == PolicySpace::kAugMixAllOps;
  auto lin = [&](double end) {
    return TorchLinspace(0.0f, static_cast<float>(end), num_bins, bin);
  };
  switch (op) {
    case A::kShearX:
    case A::kShearY:
      return lin(wide ? 0.99 : 0.3);
    case A::kTranslateX:
    case A::kTranslateY: {
      const double side = op == A::kTranslateX ? width : height;
      if (wide) return lin(32.0);
      return lin(augmix ? side / 3.0 : 150.0 / 331.0 * side);
    }
    case A::kRotate:
      return lin(wide ? 135.0 : 30.0);
    case A::kBrightness:
    case A::kColor:
    case A::kContrast:
    case A::kSharpness:
      return lin(wide ? 0.99 : 0.9);
    case A::kPosterize:
      return augmix ? PosterizeBin(4, 4.0, num_bins, bin)
                    : PosterizeBin(8, wide ? 6.0 : 4.0, num_bins, bin);
    case A::kSolarize:
      return TorchLinspace(255.0f, 0.0f, num_bins, bin);
    default:
      return 0.0f;
  }
}

const char* AugOpName(AugOp op) {
  switch (op) {
    case A::kIdentity:
      return "Identity";
    case A::kShearX:
      return "ShearX";
    case A::kShearY:
      return "ShearY";
    case A::kTranslateX:
      return "TranslateX";
    case A::kTranslateY:
      return "TranslateY";
    case A::kRotate:
      return "Rotate";
    case A::kBrightness:
      return "Brightness";
    case A::kColor:
      return "Color";
    case A::kContrast:
      return "Contrast";
    case A::kSharpness:
      return "Sharpness";
    case A::kPosterize:
      return "Posterize";
    case A::kSolarize:
      return "Solarize";
    case A::kAutoContrast:
      return "AutoContrast";
    case A::kEqualize:
      return "Equalize";
    case A::kInvert:
      return "Invert";
  }
  return "unknown";
}

uint32_t AutoAugmentSubPolicies(AutoAugmentPolicy policy, const SubPolicyOp (**table)[2]) {
  switch (policy) {
    case AutoAugmentPolicy::kImageNet:
      *table = kImageNetPolicy;
      return std::size(kImageNetPolicy);
    case AutoAugmentPolicy::kCifar10:
      *table = kCifar10Policy;
      return std::size(kCifar10Policy);
    case AutoAugmentPolicy::kSvhn:
      *table = kSvhnPolicy;
      return std::size(kSvhnPolicy);
  }
  *table = nullptr;
  return 0;
}

absl::Status AppendAugSteps(const OpParams& op, uint32_t op_index, AugOp aug, int32_t bin,
                            double magnitude, SampleSteps* steps) {
  if (aug == A::kIdentity) return absl::OkStatus();
  if (steps->count >= kMaxSteps) return absl::InvalidArgumentError("too many steps");
  Step& s = steps->steps[steps->count];
  s = Step();
  s.op = op_index;
  s.from_policy = 1;
  s.aug = aug;
  s.aug_bin = bin;
  s.aug_magnitude = static_cast<float>(magnitude);
  s.interpolation = op.interpolation;
  for (int c = 0; c < 3; ++c) s.fill[c] = op.fill[c];
  auto jitter = [&](JitterIndex j) {
    s.kind = StepKind::kColorJitter;
    s.jitter_count = 1;
    s.jitter_order[0] = j;
    s.factor[j] = static_cast<float>(1.0 + magnitude);
  };
  switch (aug) {
    case A::kShearX:
    case A::kShearY: {
      s.kind = StepKind::kAffine;
      const double degrees = std::atan(magnitude) * (180.0 / M_PI);  // math.degrees
      s.shear[aug == A::kShearX ? 0 : 1] = degrees;
      s.has_center = 1;  // center [0, 0]
      break;
    }
    case A::kTranslateX:
    case A::kTranslateY:
      s.kind = StepKind::kAffine;
      // int(): toward zero; |m| is at most an image side.
      s.translate[aug == A::kTranslateX ? 0 : 1] = static_cast<int32_t>(magnitude);
      break;
    case A::kRotate:
      s.kind = StepKind::kRotate;
      s.angle = static_cast<float>(magnitude);
      break;
    case A::kBrightness:
      jitter(kBrightness);
      break;
    case A::kColor:
      jitter(kSaturation);
      break;
    case A::kContrast:
      jitter(kContrast);
      break;
    case A::kSharpness:
      s.kind = StepKind::kSharpness;
      s.factor[0] = static_cast<float>(1.0 + magnitude);
      break;
    case A::kPosterize: {
      if (!(magnitude >= 0.0 && magnitude <= 8.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ops[", op_index, "] ", OpKindName(op.kind), ": Posterize's bits would be ", magnitude,
            " (torchvision raises: the number of bits should be between 0 and 8)"));
      }
      s.kind = StepKind::kPosterize;
      s.bits = static_cast<uint32_t>(magnitude);
      break;
    }
    case A::kSolarize:
      s.kind = StepKind::kSolarize;
      s.threshold = static_cast<float>(magnitude);
      break;
    case A::kAutoContrast:
      s.kind = StepKind::kAutocontrast;
      break;
    case A::kEqualize:
      s.kind = StepKind::kEqualize;
      break;
    case A::kInvert:
      s.kind = StepKind::kInvert;
      break;
    default:
      return absl::InvalidArgumentError("unknown augmentation op");
  }
  ++steps->count;
  return absl::OkStatus();
}

namespace {

// One op drawn from `space`: the op, its bin (uniform below `bins_below`,
// or `fixed_bin` when that is >= 0) and its sign; its steps appended.
absl::Status DrawSpaceOp(const OpParams& op, uint32_t op_index, PolicySpace space,
                         uint32_t num_bins, int32_t fixed_bin, uint32_t bins_below, uint32_t height,
                         uint32_t width, KeyedRng& rng, SampleSteps* steps) {
  const AugOp* ops = nullptr;
  const uint32_t n = SpaceOps(space, &ops);
  const AugOp aug = ops[rng.Below(n)];
  int32_t bin = -1;
  double magnitude = 0.0;
  if (HasBins(aug)) {
    bin = fixed_bin >= 0 ? fixed_bin : static_cast<int32_t>(rng.Below(bins_below));
    magnitude = SpaceMagnitude(space, aug, num_bins, static_cast<uint32_t>(bin), height, width);
  }
  if (IsSignedOp(aug) && DrawNegative(rng)) magnitude = -magnitude;
  return AppendAugSteps(op, op_index, aug, bin, magnitude, steps);
}

// Dirichlet(alpha * ones(k)) in float32, as torch returns it: each gamma
// draw as a float clamped to FLT_MIN (torch's clamp: never 0 / 0), the sum
// and the quotients in float.
void DrawDirichlet(KeyedRng& rng, double alpha, uint32_t k, float* out) {
  float g[kMaxAugMixWidth > 2 ? kMaxAugMixWidth : 2];
  float sum = 0.0f;
  for (uint32_t i = 0; i < k; ++i) {
    g[i] = std::max(static_cast<float>(GammaDraw(rng, alpha)), std::numeric_limits<float>::min());
    sum += g[i];
  }
  for (uint32_t i = 0; i < k; ++i) out[i] = g[i] / sum;
}

}  // namespace

absl::Status DrawPolicy(const OpParams& op, uint32_t op_index, uint32_t height, uint32_t width,
                        KeyedRng& rng, SampleSteps* steps) {
  switch (op.kind) {
    case OpKind::kAutoAugment: {
      const SubPolicyOp(*table)[2] = nullptr;
      const uint32_t n = AutoAugmentSubPolicies(op.policy, &table);
      if (n == 0) return absl::InvalidArgumentError("unknown AutoAugment policy");
      const SubPolicyOp* sub = table[rng.Below(n)];
      float probs[2];
      bool negative[2];
      for (int k = 0; k < 2; ++k) probs[k] = Rand24(rng);
      for (int k = 0; k < 2; ++k) negative[k] = DrawNegative(rng);
      for (int k = 0; k < 2; ++k) {
        if (!(probs[k] <= sub[k].p)) continue;
        double magnitude = 0.0;
        if (sub[k].bin >= 0) {
          magnitude = SpaceMagnitude(PolicySpace::kAutoAugment, sub[k].op, 10,
                                     static_cast<uint32_t>(sub[k].bin), height, width);
        }
        if (IsSignedOp(sub[k].op) && negative[k]) magnitude = -magnitude;
        if (absl::Status s = AppendAugSteps(op, op_index, sub[k].op,
                                            HasBins(sub[k].op) ? sub[k].bin : -1, magnitude, steps);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    }
    case OpKind::kRandAugment:
      for (uint32_t k = 0; k < op.num_ops; ++k) {
        if (absl::Status s =
                DrawSpaceOp(op, op_index, PolicySpace::kRandAugment, op.num_magnitude_bins,
                            static_cast<int32_t>(op.magnitude), 0, height, width, rng, steps);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    case OpKind::kTrivialAugmentWide:
      return DrawSpaceOp(op, op_index, PolicySpace::kTrivialAugmentWide, op.num_magnitude_bins, -1,
                         op.num_magnitude_bins, height, width, rng, steps);
    case OpKind::kAugMix: {
      const uint32_t width_n = op.mixture_width;
      if (width_n < 1 || width_n > kMaxAugMixWidth) {
        return absl::InvalidArgumentError("AugMix's mixture_width out of range");
      }
      float m[2];
      DrawDirichlet(rng, op.alpha, 2, m);
      float weights[kMaxAugMixWidth];
      DrawDirichlet(rng, op.alpha, width_n, weights);
      for (uint32_t c = 0; c < width_n; ++c) weights[c] *= m[1];
      if (steps->count + MaxPolicySteps(op) > kMaxSteps) {
        return absl::InvalidArgumentError("too many steps");
      }
      auto marker = [&](StepKind kind, float weight) {
        Step& s = steps->steps[steps->count++];
        s = Step();
        s.kind = kind;
        s.op = op_index;
        s.mix_weight = weight;
      };
      // torchvision's AugMix passes a PIL image's fill as given, None by
      // default; the params hold no "not given": fill 0 is taken as None.
      const uint32_t fill_given = op.fill[0] != 0 || op.fill[1] != 0 || op.fill[2] != 0 ? 1 : 0;
      marker(StepKind::kMixBegin, m[0]);
      for (uint32_t c = 0; c < width_n; ++c) {
        marker(StepKind::kMixChain, weights[c]);
        const uint32_t depth = op.chain_depth > 0 ? static_cast<uint32_t>(op.chain_depth)
                                                  : 1 + static_cast<uint32_t>(rng.Below(3));
        for (uint32_t d = 0; d < depth; ++d) {
          const uint32_t first = steps->count;
          // AugMix's space has _PARAMETER_MAX (10) bins, drawn below severity.
          if (absl::Status s = DrawSpaceOp(op, op_index, AugMixSpace(op), 10, -1, op.severity,
                                           height, width, rng, steps);
              !s.ok()) {
            return s;
          }
          // forward() runs _apply_op on the PIL image's uint8 tensor.
          for (uint32_t k = first; k < steps->count; ++k) {
            Step& s = steps->steps[k];
            s.tensor_kernels = 1;
            if (s.kind == StepKind::kAffine || s.kind == StepKind::kRotate) {
              s.tensor_fill = fill_given;
            }
          }
        }
      }
      marker(StepKind::kMixEnd, 0.0f);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("ops[", op_index, "]: not a policy op: ", OpKindName(op.kind)));
  }
}

uint32_t MaxPolicySteps(const OpParams& op) {
  switch (op.kind) {
    case OpKind::kAutoAugment:
      return 2;
    case OpKind::kRandAugment:
      return op.num_ops;
    case OpKind::kTrivialAugmentWide:
      return 1;
    case OpKind::kAugMix: {
      const uint32_t depth = op.chain_depth > 0 ? static_cast<uint32_t>(op.chain_depth) : 3;
      return 2 + op.mixture_width * (1 + depth);
    }
    default:
      return 0;
  }
}

}  // namespace stoker::image
