// SampleProcessor's op lists (pipeline.h): every step kind run by the
// executor equals the kernels of ops.h applied one after the other, fused
// resizes included; failures fail the sample; corrupted files never crash.
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

using testing::DecodeRgb;
using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::MakePhoto;
using testing::MeanAbsDiff;
using testing::Op;
using testing::TrainParams;
using testing::WithOps;

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

// `p` run on `jpeg` by the executor (Process, with its own draw for `key`)
// and with `steps` forced (ProcessSteps) both give `want`, an image of wh x ww.
void CheckExecutorGives(SampleProcessor& proc, const std::vector<uint8_t>& jpeg,
                        const PipelineParams& p, const SampleKey& key, const SampleSteps& steps,
                        const std::vector<uint8_t>& want, uint32_t wh, uint32_t ww) {
  std::vector<uint8_t> out(p.out_height != 0 ? MaxSampleBytes(p) : want.size());
  SampleResult r;
  REQUIRE(proc.Process(jpeg.data(), jpeg.size(), p, key, out.data(), out.size(), &r).ok());
  REQUIRE(r.height == wh);
  REQUIRE(r.width == ww);
  out.resize(r.bytes);
  CHECK(out == want);
  std::vector<uint8_t> forced(out.size());
  REQUIRE(proc.ProcessSteps(jpeg.data(), jpeg.size(), p, steps, forced.data(), forced.size(), &r)
              .ok());
  CHECK(forced == out);
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
        CAPTURE(orientation, l, i);
        CheckExecutorGives(proc, jpeg, p, key, steps, want, wh, ww);
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
        CAPTURE(orientation, l, i);
        CheckExecutorGives(proc, jpeg, p, key, steps, want, wh, ww);
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
