#include "server/image/pipeline.h"

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
using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::EvalParams;
using testing::MakePhoto;
using testing::MeanAbsDiff;
using testing::RegionSteps;
using testing::TrainParams;

// README's fidelity promise: mean absolute error (uint8 levels) against
// Pillow's full decode + resize, DCT scaling or not.
constexpr double kPromisedMae = 1.0;

// The decode pipeline's output (must succeed).
std::vector<uint8_t> DecodeRgb(SampleProcessor& proc, const std::vector<uint8_t>& jpeg, uint32_t* h,
                               uint32_t* w, bool apply_exif = false) {
  PipelineParams p = DecodeParams();
  p.apply_exif = apply_exif;
  std::vector<uint8_t> out(MaxSampleBytes(p));
  SampleResult r;
  const absl::Status s = proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), &r);
  REQUIRE(s.ok());
  *h = r.height;
  *w = r.width;
  out.resize(r.bytes);
  return out;
}

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

// ---------------------------------------------------------------- op lists

OpParams Op(OpKind kind) {
  OpParams op;
  op.kind = kind;
  return op;
}

PipelineParams WithOps(std::initializer_list<OpParams> ops, uint32_t out_h = 0,
                       uint32_t out_w = 0) {
  PipelineParams p;
  for (const OpParams& op : ops) p.ops[p.op_count++] = op;
  p.out_height = out_h;
  p.out_width = out_w;
  testing::WithUint8Output(p).max_decode_pixels = 4 << 20;
  return p;
}

// DrawSteps for dataset index `index` (epoch 0) of a height x width image,
// which must succeed; `boxes` (XYXY, 4 floats a box) as DrawSteps reads them.
SampleSteps Drawn(const PipelineParams& p, uint32_t height, uint32_t width, uint64_t index,
                  const std::vector<float>& boxes = {}, uint64_t seed = 0) {
  SampleKey key;
  key.seed = seed;
  key.dataset_index = index;
  SampleSteps s;
  REQUIRE(DrawSteps(p, height, width, key, &s, boxes.empty() ? nullptr : boxes.data(),
                    static_cast<uint32_t>(boxes.size() / 4))
              .ok());
  return s;
}

TEST_CASE("DrawSteps: the train preset draws what ChooseTrainCrop and ChooseFlip do",
          "[pipeline][draw]") {
  const PipelineParams p = TrainParams();
  KeyedRng sizes(5);
  int flips = 0;
  for (uint64_t i = 0; i < 500; ++i) {
    const auto h = static_cast<uint32_t>(1 + sizes.Below(2000));
    const auto w = static_cast<uint32_t>(1 + sizes.Below(2000));
    SampleSteps steps;
    REQUIRE(DrawSteps(p, h, w, SampleKey{7, 3, i}, &steps).ok());
    KeyedRng rng(7, 3, i);
    const CropBox box = ChooseTrainCrop(h, w, p.ops[0], rng);
    const bool flip = ChooseFlip(p.ops[1].p, rng);
    REQUIRE(steps.count == (flip ? 3u : 2u));
    const Step& c = steps.steps[0];
    CHECK((c.kind == StepKind::kCrop && c.top == box.top && c.left == box.left &&
           c.height == box.height && c.width == box.width && c.op == 0));
    CHECK((steps.steps[1].kind == StepKind::kResize && steps.steps[1].height == 224 &&
           steps.steps[1].width == 224));
    if (flip) CHECK((steps.steps[2].kind == StepKind::kHorizontalFlip && steps.steps[2].op == 1));
    flips += flip;
  }
  CHECK(flips > 200);
  CHECK(flips < 300);
}

TEST_CASE("DrawSteps: Resize and CenterCrop follow torchvision's sizes", "[pipeline][draw]") {
  SampleSteps s;
  OpParams resize = Op(OpKind::kResize);
  resize.height = 100;
  resize.max_size = 150;  // 100 x 200 would be too long: 75 x 150
  REQUIRE(DrawSteps(WithOps({resize}), 300, 600, {}, &s).ok());
  REQUIRE(s.count == 1);
  CHECK((s.steps[0].height == 75 && s.steps[0].width == 150));
  resize.max_size = 0;
  REQUIRE(DrawSteps(WithOps({resize}), 333, 500, {}, &s).ok());
  CHECK((s.steps[0].height == 100 && s.steps[0].width == 150));  // int(100 * 500 / 333)
  REQUIRE(DrawSteps(WithOps({resize}), 100, 77, {}, &s).ok());
  CHECK((s.steps[0].height == 129 && s.steps[0].width == 100));  // int(100 * 100 / 77)
  REQUIRE(DrawSteps(WithOps({resize}), 100, 150, {}, &s).ok());
  CHECK(s.count == 0);  // already that size: torchvision returns the image
  resize.width = 30;
  REQUIRE(DrawSteps(WithOps({resize}), 100, 150, {}, &s).ok());
  CHECK((s.count == 1 && s.steps[0].height == 100 && s.steps[0].width == 30));

  OpParams center = Op(OpKind::kCenterCrop);
  center.height = 13, center.width = 12;
  REQUIRE(DrawSteps(WithOps({center}), 10, 7, {}, &s).ok());
  REQUIRE(s.count == 1);  // padded to exactly the crop: no crop
  const Step& pad = s.steps[0];
  CHECK((pad.kind == StepKind::kPad && pad.padding_mode == PadMode::kConstant));
  CHECK((pad.pad[0] == 2 && pad.pad[1] == 1 && pad.pad[2] == 3 && pad.pad[3] == 2));
  CHECK((pad.fill[0] == 0 && pad.fill[1] == 0 && pad.fill[2] == 0));
  center.width = 4;
  REQUIRE(DrawSteps(WithOps({center}), 10, 7, {}, &s).ok());
  REQUIRE(s.count == 2);
  CHECK((s.steps[0].pad[0] == 0 && s.steps[0].pad[1] == 1 && s.steps[0].pad[3] == 2));
  CHECK((s.steps[1].kind == StepKind::kCrop && s.steps[1].top == 0 && s.steps[1].left == 2));
  center.height = 5, center.width = 3;
  REQUIRE(DrawSteps(WithOps({center}), 10, 8, {}, &s).ok());
  REQUIRE(s.count == 1);
  CHECK((s.steps[0].top == 2 && s.steps[0].left == 2));  // round(2.5) = 2, round(2.5) = 2
}

TEST_CASE("DrawSteps: RandomResize draws the shorter side from min_size up to max_size, excluded",
          "[pipeline][draw]") {
  OpParams rr = Op(OpKind::kRandomResize);
  rr.resize_range[0] = 10, rr.resize_range[1] = 14;
  rr.interpolation = Interpolation::kAntialias;
  std::set<uint32_t> sides;
  for (uint64_t index = 0; index < 400; ++index) {
    const SampleSteps s = Drawn(WithOps({rr}), 40, 60, index);
    // 40 x 60 to shorter side v: v x int(v * 60 / 40); 40 itself is never drawn.
    REQUIRE(s.count == 1);
    CHECK(s.steps[0].kind == StepKind::kResize);
    CHECK(s.steps[0].width == s.steps[0].height * 60 / 40);
    sides.insert(s.steps[0].height);
    const SampleSteps again = Drawn(WithOps({rr}), 40, 60, index);
    CHECK(again.steps[0].height == s.steps[0].height);  // keyed
  }
  CHECK(sides == std::set<uint32_t>{10, 11, 12, 13});  // max_size excluded, as v2's
  rr.resize_range[1] = 10;
  CHECK_FALSE(ValidateParams(WithOps({rr})).ok());
}

TEST_CASE("DrawSteps: RandomIoUCrop crops around the boxes, RandomZoomOut pads within its range",
          "[pipeline][draw]") {
  OpParams iou = Op(OpKind::kRandomIoUCrop);
  iou.iou_scale[0] = 0.3f, iou.iou_scale[1] = 1;
  iou.iou_aspect[0] = 0.5f, iou.iou_aspect[1] = 2;
  const float options[] = {0, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, 1};
  iou.iou_option_count = 7;
  std::copy(std::begin(options), std::end(options), iou.iou_options);
  iou.iou_trials = 40;
  REQUIRE(ValidateParams(WithOps({iou})).ok());
  const std::vector<float> boxes = {10, 10, 40, 30, 60, 50, 90, 95, 5, 70, 20, 78};
  int crops = 0;
  for (uint64_t index = 0; index < 300; ++index) {
    const SampleSteps s = Drawn(WithOps({iou}), 100, 120, index, boxes);
    if (s.count == 0) continue;  // option 1: as it is
    REQUIRE(s.count == 1);
    const Step& c = s.steps[0];
    CHECK((c.kind == StepKind::kCrop && c.box_centers == 1));
    ++crops;
    double best = 0;
    bool any = false;
    for (size_t k = 0; k < boxes.size(); k += 4) {
      const double cx = (boxes[k] + boxes[k + 2]) / 2, cy = (boxes[k + 1] + boxes[k + 3]) / 2;
      const double l = c.left, t = c.top, r = l + c.width, b = t + c.height;
      if (!(l < cx && cx < r && t < cy && cy < b)) continue;
      any = true;
      const double iw = std::max(0.0, std::min<double>(boxes[k + 2], r) - std::max<double>(boxes[k], l));
      const double ih =
          std::max(0.0, std::min<double>(boxes[k + 3], b) - std::max<double>(boxes[k + 1], t));
      const double area = double{boxes[k + 2] - boxes[k]} * (boxes[k + 3] - boxes[k + 1]);
      best = std::max(best, iw * ih / (area + (r - l) * (b - t) - iw * ih));
    }
    CHECK(any);                       // a box's center lies inside
    CHECK(best >= c.min_iou - 1e-9);  // and one of those reaches the option's IoU
    CHECK(c.width >= 36);             // int(120 * 0.3)
    CHECK(c.height >= 30);
  }
  CHECK(crops > 150);
  // Without boxes the search finds nothing: the image stays as it is.
  for (uint64_t index = 0; index < 20; ++index) {
    CHECK(Drawn(WithOps({iou}), 100, 120, index).count == 0);
  }

  OpParams zoom = Op(OpKind::kRandomZoomOut);
  zoom.p = 1;
  zoom.side_range[0] = 1.5f, zoom.side_range[1] = 2;
  zoom.fill[0] = 9;
  for (uint64_t index = 0; index < 100; ++index) {
    const SampleSteps s = Drawn(WithOps({zoom}), 100, 120, index);
    REQUIRE(s.count == 1);
    const Step& pad = s.steps[0];
    const uint32_t cw = 120 + pad.pad[0] + pad.pad[2], ch = 100 + pad.pad[1] + pad.pad[3];
    CHECK((cw >= 180 && cw <= 240 && ch >= 150 && ch <= 200));
    CHECK((pad.fill[0] == 9 && pad.padding_mode == PadMode::kConstant));
  }
}

// RandomShortestSize(min_size=sizes, max_size), antialiased.
OpParams ShortestSize(std::initializer_list<uint32_t> sizes, uint32_t max_size) {
  OpParams rs = Op(OpKind::kRandomShortestSize);
  for (uint32_t v : sizes) rs.shortest[rs.shortest_count++] = v;
  rs.max_size = max_size;
  rs.interpolation = Interpolation::kAntialias;
  return rs;
}

TEST_CASE("MaxOutputPixels bounds every output the ops can make", "[pipeline][draw]") {
  // The detection reference's multi-scale recipe: the shorter side one of
  // 480..800, the longer at most 1333.
  const OpParams rs = ShortestSize({480, 640, 800}, 1333);
  OpParams flip = Op(OpKind::kHorizontalFlip);
  flip.p = 0.5f;
  const PipelineParams ms = WithOps({rs, flip});
  REQUIRE(ValidateParams(ms).ok());
  CHECK(MaxOutputPixels(ms) == 800 * 1333);
  CHECK(MaxSampleBytes(ms) == 800 * 1333 * 3);
  // SSD's zoom out (up to 4x) and IoU crop, after a Resize(300, max_size 400).
  OpParams resize = Op(OpKind::kResize);
  resize.height = 300;
  resize.max_size = 400;
  resize.interpolation = Interpolation::kAntialias;
  OpParams zoom = Op(OpKind::kRandomZoomOut);
  zoom.p = 1;
  zoom.side_range[0] = 1, zoom.side_range[1] = 4;
  OpParams iou = Op(OpKind::kRandomIoUCrop);
  iou.iou_scale[0] = 0.3f, iou.iou_scale[1] = 1;
  iou.iou_aspect[0] = 0.5f, iou.iou_aspect[1] = 2;
  iou.iou_option_count = 1;
  iou.iou_options[0] = 2;  // >= 1: leave the image as it is
  iou.iou_trials = 40;
  const PipelineParams ssd = WithOps({resize, zoom, iou});
  REQUIRE(ValidateParams(ssd).ok());
  CHECK(MaxOutputPixels(ssd) == 300 * 400 * 16);
  // Unbounded sides (RandomResize; Resize(int) without max_size): the cap.
  OpParams rr = Op(OpKind::kRandomResize);
  rr.resize_range[0] = 100, rr.resize_range[1] = 200;
  rr.interpolation = Interpolation::kAntialias;
  CHECK(MaxOutputPixels(WithOps({rr})) == WithOps({rr}).max_decode_pixels);
  resize.max_size = 0;
  CHECK(MaxOutputPixels(WithOps({resize})) == WithOps({resize}).max_decode_pixels);
  // A crop after them fixes it again; a fixed shape is itself.
  OpParams crop = Op(OpKind::kCenterCrop);
  crop.height = 64, crop.width = 48;
  CHECK(MaxOutputPixels(WithOps({rr, crop})) == 64 * 48);
  CHECK(MaxOutputPixels(EvalParams()) == 224 * 224);

  // Every drawn output of every image shape stays within the bound.
  for (const PipelineParams* p : {&ms, &ssd}) {
    const uint64_t bound = MaxOutputPixels(*p);
    // (Sides whose scaled shorter side would round to 0 fail, as in torchvision.)
    for (uint32_t h : {7u, 299u, 300u, 480u, 1333u, 2000u}) {
      for (uint32_t w : {5u, 401u, 640u, 1334u, 1800u}) {
        for (uint64_t index = 0; index < 8; ++index) {
          const SampleSteps steps = Drawn(*p, h, w, index, {}, /*seed=*/5);
          uint32_t oh = 0, ow = 0;
          REQUIRE(CheckSteps(steps, h, w, p->max_decode_pixels, &oh, &ow).ok());
          INFO(w << "x" << h << " -> " << ow << "x" << oh);
          CHECK(uint64_t{oh} * ow <= bound);
        }
      }
    }
  }
}

TEST_CASE("DrawSteps: RandomShortestSize picks a size, caps the longer side", "[pipeline][draw]") {
  OpParams rs = ShortestSize({480, 512, 800}, 1000);
  REQUIRE(ValidateParams(WithOps({rs})).ok());
  std::set<uint32_t> heights;
  for (uint64_t index = 0; index < 200; ++index) {
    const SampleSteps s = Drawn(WithOps({rs}), 375, 500, index);
    REQUIRE(s.count == 1);
    heights.insert(s.steps[0].height);
    // torchvision: r = min(size / 375, 1000 / 500); sides int(side * r).
    const uint32_t h = s.steps[0].height, w = s.steps[0].width;
    const bool one_of = (h == 480 && w == 640) || (h == 512 && w == 682) ||
                        (h == 750 && w == 1000);  // 800 capped: r = 2
    CHECK(one_of);
  }
  CHECK(heights == std::set<uint32_t>{480, 512, 750});
  rs.shortest_count = 0;
  CHECK_FALSE(ValidateParams(WithOps({rs})).ok());
}

TEST_CASE("DrawSteps: RandomCrop pads, then draws its offsets", "[pipeline][draw]") {
  OpParams crop = Op(OpKind::kRandomCrop);
  crop.height = crop.width = 32;
  crop.padding[0] = crop.padding[1] = crop.padding[2] = crop.padding[3] = 4;
  crop.padding_mode = PadMode::kReflect;
  SampleSteps s;
  int tops[9] = {0};
  for (uint64_t i = 0; i < 900; ++i) {
    REQUIRE(DrawSteps(WithOps({crop}), 32, 32, SampleKey{1, 0, i}, &s).ok());
    REQUIRE(s.count == 2);
    CHECK((s.steps[0].kind == StepKind::kPad && s.steps[0].padding_mode == PadMode::kReflect));
    KeyedRng rng(1, 0, i);
    const auto top = static_cast<uint32_t>(rng.Below(9));
    const auto left = static_cast<uint32_t>(rng.Below(9));
    CHECK((s.steps[1].top == top && s.steps[1].left == left));
    ++tops[top];
  }
  for (int t : tops) CHECK(t > 60);
  // pad_if_needed pads both sides of the short axis by the whole shortfall.
  OpParams need = Op(OpKind::kRandomCrop);
  need.height = 20, need.width = 30;
  need.pad_if_needed = 1;
  REQUIRE(DrawSteps(WithOps({need}), 25, 24, {}, &s).ok());
  REQUIRE(s.count == 2);
  CHECK((s.steps[0].pad[0] == 6 && s.steps[0].pad[2] == 6 && s.steps[0].pad[1] == 0 &&
         s.steps[0].pad[3] == 0));
  // An image the crop's size takes no draw: the flip after it gets the first.
  OpParams flip = Op(OpKind::kHorizontalFlip);
  flip.p = 0.5f;
  int same = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    REQUIRE(DrawSteps(WithOps({crop, flip}), 24, 24, SampleKey{2, 0, i}, &s).ok());
    KeyedRng rng(2, 0, i);
    const bool flipped = s.steps[s.count - 1].kind == StepKind::kHorizontalFlip;
    same += flipped == ChooseFlip(0.5f, rng);
    CHECK(s.count == (flipped ? 2u : 1u));  // the pad, no crop
  }
  CHECK(same == 64);
  // Too small after padding: a failed sample, as torchvision raises.
  crop.padding[0] = crop.padding[1] = crop.padding[2] = crop.padding[3] = 0;
  const absl::Status st = DrawSteps(WithOps({crop}), 31, 40, {}, &s);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("RandomCrop"));
}

TEST_CASE("DrawSteps: ColorJitter's orders and factors", "[pipeline][draw]") {
  OpParams j = Op(OpKind::kColorJitter);
  j.jitter_set = 15;
  j.jitter[kBrightness][0] = 0.6f, j.jitter[kBrightness][1] = 1.4f;
  j.jitter[kContrast][0] = 0.0f, j.jitter[kContrast][1] = 2.0f;
  j.jitter[kSaturation][0] = 0.9f, j.jitter[kSaturation][1] = 1.1f;
  j.jitter[kHue][0] = -0.2f, j.jitter[kHue][1] = 0.2f;
  std::vector<int> orders(256, 0);
  SampleSteps s;
  for (uint64_t i = 0; i < 2400; ++i) {
    REQUIRE(DrawSteps(WithOps({j}), 8, 8, SampleKey{3, 1, i}, &s).ok());
    REQUIRE(s.count == 1);
    const Step& st = s.steps[0];
    REQUIRE(st.jitter_count == 4);
    uint32_t code = 0, seen = 0;
    for (uint32_t k = 0; k < 4; ++k) {
      code = code * 4 + st.jitter_order[k];
      seen |= 1u << st.jitter_order[k];
    }
    CHECK(seen == 15);
    ++orders[code];
    for (uint32_t a = 0; a < 4; ++a) {
      CHECK(st.factor[a] >= j.jitter[a][0]);
      CHECK(st.factor[a] <= j.jitter[a][1]);
    }
  }
  int distinct = 0;
  for (int n : orders) {
    if (n == 0) continue;
    ++distinct;
    CHECK(n > 50);  // 100 expected each
    CHECK(n < 150);
  }
  CHECK(distinct == 24);
  // Only the set adjustments run, in the drawn order.
  j.jitter_set = (1u << kContrast) | (1u << kHue);
  REQUIRE(DrawSteps(WithOps({j}), 8, 8, {}, &s).ok());
  REQUIRE(s.steps[0].jitter_count == 2);
  CHECK(s.steps[0].jitter_order[0] != s.steps[0].jitter_order[1]);
  for (uint32_t k = 0; k < 2; ++k) {
    CHECK((s.steps[0].jitter_order[k] == kContrast || s.steps[0].jitter_order[k] == kHue));
  }
}

// Runs `steps` on an image with the kernels of ops.h, one after the other
// (no resize): what the executor must give.
std::vector<uint8_t> ApplySteps(std::vector<uint8_t> img, uint32_t* h, uint32_t* w,
                                const SampleSteps& steps) {
  for (uint32_t i = 0; i < steps.count; ++i) {
    const Step& s = steps.steps[i];
    std::vector<uint8_t> out;
    switch (s.kind) {
      case StepKind::kCrop:
        out.resize(size_t{s.height} * s.width * 3);
        CropImage(img.data(), *w, CropBox{s.top, s.left, s.height, s.width}, out.data());
        *h = s.height, *w = s.width;
        img = out;
        break;
      case StepKind::kPad: {
        const uint32_t nh = *h + s.pad[1] + s.pad[3], nw = *w + s.pad[0] + s.pad[2];
        out.resize(size_t{nh} * nw * 3);
        PadImage(img.data(), *h, *w, s.pad, s.padding_mode, s.fill, out.data());
        *h = nh, *w = nw;
        img = out;
        break;
      }
      case StepKind::kHorizontalFlip:
        FlipHorizontal(img.data(), *h, *w);
        break;
      case StepKind::kVerticalFlip:
        FlipVertical(img.data(), *h, *w);
        break;
      case StepKind::kColorJitter:
        ColorJitter(img.data(), size_t{*h} * *w, s);
        break;
      case StepKind::kGrayscale:
        ToGrayscale(img.data(), size_t{*h} * *w);
        break;
      case StepKind::kGaussianBlur: {
        out.resize(img.size());
        std::vector<float> scratch(GaussianBlurScratch(*h, *w, s.kernel_x, s.kernel_y));
        GaussianBlur(img.data(), *h, *w, s.kernel_x, s.kernel_y, s.sigma, scratch.data(),
                     out.data());
        img = out;
        break;
      }
      case StepKind::kAffine:
      case StepKind::kRotate: {
        out.resize(img.size());
        double center[2] = {s.center[0], s.center[1]};
        if (s.tensor_kernels != 0) {  // F.affine / F.rotate on a tensor
          const bool rot = s.kind == StepKind::kRotate;
          double cf[2] = {0, 0};
          if (s.has_center != 0) cf[0] = center[0] - *w * 0.5, cf[1] = center[1] - *h * 0.5;
          const double t[2] = {rot ? 0.0 : s.translate[0], rot ? 0.0 : s.translate[1]};
          const double none[2] = {0, 0};
          double m[6];
          InverseAffineMatrix(cf, rot ? -double{s.angle} : s.angle, t, rot ? 1.0 : s.affine_scale,
                              rot ? none : s.shear, m);
          TensorAffine(img.data(), *h, *w, m, s.interpolation,
                       s.tensor_fill != 0 ? s.fill : nullptr, out.data());
        } else if (s.kind == StepKind::kRotate) {
          RotateImage(img.data(), *h, *w, s.angle, s.has_center != 0 ? center : nullptr,
                      s.interpolation, s.fill, out.data());
        } else {
          if (s.has_center == 0) center[0] = *w * 0.5, center[1] = *h * 0.5;
          const double t[2] = {static_cast<double>(s.translate[0]),
                               static_cast<double>(s.translate[1])};
          double m[6];
          InverseAffineMatrix(center, s.angle, t, s.affine_scale, s.shear, m);
          AffineTransform(img.data(), *h, *w, m, s.interpolation, s.fill, out.data());
        }
        img = out;
        break;
      }
      case StepKind::kPosterize:
        Posterize(img.data(), size_t{*h} * *w, s.bits);
        break;
      case StepKind::kSolarize:
        Solarize(img.data(), size_t{*h} * *w, s.threshold);
        break;
      case StepKind::kInvert:
        Invert(img.data(), size_t{*h} * *w);
        break;
      case StepKind::kAutocontrast:
        if (s.tensor_kernels != 0) {
          TensorAutocontrast(img.data(), size_t{*h} * *w);
        } else {
          Autocontrast(img.data(), size_t{*h} * *w);
        }
        break;
      case StepKind::kEqualize:
        Equalize(img.data(), size_t{*h} * *w);
        break;
      case StepKind::kSharpness: {
        std::vector<uint8_t> scratch(img.size());
        if (s.tensor_kernels != 0) {
          const double ratio = s.from_policy != 0 ? 1.0 + double{s.aug_magnitude} : s.factor[0];
          TensorAdjustSharpness(img.data(), *h, *w, ratio, scratch.data());
        } else {
          AdjustSharpness(img.data(), *h, *w, s.factor[0], scratch.data());
        }
        break;
      }
      case StepKind::kMixBegin: {
        // The mix as torchvision writes it: each chain from the original.
        const std::vector<uint8_t> start = img;
        std::vector<float> acc(img.size());
        MixStart(start.data(), size_t{*h} * *w, s.mix_weight, acc.data());
        uint32_t k = i + 1;
        while (steps.steps[k].kind == StepKind::kMixChain) {
          const float weight = steps.steps[k].mix_weight;
          SampleSteps chain;
          for (++k; steps.steps[k].kind != StepKind::kMixChain &&
                    steps.steps[k].kind != StepKind::kMixEnd;
               ++k) {
            chain.steps[chain.count++] = steps.steps[k];
          }
          uint32_t ch = *h, cw = *w;
          const std::vector<uint8_t> aug = ApplySteps(start, &ch, &cw, chain);
          MixAdd(aug.data(), size_t{*h} * *w, weight, acc.data());
        }
        MixFinish(acc.data(), size_t{*h} * *w, img.data());
        i = k;  // the kMixEnd
        break;
      }
      case StepKind::kErase:
        break;  // on the output: see EraseOnOutput
      default:
        FAIL("ApplySteps: no resize here");
    }
  }
  return img;
}

// The erase steps of `steps` on a uint8 NHWC output, as EraseOutput does.
void EraseOnOutput(std::vector<uint8_t>& out, uint32_t h, uint32_t w, const SampleSteps& steps) {
  for (uint32_t i = 0; i < steps.count; ++i) {
    if (steps.steps[i].kind == StepKind::kErase) {
      EraseOutput(out.data(), h, w, ring::kUint8, ring::kNHWC, steps.steps[i]);
    }
  }
}

TEST_CASE("Op lists run on the decoded image as their kernels do", "[pipeline][ops]") {
  SampleProcessor proc;
  OpParams crop = Op(OpKind::kRandomCrop);
  crop.height = 40, crop.width = 56;
  crop.padding[0] = 3, crop.padding[1] = 9, crop.padding[2] = 0, crop.padding[3] = 2;
  crop.pad_if_needed = 1;
  OpParams vflip = Op(OpKind::kVerticalFlip);
  vflip.p = 0.5f;
  OpParams hflip = Op(OpKind::kHorizontalFlip);
  hflip.p = 0.5f;
  OpParams jitter = Op(OpKind::kColorJitter);
  jitter.jitter_set = 15;
  for (uint32_t j = 0; j < 3; ++j) jitter.jitter[j][0] = 0.5f, jitter.jitter[j][1] = 1.5f;
  jitter.jitter[kHue][0] = -0.3f, jitter.jitter[kHue][1] = 0.3f;
  OpParams gray = Op(OpKind::kRandomGrayscale);
  gray.p = 0.5f;
  OpParams blur = Op(OpKind::kGaussianBlur);
  blur.kernel_x = 5, blur.kernel_y = 3;
  blur.sigma[0] = 0.1f, blur.sigma[1] = 2.0f;
  OpParams center = Op(OpKind::kCenterCrop);
  center.height = 30, center.width = 70;  // wider than the crop: pads
  const std::vector<PipelineParams> lists = {
      WithOps({crop, vflip, jitter, blur, hflip}, 40, 56),
      WithOps({hflip, gray, crop, jitter, vflip}, 40, 56),
      WithOps({crop, center, hflip, gray, vflip}, 30, 70),
      WithOps({blur, jitter, hflip, vflip}),
  };
  for (int orientation : {1, 6, 3}) {
    EncodeOptions o;
    o.subsampling = 444;
    if (orientation != 1) o.app1 = testing::ExifApp1(orientation, false);
    const uint32_t h = 37, w = 50;
    const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 9), h, w, 3, o);
    for (size_t l = 0; l < lists.size(); ++l) {
      PipelineParams p = lists[l];
      p.apply_exif = 1;
      uint32_t ih, iw;
      const std::vector<uint8_t> img = DecodeRgb(proc, jpeg, &ih, &iw, true);
      for (uint64_t i = 0; i < 12; ++i) {
        const SampleKey key{11, 0, i};
        SampleSteps steps;
        REQUIRE(DrawSteps(p, ih, iw, key, &steps).ok());
        uint32_t wh = ih, ww = iw;
        const std::vector<uint8_t> want = ApplySteps(img, &wh, &ww, steps);
        std::vector<uint8_t> out(p.out_height != 0 ? MaxSampleBytes(p) : want.size());
        SampleResult r;
        CAPTURE(orientation, l, i);
        REQUIRE(proc.Process(jpeg.data(), jpeg.size(), p, key, out.data(), out.size(), &r).ok());
        REQUIRE(r.height == wh);
        REQUIRE(r.width == ww);
        out.resize(r.bytes);
        CHECK(out == want);
        // The same steps forced give the same pixels.
        std::vector<uint8_t> forced(out.size());
        REQUIRE(
            proc.ProcessSteps(jpeg.data(), jpeg.size(), p, steps, forced.data(), forced.size(), &r)
                .ok());
        CHECK(forced == out);
      }
    }
  }
}

TEST_CASE("Flips and per-pixel steps after a fused resize equal running them on the image",
          "[pipeline][ops]") {
  SampleProcessor proc;
  const uint32_t h = 120, w = 160;
  EncodeOptions o;
  o.app1 = testing::ExifApp1(8, false);
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 4), h, w, 3, o);
  PipelineParams p = WithOps({}, 24, 20);
  p.apply_exif = 1;
  // The fused part alone, flips and per-pixel steps then run by hand.
  SampleSteps base;
  base.count = 3;
  base.steps[0].kind = StepKind::kCrop;
  base.steps[0].top = 7, base.steps[0].left = 5, base.steps[0].height = 100;
  base.steps[0].width = 90;
  base.steps[1].kind = StepKind::kResize;
  base.steps[1].height = 30, base.steps[1].width = 20;
  base.steps[2].kind = StepKind::kCrop;
  base.steps[2].top = 3, base.steps[2].height = 24, base.steps[2].width = 20;
  std::vector<uint8_t> fused(24 * 20 * 3);
  SampleResult r;
  REQUIRE(
      proc.ProcessSteps(jpeg.data(), jpeg.size(), p, base, fused.data(), fused.size(), &r).ok());
  SampleSteps tail;
  tail.count = 4;
  tail.steps[0].kind = StepKind::kHorizontalFlip;
  tail.steps[1].kind = StepKind::kColorJitter;
  tail.steps[1].jitter_count = 2;
  tail.steps[1].jitter_order[0] = kSaturation, tail.steps[1].jitter_order[1] = kHue;
  tail.steps[1].factor[kSaturation] = 1.7f, tail.steps[1].factor[kHue] = 0.21f;
  tail.steps[2].kind = StepKind::kVerticalFlip;
  tail.steps[3].kind = StepKind::kGrayscale;
  uint32_t th = 24, tw = 20;
  const std::vector<uint8_t> want = ApplySteps(fused, &th, &tw, tail);
  SampleSteps all = base;
  for (uint32_t i = 0; i < tail.count; ++i) all.steps[all.count++] = tail.steps[i];
  for (uint32_t dtype : {ring::kUint8, ring::kFloat32}) {
    p.dtype = dtype;
    std::vector<uint8_t> out(MaxSampleBytes(p));
    REQUIRE(proc.ProcessSteps(jpeg.data(), jpeg.size(), p, all, out.data(), out.size(), &r).ok());
    if (dtype == ring::kUint8) {
      CHECK(out == want);
    } else {
      std::vector<float> f(out.size() / 4);
      std::memcpy(f.data(), out.data(), out.size());
      for (size_t i = 0; i < want.size(); ++i) {
        REQUIRE(f[i] == (want[i] / 255.0f - p.mean[i % 3]) / p.stdev[i % 3]);
      }
    }
  }
}

TEST_CASE("A Resize after other steps resamples the image like Pillow", "[pipeline][ops]") {
  SampleProcessor proc;
  const uint32_t h = 150, w = 200;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 12), h, w, 3, {});
  uint32_t ih, iw;
  const std::vector<uint8_t> img = DecodeRgb(proc, jpeg, &ih, &iw);
  for (bool antialias : {true, false}) {
    // A pad of 0 rows keeps the crop from fusing: the resize runs on the image.
    SampleSteps s;
    s.count = 3;
    s.steps[0].kind = StepKind::kPad;
    s.steps[1].kind = StepKind::kVerticalFlip;
    s.steps[2].kind = StepKind::kResize;
    s.steps[2].height = 45, s.steps[2].width = 77;
    s.steps[2].interpolation = antialias ? Interpolation::kAntialias : Interpolation::kBilinear;
    PipelineParams p = WithOps({}, 45, 77);
    std::vector<uint8_t> out(MaxSampleBytes(p));
    SampleResult r;
    REQUIRE(proc.ProcessSteps(jpeg.data(), jpeg.size(), p, s, out.data(), out.size(), &r).ok());
    std::vector<uint8_t> flipped = img;
    FlipVertical(flipped.data(), ih, iw);
    const std::vector<uint8_t> want = testing::ReferenceResample(
        flipped, iw, testing::RefCrop(0, ih, 45), testing::RefCrop(0, iw, 77), antialias);
    int worst = 0;
    const double mae = MeanAbsDiff(out.data(), want.data(), want.size(), &worst);
    CAPTURE(antialias, mae, worst);
    CHECK(worst <= 1);
    CHECK(mae < 0.3);
  }
}

TEST_CASE("Op lists fail a sample, not the process: shape, caps, steps", "[pipeline][ops]") {
  SampleProcessor proc;
  const uint32_t h = 240, w = 320;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 2), h, w, 3, {});
  std::vector<uint8_t> out(4 << 20);
  SampleResult r;
  // A size that varies, with a fixed output shape: fails naming both.
  OpParams resize = Op(OpKind::kResize);
  resize.height = 100;
  absl::Status s = proc.Process(jpeg.data(), jpeg.size(), WithOps({resize}, 100, 100), {},
                                out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("133x100") && Catch::Contains("100x100"));
  CHECK(proc.Process(jpeg.data(), jpeg.size(), WithOps({resize}, 100, 133), {}, out.data(),
                     out.size(), &r)
            .ok());
  // An op that makes more pixels than max_decode_pixels.
  resize.height = 2000;
  s = proc.Process(jpeg.data(), jpeg.size(), WithOps({resize}), {}, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  // A small output whose resample passes through a huge intermediate image
  // (every row of a tall image, each widened 500 times).
  {
    const std::vector<uint8_t> tall = EncodeJpeg(MakePhoto(4000, 8, 3, 1), 4000, 8, 3, {});
    OpParams wide = Op(OpKind::kResize);
    wide.height = 1, wide.width = 4000;
    for (uint32_t first : {0u, 1u}) {  // fused, then after a flip (on the image)
      OpParams flip = Op(OpKind::kVerticalFlip);
      flip.p = 1;
      const PipelineParams q = first == 0 ? WithOps({wide}) : WithOps({flip, wide});
      s = proc.Process(tall.data(), tall.size(), q, {}, out.data(), out.size(), &r);
      CHECK(s.code() == absl::StatusCode::kResourceExhausted);
    }
  }
  // RandomCrop larger than the image.
  OpParams crop = Op(OpKind::kRandomCrop);
  crop.height = 300, crop.width = 10;
  s = proc.Process(jpeg.data(), jpeg.size(), WithOps({crop}), {}, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  // A blur kernel larger than the image allows (reflect padding).
  OpParams small = Op(OpKind::kCenterCrop);
  small.height = small.width = 4;
  OpParams blur = Op(OpKind::kGaussianBlur);
  blur.kernel_x = blur.kernel_y = 9;
  blur.sigma[0] = blur.sigma[1] = 1.0f;
  s = proc.Process(jpeg.data(), jpeg.size(), WithOps({small, blur}), {}, out.data(), out.size(),
                   &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  // Forced steps that do not apply.
  SampleSteps bad;
  bad.count = 1;
  bad.steps[0].kind = static_cast<StepKind>(99);
  s = proc.ProcessSteps(jpeg.data(), jpeg.size(), WithOps({}), bad, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  bad.steps[0].kind = StepKind::kGaussianBlur;
  bad.steps[0].kernel_x = 4, bad.steps[0].kernel_y = 3, bad.steps[0].sigma = 1;
  s = proc.ProcessSteps(jpeg.data(), jpeg.size(), WithOps({}), bad, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  bad.steps[0].kind = StepKind::kPad;
  bad.steps[0].pad[0] = 4000000000u;
  s = proc.ProcessSteps(jpeg.data(), jpeg.size(), WithOps({}), bad, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  // ...and the processor still works.
  CHECK(proc.Process(jpeg.data(), jpeg.size(), WithOps({crop, blur}, 0, 0), {}, out.data(),
                     out.size(), &r)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(proc.Process(jpeg.data(), jpeg.size(), TrainParams(), {}, out.data(), out.size(), &r).ok());
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

// `count` corruptions of `good` (a few bytes changed, then truncated) run
// through `p`: each either fails or writes a whole sample (exactly the fixed
// shape's bytes, or at most the slot's); then `good` itself still works.
void ProcessCorrupted(SampleProcessor& proc, const std::vector<uint8_t>& good,
                      const PipelineParams& p, uint64_t rng_seed, uint64_t key_seed, int count,
                      bool fixed_shape) {
  std::vector<uint8_t> out(MaxSampleBytes(p));
  KeyedRng rng(rng_seed);
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> bad = good;
    const int edits = 1 + static_cast<int>(rng.Below(6));
    for (int k = 0; k < edits; ++k) bad[rng.Below(bad.size())] = rng.Next() & 0xff;
    bad.resize(1 + rng.Below(bad.size()));
    SampleResult r;
    const absl::Status s = proc.Process(bad.data(), bad.size(), p,
                                        {key_seed, 1, static_cast<uint64_t>(i)}, out.data(),
                                        out.size(), &r);
    if (s.ok() && fixed_shape) CHECK(r.bytes == out.size());
    if (s.ok() && !fixed_shape) CHECK(r.bytes <= out.size());
  }
  SampleResult r;
  CHECK(proc.Process(good.data(), good.size(), p, {}, out.data(), out.size(), &r).ok());
}

TEST_CASE("Corrupted files through op lists never crash", "[pipeline][hostile]") {
  SampleProcessor proc;
  const uint32_t h = 90, w = 120;
  const std::vector<uint8_t> good = EncodeJpeg(MakePhoto(h, w, 3, 6), h, w, 3, {});
  OpParams crop = Op(OpKind::kRandomCrop);
  crop.height = crop.width = 48;
  crop.padding[0] = crop.padding[2] = 8;
  crop.padding_mode = PadMode::kSymmetric;
  OpParams jitter = Op(OpKind::kColorJitter);
  jitter.jitter_set = 15;
  for (uint32_t j = 0; j < 3; ++j) jitter.jitter[j][0] = 0.5f, jitter.jitter[j][1] = 1.5f;
  OpParams blur = Op(OpKind::kGaussianBlur);
  blur.kernel_x = blur.kernel_y = 5;
  blur.sigma[0] = 0.1f, blur.sigma[1] = 2.0f;
  const PipelineParams p = WithOps({crop, jitter, blur}, 48, 48);
  ProcessCorrupted(proc, good, p, /*rng_seed=*/43, /*key_seed=*/3, 150, /*fixed_shape=*/true);
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

TEST_CASE("DrawSteps: RandomRotation and RandomAffine draw torchvision's parameters",
          "[pipeline][draw]") {
  OpParams rot = Op(OpKind::kRandomRotation);
  rot.degrees[0] = -10, rot.degrees[1] = 20;
  rot.interpolation = Interpolation::kBilinear;
  rot.has_center = 1, rot.center[0] = 3, rot.center[1] = 4;
  rot.fill[0] = 1, rot.fill[1] = 2, rot.fill[2] = 3;
  OpParams aff = Op(OpKind::kRandomAffine);
  aff.interpolation = Interpolation::kNearest;
  aff.degrees[0] = aff.degrees[1] = 0;
  aff.has_translate = 1, aff.translate[0] = 0.1f, aff.translate[1] = 0.2f;
  aff.has_scale = 1, aff.affine_scale[0] = 0.5f, aff.affine_scale[1] = 1.5f;
  aff.shear_count = 2, aff.shear[0] = -7, aff.shear[1] = 7;
  OpParams aff4 = aff;
  aff4.has_translate = aff4.has_scale = 0;
  aff4.shear_count = 4, aff4.shear[2] = 10, aff4.shear[3] = 12;
  const PipelineParams p = WithOps({rot, aff, aff4});
  float lo = 100, hi = -100;
  int32_t tx_lo = 100, tx_hi = -100, ty_lo = 100, ty_hi = -100;
  for (uint64_t i = 0; i < 2000; ++i) {
    SampleSteps s, again;
    // 50 high, 100 wide: |tx| <= 0.1 * 100, |ty| <= 0.2 * 50.
    REQUIRE(DrawSteps(p, 50, 100, {4, 0, i}, &s).ok());
    REQUIRE(DrawSteps(p, 50, 100, {4, 0, i}, &again).ok());
    REQUIRE(s.count == 3);
    CHECK(std::memcmp(s.steps, again.steps, sizeof(Step) * 3) == 0);
    const Step& r = s.steps[0];
    CHECK(r.kind == StepKind::kRotate);
    CHECK((r.angle >= -10 && r.angle <= 20));
    lo = std::min(lo, r.angle), hi = std::max(hi, r.angle);
    CHECK(r.has_center == 1);
    CHECK(r.center[1] == 4.0f);
    CHECK(r.fill[2] == 3);
    CHECK(r.interpolation == Interpolation::kBilinear);
    const Step& a = s.steps[1];
    CHECK(a.kind == StepKind::kAffine);
    CHECK(a.angle == 0.0f);
    CHECK(std::abs(a.translate[0]) <= 10);
    CHECK(std::abs(a.translate[1]) <= 10);
    tx_lo = std::min(tx_lo, a.translate[0]), tx_hi = std::max(tx_hi, a.translate[0]);
    ty_lo = std::min(ty_lo, a.translate[1]), ty_hi = std::max(ty_hi, a.translate[1]);
    CHECK((a.affine_scale >= 0.5f && a.affine_scale <= 1.5f));
    CHECK((a.shear[0] >= -7 && a.shear[0] <= 7));
    CHECK(a.shear[1] == 0.0);  // 2 values: x only
    CHECK(a.has_center == 0);
    const Step& b = s.steps[2];
    CHECK(b.translate[0] == 0);
    CHECK(b.affine_scale == 1.0f);
    CHECK((b.shear[1] >= 10 && b.shear[1] <= 12));
  }
  CHECK(lo < -9.9f);
  CHECK(hi > 19.9f);
  CHECK(tx_lo == -10);
  CHECK(tx_hi == 10);
  CHECK(ty_lo == -10);
  CHECK(ty_hi == 10);
}

TEST_CASE("DrawSteps: the point ops draw once against p", "[pipeline][draw]") {
  const OpKind kinds[] = {OpKind::kRandomPosterize,       OpKind::kRandomSolarize,
                          OpKind::kRandomAdjustSharpness, OpKind::kRandomAutocontrast,
                          OpKind::kRandomEqualize,        OpKind::kRandomInvert};
  const StepKind steps_of[] = {StepKind::kPosterize,    StepKind::kSolarize, StepKind::kSharpness,
                               StepKind::kAutocontrast, StepKind::kEqualize, StepKind::kInvert};
  for (int k = 0; k < 6; ++k) {
    OpParams op = Op(kinds[k]);
    op.p = 0.25f, op.bits = 3, op.threshold = 99.5f, op.sharpness_factor = 1.75f;
    int hits = 0;
    for (uint64_t i = 0; i < 4000; ++i) {
      SampleSteps s;
      REQUIRE(DrawSteps(WithOps({op}), 9, 9, {2, 0, i}, &s).ok());
      if (s.count == 0) continue;
      ++hits;
      CHECK(s.steps[0].kind == steps_of[k]);
      if (k == 0) CHECK(s.steps[0].bits == 3);
      if (k == 1) CHECK(s.steps[0].threshold == 99.5f);
      if (k == 2) CHECK(s.steps[0].factor[0] == 1.75f);
    }
    CAPTURE(k);
    CHECK(std::abs(hits - 1000) < 5 * std::sqrt(4000 * 0.25 * 0.75));
  }
}

TEST_CASE("DrawSteps: RandomErasing's box fits the output and comes last", "[pipeline][draw]") {
  OpParams center = Op(OpKind::kCenterCrop);
  center.height = 40, center.width = 60;
  OpParams erase = testing::RandomErasingOp(1.0f);
  erase.erase_value[0] = 0.5f, erase.erase_value[1] = -1, erase.erase_value[2] = 2;
  PipelineParams p = WithOps({center, erase});
  for (uint64_t i = 0; i < 1000; ++i) {
    SampleSteps s;
    REQUIRE(DrawSteps(p, 80, 100, {1, 2, i}, &s).ok());
    const Step& e = s.steps[s.count - 1];
    if (e.kind != StepKind::kErase) continue;  // no attempt fitted (rare)
    CHECK(e.top + e.height <= 40);
    CHECK(e.left + e.width <= 60);
    CHECK(e.height < 40);
    CHECK(e.width < 60);
    // Its area: U(0.02, 0.33) of 2400 pixels, each side rounded.
    const double area = static_cast<double>(e.height) * e.width;
    CHECK(area >= 0.02 * 2400 - e.height - e.width);
    CHECK(area <= 0.33 * 2400 + e.height + e.width + 1);
    CHECK(e.erase_random == 0);
    CHECK(e.erase_value[2] == 2.0f);
  }
  p.ops[1].p = 0;
  SampleSteps none;
  REQUIRE(DrawSteps(p, 80, 100, {}, &none).ok());
  CHECK(none.count == 1);
  p.ops[1].p = 1, p.ops[1].erase_random = 1;
  SampleSteps a, b;
  REQUIRE(DrawSteps(p, 80, 100, {1, 2, 3}, &a).ok());
  REQUIRE(DrawSteps(p, 80, 100, {1, 2, 4}, &b).ok());
  REQUIRE(a.steps[1].kind == StepKind::kErase);
  REQUIRE(b.steps[1].kind == StepKind::kErase);
  CHECK(a.steps[1].erase_random == 1);
  CHECK(a.steps[1].noise_seed != b.steps[1].noise_seed);
}

TEST_CASE("Policy, affine and point steps run on the image as their kernels do",
          "[pipeline][ops]") {
  SampleProcessor proc;
  OpParams hflip = Op(OpKind::kHorizontalFlip);
  hflip.p = 0.5f;
  OpParams vflip = Op(OpKind::kVerticalFlip);
  vflip.p = 0.5f;
  OpParams aff = Op(OpKind::kRandomAffine);
  aff.interpolation = Interpolation::kBilinear;
  aff.degrees[0] = -30, aff.degrees[1] = 30;
  aff.has_translate = 1, aff.translate[0] = aff.translate[1] = 0.2f;
  aff.has_scale = 1, aff.affine_scale[0] = 0.8f, aff.affine_scale[1] = 1.2f;
  aff.shear_count = 4, aff.shear[0] = -5, aff.shear[1] = 5, aff.shear[2] = -5, aff.shear[3] = 5;
  aff.fill[0] = 200, aff.fill[1] = 10, aff.fill[2] = 90;
  OpParams rot = Op(OpKind::kRandomRotation);
  rot.degrees[0] = -45, rot.degrees[1] = 45;
  rot.interpolation = Interpolation::kNearest;
  auto point = [](OpKind kind) {
    OpParams op = Op(kind);
    op.p = 0.5f, op.bits = 3, op.threshold = 128, op.sharpness_factor = 2.5f;
    return op;
  };
  OpParams crop = Op(OpKind::kRandomCrop);
  crop.height = 30, crop.width = 33;
  const std::vector<PipelineParams> lists = {
      WithOps({testing::AugMixOp(), hflip}),
      WithOps({testing::TrivialAugmentWideOp(), vflip, point(OpKind::kRandomEqualize)}),
      WithOps({crop, testing::RandAugmentOp(4, 20), aff, point(OpKind::kRandomPosterize), hflip}),
      WithOps({rot, point(OpKind::kRandomAutocontrast), hflip, point(OpKind::kRandomInvert),
               point(OpKind::kRandomSolarize), vflip}),
      WithOps({testing::AutoAugmentOp(AutoAugmentPolicy::kSvhn),
               point(OpKind::kRandomAdjustSharpness), hflip}),
      WithOps({testing::AugMixOp(5, 2, 2, 0.7f, false), testing::RandomErasingOp(0.7f)}),
  };
  for (int orientation : {1, 6}) {
    EncodeOptions o;
    o.subsampling = 444;
    if (orientation != 1) o.app1 = testing::ExifApp1(orientation, false);
    const uint32_t h = 37, w = 50;
    const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 5), h, w, 3, o);
    uint32_t ih, iw;
    const std::vector<uint8_t> img = DecodeRgb(proc, jpeg, &ih, &iw, true);
    for (size_t l = 0; l < lists.size(); ++l) {
      PipelineParams p = lists[l];
      p.apply_exif = 1;
      for (uint64_t i = 0; i < 16; ++i) {
        const SampleKey key{12, 0, i};
        SampleSteps steps;
        REQUIRE(DrawSteps(p, ih, iw, key, &steps).ok());
        uint32_t wh = ih, ww = iw;
        std::vector<uint8_t> want = ApplySteps(img, &wh, &ww, steps);
        EraseOnOutput(want, wh, ww, steps);
        std::vector<uint8_t> out(want.size());
        SampleResult r;
        CAPTURE(orientation, l, i);
        REQUIRE(proc.Process(jpeg.data(), jpeg.size(), p, key, out.data(), out.size(), &r).ok());
        REQUIRE(r.height == wh);
        REQUIRE(r.width == ww);
        CHECK(out == want);
        std::vector<uint8_t> forced(out.size());
        REQUIRE(
            proc.ProcessSteps(jpeg.data(), jpeg.size(), p, steps, forced.data(), forced.size(), &r)
                .ok());
        CHECK(forced == out);
      }
    }
  }
}

TEST_CASE("Erase steps write the float output's box", "[pipeline][ops]") {
  SampleProcessor proc;
  const uint32_t h = 20, w = 30;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 2), h, w, 3, {});
  PipelineParams p = WithOps({});
  p.dtype = ring::kFloat32;
  p.layout = ring::kNCHW;
  std::vector<uint8_t> plain(MaxSampleBytes(p)), erased(MaxSampleBytes(p));
  SampleResult r;
  SampleSteps none;
  REQUIRE(
      proc.ProcessSteps(jpeg.data(), jpeg.size(), p, none, plain.data(), plain.size(), &r).ok());
  SampleSteps s;
  s.count = 2;
  s.steps[0].kind = StepKind::kInvert;
  s.steps[1].kind = StepKind::kErase;
  s.steps[1].top = 2, s.steps[1].left = 5, s.steps[1].height = 7, s.steps[1].width = 11;
  s.steps[1].erase_value[0] = -1.5f, s.steps[1].erase_value[1] = 0, s.steps[1].erase_value[2] = 3;
  REQUIRE(proc.ProcessSteps(jpeg.data(), jpeg.size(), p, s, erased.data(), erased.size(), &r).ok());
  std::vector<float> a(h * w * 3), b(h * w * 3);
  std::memcpy(a.data(), plain.data(), a.size() * 4);
  std::memcpy(b.data(), erased.data(), b.size() * 4);
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const size_t at = (size_t{c} * h + y) * w + x;
        const bool in = y >= 2 && y < 9 && x >= 5 && x < 16;
        // Outside: the inverted image, normalized as the output is.
        const float mean = p.mean[c], stdev = p.stdev[c];
        const float inverted = (1.0f - (a[at] * stdev + mean)) - mean;
        CAPTURE(c, y, x);
        if (in) {
          REQUIRE(b[at] == s.steps[1].erase_value[c]);
        } else {
          REQUIRE(std::abs(b[at] * stdev - inverted) < 1e-5f);
        }
      }
    }
  }
}

TEST_CASE("Steps refused: erase not last, mixes badly nested, bad values", "[pipeline][ops]") {
  SampleProcessor proc;
  const uint32_t h = 20, w = 30;
  const std::vector<uint8_t> jpeg = EncodeJpeg(MakePhoto(h, w, 3, 2), h, w, 3, {});
  const PipelineParams p = WithOps({});
  std::vector<uint8_t> out(MaxSampleBytes(p));
  auto refused = [&](std::initializer_list<StepKind> kinds, void (*edit)(SampleSteps&)) {
    SampleSteps s;
    for (StepKind k : kinds) {
      Step& st = s.steps[s.count++];
      st.kind = k;
      if (k == StepKind::kErase) st.height = st.width = 4;
      if (k == StepKind::kCrop) st.height = st.width = 8;
      if (k == StepKind::kAffine || k == StepKind::kRotate)
        st.interpolation = Interpolation::kNearest;
    }
    if (edit != nullptr) edit(s);
    SampleResult r;
    return proc.ProcessSteps(jpeg.data(), jpeg.size(), p, s, out.data(), out.size(), &r).code() ==
           absl::StatusCode::kInvalidArgument;
  };
  using K = StepKind;
  CHECK_FALSE(refused({K::kInvert, K::kErase, K::kErase}, nullptr));
  CHECK(refused({K::kErase, K::kInvert}, nullptr));
  CHECK(refused({K::kErase}, [](SampleSteps& s) { s.steps[0].top = 17; }));
  CHECK(refused({K::kErase}, [](SampleSteps& s) { s.steps[0].erase_value[0] = NAN; }));
  CHECK_FALSE(refused({K::kMixBegin, K::kMixChain, K::kInvert, K::kMixChain, K::kMixEnd}, nullptr));
  CHECK(refused({K::kMixBegin, K::kMixChain, K::kCrop, K::kMixEnd}, nullptr));
  CHECK(refused({K::kMixChain, K::kMixEnd}, nullptr));
  CHECK(refused({K::kMixBegin, K::kMixBegin, K::kMixEnd, K::kMixEnd}, nullptr));
  CHECK(refused({K::kMixBegin, K::kMixChain, K::kInvert}, nullptr));
  CHECK(refused({K::kMixBegin, K::kInvert, K::kMixChain, K::kMixEnd}, nullptr));
  CHECK_FALSE(refused({K::kMixBegin, K::kMixEnd}, nullptr));
  CHECK(refused({K::kMixEnd}, nullptr));
  CHECK(refused({K::kMixBegin, K::kMixEnd}, [](SampleSteps& s) { s.steps[0].mix_weight = -1; }));
  CHECK(refused({K::kPosterize}, [](SampleSteps& s) { s.steps[0].bits = 9; }));
  CHECK(refused({K::kSolarize}, [](SampleSteps& s) { s.steps[0].threshold = INFINITY; }));
  CHECK(refused({K::kSharpness}, [](SampleSteps& s) { s.steps[0].factor[0] = -1; }));
  CHECK_FALSE(refused({K::kAffine, K::kRotate}, nullptr));
  CHECK(refused({K::kAffine}, [](SampleSteps& s) { s.steps[0].affine_scale = 0; }));
  CHECK(refused({K::kAffine}, [](SampleSteps& s) { s.steps[0].shear[1] = NAN; }));
  CHECK(refused({K::kRotate},
                [](SampleSteps& s) { s.steps[0].interpolation = Interpolation::kAntialias; }));
}

TEST_CASE("Corrupted files through the policy ops never crash", "[pipeline][hostile]") {
  SampleProcessor proc;
  const uint32_t h = 60, w = 80;
  const std::vector<uint8_t> good = EncodeJpeg(MakePhoto(h, w, 3, 7), h, w, 3, {});
  OpParams erase = testing::RandomErasingOp(0.9f);
  erase.erase_random = 1;
  PipelineParams p = WithOps(
      {testing::TrivialAugmentWideOp(), testing::AugMixOp(), testing::RandAugmentOp(3, 25), erase});
  p.dtype = ring::kFloat16;
  p.layout = ring::kNCHW;
  REQUIRE(ValidateParams(p).ok());
  ProcessCorrupted(proc, good, p, /*rng_seed=*/44, /*key_seed=*/5, 100, /*fixed_shape=*/false);
}

}  // namespace
}  // namespace stoker::image
