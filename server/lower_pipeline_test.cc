// Lowering an effective spec into the workers' PipelineParams: one OpParams
// per op with every parameter, the output's shape and ring enums. Pure.

#include "server/lower_pipeline.h"

#include <catch2/catch.hpp>
#include <string>

#include "stoker/pipeline_spec.h"
#include "stoker/ring_layout.h"

namespace stoker {
namespace {

v1::PipelineSpec Eff(const std::string& keywords, uint32_t batch = 8) {
  auto r = pipeline::SpecFromKeywordsJson(keywords);
  REQUIRE(r.ok());
  auto e = pipeline::Effective(*r, batch);
  INFO(e.status().ToString());
  REQUIRE(e.ok());
  return *e;
}

image::PipelineParams Lower(const std::string& keywords, uint32_t batch = 8) {
  auto p = LowerPipeline(Eff(keywords, batch));
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

TEST_CASE("an any-size output lowers to 0 x 0 and a fixed decode size to itself") {
  const image::PipelineParams any = Lower(R"({"pipeline": "decode"})", 1);
  CHECK(any.op_count == 0);
  CHECK(any.out_height == 0);
  CHECK(any.out_width == 0);
  CHECK(any.max_decode_pixels == (16ull << 20));
  const image::PipelineParams fixed = Lower(R"({"pipeline": "decode", "size": [48, 64]})", 4);
  CHECK(fixed.out_height == 48);
  CHECK(fixed.out_width == 64);
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
  CHECK_THAT(std::string(p.status().message()), Catch::Matchers::Contains("more than the 16"));

  e = Eff("{}");
  e.mutable_output()->set_dtype("int8");
  CHECK_FALSE(LowerPipeline(e).ok());
}

}  // namespace
}  // namespace stoker
