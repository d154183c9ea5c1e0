// A video session's pipeline (clip_pipeline.h): the reference presets as
// ops, the op table's clip rows, the order and size rules. Pure; no daemon.

#include "pipeline/clip_pipeline.h"

#include <catch2/catch.hpp>
#include <string>

#include "pipeline/pipeline_spec.h"

namespace stoker {
namespace {

using Catch::Matchers::Contains;

v1::PipelineSpec Ops(const std::string& keywords) {
  auto s = pipeline::SpecFromKeywordsJson(keywords);
  INFO(keywords << ": " << s.status().ToString());
  REQUIRE(s.ok());
  return *s;
}

v1::ClipSpec Clips(uint32_t frames) {
  v1::ClipSpec c;
  c.set_frames_per_clip(frames);
  return c;
}

std::string Error(const v1::PipelineSpec& spec, const v1::ClipSpec& clips) {
  auto p = PlanClipPipeline(spec, clips, {});
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST_CASE("the reference's train preset becomes one clip transform", "[clip_pipeline]") {
  const v1::PipelineSpec spec = Ops(
      R"({"ops": [{"Resize": {"size": [128, 171], "antialias": false}},)"
      R"( {"RandomHorizontalFlip": {}}, {"RandomCrop": {"size": [112, 112]}}],)"
      R"( "dtype": "float32", "mean": [0.43216, 0.394666, 0.37645],)"
      R"( "std": [0.22803, 0.22145, 0.216989]})");
  v1::ClipSpec clips = Clips(16);
  clips.set_layout("CTHW");
  clips.set_sampler(v1::CLIP_SAMPLER_RANDOM);
  clips.set_clips_per_video(5);
  video::VideoLimits limits;
  limits.max_frames_per_clip = 300;
  auto plan = PlanClipPipeline(spec, clips, limits);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  const video::ClipParams& p = plan->params;
  CHECK(p.frames == 16);
  CHECK(p.resize_height == 128);
  CHECK(p.resize_width == 171);
  CHECK(p.flip_p == 0.5f);
  CHECK(p.crop == video::ClipCrop::kRandom);
  CHECK(p.out_height == 112);
  CHECK(p.out_width == 112);
  CHECK(p.normalize == 1);
  CHECK(p.mean[1] == 0.394666f);
  CHECK(p.std[2] == 0.216989f);
  CHECK(p.layout == video::ClipLayout::kCTHW);
  CHECK(p.max_frames_per_clip == 300);
  CHECK(video::ClipOutputBytes(p) == 16ull * 3 * 112 * 112 * 4);
  CHECK(plan->sampling == video::ClipSampling::kRandom);
  CHECK(plan->clips_per_video == 5);
  CHECK(plan->options.step_between_clips == 1);
  REQUIRE(plan->effective.size_size() == 2);
  CHECK(plan->effective.size(0) == 112);
}

TEST_CASE("the eval preset: a center crop, uint8 for the device", "[clip_pipeline]") {
  const v1::PipelineSpec spec = Ops(
      R"({"ops": [{"Resize": {"size": [128, 171]}}, {"CenterCrop": {"size": 112}}],)"
      R"( "dtype": "uint8"})");
  auto plan = PlanClipPipeline(spec, Clips(8), {});
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->params.crop == video::ClipCrop::kCenter);
  CHECK(plan->params.crop_width == 112);
  CHECK(plan->params.normalize == 0);
  CHECK(plan->params.flip_p == 0);
  CHECK(plan->params.layout == video::ClipLayout::kTCHW);
  CHECK(video::ClipOutputBytes(plan->params) == 8ull * 3 * 112 * 112);
}

TEST_CASE("an op the op table keeps off clips is refused, naming those allowed",
          "[clip_pipeline]") {
  const std::string e = Error(
      Ops(R"({"ops": [{"ColorJitter": {"brightness": 0.4}}, {"CenterCrop": {"size": 112}}]})"),
      Clips(8));
  CHECK_THAT(e, Contains("ColorJitter does not run on video clips"));
  CHECK_THAT(e, Contains("Resize, CenterCrop, RandomCrop, RandomHorizontalFlip"));
}

TEST_CASE("clip ops out of order, twice, or not as the video reference has them",
          "[clip_pipeline]") {
  CHECK_THAT(Error(Ops(R"({"ops": [{"CenterCrop": {"size": 112}}, {"Resize": {"size": [128, 171]}}]})"),
                   Clips(8)),
             Contains("out of order"));
  CHECK_THAT(Error(Ops(R"({"ops": [{"RandomCrop": {"size": 112}}, {"CenterCrop": {"size": 100}}]})"),
                   Clips(8)),
             Contains("out of order"));
  CHECK_THAT(Error(Ops(R"({"ops": [{"Resize": {"size": 128}}, {"CenterCrop": {"size": 112}}]})"),
                   Clips(8)),
             Contains("size [h, w]"));
  CHECK_THAT(Error(Ops(R"({"ops": [{"Resize": {"size": [128, 171], "antialias": true}}]})"), Clips(8)),
             Contains("antialias=False"));
  CHECK_THAT(Error(Ops(R"({"ops": [{"RandomCrop": {"size": 112, "padding": 4}}]})"), Clips(8)),
             Contains("no padding"));
}

TEST_CASE("clips need one output size, frames and samplers in range", "[clip_pipeline]") {
  CHECK_THAT(Error(Ops(R"({"ops": [{"RandomHorizontalFlip": {}}]})"), Clips(8)),
             Contains("need one size"));
  // No op and the frames' own size given: taken.
  v1::PipelineSpec raw;
  raw.add_size(96);
  raw.add_size(160);
  auto plan = PlanClipPipeline(raw, Clips(4), {});
  REQUIRE(plan.ok());
  CHECK(plan->params.out_height == 96);
  CHECK(plan->params.out_width == 160);
  CHECK(plan->params.crop == video::ClipCrop::kNone);
  CHECK_THAT(Error(raw, Clips(0)), Contains("frames_per_clip must be 1..256"));
  CHECK_THAT(Error(raw, Clips(257)), Contains("frames_per_clip"));
  v1::ClipSpec uniform = Clips(4);
  uniform.set_sampler(v1::CLIP_SAMPLER_UNIFORM);
  CHECK_THAT(Error(raw, uniform), Contains("clips_per_video >= 1"));
  v1::ClipSpec layout = Clips(4);
  layout.set_layout("THWC");
  CHECK_THAT(Error(raw, layout), Contains("\"TCHW\" or \"CTHW\""));
  v1::PipelineSpec preset;
  preset.set_preset("train");
  CHECK_THAT(Error(preset, Clips(4)), Contains("not a preset"));
}

TEST_CASE("a clip's draw is keyed by (seed, epoch, clip) and stays inside the frame",
          "[clip_pipeline]") {
  video::ClipParams p;
  p.frames = 4;
  p.resize_height = 128;
  p.resize_width = 171;
  p.flip_p = 0.5f;
  p.crop = video::ClipCrop::kRandom;
  p.crop_height = p.out_height = 112;
  p.crop_width = p.out_width = 112;
  int flips = 0;
  bool tops_differ = false;
  for (uint64_t clip = 0; clip < 200; ++clip) {
    auto a = video::DrawClipTransform(p, 240, 320, 7, 1, clip);
    auto b = video::DrawClipTransform(p, 240, 320, 7, 1, clip);
    REQUIRE(a.ok());
    CHECK(a->crop_top == b->crop_top);
    CHECK(a->crop_left == b->crop_left);
    CHECK(a->flip == b->flip);
    CHECK(a->crop_top + 112 <= 128);
    CHECK(a->crop_left + 112 <= 171);
    flips += a->flip;
    auto other = video::DrawClipTransform(p, 240, 320, 7, 2, clip);
    tops_differ |= other->crop_top != a->crop_top || other->crop_left != a->crop_left;
  }
  CHECK(flips > 60);
  CHECK(flips < 140);
  CHECK(tops_differ);
  p.crop_height = 200;
  CHECK_FALSE(video::DrawClipTransform(p, 240, 320, 7, 1, 0).ok());
  video::ClipParams raw;
  raw.frames = 2;
  raw.out_height = 96;
  raw.out_width = 160;
  CHECK(video::DrawClipTransform(raw, 96, 160, 0, 0, 0).ok());
  auto wrong = video::DrawClipTransform(raw, 100, 160, 0, 0, 0);
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(std::string(wrong.status().message()), Contains("a frame of 100 x 160"));
}

}  // namespace
}  // namespace stoker
