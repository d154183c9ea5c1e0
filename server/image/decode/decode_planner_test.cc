#include "server/image/decode/decode_planner.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/image/pipeline.h"
#include "testing/test_jpeg.h"
#include "testing/test_params.h"

namespace stoker::image {
namespace {

constexpr uint32_t kOne = 1u << 0;   // 1/8
constexpr uint32_t kTwo = 1u << 1;   // 2/8
constexpr uint32_t kFour = 1u << 3;  // 4/8

// Costs of scales 1, 2, 4, 8: {baseline, progressive} each.
std::vector<ScaleCost> Costs(std::initializer_list<std::pair<double, double>> by_scale) {
  std::vector<ScaleCost> costs;
  int scale = 1;
  for (const auto& [b, p] : by_scale) {
    costs.push_back({scale, b, p});
    scale *= 2;
  }
  return costs;
}

TEST_CASE("DisabledScales: each reduced scale that beats the larger ones is kept") {
  CHECK(DisabledScales(Costs({{1, 2}, {2, 4}, {3, 6}, {4, 8}})) == 0);
  // The Intel figures: 2/8 (2.06 ms) is within 10% of 4/8 (2.01).
  CHECK(DisabledScales(Costs({{1.68, 4}, {2.06, 5}, {2.01, 5}, {2.89, 6}})) == 0);
  // This machine's (decode_planner.h): progressive nearly tied at every
  // scale, one run's 1/8 12% over 4/8 there, 24% under it on baseline.
  CHECK(DisabledScales(Costs({{1.41, 5.83}, {1.70, 5.60}, {1.86, 5.21}, {1.90, 6.35}})) == 0);
}

TEST_CASE("DisabledScales: a 4/8 slower than 8/8 is disabled") {
  // The mean of the two ratios: (5/4 + 8/8) / 2 = 1.125.
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {5, 8}, {4, 8}})) == kFour);
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {5, 10}, {4, 8}})) == kFour);
  // 30% slower on the baseline image alone: (1.3 + 1) / 2 = 1.15.
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {5.2, 8}, {4, 8}})) == kFour);
  // 12% slower on one image alone: (1.12 + 1) / 2 = 1.06, kept; a near
  // tie on the progressive image does not outweigh a 25% gain on baseline.
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {4.48, 8}, {4, 8}})) == 0);
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {3, 8.96}, {4, 8}})) == 0);
}

TEST_CASE("DisabledScales: a 2/8 slower than an allowed 4/8 is disabled") {
  CHECK(DisabledScales(Costs({{1, 1}, {3, 5}, {2, 4}, {4, 8}})) == kTwo);
  // 1/8 is then compared with 4/8 and 8/8 only: 5% over 4/8, kept; 20%, not.
  CHECK(DisabledScales(Costs({{1.05, 4.2}, {3, 5}, {1, 4}, {4, 8}})) == kTwo);
  CHECK(DisabledScales(Costs({{1.2, 4.8}, {3, 5}, {1, 4}, {4, 8}})) == (kOne | kTwo));
}

TEST_CASE("DisabledScales: the tolerance's edges") {
  // Exactly (1 + tolerance) times the larger scale: allowed; above: disabled.
  // Quarters keep the ratios exact in binary floating point.
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {5, 5}, {4, 4}}), 0.25) == 0);
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {5.001, 5}, {4, 4}}), 0.25) == kFour);
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {5, 5.001}, {4, 4}}), 0.25) == kFour);
  // Tolerance 0: equal costs are allowed, any slower one is not.
  CHECK(DisabledScales(Costs({{4, 4}, {4, 4}, {4, 4}, {4, 4}}), 0) == 0);
  CHECK(DisabledScales(Costs({{4, 4}, {4, 4}, {4.0001, 4}, {4, 4}}), 0) == kFour);
  // The default tolerance is 10%: 4/8 at 1.09 x 8/8 stays, 1.11 x goes.
  CHECK(DisabledScales(Costs({{1, 1}, {1, 1}, {1.09, 1.09}, {1, 1}})) == 0);
  CHECK(DisabledScales(Costs({{1, 1}, {1, 1}, {1.11, 1.11}, {1, 1}})) == kFour);
}

TEST_CASE("DisabledScales: a disabled scale is not the reference for smaller ones") {
  // 2/8 is disabled against 8/8 ((1/4 + 9/4) / 2 = 1.25). 1/8 ties 8/8 and
  // 4/8 and is kept, though 2.2 times 2/8 by the mean of the ratios.
  CHECK(DisabledScales(Costs({{4, 4}, {1, 9}, {4, 4}, {4, 4}})) == kTwo);
  // 4/8 disabled against 8/8 ((1/4 + 10/4) / 2 = 1.375); 2/8 (3, 3) beats
  // 8/8 and is kept, though it would be 1.65 times 4/8. 1/8 is compared with
  // 2/8 and 8/8: 3% over 2/8, kept; 17%, not.
  CHECK(DisabledScales(Costs({{3.2, 3}, {3, 3}, {1, 10}, {4, 4}})) == kFour);
  CHECK(DisabledScales(Costs({{3.4, 3.6}, {3, 3}, {1, 10}, {4, 4}})) == (kOne | kFour));
  // Both larger reduced scales disabled: 1/8 answers to 8/8 alone.
  CHECK(DisabledScales(Costs({{3.9, 1}, {6, 1}, {10, 1}, {4, 1}})) == (kTwo | kFour));
}

TEST_CASE("DisabledScales: unmeasured scales and order") {
  // A zero cost (a failed decode) neither is disabled nor disables.
  CHECK(DisabledScales(Costs({{1, 1}, {0, 0}, {5, 1}, {0, 4}})) == 0);
  CHECK(DisabledScales(Costs({{9, 9}, {0, 0}, {5, 5}, {4, 4}})) == (kOne | kFour));
  // Any order of the entries.
  std::vector<ScaleCost> costs = Costs({{1, 1}, {3, 5}, {2, 4}, {4, 8}});
  std::swap(costs[0], costs[3]);
  std::swap(costs[1], costs[2]);
  CHECK(DisabledScales(costs) == kTwo);
  // 8/8 is never disabled.
  CHECK(DisabledScales(Costs({{1, 1}, {2, 2}, {3, 3}, {100, 100}})) == 0);
}

// A clock whose decode intervals are scripted: ms[image][scale index] per
// repetition, as decode_planner.h says Calibrate calls the clock.
struct ScriptedClock {
  std::vector<uint64_t> times;
  size_t next = 0;
  uint64_t operator()() {
    REQUIRE(next < times.size());
    return times[next++];
  }
};

ScriptedClock Script(const std::vector<std::vector<std::vector<double>>>& ms_by_rep) {
  ScriptedClock c;
  uint64_t t = 1000;
  c.times.push_back(t);  // start
  for (const auto& rep : ms_by_rep) {
    for (const auto& image : rep) {
      REQUIRE(image.size() == 4);
      for (double ms : image) {
        c.times.push_back(t);
        t += static_cast<uint64_t>(ms * 1e6);
        c.times.push_back(t);
        t += 7;  // between decodes: not counted
      }
    }
  }
  c.times.push_back(t + 500'000'000);  // end
  return c;
}

TEST_CASE("Calibrate: a scripted clock gives the minimum of the runs and the mask") {
  // The minimum over both runs: 4/8 is (5/4 + 9/8) / 2 = 1.19 times 8/8,
  // so it goes; 2/8's slow progressive run (9 ms) is not its minimum (3 ms).
  ScriptedClock script = Script({
      {{1, 2, 5, 4}, {2, 9, 9.5, 8}},
      {{1.5, 2.5, 6, 4.5}, {2.5, 3, 9, 9}},
  });
  const uint64_t end = script.times.back();
  const uint64_t start = script.times.front();
  const DecodeCalibration cal = Calibrate(std::ref(script), 2);
  CHECK(script.next == script.times.size());
  REQUIRE(cal.costs.size() == 4);
  const int scales[] = {1, 2, 4, 8};
  const double baseline[] = {1, 2, 5, 4};
  const double progressive[] = {2, 3, 9, 8};
  for (int i = 0; i < 4; ++i) {
    CHECK(cal.costs[i].scale == scales[i]);
    CHECK(cal.costs[i].baseline_ms == Approx(baseline[i]));
    CHECK(cal.costs[i].progressive_ms == Approx(progressive[i]));
  }
  CHECK(cal.disabled_dct_scales == kFour);
  CHECK(cal.seconds == Approx((end - start) / 1e9));
}

TEST_CASE("Calibrate: the real clocks measure 4 scales") {
  const auto wall = [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  };
  const NanoClock clock = GENERATE_COPY(NanoClock(wall), NanoClock(ThreadCpuNanos));
  const DecodeCalibration cal = Calibrate(clock, 1);
  REQUIRE(cal.costs.size() == 4);
  for (const ScaleCost& c : cal.costs) {
    INFO("scale " << c.scale);
    CHECK(c.baseline_ms > 0);
    CHECK(c.progressive_ms > 0);
  }
  CHECK((cal.disabled_dct_scales & ~(kOne | kTwo | kFour)) == 0);
  CHECK(cal.disabled_dct_scales == DisabledScales(cal.costs));
  CHECK(cal.seconds > 0);
}

// Resize(16) + CenterCrop(16) of a 1024x1024 photo: 64 decoded pixels per
// output pixel, so 1/8 is allowed by the quality rule.
PipelineParams SmallEval() {
  PipelineParams p = testing::EvalParams(16);
  p.ops[1].height = p.ops[1].width = 16;
  p.out_height = p.out_width = 16;
  return p;
}

TEST_CASE("Process: a disabled DCT scale is passed over for the next allowed one") {
  const std::vector<uint8_t> rgb = testing::MakePhoto(1024, 1024, 3, 17);
  testing::EncodeOptions options;
  options.progressive = GENERATE(false, true);
  const std::vector<uint8_t> jpeg = testing::EncodeJpeg(rgb, 1024, 1024, 3, options);
  SampleProcessor proc;
  const auto run = [&](uint32_t disabled, uint32_t exact, SampleResult* r) {
    PipelineParams p = SmallEval();
    p.disabled_dct_scales = disabled;
    p.exact_decode = exact;
    std::vector<uint8_t> out(MaxSampleBytes(p));
    const absl::Status s = proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), r);
    REQUIRE(s.ok());
    return out;
  };
  SampleResult r;
  run(0, 0, &r);
  CHECK(r.dct_scale == 1);
  run(kOne, 0, &r);
  CHECK(r.dct_scale == 2);
  run(kOne | kTwo, 0, &r);
  CHECK(r.dct_scale == 4);
  run(kOne | kFour, 0, &r);
  CHECK(r.dct_scale == 2);
  run(kOne | kTwo | kFour, 0, &r);
  CHECK(r.dct_scale == 8);
  // exact_decode wins over an allowed reduced scale.
  run(0, 1, &r);
  CHECK(r.dct_scale == 8);
  // The same scale gives the same pixels, whichever other scales are off.
  SampleResult a, b;
  const std::vector<uint8_t> at2 = run(kOne, 0, &a);
  const std::vector<uint8_t> at2_again = run(kOne | kFour, 0, &b);
  CHECK(a.dct_scale == 2);
  CHECK(b.dct_scale == 2);
  CHECK(at2 == at2_again);
  const std::vector<uint8_t> at1 = run(0, 0, &a);
  const std::vector<uint8_t> at1_again = run(kTwo | kFour, 0, &b);
  CHECK(b.dct_scale == 1);
  CHECK(at1 == at1_again);
}

TEST_CASE("SerializeCalibration round-trips, ParseCalibration refuses anything else",
          "[decode_planner]") {
  DecodeCalibration c;
  c.costs = {{1, 1.25, 5.0}, {2, 1.5, 5.0}, {4, 1.0 / 3, 5.1}, {8, 1.75, 5.25}};
  c.disabled_dct_scales = DisabledScales(c.costs);
  REQUIRE(c.disabled_dct_scales != 0);  // 1/8 and 2/8 cost more than 4/8
  const std::string text = SerializeCalibration(c, "CPU X; libjpeg-turbo 1");
  DecodeCalibration got;
  REQUIRE(ParseCalibration(text, "CPU X; libjpeg-turbo 1", &got));
  REQUIRE(got.costs.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(got.costs[i].scale == c.costs[i].scale);
    CHECK(got.costs[i].baseline_ms == c.costs[i].baseline_ms);  // exact: %.17g
    CHECK(got.costs[i].progressive_ms == c.costs[i].progressive_ms);
  }
  CHECK(got.disabled_dct_scales == c.disabled_dct_scales);

  DecodeCalibration untouched;
  CHECK_FALSE(ParseCalibration(text, "CPU Y; libjpeg-turbo 1", &untouched));  // another machine
  CHECK(untouched.costs.empty());
  CHECK_FALSE(ParseCalibration("", "CPU X; libjpeg-turbo 1", &untouched));
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    return ParseCalibration(t, "CPU X; libjpeg-turbo 1", &untouched);
  };
  CHECK_FALSE(edited("calibration 1", "calibration 2"));
  CHECK_FALSE(edited(absl::StrCat("disabled ", c.disabled_dct_scales), "disabled 0"));  // not the rule's
  CHECK_FALSE(edited("scale 2 ", "scale 4 "));  // out of order
  CHECK_FALSE(edited("scale 8 1.75", "scale 8 -1.75"));
  CHECK_FALSE(edited("scale 8 1.75", "scale 8 nan"));
  CHECK_FALSE(edited("scale 1 1.25 5", "scale 1 1.25 5 7"));  // trailing field
  CHECK(untouched.costs.empty());
  CHECK(CalibrationMachine().find("libjpeg-turbo") != std::string::npos);
}

}  // namespace
}  // namespace stoker::image
