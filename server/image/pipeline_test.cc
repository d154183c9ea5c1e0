#include "server/image/pipeline.h"
#include "server/image/pipeline_test_util.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "server/image/ops/ops.h"
#include "server/image/ops/rng.h"
#include "testing/test_jpeg.h"
#include "testing/test_params.h"
#include "server/image/ops/transform.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using testing::DecodeParams;
using testing::DecodeRgb;
using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::EvalParams;
using testing::MakePhoto;
using testing::MeanAbsDiff;
using testing::MultiViewParams;
using testing::RegionSteps;
using testing::TrainParams;

// README's fidelity promise: mean absolute error (uint8 levels) against
// Pillow's full decode + resize, DCT scaling or not.
constexpr double kPromisedMae = 1.0;


TEST_CASE("Decode equals libjpeg's own output for every coding", "[pipeline][decode]") {
  SampleProcessor proc;
  struct Coding {
    int channels, subsampling;
    bool progressive, arithmetic;
    int restart_rows;
  };
  const std::vector<Coding> codings = {
      {3, 420, false, false, 0}, {3, 422, false, false, 0}, {3, 444, false, false, 0},
      {3, 440, false, false, 0}, {3, 420, true, false, 0},  {3, 420, false, true, 0},
      {3, 420, false, false, 2}, {1, 444, false, false, 0}, {1, 444, true, false, 0},
  };
  for (const Coding& c : codings) {
    for (auto [h, w] : {std::pair{61u, 83u}, std::pair{200u, 150u}}) {
      EncodeOptions o;
      o.subsampling = c.subsampling;
      o.progressive = c.progressive;
      o.arithmetic = c.arithmetic;
      o.restart_rows = c.restart_rows;
      const std::vector<uint8_t> jpeg =
          EncodeJpeg(MakePhoto(h, w, c.channels, h), h, w, c.channels, o);
      uint32_t rh, rw, gh, gw;
      int channels;
      const std::vector<uint8_t> want = testing::ReferenceDecode(jpeg, &rh, &rw, &channels);
      const std::vector<uint8_t> got = DecodeRgb(proc, jpeg, &gh, &gw);
      CAPTURE(c.channels, c.subsampling, c.progressive, c.arithmetic, c.restart_rows, h, w);
      REQUIRE(gh == h);
      REQUIRE(gw == w);
      REQUIRE(channels == 3);
      CHECK(got == want);
    }
  }
}

TEST_CASE("CMYK and YCCK decode to RGB", "[pipeline][decode]") {
  SampleProcessor proc;
  for (bool ycck : {false, true}) {
    EncodeOptions o;
    o.cmyk_as_ycck = ycck;
    const uint32_t h = 40, w = 56;
    const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 4, 3), h, w, 4, o);
    uint32_t rh, rw, gh, gw;
    int channels;
    const std::vector<uint8_t> cmyk = testing::ReferenceDecode(jpeg, &rh, &rw, &channels);
    REQUIRE(channels == 4);
    std::vector<uint8_t> want(size_t{h} * w * 3);
    CmykRowToRgb(cmyk.data(), h * w, want.data());
    CHECK(DecodeRgb(proc, jpeg, &gh, &gw) == want);
    // The resampling paths take CMYK too.
    PipelineParams p = TrainParams(16, 16);
    std::vector<uint8_t> out(MaxSampleBytes(p));
    SampleResult r;
    CHECK(proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), &r).ok());
  }
}

TEST_CASE("Decode leaves the EXIF orientation alone unless apply_exif", "[pipeline][exif]") {
  SampleProcessor proc;
  const uint32_t h = 30, w = 50;
  EncodeOptions o;
  o.subsampling = 444;
  o.app1 = testing::ExifApp1(6, false);  // rotate 90 degrees clockwise
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 4), h, w, 3, o);
  o.app1.clear();
  const std::vector<uint8_t> untagged = EncodeJpeg(MakePhoto(h, w, 3, 4), h, w, 3, o);
  uint32_t rh, rw, oh, ow, uh, uw;
  // The default, as torchvision's ImageFolder (PIL's open + convert): as coded.
  const std::vector<uint8_t> raw = DecodeRgb(proc, jpeg, &rh, &rw);
  CHECK(raw == DecodeRgb(proc, untagged, &uh, &uw));
  const std::vector<uint8_t> rotated = DecodeRgb(proc, jpeg, &oh, &ow, /*apply_exif=*/true);
  REQUIRE(rh == h);
  REQUIRE(rw == w);
  REQUIRE(oh == w);
  REQUIRE(ow == h);
  for (uint32_t y = 0; y < oh; ++y) {
    for (uint32_t x = 0; x < ow; ++x) {
      // Oriented (y, x) shows raw (h - 1 - x, y).
      REQUIRE(std::memcmp(&rotated[(y * ow + x) * 3], &raw[((h - 1 - x) * w + y) * 3], 3) == 0);
    }
  }
}

struct RegionCheck {
  double mae;
  int worst;
};

// A forced RandomResizedCrop (+ flip) against the double reference on the
// decode pipeline's image.
RegionCheck CheckRegion(SampleProcessor& proc, const std::vector<uint8_t>& jpeg,
                        const PipelineParams& base, const CropBox& box, bool flip) {
  uint32_t ih, iw;
  const std::vector<uint8_t> img = DecodeRgb(proc, jpeg, &ih, &iw, base.apply_exif != 0);
  PipelineParams p = base;
  std::vector<uint8_t> out(MaxSampleBytes(p));
  SampleResult r;
  const absl::Status s = proc.ProcessSteps(jpeg.data(), jpeg.size(), p, RegionSteps(p, box, flip),
                                           out.data(), out.size(), &r);
  REQUIRE(s.ok());
  REQUIRE(r.height == p.out_height);
  REQUIRE(r.width == p.out_width);
  std::vector<uint8_t> want =
      testing::ReferenceResample(img, iw, testing::RefCrop(box.top, box.height, p.out_height),
                                 testing::RefCrop(box.left, box.width, p.out_width),
                                 p.ops[0].interpolation == Interpolation::kAntialias);
  if (flip) {
    std::vector<uint8_t> flipped(want.size());
    for (uint32_t y = 0; y < p.out_height; ++y) {
      for (uint32_t x = 0; x < p.out_width; ++x) {
        std::memcpy(&flipped[(y * p.out_width + x) * 3],
                    &want[(y * p.out_width + (p.out_width - 1 - x)) * 3], 3);
      }
    }
    want = flipped;
  }
  RegionCheck c;
  c.mae = MeanAbsDiff(out.data(), want.data(), want.size(), &c.worst);
  return c;
}

TEST_CASE("Train regions match the reference (exact and DCT-scaled)", "[pipeline][train]") {
  SampleProcessor proc;
  KeyedRng rng(21);
  for (int orientation : {1, 6, 3}) {
    for (int sub : {420, 444, 422}) {
      const uint32_t h = 375, w = 500;
      EncodeOptions o;
      o.subsampling = sub;
      if (orientation != 1) o.app1 = testing::ExifApp1(orientation, true);
      const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, sub), h, w, 3, o);
      const uint32_t oh = orientation >= 5 ? w : h, ow = orientation >= 5 ? h : w;
      for (int i = 0; i < 6; ++i) {
        CropBox box;
        box.height = static_cast<uint32_t>(1 + rng.Below(oh));
        box.width = static_cast<uint32_t>(1 + rng.Below(ow));
        box.top = static_cast<uint32_t>(rng.Below(oh - box.height + 1));
        box.left = static_cast<uint32_t>(rng.Below(ow - box.width + 1));
        const bool flip = i % 2 == 1;
        PipelineParams p = TrainParams(64, 48);
        p.exact_decode = 1;
        p.apply_exif = 1;  // the box is in displayed coordinates
        CAPTURE(orientation, sub, box.top, box.left, box.height, box.width, flip);
        RegionCheck exact = CheckRegion(proc, jpeg, p, box, flip);
        CHECK(exact.worst <= 1);
        CHECK(exact.mae < 0.3);
        p.exact_decode = 0;
        RegionCheck scaled = CheckRegion(proc, jpeg, p, box, flip);
        CHECK(scaled.mae < kPromisedMae);
        p.ops[0].interpolation = Interpolation::kBilinear;
        p.exact_decode = 1;
        RegionCheck bilinear = CheckRegion(proc, jpeg, p, box, flip);
        CHECK(bilinear.worst <= 1);
      }
    }
  }
}

TEST_CASE("Train is keyed: same key same pixels, other keys differ", "[pipeline][train]") {
  SampleProcessor a, b;
  const uint32_t h = 240, w = 320;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 8), h, w, 3, {});
  PipelineParams p = TrainParams(32, 32);
  auto run = [&](SampleProcessor& proc, SampleKey key) {
    std::vector<uint8_t> out(MaxSampleBytes(p));
    SampleResult r;
    REQUIRE(proc.Process(jpeg.data(), jpeg.size(), p, key, out.data(), out.size(), &r).ok());
    CHECK(r.bytes == out.size());
    return out;
  };
  const SampleKey k1{1, 2, 3};
  CHECK(run(a, k1) == run(b, k1));
  CHECK(run(a, k1) != run(a, SampleKey{1, 2, 4}));
  CHECK(run(a, k1) != run(a, SampleKey{1, 3, 3}));
  CHECK(run(a, k1) != run(a, SampleKey{2, 2, 3}));
}

TEST_CASE("Eval matches Resize + CenterCrop on the reference", "[pipeline][eval]") {
  SampleProcessor proc;
  for (auto [h, w] : {std::pair{375u, 500u}, std::pair{683u, 1024u}, std::pair{300u, 200u}}) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, w), h, w, 3, {});
    uint32_t ih, iw;
    const std::vector<uint8_t> img = DecodeRgb(proc, jpeg, &ih, &iw);
    for (uint32_t exact : {1u, 0u}) {
      PipelineParams p = EvalParams();
      p.exact_decode = exact;
      uint32_t rh, rw;
      ResizeOutputSize(h, w, p.ops[0], &rh, &rw);
      const auto top = static_cast<int32_t>(CenterCropOffset(rh, 224));
      const auto left = static_cast<int32_t>(CenterCropOffset(rw, 224));
      testing::RefAxis ay, ax;
      ay.len = h, ay.scale = double(h) / rh, ay.offset = top, ay.out = 224;
      ax.len = w, ax.scale = double(w) / rw, ax.offset = left, ax.out = 224;
      const std::vector<uint8_t> want = testing::ReferenceResample(img, w, ay, ax, true);
      std::vector<uint8_t> out(MaxSampleBytes(p));
      SampleResult r;
      REQUIRE(proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), &r).ok());
      int worst = 0;
      const double mae = MeanAbsDiff(out.data(), want.data(), want.size(), &worst);
      CAPTURE(h, w, exact, mae, worst);
      CHECK(mae < (exact ? 0.3 : kPromisedMae));
      if (exact) CHECK(worst <= 2);
    }
  }
}

TEST_CASE("Float outputs are the normalized uint8 sample", "[pipeline]") {
  SampleProcessor proc;
  const uint32_t h = 120, w = 90;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 2), h, w, 3, {});
  PipelineParams p = TrainParams(20, 30);
  std::vector<uint8_t> u8(MaxSampleBytes(p));
  SampleResult r;
  REQUIRE(proc.Process(jpeg.data(), jpeg.size(), p, {5, 0, 1}, u8.data(), u8.size(), &r).ok());
  p.dtype = ring::kFloat32;
  p.layout = ring::kNCHW;
  std::vector<float> f32(MaxSampleBytes(p) / 4);
  REQUIRE(
      proc.Process(jpeg.data(), jpeg.size(), p, {5, 0, 1}, f32.data(), f32.size() * 4, &r).ok());
  CHECK(r.bytes == 20 * 30 * 3 * 4);
  for (uint32_t y = 0; y < 20; ++y) {
    for (uint32_t x = 0; x < 30; ++x) {
      for (int c = 0; c < 3; ++c) {
        const float want = (u8[(y * 30 + x) * 3 + c] / 255.0f - p.mean[c]) / p.stdev[c];
        REQUIRE(f32[(c * 20 + y) * 30 + x] == want);
      }
    }
  }
}

TEST_CASE("Shape and capacity errors", "[pipeline]") {
  SampleProcessor proc;
  const uint32_t h = 48, w = 64;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 2), h, w, 3, {});
  PipelineParams p = DecodeParams();
  p.out_height = 48;
  p.out_width = 60;
  std::vector<uint8_t> out(64 * 48 * 3);
  SampleResult r;
  absl::Status s = proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("image is 64x48"));
  p.out_width = 64;
  CHECK(proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), &r).ok());
  p = DecodeParams();
  s = proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size() - 1, &r);
  CHECK_FALSE(s.ok());
  PipelineParams t = TrainParams();
  s = proc.Process(jpeg.data(), jpeg.size(), t, {}, out.data(), 100, &r);
  CHECK_FALSE(s.ok());
  CropBox outside{40, 0, 10, 10};
  s = proc.ProcessSteps(jpeg.data(), jpeg.size(), t, RegionSteps(t, outside, false), out.data(),
                        out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Hostile inputs fail the sample, never the process", "[pipeline][hostile]") {
  SampleProcessor proc;
  const uint32_t h = 256, w = 256;
  const std::vector<uint8_t> good = EncodeJpeg(MakePhoto(h, w, 3, 1), h, w, 3, {});
  std::vector<std::vector<uint8_t>> inputs = {
      {}, {0xFF}, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, {'h', 'e', 'l', 'l', 'o'}};
  KeyedRng rng(31);
  for (int i = 0; i < 50; ++i) {
    std::vector<uint8_t> junk(1 + rng.Below(3000));
    for (auto& b : junk) b = rng.Next() & 0xff;
    inputs.push_back(junk);
  }
  for (size_t n = 2; n < good.size(); n += 97) {
    inputs.emplace_back(good.begin(), good.begin() + n);
  }
  std::vector<uint8_t> huge = good;
  for (size_t i = 0; i + 9 < huge.size(); ++i) {
    if (huge[i] == 0xFF && huge[i + 1] == 0xC0) {
      huge[i + 5] = huge[i + 7] = 0xFF;
      huge[i + 6] = huge[i + 8] = 0xDC;
      break;
    }
  }
  inputs.push_back(huge);
  std::vector<PipelineParams> params = {TrainParams(), EvalParams(), DecodeParams()};
  for (const PipelineParams& p : params) {
    std::vector<uint8_t> out(MaxSampleBytes(p));
    for (const auto& in : inputs) {
      SampleResult r;
      const absl::Status s =
          proc.Process(in.data(), in.size(), p, {1, 0, 0}, out.data(), out.size(), &r);
      CAPTURE(in.size(), p.op_count);
      CHECK_FALSE(s.ok());
      CHECK_FALSE(s.message().empty());
    }
    SampleResult r;
    SampleKey key{1, 0, 0};
    CHECK(proc.Process(good.data(), good.size(), p, key, out.data(), out.size(), &r).ok());
  }
  // A crop of the top rows of a file cut in half still fails: the decoder
  // stops early, then finds no EOI.
  const std::vector<uint8_t> half(good.begin(), good.begin() + good.size() / 2);
  PipelineParams t = TrainParams(16, 16);
  std::vector<uint8_t> out(MaxSampleBytes(t));
  SampleResult r;
  const SampleSteps top_rows = RegionSteps(t, CropBox{0, 0, 32, 32}, false);
  const absl::Status s =
      proc.ProcessSteps(half.data(), half.size(), t, top_rows, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("truncated"));
  CHECK(proc.ProcessSteps(good.data(), good.size(), t, top_rows, out.data(), out.size(), &r).ok());
}

TEST_CASE("Corrupted files through every pipeline never crash", "[pipeline][hostile]") {
  SampleProcessor proc;
  const uint32_t h = 200, w = 264;
  EncodeOptions prog;
  prog.progressive = true;
  EncodeOptions restart;
  restart.restart_rows = 1;
  restart.subsampling = 422;
  std::vector<PipelineParams> params = {TrainParams(64, 64), EvalParams(), DecodeParams()};
  for (const EncodeOptions& o : {EncodeOptions{}, prog, restart}) {
    const std::vector<uint8_t> good = EncodeJpeg(MakePhoto(h, w, 3, 6), h, w, 3, o);
    KeyedRng rng(41);
    for (int i = 0; i < 150; ++i) {
      std::vector<uint8_t> bad = good;
      const int edits = 1 + static_cast<int>(rng.Below(6));
      for (int k = 0; k < edits; ++k) bad[rng.Below(bad.size())] = rng.Next() & 0xff;
      for (const PipelineParams& p : params) {
        std::vector<uint8_t> out(MaxSampleBytes(p));
        SampleResult r;
        const absl::Status s =
            proc.Process(bad.data(), bad.size(), p, {3, 1, static_cast<uint64_t>(i)}, out.data(),
                         out.size(), &r);
        if (s.ok()) CHECK(r.bytes <= out.size());
      }
    }
  }
}

}  // namespace
TEST_CASE("ProcessViews: one decode, each view its own pipeline on the whole image",
          "[pipeline][views]") {
  SampleProcessor proc;
  for (const bool progressive : {false, true}) {
    for (const uint32_t dtype : {ring::kUint8, ring::kFloat32}) {
      EncodeOptions o;
      o.progressive = progressive;
      const uint32_t h = 300, w = 400;
      const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 7), h, w, 3, o);
      PipelineParams p = MultiViewParams();
      p.dtype = dtype;
      p.layout = dtype == ring::kUint8 ? ring::kNHWC : ring::kNCHW;
      REQUIRE(ValidateParams(p).ok());
      REQUIRE(OutputCount(p) == 5);
      std::vector<std::vector<uint8_t>> outs(5);
      void* ptrs[5];
      size_t caps[5];
      for (uint32_t k = 0; k < 5; ++k) {
        PipelineParams view;
        ViewPipeline(p, ViewOfOutput(p, k), &view);
        outs[k].assign(MaxSampleBytes(view), 0);
        ptrs[k] = outs[k].data();
        caps[k] = outs[k].size();
      }
      const SampleKey key{42, 3, 17, 0};
      SampleResult r;
      SampleSteps drawn[5];
      const absl::Status s = proc.ProcessViews(jpeg.data(), jpeg.size(), p, key, ptrs, caps, &r, drawn);
      CAPTURE(progressive, dtype);
      REQUIRE(s.ok());
      CHECK(r.height == 64);
      CHECK(r.width == 64);
      CHECK(r.bytes == (2 * 64 * 64 + 3 * 32 * 32) * 3 * ring::DTypeBytes(dtype));
      CHECK(r.decode_path == DecodePath::kWhole);
      CHECK(r.dct_scale == 8);
      for (uint32_t k = 0; k < 5; ++k) {
        CAPTURE(k);
        PipelineParams view;
        ViewPipeline(p, ViewOfOutput(p, k), &view);
        // Its steps are the view pipeline's own draw with the output's key.
        SampleKey view_key = key;
        view_key.output = k;
        SampleSteps want;
        REQUIRE(DrawSteps(view, h, w, view_key, &want).ok());
        REQUIRE(drawn[k].count == want.count);
        for (uint32_t i = 0; i < want.count; ++i) {
          CHECK(drawn[k].steps[i].kind == want.steps[i].kind);
          CHECK(drawn[k].steps[i].top == want.steps[i].top);
          CHECK(drawn[k].steps[i].left == want.steps[i].left);
          CHECK(drawn[k].steps[i].height == want.steps[i].height);
          CHECK(drawn[k].steps[i].width == want.steps[i].width);
          CHECK(drawn[k].steps[i].factor[0] == want.steps[i].factor[0]);
          CHECK(drawn[k].steps[i].sigma == want.steps[i].sigma);
        }
        // Its pixels are those steps run on the full-scale decode (the
        // exact decode of a single-output pipeline: no DCT scaling).
        view.exact_decode = 1;
        std::vector<uint8_t> ref(MaxSampleBytes(view));
        SampleResult rr;
        REQUIRE(proc.ProcessSteps(jpeg.data(), jpeg.size(), view, want, ref.data(), ref.size(), &rr)
                    .ok());
        CHECK(outs[k] == ref);
      }
      // Copies of a view are drawn anew.
      CHECK(outs[0] != outs[1]);
      CHECK(outs[2] != outs[3]);
      // Output 0 draws as a single-output pipeline of its view would.
      PipelineParams first;
      ViewPipeline(p, 0, &first);
      SampleSteps single;
      REQUIRE(DrawSteps(first, h, w, key, &single).ok());
      CHECK(single.steps[0].top == drawn[0].steps[0].top);
      CHECK(single.steps[0].left == drawn[0].steps[0].left);
      CHECK(single.steps[0].height == drawn[0].steps[0].height);
    }
  }
}

TEST_CASE("ProcessViews: refusals and failures", "[pipeline][views]") {
  SampleProcessor proc;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(120, 90, 3, 1), 120, 90, 3, {});
  PipelineParams p = MultiViewParams();
  std::vector<uint8_t> buf(5 * 64 * 64 * 3);
  void* ptrs[5];
  size_t caps[5];
  for (int k = 0; k < 5; ++k) ptrs[k] = buf.data() + k * 64 * 64 * 3, caps[k] = 64 * 64 * 3;
  SampleResult r;
  // Process runs one output only.
  absl::Status s = proc.Process(jpeg.data(), jpeg.size(), p, {}, buf.data(), buf.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Matchers::Contains("ProcessViews"));
  // A single-output pipeline is not ProcessViews'.
  const PipelineParams train = TrainParams(64, 64);
  CHECK(proc.ProcessViews(jpeg.data(), jpeg.size(), train, {}, ptrs, caps, &r).code() ==
        absl::StatusCode::kInvalidArgument);
  // A room too small for its view fails the sample.
  caps[3] = 100;
  CHECK(proc.ProcessViews(jpeg.data(), jpeg.size(), p, {}, ptrs, caps, &r).code() ==
        absl::StatusCode::kInvalidArgument);
  caps[3] = 64 * 64 * 3;
  // A truncated file fails as any sample does; then the next one works.
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 3);
  CHECK_FALSE(proc.ProcessViews(cut.data(), cut.size(), p, {}, ptrs, caps, &r).ok());
  CHECK(r.bytes == 0);
  CHECK(proc.ProcessViews(jpeg.data(), jpeg.size(), p, {}, ptrs, caps, &r).ok());
  // Over max_decode_pixels: refused before the decode.
  p.max_decode_pixels = 64 * 64;
  CHECK(proc.ProcessViews(jpeg.data(), jpeg.size(), p, {}, ptrs, caps, &r).code() ==
        absl::StatusCode::kResourceExhausted);
}

}  // namespace stoker::image
