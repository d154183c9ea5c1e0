// Each op's defaults and checks as the keywords reach them (op_defaults.h,
// policy_defaults.cc, through pipeline::Effective): torchvision's defaults
// and its refusals, by name. Pure; no daemon.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/spec_test_util.h"
#include "stoker/ring_layout.h"

namespace stoker::pipeline {
namespace {

using namespace spec_test;  // NOLINT: the tests' helpers
using v1::PipelineSpec;
using Catch::Matchers::Contains;

TEST_CASE("an op list: every op's defaults", "[pipeline_spec]") {
  const PipelineSpec e = Eff(R"({"ops": [
      {"RandomCrop": {"size": 32, "padding": 4}},
      {"RandomHorizontalFlip": {}},
      {"RandomVerticalFlip": null},
      {"ColorJitter": {"brightness": 0.4, "hue": 0.1}},
      {"RandomGrayscale": {}},
      {"Grayscale": {"num_output_channels": 3}},
      {"GaussianBlur": {"kernel_size": 3}}],
    "dtype": "float32"})");
  CHECK(e.preset().empty());
  REQUIRE(e.ops_size() == 7);
  const auto& rc = e.ops(0).random_crop();
  CHECK(U(rc.size()) == std::vector<uint32_t>{32, 32});
  CHECK(U(rc.padding()) == std::vector<uint32_t>{4, 4, 4, 4});
  CHECK(U(rc.fill()) == std::vector<uint32_t>{0, 0, 0});
  CHECK(rc.padding_mode() == "constant");
  CHECK_FALSE(rc.pad_if_needed());
  CHECK(e.ops(1).random_horizontal_flip().p() == 0.5f);
  CHECK(e.ops(2).random_vertical_flip().p() == 0.5f);
  const auto& cj = e.ops(3).color_jitter();
  REQUIRE(cj.brightness_size() == 2);
  CHECK(cj.brightness(0) == Approx(0.6).epsilon(1e-6));
  CHECK(cj.brightness(1) == Approx(1.4).epsilon(1e-6));
  CHECK(cj.contrast().empty());
  CHECK(cj.saturation().empty());
  REQUIRE(cj.hue_size() == 2);
  CHECK(cj.hue(0) == Approx(-0.1).epsilon(1e-6));
  CHECK(cj.hue(1) == Approx(0.1).epsilon(1e-6));
  CHECK(e.ops(4).random_grayscale().p() == 0.1f);
  CHECK(e.ops(5).grayscale().num_output_channels() == 3);
  const auto& gb = e.ops(6).gaussian_blur();
  CHECK(U(gb.kernel_size()) == std::vector<uint32_t>{3, 3});
  CHECK(F(gb.sigma()) == std::vector<float>{0.1f, 2.0f});
  CHECK(U(e.size()) == std::vector<uint32_t>{32, 32});
  CHECK(e.output().dtype() == "float32");
  CHECK(e.output().layout() == "nchw");
  CHECK(e.max_decode_pixels() == (64ull << 20));
  // A single op object is a list of one.
  CHECK(Eff(R"({"ops": {"CenterCrop": {"size": [8, 9]}}})").ops_size() == 1);
}

TEST_CASE("the affine ops, policies and RandomErasing: torchvision's defaults", "[pipeline_spec]") {
  const PipelineSpec e = Eff(R"({"ops": [
      {"RandomRotation": {"degrees": 30}},
      {"RandomAffine": {"degrees": [-10, 20]}},
      {"RandomPosterize": {"bits": 2}},
      {"RandomSolarize": {"threshold": 192.5}},
      {"RandomAdjustSharpness": {"sharpness_factor": 0}},
      {"RandomAutocontrast": {}}, {"RandomEqualize": {}}, {"RandomInvert": {}},
      {"AutoAugment": {}}, {"RandAugment": {}}, {"TrivialAugmentWide": {}}, {"AugMix": {}},
      {"CenterCrop": {"size": 16}},
      {"RandomErasing": {}}],
    "dtype": "float32"})");
  REQUIRE(e.ops_size() == 14);
  const auto& rr = e.ops(0).random_rotation();
  CHECK(F(rr.degrees()) == std::vector<float>{-30, 30});
  CHECK(rr.interpolation() == "nearest");
  CHECK(rr.has_expand());
  CHECK_FALSE(rr.expand());
  CHECK(rr.center().empty());  // the image's center
  CHECK(U(rr.fill()) == std::vector<uint32_t>{0, 0, 0});
  const auto& ra = e.ops(1).random_affine();
  CHECK(F(ra.degrees()) == std::vector<float>{-10, 20});
  CHECK(ra.translate().empty());  // none, as torchvision's None
  CHECK(ra.scale().empty());
  CHECK(ra.shear().empty());
  CHECK(ra.interpolation() == "nearest");
  CHECK(ra.center().empty());
  CHECK(U(ra.fill()) == std::vector<uint32_t>{0, 0, 0});
  CHECK(e.ops(2).random_posterize().bits() == 2);
  CHECK(e.ops(2).random_posterize().p() == 0.5f);
  CHECK(e.ops(3).random_solarize().threshold() == 192.5f);
  CHECK(e.ops(3).random_solarize().p() == 0.5f);
  CHECK(e.ops(4).random_adjust_sharpness().has_sharpness_factor());
  CHECK(e.ops(4).random_adjust_sharpness().sharpness_factor() == 0);
  CHECK(e.ops(4).random_adjust_sharpness().p() == 0.5f);
  CHECK(e.ops(5).random_autocontrast().p() == 0.5f);
  CHECK(e.ops(6).random_equalize().p() == 0.5f);
  CHECK(e.ops(7).random_invert().p() == 0.5f);
  const auto& aa = e.ops(8).auto_augment();
  CHECK(aa.policy() == "imagenet");
  CHECK(aa.interpolation() == "nearest");
  CHECK(U(aa.fill()) == std::vector<uint32_t>{0, 0, 0});
  const auto& ra2 = e.ops(9).rand_augment();
  CHECK(ra2.num_ops() == 2);
  CHECK(ra2.magnitude() == 9);
  CHECK(ra2.num_magnitude_bins() == 31);
  CHECK(ra2.interpolation() == "nearest");
  CHECK(U(ra2.fill()) == std::vector<uint32_t>{0, 0, 0});
  const auto& ta = e.ops(10).trivial_augment_wide();
  CHECK(ta.num_magnitude_bins() == 31);
  CHECK(ta.interpolation() == "nearest");
  CHECK(U(ta.fill()) == std::vector<uint32_t>{0, 0, 0});
  const auto& am = e.ops(11).aug_mix();
  CHECK(am.severity() == 3);
  CHECK(am.mixture_width() == 3);
  CHECK(am.chain_depth() == -1);
  CHECK(am.alpha() == 1.0f);
  CHECK(am.has_all_ops());
  CHECK(am.all_ops());
  CHECK(am.interpolation() == "bilinear");  // AugMix's own default
  CHECK(U(am.fill()) == std::vector<uint32_t>{0, 0, 0});
  const auto& re = e.ops(13).random_erasing();
  CHECK(re.p() == 0.5f);
  CHECK(F(re.scale()) == std::vector<float>{0.02f, 0.33f});
  CHECK(F(re.ratio()) == std::vector<float>{0.3f, 3.3f});
  CHECK(F(re.value()) == std::vector<float>{0, 0, 0});
  CHECK_FALSE(re.value_random());
  CHECK(U(e.size()) == std::vector<uint32_t>{16, 16});
  // None of them changes the size: without a crop the output varies.
  CHECK(Eff(R"({"ops": [{"RandomRotation": {"degrees": 3}}, {"AugMix": {}}]})").size().empty());
  CHECK(U(Eff(R"({"ops": [{"CenterCrop": {"size": [8, 6]}}, {"RandomAffine": {"degrees": 1}},
                          {"TrivialAugmentWide": {}}]})")
              .size()) == std::vector<uint32_t>{8, 6});
}

TEST_CASE("RandomRotation and RandomAffine: angles, translate, scale, shear, center",
          "[pipeline_spec]") {
  const std::string rot = R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomRotation": {)";
  const std::string aff = R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomAffine": {)";
  CHECK(F(Eff(rot + R"("degrees": [5, 5]}}]})").ops(1).random_rotation().degrees()) ==
        std::vector<float>{5, 5});
  CHECK(F(Eff(rot + R"("degrees": 0}}]})").ops(1).random_rotation().degrees()) ==
        std::vector<float>{0, 0});
  CHECK_THAT(Error(rot + "}}]}"), Contains("ops[1] RandomRotation: degrees is required"));
  CHECK_THAT(Error(rot + R"("degrees": -3}}]})"),
             Contains("ops[1] RandomRotation: If degrees is a single number, it must be "
                      "positive"));
  CHECK_THAT(Error(rot + R"("degrees": [1, 2, 3]}}]})"),
             Contains("degrees should be a sequence of length 2"));
  CHECK_THAT(Error(rot + R"("degrees": [5, -5]}}]})"),
             Contains("degrees [5, -5] must be ranges [min, max] with min <= max"));
  CHECK_THAT(Error(rot + R"("degrees": "NaN"}}]})"), Contains("must be finite"));
  CHECK_THAT(Error(rot + R"("degrees": 5, "expand": true}}]})"),
             Contains("ops[1] RandomRotation: expand=true is not served") &&
                 Contains("larger than the input"));
  CHECK(Eff(rot + R"("degrees": 5, "expand": false}}]})").ops(1).random_rotation().has_expand());
  CHECK_THAT(Error(rot + R"("degrees": 5, "center": [1]}}]})"),
             Contains("center should be a sequence of length 2"));
  CHECK_THAT(Error(rot + R"("degrees": 5, "interpolation": "bicubic"}}]})"),
             Contains("ops[1] RandomRotation: interpolation 'bicubic' is not served: use "
                      "'nearest' or 'bilinear'"));
  CHECK_THAT(Error(rot + R"("degrees": 5, "fill": [1, 2]}}]})"),
             Contains("fill must be 1 value or 3"));
  CHECK_THAT(Error(rot + R"("degrees": 5, "fill": 256}}]})"), Contains("within 0..255"));
  CHECK_THAT(Error(rot + R"("degrees": 5, "fill": -1}}]})"),
             Contains("fill must be a whole number >= 0"));
  CHECK_THAT(Error(rot + R"("degrees": 5, "expnad": false}}]})"),
             Contains("unknown parameter 'expnad'; RandomRotation takes degrees, interpolation, "
                      "expand, center, fill"));

  // Shear as torchvision's get_params reads it: [s] and [min, max] draw x
  // only (2 values), 4 values draw x then y.
  CHECK(F(Eff(aff + R"("degrees": 0, "shear": 7}}]})").ops(1).random_affine().shear()) ==
        std::vector<float>{-7, 7});
  CHECK(F(Eff(aff + R"("degrees": 0, "shear": [1, 2]}}]})").ops(1).random_affine().shear()) ==
        std::vector<float>{1, 2});
  CHECK(F(Eff(aff + R"("degrees": 0, "shear": [1, 2, 3, 4]}}]})").ops(1).random_affine().shear()) ==
        std::vector<float>{1, 2, 3, 4});
  CHECK_THAT(Error(aff + R"("degrees": 0, "shear": [1, 2, 3]}}]})"),
             Contains("shear should be a sequence of length 2 or 4"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "shear": -1}}]})"),
             Contains("If shear is a single number, it must be positive"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "shear": [1, 2, 4, 3]}}]})"), Contains("min <= max"));
  CHECK_THAT(Error(aff + R"("shear": 1}}]})"),
             Contains("ops[1] RandomAffine: degrees is required"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "translate": [0.5, 1.5]}}]})"),
             Contains("translation values should be between 0 and 1"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "translate": 0.5}}]})"),
             Contains("translate should be a sequence of length 2"));
  CHECK(
      F(Eff(aff + R"("degrees": 0, "translate": [0, 1]}}]})").ops(1).random_affine().translate()) ==
      std::vector<float>{0, 1});
  CHECK_THAT(Error(aff + R"("degrees": 0, "scale": [0, 1]}}]})"),
             Contains("scale values should be positive"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "scale": [1]}}]})"),
             Contains("scale should be a sequence of length 2"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "scale": [1.2, 1.1]}}]})"), Contains("min <= max"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "interpolation": "bilinear", "center": [1, 2, 3]}}]})"),
             Contains("center should be a sequence of length 2"));
  CHECK_THAT(Error(aff + R"("degrees": 0, "interpolation": "antialias"}}]})"),
             Contains("interpolation 'antialias' is not served"));
  CHECK(Eff(aff + R"("degrees": 0, "interpolation": "bilinear", "fill": [4, 5, 6]}}]})")
            .ops(1)
            .random_affine()
            .interpolation() == "bilinear");
}

TEST_CASE("ImageFilterGaussianBlur: DINO's radius range and p 1 by default, ranges checked",
          "[pipeline_spec]") {
  const std::string at = R"({"ops": [{"CenterCrop": {"size": 8}}, )";
  const auto blur = [](const PipelineSpec& e) { return e.ops(1).image_filter_gaussian_blur(); };
  auto d = blur(Eff(at + R"({"ImageFilterGaussianBlur": {}}]})"));
  CHECK(d.radius_size() == 2);
  CHECK(d.radius(0) == 0.1f);
  CHECK(d.radius(1) == 2.0f);
  CHECK(d.p() == 1.0f);
  auto one = blur(Eff(at + R"({"ImageFilterGaussianBlur": {"radius": 3, "p": 0.5}}]})"));
  CHECK(one.radius(0) == 3.0f);
  CHECK(one.radius(1) == 3.0f);
  CHECK(one.p() == 0.5f);
  CHECK_THAT(Error(at + R"({"ImageFilterGaussianBlur": {"radius": [2, 1]}}]})"),
             Contains("ops[1] ImageFilterGaussianBlur: radius [2, 1] must be one value or "
                      "[min, max] with 0 <= min <= max <= 1000"));
  CHECK_THAT(Error(at + R"({"ImageFilterGaussianBlur": {"radius": [-1, 1]}}]})"),
             Contains("0 <= min"));
  CHECK_THAT(Error(at + R"({"ImageFilterGaussianBlur": {"radius": [1, 2000]}}]})"),
             Contains("max <= 1000"));
  CHECK_THAT(Error(at + R"({"ImageFilterGaussianBlur": {"radius": [1, 2, 3]}}]})"),
             Contains("radius [1, 2, 3]"));
  CHECK_THAT(Error(at + R"({"ImageFilterGaussianBlur": {"p": 2}}]})"),
             Contains("p must be within [0, 1], not 2"));
  // In a composition (MoCo's RandomApply([GaussianBlur([.1, 2.])], p=0.5)).
  CHECK(Eff(R"({"ops": [{"RandomApply": {"transforms": [{"ImageFilterGaussianBlur": {}}]}}]})")
            .ops(0)
            .random_apply()
            .transforms(0)
            .image_filter_gaussian_blur()
            .p() == 1.0f);
}

TEST_CASE("RandomPosterize, RandomSolarize, RandomAdjustSharpness and the p-only ops",
          "[pipeline_spec]") {
  const std::string at = R"({"ops": [{"CenterCrop": {"size": 8}}, )";
  CHECK(Eff(at + R"({"RandomPosterize": {"bits": 0}}]})").ops(1).random_posterize().bits() == 0);
  CHECK(Eff(at + R"({"RandomPosterize": {"bits": 8, "p": 1}}]})").ops(1).random_posterize().p() ==
        1.0f);
  CHECK_THAT(Error(at + R"({"RandomPosterize": {}}]})"),
             Contains("ops[1] RandomPosterize: bits is required"));
  CHECK_THAT(Error(at + R"({"RandomPosterize": {"bits": 9}}]})"),
             Contains("ops[1] RandomPosterize: The number of bits should be between 0 and 8. "
                      "Got 9"));
  CHECK_THAT(Error(at + R"({"RandomPosterize": {"bits": 4, "p": 1.5}}]})"),
             Contains("ops[1] RandomPosterize: p must be within [0, 1], not 1.5"));
  CHECK_THAT(Error(at + R"({"RandomSolarize": {}}]})"),
             Contains("ops[1] RandomSolarize: threshold is required"));
  CHECK_THAT(Error(at + R"({"RandomSolarize": {"threshold": "Infinity"}}]})"),
             Contains("threshold must be finite"));
  CHECK(
      Eff(at + R"({"RandomSolarize": {"threshold": -3}}]})").ops(1).random_solarize().threshold() ==
      -3.0f);  // every value inverts, as PIL's does
  CHECK_THAT(Error(at + R"({"RandomAdjustSharpness": {"p": 0.5}}]})"),
             Contains("ops[1] RandomAdjustSharpness: sharpness_factor is required"));
  CHECK_THAT(Error(at + R"({"RandomAdjustSharpness": {"sharpness_factor": -0.5}}]})"),
             Contains("sharpness_factor (-0.5) is not non-negative"));
  CHECK_THAT(Error(at + R"({"RandomAutocontrast": {"p": -0.1}}]})"),
             Contains("ops[1] RandomAutocontrast: p must be within [0, 1]"));
  CHECK_THAT(Error(at + R"({"RandomEqualize": {"p": 2}}]})"),
             Contains("ops[1] RandomEqualize: p must be within [0, 1]"));
  CHECK_THAT(Error(at + R"({"RandomInvert": {"p": "NaN"}}]})"),
             Contains("ops[1] RandomInvert: p must be within [0, 1]"));
  CHECK_THAT(Error(at + R"({"RandomInvert": {"bits": 1}}]})"),
             Contains("unknown parameter 'bits'; RandomInvert takes p"));
}

TEST_CASE("the policies: AutoAugment, RandAugment, TrivialAugmentWide, AugMix", "[pipeline_spec]") {
  const std::string at = R"({"ops": [{"CenterCrop": {"size": 8}}, )";
  for (const char* policy : {"imagenet", "cifar10", "svhn"}) {
    CHECK(Eff(at + R"({"AutoAugment": {"policy": ")" + policy + R"("}}]})")
              .ops(1)
              .auto_augment()
              .policy() == policy);
  }
  CHECK_THAT(Error(at + R"({"AutoAugment": {"policy": "IMAGENET"}}]})"),
             Contains("ops[1] AutoAugment: policy 'IMAGENET' is not a valid AutoAugmentPolicy: "
                      "use imagenet, cifar10, svhn"));
  CHECK_THAT(Error(at + R"({"AutoAugment": {"interpolation": "bicubic"}}]})"),
             Contains("ops[1] AutoAugment: interpolation 'bicubic' is not served"));
  CHECK_THAT(Error(at + R"({"AutoAugment": {"fill": [1, 2, 300]}}]})"), Contains("within 0..255"));
  CHECK(U(Eff(at + R"({"AutoAugment": {"fill": 128}}]})").ops(1).auto_augment().fill()) ==
        std::vector<uint32_t>{128, 128, 128});

  CHECK(Eff(at + R"({"RandAugment": {"num_ops": 0}}]})").ops(1).rand_augment().num_ops() == 0);
  CHECK(Eff(at + R"({"RandAugment": {"num_ops": 8}}]})").ops(1).rand_augment().num_ops() == 8);
  CHECK_THAT(Error(at + R"({"RandAugment": {"num_ops": 9}}]})"),
             Contains("ops[1] RandAugment: num_ops must be at most 8 (stoker's limit), not 9"));
  CHECK_THAT(Error(at + R"({"RandAugment": {"magnitude": 31}}]})"),
             Contains("ops[1] RandAugment: magnitude 31 must be below num_magnitude_bins 31"));
  CHECK_THAT(Error(at + R"({"RandAugment": {"num_magnitude_bins": 9}}]})"),
             Contains("magnitude 9 must be below num_magnitude_bins 9"));
  CHECK_THAT(Error(at + R"({"TrivialAugmentWide": {"num_magnitude_bins": 32769}}]})"),
             Contains("num_magnitude_bins must be at most 32768"));
  CHECK(Eff(at + R"({"TrivialAugmentWide": {"num_magnitude_bins": 32768}}]})")
            .ops(1)
            .trivial_augment_wide()
            .num_magnitude_bins() == 32768);
  CHECK(Eff(at + R"({"RandAugment": {"magnitude": 0, "num_magnitude_bins": 2}}]})")
            .ops(1)
            .rand_augment()
            .num_magnitude_bins() == 2);
  CHECK_THAT(Error(at + R"({"RandAugment": {"magnitude": 0, "num_magnitude_bins": 1}}]})"),
             Contains("num_magnitude_bins must be at least 2"));
  CHECK_THAT(Error(at + R"({"RandAugment": {"num_ops": -1}}]})"),
             Contains("num_ops must be a whole number >= 0, not -1"));

  CHECK(Eff(at + R"({"TrivialAugmentWide": {"num_magnitude_bins": 2}}]})")
            .ops(1)
            .trivial_augment_wide()
            .num_magnitude_bins() == 2);
  CHECK_THAT(Error(at + R"({"TrivialAugmentWide": {"num_magnitude_bins": 0}}]})"),
             Contains("ops[1] TrivialAugmentWide: num_magnitude_bins must be at least 2"));
  CHECK_THAT(Error(at + R"({"TrivialAugmentWide": {"magnitude": 3}}]})"),
             Contains("unknown parameter 'magnitude'; TrivialAugmentWide takes "
                      "num_magnitude_bins, interpolation, fill"));

  for (int severity : {1, 10}) {
    CHECK(Eff(at + R"({"AugMix": {"severity": )" + std::to_string(severity) + "}}]}")
              .ops(1)
              .aug_mix()
              .severity() == static_cast<uint32_t>(severity));
  }
  CHECK_THAT(Error(at + R"({"AugMix": {"severity": 11}}]})"),
             Contains("ops[1] AugMix: The severity must be between [1, 10]. Got 11 instead."));
  CHECK_THAT(Error(at + R"({"AugMix": {"severity": 0}}]})"),
             Contains("The severity must be between [1, 10]. Got 0 instead."));
  CHECK_THAT(Error(at + R"({"AugMix": {"mixture_width": 0}}]})"),
             Contains("mixture_width must be within 1..8 (stoker's limit), not 0"));
  CHECK_THAT(Error(at + R"({"AugMix": {"mixture_width": 9}}]})"),
             Contains("mixture_width must be within 1..8"));
  CHECK(Eff(at + R"({"AugMix": {"mixture_width": 8, "chain_depth": 8}}]})")
            .ops(1)
            .aug_mix()
            .chain_depth() == 8);
  CHECK(Eff(at + R"({"AugMix": {"chain_depth": 1}}]})").ops(1).aug_mix().chain_depth() == 1);
  // torchvision draws the depth for any chain_depth <= 0: the effective form is -1.
  for (const char* depth : {"0", "-2"}) {
    CHECK(Eff(at + R"({"AugMix": {"chain_depth": )" + depth + "}}]}").ops(1).aug_mix().chain_depth() ==
          -1);
  }
  CHECK_THAT(Error(at + R"({"AugMix": {"chain_depth": 9}}]})"),
             Contains("chain_depth must be <= 0 (each chain's depth drawn from 1..3) or within "
                      "1..8 (stoker's limit), not 9"));
  CHECK_THAT(Error(at + R"({"AugMix": {"chain_depth": 1.5}}]})"),
             Contains("chain_depth must be a whole number, not 1.5"));
  CHECK_THAT(Error(at + R"({"AugMix": {"alpha": 0}}]})"), Contains("alpha must be positive"));
  CHECK_THAT(Error(at + R"({"AugMix": {"alpha": "Infinity"}}]})"),
             Contains("alpha must be positive and finite"));
  CHECK_THAT(Error(at + R"({"AugMix": {"all_ops": 1}}]})"), Contains("must be true or false"));
  CHECK(
      Eff(at + R"({"AugMix": {"interpolation": "nearest"}}]})").ops(1).aug_mix().interpolation() ==
      "nearest");
  // The steps a sample's ops can make are bounded (kMaxSteps): AugMix makes
  // up to 2 + mixture_width * (1 + depth).
  CHECK_THAT(Error(at + R"({"AugMix": {"mixture_width": 8, "chain_depth": 8}},
                           {"AugMix": {"mixture_width": 8, "chain_depth": 8}}]})"),
             Contains("ops: these ops can make up to 150 steps per sample, more than the 128"));
  CHECK_THAT(Error(at + R"({"AugMix": {"interpolation": "box"}}]})"),
             Contains("ops[1] AugMix: interpolation 'box' is not served: use 'nearest' or "
                      "'bilinear'"));
}

TEST_CASE("RandomErasing: checks, 'random', placement after every other op, dtype rules",
          "[pipeline_spec]") {
  const std::string at = R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomErasing": )";
  const std::string f32 = R"(}], "dtype": "float32"})";
  // "random": value_random; the request holds it as the bool.
  const PipelineSpec r = Request(at + R"({"value": "random"})" + f32);
  CHECK(r.ops(1).random_erasing().value_random());
  CHECK(r.ops(1).random_erasing().value().empty());
  const PipelineSpec e = Eff(at + R"({"value": "random", "p": 1})" + f32);
  CHECK(e.ops(1).random_erasing().value_random());
  CHECK(e.ops(1).random_erasing().value().empty());
  CHECK(e.ops(1).random_erasing().p() == 1.0f);
  CHECK(Eff(at + R"({"value_random": true})" + f32).ops(1).random_erasing().value_random());
  CHECK_THAT(Error(at + R"({"value": "noise"})" + f32),
             Contains("ops[1] RandomErasing: value: If value is str, it should be 'random', not "
                      "'noise'"));
  CHECK_THAT(Error(at + R"({"value": [1], "value_random": true})" + f32),
             Contains("value [1] and value_random both given"));
  // Values in the output's units: normalized for floats (any finite value).
  CHECK(F(Eff(at + R"({"value": -1.5})" + f32).ops(1).random_erasing().value()) ==
        std::vector<float>{-1.5f, -1.5f, -1.5f});
  CHECK(F(Eff(at + R"({"value": [0.5, -1, 2]})" + f32).ops(1).random_erasing().value()) ==
        std::vector<float>{0.5f, -1, 2});
  CHECK_THAT(Error(at + R"({"value": [1, 2]})" + f32),
             Contains("If value is a sequence, it should have either a single value or 3"));
  CHECK_THAT(Error(at + R"({"value": "NaN"})" + f32), Contains("If value is str"));
  CHECK_THAT(Error(at + R"({"value": ["NaN"]})" + f32), Contains("must be finite"));
  // uint8 outputs: whole values 0..255; "random" refused.
  CHECK(F(Eff(at + R"({"value": [255, 0, 7]}}]})").ops(1).random_erasing().value()) ==
        std::vector<float>{255, 0, 7});
  CHECK_THAT(Error(at + R"({"value": "random"}}]})"),
             Contains("ops[1] RandomErasing: value 'random' with a uint8 output") &&
                 Contains("use a float dtype"));
  CHECK_THAT(Error(at + R"({"value": 256}}]})"),
             Contains("ops[1] RandomErasing: value [256, 256, 256] with a uint8 output: each "
                      "value must be a whole number within 0..255"));
  CHECK_THAT(Error(at + R"({"value": 0.5}}]})"), Contains("whole number within 0..255"));
  CHECK_THAT(Error(at + R"({"value": -1}}]})"), Contains("whole number within 0..255"));
  // torchvision's checks.
  CHECK_THAT(Error(at + R"({"p": 1.5})" + f32),
             Contains("ops[1] RandomErasing: p 1.5: Random erasing probability should be "
                      "between 0 and 1"));
  CHECK_THAT(Error(at + R"({"scale": [0.5, 1.5]})" + f32),
             Contains("Scale should be between 0 and 1"));
  CHECK_THAT(Error(at + R"({"scale": [-0.1, 0.5]})" + f32),
             Contains("Scale should be between 0 and 1"));
  CHECK_THAT(Error(at + R"({"scale": [0.5, 0.1]})" + f32), Contains("min <= max"));
  CHECK_THAT(Error(at + R"({"scale": 0.5})" + f32), Contains("scale must be [min, max]"));
  CHECK(F(Eff(at + R"({"scale": [0, 1]})" + f32).ops(1).random_erasing().scale()) ==
        std::vector<float>{0, 1});
  CHECK_THAT(Error(at + R"({"ratio": [0, 1]})" + f32),
             Contains("ops[1] RandomErasing: ratio [0, 1] must be finite with 0 < min <= max"));
  CHECK_THAT(Error(at + R"({"ratio": [2, 1]})" + f32), Contains("0 < min <= max"));
  // Placement: nothing but RandomErasing after it.
  CHECK(Eff(R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomErasing": {}},
                        {"RandomErasing": {"p": 1}}]})")
            .ops_size() == 3);
  CHECK(Eff(R"({"ops": [{"RandomErasing": {}}], "size": 8})").ops_size() == 1);
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomErasing": {}},
                              {"RandomErasing": {}}, {"RandomHorizontalFlip": {}}]})"),
             Contains("ops[3] RandomHorizontalFlip after ops[1] RandomErasing: RandomErasing "
                      "works on the output tensor (torchvision's runs after ToTensor() and "
                      "Normalize()), so it must come after every other op"));
  CHECK_THAT(Error(R"({"ops": [{"RandomErasing": {}}, {"CenterCrop": {"size": 8}}]})"),
             Contains("ops[1] CenterCrop after ops[0] RandomErasing"));
}

TEST_CASE("RandomCrop: padding and fill normalized as torchvision reads them", "[pipeline_spec]") {
  auto crop = [](const std::string& params) {
    return Eff(R"({"ops": [{"RandomCrop": {"size": 8, )" + params + "}}]}").ops(0).random_crop();
  };
  CHECK(U(crop(R"("padding": [1, 2])").padding()) == std::vector<uint32_t>{1, 2, 1, 2});
  CHECK(U(crop(R"("padding": [1, 2, 3, 4])").padding()) == std::vector<uint32_t>{1, 2, 3, 4});
  CHECK(U(crop(R"("fill": 7)").fill()) == std::vector<uint32_t>{7, 7, 7});
  CHECK(U(crop(R"("fill": [1, 2, 3])").fill()) == std::vector<uint32_t>{1, 2, 3});
  CHECK(crop(R"("pad_if_needed": true)").pad_if_needed());
  for (const char* mode : {"constant", "edge", "reflect", "symmetric"}) {
    CHECK(crop(absl::StrCat(R"("padding_mode": ")", mode, "\"")).padding_mode() == mode);
  }
  const std::string at = R"({"ops": [{"RandomCrop": {"size": 8, )";
  CHECK_THAT(Error(at + R"("padding": [1, 2, 3]}}]})"),
             Contains("ops[0] RandomCrop: padding must be 1, 2 or 4 values"));
  CHECK_THAT(Error(at + R"("padding": 65501}}]})"), Contains("each side must be at most 65500"));
  CHECK_THAT(Error(at + R"("padding": -1}}]})"),
             Contains("ops[0] RandomCrop: padding must be a whole number >= 0, not -1"));
  CHECK_THAT(Error(at + R"("fill": [1, 2]}}]})"), Contains("fill must be 1 value or 3"));
  CHECK_THAT(Error(at + R"("fill": 256}}]})"), Contains("within 0..255"));
  CHECK_THAT(Error(at + R"("padding_mode": "wrap"}}]})"),
             Contains("'wrap'") && Contains("constant, edge, reflect, symmetric"));
  CHECK_THAT(Error(at + R"("pad_if_needed": 1}}]})"), Contains("must be true or false"));
  CHECK_THAT(Error(R"({"ops": [{"RandomCrop": {}}]})"),
             Contains("ops[0] RandomCrop: size is required"));
}

TEST_CASE("Pad: torchvision's padding forms, and a fixed size grows by it", "[pipeline_spec]") {
  auto e = [](const std::string& json) {
    auto spec = SpecFromKeywordsJson(json);
    REQUIRE(spec.ok());
    return Effective(*spec);
  };
  auto s = e(R"({"ops": [{"CenterCrop": {"size": [32, 30]}}, {"Pad": {"padding": [4, 1]}}]})");
  REQUIRE(s.ok());
  CHECK(s->size(0) == 34);  // 32 + 1 + 1
  CHECK(s->size(1) == 38);  // 30 + 4 + 4
  const auto& pad = s->ops(1).pad();
  CHECK(std::vector<uint32_t>(pad.padding().begin(), pad.padding().end()) ==
        std::vector<uint32_t>{4, 1, 4, 1});
  CHECK(pad.padding_mode() == "constant");
  CHECK(pad.fill_size() == 3);
  // Before any fixed size the output varies; a size given must be made later.
  s = e(R"({"ops": [{"Pad": {"padding": 3}}, {"CenterCrop": {"size": 16}}]})");
  REQUIRE(s.ok());
  CHECK(s->size(0) == 16);
  CHECK_THAT(std::string(e(R"({"ops": [{"Pad": {}}], "size": 8})").status().message()),
             Contains("ops[0] Pad: padding is required"));
  CHECK_THAT(std::string(e(R"({"ops": [{"Pad": {"padding": [1, 2, 3]}}]})").status().message()),
             Contains("padding must be 1, 2 or 4 values, not 3"));
  CHECK_THAT(std::string(e(R"({"ops": [{"Pad": {"padding": 1, "padding_mode": "wrap"}}]})")
                             .status()
                             .message()),
             Contains("padding_mode 'wrap' is not one of"));
}

TEST_CASE("compositions hold pixel ops only, with their defaults, and their ops count", "[pipeline_spec]") {
  auto effective = [](const std::string& json) {
    auto spec = SpecFromKeywordsJson(json);
    REQUIRE(spec.ok());
    return Effective(*spec);
  };
  auto e = effective(
      R"({"ops": [{"RandomApply": {"transforms": [{"ColorJitter": {"brightness": 0.4}}]}},)"
      R"( {"RandomChoice": {"transforms": [{"RandomInvert": {}}, {"Grayscale": {"num_output_channels": 3}}]}},)"
      R"( {"RandomOrder": {"transforms": [{"RandomEqualize": {}}, {"RandomSolarize": {"threshold": 9}}]}}],)"
      R"( "size": 8})");
  REQUIRE(e.ok());
  CHECK(e->ops(0).random_apply().p() == 0.5f);  // torchvision's default
  CHECK(e->ops(0).random_apply().transforms(0).color_jitter().brightness_size() == 2);  // filled
  REQUIRE(e->ops(1).random_choice().p_size() == 2);  // p=None: equal weights
  CHECK(e->ops(1).random_choice().p(0) == e->ops(1).random_choice().p(1));
  CHECK(e->ops(2).random_order().transforms(1).random_solarize().p() == 0.5f);
  auto error = [&](const std::string& op) {
    auto r = effective(R"({"ops": [{"RandomHorizontalFlip": {}}, )" + op + R"(], "size": 8})");
    REQUIRE_FALSE(r.ok());
    return std::string(r.status().message());
  };
  CHECK_THAT(error(R"({"RandomApply": {"transforms": [{"RandomResizedCrop": {"size": 8}}]}})"),
             Contains("ops[1] RandomApply: transforms[0] RandomResizedCrop: moves the image's "
                      "geometry; RandomApply, RandomChoice and RandomOrder hold only ops that "
                      "change pixels"));
  CHECK_THAT(error(R"({"RandomOrder": {"transforms": [{"RandomErasing": {}}]}})"),
             Contains("transforms[0] RandomErasing: works on the output tensor"));
  CHECK_THAT(error(R"({"RandomApply": {"transforms": [{"RandomChoice": {"transforms": [{"RandomInvert": {}}]}}]}})"),
             Contains("transforms[0] RandomChoice: a composition cannot hold another"));
  CHECK_THAT(error(R"({"RandomApply": {"transforms": []}})"),
             Contains("ops[1] RandomApply: transforms must hold 1..8 ops, not 0"));
  CHECK_THAT(error(R"({"RandomApply": {"transforms": [{"RandomInvert": {}}], "p": 1.5}})"),
             Contains("p must be within [0, 1]"));
  CHECK_THAT(error(R"({"RandomChoice": {"transforms": [{"RandomInvert": {}}], "p": [1, 2]}})"),
             Contains("p has 2 weights for 1 transforms"));
  CHECK_THAT(error(R"({"RandomChoice": {"transforms": [{"RandomInvert": {}}], "p": [0]}})"),
             Contains("the weights must sum to > 0"));
  CHECK_THAT(error(R"({"RandomApply": {"transforms": [{"RandomInvert": {"p": 2}}]}})"),
             Contains("ops[1] RandomApply: transforms[0] RandomInvert: p must be within"));
  // A composition's ops count towards the 32.
  std::string inner;
  for (int i = 0; i < 8; ++i) inner += std::string(i ? "," : "") + R"({"RandomInvert": {}})";
  const std::string two = R"({"RandomApply": {"transforms": [)" + inner + R"(]}})";
  CHECK_THAT(error(two + "," + two + "," + two + "," + two),
             Contains("37 ops (counting those in compositions), more than the 32"));
}

TEST_CASE("Resize: one size is the shorter side and varies the size, two fix it, max_size",
          "[pipeline_spec]") {
  const std::string shorter = R"({"ops": [{"Resize": {"size": 64}}]})";
  const PipelineSpec any = Eff(shorter);
  CHECK(U(any.ops(0).resize().size()) == std::vector<uint32_t>{64});
  CHECK(any.size().empty());
  CHECK(any.max_decode_pixels() == (16ull << 20));
  const PipelineSpec given = Eff(R"({"ops": [{"Resize": {"size": 64}}], "size": [64, 80]})");
  CHECK(U(given.size()) == std::vector<uint32_t>{64, 80});
  const PipelineSpec both = Eff(R"({"ops": [{"Resize": {"size": [30, 40]}}]})");
  CHECK(U(both.ops(0).resize().size()) == std::vector<uint32_t>{30, 40});
  CHECK(U(both.size()) == std::vector<uint32_t>{30, 40});
  // A crop after it fixes the size again.
  CHECK(U(Eff(R"({"ops": [{"Resize": {"size": 64}}, {"CenterCrop": {"size": 56}}]})").size()) ==
        std::vector<uint32_t>{56, 56});
  // Sides up to 65500 in the middle of a list.
  CHECK(Eff(R"({"ops": [{"Resize": {"size": 65500}}, {"CenterCrop": {"size": 8}}]})").ops_size() ==
        2);
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": 65501}}], "size": 8})"),
             Contains("ops[0] Resize: size [65501]: each side must be within 1..65500"));
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": [1, 2, 3]}}], "size": 8})"),
             Contains("ops[0] Resize: size must be [shorter side] or [height, width]"));
  CHECK_THAT(Error(R"({"ops": [{"Resize": {}}], "size": 8})"),
             Contains("ops[0] Resize: size is required"));
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": 64, "max_size": 65501}}], "size": 8})"),
             Contains("ops[0] Resize: max_size must be at most 65500"));
  const PipelineSpec capped =
      Eff(R"({"ops": [{"Resize": {"size": 64, "max_size": 100}}], "size": 64})");
  CHECK(capped.ops(0).resize().max_size() == 100);
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": [64, 64], "max_size": 100}}]})"),
             Contains("max_size should only be passed if size specifies the length of the "
                      "smaller edge"));
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": 64, "max_size": 64}}], "size": 8})"),
             Contains("max_size = 64 must be strictly greater than the requested size for the "
                      "smaller edge size = 64"));
}

TEST_CASE("RandomResizedCrop's scale and ratio", "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"scale": [0, 1]})"),
             Contains("ops[0] RandomResizedCrop: scale [0, 1] must be finite with 0 < min <= max"));
  CHECK_THAT(Error(R"({"scale": [0.5, 0.25]})"), Contains("0 < min <= max"));
  CHECK_THAT(Error(R"({"ratio": [1, "Infinity"]})"),
             Contains("ratio [1, Infinity] must be finite"));
  CHECK_THAT(Error(R"({"ratio": ["NaN", 1]})"), Contains("must be finite"));
  CHECK_THAT(Error(R"({"scale": 0.5})"), Contains("scale must be [min, max], not 1 values"));
  CHECK_THAT(Error(R"({"scale": [0.1, 1e40]})"), Contains("scale is out of range"));
  CHECK_THAT(Error(R"({"scale": ["a", 1]})"), Contains("scale must be a number, not 'a'"));
}

TEST_CASE("probabilities", "[pipeline_spec]") {
  for (const char* op : {"RandomHorizontalFlip", "RandomVerticalFlip", "RandomGrayscale"}) {
    const std::string at = absl::StrCat(R"({"size": 8, "ops": [{")", op, R"(": {"p": )");
    CHECK_THAT(Error(at + "1.5}}]}"),
               Contains(absl::StrCat("ops[0] ", op, ": p must be within [0, 1], not 1.5")));
    CHECK_THAT(Error(at + "-0.1}}]}"), Contains("p must be within [0, 1]"));
    CHECK_THAT(Error(at + R"("NaN"}}]})"), Contains("p must be within [0, 1], not NaN"));
  }
  CHECK(
      Eff(R"({"size": 8, "ops": [{"RandomGrayscale": {"p": 1}}]})").ops(0).random_grayscale().p() ==
      1);
  CHECK(Eff(R"({"size": 8, "ops": [{"RandomVerticalFlip": {"p": 0}}]})")
            .ops(0)
            .random_vertical_flip()
            .has_p());
}

TEST_CASE("ColorJitter: ranges as torchvision's _check_input makes them", "[pipeline_spec]") {
  auto jitter = [](const std::string& params) {
    return Eff(R"({"size": 8, "ops": [{"ColorJitter": {)" + params + "}}]}").ops(0).color_jitter();
  };
  const auto big = jitter(R"("brightness": 1.5, "contrast": [0.2, 1.8], "saturation": 0.5)");
  CHECK(F(big.brightness()) == std::vector<float>{0.0f, 2.5f});  // clipped at 0
  CHECK(F(big.contrast()) == std::vector<float>{0.2f, 1.8f});
  CHECK(F(big.saturation()) == std::vector<float>{0.5f, 1.5f});
  CHECK(big.hue().empty());
  CHECK(F(jitter(R"("hue": [-0.5, 0.25])").hue()) == std::vector<float>{-0.5f, 0.25f});
  CHECK(F(jitter(R"("hue": 0.5)").hue()) == std::vector<float>{-0.5f, 0.5f});
  // "Not made": [1, 1], 0, hue [0, 0]; unset.
  const auto none = jitter(R"("brightness": 0, "contrast": [1, 1], "hue": [0, 0])");
  CHECK(none.brightness().empty());
  CHECK(none.contrast().empty());
  CHECK(none.hue().empty());
  CHECK(jitter("").saturation().empty());
  const std::string at = R"({"size": 8, "ops": [{"ColorJitter": {)";
  CHECK_THAT(Error(at + R"("brightness": -0.1}}]})"),
             Contains("ops[0] ColorJitter: brightness is a single number, so it must be >= 0"));
  CHECK_THAT(Error(at + R"("hue": 0.6}}]})"),
             Contains("ops[0] ColorJitter: hue [-0.6, 0.6] must be a range [min, max] within "
                      "[-0.5, 0.5]"));
  CHECK_THAT(Error(at + R"("hue": [-0.6, 0.1]}}]})"), Contains("within [-0.5, 0.5]"));
  CHECK_THAT(Error(at + R"("hue": -0.1}}]})"),
             Contains("hue is a single number, so it must be >= 0"));
  CHECK_THAT(Error(at + R"("contrast": [-0.1, 1]}}]})"),
             Contains("contrast [-0.1, 1] must be a range [min, max] within [0, inf]"));
  CHECK_THAT(Error(at + R"("saturation": [1.5, 0.5]}}]})"), Contains("saturation [1.5, 0.5]"));
  CHECK_THAT(Error(at + R"("saturation": [1, 2, 3]}}]})"),
             Contains("saturation must be 1 value or 2"));
  CHECK_THAT(Error(at + R"("brightness": [1, "Infinity"]}}]})"), Contains("must be finite"));
}

TEST_CASE("Grayscale: 3 channels only, torchvision's default of 1 refused by name",
          "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"size": 8, "ops": [{"RandomHorizontalFlip": {}}, {"Grayscale": {}}]})"),
             Contains("ops[1] Grayscale(num_output_channels=1): stoker's samples have 3 "
                      "channels; use Grayscale(num_output_channels=3)"));
  CHECK_THAT(Error(R"({"size": 8, "ops": [{"Grayscale": {"num_output_channels": 1}}]})"),
             Contains("Grayscale(num_output_channels=1): stoker's samples have 3 channels"));
  CHECK_THAT(Error(R"({"size": 8, "ops": [{"Grayscale": {"num_output_channels": 2}}]})"),
             Contains("ops[0] Grayscale: num_output_channels must be 3"));
}

TEST_CASE("GaussianBlur: odd positive kernels, sigma", "[pipeline_spec]") {
  auto blur = [](const std::string& params) {
    return Eff(R"({"size": 8, "ops": [{"GaussianBlur": {)" + params + "}}]}")
        .ops(0)
        .gaussian_blur();
  };
  CHECK(U(blur(R"("kernel_size": [3, 5])").kernel_size()) == std::vector<uint32_t>{3, 5});
  CHECK(F(blur(R"("kernel_size": 1, "sigma": 1.5)").sigma()) == std::vector<float>{1.5f, 1.5f});
  CHECK(F(blur(R"("kernel_size": 1, "sigma": [0.5, 3])").sigma()) ==
        std::vector<float>{0.5f, 3.0f});
  const std::string at = R"({"size": 8, "ops": [{"GaussianBlur": {)";
  CHECK_THAT(Error(at + "}}]}"), Contains("ops[0] GaussianBlur: kernel_size is required"));
  CHECK_THAT(
      Error(at + R"("kernel_size": 4}}]})"),
      Contains("kernel_size [4, 4]: kernel size value should be an odd and positive number"));
  CHECK_THAT(Error(at + R"("kernel_size": [3, 0]}}]})"), Contains("odd and positive"));
  CHECK_THAT(Error(at + R"("kernel_size": [3, 3, 3]}}]})"),
             Contains("kernel_size should be a single number or a list of 2"));
  CHECK_THAT(Error(at + R"("kernel_size": 3, "sigma": 0}}]})"),
             Contains("sigma is a single number, so it must be positive"));
  CHECK_THAT(Error(at + R"("kernel_size": 3, "sigma": [2, 1]}}]})"),
             Contains("sigma [2, 1] must be finite with 0 < min <= max"));
  CHECK_THAT(Error(at + R"("kernel_size": 3, "sigma": [0, 1]}}]})"), Contains("0 < min <= max"));
  CHECK_THAT(Error(at + R"("kernel_size": 3, "sigma": [1, 2, 3]}}]})"),
             Contains("sigma should be a single number or a list of 2"));
}

TEST_CASE("RandomResize: bilinear antialiased by default, min < max, a varying output") {
  const PipelineSpec e = Eff(R"({"ops": [{"RandomResize": {"min_size": 256, "max_size": 1025}},
                                          {"RandomCrop": {"size": [512]}}]})");
  CHECK(e.ops(0).random_resize().interpolation() == "bilinear");
  CHECK(e.ops(0).random_resize().antialias());
  CHECK_THAT(Error(R"({"ops": [{"RandomResize": {"min_size": 5, "max_size": 5}}]})"),
             Contains("max_size must be within min_size + 1.."));
  CHECK_THAT(Error(R"({"ops": [{"RandomResize": {"max_size": 5}}]})"),
             Contains("min_size must be within 1.."));
  // Its output varies.
  CHECK(Eff(R"({"ops": [{"RandomResize": {"min_size": 5, "max_size": 9}}]})").size().empty());
}

TEST_CASE("the detection reference's ops: its defaults, checked ranges") {
  const PipelineSpec e = Eff(R"({"ops": [{"RandomPhotometricDistort": {}}, {"RandomZoomOut": {}},
                                          {"RandomIoUCrop": {}}, {"Resize": {"size": [300, 300]}}]})");
  const v1::RandomPhotometricDistort& pd = e.ops(0).random_photometric_distort();
  CHECK(std::vector<float>(pd.brightness().begin(), pd.brightness().end()) ==
        std::vector<float>{0.875f, 1.125f});
  CHECK(std::vector<float>(pd.hue().begin(), pd.hue().end()) == std::vector<float>{-0.05f, 0.05f});
  CHECK(pd.p() == 0.5f);
  const v1::RandomZoomOut& zo = e.ops(1).random_zoom_out();
  CHECK(std::vector<uint32_t>(zo.fill().begin(), zo.fill().end()) == std::vector<uint32_t>{0, 0, 0});
  CHECK(std::vector<float>(zo.side_range().begin(), zo.side_range().end()) ==
        std::vector<float>{1, 4});
  const v1::RandomIoUCrop& ic = e.ops(2).random_iou_crop();
  CHECK(ic.min_scale() == 0.3f);
  CHECK(ic.trials() == 40);
  CHECK(ic.sampler_options_size() == 7);
  CHECK_THAT(Error(R"({"ops": [{"RandomZoomOut": {"side_range": [0.5, 2]}}]})"),
             Contains("side_range [0.5, 2] must be [min, max] with 1 <= min"));
  CHECK_THAT(Error(R"({"ops": [{"RandomIoUCrop": {"min_scale": 0}}, {"Resize": {"size": [9, 9]}}]})"),
             Contains("need 0 < min_scale <= max_scale <= 1"));
  CHECK_THAT(Error(R"({"ops": [{"RandomIoUCrop": {"sampler_options": [-1]}}]})"),
             Contains("sampler_options [-1] must be finite and >= 0"));
  // Their output varies.
  CHECK(Eff(R"({"ops": [{"RandomZoomOut": {}}]})").size().empty());
}

TEST_CASE("RandomShortestSize: sizes required, max_size optional, a varying output") {
  const PipelineSpec e = Eff(R"({"ops": [{"RandomShortestSize": {"min_size": [480, 512],
                                          "max_size": 1333}}, {"CenterCrop": {"size": [448]}}]})");
  CHECK(e.ops(0).random_shortest_size().interpolation() == "bilinear");
  CHECK_THAT(Error(R"({"ops": [{"RandomShortestSize": {}}]})"),
             Contains("min_size must be 1 to 16 sizes, not 0"));
  // The detection reference's multi-scale recipe: 11 sizes.
  CHECK(Eff(R"({"ops": [{"RandomShortestSize": {"min_size": [480, 512, 544, 576, 608, 640, 672,
            704, 736, 768, 800], "max_size": 1333}}]})")
            .ops(0)
            .random_shortest_size()
            .min_size_size() == 11);
  CHECK_THAT(Error(R"({"ops": [{"RandomShortestSize": {"min_size": [1, 2, 3, 4, 5, 6, 7, 8, 9,
             10, 11, 12, 13, 14, 15, 16, 17]}}]})"),
             Contains("min_size must be 1 to 16 sizes, not 17"));
  CHECK_THAT(Error(R"({"ops": [{"RandomShortestSize": {"min_size": [0]}}]})"),
             Contains("min_size [0]: each must be within 1.."));
  CHECK(Eff(R"({"ops": [{"RandomShortestSize": {"min_size": [8]}}]})").size().empty());
}

TEST_CASE("RandomPerspective: torchvision's defaults, its checks", "[pipeline_spec]") {
  const PipelineSpec e = Eff(R"({"ops": [{"RandomPerspective": {}}, {"CenterCrop": {"size": 8}}]})");
  const v1::RandomPerspective& o = e.ops(0).random_perspective();
  CHECK(o.distortion_scale() == 0.5f);
  CHECK(o.p() == 0.5f);
  CHECK(o.interpolation() == "bilinear");
  CHECK(U(o.fill()) == std::vector<uint32_t>{0, 0, 0});
  CHECK_THAT(Error(R"({"ops": [{"RandomPerspective": {"distortion_scale": 1.5}}], "size": 8})"),
             Contains("ops[0] RandomPerspective: distortion_scale must be within [0, 1], not 1.5"));
  CHECK_THAT(Error(R"({"ops": [{"RandomPerspective": {"interpolation": "bicubic"}}], "size": 8})"),
             Contains("ops[0] RandomPerspective: interpolation"));
  CHECK_THAT(Error(R"({"ops": [{"RandomApply": {"transforms": [{"RandomPerspective": {}}]}}], "size": 8})"),
             Contains("moves the image's geometry"));
}

TEST_CASE("ElasticTransform: torchvision's defaults, its checks", "[pipeline_spec]") {
  const PipelineSpec e = Eff(R"({"ops": [{"ElasticTransform": {"alpha": 30}}, {"CenterCrop": {"size": 8}}]})");
  const v1::ElasticTransform& o = e.ops(0).elastic_transform();
  CHECK(F(o.alpha()) == std::vector<float>{30, 30});
  CHECK(F(o.sigma()) == std::vector<float>{5, 5});
  CHECK(o.interpolation() == "bilinear");
  CHECK(U(o.fill()) == std::vector<uint32_t>{0, 0, 0});
  CHECK_THAT(Error(R"({"ops": [{"ElasticTransform": {"sigma": [2, 0]}}], "size": 8})"),
             Contains("ops[0] ElasticTransform: sigma [2, 0] must be within 0..1000, both 0"));
  CHECK_THAT(Error(R"({"ops": [{"ElasticTransform": {"alpha": [1, 2, 3]}}], "size": 8})"),
             Contains("alpha should be a number or a sequence of 2"));
  CHECK_THAT(Error(R"({"ops": [{"ElasticTransform": {"interpolation": "bicubic"}}], "size": 8})"),
             Contains("ops[0] ElasticTransform: interpolation"));
}

}  // namespace
}  // namespace stoker::pipeline
