// Lowering an effective spec into the workers' PipelineParams: one OpParams
// per op with every parameter, the output's shape and ring enums. Pure.

#include "pipeline/lower_pipeline.h"

#include <catch2/catch.hpp>
#include <string>

#include "pipeline/pipeline_spec.h"
#include "stoker/ring_layout.h"

namespace stoker {
namespace {

v1::PipelineSpec Eff(const std::string& keywords) {
  auto r = pipeline::SpecFromKeywordsJson(keywords);
  REQUIRE(r.ok());
  auto e = pipeline::Effective(*r);
  INFO(e.status().ToString());
  REQUIRE(e.ok());
  return *e;
}

image::PipelineParams Lower(const std::string& keywords) {
  auto p = LowerPipeline(Eff(keywords));
  INFO(keywords << ": " << p.status().ToString());
  REQUIRE(p.ok());
  return *p;
}

TEST_CASE("the train preset lowers to RandomResizedCrop + RandomHorizontalFlip") {
  const image::PipelineParams p = Lower("{}");
  REQUIRE(p.op_count == 2);
  const image::OpParams& rrc = p.ops[0];
  CHECK(rrc.kind == image::OpKind::kRandomResizedCrop);
  CHECK(rrc.height == 224);
  CHECK(rrc.width == 224);
  CHECK(rrc.scale[0] == 0.08f);
  CHECK(rrc.scale[1] == 1.0f);
  CHECK(rrc.ratio[0] == 3.0f / 4.0f);
  CHECK(rrc.ratio[1] == 4.0f / 3.0f);
  CHECK(rrc.interpolation == image::Interpolation::kAntialias);
  CHECK(p.ops[1].kind == image::OpKind::kHorizontalFlip);
  CHECK(p.ops[1].p == 0.5f);
  for (uint32_t i = p.op_count; i < image::kMaxOps; ++i)
    CHECK(p.ops[i].kind == image::OpKind::kNone);
  CHECK(p.out_height == 224);
  CHECK(p.out_width == 224);
  CHECK(p.dtype == ring::kUint8);
  CHECK(p.layout == ring::kNHWC);
  CHECK(p.mean[0] == 0.485f);
  CHECK(p.stdev[2] == 0.225f);
  CHECK(p.max_decode_pixels == (64ull << 20));
  CHECK(p.exact_decode == 0);
  CHECK(p.apply_exif == 0);
}

TEST_CASE("eval, antialias=false, floats, flags") {
  const image::PipelineParams p = Lower(
      R"({"pipeline": "eval", "size": [160, 128], "antialias": false, "dtype": "float16",
          "mean": 0.5, "std": 0.25, "exact_decode": true, "apply_exif_orientation": true,
          "max_decode_pixels": 5000000})");
  REQUIRE(p.op_count == 2);
  CHECK(p.ops[0].kind == image::OpKind::kResize);
  CHECK(p.ops[0].height == 146);  // round(256 * 128 / 224), the shorter side
  CHECK(p.ops[0].width == 0);
  CHECK(p.ops[0].max_size == 0);
  CHECK(p.ops[0].interpolation == image::Interpolation::kBilinear);
  CHECK(p.ops[1].kind == image::OpKind::kCenterCrop);
  CHECK(p.ops[1].height == 160);
  CHECK(p.ops[1].width == 128);
  CHECK(p.out_height == 160);
  CHECK(p.out_width == 128);
  CHECK(p.dtype == ring::kFloat16);
  CHECK(p.layout == ring::kNCHW);
  CHECK(p.mean[1] == 0.5f);
  CHECK(p.stdev[1] == 0.25f);
  CHECK(p.exact_decode == 1);
  CHECK(p.apply_exif == 1);
  CHECK(p.max_decode_pixels == 5000000);
}

TEST_CASE("every op's parameters reach its OpParams") {
  const image::PipelineParams p = Lower(R"({"ops": [
      {"Resize": {"size": 64, "max_size": 90}},
      {"Resize": {"size": [70, 80]}},
      {"RandomCrop": {"size": [32, 40], "padding": [1, 2, 3, 4], "fill": [5, 6, 7],
                      "pad_if_needed": true, "padding_mode": "symmetric"}},
      {"RandomVerticalFlip": {"p": 0.25}},
      {"ColorJitter": {"brightness": 0.5, "saturation": [0.2, 1.5], "hue": 0.1}},
      {"Grayscale": {"num_output_channels": 3}},
      {"RandomGrayscale": {}},
      {"GaussianBlur": {"kernel_size": [3, 5], "sigma": [0.5, 1.5]}},
      {"CenterCrop": {"size": 30}}], "layout": "nchw"})");
  REQUIRE(p.op_count == 9);
  CHECK(p.ops[0].kind == image::OpKind::kResize);
  CHECK(p.ops[0].height == 64);
  CHECK(p.ops[0].width == 0);
  CHECK(p.ops[0].max_size == 90);
  CHECK(p.ops[0].interpolation == image::Interpolation::kAntialias);
  CHECK(p.ops[1].height == 70);
  CHECK(p.ops[1].width == 80);
  const image::OpParams& rc = p.ops[2];
  CHECK(rc.kind == image::OpKind::kRandomCrop);
  CHECK(rc.height == 32);
  CHECK(rc.width == 40);
  CHECK(rc.padding[0] == 1);
  CHECK(rc.padding[1] == 2);
  CHECK(rc.padding[2] == 3);
  CHECK(rc.padding[3] == 4);
  CHECK(rc.fill[0] == 5);
  CHECK(rc.fill[1] == 6);
  CHECK(rc.fill[2] == 7);
  CHECK(rc.pad_if_needed == 1);
  CHECK(rc.padding_mode == image::PadMode::kSymmetric);
  CHECK(p.ops[3].kind == image::OpKind::kVerticalFlip);
  CHECK(p.ops[3].p == 0.25f);
  const image::OpParams& cj = p.ops[4];
  CHECK(cj.kind == image::OpKind::kColorJitter);
  CHECK(cj.jitter_set ==
        ((1u << image::kBrightness) | (1u << image::kSaturation) | (1u << image::kHue)));
  CHECK(cj.jitter[image::kBrightness][0] == 0.5f);
  CHECK(cj.jitter[image::kBrightness][1] == 1.5f);
  CHECK(cj.jitter[image::kContrast][0] == 0.0f);
  CHECK(cj.jitter[image::kSaturation][0] == 0.2f);
  CHECK(cj.jitter[image::kSaturation][1] == 1.5f);
  CHECK(cj.jitter[image::kHue][0] == Approx(-0.1f));
  CHECK(cj.jitter[image::kHue][1] == Approx(0.1f));
  CHECK(p.ops[5].kind == image::OpKind::kGrayscale);
  CHECK(p.ops[6].kind == image::OpKind::kRandomGrayscale);
  CHECK(p.ops[6].p == 0.1f);
  const image::OpParams& gb = p.ops[7];
  CHECK(gb.kind == image::OpKind::kGaussianBlur);
  CHECK(gb.kernel_x == 3);
  CHECK(gb.kernel_y == 5);
  CHECK(gb.sigma[0] == 0.5f);
  CHECK(gb.sigma[1] == 1.5f);
  CHECK(p.ops[8].kind == image::OpKind::kCenterCrop);
  CHECK(p.out_height == 30);
  CHECK(p.out_width == 30);
  CHECK(p.dtype == ring::kUint8);
  CHECK(p.layout == ring::kNCHW);
  // Each padding mode by its name.
  const image::PadMode modes[] = {image::PadMode::kConstant, image::PadMode::kEdge,
                                  image::PadMode::kReflect, image::PadMode::kSymmetric};
  for (size_t m = 0; m < std::size(pipeline::kPaddingModes); ++m) {
    const std::string kw = std::string(R"({"ops": [{"RandomCrop": {"size": 8, "padding_mode": ")") +
                           std::string(pipeline::kPaddingModes[m]) + "\"}}]}";
    CHECK(Lower(kw).ops[0].padding_mode == modes[m]);
  }
}

TEST_CASE("the affine ops and the per-pixel random ops reach their OpParams") {
  const image::PipelineParams p = Lower(R"({"ops": [
      {"CenterCrop": {"size": 32}},
      {"RandomRotation": {"degrees": 12.5}},
      {"RandomRotation": {"degrees": [-3, 7], "interpolation": "bilinear", "center": [4.5, 6],
                          "fill": [10, 20, 30]}},
      {"RandomAffine": {"degrees": 0}},
      {"RandomAffine": {"degrees": [1, 2], "translate": [0.25, 0.5], "scale": [0.75, 1.25],
                        "shear": 4, "interpolation": "bilinear", "fill": 9, "center": [0, 0]}},
      {"RandomAffine": {"degrees": 0, "shear": [-1, 2, -3, 4]}},
      {"RandomPosterize": {"bits": 3, "p": 0.25}},
      {"RandomSolarize": {"threshold": 100.5}},
      {"RandomAdjustSharpness": {"sharpness_factor": 1.75, "p": 1}},
      {"RandomAutocontrast": {"p": 0.125}},
      {"RandomEqualize": {}},
      {"RandomInvert": {"p": 0}}]})");
  REQUIRE(p.op_count == 12);
  const image::OpParams& r1 = p.ops[1];
  CHECK(r1.kind == image::OpKind::kRandomRotation);
  CHECK(r1.degrees[0] == -12.5f);
  CHECK(r1.degrees[1] == 12.5f);
  CHECK(r1.interpolation == image::Interpolation::kNearest);
  CHECK(r1.has_center == 0);
  CHECK(r1.fill[0] == 0);
  CHECK(r1.fill[2] == 0);
  const image::OpParams& r2 = p.ops[2];
  CHECK(r2.degrees[0] == -3.0f);
  CHECK(r2.degrees[1] == 7.0f);
  CHECK(r2.interpolation == image::Interpolation::kBilinear);
  CHECK(r2.has_center == 1);
  CHECK(r2.center[0] == 4.5f);
  CHECK(r2.center[1] == 6.0f);
  CHECK(r2.fill[0] == 10);
  CHECK(r2.fill[1] == 20);
  CHECK(r2.fill[2] == 30);
  const image::OpParams& a1 = p.ops[3];
  CHECK(a1.kind == image::OpKind::kRandomAffine);
  CHECK(a1.degrees[0] == 0.0f);
  CHECK(a1.degrees[1] == 0.0f);
  CHECK(a1.has_translate == 0);
  CHECK(a1.has_scale == 0);
  CHECK(a1.shear_count == 0);
  CHECK(a1.has_center == 0);
  CHECK(a1.interpolation == image::Interpolation::kNearest);
  const image::OpParams& a2 = p.ops[4];
  CHECK(a2.degrees[0] == 1.0f);
  CHECK(a2.degrees[1] == 2.0f);
  CHECK(a2.has_translate == 1);
  CHECK(a2.translate[0] == 0.25f);
  CHECK(a2.translate[1] == 0.5f);
  CHECK(a2.has_scale == 1);
  CHECK(a2.affine_scale[0] == 0.75f);
  CHECK(a2.affine_scale[1] == 1.25f);
  CHECK(a2.shear_count == 2);  // [s]: x only, one draw
  CHECK(a2.shear[0] == -4.0f);
  CHECK(a2.shear[1] == 4.0f);
  CHECK(a2.has_center == 1);
  CHECK(a2.center[0] == 0.0f);
  CHECK(a2.interpolation == image::Interpolation::kBilinear);
  CHECK(a2.fill[0] == 9);
  CHECK(a2.fill[1] == 9);
  CHECK(a2.fill[2] == 9);
  const image::OpParams& a3 = p.ops[5];
  CHECK(a3.shear_count == 4);
  CHECK(a3.shear[0] == -1.0f);
  CHECK(a3.shear[1] == 2.0f);
  CHECK(a3.shear[2] == -3.0f);
  CHECK(a3.shear[3] == 4.0f);
  CHECK(p.ops[6].kind == image::OpKind::kRandomPosterize);
  CHECK(p.ops[6].bits == 3);
  CHECK(p.ops[6].p == 0.25f);
  CHECK(p.ops[7].kind == image::OpKind::kRandomSolarize);
  CHECK(p.ops[7].threshold == 100.5f);
  CHECK(p.ops[7].p == 0.5f);
  CHECK(p.ops[8].kind == image::OpKind::kRandomAdjustSharpness);
  CHECK(p.ops[8].sharpness_factor == 1.75f);
  CHECK(p.ops[8].p == 1.0f);
  CHECK(p.ops[9].kind == image::OpKind::kRandomAutocontrast);
  CHECK(p.ops[9].p == 0.125f);
  CHECK(p.ops[10].kind == image::OpKind::kRandomEqualize);
  CHECK(p.ops[10].p == 0.5f);
  CHECK(p.ops[11].kind == image::OpKind::kRandomInvert);
  CHECK(p.ops[11].p == 0.0f);
}

TEST_CASE("bicubic resizes and the recipes' PIL blur reach their OpParams") {
  const image::PipelineParams p = Lower(R"({"ops": [
      {"RandomResizedCrop": {"size": 96, "interpolation": "bicubic"}},
      {"Resize": {"size": 64, "interpolation": "bicubic"}},
      {"ImageFilterGaussianBlur": {"radius": [0.5, 3], "p": 0.25}}]})");
  REQUIRE(p.op_count == 3);
  CHECK(p.ops[0].interpolation == image::Interpolation::kBicubic);
  CHECK(p.ops[1].interpolation == image::Interpolation::kBicubic);
  CHECK(p.ops[2].kind == image::OpKind::kImageFilterGaussianBlur);
  CHECK(p.ops[2].sigma[0] == 0.5f);
  CHECK(p.ops[2].sigma[1] == 3.0f);
  CHECK(p.ops[2].p == 0.25f);
}

TEST_CASE("the policies and RandomErasing reach their OpParams") {
  const image::PipelineParams p = Lower(R"({"ops": [
      {"RandomResizedCrop": {"size": 176}},
      {"AutoAugment": {}},
      {"AutoAugment": {"policy": "cifar10", "interpolation": "bilinear", "fill": [1, 2, 3]}},
      {"AutoAugment": {"policy": "svhn"}},
      {"RandAugment": {}},
      {"RandAugment": {"num_ops": 8, "magnitude": 0, "num_magnitude_bins": 2, "fill": 4}},
      {"TrivialAugmentWide": {}},
      {"TrivialAugmentWide": {"num_magnitude_bins": 5, "interpolation": "bilinear"}},
      {"AugMix": {}},
      {"AugMix": {"severity": 10, "mixture_width": 8, "chain_depth": 8, "alpha": 0.5,
                  "all_ops": false, "interpolation": "nearest", "fill": 255}},
      {"RandomErasing": {"p": 0.1}},
      {"RandomErasing": {"value": "random", "scale": [0.1, 0.2], "ratio": [0.5, 2]}},
      {"RandomErasing": {"value": [0.5, -1, 2], "p": 1}}], "dtype": "float32"})");
  REQUIRE(p.op_count == 13);
  CHECK(p.ops[1].kind == image::OpKind::kAutoAugment);
  CHECK(p.ops[1].policy == image::AutoAugmentPolicy::kImageNet);
  CHECK(p.ops[1].interpolation == image::Interpolation::kNearest);
  CHECK(p.ops[1].fill[0] == 0);
  CHECK(p.ops[2].policy == image::AutoAugmentPolicy::kCifar10);
  CHECK(p.ops[2].interpolation == image::Interpolation::kBilinear);
  CHECK(p.ops[2].fill[0] == 1);
  CHECK(p.ops[2].fill[1] == 2);
  CHECK(p.ops[2].fill[2] == 3);
  CHECK(p.ops[3].policy == image::AutoAugmentPolicy::kSvhn);
  const image::OpParams& ra = p.ops[4];
  CHECK(ra.kind == image::OpKind::kRandAugment);
  CHECK(ra.num_ops == 2);
  CHECK(ra.magnitude == 9);
  CHECK(ra.num_magnitude_bins == 31);
  CHECK(ra.interpolation == image::Interpolation::kNearest);
  CHECK(p.ops[5].num_ops == 8);
  CHECK(p.ops[5].magnitude == 0);
  CHECK(p.ops[5].num_magnitude_bins == 2);
  CHECK(p.ops[5].fill[1] == 4);
  CHECK(p.ops[6].kind == image::OpKind::kTrivialAugmentWide);
  CHECK(p.ops[6].num_magnitude_bins == 31);
  CHECK(p.ops[6].interpolation == image::Interpolation::kNearest);
  CHECK(p.ops[7].num_magnitude_bins == 5);
  CHECK(p.ops[7].interpolation == image::Interpolation::kBilinear);
  const image::OpParams& am = p.ops[8];
  CHECK(am.kind == image::OpKind::kAugMix);
  CHECK(am.severity == 3);
  CHECK(am.mixture_width == 3);
  CHECK(am.chain_depth == -1);
  CHECK(am.alpha == 1.0f);
  CHECK(am.all_ops == 1);
  CHECK(am.interpolation == image::Interpolation::kBilinear);
  const image::OpParams& am2 = p.ops[9];
  CHECK(am2.severity == 10);
  CHECK(am2.mixture_width == 8);
  CHECK(am2.chain_depth == 8);
  CHECK(am2.alpha == 0.5f);
  CHECK(am2.all_ops == 0);
  CHECK(am2.interpolation == image::Interpolation::kNearest);
  CHECK(am2.fill[2] == 255);
  const image::OpParams& e1 = p.ops[10];
  CHECK(e1.kind == image::OpKind::kRandomErasing);
  CHECK(e1.p == 0.1f);
  CHECK(e1.erase_scale[0] == 0.02f);
  CHECK(e1.erase_scale[1] == 0.33f);
  CHECK(e1.erase_ratio[0] == 0.3f);
  CHECK(e1.erase_ratio[1] == 3.3f);
  CHECK(e1.erase_random == 0);
  CHECK(e1.erase_value[0] == 0.0f);
  CHECK(e1.erase_value[2] == 0.0f);
  const image::OpParams& e2 = p.ops[11];
  CHECK(e2.p == 0.5f);
  CHECK(e2.erase_random == 1);
  CHECK(e2.erase_scale[0] == 0.1f);
  CHECK(e2.erase_scale[1] == 0.2f);
  CHECK(e2.erase_ratio[0] == 0.5f);
  CHECK(e2.erase_ratio[1] == 2.0f);
  const image::OpParams& e3 = p.ops[12];
  CHECK(e3.erase_random == 0);
  CHECK(e3.erase_value[0] == 0.5f);
  CHECK(e3.erase_value[1] == -1.0f);
  CHECK(e3.erase_value[2] == 2.0f);
  CHECK(p.out_height == 176);
  CHECK(p.dtype == ring::kFloat32);
  // uint8 outputs: values as given (whole, 0..255).
  const image::PipelineParams u8 =
      Lower(R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomErasing": {"value": [255, 1, 2]}}]})");
  CHECK(u8.ops[1].erase_value[0] == 255.0f);
  CHECK(u8.ops[1].erase_value[2] == 2.0f);
}

TEST_CASE("the step budget: Effective and the workers' ValidateParams count alike") {
  // 2 (CenterCrop) + 74 + 47 (AugMix) + 5 (RandAugment) = 128 = kMaxSteps.
  const std::string full = R"({"ops": [{"CenterCrop": {"size": 8}},
      {"AugMix": {"mixture_width": 8, "chain_depth": 8}},
      {"AugMix": {"mixture_width": 5, "chain_depth": 8}}, {"RandAugment": {"num_ops": 5}})";
  v1::PipelineSpec e = Eff(full + "]}");
  CHECK(LowerPipeline(e).ok());
  // One step more: both refuse.
  auto over = pipeline::SpecFromKeywordsJson(full + R"(, {"RandomInvert": {}}]})");
  REQUIRE(over.ok());
  auto refused = pipeline::Effective(*over);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Matchers::Contains("up to 129 steps per sample, more than the 128"));
  e.add_ops()->mutable_random_invert()->set_p(0.5f);
  auto p = LowerPipeline(e);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(std::string(p.status().message()), Catch::Matchers::Contains("129 steps"));
  // chain_depth -1 counts as its most, 3; RandomCrop as 3.
  const std::string drawn = R"({"ops": [{"RandomCrop": {"size": 8}},
      {"AugMix": {"mixture_width": 8, "chain_depth": 8}},
      {"AugMix": {"mixture_width": 8}}, {"AutoAugment": {}}, {"TrivialAugmentWide": {}},
      {"RandAugment": {"num_ops": 8}})";
  e = Eff(drawn + "]}");  // 3 + 74 + 34 + 2 + 1 + 8 = 122
  CHECK(LowerPipeline(e).ok());
  for (int k = 0; k < 6; ++k) e.add_ops()->mutable_random_invert()->set_p(0.5f);
  CHECK(LowerPipeline(e).ok());  // 128
  CHECK(pipeline::Effective(e).ok());
  e.add_ops()->mutable_random_invert()->set_p(0.5f);
  CHECK_FALSE(LowerPipeline(e).ok());  // 129
  CHECK_FALSE(pipeline::Effective(e).ok());
}

TEST_CASE("an any-size output lowers to 0 x 0 and a fixed decode size to itself") {
  const image::PipelineParams any = Lower(R"({"pipeline": "decode"})");
  CHECK(any.op_count == 0);
  CHECK(any.out_height == 0);
  CHECK(any.out_width == 0);
  CHECK(any.max_decode_pixels == (16ull << 20));
  const image::PipelineParams fixed = Lower(R"({"pipeline": "decode", "size": [48, 64]})");
  CHECK(fixed.out_height == 48);
  CHECK(fixed.out_width == 64);
}

TEST_CASE("a composition lowers to itself, then its ops, flat") {
  const v1::PipelineSpec e = Eff(
      R"({"ops": [{"RandomResizedCrop": {"size": 8}},)"
      R"( {"RandomApply": {"transforms": [{"ColorJitter": {"brightness": 0.4}}, {"RandomInvert": {}}], "p": 0.8}},)"
      R"( {"RandomChoice": {"transforms": [{"RandomEqualize": {}}, {"RandomInvert": {}}], "p": [1, 3]}},)"
      R"( {"RandomOrder": {"transforms": [{"RandomEqualize": {}}, {"RandomInvert": {}}]}},)"
      R"( {"RandomHorizontalFlip": {}}]})");
  auto p = LowerPipeline(e);
  REQUIRE(p.ok());
  REQUIRE(p->op_count == 11);
  using image::OpKind;
  const OpKind want[] = {OpKind::kRandomResizedCrop, OpKind::kRandomApply, OpKind::kColorJitter,
                         OpKind::kRandomInvert,      OpKind::kRandomChoice, OpKind::kRandomEqualize,
                         OpKind::kRandomInvert,      OpKind::kRandomOrder, OpKind::kRandomEqualize,
                         OpKind::kRandomInvert,      OpKind::kHorizontalFlip};
  for (uint32_t i = 0; i < 11; ++i) {
    CAPTURE(i);
    CHECK(p->ops[i].kind == want[i]);
  }
  CHECK(p->ops[1].children == 2);
  CHECK(p->ops[1].p == 0.8f);
  CHECK(p->ops[4].children == 2);
  CHECK(p->ops[4].weights[0] == 1.0f);
  CHECK(p->ops[4].weights[1] == 3.0f);
  CHECK(p->ops[7].children == 2);
  // The workers' own check holds what lowering gives to the same rules.
  image::PipelineParams bad = *p;
  bad.ops[1].children = 9;
  CHECK_FALSE(image::ValidateParams(bad).ok());
  bad = *p;
  bad.ops[7].children = 4;  // past the end
  CHECK_THAT(std::string(image::ValidateParams(bad).message()),
             Catch::Matchers::Contains("its ops are missing"));
  bad = *p;
  bad.ops[5].kind = OpKind::kRandomOrder;  // a composition inside another
  bad.ops[5].children = 1;
  CHECK_THAT(std::string(image::ValidateParams(bad).message()),
             Catch::Matchers::Contains("RandomChoice: cannot hold RandomOrder"));
  bad = *p;
  bad.ops[4].weights[0] = bad.ops[4].weights[1] = 0;
  CHECK_FALSE(image::ValidateParams(bad).ok());
  bad = *p;
  bad.ops[4].weights[3] = 1;  // a weight past its ops
  CHECK_FALSE(image::ValidateParams(bad).ok());
}

TEST_CASE("a spec that is not effective is refused") {
  v1::PipelineSpec request;  // the request form of "{}"
  auto p = LowerPipeline(request);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(p.status().message()), Catch::Matchers::Contains("not an effective spec"));

  v1::PipelineSpec e = Eff("{}");
  e.mutable_ops(0)->mutable_random_resized_crop()->clear_scale();
  p = LowerPipeline(e);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(std::string(p.status().message()),
             Catch::Matchers::Contains("ops[0]: RandomResizedCrop needs"));

  e = Eff("{}");
  for (uint32_t i = 0; i < image::kMaxOps; ++i)
    e.add_ops()->mutable_random_vertical_flip()->set_p(0);
  p = LowerPipeline(e);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(std::string(p.status().message()), Catch::Matchers::Contains("more than the 32"));

  e = Eff("{}");
  e.mutable_output()->set_dtype("int8");
  CHECK_FALSE(LowerPipeline(e).ok());

  // The new ops' parameters missing or out of the effective form.
  const std::string crop = R"({"ops": [{"CenterCrop": {"size": 8}}, )";
  e = Eff(crop + R"({"RandomRotation": {"degrees": 3}}]})");
  e.mutable_ops(1)->mutable_random_rotation()->set_interpolation("bicubic");
  p = LowerPipeline(e);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(std::string(p.status().message()),
             Catch::Matchers::Contains("ops[1]: RandomRotation needs"));
  e = Eff(crop + R"({"RandomRotation": {"degrees": 3}}]})");
  e.mutable_ops(1)->mutable_random_rotation()->set_expand(true);
  CHECK_FALSE(LowerPipeline(e).ok());
  e = Eff(crop + R"({"RandomAffine": {"degrees": 3}}]})");
  e.mutable_ops(1)->mutable_random_affine()->add_shear(1);
  CHECK_FALSE(LowerPipeline(e).ok());
  e = Eff(crop + R"({"AutoAugment": {}}]})");
  e.mutable_ops(1)->mutable_auto_augment()->set_policy("reduced_imagenet");
  CHECK_FALSE(LowerPipeline(e).ok());
  e = Eff(crop + R"({"AugMix": {}}]})");
  e.mutable_ops(1)->mutable_aug_mix()->clear_chain_depth();
  CHECK_FALSE(LowerPipeline(e).ok());
  e = Eff(crop + R"({"RandomErasing": {}}]})");
  e.mutable_ops(1)->mutable_random_erasing()->set_value_random(true);  // and 3 values
  p = LowerPipeline(e);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(std::string(p.status().message()),
             Catch::Matchers::Contains("ops[1]: RandomErasing needs"));
  e = Eff(crop + R"({"RandomPosterize": {"bits": 1}}]})");
  e.mutable_ops(1)->mutable_random_posterize()->clear_bits();
  CHECK_FALSE(LowerPipeline(e).ok());
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

TEST_CASE("views lower to one op list and a view table") {
  const image::PipelineParams p = Lower(R"({"views": [
      {"ops": [{"RandomResizedCrop": {"size": 64}},
               {"RandomApply": {"transforms": [{"ColorJitter": {"brightness": 0.4}}], "p": 0.8}}],
       "count": 2},
      {"ops": [{"RandomResizedCrop": {"size": [32, 48]}}, {"RandomHorizontalFlip": {}}], "count": 3}],
      "dtype": "float16"})");
  REQUIRE(p.view_count == 2);
  REQUIRE(p.op_count == 5);
  CHECK(p.ops[1].kind == image::OpKind::kRandomApply);
  CHECK(p.ops[2].kind == image::OpKind::kColorJitter);
  CHECK(p.ops[3].kind == image::OpKind::kRandomResizedCrop);
  CHECK(p.views[0].first_op == 0);
  CHECK(p.views[0].op_count == 3);
  CHECK(p.views[0].out_height == 64);
  CHECK(p.views[0].copies == 2);
  CHECK(p.views[1].first_op == 3);
  CHECK(p.views[1].op_count == 2);
  CHECK(p.views[1].out_height == 32);
  CHECK(p.views[1].out_width == 48);
  CHECK(p.views[1].copies == 3);
  CHECK(p.out_height == 64);  // the first view's
  CHECK(p.dtype == ring::kFloat16);
  CHECK(image::OutputCount(p) == 5);
  // A view without its size is not an effective spec.
  v1::PipelineSpec e = Eff(R"({"views": [{"ops": [{"CenterCrop": {"size": 8}}]}]})");
  e.mutable_views(0)->clear_size();
  CHECK_FALSE(LowerPipeline(e).ok());
}

}  // namespace
}  // namespace stoker
