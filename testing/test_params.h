// Test helpers: the train, eval and decode presets as the daemon lowers them
// (pipeline/pipeline_spec.h owns the defaults; these tests of the image
// library, which links no protobuf, spell out the lowered values they get
// at size 224), forced steps for a RandomResizedCrop + flip, and the policy
// and erasing ops with torchvision's defaults.

#ifndef STOKER_TESTING_TEST_PARAMS_H_
#define STOKER_TESTING_TEST_PARAMS_H_

#include <cstdint>

#include "server/image/steps.h"
#include "stoker/ring_layout.h"

namespace stoker::image::testing {

// The output the daemon lowers when none is asked for: uint8 NHWC, images
// up to 64 Mpx.
inline PipelineParams& WithUint8Output(PipelineParams& p) {
  p.dtype = ring::kUint8;
  p.layout = ring::kNHWC;
  p.max_decode_pixels = 64ull << 20;
  return p;
}

// RandomResizedCrop(out, scale (0.08, 1), ratio (3/4, 4/3)), RandomHorizontal
// Flip(0.5); the output out_height x out_width.
inline PipelineParams TrainParams(uint32_t out_height = 224, uint32_t out_width = 224) {
  PipelineParams p;
  p.op_count = 2;
  OpParams& rrc = p.ops[0];
  rrc.kind = OpKind::kRandomResizedCrop;
  rrc.height = out_height;
  rrc.width = out_width;
  rrc.scale[0] = 0.08f;
  rrc.scale[1] = 1.0f;
  rrc.ratio[0] = 3.0f / 4.0f;
  rrc.ratio[1] = 4.0f / 3.0f;
  p.ops[1].kind = OpKind::kHorizontalFlip;
  p.ops[1].p = 0.5f;
  p.out_height = out_height;
  p.out_width = out_width;
  return WithUint8Output(p);
}

// Resize(resize) (the shorter side), CenterCrop(224).
inline PipelineParams EvalParams(uint32_t resize = 256) {
  PipelineParams p;
  p.op_count = 2;
  p.ops[0].kind = OpKind::kResize;
  p.ops[0].height = resize;
  p.ops[1].kind = OpKind::kCenterCrop;
  p.ops[1].height = p.ops[1].width = 224;
  p.out_height = p.out_width = 224;
  return WithUint8Output(p);
}

// A SimCLR-like multi-view pipeline: view 0 RandomResizedCrop(64),
// RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4, 0.1), made twice; view 1
// RandomResizedCrop(32), GaussianBlur(3, sigma 0.1..2), made three times.
inline PipelineParams MultiViewParams() {
  PipelineParams p;
  const PipelineParams big = TrainParams(64, 64), small = TrainParams(32, 32);
  p = big;
  p.op_count = 5;
  OpParams& jitter = p.ops[2];
  jitter = OpParams();
  jitter.kind = OpKind::kColorJitter;
  const float ranges[4][2] = {{0.6f, 1.4f}, {0.6f, 1.4f}, {0.6f, 1.4f}, {-0.1f, 0.1f}};
  for (int i = 0; i < 4; ++i) jitter.jitter[i][0] = ranges[i][0], jitter.jitter[i][1] = ranges[i][1];
  jitter.jitter_set = 0xf;
  p.ops[3] = small.ops[0];
  p.ops[4] = OpParams();
  p.ops[4].kind = OpKind::kGaussianBlur;
  p.ops[4].kernel_x = p.ops[4].kernel_y = 3;
  p.ops[4].sigma[0] = 0.1f;
  p.ops[4].sigma[1] = 2.0f;
  p.view_count = 2;
  p.views[0] = ViewParams{0, 3, 64, 64, 2};
  p.views[1] = ViewParams{3, 2, 32, 32, 3};
  return p;
}

// No op, any size; 4 Mpx at most.
inline PipelineParams DecodeParams() {
  PipelineParams p;
  p.op_count = 0;
  p.out_height = p.out_width = 0;
  WithUint8Output(p).max_decode_pixels = 4 << 20;
  return p;
}

// The steps of a RandomResizedCrop with its box given, then (flip) a
// horizontal flip: the crop resized to p's output with ops[0]'s
// interpolation.
inline SampleSteps RegionSteps(const PipelineParams& p, const CropBox& box, bool flip) {
  SampleSteps s;
  s.count = 2;
  s.steps[0].kind = StepKind::kCrop;
  s.steps[0].top = box.top;
  s.steps[0].left = box.left;
  s.steps[0].height = box.height;
  s.steps[0].width = box.width;
  s.steps[1].kind = StepKind::kResize;
  s.steps[1].height = p.out_height;
  s.steps[1].width = p.out_width;
  s.steps[1].interpolation = p.ops[0].interpolation;
  if (flip) s.steps[s.count++].kind = StepKind::kHorizontalFlip;
  return s;
}

// The policy and erasing ops with torchvision's defaults, as the daemon
// lowers them: AutoAugment(IMAGENET), RandAugment(2, 9, 31),
// TrivialAugmentWide(31) (all NEAREST, fill 0), AugMix(3, 3, -1, 1.0,
// all_ops, BILINEAR), RandomErasing(0.5, (0.02, 0.33), (0.3, 3.3), 0).
inline OpParams AutoAugmentOp(AutoAugmentPolicy policy = AutoAugmentPolicy::kImageNet) {
  OpParams op;
  op.kind = OpKind::kAutoAugment;
  op.policy = policy;
  op.interpolation = Interpolation::kNearest;
  return op;
}

inline OpParams RandAugmentOp(uint32_t num_ops = 2, uint32_t magnitude = 9, uint32_t bins = 31) {
  OpParams op;
  op.kind = OpKind::kRandAugment;
  op.num_ops = num_ops;
  op.magnitude = magnitude;
  op.num_magnitude_bins = bins;
  op.interpolation = Interpolation::kNearest;
  return op;
}

inline OpParams TrivialAugmentWideOp(uint32_t bins = 31) {
  OpParams op;
  op.kind = OpKind::kTrivialAugmentWide;
  op.num_magnitude_bins = bins;
  op.interpolation = Interpolation::kNearest;
  return op;
}

inline OpParams AugMixOp(uint32_t severity = 3, uint32_t width = 3, int32_t depth = -1,
                         float alpha = 1.0f, bool all_ops = true) {
  OpParams op;
  op.kind = OpKind::kAugMix;
  op.severity = severity;
  op.mixture_width = width;
  op.chain_depth = depth;
  op.alpha = alpha;
  op.all_ops = all_ops ? 1 : 0;
  op.interpolation = Interpolation::kBilinear;
  return op;
}

inline OpParams RandomErasingOp(float p = 0.5f) {
  OpParams op;
  op.kind = OpKind::kRandomErasing;
  op.p = p;
  op.erase_scale[0] = 0.02f, op.erase_scale[1] = 0.33f;
  op.erase_ratio[0] = 0.3f, op.erase_ratio[1] = 3.3f;
  return op;
}

// One op of `kind`, its parameters zero.
inline OpParams Op(OpKind kind) {
  OpParams op;
  op.kind = kind;
  return op;
}

inline PipelineParams WithOps(std::initializer_list<OpParams> ops, uint32_t out_h = 0,
                       uint32_t out_w = 0) {
  PipelineParams p;
  for (const OpParams& op : ops) p.ops[p.op_count++] = op;
  p.out_height = out_h;
  p.out_width = out_w;
  WithUint8Output(p).max_decode_pixels = 4 << 20;
  return p;
}

// RandomShortestSize(min_size=sizes, max_size), antialiased.
inline OpParams ShortestSize(std::initializer_list<uint32_t> sizes, uint32_t max_size) {
  OpParams rs = Op(OpKind::kRandomShortestSize);
  for (uint32_t v : sizes) rs.shortest[rs.shortest_count++] = v;
  rs.max_size = max_size;
  rs.interpolation = Interpolation::kAntialias;
  return rs;
}

}  // namespace stoker::image::testing

#endif  // STOKER_TESTING_TEST_PARAMS_H_
