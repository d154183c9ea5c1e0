// ValidateParams, MaxSampleBytes (pipeline_params.h): every op's parameters
// checked, the limits held.

#include "server/image/pipeline_params.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"
#include "stoker/ring_layout.h"
#include "testing/test_params.h"

namespace stoker::image {
namespace {

using testing::DecodeParams;
using testing::EvalParams;
using testing::Op;
using testing::ShortestSize;
using testing::TrainParams;
using testing::WithOps;

TEST_CASE("ValidateParams and MaxSampleBytes", "[pipeline]") {
  PipelineParams p = TrainParams();
  CHECK(ValidateParams(p).ok());
  CHECK(MaxSampleBytes(p) == 224 * 224 * 3);
  p.dtype = ring::kFloat32;
  CHECK(MaxSampleBytes(p) == 224 * 224 * 3 * 4);
  auto bad = [](auto edit) {
    PipelineParams q = TrainParams();
    edit(q);
    return ValidateParams(q).code() == absl::StatusCode::kInvalidArgument;
  };
  CHECK(bad([](PipelineParams& q) { q.out_height = 0; }));
  CHECK(bad([](PipelineParams& q) { q.out_width = 8193; }));
  CHECK(bad([](PipelineParams& q) { q.out_width = 8192, q.out_height = 8192; }));
  CHECK(bad([](PipelineParams& q) { q.ops[0].scale[0] = 0; }));
  CHECK(bad([](PipelineParams& q) { q.ops[0].scale[0] = 0.9f, q.ops[0].scale[1] = 0.5f; }));
  CHECK(bad([](PipelineParams& q) { q.ops[0].ratio[0] = -1; }));
  CHECK(bad([](PipelineParams& q) { q.ops[0].ratio[1] = NAN; }));
  CHECK(bad([](PipelineParams& q) { q.ops[1].p = 1.5f; }));
  CHECK(bad([](PipelineParams& q) { q.stdev[1] = 0; }));
  CHECK(bad([](PipelineParams& q) { q.mean[2] = INFINITY; }));
  CHECK(bad([](PipelineParams& q) { q.dtype = 9; }));
  CHECK(bad([](PipelineParams& q) { q.layout = 0; }));
  CHECK(bad([](PipelineParams& q) { q.ops[1].kind = static_cast<OpKind>(77); }));
  CHECK(bad([](PipelineParams& q) { q.ops[0].interpolation = static_cast<Interpolation>(0); }));
  CHECK(bad([](PipelineParams& q) { q = EvalParams(65501); }));
  CHECK(bad([](PipelineParams& q) { q = DecodeParams(), q.out_width = 224; }));
  PipelineParams d = DecodeParams();
  CHECK(ValidateParams(d).ok());
  CHECK(MaxSampleBytes(d) == (4ull << 20) * 3);
}

TEST_CASE("ValidateParams checks every op", "[pipeline][ops]") {
  auto bad = [](OpParams op) {
    return ValidateParams(WithOps({op})).code() == absl::StatusCode::kInvalidArgument;
  };
  OpParams blur = Op(OpKind::kGaussianBlur);
  blur.kernel_x = blur.kernel_y = 3;
  blur.sigma[0] = 0.1f, blur.sigma[1] = 2.0f;
  CHECK_FALSE(bad(blur));
  blur.kernel_x = 4;
  CHECK(bad(blur));
  blur.kernel_x = 3, blur.sigma[0] = 0;
  CHECK(bad(blur));
  OpParams j = Op(OpKind::kColorJitter);
  j.jitter_set = 1u << kHue;
  j.jitter[kHue][0] = -0.6f, j.jitter[kHue][1] = 0.1f;
  CHECK(bad(j));
  j.jitter[kHue][0] = -0.5f;
  CHECK_FALSE(bad(j));
  j.jitter_set = 1u << kBrightness;
  j.jitter[kBrightness][0] = -0.1f, j.jitter[kBrightness][1] = 1.0f;
  CHECK(bad(j));
  j.jitter_set = 16;
  CHECK(bad(j));
  OpParams crop = Op(OpKind::kRandomCrop);
  crop.height = crop.width = 8;
  CHECK_FALSE(bad(crop));
  crop.padding_mode = static_cast<PadMode>(4);
  CHECK(bad(crop));
  crop.padding_mode = PadMode::kEdge;
  OpParams resize = Op(OpKind::kResize);
  resize.height = 10;
  resize.max_size = 10;  // must be larger than the size
  CHECK(bad(resize));
  resize.max_size = 11;
  CHECK_FALSE(bad(resize));
  resize.width = 12;  // max_size needs a single size
  CHECK(bad(resize));
  OpParams flip = Op(OpKind::kVerticalFlip);
  flip.p = -0.1f;
  CHECK(bad(flip));
  PipelineParams many = WithOps({});
  many.op_count = kMaxOps + 1;
  CHECK(ValidateParams(many).code() == absl::StatusCode::kInvalidArgument);
  const absl::Status s = ValidateParams(WithOps({crop, flip}));
  CHECK_THAT(std::string(s.message()), Catch::Contains("ops[1] RandomVerticalFlip"));
  // Any size (no out_height): the bound of the ops, else max_decode_pixels.
  PipelineParams any = WithOps({flip});
  any.ops[0].p = 0.5f;
  CHECK(MaxSampleBytes(any) == (4ull << 20) * 3);
  any.dtype = ring::kFloat16;
  CHECK(MaxSampleBytes(any) == (4ull << 20) * 6);
  CHECK(MaxSampleBytes(WithOps({crop})) == 8 * 8 * 3);
}

TEST_CASE("ValidateParams checks the affine, point, policy and erasing ops", "[pipeline][ops]") {
  auto bad_list = [](PipelineParams p) {
    return ValidateParams(p).code() == absl::StatusCode::kInvalidArgument;
  };
  auto bad = [&](OpParams op) { return bad_list(WithOps({op})); };
  OpParams rot = Op(OpKind::kRandomRotation);
  rot.degrees[0] = -10, rot.degrees[1] = 10;
  rot.interpolation = Interpolation::kNearest;
  CHECK_FALSE(bad(rot));
  rot.interpolation = Interpolation::kAntialias;  // not an affine resampling
  CHECK(bad(rot));
  rot.interpolation = Interpolation::kBilinear;
  rot.degrees[0] = 11;
  CHECK(bad(rot));
  rot.degrees[0] = -10, rot.center[1] = NAN;
  CHECK(bad(rot));
  OpParams aff = Op(OpKind::kRandomAffine);
  aff.interpolation = Interpolation::kNearest;
  aff.has_translate = 1, aff.translate[0] = 0.2f, aff.translate[1] = 1.0f;
  aff.has_scale = 1, aff.affine_scale[0] = 0.5f, aff.affine_scale[1] = 2.0f;
  aff.shear_count = 4, aff.shear[0] = -5, aff.shear[1] = 5, aff.shear[2] = 0, aff.shear[3] = 1;
  CHECK_FALSE(bad(aff));
  for (auto edit : std::vector<void (*)(OpParams&)>{
           [](OpParams& o) { o.translate[1] = 1.5f; },
           [](OpParams& o) { o.affine_scale[0] = 0; },
           [](OpParams& o) { o.affine_scale[0] = 3; },
           [](OpParams& o) { o.shear_count = 3; },
           [](OpParams& o) { o.shear[3] = -1; },
           [](OpParams& o) { o.degrees[1] = INFINITY; },
       }) {
    OpParams o = aff;
    edit(o);
    CHECK(bad(o));
  }
  OpParams post = Op(OpKind::kRandomPosterize);
  post.p = 0.5f, post.bits = 8;
  CHECK_FALSE(bad(post));
  post.bits = 9;
  CHECK(bad(post));
  OpParams sol = Op(OpKind::kRandomSolarize);
  sol.p = 0.5f, sol.threshold = NAN;
  CHECK(bad(sol));
  OpParams sharp = Op(OpKind::kRandomAdjustSharpness);
  sharp.p = 0.5f, sharp.sharpness_factor = -0.5f;
  CHECK(bad(sharp));
  OpParams inv = Op(OpKind::kRandomInvert);
  inv.p = 1.5f;
  CHECK(bad(inv));
  OpParams pil = Op(OpKind::kImageFilterGaussianBlur);
  pil.p = 1.0f, pil.sigma[0] = 0.0f, pil.sigma[1] = 1000.0f;
  CHECK_FALSE(bad(pil));
  for (auto edit : std::vector<void (*)(OpParams&)>{
           [](OpParams& o) { o.sigma[0] = -0.5f; },
           [](OpParams& o) { o.sigma[0] = 2.0f, o.sigma[1] = 1.0f; },
           [](OpParams& o) { o.sigma[1] = 1000.5f; },
           [](OpParams& o) { o.sigma[1] = NAN; },
           [](OpParams& o) { o.p = -0.1f; },
       }) {
    OpParams o = pil;
    edit(o);
    CHECK(bad(o));
  }
  // Interpolations: the resizes take bicubic, the affine ops do not.
  OpParams rs = Op(OpKind::kResize);
  rs.height = 8, rs.interpolation = Interpolation::kBicubic;
  CHECK_FALSE(bad(rs));
  rs.interpolation = static_cast<Interpolation>(9);
  CHECK(bad(rs));
  CHECK_FALSE(bad(testing::AutoAugmentOp()));
  OpParams aa = testing::AutoAugmentOp();
  aa.policy = static_cast<AutoAugmentPolicy>(4);
  CHECK(bad(aa));
  CHECK_FALSE(bad(testing::RandAugmentOp()));
  CHECK_FALSE(bad(testing::RandAugmentOp(kMaxPolicyOps, 30, 31)));
  CHECK(bad(testing::RandAugmentOp(kMaxPolicyOps + 1)));
  CHECK(bad(testing::RandAugmentOp(2, 31, 31)));  // magnitude must index a bin
  CHECK(bad(testing::TrivialAugmentWideOp(1)));
  CHECK_FALSE(bad(testing::TrivialAugmentWideOp(2)));
  CHECK_FALSE(bad(testing::AugMixOp()));
  CHECK(bad(testing::AugMixOp(0)));
  CHECK(bad(testing::AugMixOp(11)));
  CHECK(bad(testing::AugMixOp(3, 0)));
  CHECK(bad(testing::AugMixOp(3, kMaxAugMixWidth + 1)));
  CHECK(bad(testing::AugMixOp(3, 3, 0)));
  CHECK(bad(testing::AugMixOp(3, 3, kMaxAugMixDepth + 1)));
  CHECK(bad(testing::AugMixOp(3, 3, -1, 0.0f)));
  OpParams mix = testing::AugMixOp();
  mix.interpolation = Interpolation::kAntialias;
  CHECK(bad(mix));
  // RandomErasing: only after every other op; "random" needs a float output.
  OpParams erase = testing::RandomErasingOp();
  CHECK_FALSE(bad(erase));
  inv.p = 0.5f;
  CHECK_FALSE(bad_list(WithOps({inv, erase, erase})));
  CHECK(bad_list(WithOps({erase, inv})));
  const absl::Status order = ValidateParams(WithOps({erase, inv}));
  CHECK_THAT(std::string(order.message()), Catch::Contains("ops[0] RandomErasing"));
  erase.erase_random = 1;
  CHECK(bad(erase));
  PipelineParams float_out = WithOps({erase});
  float_out.dtype = ring::kFloat32;
  CHECK(ValidateParams(float_out).ok());
  erase.erase_random = 0;
  erase.erase_value[0] = 0.5f;  // uint8 outputs take whole values
  CHECK(bad(erase));
  erase.erase_value[0] = 255;
  CHECK_FALSE(bad(erase));
  erase.erase_scale[0] = 0.5f, erase.erase_scale[1] = 0.2f;
  CHECK(bad(erase));
  erase.erase_scale[0] = 0.1f, erase.erase_scale[1] = 1.2f;
  CHECK(bad(erase));
  erase.erase_scale[1] = 0.2f, erase.erase_ratio[0] = 0;
  CHECK(bad(erase));
  erase.erase_ratio[0] = 0.3f, erase.erase_value[1] = NAN;
  CHECK(bad(erase));
  // The steps the ops can make: AugMix(width 8, depth 8) 2 + 8 * 9 = 74.
  const OpParams big = testing::AugMixOp(3, 8, 8);
  CHECK_FALSE(bad_list(WithOps({big})));
  CHECK_FALSE(bad_list(WithOps({big, testing::AugMixOp(3, 8, 3), inv, inv})));  // 74 + 34 + 2
  const absl::Status many = ValidateParams(WithOps({big, big}));
  CHECK(many.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(many.message()), Catch::Contains("148 steps"));
}

}  // namespace
}  // namespace stoker::image

namespace stoker::image {
namespace {

TEST_CASE("Views: outputs, each view's pipeline, and ValidateParams", "[pipeline][views]") {
  PipelineParams p = testing::MultiViewParams();
  REQUIRE(ValidateParams(p).ok());
  CHECK(OutputCount(p) == 5);
  CHECK(OutputCount(testing::TrainParams()) == 1);
  const uint32_t want_view[] = {0, 0, 1, 1, 1};
  for (uint32_t k = 0; k < 5; ++k) CHECK(ViewOfOutput(p, k) == want_view[k]);
  PipelineParams one;
  ViewPipeline(p, 1, &one);
  CHECK(one.view_count == 0);
  CHECK(one.op_count == 2);
  CHECK(one.ops[0].kind == OpKind::kRandomResizedCrop);
  CHECK(one.ops[1].kind == OpKind::kGaussianBlur);
  CHECK(one.out_height == 32);
  CHECK(one.dtype == p.dtype);
  CHECK(MaxSampleBytes(one) == 32 * 32 * 3);
  REQUIRE(ValidateParams(one).ok());

  auto error = [](const PipelineParams& q) {
    const absl::Status s = ValidateParams(q);
    REQUIRE_FALSE(s.ok());
    return std::string(s.message());
  };
  using Catch::Matchers::Contains;
  PipelineParams q = p;
  q.views[1].first_op = 2;  // overlaps view 0's
  CHECK_THAT(error(q), Contains("view 1: its ops do not follow"));
  q = p;
  q.views[1].op_count = 1;  // leaves an op out
  CHECK_THAT(error(q), Contains("ops past the last view's"));
  q = p;
  q.views[1].copies = 11;  // 13 outputs
  CHECK_THAT(error(q), Contains("at most 12 outputs"));
  q = p;
  q.views[0].copies = 0;
  CHECK_THAT(error(q), Contains("view 0: 1..12 copies"));
  q = p;
  q.views[1].out_height = 0;
  CHECK_THAT(error(q), Contains("view 1 needs its output size"));
  q = p;
  q.views[0].out_height = 65;  // not what its RandomResizedCrop makes
  q.out_height = 65;
  REQUIRE(ValidateParams(q).ok());  // caught per sample, as a fixed shape is
  q = p;
  q.out_width = 32;
  CHECK_THAT(error(q), Contains("not the first view's"));
  q = p;
  q.ops[4].kernel_x = 4;  // an even kernel: view 1's op 1
  CHECK_THAT(error(q), Contains("view 1: "));
  q = p;
  q.ops[3].kind = OpKind::kRandomIoUCrop;
  CHECK_THAT(error(q), Contains("view 1: RandomIoUCrop needs boxes"));
  q = p;
  q.view_count = kMaxViews + 1;
  CHECK_THAT(error(q), Contains("at most 12 views"));
}

}  // namespace
}  // namespace stoker::image
