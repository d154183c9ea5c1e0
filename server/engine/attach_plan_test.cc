// Attach planning: request checks in order, the pipeline's defaults, the
// shard and start position, the ring's limits, what the client is told.

#include "server/engine/attach_plan.h"

#include <catch2/catch.hpp>

#include "testing/room_test_util.h"

namespace stoker {
namespace {

using testing::SmallRequest;

std::string RequestError(const v1::AttachRequest& req) {
  auto r = PlanRequest(req);
  return r.ok() ? "ok" : std::string(r.status().message());
}

TEST_CASE("PlanRequest refuses what needs no dataset, first fault first") {
  v1::AttachRequest req = SmallRequest("list.txt", 4);
  CHECK(RequestError(req) == "ok");

  v1::AttachRequest r = req;
  r.set_batch_size(0);
  r.set_rank(5);  // also wrong, but asked later
  CHECK(RequestError(r) == "batch_size must be at least 1");
  r = req;
  r.set_batch_size(ring::kMaxBatchSize + 1);
  CHECK(RequestError(r).find("is over the limit of") != std::string::npos);
  r = req;
  r.set_world_size(2);
  r.set_rank(2);
  CHECK(RequestError(r) == "rank 2 is not below world_size 2");
  r = req;
  r.set_rank(1);  // world_size 0 is 1
  CHECK(RequestError(r) == "rank 1 is not below world_size 1");
  r = req;
  r.set_ring_slots(1);
  CHECK(RequestError(r) == "ring_slots must be within 2..64");
  r.set_ring_slots(kMaxSlotsPerSession + 1);
  CHECK(RequestError(r) == "ring_slots must be within 2..64");
  r = req;
  r.set_failure_policy(static_cast<v1::FailurePolicy>(77));
  CHECK(RequestError(r) == "unknown failure_policy");
  r = req;
  r.mutable_pipeline()->set_preset("bogus");
  r.set_dataset("");  // also wrong, but asked later
  CHECK(RequestError(r).rfind("pipeline: ", 0) == 0);
  r = req;
  r.set_dataset("");
  CHECK(RequestError(r) == "dataset is empty");
  r.set_dataset(std::string(kMaxDatasetBytes + 1, 'a'));
  CHECK(RequestError(r).find("over the limit of 4096") != std::string::npos);
  r = req;
  r.set_format(static_cast<v1::DatasetFormat>(42));
  CHECK(RequestError(r) == "unknown dataset format 42");

  r = req;
  r.set_ring_slots(0);
  r.set_failure_policy(v1::FAILURE_POLICY_ERROR);
  auto plan = PlanRequest(r);
  REQUIRE(plan.ok());
  CHECK(plan->depth == kDefaultSlots);  // ring_slots 0: a ring that may deepen
  CHECK(plan->slots == kMaxAdaptiveSlots);
  CHECK(plan->world_size == 1);
  CHECK(plan->policy_error);
}

TEST_CASE("PlanPipeline fills the contract's defaults in and lowers them") {
  v1::PipelineSpec spec;  // empty: the train preset
  auto p = PlanPipeline(spec);
  REQUIRE(p.ok());
  CHECK(p->effective.preset() == "train");
  REQUIRE(p->effective.ops_size() == 2);
  CHECK(p->effective.size_size() == 2);
  CHECK(p->params.op_count == 2);
  CHECK(p->params.out_height == 224);
  CHECK(p->params.out_width == 224);
  CHECK(p->params.dtype == ring::kUint8);
  CHECK(p->params.layout == ring::kNHWC);

  spec.set_preset("eval");
  spec.add_size(160);
  p = PlanPipeline(spec);
  REQUIRE(p.ok());
  CHECK(p->effective.preset() == "eval");
  CHECK(p->params.out_height == 160);
  // What Attach echoes is effective: planning it again changes nothing.
  auto again = PlanPipeline(p->effective);
  REQUIRE(again.ok());
  CHECK(again->effective.SerializeAsString() == p->effective.SerializeAsString());

  // The decoded image's own size, a 16 Mpx cap by default.
  v1::PipelineSpec decode;
  decode.set_preset("decode");
  p = PlanPipeline(decode);
  REQUIRE(p.ok());
  CHECK(p->params.out_height == 0);
  CHECK(p->params.max_decode_pixels == 16ull << 20);

  v1::PipelineSpec bogus;
  bogus.set_preset("bogus");
  auto unknown = PlanPipeline(bogus);
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(unknown.status().message().rfind("pipeline: ", 0) == 0);
}

AttachPlan MustPlan(const v1::AttachRequest& req, uint64_t n, AttachLimits limits = {}) {
  auto request = PlanRequest(req);
  REQUIRE(request.ok());
  auto plan = PlanSession(req, *request, n, limits);
  REQUIRE(plan.ok());
  return *plan;
}

absl::Status PlanError(const v1::AttachRequest& req, uint64_t n, AttachLimits limits = {}) {
  auto request = PlanRequest(req);
  REQUIRE(request.ok());
  return PlanSession(req, *request, n, limits).status();
}

TEST_CASE("PlanSession: the shard, the epoch's batches, where delivery starts and ends") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 3, 0);
  AttachPlan p = MustPlan(req, 10);
  CHECK(p.shard_size == 10);
  CHECK(p.batches_per_epoch == 3);  // 4 + 4 + 2
  CHECK(p.total_batches == 0);      // without end
  CHECK(p.start_global == 0);
  CHECK(p.sample_bytes() == 8 * 8 * 3);
  CHECK(p.ring_bytes == (8 * 8 * 3 * 4 + 8 * 4) * 3);  // images, then labels
  CHECK_FALSE(p.variable_size);

  req.set_drop_last(true);
  CHECK(MustPlan(req, 10).batches_per_epoch == 2);
  req.set_drop_last(false);

  // Two ranks: ceil(10 / 2) each.
  req.set_world_size(2);
  req.set_rank(1);
  p = MustPlan(req, 10);
  CHECK(p.shard_size == 5);
  CHECK(p.batches_per_epoch == 2);
  CHECK(p.sampler.rank == 1);
  CHECK(p.sampler.world_size == 2);
  req.set_world_size(0);
  req.set_rank(0);

  // Resume: epoch 2, batch 1 of 3 epochs.
  req.set_epochs(3);
  req.set_start_epoch(2);
  req.set_start_batch(1);
  p = MustPlan(req, 10);
  CHECK(p.start_global == 2 * 3 + 1);
  CHECK(p.start_epoch == 2);
  CHECK(p.total_batches == 2);
  req.set_start_batch(3);
  CHECK(PlanError(req, 10).code() == absl::StatusCode::kOutOfRange);
  req.set_start_batch(0);
  req.set_start_epoch(3);
  CHECK(PlanError(req, 10).message() == "the start position is at or past the last epoch");

  req.set_start_epoch(0);
  req.set_batch_size(11);
  req.set_drop_last(false);  // one partial batch, as DataLoader
  CHECK(MustPlan(req, 10).batches_per_epoch == 1);
  req.set_drop_last(true);
  absl::Status st = PlanError(req, 10);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(st.message() ==
        "batch_size 11 is larger than this rank's shard of the dataset (10 of 10 samples), so "
        "drop_last leaves no batch");
}

// A slot of SmallRequest's batch of 4: its images (8x8x3) and labels (int64).
constexpr uint64_t kSlotBytes = 192 * 4 + 8 * 4;

TEST_CASE("PlanSession holds the ring to --max-ring-bytes and the memory available") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 2);
  AttachLimits limits;
  limits.max_ring_bytes = kSlotBytes * 2;
  CHECK(PlanError(req, 10, limits).ok());
  limits.max_ring_bytes -= 1;
  absl::Status st = PlanError(req, 10, limits);
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(st.message().find("over this daemon's --max-ring-bytes") != absl::string_view::npos);

  limits.max_ring_bytes = 1ull << 30;
  limits.memory_free_bytes = kMemoryHeadroomBytes + kSlotBytes * 2 - 1;
  st = PlanError(req, 10, limits);
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  // The message says why a ring smaller than what is free does not fit.
  INFO(st.message());
  CHECK(st.message().find("and 64.0 MiB are available, of which stokerd leaves 64 MiB free") !=
        absl::string_view::npos);
  CHECK(st.message().find("give the daemon (its container) more memory") !=
        absl::string_view::npos);
  limits.memory_free_bytes = kMemoryHeadroomBytes + kSlotBytes * 2;
  CHECK(PlanError(req, 10, limits).ok());
}

TEST_CASE("PlanSession keeps all sessions' rings within the shm budget") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 2);  // a ring of kSlotBytes * 2 bytes
  AttachLimits limits;
  limits.ring_budget_bytes = 10000;
  limits.ring_used_bytes = 10000 - kSlotBytes * 2;
  limits.sessions = 3;
  CHECK(PlanError(req, 10, limits).ok());
  limits.ring_used_bytes += 1;
  absl::Status st = PlanError(req, 10, limits);
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(st.message().find("--ring-budget-mb of 0.0 MiB has 0.0 MiB left (3 other session(s)") !=
        absl::string_view::npos);
  CHECK(st.message().find("raise --ring-budget-mb") != absl::string_view::npos);
  limits.ring_budget_default = true;  // a share of the memory: the fix is more of it
  st = PlanError(req, 10, limits);
  CHECK(st.message().find("half the memory available to it") != absl::string_view::npos);
  CHECK(st.message().find("more memory or set --ring-budget-mb") != absl::string_view::npos);
  limits.ring_budget_default = false;
  limits.ring_used_bytes = 20000;  // over already (a budget lowered by a restart): no underflow
  CHECK(CheckRingBudget(1, limits).code() == absl::StatusCode::kResourceExhausted);
  limits.ring_budget_bytes = 0;  // unchecked
  CHECK(CheckRingBudget(uint64_t{1} << 40, limits).ok());
}

TEST_CASE("a ring that may deepen has only the slots --max-ring-bytes and the budget allow") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 2);
  req.set_ring_slots(0);
  AttachLimits limits;
  AttachPlan p = MustPlan(req, 10, limits);
  CHECK(p.depth() == kDefaultSlots);
  CHECK(p.slots() == kMaxAdaptiveSlots);
  CHECK(p.ring_bytes == kSlotBytes * kDefaultSlots);  // what it holds at first
  RingSpec rs = RingSpecFor(p, 1);
  CHECK(rs.slot_count == kMaxAdaptiveSlots);
  CHECK(rs.depth == kDefaultSlots);
  limits.max_ring_bytes = kSlotBytes * 10;  // 8 slots fit, 16 do not: doubling stops at 8
  CHECK(MustPlan(req, 10, limits).slots() == 8);
  limits.max_ring_bytes = 1 << 30;
  limits.ring_budget_bytes = kSlotBytes * 5;  // the base fits, no deeper
  p = MustPlan(req, 10, limits);
  CHECK(p.slots() == kDefaultSlots);
  CHECK(p.depth() == kDefaultSlots);
  req.set_ring_slots(6);  // asked for: fixed
  limits = AttachLimits{};
  p = MustPlan(req, 10, limits);
  CHECK(p.slots() == 6);
  CHECK(p.depth() == 6);
}

TEST_CASE("an any-size output gives each sample its whole slot") {
  v1::AttachRequest req = SmallRequest("list.txt", 1, 2);
  req.mutable_pipeline()->set_preset("decode");
  req.mutable_pipeline()->clear_size();
  req.mutable_pipeline()->set_max_decode_pixels(1000);
  AttachPlan p = MustPlan(req, 10);
  CHECK(p.variable_size);
  CHECK(p.sample_bytes() == 3000);
  RingSpec rs = RingSpecFor(p, 7);
  REQUIRE(rs.fields.size() == 2);  // image, label
  const ring::FieldSpec& image = rs.fields[p.image_field];
  CHECK(ring::FieldName(image) == "image");
  CHECK(image.stride == 3000);
  CHECK((image.flags & ring::kFieldFixedShape) == 0);
  CHECK(image.rank == 3);
  CHECK(image.max_shape[0] == 0);  // any height and width, within the room
  CHECK(image.max_shape[1] == 0);
  CHECK(image.max_shape[2] == 3);
  CHECK(rs.session_number == 7);
}

TEST_CASE("a multi-view session's views are fields of their own sizes, before the label") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 3, 0);
  v1::PipelineSpec& pipe = *req.mutable_pipeline();
  pipe.Clear();
  v1::View* big = pipe.add_views();
  big->add_ops()->mutable_random_resized_crop()->add_size(16);
  big->set_count(2);
  v1::View* small = pipe.add_views();
  small->add_ops()->mutable_center_crop()->add_size(8);
  small->add_size(8);
  pipe.mutable_output()->set_dtype("float16");
  AttachPlan p = MustPlan(req, 10);
  REQUIRE(p.fields.size() == 4);
  const char* names[] = {"view0", "view1", "view2", "label"};
  const uint64_t strides[] = {16 * 16 * 3 * 2, 16 * 16 * 3 * 2, 8 * 8 * 3 * 2, 8};
  for (size_t k = 0; k < 4; ++k) {
    INFO(names[k]);
    CHECK(ring::FieldName(p.fields[k]) == names[k]);
    CHECK(p.fields[k].stride == strides[k]);
    CHECK((p.fields[k].flags & ring::kFieldFixedShape) != 0);
  }
  CHECK(p.fields[2].dtype == ring::kFloat16);
  CHECK(p.fields[2].max_shape[0] == 3);  // float: NCHW
  CHECK(p.fields[2].max_shape[1] == 8);
  CHECK(p.view_fields == std::vector<int>{0, 1, 2});
  CHECK(p.image_field == 0);
  CHECK(p.label_field == 3);
  // Views serve images and labels only.
  auto request = PlanRequest(req);
  REQUIRE(request.ok());
  SampleFields masks;
  masks.masks = true;
  auto refused = PlanSession(req, *request, 10, AttachLimits{}, masks);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Matchers::Contains("views with a dataset that has masks"));
}

TEST_CASE("RandomPerspective is refused with boxes, served with masks") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 3, 0);
  v1::PipelineSpec& pipe = *req.mutable_pipeline();
  pipe.Clear();
  pipe.add_ops()->mutable_random_perspective();
  pipe.add_ops()->mutable_center_crop()->add_size(8);
  auto request = PlanRequest(req);
  REQUIRE(request.ok());
  SampleFields boxes;
  boxes.boxes = true;
  boxes.max_boxes = 2;
  auto refused = PlanSession(req, *request, 10, AttachLimits{}, boxes);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Matchers::Contains("ops[0] RandomPerspective with a dataset that has boxes"));
  SampleFields masks;
  masks.masks = true;
  CHECK(PlanSession(req, *request, 10, AttachLimits{}, masks).ok());
  // ElasticTransform moves the image only: refused with masks.
  pipe.mutable_ops(0)->mutable_elastic_transform();
  request = PlanRequest(req);
  REQUIRE(request.ok());
  auto elastic = PlanSession(req, *request, 10, AttachLimits{}, masks);
  CHECK_THAT(std::string(elastic.status().message()),
             Catch::Matchers::Contains("ops[0] ElasticTransform with a dataset that has masks"));
  CHECK(PlanSession(req, *request, 10, AttachLimits{}).ok());
}

TEST_CASE("a detection set's slots hold each sample's room for boxes after the masks") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 3, 0);  // 8x8 uint8 NHWC: 192 bytes
  auto request = PlanRequest(req);
  REQUIRE(request.ok());
  SampleFields fields;
  fields.masks = true;
  fields.boxes = true;
  fields.max_boxes = 5;
  auto plan = PlanSession(req, *request, 10, AttachLimits{}, fields);
  REQUIRE(plan.ok());
  const AttachPlan& p = *plan;
  // image, label, mask, boxes, box_labels, box_flags: each field's rooms
  // after the last's, from a 64-byte boundary.
  REQUIRE(p.fields.size() == 6);
  const char* names[] = {"image", "label", "mask", "boxes", "box_labels", "box_flags"};
  const uint64_t strides[] = {192, 8, 64, 16 * 5, 8 * 5, 5};
  uint64_t end = 0;
  for (size_t k = 0; k < 6; ++k) {
    INFO(names[k]);
    CHECK(ring::FieldName(p.fields[k]) == names[k]);
    CHECK(p.fields[k].stride == strides[k]);
    CHECK(p.fields[k].offset == ring::AlignUp(end, 64));
    end = p.fields[k].offset + strides[k] * 4;
  }
  CHECK(p.slot_data_bytes == end);
  CHECK(p.image_field == 0);
  CHECK(p.mask_field == 2);
  CHECK(p.boxes_field == 3);
  CHECK(p.box_flags_field == 5);
  CHECK(p.box_stride() == 5);
  const ring::FieldSpec& boxes = p.fields[p.boxes_field];
  CHECK(boxes.dtype == ring::kFloat32);
  CHECK(boxes.rank == 2);
  CHECK(boxes.max_shape[0] == 5);
  CHECK(boxes.max_shape[1] == 4);
  CHECK((boxes.flags & ring::kFieldFixedShape) == 0);
  CHECK((p.fields[p.mask_field].flags & ring::kFieldFixedShape) != 0);
  CHECK(p.room_offset(p.box_labels_field, 3) == p.fields[4].offset + 8 * 5 * 3);
  RingSpec rs = RingSpecFor(p, 1);
  REQUIRE(rs.fields.size() == 6);
  CHECK(ring::SameField(rs.fields[5], p.fields[5]));

  fields.max_boxes = 0;  // a set whose images have no annotations still has a box array
  fields.masks = false;
  auto none = PlanSession(req, *request, 10, AttachLimits{}, fields);
  REQUIRE(none.ok());
  CHECK(none->box_stride() == 1);

  fields.max_boxes = ring::kMaxBoxesPerSample + 1;
  auto many = PlanSession(req, *request, 10, AttachLimits{}, fields);
  CHECK(many.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(many.status().message()).find("boxes, over the") != std::string::npos);

  fields.max_boxes = 3;
  req.mutable_pipeline()->set_apply_exif_orientation(true);
  auto exif_request = PlanRequest(req);
  REQUIRE(exif_request.ok());
  auto exif = PlanSession(req, *exif_request, 10, AttachLimits{}, fields);
  CHECK(exif.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(exif.status().message()).find("leave apply_exif_orientation off") !=
        std::string::npos);
}

TEST_CASE("RingSpecFor and AttachResponseFor say what was planned") {
  testing::ScratchDir dir;
  auto root = DataRoot::Open(dir.path());
  REQUIRE(root.ok());
  auto ds = testing::ManifestDataset(**root, dir.path(), "list.txt", 10);
  REQUIRE(ds != nullptr);
  v1::AttachRequest req = SmallRequest("list.txt", 4, 3, 2);
  AttachPlan p = MustPlan(req, ds->size());
  RingSpec rs = RingSpecFor(p, 5);
  CHECK(rs.slot_count == 3);
  CHECK(rs.batch_size == 4);
  REQUIRE(rs.fields.size() == 2);
  CHECK(rs.fields[0].stride == 192);
  CHECK(rs.fields[0].max_shape[0] == 8);
  CHECK(rs.fields[0].max_shape[1] == 8);
  CHECK(rs.batches_per_epoch == 3);
  CHECK(rs.total_batches == 6);
  ring::Geometry g;
  REQUIRE(ring::ComputeGeometry(3, 4, 2, p.slot_data_bytes, &g));
  v1::AttachResponse resp =
      AttachResponseFor(p, *ds, "tag-5", "memfd:stoker-x", "0123456789abcdef0123456789abcdef", g,
                        3000);
  CHECK(resp.session_id() == "tag-5");
  CHECK(resp.ring().ring_name() == "memfd:stoker-x");
  CHECK(resp.ring().ring_token() == "0123456789abcdef0123456789abcdef");
  CHECK(resp.ring().slot_count() == 3);
  CHECK(resp.ring().slot_bytes() == g.slot_bytes);
  REQUIRE(resp.ring().fields_size() == 2);
  CHECK(resp.ring().fields(0).name() == "image");
  CHECK(resp.ring().fields(0).stride() == 192);
  CHECK(resp.ring().fields(0).fixed_shape());
  CHECK(resp.ring().fields(1).name() == "label");
  CHECK(resp.ring().fields(1).offset() == 192 * 4);
  CHECK(resp.ring().fields(1).dtype() == ring::kInt64);
  CHECK(resp.ring().layout_version() == ring::kLayoutVersion);
  CHECK(resp.dataset_size() == 10);
  CHECK(resp.shard_size() == 10);
  CHECK(resp.batches_per_epoch() == 3);
  CHECK(resp.total_batches() == 6);
  CHECK(resp.height() == 8);
  CHECK(resp.channels() == 3);
  CHECK(resp.effective_pipeline().preset() == "eval");
  CHECK(resp.effective_pipeline().ops_size() == 2);  // Resize, CenterCrop
  CHECK(resp.heartbeat_timeout_ms() == 3000);
}

}  // namespace
}  // namespace stoker
