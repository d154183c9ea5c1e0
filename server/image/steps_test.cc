// DrawSteps and CheckSteps (steps.h): torchvision's draws, and the bound
// MaxOutputPixels puts on what they make.

#include "server/image/steps.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"
#include "stoker/ring_layout.h"
#include "testing/test_params.h"

namespace stoker::image {
namespace {

using testing::DecodeParams;
using testing::EvalParams;
using testing::Op;
using testing::ShortestSize;
using testing::TrainParams;
using testing::WithOps;

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

TEST_CASE("DrawSteps: RandomApply, RandomChoice and RandomOrder draw their ops as torchvision",
          "[pipeline][draw]") {
  // A composition at flat index 0, its ops after it (each of them sure to
  // make its step: RandomInvert and RandomEqualize with p = 1).
  OpParams invert = Op(OpKind::kRandomInvert), equalize = Op(OpKind::kRandomEqualize);
  invert.p = equalize.p = 1.0f;
  auto kinds = [](const SampleSteps& s) {
    std::vector<StepKind> k;
    for (uint32_t i = 0; i < s.count; ++i) k.push_back(s.steps[i].kind);
    return k;
  };
  constexpr int kDraws = 4000;
  OpParams apply = Op(OpKind::kRandomApply);
  apply.children = 2;
  for (float p : {0.0f, 1.0f, 0.3f}) {
    apply.p = p;
    const PipelineParams pp = WithOps({apply, invert, equalize});
    REQUIRE(ValidateParams(pp).ok());
    int applied = 0;
    for (int i = 0; i < kDraws; ++i) {
      const SampleSteps s = Drawn(pp, 40, 50, i);
      const std::vector<StepKind> k = kinds(s);
      if (k.empty()) continue;
      // All of its ops, in order, or none.
      REQUIRE(k == std::vector<StepKind>{StepKind::kInvert, StepKind::kEqualize});
      CHECK(s.steps[0].op == 1);
      CHECK(s.steps[1].op == 2);
      ++applied;
    }
    CAPTURE(p, applied);
    CHECK(std::abs(applied / double(kDraws) - p) < 0.03);  // 4 sd at p = 0.3
  }
  // RandomChoice(p=[1, 3]): one op, the second three times as often.
  OpParams choice = Op(OpKind::kRandomChoice);
  choice.children = 2;
  choice.weights[0] = 1, choice.weights[1] = 3;
  const PipelineParams pc = WithOps({choice, invert, equalize});
  REQUIRE(ValidateParams(pc).ok());
  int second = 0;
  for (int i = 0; i < kDraws; ++i) {
    const std::vector<StepKind> k = kinds(Drawn(pc, 40, 50, i));
    REQUIRE(k.size() == 1);
    second += k[0] == StepKind::kEqualize;
  }
  CHECK(std::abs(second / double(kDraws) - 0.75) < 0.03);
  // RandomOrder: both ops, each order half the time.
  OpParams order = Op(OpKind::kRandomOrder);
  order.children = 2;
  const PipelineParams po = WithOps({order, invert, equalize, Op(OpKind::kHorizontalFlip)});
  REQUIRE(ValidateParams(po).ok());
  int swapped = 0;
  for (int i = 0; i < kDraws; ++i) {
    const std::vector<StepKind> k = kinds(Drawn(po, 40, 50, i));
    REQUIRE(k.size() >= 2);
    REQUIRE(((k[0] == StepKind::kInvert && k[1] == StepKind::kEqualize) ||
             (k[0] == StepKind::kEqualize && k[1] == StepKind::kInvert)));
    swapped += k[0] == StepKind::kEqualize;
  }
  CHECK(std::abs(swapped / double(kDraws) - 0.5) < 0.035);
}

}  // namespace
}  // namespace stoker::image
