#include "server/image/pipeline.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "server/image/rng.h"
#include "server/image/test_jpeg.h"
#include "server/image/transform.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::MakePhoto;
using testing::MeanAbsDiff;

// README's fidelity promise: mean absolute error (uint8 levels) against
// Pillow's full decode + resize, DCT scaling or not.
constexpr double kPromisedMae = 1.0;

PipelineParams DecodeParams() {
  PipelineParams p;
  p.kind = PipelineKind::kDecode;
  p.out_height = p.out_width = 0;
  p.max_decode_pixels = 4 << 20;
  return p;
}

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
  PipelineParams p;
  CHECK(ValidateParams(p).ok());
  CHECK(MaxSampleBytes(p) == 224 * 224 * 3);
  p.dtype = ring::kFloat32;
  CHECK(MaxSampleBytes(p) == 224 * 224 * 3 * 4);
  auto bad = [](auto edit) {
    PipelineParams q;
    edit(q);
    return ValidateParams(q).code() == absl::StatusCode::kInvalidArgument;
  };
  CHECK(bad([](PipelineParams& q) { q.out_height = 0; }));
  CHECK(bad([](PipelineParams& q) { q.out_width = 8193; }));
  CHECK(bad([](PipelineParams& q) { q.out_width = 8192, q.out_height = 8192; }));
  CHECK(bad([](PipelineParams& q) { q.scale_min = 0; }));
  CHECK(bad([](PipelineParams& q) { q.scale_min = 0.9f, q.scale_max = 0.5f; }));
  CHECK(bad([](PipelineParams& q) { q.ratio_min = -1; }));
  CHECK(bad([](PipelineParams& q) { q.ratio_max = NAN; }));
  CHECK(bad([](PipelineParams& q) { q.flip_prob = 1.5f; }));
  CHECK(bad([](PipelineParams& q) { q.stdev[1] = 0; }));
  CHECK(bad([](PipelineParams& q) { q.mean[2] = INFINITY; }));
  CHECK(bad([](PipelineParams& q) { q.dtype = 9; }));
  CHECK(bad([](PipelineParams& q) { q.layout = 0; }));
  CHECK(bad([](PipelineParams& q) { q.kind = static_cast<PipelineKind>(7); }));
  CHECK(bad([](PipelineParams& q) { q.interpolation = static_cast<Interpolation>(0); }));
  CHECK(bad([](PipelineParams& q) { q.kind = PipelineKind::kEval, q.resize_size = 200; }));
  CHECK(bad([](PipelineParams& q) { q.kind = PipelineKind::kDecode, q.out_height = 0; }));
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
    PipelineParams p;
    p.out_height = p.out_width = 16;
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

// ProcessRegion against the double reference on the decode pipeline's image.
RegionCheck CheckRegion(SampleProcessor& proc, const std::vector<uint8_t>& jpeg,
                        const PipelineParams& base, const CropBox& box, bool flip) {
  uint32_t ih, iw;
  const std::vector<uint8_t> img = DecodeRgb(proc, jpeg, &ih, &iw, base.apply_exif != 0);
  PipelineParams p = base;
  std::vector<uint8_t> out(MaxSampleBytes(p));
  SampleResult r;
  const absl::Status s =
      proc.ProcessRegion(jpeg.data(), jpeg.size(), p, box, flip, out.data(), out.size(), &r);
  REQUIRE(s.ok());
  REQUIRE(r.height == p.out_height);
  REQUIRE(r.width == p.out_width);
  std::vector<uint8_t> want =
      testing::ReferenceResample(img, iw, testing::RefCrop(box.top, box.height, p.out_height),
                                 testing::RefCrop(box.left, box.width, p.out_width),
                                 p.interpolation == Interpolation::kAntialias);
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
        PipelineParams p;
        p.out_height = 64;
        p.out_width = 48;
        p.exact_decode = 1;
        p.apply_exif = 1;  // the box is in displayed coordinates
        CAPTURE(orientation, sub, box.top, box.left, box.height, box.width, flip);
        RegionCheck exact = CheckRegion(proc, jpeg, p, box, flip);
        CHECK(exact.worst <= 1);
        CHECK(exact.mae < 0.3);
        p.exact_decode = 0;
        RegionCheck scaled = CheckRegion(proc, jpeg, p, box, flip);
        CHECK(scaled.mae < kPromisedMae);
        p.interpolation = Interpolation::kBilinear;
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
  PipelineParams p;
  p.out_height = p.out_width = 32;
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
      PipelineParams p;
      p.kind = PipelineKind::kEval;
      p.exact_decode = exact;
      const EvalGeometry g = ComputeEvalGeometry(h, w, p);
      testing::RefAxis ay, ax;
      ay.len = h, ay.scale = double(h) / g.resized_height, ay.offset = g.top, ay.out = 224;
      ax.len = w, ax.scale = double(w) / g.resized_width, ax.offset = g.left, ax.out = 224;
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
  PipelineParams p;
  p.out_height = 20;
  p.out_width = 30;
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
  PipelineParams t;
  s = proc.Process(jpeg.data(), jpeg.size(), t, {}, out.data(), 100, &r);
  CHECK_FALSE(s.ok());
  CropBox outside{40, 0, 10, 10};
  s = proc.ProcessRegion(jpeg.data(), jpeg.size(), t, outside, false, out.data(), out.size(), &r);
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
  std::vector<PipelineParams> params(3);
  params[1].kind = PipelineKind::kEval;
  params[2] = DecodeParams();
  for (const PipelineParams& p : params) {
    std::vector<uint8_t> out(MaxSampleBytes(p));
    for (const auto& in : inputs) {
      SampleResult r;
      const absl::Status s =
          proc.Process(in.data(), in.size(), p, {1, 0, 0}, out.data(), out.size(), &r);
      CAPTURE(in.size(), static_cast<int>(p.kind));
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
  PipelineParams t;
  t.out_height = t.out_width = 16;
  std::vector<uint8_t> out(MaxSampleBytes(t));
  SampleResult r;
  const absl::Status s = proc.ProcessRegion(half.data(), half.size(), t, CropBox{0, 0, 32, 32},
                                            false, out.data(), out.size(), &r);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("truncated"));
  CHECK(proc.ProcessRegion(good.data(), good.size(), t, CropBox{0, 0, 32, 32}, false, out.data(),
                           out.size(), &r)
            .ok());
}

TEST_CASE("Corrupted files through every pipeline never crash", "[pipeline][hostile]") {
  SampleProcessor proc;
  const uint32_t h = 200, w = 264;
  EncodeOptions prog;
  prog.progressive = true;
  EncodeOptions restart;
  restart.restart_rows = 1;
  restart.subsampling = 422;
  std::vector<PipelineParams> params(3);
  params[1].kind = PipelineKind::kEval;
  params[2] = DecodeParams();
  params[0].out_height = params[0].out_width = 64;
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
}  // namespace stoker::image
