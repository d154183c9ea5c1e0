#include "server/image/ops/policy.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "server/image/pipeline.h"
#include "server/image/ops/rng.h"
#include "testing/test_params.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using testing::AugMixOp;
using testing::AutoAugmentOp;
using testing::RandAugmentOp;
using testing::TrivialAugmentWideOp;

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

TEST_CASE("TorchLinspace is torch 1.13's CPU linspace, bit for bit", "[policy][draw]") {
  // FNV-1a (64-bit) over the float32 bit patterns of torch.linspace(start,
  // end, n) for n = 1..64 in turn, computed once with Debian's torch 1.13.1
  // (CPU capability AVX2, its default): the start and end of every space
  // torchvision's policies use (the translations at widths 224 and 500, and
  // AugMix's side / 3 at 331).
  struct Case {
    float start, end;
    uint64_t fnv;
  };
  const Case cases[] = {
      {0.0f, 0.3f, 0xacf9dc89ad0830daull},
      {0.0f, 0.99f, 0xd50e197badcb78f7ull},
      {0.0f, 0.9f, 0x57b07084627b828aull},
      {0.0f, 30.0f, 0x962db618a956bd11ull},
      {0.0f, 135.0f, 0x2ab5d74af8ab8756ull},
      {0.0f, 32.0f, 0xc2c4a70de8023a36ull},
      {255.0f, 0.0f, 0x7ff260ab7f19e3fdull},
      {0.0f, static_cast<float>(150.0 / 331.0 * 224), 0x3cc2dfe2e87f1b46ull},
      {0.0f, static_cast<float>(150.0 / 331.0 * 500), 0x0c4cfc1afdbe4d8eull},
      {0.0f, static_cast<float>(331 / 3.0), 0x1f8d99767a03218cull},
  };
  for (const Case& c : cases) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t n = 1; n <= 64; ++n) {
      for (uint32_t i = 0; i < n; ++i) {
        h ^= Bits(TorchLinspace(c.start, c.end, n, i));
        h *= 0x100000001b3ull;
      }
    }
    CAPTURE(c.start, c.end);
    CHECK(h == c.fnv);
  }
  // torch.linspace(0.0, 0.99, 31), TrivialAugmentWide's shear and color
  // bins, printed with float.hex().
  const float wide[31] = {0x0.0p+0f,
                          0x1.0e56040000000p-5f,
                          0x1.0e56040000000p-4f,
                          0x1.9581060000000p-4f,
                          0x1.0e56040000000p-3f,
                          0x1.51eb840000000p-3f,
                          0x1.9581060000000p-3f,
                          0x1.d916880000000p-3f,
                          0x1.0e56040000000p-2f,
                          0x1.3020c40000000p-2f,
                          0x1.51eb840000000p-2f,
                          0x1.73b6460000000p-2f,
                          0x1.9581060000000p-2f,
                          0x1.b74bc60000000p-2f,
                          0x1.d916880000000p-2f,
                          0x1.fae1480000000p-2f,
                          0x1.0e56040000000p-1f,
                          0x1.1f3b640000000p-1f,
                          0x1.3020c40000000p-1f,
                          0x1.4106260000000p-1f,
                          0x1.51eb860000000p-1f,
                          0x1.62d0e60000000p-1f,
                          0x1.73b6460000000p-1f,
                          0x1.849ba60000000p-1f,
                          0x1.9581060000000p-1f,
                          0x1.a666660000000p-1f,
                          0x1.b74bc80000000p-1f,
                          0x1.c831280000000p-1f,
                          0x1.d916880000000p-1f,
                          0x1.e9fbe80000000p-1f,
                          0x1.fae1480000000p-1f};
  for (uint32_t i = 0; i < 31; ++i) {
    CAPTURE(i);
    CHECK(Bits(TorchLinspace(0.0f, 0.99f, 31, i)) == Bits(wide[i]));
    CHECK(Bits(SpaceMagnitude(PolicySpace::kTrivialAugmentWide, AugOp::kShearX, 31, i, 1, 1)) ==
          Bits(wide[i]));
  }
  CHECK(TorchLinspace(0.3f, 7.0f, 1, 0) == 0.3f);
}

TEST_CASE("Posterize bins are torchvision's rounded ones", "[policy][draw]") {
  // 8 - (torch.arange(n) / ((n - 1) / 4)).round().int(), and AugMix's
  // 4 - ..., and the wide space's / 6: computed with torch 1.13.
  const int aa10[10] = {8, 8, 7, 7, 6, 6, 5, 5, 4, 4};
  const int wide31[31] = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5,
                          5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2};
  const int augmix10[10] = {4, 4, 3, 3, 2, 2, 1, 1, 0, 0};
  for (uint32_t i = 0; i < 10; ++i) {
    CHECK(SpaceMagnitude(PolicySpace::kAutoAugment, AugOp::kPosterize, 10, i, 9, 9) == aa10[i]);
    CHECK(SpaceMagnitude(PolicySpace::kAugMix, AugOp::kPosterize, 10, i, 9, 9) == augmix10[i]);
  }
  for (uint32_t i = 0; i < 31; ++i) {
    CHECK(SpaceMagnitude(PolicySpace::kTrivialAugmentWide, AugOp::kPosterize, 31, i, 9, 9) ==
          wide31[i]);
  }
  // One bin: torch's 8 - int32(nan), which torchvision's posterize refuses.
  CHECK(SpaceMagnitude(PolicySpace::kRandAugment, AugOp::kPosterize, 1, 0, 9, 9) == -2147483640.0f);
}

TEST_CASE("Space magnitudes depend on the image's size as torchvision's do", "[policy][draw]") {
  // TranslateX: 150/331 * width (AutoAugment, RandAugment), width / 3
  // (AugMix), 32 (TrivialAugmentWide); TranslateY the same with the height.
  CHECK(SpaceMagnitude(PolicySpace::kRandAugment, AugOp::kTranslateX, 31, 30, 100, 331) ==
        static_cast<float>(150.0));
  CHECK(SpaceMagnitude(PolicySpace::kRandAugment, AugOp::kTranslateY, 31, 30, 331, 100) ==
        static_cast<float>(150.0));
  CHECK(SpaceMagnitude(PolicySpace::kAugMix, AugOp::kTranslateX, 10, 9, 10, 300) == 100.0f);
  CHECK(SpaceMagnitude(PolicySpace::kTrivialAugmentWide, AugOp::kTranslateX, 31, 30, 7, 9) ==
        32.0f);
  CHECK(SpaceMagnitude(PolicySpace::kAutoAugment, AugOp::kRotate, 10, 9, 7, 9) == 30.0f);
  CHECK(SpaceMagnitude(PolicySpace::kTrivialAugmentWide, AugOp::kRotate, 31, 30, 7, 9) == 135.0f);
  CHECK(SpaceMagnitude(PolicySpace::kAutoAugment, AugOp::kSolarize, 10, 0, 7, 9) == 255.0f);
  CHECK(SpaceMagnitude(PolicySpace::kAutoAugment, AugOp::kSolarize, 10, 9, 7, 9) == 0.0f);
  CHECK(SpaceMagnitude(PolicySpace::kAutoAugment, AugOp::kEqualize, 10, 3, 7, 9) == 0.0f);
}

TEST_CASE("The spaces hold torchvision's ops in its order", "[policy][draw]") {
  const AugOp* ops = nullptr;
  REQUIRE(SpaceOps(PolicySpace::kRandAugment, &ops) == 14);
  CHECK(ops[0] == AugOp::kIdentity);
  CHECK(ops[13] == AugOp::kEqualize);
  REQUIRE(SpaceOps(PolicySpace::kAugMix, &ops) == 9);
  CHECK(ops[8] == AugOp::kEqualize);
  REQUIRE(SpaceOps(PolicySpace::kAugMixAllOps, &ops) == 13);
  CHECK(ops[9] == AugOp::kBrightness);
  CHECK(ops[12] == AugOp::kSharpness);
  const SubPolicyOp(*table)[2] = nullptr;
  for (auto policy :
       {AutoAugmentPolicy::kImageNet, AutoAugmentPolicy::kCifar10, AutoAugmentPolicy::kSvhn}) {
    REQUIRE(AutoAugmentSubPolicies(policy, &table) == 25);
  }
  AutoAugmentSubPolicies(AutoAugmentPolicy::kImageNet, &table);
  CHECK(table[0][0].op == AugOp::kPosterize);
  CHECK(table[0][0].p == 0.4f);
  CHECK(table[0][0].bin == 8);
  CHECK(table[24][1].op == AugOp::kEqualize);
  CHECK(table[24][1].bin == -1);
}

TEST_CASE("AppendAugSteps makes the steps _apply_op does", "[policy][draw]") {
  OpParams op = RandAugmentOp();
  op.fill[0] = 7, op.fill[1] = 8, op.fill[2] = 9;
  SampleSteps s;
  REQUIRE(AppendAugSteps(op, 2, AugOp::kShearX, 5, -0.25, &s).ok());
  REQUIRE(AppendAugSteps(op, 2, AugOp::kTranslateY, 5, -12.9, &s).ok());
  REQUIRE(AppendAugSteps(op, 2, AugOp::kRotate, 5, 11.5, &s).ok());
  REQUIRE(AppendAugSteps(op, 2, AugOp::kColor, 5, -0.5, &s).ok());
  REQUIRE(AppendAugSteps(op, 2, AugOp::kSharpness, 5, 0.5, &s).ok());
  REQUIRE(AppendAugSteps(op, 2, AugOp::kPosterize, 5, 6.0, &s).ok());
  REQUIRE(AppendAugSteps(op, 2, AugOp::kIdentity, -1, 0.0, &s).ok());
  REQUIRE(s.count == 6);
  const Step& shear = s.steps[0];
  CHECK(shear.kind == StepKind::kAffine);
  CHECK(shear.shear[0] == std::atan(-0.25) * (180.0 / M_PI));
  CHECK(shear.shear[1] == 0.0);
  CHECK(shear.has_center == 1);
  CHECK(shear.center[0] == 0.0f);
  CHECK(shear.fill[2] == 9);
  CHECK(shear.interpolation == Interpolation::kNearest);
  CHECK(shear.from_policy == 1);
  CHECK(shear.aug == AugOp::kShearX);
  CHECK(shear.aug_bin == 5);
  CHECK(shear.aug_magnitude == -0.25f);
  CHECK(shear.op == 2);
  CHECK(s.steps[1].kind == StepKind::kAffine);
  CHECK(s.steps[1].translate[0] == 0);
  CHECK(s.steps[1].translate[1] == -12);  // int(): toward zero
  CHECK(s.steps[1].has_center == 0);
  CHECK(s.steps[2].kind == StepKind::kRotate);
  CHECK(s.steps[2].angle == 11.5f);
  CHECK(s.steps[3].kind == StepKind::kColorJitter);
  CHECK(s.steps[3].jitter_count == 1);
  CHECK(s.steps[3].jitter_order[0] == kSaturation);
  CHECK(s.steps[3].factor[kSaturation] == 0.5f);
  CHECK(s.steps[4].kind == StepKind::kSharpness);
  CHECK(s.steps[4].factor[0] == 1.5f);
  CHECK(s.steps[5].kind == StepKind::kPosterize);
  CHECK(s.steps[5].bits == 6);
  CHECK(AppendAugSteps(op, 2, AugOp::kPosterize, 0, -2147483640.0, &s).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("GammaDraw's mean and variance are alpha's", "[policy][draw][rng]") {
  for (double alpha : {0.3, 1.0, 2.5}) {
    KeyedRng rng(91, static_cast<uint64_t>(alpha * 10));
    const int n = 40000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double g = GammaDraw(rng, alpha);
      REQUIRE(g >= 0);
      sum += g;
      sq += g * g;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    CAPTURE(alpha, mean, var);
    // Gamma(alpha, 1): mean alpha, variance alpha; 6 standard errors.
    CHECK(std::abs(mean - alpha) < 6 * std::sqrt(alpha / n));
    CHECK(std::abs(var - alpha) < 0.1 * alpha);
  }
}

TEST_CASE("DrawPolicy is pure and keeps to its step bounds", "[policy][draw]") {
  const OpParams ops[] = {AutoAugmentOp(),      AutoAugmentOp(AutoAugmentPolicy::kSvhn),
                          RandAugmentOp(8, 30), TrivialAugmentWideOp(),
                          AugMixOp(),           AugMixOp(10, 8, 8, 0.5f, false)};
  for (const OpParams& op : ops) {
    for (uint64_t i = 0; i < 300; ++i) {
      KeyedRng a(5, 0, i), b(5, 0, i);
      SampleSteps s1, s2;
      REQUIRE(DrawPolicy(op, 0, 120, 90, a, &s1).ok());
      REQUIRE(DrawPolicy(op, 0, 120, 90, b, &s2).ok());
      REQUIRE(s1.count == s2.count);
      CHECK(std::memcmp(s1.steps, s2.steps, sizeof(Step) * s1.count) == 0);
      CHECK(s1.count <= MaxPolicySteps(op));
    }
  }
}

TEST_CASE("AugMix: markers around its chains, weights summing to 1", "[policy][draw]") {
  for (int32_t depth : {-1, 2}) {
    const OpParams op = AugMixOp(3, 4, depth);
    int depths[4] = {0, 0, 0, 0};
    for (uint64_t i = 0; i < 400; ++i) {
      KeyedRng rng(8, 1, i);
      SampleSteps s;
      REQUIRE(DrawPolicy(op, 3, 64, 64, rng, &s).ok());
      REQUIRE(s.count >= 2 + 4);
      CHECK(s.steps[0].kind == StepKind::kMixBegin);
      CHECK(s.steps[s.count - 1].kind == StepKind::kMixEnd);
      double total = s.steps[0].mix_weight;
      uint32_t chains = 0, ops_in_chain = 0;
      for (uint32_t k = 1; k + 1 < s.count; ++k) {
        const Step& st = s.steps[k];
        CHECK(st.op == 3);
        if (st.kind == StepKind::kMixChain) {
          if (chains > 0 && depth < 0) ++depths[ops_in_chain];
          ++chains;
          ops_in_chain = 0;
          total += st.mix_weight;
          CHECK(st.mix_weight >= 0.0f);
          continue;
        }
        REQUIRE(chains > 0);
        CHECK(st.from_policy == 1);
        CHECK(st.aug_bin < 3);  // below severity
        CHECK(st.interpolation == Interpolation::kBilinear);
        CHECK(st.tensor_kernels == 1);  // torchvision runs the chains on the tensor
        CHECK(st.tensor_fill == 0);     // fill 0: None
        ++ops_in_chain;
      }
      if (depth < 0) ++depths[ops_in_chain];
      CHECK(chains == 4);
      CHECK(std::abs(total - 1.0) < 1e-5);
      if (depth > 0) CHECK(ops_in_chain <= 2);
    }
    // Identity is not in AugMix's space: a chain of depth d has d steps.
    if (depth < 0) {
      CHECK(depths[0] == 0);
      for (int d = 1; d <= 3; ++d) CHECK(depths[d] > 300);  // 400 expected each
    }
  }
}

TEST_CASE("AugMix's chain steps run the tensor kernels, other policies' do not", "[policy][draw]") {
  OpParams augmix = AugMixOp(10, 4, 3);
  augmix.fill[0] = 30, augmix.fill[1] = 60, augmix.fill[2] = 90;
  bool geometric = false;
  for (uint64_t i = 0; i < 50; ++i) {
    KeyedRng rng(2, 0, i);
    SampleSteps s;
    REQUIRE(DrawPolicy(augmix, 0, 64, 80, rng, &s).ok());
    for (uint32_t k = 0; k < s.count; ++k) {
      const Step& st = s.steps[k];
      const bool marker = st.kind == StepKind::kMixBegin || st.kind == StepKind::kMixChain ||
                          st.kind == StepKind::kMixEnd;
      CHECK(st.tensor_kernels == (marker ? 0u : 1u));
      // A fill given: affine and rotate blend it in through the mask.
      const bool affine = st.kind == StepKind::kAffine || st.kind == StepKind::kRotate;
      CHECK(st.tensor_fill == (affine ? 1u : 0u));
      geometric = geometric || affine;
    }
  }
  CHECK(geometric);
  OpParams trivial;
  trivial.kind = OpKind::kTrivialAugmentWide;
  trivial.num_magnitude_bins = 31;
  trivial.interpolation = Interpolation::kNearest;
  for (uint64_t i = 0; i < 50; ++i) {
    KeyedRng rng(2, 0, i);
    SampleSteps s;
    REQUIRE(DrawPolicy(trivial, 0, 64, 80, rng, &s).ok());
    for (uint32_t k = 0; k < s.count; ++k) CHECK(s.steps[k].tensor_kernels == 0);
  }
}

}  // namespace
}  // namespace stoker::image
