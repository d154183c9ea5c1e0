#include "server/video/clips.h"

#include <algorithm>
#include <set>
#include <vector>

#include "catch2/catch.hpp"

namespace stoker::video {
namespace {

// The expected values below are what torchvision 0.14's
// VideoClips.compute_clips_for_video(torch.arange(n), F, S, fps, frame_rate)
// and UniformClipSampler's torch.linspace give (printed from Debian's
// python3-torchvision); tests/test_video.py compares whole clip lists
// against VideoClips on real files.

std::vector<uint64_t> Clip(const VideoClipPlan& plan, uint64_t c, uint32_t frames) {
  std::vector<uint64_t> out;
  for (uint32_t j = 0; j < frames; ++j) out.push_back(plan.ClipFrame(c, j));
  return out;
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to, uint64_t step = 1) {
  std::vector<uint64_t> out;
  for (uint64_t i = from; i < to; i += step) out.push_back(i);
  return out;
}

TEST_CASE("clips at the video's own rate are consecutive frames, step apart") {
  VideoClipPlan plan(50, 30.0, {16, 1, 0});
  REQUIRE(plan.clips() == 35);
  CHECK(Clip(plan, 0, 16) == Range(0, 16));
  CHECK(Clip(plan, 34, 16) == Range(34, 50));
  VideoClipPlan stepped(50, 30.0, {16, 8, 0});
  REQUIRE(stepped.clips() == 5);
  CHECK(Clip(stepped, 4, 16) == Range(32, 48));
}

TEST_CASE("a video shorter than a clip has no clip") {
  CHECK(VideoClipPlan(10, 30.0, {16, 1, 0}).clips() == 0);
  CHECK(VideoClipPlan(0, 0.0, {16, 1, 0}).clips() == 0);
  CHECK(VideoClipPlan(16, 30.0, {16, 100, 0}).clips() == 1);
}

TEST_CASE("an integer resampling step takes every s-th frame of the whole video") {
  VideoClipPlan plan(50, 30.0, {8, 4, 15});
  REQUIRE(plan.clips() == 5);
  CHECK(Clip(plan, 0, 8) == Range(0, 16, 2));
  CHECK(Clip(plan, 2, 8) == Range(16, 32, 2));
  CHECK(Clip(plan, 4, 8) == Range(32, 48, 2));
}

TEST_CASE("a fractional resampling step rounds in float32 as torch does") {
  const double ntsc = 30000.0 / 1001.0;
  VideoClipPlan plan(300, ntsc, {16, 1, 15});
  REQUIRE(plan.clips() == 135);
  CHECK(Clip(plan, 0, 16) == std::vector<uint64_t>{0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23,
                                                   25, 27, 29});
  CHECK(Clip(plan, 67, 16) == std::vector<uint64_t>{133, 135, 137, 139, 141, 143, 145, 147, 149,
                                                    151, 153, 155, 157, 159, 161, 163});
  CHECK(Clip(plan, 134, 16) == std::vector<uint64_t>{267, 269, 271, 273, 275, 277, 279, 281, 283,
                                                     285, 287, 289, 291, 293, 295, 297});
  VideoClipPlan film(300, ntsc, {8, 5, 24});
  REQUIRE(film.clips() == 47);
  CHECK(Clip(film, 0, 8) == std::vector<uint64_t>{0, 1, 2, 3, 4, 6, 7, 8});
  CHECK(Clip(film, 23, 8) == std::vector<uint64_t>{143, 144, 146, 147, 148, 149, 151, 152});
  CHECK(Clip(film, 46, 8) == std::vector<uint64_t>{287, 288, 289, 290, 292, 293, 294, 295});
  VideoClipPlan slow(1000, 24000.0 / 1001.0, {32, 3, 10});
  REQUIRE(slow.clips() == 129);
  CHECK(Clip(slow, 64, 32) ==
        std::vector<uint64_t>{460, 462, 465, 467, 469, 472, 474, 477, 479, 481, 484,
                              486, 489, 491, 493, 496, 498, 501, 503, 505, 508, 510,
                              513, 515, 517, 520, 522, 525, 527, 529, 532, 534});
}

TEST_CASE("a frame rate above the video's repeats frames") {
  VideoClipPlan plan(40, 10.0, {16, 2, 25});
  REQUIRE(plan.clips() == 43);
  CHECK(Clip(plan, 0, 16) ==
        std::vector<uint64_t>{0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 5, 5, 6});
  CHECK(Clip(plan, 42, 16) == std::vector<uint64_t>{33, 34, 34, 34, 35, 35, 36, 36, 36, 37, 37,
                                                    38, 38, 38, 39, 39});
}

TEST_CASE("clip options name the parameter that is wrong") {
  CHECK(ValidateClipOptions({16, 1, 0}).ok());
  absl::Status s = ValidateClipOptions({0, 1, 0});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("frames_per_clip") != std::string::npos);
  CHECK(ValidateClipOptions({16, 0, 0}).message().find("step_between_clips") != std::string::npos);
}

// Videos of 50, 24, 10 (no clip), 20 and 16 frames at 30 fps, clips of 16:
// 35, 9, 0, 5 and 1 clips.
ClipIndex FiveVideos() {
  return ClipIndex({50, 24, 10, 20, 16}, {30, 30, 30, 30, 30}, {16, 1, 0});
}

TEST_CASE("clips are numbered video by video, as VideoClips numbers them") {
  ClipIndex index = FiveVideos();
  REQUIRE(index.size() == 50);
  size_t video;
  uint64_t clip;
  index.Locate(0, &video, &clip);
  CHECK((video == 0 && clip == 0));
  index.Locate(34, &video, &clip);
  CHECK((video == 0 && clip == 34));
  index.Locate(35, &video, &clip);
  CHECK((video == 1 && clip == 0));
  index.Locate(44, &video, &clip);  // the video without clips is skipped
  CHECK((video == 3 && clip == 0));
  index.Locate(49, &video, &clip);
  CHECK((video == 4 && clip == 0));
}

TEST_CASE("UniformClipSampler's clips are torch.linspace's, floored") {
  ClipIndex index = FiveVideos();
  std::vector<uint64_t> got = SampleClips(index, ClipSampling::kUniform, 5, 7, 0);
  CHECK(got == std::vector<uint64_t>{0, 8, 17, 25, 34,        // 35 clips
                                     35, 37, 39, 41, 43,      // 9 clips
                                     44, 45, 46, 47, 48,      // 5 clips
                                     49, 49, 49, 49, 49});    // 1 clip, repeated
  CHECK(SampleClips(index, ClipSampling::kUniform, 5, 8, 3) == got);  // seed and epoch unused
  // Large clip numbers round through float32 as torch's do.
  ClipIndex big({20000000 + 15, 777 + 15}, {30, 30}, {16, 1, 0});
  std::vector<uint64_t> far = SampleClips(big, ClipSampling::kUniform, 10, 0, 0);
  REQUIRE(far.size() == 20);
  CHECK(std::vector<uint64_t>(far.begin() + 10, far.end()) ==
        std::vector<uint64_t>{20000000, 20000086, 20000172, 20000258, 20000344, 20000432,
                              20000518, 20000604, 20000690, 20000776});
}

TEST_CASE("RandomClipSampler takes at most k distinct clips of each video, anew each epoch") {
  ClipIndex index = FiveVideos();
  std::vector<uint64_t> e0 = SampleClips(index, ClipSampling::kRandom, 3, 11, 0);
  REQUIRE(e0.size() == 3 + 3 + 0 + 3 + 1);
  std::vector<int> per_video(5, 0);
  for (uint64_t c : e0) {
    size_t v;
    uint64_t within;
    index.Locate(c, &v, &within);
    ++per_video[v];
  }
  CHECK(per_video == std::vector<int>{3, 3, 0, 3, 1});
  CHECK(std::set<uint64_t>(e0.begin(), e0.end()).size() == e0.size());
  // The same (seed, epoch) gives the same clips in the same order; another
  // epoch or seed another draw.
  CHECK(SampleClips(index, ClipSampling::kRandom, 3, 11, 0) == e0);
  CHECK(SampleClips(index, ClipSampling::kRandom, 3, 11, 1) != e0);
  CHECK(SampleClips(index, ClipSampling::kRandom, 3, 12, 0) != e0);
  // Every clip of a video can be drawn: over many epochs each of video 0's
  // 35 clips shows up.
  std::set<uint64_t> seen;
  for (uint32_t epoch = 0; epoch < 200; ++epoch) {
    for (uint64_t c : SampleClips(index, ClipSampling::kRandom, 3, 11, epoch)) {
      if (c < 35) seen.insert(c);
    }
  }
  CHECK(seen.size() == 35);
  // k at least the clip count takes them all.
  std::vector<uint64_t> all = SampleClips(index, ClipSampling::kRandom, 100, 1, 0);
  std::sort(all.begin(), all.end());
  CHECK(all == Range(0, 50));
}

TEST_CASE("without a clip sampler an epoch visits every clip in order") {
  CHECK(SampleClips(FiveVideos(), ClipSampling::kAll, 0, 0, 0) == Range(0, 50));
}

}  // namespace
}  // namespace stoker::video
