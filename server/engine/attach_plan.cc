#include "server/engine/attach_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash64.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "pipeline/op_table.h"
#include "pipeline/lower_pipeline.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/sample_fields.h"

namespace stoker {

using pipeline::FieldInfoOf;
using pipeline::MakeField;

// --- The pipeline: PlanPipeline, the contract's module and the lowering
// (pipeline/pipeline_spec.h, pipeline/lower_pipeline.h). ---

absl::StatusOr<PipelinePlan> PlanPipeline(const v1::PipelineSpec& spec) {
  auto effective = pipeline::Effective(spec);
  if (!effective.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", effective.status().message()));
  }
  auto params = LowerPipeline(*effective);
  if (!params.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", params.status().message()));
  }
  PipelinePlan p;
  p.params = *params;
  p.effective = *std::move(effective);
  return p;
}

// --- The rest of the plan. ---

absl::StatusOr<RequestPlan> PlanRequest(const v1::AttachRequest& req,
                                        const video::VideoLimits& video_limits) {
  if (req.batch_size() == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (req.batch_size() > ring::kMaxBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size ", req.batch_size(), " is over the limit of ",
                     ring::kMaxBatchSize));
  }
  RequestPlan r;
  r.world_size = req.world_size() == 0 ? 1 : req.world_size();
  if (req.rank() >= r.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", req.rank(), " is not below world_size ", r.world_size));
  }
  r.depth = req.ring_slots() == 0 ? kDefaultSlots : req.ring_slots();
  r.slots = req.ring_slots() == 0 ? kMaxAdaptiveSlots : req.ring_slots();
  if (r.depth < 2 || r.slots > kMaxSlotsPerSession) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring_slots must be within 2..", kMaxSlotsPerSession));
  }
  if (req.failure_policy() != v1::FAILURE_POLICY_UNSPECIFIED &&
      req.failure_policy() != v1::FAILURE_POLICY_SKIP &&
      req.failure_policy() != v1::FAILURE_POLICY_ERROR) {
    return absl::InvalidArgumentError("unknown failure_policy");
  }
  r.policy_error = req.failure_policy() == v1::FAILURE_POLICY_ERROR;
  if (req.has_clips()) {
    auto clip = PlanClipPipeline(req.pipeline(), req.clips(), video_limits);
    if (!clip.ok()) return clip.status();
    r.pipeline.effective = clip->effective;
    r.clip = *std::move(clip);
  } else if (req.has_volumes()) {
    auto volume = PlanVolumePipeline(req.volumes());
    if (!volume.ok()) return volume.status();
    r.volume = *std::move(volume);
    // What the client reads of the output: the patches' dtype, channels first.
    r.pipeline.effective.mutable_output()->set_dtype(r.volume->effective.dtype());
    r.pipeline.effective.mutable_output()->set_layout("nchw");
  } else {
    auto pipeline = PlanPipeline(req.pipeline());
    if (!pipeline.ok()) return pipeline.status();
    r.pipeline = *std::move(pipeline);
  }
  if (req.dataset().empty()) return absl::InvalidArgumentError("dataset is empty");
  if (req.dataset().size() > kMaxDatasetBytes) {
    return absl::InvalidArgumentError(absl::StrCat("dataset is ", req.dataset().size(),
                                                   " bytes long, over the limit of ",
                                                   kMaxDatasetBytes));
  }
  if (!v1::DatasetFormat_IsValid(req.format())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dataset format ", req.format()));
  }
  return r;
}

absl::Status CheckRingBudget(uint64_t ring_bytes, const AttachLimits& limits) {
  if (limits.ring_budget_bytes == 0) return absl::OkStatus();
  const uint64_t left =
      limits.ring_used_bytes >= limits.ring_budget_bytes ? 0 : limits.ring_budget_bytes - limits.ring_used_bytes;
  if (ring_bytes <= left) return absl::OkStatus();
  const std::string budget =
      limits.ring_budget_default
          ? absl::StrFormat("ring memory budget of %.1f MiB (half the memory available to it "
                            "when it started)",
                            limits.ring_budget_bytes / 1048576.0)
          : absl::StrFormat("--ring-budget-mb of %.1f MiB", limits.ring_budget_bytes / 1048576.0);
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the ring needs %.1f MiB of shared memory but stokerd's %s has %.1f MiB left (%d other "
      "session(s) hold %.1f MiB): %s, or ask for fewer ring_slots or a smaller batch or output",
      ring_bytes / 1048576.0, budget, left / 1048576.0, limits.sessions,
      limits.ring_used_bytes / 1048576.0,
      limits.ring_budget_default
          ? "give the daemon (its container) more memory or set --ring-budget-mb"
          : "raise --ring-budget-mb"));
}

absl::StatusOr<AttachPlan> PlanSession(const v1::AttachRequest& req, const RequestPlan& request,
                                       uint64_t dataset_size, const AttachLimits& limits,
                                       const SampleFields& fields) {
  const bool masks = fields.masks;
  AttachPlan p;
  p.request = request;
  p.dataset_size = dataset_size;
  p.sampler.seed = req.seed();
  p.sampler.shuffle = req.shuffle();
  p.sampler.rank = req.rank();
  p.sampler.world_size = request.world_size;
  p.sampler.batch_size = req.batch_size();
  p.sampler.drop_last = req.drop_last();
  p.shard_size = ShardSize(dataset_size, p.sampler);
  // Without drop_last a shard smaller than one batch is one partial batch,
  // as DataLoader gives it; with drop_last it would be no batch at all.
  if (req.batch_size() > p.shard_size && req.drop_last()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size ", req.batch_size(), " is larger than this rank's shard of the dataset (",
        p.shard_size, " of ", dataset_size, " samples), so drop_last leaves no batch"));
  }
  p.batches_per_epoch = BatchesPerEpoch(dataset_size, p.sampler);
  p.start_epoch = req.start_epoch();
  p.start_global = uint64_t{req.start_epoch()} * p.batches_per_epoch + req.start_batch();
  if (req.start_batch() >= p.batches_per_epoch) {
    return absl::OutOfRangeError(absl::StrCat("start_batch ", req.start_batch(),
                                              " is not below the batches per epoch, ",
                                              p.batches_per_epoch));
  }
  if (req.epochs() != 0) {
    uint64_t end = uint64_t{req.epochs()} * p.batches_per_epoch;
    if (p.start_global >= end) {
      return absl::OutOfRangeError("the start position is at or past the last epoch");
    }
    p.total_batches = end - p.start_global;
  }
  const image::PipelineParams& params = p.params();
  const uint32_t slots = request.depth;
  p.variable_size =
      params.out_height == 0 && !request.clip.has_value() && !request.volume.has_value();
  uint64_t sample_bytes = image::MaxSampleBytes(params);
  const bool nchw = params.layout == ring::kNCHW;
  const uint32_t h = params.out_height, w = params.out_width;
  auto add = [&p](int* index, ring::FieldSpec f) {
    *index = static_cast<int>(p.fields.size());
    p.fields.push_back(f);
  };
  const auto image_shape = [nchw](uint32_t h, uint32_t w) {
    return nchw ? std::vector<uint32_t>{3, h, w} : std::vector<uint32_t>{h, w, 3};
  };
  if (request.volume.has_value()) {
    const volume::VolumeTaskParams& v = request.volume->params;
    const auto dims = [&v](uint32_t channels) {
      return std::vector<uint32_t>{v.num_samples, channels, static_cast<uint32_t>(v.patch[0]),
                                   static_cast<uint32_t>(v.patch[1]),
                                   static_cast<uint32_t>(v.patch[2])};
    };
    sample_bytes = volume::PatchImageBytes(v);
    add(&p.volume_field, MakeField(ring::kVolumeField, v.dtype, dims(v.channels), sample_bytes, true));
    if (masks) {
      add(&p.volume_label_field, MakeField(ring::kVolumeLabelField, v.label_dtype, dims(1),
                                           volume::PatchLabelBytes(v), true));
    }
  } else if (request.clip.has_value()) {
    const video::ClipParams& c = request.clip->params;
    sample_bytes = video::ClipOutputBytes(c);
    const std::vector<uint32_t> shape =
        c.layout == video::ClipLayout::kCTHW
            ? std::vector<uint32_t>{3, c.frames, c.out_height, c.out_width}
            : std::vector<uint32_t>{c.frames, 3, c.out_height, c.out_width};
    add(&p.clip_field, MakeField(ring::kClipField, c.normalize != 0 ? ring::kFloat32 : ring::kUint8,
                                 shape, sample_bytes, true));
  } else if (params.view_count != 0) {
    if (masks || fields.boxes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "views with a dataset that has ", masks ? "masks" : "boxes",
          ": multi-view pipelines serve images and labels (the views of self-supervised "
          "recipes); use one op list for segmentation and detection"));
    }
    for (uint32_t k = 0; k < image::OutputCount(params); ++k) {
      const image::ViewParams& v = params.views[image::ViewOfOutput(params, k)];
      const uint64_t bytes =
          uint64_t{v.out_height} * v.out_width * 3 * ring::DTypeBytes(params.dtype);
      int index = -1;
      add(&index, MakeField(absl::StrCat(ring::kViewFieldPrefix, k), params.dtype,
                            image_shape(v.out_height, v.out_width), bytes, true));
      p.view_fields.push_back(index);
    }
    p.image_field = p.view_fields[0];
  } else {
    add(&p.image_field,
        MakeField(ring::kImageField, params.dtype, image_shape(h, w), sample_bytes,
                  !p.variable_size));
  }
  add(&p.label_field, MakeField(ring::kLabelField, ring::kInt64, {}, 8, true));
  if (masks && !request.volume.has_value()) {
    const uint32_t mask_dtype = params.mask_bpp == 2 ? ring::kUint16 : ring::kUint8;
    add(&p.mask_field, MakeField(ring::kMaskField, mask_dtype, {h, w},
                                 image::MaxOutputPixels(params) * params.mask_bpp,
                                 !p.variable_size));
  }
  for (uint32_t i = 0; i < params.op_count && (masks || fields.boxes); ++i) {
    if (params.ops[i].kind == image::OpKind::kElasticTransform) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "] ElasticTransform with a dataset that has ", masks ? "masks" : "boxes",
          ": moving them through its displacement is not served (torchvision's v1 transform "
          "moves the image only); drop it for segmentation and detection"));
    }
  }
  for (uint32_t i = 0; i < params.op_count && !fields.boxes; ++i) {
    if (params.ops[i].kind == image::OpKind::kRandomIoUCrop) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ops[", i, "] RandomIoUCrop needs each sample's boxes (it crops around them): give a "
          "dataset with boxes (COCO: annotations=), or use RandomResizedCrop or RandomCrop"));
    }
  }
  if (fields.boxes) {
    if (fields.max_boxes > ring::kMaxBoxesPerSample) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a sample of this dataset has ", fields.max_boxes, " boxes, over the ",
          ring::kMaxBoxesPerSample, " a sample may have"));
    }
    if (params.apply_exif != 0) {
      return absl::InvalidArgumentError(
          "apply_exif_orientation with a dataset that has boxes: its boxes are in each image's "
          "stored orientation (as COCO's tools and torchvision read them); leave "
          "apply_exif_orientation off");
    }
    for (uint32_t i = 0; i < params.op_count; ++i) {
      if (params.ops[i].kind == image::OpKind::kRandomPerspective) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ops[", i, "] RandomPerspective with a dataset that has boxes: moving boxes through a "
            "perspective is not served; drop it, or use RandomAffine"));
      }
    }
    const uint32_t n = std::max<uint32_t>(1, fields.max_boxes);
    add(&p.boxes_field, MakeField(ring::kBoxesField, ring::kFloat32, {n, 4}, 16 * uint64_t{n}, false));
    add(&p.box_labels_field, MakeField(ring::kBoxLabelsField, ring::kInt64, {n}, 8 * uint64_t{n}, false));
    add(&p.box_flags_field, MakeField(ring::kBoxFlagsField, ring::kUint8, {n}, n, false));
  }
  uint64_t per_sample = 0;  // for the message
  for (const ring::FieldSpec& f : p.fields) per_sample += f.stride;
  const bool laid_out = sample_bytes != 0 && sample_bytes <= ring::kMaxRoomBytes &&
                        ring::LayoutFields(p.fields.data(), static_cast<uint32_t>(p.fields.size()),
                                           req.batch_size(), &p.slot_data_bytes);
  p.ring_bytes = p.slot_data_bytes * slots;
  if (!laid_out || p.ring_bytes / slots != p.slot_data_bytes ||
      p.ring_bytes > limits.max_ring_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the ring would take ", p.ring_bytes, " bytes (", slots, " slots x ", req.batch_size(),
        " samples x ", per_sample, " bytes", masks ? " with their masks" : "",
        fields.boxes ? " and boxes" : "",
        "), over this daemon's --max-ring-bytes of ", limits.max_ring_bytes));
  }
  if (absl::Status st = CheckRingBudget(p.ring_bytes, limits); !st.ok()) return st;
  // A ring that may deepen has only the slots that could ever fit: doubling
  // the depth within --max-ring-bytes and the budget.
  const uint64_t slot_data = p.slot_data_bytes;
  uint64_t cap = limits.max_ring_bytes;
  if (limits.ring_budget_bytes != 0) cap = std::min(cap, limits.ring_budget_bytes);
  while (p.request.slots > p.request.depth && slot_data * p.request.slots > cap) {
    p.request.slots = std::max(p.request.depth, p.request.slots / 2);
  }
  if (limits.memory_free_bytes.has_value()) {
    const uint64_t free_bytes = *limits.memory_free_bytes;
    if (p.ring_bytes + kMemoryHeadroomBytes > free_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the ring needs %.1f MiB of memory and %.1f MiB are available, of which stokerd "
          "leaves %.0f MiB free (so %.1f MiB may go to a ring): give the daemon (its "
          "container) more memory, or use fewer ring_slots or a smaller batch",
          p.ring_bytes / 1048576.0, free_bytes / 1048576.0, kMemoryHeadroomBytes / 1048576.0,
          free_bytes > kMemoryHeadroomBytes ? (free_bytes - kMemoryHeadroomBytes) / 1048576.0
                                            : 0.0));
    }
  }
  return p;
}

uint64_t PreparedRecipe(const AttachPlan& p) {
  if (p.request.clip.has_value() || p.request.volume.has_value() || p.variable_size ||
      p.mask_field >= 0 || p.boxes_field >= 0 || !p.view_fields.empty()) {
    return 0;
  }
  const v1::PipelineSpec& spec = p.request.pipeline.effective;
  for (const v1::Op& op : spec.ops()) {
    const pipeline::OpRow* row = pipeline::FindOp(static_cast<image::OpKind>(op.op_case()));
    if (row == nullptr || !row->deterministic) return 0;
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    spec.SerializeToCodedStream(&coded);
  }
  const uint32_t scales = p.params().disabled_dct_scales;  // the decode the calibration allows
  bytes.append(reinterpret_cast<const char*>(&scales), sizeof(scales));
  const uint64_t h = Hash64(bytes.data(), bytes.size(), 0x6576616c);
  return h == 0 ? 1 : h;
}

RingSpec RingSpecFor(const AttachPlan& plan, uint64_t session_number) {
  RingSpec rs;
  rs.slot_count = plan.slots();
  rs.depth = plan.depth();
  rs.batch_size = plan.batch_size();
  rs.fields = plan.fields;
  // A clip: channels-first frames; a volume: channel-first patches.
  rs.layout = plan.request.clip.has_value() || plan.request.volume.has_value()
                  ? ring::kNCHW
                  : plan.params().layout;
  rs.session_number = session_number;
  rs.batches_per_epoch = plan.batches_per_epoch;
  rs.total_batches = plan.total_batches;
  return rs;
}

v1::AttachResponse AttachResponseFor(const AttachPlan& plan, const Dataset& dataset,
                                     const std::string& session_id, const std::string& ring_name,
                                     const std::string& ring_token, const ring::Geometry& g,
                                     uint32_t heartbeat_timeout_ms) {
  v1::AttachResponse resp;
  resp.set_session_id(session_id);
  auto* ri = resp.mutable_ring();
  ri->set_ring_name(ring_name);
  ri->set_ring_token(ring_token);
  ri->set_total_bytes(g.total_bytes);
  ri->set_slot_count(plan.slots());
  ri->set_slot_bytes(g.slot_bytes);
  ri->set_layout_version(ring::kLayoutVersion);
  ri->set_data_offset(g.data_offset);
  ri->set_descriptor_offset(g.descriptor_offset);
  for (const ring::FieldSpec& f : plan.fields) *ri->add_fields() = FieldInfoOf(f);
  resp.set_dataset_size(plan.dataset_size);
  resp.set_shard_size(plan.shard_size);
  resp.set_batches_per_epoch(plan.batches_per_epoch);
  resp.set_total_batches(plan.total_batches);
  for (const auto& c : dataset.class_names()) resp.add_class_names(c);
  const bool clip = plan.request.clip.has_value();
  resp.set_height(clip ? plan.request.clip->params.out_height : plan.params().out_height);
  resp.set_width(clip ? plan.request.clip->params.out_width : plan.params().out_width);
  resp.set_channels(3);
  if (plan.request.volume.has_value()) {
    const volume::VolumeTaskParams& v = plan.request.volume->params;
    resp.set_height(0);
    resp.set_width(0);
    resp.set_channels(v.channels);
    *resp.mutable_effective_volumes() = plan.request.volume->effective;
  }
  *resp.mutable_effective_pipeline() = plan.request.pipeline.effective;
  resp.set_heartbeat_timeout_ms(heartbeat_timeout_ms);
  return resp;
}

}  // namespace stoker
