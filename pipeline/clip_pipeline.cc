#include "pipeline/clip_pipeline.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "pipeline/op_table.h"
#include "pipeline/pipeline_spec.h"
#include "stoker/ring_layout.h"

namespace stoker {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

std::string ClipOps() {
  std::string names;
  for (const pipeline::OpRow& r : pipeline::OpTable()) {
    if (!r.on_clips) continue;
    absl::StrAppend(&names, names.empty() ? "" : ", ", std::string(r.name));
  }
  return names;
}

}  // namespace

absl::StatusOr<ClipPlan> PlanClipPipeline(const v1::PipelineSpec& spec, const v1::ClipSpec& clips,
                                          const video::VideoLimits& limits) {
  ClipPlan plan;
  if (clips.frames_per_clip() == 0 || clips.frames_per_clip() > video::kMaxClipFrames) {
    return Bad(absl::StrCat("clips: frames_per_clip must be 1..", video::kMaxClipFrames, ", not ",
                            clips.frames_per_clip()));
  }
  plan.options.frames_per_clip = clips.frames_per_clip();
  plan.options.step_between_clips = clips.step_between_clips() == 0 ? 1 : clips.step_between_clips();
  plan.options.frame_rate = clips.frame_rate();
  switch (clips.sampler()) {
    case v1::CLIP_SAMPLER_ALL: plan.sampling = video::ClipSampling::kAll; break;
    case v1::CLIP_SAMPLER_RANDOM: plan.sampling = video::ClipSampling::kRandom; break;
    case v1::CLIP_SAMPLER_UNIFORM: plan.sampling = video::ClipSampling::kUniform; break;
    default: return Bad(absl::StrCat("clips: unknown sampler ", clips.sampler()));
  }
  if (plan.sampling != video::ClipSampling::kAll && clips.clips_per_video() == 0) {
    return Bad("clips: RandomClipSampler and UniformClipSampler need clips_per_video >= 1");
  }
  plan.clips_per_video = clips.clips_per_video();
  video::ClipParams& p = plan.params;
  p.frames = clips.frames_per_clip();
  if (clips.layout().empty() || clips.layout() == "TCHW") {
    p.layout = video::ClipLayout::kTCHW;
  } else if (clips.layout() == "CTHW") {
    p.layout = video::ClipLayout::kCTHW;
  } else {
    return Bad(absl::StrCat("clips: layout '", clips.layout(), "': \"TCHW\" or \"CTHW\""));
  }

  if (!spec.preset().empty() || spec.views_size() != 0) {
    return Bad("pipeline: a video session takes ops (or none), not a preset or views");
  }
  v1::PipelineSpec request = spec;
  // No ops: the whole frame (the image "decode" preset), not the "train" one.
  if (request.ops_size() == 0) request.set_preset("decode");
  if (request.output().dtype().empty()) request.mutable_output()->set_dtype("float32");
  auto effective = pipeline::Effective(request);
  if (!effective.ok()) return effective.status();
  plan.effective = *std::move(effective);
  // Resize on a clip is the tensor path's (antialias=False), which
  // Effective's image default (True, PIL's) is not: only an explicit True
  // is refused, and the effective spec says False.
  for (int i = 0; i < plan.effective.ops_size(); ++i) {
    v1::Op* op = plan.effective.mutable_ops(i);
    if (!op->has_resize()) continue;
    if (i < request.ops_size() && request.ops(i).has_resize() &&
        request.ops(i).resize().has_antialias() && request.ops(i).resize().antialias()) {
      return Bad("pipeline: Resize on clips is torchvision's on video tensors: antialias=False");
    }
    op->mutable_resize()->set_antialias(false);
  }
  int stage = 0;  // the first of Resize (0), the flip (1), a crop (2) still allowed
  for (const v1::Op& op : plan.effective.ops()) {
    const pipeline::OpRow* row = pipeline::FindOp(static_cast<image::OpKind>(op.op_case()));
    if (row == nullptr || !row->on_clips) {
      return Bad(absl::StrCat("pipeline: ", row == nullptr ? "an unknown op" : std::string(row->name),
                              " does not run on video clips; clips take ", ClipOps(),
                              " (each drawn once per clip)"));
    }
    const std::string name(row->name);
    int at = 0;
    switch (op.op_case()) {
      case v1::Op::kResize: {
        const v1::Resize& r = op.resize();
        at = 0;
        if (r.size_size() != 2 || r.has_max_size() || r.interpolation() != "bilinear") {
          return Bad("pipeline: Resize on clips is torchvision's on video tensors: size [h, w], "
                     "bilinear, antialias=False, no max_size (the reference's Resize((128, 171)))");
        }
        p.resize_height = r.size(0);
        p.resize_width = r.size(1);
        break;
      }
      case v1::Op::kRandomHorizontalFlip:
        at = 1;
        p.flip_p = op.random_horizontal_flip().p();
        break;
      case v1::Op::kRandomCrop:
      case v1::Op::kCenterCrop: {
        at = 2;
        const bool random = op.op_case() == v1::Op::kRandomCrop;
        bool padded = random && op.random_crop().pad_if_needed();
        if (random) {
          for (uint32_t v : op.random_crop().padding()) padded |= v != 0;
        }
        if (padded) {
          return Bad("pipeline: RandomCrop on clips takes no padding");
        }
        const auto& size = random ? op.random_crop().size() : op.center_crop().size();
        p.crop = random ? video::ClipCrop::kRandom : video::ClipCrop::kCenter;
        p.crop_height = size.Get(0);
        p.crop_width = size.size() > 1 ? size.Get(1) : size.Get(0);
        break;
      }
      default:
        break;
    }
    if (at < stage) {
      return Bad(absl::StrCat("pipeline: ", name, " out of order: clips take at most one each of "
                              "Resize, RandomHorizontalFlip and a crop, in that order"));
    }
    stage = at + 1;  // each at most once
  }
  const v1::Output& out = plan.effective.output();
  const uint32_t dtype = pipeline::DTypeFromName(out.dtype());
  if (dtype != ring::kFloat32 && dtype != ring::kUint8) {
    return Bad(absl::StrCat("pipeline: clips come as float32 or uint8, not ", out.dtype()));
  }
  p.normalize = dtype == ring::kFloat32 ? 1 : 0;
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = out.mean_size() == 3 ? out.mean(c) : 0.f;
    p.std[c] = out.std_size() == 3 ? out.std(c) : 1.f;
  }
  if (p.crop != video::ClipCrop::kNone) {
    p.out_height = p.crop_height;
    p.out_width = p.crop_width;
  } else if (p.resize_height != 0) {
    p.out_height = p.resize_height;
    p.out_width = p.resize_width;
  } else if (plan.effective.size_size() != 0) {
    p.out_height = plan.effective.size(0);
    p.out_width = plan.effective.size(plan.effective.size_size() - 1);
  }
  if (p.out_height == 0 || p.out_width == 0) {
    return Bad("pipeline: a video session's clips need one size: give a crop (RandomCrop, "
               "CenterCrop), a Resize to [h, w], or the size every video's frames have");
  }
  if (plan.effective.size_size() != 0 &&
      (plan.effective.size(0) != p.out_height ||
       plan.effective.size(plan.effective.size_size() - 1) != p.out_width)) {
    return Bad(absl::StrCat("pipeline: size [", plan.effective.size(0), ", ",
                            plan.effective.size(plan.effective.size_size() - 1),
                            "] but the ops make ", p.out_height, " x ", p.out_width));
  }
  // A clip's frames are channels-first ([T, 3, h, w] or [3, T, h, w]).
  plan.effective.mutable_output()->set_layout("nchw");
  plan.effective.clear_size();
  plan.effective.add_size(p.out_height);
  plan.effective.add_size(p.out_width);
  p.max_decode_pixels = limits.max_decode_pixels;
  p.max_frames_per_clip = limits.max_frames_per_clip;
  return plan;
}

}  // namespace stoker
