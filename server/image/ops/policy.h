// torchvision 0.14's augmentation policies (transforms/autoaugment.py):
// AutoAugment, RandAugment, TrivialAugmentWide and AugMix, their op spaces
// and magnitude bins, and their draws turned into steps (pipeline.h).
// Internal to stoker_image: DrawSteps calls DrawPolicy; tests and tools
// call the rest.
//
// What matches torchvision, and what only has its distribution:
//   - every magnitude is the float32 value torchvision takes from its
//     space (torch.linspace as torch 1.13's CPU kernel computes it, the
//     Posterize bins, the image-size dependent translations) and is turned
//     into a step exactly as _apply_op calls F.affine, F.rotate, F.adjust_*,
//     F.posterize, ... (ShearX: shear [degrees(atan(m)), 0] about the
//     corner [0, 0]; TranslateX: translate [int(m), 0] about the image's
//     center; Brightness, Color, Contrast: one ColorJitter adjustment,
//     factor 1 + m; Identity: no step);
//   - the draws come from stoker's KeyedRng, not torch's generator: the
//     same distributions (a uniform sub-policy or op, a uniform bin, a sign
//     negative with probability 1/2, U[0, 1) <= p for AutoAugment's ops,
//     AugMix's Dirichlet weights from Gamma draws), other values;
//   - AugMix: torchvision runs its chains on the PIL image's uint8 tensor,
//     with its tensor kernels (F.affine by grid_sample, _blend in float32,
//     ...), which differ from the PIL ones; AugMix's chain steps carry
//     tensor_kernels 1 and run those (ops.h's Tensor* kernels), mixed as
//     torchvision mixes (float32, truncated to uint8): a sample is
//     torchvision's for the same draws. Its fill: torchvision's None unless
//     given; stoker's params cannot tell a fill given as 0 from none, and
//     take 0 as None (tensor_fill 0; bilinear edges differ from an explicit
//     fill=0).

#ifndef STOKER_SERVER_IMAGE_OPS_POLICY_H_
#define STOKER_SERVER_IMAGE_OPS_POLICY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/image/steps.h"
#include "server/image/ops/rng.h"

namespace stoker::image {

// torch.linspace(start, end, steps)[i] for a float32 tensor, i < steps, as
// torch 1.13's CPU kernel computes it in its AVX2 build (the capability the
// Debian build runs on any x86-64 CPU with AVX2): step = (end - start) /
// (steps - 1) in float32; element i = start + step * i for i < steps / 2,
// else end - step * (steps - 1 - i), each one fused multiply-add; but the
// first 16 * floor(steps / 16) elements come in vectors of 8, element
// b + k (b a multiple of 8) = element b + float32(k * step). steps 1: start.
// (torch's generic build rounds the products separately; its AVX-512 one
// uses vectors of 16: their last bits differ from these for steps >= 14.
// Past 32768 steps, torch's grain size, it splits the range between
// threads, at places that depend on their number; this is one range.)
float TorchLinspace(float start, float end, uint32_t steps, uint32_t i);

// The op spaces: torchvision's _augmentation_space dicts, in their order.
enum class PolicySpace : uint32_t {
  kAutoAugment = 1,         // 14 ops, 10 bins (AutoAugment, no Identity)
  kRandAugment = 2,         // 14 ops: Identity, ..., Equalize
  kTrivialAugmentWide = 3,  // 14 ops, the wide ranges
  kAugMix = 4,              // 9 ops (all_ops false)
  kAugMixAllOps = 5,        // 13 ops
};

// The ops of `space` in torchvision's dict order (the index a uniform op
// draw picks); their count.
uint32_t SpaceOps(PolicySpace space, const AugOp** ops);

// Whether op's magnitude is drawn from bins (false: AutoContrast, Equalize,
// Invert, Identity, whose magnitude is 0) and whether it is signed
// (ShearX/Y, TranslateX/Y, Rotate, Brightness, Color, Contrast, Sharpness).
bool HasBins(AugOp op);
bool IsSignedOp(AugOp op);

// Bin `bin` (< num_bins) of op's magnitudes in `space` for a height x width
// image, the float32 value torchvision reads (Posterize's int as a float);
// 0 for ops without bins. Posterize with num_bins 1 is torch's own
// 8 - int32(nan) (-2147483640): torchvision then raises, and so does
// DrawPolicy.
float SpaceMagnitude(PolicySpace space, AugOp op, uint32_t num_bins, uint32_t bin, uint32_t height,
                     uint32_t width);

// torchvision's name of an op ("ShearX"); "unknown" outside AugOp.
const char* AugOpName(AugOp op);

// One op of an AutoAugment sub-policy: (op, probability, magnitude bin or
// -1 for none).
struct SubPolicyOp {
  AugOp op;
  float p;
  int32_t bin;
};

// The 25 sub-policies of `policy` (AutoAugment._get_policies), 2 ops each;
// their count (0 for an unknown policy).
uint32_t AutoAugmentSubPolicies(AutoAugmentPolicy policy, const SubPolicyOp (**table)[2]);

// Appends the steps of (aug, magnitude) as _apply_op makes them, with the
// policy op's interpolation and fill, marked with from_policy, aug, bin and
// magnitude (pipeline.h's Step). `op_index` is the op's place in the
// pipeline. INVALID_ARGUMENT when torchvision would raise (Posterize bits
// outside 0..8) or the steps would pass kMaxSteps.
[[nodiscard]] absl::Status AppendAugSteps(const OpParams& op, uint32_t op_index, AugOp aug,
                                          int32_t bin, double magnitude, SampleSteps* steps);

// Draws the policy op `op` (kAutoAugment, kRandAugment, kTrivialAugmentWide,
// kAugMix) for a height x width image from `rng` and appends its steps:
//   AutoAugment: a uniform sub-policy; for each of its 2 ops U[0, 1) (24
//     bits, as torch.rand) <= p and a sign;
//   RandAugment: num_ops times a uniform op, the fixed bin `magnitude`, a
//     sign for signed ops;
//   TrivialAugmentWide: a uniform op, a uniform bin (ops with bins), a sign
//     (signed ops);
//   AugMix: m ~ Dirichlet([alpha, alpha]), the chains' weights
//     Dirichlet([alpha] * width) * m[1] (float32), then per chain its depth
//     (chain_depth, or uniform in 1..3 when -1) and per op a uniform op, a
//     uniform bin below severity, a sign: kMixBegin(m[0]), per chain
//     kMixChain(weight) and its steps (tensor_kernels 1; tensor_fill 1 on
//     affine and rotate when op.fill is not 0), kMixEnd.
[[nodiscard]] absl::Status DrawPolicy(const OpParams& op, uint32_t op_index, uint32_t height,
                                      uint32_t width, KeyedRng& rng, SampleSteps* steps);

// The most steps DrawPolicy can append for `op` (AutoAugment 2, RandAugment
// num_ops, TrivialAugmentWide 1, AugMix 2 + width * (1 + depth), depth 3
// when drawn); 0 for other kinds.
uint32_t MaxPolicySteps(const OpParams& op);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_POLICY_H_
