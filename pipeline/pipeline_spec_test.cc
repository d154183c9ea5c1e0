// The pipeline contract (pipeline_spec.h): keywords, presets, the output,
// views, idempotence, JSON and Describe (each op's defaults and checks:
// op_defaults_test.cc). Pure; no daemon.

#include "pipeline/pipeline_spec.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/spec_test_util.h"
#include "stoker/ring_layout.h"

namespace stoker::pipeline {
namespace {

using namespace spec_test;  // NOLINT: the tests' helpers
using v1::PipelineSpec;
using Catch::Matchers::Contains;

TEST_CASE("the train preset is the default, with torchvision's defaults", "[pipeline_spec]") {
  for (const char* kw : {"", "{}", " ", R"({"pipeline": "train"})"}) {
    const PipelineSpec e = Eff(kw);
    CHECK(e.preset() == "train");
    REQUIRE(e.ops_size() == 2);
    REQUIRE(e.ops(0).has_random_resized_crop());
    const auto& rrc = e.ops(0).random_resized_crop();
    CHECK(U(rrc.size()) == std::vector<uint32_t>{224, 224});
    CHECK(F(rrc.scale()) == std::vector<float>{0.08f, 1.0f});
    CHECK(F(rrc.ratio()) == std::vector<float>{3.0f / 4.0f, 4.0f / 3.0f});
    CHECK(rrc.interpolation() == "bilinear");
    CHECK(rrc.has_antialias());
    CHECK(rrc.antialias());
    REQUIRE(e.ops(1).has_random_horizontal_flip());
    CHECK(e.ops(1).random_horizontal_flip().has_p());
    CHECK(e.ops(1).random_horizontal_flip().p() == 0.5f);
    CHECK(U(e.size()) == std::vector<uint32_t>{224, 224});
    CHECK(e.output().dtype() == "uint8");
    CHECK(e.output().layout() == "nhwc");
    CHECK(F(e.output().mean()) == std::vector<float>{0.485f, 0.456f, 0.406f});
    CHECK(F(e.output().std()) == std::vector<float>{0.229f, 0.224f, 0.225f});
    CHECK(e.max_decode_pixels() == (64ull << 20));
    CHECK_FALSE(e.exact_decode());
    CHECK_FALSE(e.apply_exif_orientation());
  }
  const PipelineSpec small = Eff(R"({"size": 32})");
  CHECK(U(small.ops(0).random_resized_crop().size()) == std::vector<uint32_t>{32, 32});
  CHECK(U(small.size()) == std::vector<uint32_t>{32, 32});
  const PipelineSpec hw = Eff(R"({"height": 48, "width": 64})");
  CHECK(U(hw.size()) == std::vector<uint32_t>{48, 64});
  CHECK(U(hw.ops(0).random_resized_crop().size()) == std::vector<uint32_t>{48, 64});
}

TEST_CASE("the eval preset: Resize(round(256 * min(size) / 224)) + CenterCrop(size)",
          "[pipeline_spec]") {
  const PipelineSpec e = Eff(R"({"pipeline": "eval"})");
  CHECK(e.preset() == "eval");
  REQUIRE(e.ops_size() == 2);
  REQUIRE(e.ops(0).has_resize());
  CHECK(U(e.ops(0).resize().size()) == std::vector<uint32_t>{256});
  CHECK_FALSE(e.ops(0).resize().has_max_size());
  CHECK(e.ops(0).resize().interpolation() == "bilinear");
  CHECK(e.ops(0).resize().antialias());
  REQUIRE(e.ops(1).has_center_crop());
  CHECK(U(e.ops(1).center_crop().size()) == std::vector<uint32_t>{224, 224});
  CHECK(U(e.size()) == std::vector<uint32_t>{224, 224});
  // 256 * 160 / 224 = 182.86; the shorter side of [160, 200] counts.
  CHECK(U(Eff(R"({"pipeline": "eval", "size": 160})").ops(0).resize().size()) ==
        std::vector<uint32_t>{183});
  const PipelineSpec wide = Eff(R"({"pipeline": "eval", "size": [200, 160]})");
  CHECK(U(wide.ops(0).resize().size()) == std::vector<uint32_t>{183});
  CHECK(U(wide.ops(1).center_crop().size()) == std::vector<uint32_t>{200, 160});
  CHECK(U(Eff(R"({"pipeline": "eval", "size": 32, "resize_size": 40})").ops(0).resize().size()) ==
        std::vector<uint32_t>{40});
  // The preset's size may come from its crop: Resize follows it.
  auto spec = SpecFromJson(R"({"preset": "eval", "ops": [{"Resize": {}},
                                                      {"CenterCrop": {"size": [160]}}]})");
  REQUIRE(spec.ok());
  auto e2 = Effective(*spec);
  REQUIRE(e2.ok());
  CHECK(U(e2->ops(0).resize().size()) == std::vector<uint32_t>{183});
  CHECK(U(e2->size()) == std::vector<uint32_t>{160, 160});
  spec->mutable_ops(1)->mutable_center_crop()->add_size(9000);
  e2 = Effective(*spec);
  REQUIRE_FALSE(e2.ok());
  CHECK_THAT(std::string(e2.status().message()),
             Contains("ops[1] CenterCrop: size [160, 9000]: each side must be within 1..8192"));
}

TEST_CASE("the decode preset: no op, each image its own size", "[pipeline_spec]") {
  const PipelineSpec any = Eff(R"({"pipeline": "decode"})");
  CHECK(any.preset() == "decode");
  CHECK(any.ops_size() == 0);
  CHECK(any.size().empty());
  CHECK(any.max_decode_pixels() == (16ull << 20));
  const PipelineSpec fixed = Eff(R"({"pipeline": "decode", "size": [64, 48]})");
  CHECK(U(fixed.size()) == std::vector<uint32_t>{64, 48});
  CHECK(fixed.max_decode_pixels() == (64ull << 20));
  CHECK(Eff(R"({"pipeline": "decode", "max_decode_pixels": 1000})").max_decode_pixels() == 1000);
  // An empty op list is this preset, not the default one.
  CHECK(Request(R"({"ops": []})").preset() == "decode");
  CHECK(Eff(R"({"ops": [], "size": 16})").preset() == "decode");
  CHECK(Eff(R"({"ops": [], "size": 16})").ops().empty());
}

TEST_CASE("the request form holds only what the keywords say", "[pipeline_spec]") {
  CHECK(Same(Request("{}"), PipelineSpec()));
  const PipelineSpec eval = Request(R"({"pipeline": "eval", "size": 160, "dtype": "float32"})");
  CHECK(eval.preset() == "eval");
  CHECK(eval.ops_size() == 0);
  CHECK(U(eval.size()) == std::vector<uint32_t>{160});
  CHECK(eval.output().dtype() == "float32");
  CHECK(eval.output().layout().empty());
  CHECK(eval.output().mean().empty());
  CHECK(eval.max_decode_pixels() == 0);
  // A preset keyword: the preset's list, that parameter set, nothing else.
  const PipelineSpec noflip = Request(R"({"flip_prob": 0, "size": 64})");
  CHECK(noflip.preset() == "train");
  REQUIRE(noflip.ops_size() == 2);
  CHECK(noflip.ops(0).has_random_resized_crop());
  CHECK(noflip.ops(0).random_resized_crop().size().empty());
  CHECK(noflip.ops(0).random_resized_crop().scale().empty());
  CHECK_FALSE(noflip.ops(0).random_resized_crop().has_antialias());
  CHECK(noflip.ops(1).random_horizontal_flip().has_p());
  CHECK(noflip.ops(1).random_horizontal_flip().p() == 0.0f);
  CHECK(U(noflip.size()) == std::vector<uint32_t>{64});
  const PipelineSpec resized = Request(R"({"pipeline": "eval", "resize_size": 300})");
  REQUIRE(resized.ops_size() == 2);
  CHECK(U(resized.ops(0).resize().size()) == std::vector<uint32_t>{300});
  CHECK(resized.ops(1).center_crop().size().empty());
  const PipelineSpec hw = Request(R"({"height": 10, "width": 20})");
  CHECK(U(hw.size()) == std::vector<uint32_t>{10, 20});
}

TEST_CASE("a keyword given as null is not given", "[pipeline_spec]") {
  CHECK(Same(Request(R"({"ops": null, "pipeline": null, "interpolation": null,
                         "resize_size": null, "dtype": null, "size": null})"),
             PipelineSpec()));
  CHECK(Same(Request(R"({"pipeline": null, "ops": [{"CenterCrop": {"size": 8}}]})"),
             Request(R"({"ops": [{"CenterCrop": {"size": 8}}]})")));
}

TEST_CASE("the output's limits hold whichever op makes it", "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": [9000, 9000]}}]})"),
             Contains("the output of ops[0] Resize") && Contains("within 1..8192"));
  CHECK(U(Eff(R"({"ops": [{"Resize": {"size": [9000]}}, {"CenterCrop": {"size": 64}}]})").size()) ==
        std::vector<uint32_t>{64, 64});
  CHECK_THAT(Error(R"({"size": 4096, "max_decode_pixels": 1000})"),
             Contains("max_decode_pixels 1000 is below the output's [4096, 4096]"));
}

TEST_CASE("keyword overrides of a preset's ops", "[pipeline_spec]") {
  const PipelineSpec t = Eff(
      R"({"scale": [0.5, 1], "ratio": [1, 2], "flip_prob": 0.25, "antialias": false,
          "interpolation": "bilinear", "size": 96})");
  CHECK(t.preset() == "train");
  const auto& rrc = t.ops(0).random_resized_crop();
  CHECK(F(rrc.scale()) == std::vector<float>{0.5f, 1.0f});
  CHECK(F(rrc.ratio()) == std::vector<float>{1.0f, 2.0f});
  CHECK_FALSE(rrc.antialias());
  CHECK(U(rrc.size()) == std::vector<uint32_t>{96, 96});
  CHECK(t.ops(1).random_horizontal_flip().p() == 0.25f);
  const PipelineSpec e = Eff(R"({"pipeline": "eval", "antialias": false, "resize_size": 250})");
  CHECK(e.preset() == "eval");
  CHECK_FALSE(e.ops(0).resize().antialias());
  CHECK(U(e.ops(0).resize().size()) == std::vector<uint32_t>{250});
  CHECK(U(e.ops(1).center_crop().size()) == std::vector<uint32_t>{224, 224});
  CHECK(Eff(R"({"flip_prob": 0})").ops(1).random_horizontal_flip().p() == 0.0f);
}

TEST_CASE("a keyword the preset has no op for, or a preset keyword beside ops", "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"pipeline": "eval", "scale": [0.5, 1]})"),
             Contains("scale") && Contains("'eval'") && Contains("train preset"));
  CHECK_THAT(Error(R"({"resize_size": 256})"),
             Contains("resize_size") && Contains("'train'") && Contains("eval preset"));
  CHECK_THAT(Error(R"({"pipeline": "decode", "flip_prob": 0})"),
             Contains("flip_prob") && Contains("'decode'"));
  CHECK_THAT(Error(R"({"pipeline": "decode", "interpolation": "bilinear"})"),
             Contains("interpolation") && Contains("'decode'") && Contains("train preset") &&
                 Contains("eval preset"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8}}], "scale": [0.5, 1]})"),
             Contains("scale beside ops"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8}}], "pipeline": "train"})"),
             Contains("pipeline and ops both given"));
  CHECK_THAT(Error(R"({"pipeline": "fancy"})"),
             Contains("unknown pipeline 'fancy'") && Contains("train, eval, decode"));
  CHECK_THAT(Error(R"({"pipeline": "fancy", "scale": [0.5, 1]})"),
             Contains("unknown pipeline 'fancy'"));
  CHECK_THAT(Error(R"({"pipeline": 3})"), Contains("pipeline must be a string"));
}

TEST_CASE("interpolation: bilinear or bicubic, 0.1's 'antialias' is refused by name",
          "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"interpolation": "lanczos"})"),
             Contains("'lanczos' is not served") && Contains("use 'bilinear'") &&
                 Contains("antialias=false gives the plain 2-tap kind") && Contains("'bicubic'"));
  auto e = Eff(R"({"ops": [{"Resize": {"size": 8, "interpolation": "bicubic"}},
                           {"RandomResizedCrop": {"size": 4, "interpolation": "bicubic"}}]})");
  CHECK(e.ops(0).resize().interpolation() == "bicubic");
  CHECK(e.ops(0).resize().antialias());
  CHECK(e.ops(1).random_resized_crop().interpolation() == "bicubic");
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": 8, "interpolation": "bicubic",
                                          "antialias": false}}]})"),
             Contains("ops[0] Resize: interpolation 'bicubic' is served antialiased only"));
  CHECK_THAT(Error(R"({"interpolation": "antialias"})"),
             Contains("drop it") && Contains("default"));
  CHECK_THAT(Error(R"({"ops": [{"Resize": {"size": 8, "interpolation": "nearest"}}]})"),
             Contains("ops[0] Resize: interpolation 'nearest' is not served"));
}

TEST_CASE("a preset and ops in one spec: only the preset's own list", "[pipeline_spec]") {
  PipelineSpec s;
  s.set_preset("train");
  s.add_ops()->mutable_center_crop()->add_size(8);
  auto e = Effective(s);
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(std::string(e.status().message()),
             Contains("'train' and ops both given") &&
                 Contains("RandomResizedCrop, RandomHorizontalFlip"));
  PipelineSpec own;
  own.set_preset("train");
  own.add_ops()->mutable_random_resized_crop()->add_size(64);
  own.add_ops()->mutable_random_horizontal_flip()->set_p(0);
  e = Effective(own);
  REQUIRE(e.ok());
  CHECK(e->preset() == "train");
  CHECK(U(e->size()) == std::vector<uint32_t>{64, 64});
}

TEST_CASE("op lists: unknown ops and parameters, types, the op limit", "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomFisheye": {}}]})"),
             Contains("ops[1]: unknown op 'RandomFisheye'") &&
                 Contains("RandomResizedCrop, Resize, CenterCrop, RandomCrop, "
                          "RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Grayscale, "
                          "RandomGrayscale, GaussianBlur, RandomRotation, RandomAffine, "
                          "RandomPosterize, RandomSolarize, RandomAdjustSharpness, "
                          "RandomAutocontrast, RandomEqualize, RandomInvert, AutoAugment, "
                          "RandAugment, TrivialAugmentWide, AugMix, RandomErasing"));
  CHECK_THAT(Error(R"({"ops": [{"RandomCrop": {"size": 8, "paddin": 4}}]})"),
             Contains("ops[0] RandomCrop: unknown parameter 'paddin'") &&
                 Contains("RandomCrop takes size, padding, pad_if_needed, fill, padding_mode"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8}, "Resize": {"size": 8}}]})"),
             Contains("ops[0]: an op is an object with one key"));
  CHECK_THAT(Error(R"({"ops": [{}]})"), Contains("ops[0]: an op is an object with one key"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8.5}}]})"),
             Contains("ops[0] CenterCrop: size must be a whole number >= 0, not 8.5"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": "8"}}]})"),
             Contains("ops[0] CenterCrop: size must be a whole number"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": 8}]})"),
             Contains("ops[0] CenterCrop must be an object"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": [[8]]}}]})"),
             Contains("must hold values, not lists"));
  CHECK_THAT(Error(R"({"ops": [{"RandomHorizontalFlip": {"p": [0.5]}}]})"),
             Contains("ops[0] RandomHorizontalFlip: p takes one value"));
  CHECK_THAT(Error(R"({"ops": 3})"), Contains("ops must be an object"));
  std::string many = R"({"ops": [)";
  for (int i = 0; i < 33; ++i)
    many += std::string(i ? "," : "") + R"({"RandomHorizontalFlip": {}})";
  many += R"(], "size": 8})";
  CHECK_THAT(Error(many), Contains("33 ops (counting those in compositions), more than the 32"));
  static_assert(kMaxOps == 32);
  // An op with no kind (only possible in a spec, not in JSON).
  PipelineSpec s;
  s.add_ops();
  auto e = Effective(s);
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(std::string(e.status().message()), Contains("ops[0]: no op set"));
}

TEST_CASE("sizes: limits, one value for both sides, agreement with the ops", "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"size": 0})"), Contains("size [0, 0]: each side must be within 1..8192"));
  CHECK_THAT(Error(R"({"size": 8193})"), Contains("within 1..8192"));
  CHECK_THAT(Error(R"({"size": [4096, 4097]})"), Contains("more than 16777216 pixels"));
  CHECK(U(Eff(R"({"size": [4096, 4096]})").size()) == std::vector<uint32_t>{4096, 4096});
  CHECK_THAT(Error(R"({"size": [1, 2, 3]})"), Contains("size must be 1 value or 2"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": [8, 9, 10]}}]})"),
             Contains("ops[0] CenterCrop: size must be 1 value or 2"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 9000}}]})"),
             Contains("ops[0] CenterCrop: size [9000, 9000]: each side must be within 1..8192"));
  CHECK_THAT(Error(R"({"ops": [{"CenterCrop": {"size": 8}}], "size": 9})"),
             Contains("size [9, 9] disagrees with the output of ops[0] CenterCrop, [8, 8]"));
  CHECK(U(Eff(R"({"ops": [{"CenterCrop": {"size": 8}}], "size": [8, 8]})").size()) ==
        std::vector<uint32_t>{8, 8});
  CHECK_THAT(Error(R"({"pipeline": "eval", "size": [224, 224], "ops": []})"),
             Contains("pipeline and ops both given"));
  CHECK_THAT(Error(R"({"height": 8})"), Contains("height given without width"));
  CHECK_THAT(Error(R"({"height": 8, "width": 8, "size": 8})"),
             Contains("height/width and size both given"));
  CHECK_THAT(Error(R"({"height": [8], "width": 8})"), Contains("height must be a whole number"));
  CHECK_THAT(Error(R"({"size": "big"})"), Contains("size must be a whole number >= 0, not 'big'"));
  // The last op that fixes the size decides it.
  CHECK(U(Eff(R"({"ops": [{"CenterCrop": {"size": 100}}, {"RandomCrop": {"size": [20, 30]}}]})")
              .size()) == std::vector<uint32_t>{20, 30});
}

TEST_CASE("the output: dtype, layout by dtype, mean and std", "[pipeline_spec]") {
  CHECK(Eff(R"({"dtype": "float16"})").output().layout() == "nchw");
  CHECK(Eff(R"({"dtype": "float32", "layout": "nhwc"})").output().layout() == "nhwc");
  CHECK(Eff(R"({"layout": "nchw"})").output().layout() == "nchw");
  const v1::Output o = Eff(R"({"dtype": "float32", "mean": 0.5, "std": [1, 2, 3]})").output();
  CHECK(F(o.mean()) == std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK(F(o.std()) == std::vector<float>{1, 2, 3});
  CHECK_THAT(Error(R"({"dtype": "int8"})"),
             Contains("dtype 'int8' is unknown: use uint8, float32, float16"));
  CHECK_THAT(Error(R"({"dtype": "Float32"})"), Contains("dtype 'Float32' is unknown"));
  CHECK_THAT(Error(R"({"layout": "chw"})"), Contains("layout 'chw' is unknown: use nhwc, nchw"));
  CHECK_THAT(Error(R"({"mean": [0.5, 0.5]})"), Contains("mean must be 1 value or 3"));
  CHECK_THAT(Error(R"({"std": 0})"), Contains("std [0, 0, 0] must not hold 0"));
  CHECK_THAT(Error(R"({"std": [1, 0, 1]})"), Contains("must not hold 0"));
  CHECK_THAT(Error(R"({"mean": [0, "NaN", 0]})"), Contains("mean [0, NaN, 0] must be finite"));
}

TEST_CASE("max_decode_pixels, exact_decode, apply_exif_orientation", "[pipeline_spec]") {
  CHECK(Eff(R"({"max_decode_pixels": 4294967296})").max_decode_pixels() == (1ull << 32));
  CHECK(Eff(R"({"max_decode_pixels": "100000"})").max_decode_pixels() == 100000);
  CHECK_THAT(Error(R"({"max_decode_pixels": 4294967297})"),
             Contains("max_decode_pixels must be within 1..4294967296"));
  CHECK_THAT(Error(R"({"max_decode_pixels": -1})"), Contains("max_decode_pixels must be a whole"));
  const PipelineSpec e = Eff(R"({"exact_decode": true, "apply_exif_orientation": true})");
  CHECK(e.exact_decode());
  CHECK(e.apply_exif_orientation());
  CHECK_THAT(Error(R"({"exact_decode": 1})"), Contains("exact_decode must be true or false"));
}

TEST_CASE("keywords: unknown ones, not an object, null", "[pipeline_spec]") {
  CHECK_THAT(Error(R"({"flip": 0})"),
             Contains("unknown pipeline keyword 'flip'") &&
                 Contains("pipeline, ops, size, max_decode_pixels, exact_decode, "
                          "apply_exif_orientation, mask_dtype, mask_fill, box_min_size, "
                          "box_min_visibility, views, height, width, resize_size, scale, ratio, "
                          "flip_prob, interpolation, antialias, dtype, layout, mean, std"));
  CHECK_THAT(Error("[1, 2]"), Contains("pipeline keywords are not a JSON object"));
  CHECK_THAT(Error("{"), Contains("pipeline keywords are not a JSON object"));
  CHECK(Same(Request(R"({"dtype": null, "size": null})"), PipelineSpec()));
}

// Keyword sets that cover every op and preset, for the properties below.
const char* const kRequests[] = {
    "{}",
    R"({"pipeline": "eval", "size": [160, 192], "dtype": "float16"})",
    R"({"pipeline": "eval", "resize_size": 300, "antialias": false})",
    R"({"scale": [0.25, 1], "flip_prob": 0, "size": 32, "exact_decode": true})",
    R"({"pipeline": "decode", "size": 64, "apply_exif_orientation": true})",
    R"({"ops": [{"RandomCrop": {"size": 32, "padding": [4, 2], "fill": 9,
                                "padding_mode": "reflect", "pad_if_needed": true}},
                {"RandomHorizontalFlip": {"p": 0.3}}, {"RandomVerticalFlip": {}},
                {"ColorJitter": {"brightness": 0.4, "contrast": 0.4, "saturation": [0.5, 1.5],
                                 "hue": 0.1}},
                {"Grayscale": {"num_output_channels": 3}}, {"RandomGrayscale": {"p": 0.2}},
                {"GaussianBlur": {"kernel_size": [3, 5], "sigma": [0.5, 1]}}],
        "dtype": "float32", "mean": 0.5, "std": 0.25})",
    R"({"ops": [{"Resize": {"size": 64, "max_size": 80, "antialias": false}},
                {"CenterCrop": {"size": [56, 48]}}, {"RandomResizedCrop": {"size": 24,
                 "scale": [0.5, 0.75], "ratio": [0.9, 1.1]}}]})",
    R"({"ops": [{"Resize": {"size": [30, 40]}}], "max_decode_pixels": 123456})",
    R"({"ops": [{"RandomRotation": {"degrees": [-5, 10], "interpolation": "bilinear",
                                    "center": [3.5, 4], "fill": [1, 2, 3]}},
                {"RandomAffine": {"degrees": 15, "translate": [0.1, 0.2], "scale": [0.9, 1.1],
                                  "shear": 5, "fill": 7}},
                {"RandomAffine": {"degrees": 0, "shear": [-1, 1, -2, 2], "center": [0, 0]}},
                {"RandomPosterize": {"bits": 4}}, {"RandomSolarize": {"threshold": 128}},
                {"RandomAdjustSharpness": {"sharpness_factor": 2}},
                {"RandomAutocontrast": {}}, {"RandomEqualize": {"p": 0.1}},
                {"RandomInvert": {}}, {"CenterCrop": {"size": 32}},
                {"RandomErasing": {"value": "random"}}, {"RandomErasing": {"value": [1, 2, 3]}}],
        "dtype": "float16"})",
    R"({"ops": [{"RandomResizedCrop": {"size": 176}}, {"AutoAugment": {"policy": "svhn"}},
                {"RandAugment": {"num_ops": 3, "magnitude": 5, "num_magnitude_bins": 11,
                                 "interpolation": "bilinear", "fill": [1, 2, 3]}},
                {"TrivialAugmentWide": {}}, {"AugMix": {"chain_depth": 2, "all_ops": false}},
                {"RandomErasing": {"p": 0.1, "value": 9}}]})",
};

TEST_CASE("Effective is idempotent, and ToJson/SpecFromJson round-trips", "[pipeline_spec]") {
  for (const char* kw : kRequests) {
    INFO(kw);
    const PipelineSpec e = Eff(kw);
    auto again = Effective(e);
    REQUIRE(again.ok());
    CHECK(Same(*again, e));
    auto parsed = SpecFromJson(ToJson(e));
    REQUIRE(parsed.ok());
    CHECK(Same(*parsed, e));
    auto reparsed = Effective(*parsed);
    REQUIRE(reparsed.ok());
    CHECK(Same(*reparsed, e));
    // The request form round-trips too, and gives the same effective spec.
    const PipelineSpec r = Request(kw);
    auto r2 = SpecFromJson(ToJson(r));
    REQUIRE(r2.ok());
    CHECK(Same(*r2, r));
  }
  const PipelineSpec any = Eff(R"({"pipeline": "decode"})");
  auto again = Effective(any);
  REQUIRE(again.ok());
  CHECK(Same(*again, any));
}

TEST_CASE("ToJson: the proto's names, torchvision's op names, shortest floats", "[pipeline_spec]") {
  CHECK(ToJson(Eff("{}")) ==
        R"({"preset":"train","ops":[{"RandomResizedCrop":{"size":[224,224],"scale":[0.08,1],)"
        R"("ratio":[0.75,1.3333334],"interpolation":"bilinear","antialias":true}},)"
        R"({"RandomHorizontalFlip":{"p":0.5}}],"size":[224,224],"output":{"dtype":"uint8",)"
        R"("layout":"nhwc","mean":[0.485,0.456,0.406],"std":[0.229,0.224,0.225]},)"
        R"("max_decode_pixels":67108864,"mask_dtype":"uint8","mask_fill":255})");
  CHECK(ToJson(PipelineSpec()) == "{}");
  CHECK(
      ToJson(Request(R"({"ops": [{"GaussianBlur": {"kernel_size": 3}}], "exact_decode": true})")) ==
      R"({"ops":[{"GaussianBlur":{"kernel_size":[3]}}],"exact_decode":true})");
  PipelineSpec odd;
  odd.set_preset("a\"b\\\n");
  CHECK(ToJson(odd) == R"({"preset":"a\"b\\\u000a"})");
  auto back = SpecFromJson(ToJson(odd));
  REQUIRE(back.ok());
  CHECK(back->preset() == odd.preset());
  // The JSON mapping's other spellings read too.
  auto camel = SpecFromJson(R"({"ops": [{"random_crop": {"size": [8], "padIfNeeded": true}}],
                                "maxDecodePixels": "77"})");
  REQUIRE(camel.ok());
  CHECK(camel->ops(0).random_crop().pad_if_needed());
  CHECK(camel->max_decode_pixels() == 77);
  // The new ops: a negative chain_depth, value_random, policy names.
  const PipelineSpec policies = Eff(R"({"ops": [{"CenterCrop": {"size": 8}},
      {"AutoAugment": {"policy": "cifar10"}}, {"AugMix": {"severity": 2}},
      {"RandomErasing": {"value": "random", "p": 0.25}}], "dtype": "float16"})");
  CHECK(ToJson(policies) ==
        R"({"ops":[{"CenterCrop":{"size":[8,8]}},{"AutoAugment":{"policy":"cifar10",)"
        R"("interpolation":"nearest","fill":[0,0,0]}},{"AugMix":{"severity":2,"mixture_width":3,)"
        R"("chain_depth":-1,"alpha":1,"all_ops":true,"interpolation":"bilinear",)"
        R"("fill":[0,0,0]}},{"RandomErasing":{"p":0.25,"scale":[0.02,0.33],"ratio":[0.3,3.3],)"
        R"("value_random":true}}],"size":[8,8],"output":{"dtype":"float16","layout":"nchw",)"
        R"("mean":[0.485,0.456,0.406],"std":[0.229,0.224,0.225]},"max_decode_pixels":67108864,"mask_dtype":"uint8","mask_fill":255})");
  auto camel2 = SpecFromJson(R"({"ops": [{"aug_mix": {"chainDepth": -1, "mixtureWidth": 2}},
                                          {"random_erasing": {"valueRandom": true}}]})");
  REQUIRE(camel2.ok());
  CHECK(camel2->ops(0).aug_mix().chain_depth() == -1);
  CHECK(camel2->ops(0).aug_mix().mixture_width() == 2);
  CHECK(camel2->ops(1).random_erasing().value_random());
  auto bad = SpecFromJson(R"({"kind": 1})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()),
             Contains("unknown field 'kind'; PipelineSpec takes preset, ops, size, output"));
}

TEST_CASE("Describe: one line, the preset or the ops, then the output", "[pipeline_spec]") {
  CHECK(Describe(Eff("{}")) ==
        "train: RandomResizedCrop(size=[224, 224], scale=[0.08, 1], ratio=[0.75, 1.3333334], "
        "interpolation=bilinear, antialias=true), RandomHorizontalFlip(p=0.5) -> 224x224 uint8 "
        "nhwc");
  CHECK(Describe(Eff(R"({"pipeline": "decode", "exact_decode": true})")) ==
        "decode -> any size uint8 nhwc, exact_decode");
  CHECK(Describe(Eff(R"({"ops": [{"CenterCrop": {"size": [8, 6]}}], "dtype": "float32",
                         "max_decode_pixels": 1000, "apply_exif_orientation": true})")) ==
        "CenterCrop(size=[8, 6]) -> 8x6 float32 nchw mean=[0.485, 0.456, 0.406] "
        "std=[0.229, 0.224, 0.225], max_decode_pixels=1000, apply_exif_orientation");
  CHECK(Describe(Eff(R"({"ops": [{"CenterCrop": {"size": 8}}, {"RandomAffine": {"degrees": 5,
                         "shear": 2}}, {"AugMix": {}}, {"RandomErasing": {"value": "random"}}],
                         "dtype": "float32", "mean": 0, "std": 1})")) ==
        "CenterCrop(size=[8, 8]), RandomAffine(degrees=[-5, 5], shear=[-2, 2], "
        "interpolation=nearest, fill=[0, 0, 0]), AugMix(severity=3, mixture_width=3, "
        "chain_depth=-1, alpha=1, all_ops=true, interpolation=bilinear, fill=[0, 0, 0]), "
        "RandomErasing(p=0.5, scale=[0.02, 0.33], ratio=[0.3, 3.3], value_random=true) -> 8x8 "
        "float32 nchw mean=[0, 0, 0] std=[1, 1, 1]");
  // A request: what it says.
  CHECK(Describe(PipelineSpec()) == "train ->");
  CHECK(Describe(Request(R"({"pipeline": "eval", "size": 160})")) == "eval -> 160");
}

TEST_CASE("dtype and layout names are the ring's enums", "[pipeline_spec]") {
  CHECK(DTypeFromName("uint8") == ring::kUint8);
  CHECK(DTypeFromName("float32") == ring::kFloat32);
  CHECK(DTypeFromName("float16") == ring::kFloat16);
  CHECK(DTypeFromName("bfloat16") == 0);
  CHECK(DTypeName(ring::kFloat16) == "float16");
  CHECK(DTypeName(99).empty());
  CHECK(LayoutFromName("nhwc") == ring::kNHWC);
  CHECK(LayoutFromName("nchw") == ring::kNCHW);
  CHECK(LayoutFromName("NCHW") == 0);
  CHECK(LayoutName(ring::kNCHW) == "nchw");
  CHECK(LayoutName(0).empty());
}

TEST_CASE("mask keywords: uint8 and 255 by default, uint16 allowed, a fill must fit") {
  const PipelineSpec e = Eff("{}");
  CHECK(e.mask_dtype() == "uint8");
  CHECK(e.mask_fill() == 255);
  const PipelineSpec wide = Eff(R"({"mask_dtype": "uint16", "mask_fill": 65535})");
  CHECK(wide.mask_dtype() == "uint16");
  CHECK(wide.mask_fill() == 65535);
  CHECK(Eff(R"({"mask_fill": 0})").mask_fill() == 0);  // 0 given is not "unset"
  CHECK_THAT(Error(R"({"mask_dtype": "int8"})"),
             Contains("mask_dtype must be \"uint8\" or \"uint16\""));
  CHECK_THAT(Error(R"({"mask_fill": 256})"), Contains("mask_fill 256 does not fit mask_dtype uint8"));
}

TEST_CASE("box keywords: 0 by default, checked ranges") {
  const PipelineSpec e = Eff("{}");
  CHECK(e.box_min_size() == 0);
  CHECK(e.box_min_visibility() == 0);
  const PipelineSpec set = Eff(R"({"box_min_size": 1, "box_min_visibility": 0.25})");
  CHECK(set.box_min_size() == 1);
  CHECK(set.box_min_visibility() == 0.25f);
  CHECK_THAT(Error(R"({"box_min_size": -1})"), Contains("box_min_size must be within 0..65500"));
  CHECK_THAT(Error(R"({"box_min_visibility": 1.5})"),
             Contains("box_min_visibility must be within 0..1, not 1.5"));
}

// DINO's views (its paper's recipe, with torchvision's ops): two global
// crops and eight local ones.
constexpr char kDinoViews[] = R"({"views": [
  {"ops": [{"RandomResizedCrop": {"size": 224, "scale": [0.4, 1]}}, {"RandomHorizontalFlip": {}},
           {"RandomApply": {"transforms": [{"ColorJitter": {"brightness": 0.4, "contrast": 0.4,
                                                            "saturation": 0.2, "hue": 0.1}}],
                            "p": 0.8}},
           {"RandomGrayscale": {"p": 0.2}}, {"GaussianBlur": {"kernel_size": 23}}]},
  {"ops": [{"RandomResizedCrop": {"size": 224, "scale": [0.4, 1]}}, {"RandomHorizontalFlip": {}},
           {"RandomApply": {"transforms": [{"GaussianBlur": {"kernel_size": 23}}], "p": 0.1}},
           {"RandomSolarize": {"threshold": 128, "p": 0.2}}]},
  {"ops": [{"RandomResizedCrop": {"size": 96, "scale": [0.05, 0.4]}}, {"RandomHorizontalFlip": {}}],
   "count": 8}],
  "dtype": "float32"})";

TEST_CASE("views: each view's ops and size filled in, the output shared", "[pipeline_spec][views]") {
  const PipelineSpec e = Eff(kDinoViews);
  REQUIRE(e.views_size() == 3);
  CHECK(e.ops().empty());
  CHECK(e.preset().empty());
  CHECK(e.size().empty());
  CHECK(U(e.views(0).size()) == std::vector<uint32_t>{224, 224});
  CHECK(U(e.views(2).size()) == std::vector<uint32_t>{96, 96});
  CHECK(e.views(0).count() == 1);  // the default
  CHECK(e.views(2).count() == 8);
  // Each view's ops get their defaults as a pipeline's do.
  CHECK(F(e.views(0).ops(0).random_resized_crop().ratio()) ==
        std::vector<float>{3.0f / 4.0f, 4.0f / 3.0f});
  CHECK(e.views(0).ops(2).random_apply().transforms(0).color_jitter().hue_size() == 2);
  CHECK(e.views(1).ops(3).random_solarize().p() == 0.2f);
  CHECK(e.output().dtype() == "float32");
  CHECK(e.output().layout() == "nchw");
  CHECK(e.max_decode_pixels() == 64ull << 20);
  // Idempotent, and through JSON.
  CHECK(Same(*Effective(e), e));
  auto back = SpecFromJson(ToJson(e));
  REQUIRE(back.ok());
  CHECK(Same(*Effective(*back), e));
  CHECK_THAT(Describe(e), Contains("views: 1 x [RandomResizedCrop(size=[224, 224]") &&
                              Contains("] -> 224x224, 1 x [") &&
                              Contains("8 x [RandomResizedCrop(size=[96, 96]") &&
                              Contains("-> 96x96 -> float32 nchw"));
  // A view's size may be given for ops of varying size.
  const PipelineSpec r = Eff(R"({"views": [{"ops": [{"Resize": {"size": [40]}}], "size": [40, 60]}]})");
  CHECK(U(r.views(0).size()) == std::vector<uint32_t>{40, 60});
}

TEST_CASE("views: what is refused, by name", "[pipeline_spec][views]") {
  CHECK_THAT(Error(R"({"views": [{"ops": [{"RandomResizedCrop": {"size": 8}}]}], "pipeline": "eval"})"),
             Contains("views and pipeline both given"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"RandomResizedCrop": {"size": 8}}]}], "size": 8})"),
             Contains("views and size both given"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"RandomHorizontalFlip": {}}]}]})"),
             Contains("views[0].size: this view's ops make images of varying size"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"RandomResizedCrop": {"size": 8}}], "size": 9}]})"),
             Contains("views[0].size [9, 9] disagrees with the output of views[0].ops[0] "
                      "RandomResizedCrop, [8, 8]"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"CenterCrop": {"size": 8}}]},
                                 {"ops": [{"ColorJitter": {"hue": 0.7}}, {"CenterCrop": {"size": 8}}]}]})"),
             Contains("views[1].ops[0] ColorJitter: hue"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"RandomIoUCrop": {}}, {"Resize": {"size": [8, 8]}}]}]})"),
             Contains("views[0].ops[0] RandomIoUCrop: it crops around a sample's boxes"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"CenterCrop": {"size": 8}}], "count": 13}]})"),
             Contains("13 views in all"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"CenterCrop": {"size": 8}}], "count": 4000000000}]})"),
             Contains("views in all"));
  std::string many;
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + R"({"RandomInvert": {}})";
  CHECK_THAT(Error(R"({"views": [{"ops": [)" + many + R"(, {"CenterCrop": {"size": 8}}]}, {"ops": [)" +
                   many + R"(, {"CenterCrop": {"size": 8}}]}]})"),
             Contains("views: 36 ops over all views"));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"CenterCrop": {"size": 8}}, {"RandomErasing": {"value": "random"}}]}]})"),
             Contains("views[0].ops[1] RandomErasing: "));
  CHECK_THAT(Error(R"({"views": [{"ops": [{"CenterCrop": {"size": 8}}], "colour": 1}]})"),
             Contains("unknown field 'colour'; View takes ops, size, count"));
}

}  // namespace
}  // namespace stoker::pipeline
