// Attach planning: from an AttachRequest, the dataset it names and the
// daemon's limits to the plan of a session: the pipeline the workers run,
// the sampler, the ring's geometry and where delivery starts and ends.
// Pure functions of their arguments (no clock, no file system, no lock):
// thread-safe, and testable with a dataset size alone.
//
// Engine::Attach asks in this order, and reports the first fault it meets:
//   1. PlanRequest(req): what needs no dataset (batch size, rank, ring
//      slots, failure policy, the pipeline, the dataset's name and format).
//   2. The engine finds or indexes the dataset (server/engine/dataset_registry.h).
//   3. PlanSession(req, request_plan, dataset_size, limits): the shard, the
//      epoch's batches, the start position, the ring's bytes against the
//      daemon's --max-ring-bytes and the memory available
//      (common/memory_available.h).
//   4. RingSpecFor(plan, ...) lays out the ring; AttachResponseFor(...) says
//      what was planned to the client.

#ifndef STOKER_SERVER_ENGINE_ATTACH_PLAN_H_
#define STOKER_SERVER_ENGINE_ATTACH_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/dataset/dataset.h"
#include "pipeline/clip_pipeline.h"
#include "pipeline/volume_pipeline.h"
#include "server/dataset/sampler.h"
#include "server/image/pipeline_params.h"
#include "server/engine/ring_owner.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

// Ring slots when the request says 0 (stoker.proto's AttachDefaults), and
// the most a session may have.
inline constexpr uint32_t kDefaultSlots = v1::ATTACH_DEFAULT_RING_DEPTH;
inline constexpr uint32_t kMaxSlotsPerSession = 64;
// A request that leaves ring_slots at 0 gets a ring of kDefaultSlots that
// may deepen (server/engine/ring_depth.h) up to this many slots, within
// --max-ring-bytes and the shared-memory budget.
inline constexpr uint32_t kMaxAdaptiveSlots = v1::ATTACH_DEFAULT_RING_MAX_DEPTH;
// A dataset path longer than this is refused (it could not name a file).
inline constexpr size_t kMaxDatasetBytes = 4096;

// The pipeline of one session, as the workers run it and as the client and
// the status page are told it.
struct PipelinePlan {
  // What crosses the socket to the workers with every task.
  image::PipelineParams params;
  // Every default filled in (pipeline::Effective): AttachResponse.
  // effective_pipeline and SessionStatus.pipeline.
  v1::PipelineSpec effective;
};

// Where Attach turns the requested v1::PipelineSpec into what the workers
// run: pipeline::Effective (the contract's defaults and checks), lowered by
// LowerPipeline. INVALID_ARGUMENT "pipeline: ..." (naming the keyword or the
// op) for a spec either refuses.
absl::StatusOr<PipelinePlan> PlanPipeline(const v1::PipelineSpec& spec);

// What an AttachRequest asks, checked without its dataset.
struct RequestPlan {
  uint32_t world_size = 1;  // the request's, 0 taken as 1
  // The ring's first depth, and its slots (more when it may deepen).
  uint32_t depth = kDefaultSlots;
  uint32_t slots = kDefaultSlots;
  bool policy_error = false;  // FAILURE_POLICY_ERROR (else skip)
  // A still-image session's pipeline; a video session's effective spec
  // only (its params unused).
  PipelinePlan pipeline;
  // A video session (AttachRequest.clips): its clips and clip pipeline.
  std::optional<ClipPlan> clip;
  // A volume session (AttachRequest.volumes): its MONAI transforms.
  std::optional<VolumePlan> volume;
};

// INVALID_ARGUMENT for a batch_size of 0 or over ring::kMaxBatchSize, a rank
// not below world_size, ring_slots outside 2..kMaxSlotsPerSession, an unknown
// failure policy, a pipeline PlanPipeline refuses (a video session's:
// PlanClipPipeline, under the daemon's `video_limits`), an empty dataset
// name or one over kMaxDatasetBytes, an unknown dataset format; in that
// order.
absl::StatusOr<RequestPlan> PlanRequest(const v1::AttachRequest& req,
                                        const video::VideoLimits& video_limits = {});

// What an Attach leaves of the memory available to the daemon.
inline constexpr uint64_t kMemoryHeadroomBytes = uint64_t{64} << 20;

// The daemon's limits on one session.
struct AttachLimits {
  // --max-ring-bytes.
  uint64_t max_ring_bytes = 4ull << 30;
  // Memory available for a ring (memory_available.h); nullopt when unknown:
  // not checked. The ring must leave kMemoryHeadroomBytes of it free.
  std::optional<uint64_t> memory_free_bytes;
  // --ring-budget, shared by all sessions: the whole, and what the other
  // sessions' rings hold of it. budget 0: not checked.
  uint64_t ring_budget_bytes = 0;
  uint64_t ring_used_bytes = 0;
  // The budget is the default (a share of the memory), not --ring-budget-mb.
  bool ring_budget_default = false;
  uint32_t sessions = 0;  // holding ring_used_bytes
};

// A session's plan: everything Attach decides before it makes the ring.
struct AttachPlan {
  RequestPlan request;
  SamplerOptions sampler;
  // Samples an epoch visits before sharding: the dataset's entries, or a
  // video session's clips (ClipSource::epoch_size).
  uint64_t dataset_size = 0;
  uint64_t shard_size = 0;         // samples per epoch for this rank
  uint64_t batches_per_epoch = 0;  // for this rank
  uint64_t total_batches = 0;      // to deliver from the start; 0: without end
  uint32_t start_epoch = 0;
  uint64_t start_global = 0;       // start_epoch * batches_per_epoch + start_batch
  // Any-size output: each sample has its own size, within its room.
  bool variable_size = false;
  // The sample's fields (ring_layout.h, "field"), as the ring's header
  // lists them, laid out by ring::LayoutFields; and each still-image
  // field's index in it (-1: the session has none).
  std::vector<ring::FieldSpec> fields;
  int image_field = -1, label_field = -1, mask_field = -1;
  // A multi-view session's view fields, output by output ("view0", ...);
  // image_field is view0's there. Empty otherwise.
  std::vector<int> view_fields;
  int boxes_field = -1, box_labels_field = -1, box_flags_field = -1;
  // A video session's "clip" field (its label is label_field; no image).
  int clip_field = -1;
  // A volume session's "volume" and "volume_label" fields (its label is
  // label_field, -1 each; no image). volume_label_field is -1 when the
  // dataset has no label volumes.
  int volume_field = -1, volume_label_field = -1;
  // An image session whose ops all draw nothing (an evaluation pipeline:
  // Resize, CenterCrop; op_table.h's `deterministic`), of a fixed size,
  // without masks, boxes or views: a hash of its effective pipeline, by
  // which workers keep each image's output in the prepared cache
  // (server/worker/image_entry.h). 0 for any other session.
  uint64_t prepared_recipe = 0;
  uint64_t slot_data_bytes = 0;  // the fields' rooms for a batch
  uint64_t ring_bytes = 0;       // of slot data at the first depth: slot_data_bytes * depth

  uint32_t batch_size() const { return sampler.batch_size; }
  // Where sample `pos`'s room of field `field` (an index into `fields`)
  // lies in a slot's data, and its bytes.
  uint64_t room_offset(int field, uint32_t pos) const {
    return fields[field].offset + fields[field].stride * pos;
  }
  uint64_t room_bytes(int field) const { return fields[field].stride; }
  // Each image's room in a slot (image::MaxSampleBytes).
  uint64_t sample_bytes() const { return image_field < 0 ? 0 : room_bytes(image_field); }
  // Segmentation sets: the masks' ring DType (0: none).
  uint32_t mask_dtype() const { return mask_field < 0 ? 0 : fields[mask_field].dtype; }
  // Detection sets: the most boxes a sample may carry (the most any sample
  // of the dataset has, at least 1; 0: none).
  uint32_t box_stride() const {
    return boxes_field < 0 ? 0 : fields[boxes_field].max_shape[0];
  }
  // The ring's slot count, and the first depth (<= slots; equal unless the
  // ring may deepen).
  uint32_t slots() const { return request.slots; }
  uint32_t depth() const { return request.depth; }
  const image::PipelineParams& params() const { return request.pipeline.params; }
};

// RESOURCE_EXHAUSTED (naming --ring-budget) when a ring of `ring_bytes` does
// not fit in what the other sessions leave of limits.ring_budget_bytes.
absl::Status CheckRingBudget(uint64_t ring_bytes, const AttachLimits& limits);

// What a dataset's samples carry besides their image and label.
struct SampleFields {
  bool masks = false;      // a segmentation set: a mask per sample
  bool boxes = false;      // a detection set: boxes per sample
  uint32_t max_boxes = 0;  // the most boxes a sample has
};

// Plans a session over a dataset of `dataset_size` entries (a video
// session: its epoch's clips); its samples' fields are the image and
// label, and the mask and boxes as `fields` says; a video session's the
// clip (ring::kClipField, [T, 3, h, w] or [3, T, h, w], fixed) and label; a
// volume session's the volume (ring::kVolumeField, [S, C, X, Y, Z]), the
// label volume when fields.masks (ring::kVolumeLabelField, [S, 1, X, Y, Z])
// and the label, all fixed.
//  - INVALID_ARGUMENT when drop_last and the batch is larger than this rank's shard;
//  - OUT_OF_RANGE for a start_batch not below the batches per epoch, or a
//    start at or past the last epoch (with epochs != 0);
//  - RESOURCE_EXHAUSTED when the ring would be over limits.max_ring_bytes
//    (or its size overflows), not fit in what the other sessions leave of
//    limits.ring_budget_bytes (the message names the budget), or not fit in
//    limits.memory_free_bytes less kMemoryHeadroomBytes (the message names
//    both, and how to give the daemon more);
//  - INVALID_ARGUMENT when a sample has more than ring::kMaxBoxesPerSample
//    boxes, for apply_exif_orientation with boxes (which are in the stored
//    orientation), for RandomIoUCrop without boxes, or for views with masks
//    or boxes.
absl::StatusOr<AttachPlan> PlanSession(const v1::AttachRequest& req, const RequestPlan& request,
                                       uint64_t dataset_size, const AttachLimits& limits,
                                       const SampleFields& fields = {});

// The prepared_recipe of a planned session (see AttachPlan): 0 unless every
// op is deterministic, the output has one size and the samples carry no
// masks, boxes or views.
uint64_t PreparedRecipe(const AttachPlan& plan);

// The ring of a planned session: `session_number` goes into its header.
RingSpec RingSpecFor(const AttachPlan& plan, uint64_t session_number);

// What the client is told of its session: the ring (its label `ring_name`,
// the `ring_token` that the ring socket exchanges for its fd, `geometry` as
// created), the dataset's size and classes, the shard and batches, the
// output shape and the effective pipeline.
v1::AttachResponse AttachResponseFor(const AttachPlan& plan, const Dataset& dataset,
                                     const std::string& session_id, const std::string& ring_name,
                                     const std::string& ring_token,
                                     const ring::Geometry& geometry,
                                     uint32_t heartbeat_timeout_ms);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_ATTACH_PLAN_H_
