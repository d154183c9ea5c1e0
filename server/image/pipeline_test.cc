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
using testing::MultiViewParams;
using testing::Op;
using testing::RegionSteps;
using testing::TrainParams;
using testing::WithOps;

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
