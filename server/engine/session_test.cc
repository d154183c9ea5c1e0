// The session's batch state machine, driven by hand: batches in slots, in
// order; replacement under the skip policy; failed batches under the error
// policy; what a task message carries; ending a session.

#include "server/engine/session.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>

#include "common/clock.h"
#include "testing/room_test_util.h"

namespace stoker {
namespace {

using testing::DecodedResult;
using testing::MakeSession;
using testing::SmallRequest;

// A session over a 10-entry manifest, with its own failure memory.
struct Fixture {
  explicit Fixture(v1::AttachRequest req, int entries = 10) {
    root = *DataRoot::Open(dir.path());
    ds = testing::ManifestDataset(*root, dir.path(), "list.txt", entries);
    REQUIRE(ds != nullptr);
    auto made = MakeSession(ds, req);
    REQUIRE(made.ok());
    s = *made;
    ctx.failure_memory = &memory;
    ctx.on_event = [this] { ++events; };
  }
  // Pops the queue's front, as the dispatcher does when it sends a task.
  SampleTask* Take() {
    REQUIRE_FALSE(s->queue.empty());
    SampleTask* t = s->queue.front();
    s->queue.pop_front();
    return t;
  }
  void Decode(SampleTask* t) { REQUIRE(CompleteSample(*s, *t, DecodedResult(*s, *t), ctx)); }

  testing::ScratchDir dir;
  std::unique_ptr<DataRoot> root;
  std::shared_ptr<const Dataset> ds;
  std::shared_ptr<DaemonSession> s;
  FailureMemory memory;
  BatchContext ctx;
  int events = 0;
};

// The samples of the ready slot whose descriptor is `d`, as a reader finds them.
std::vector<testing::SlotSample> Read(const Fixture& f, const ring::SlotDescriptor* d) {
  const RingOwner& ring = *f.s->ring;
  for (uint32_t slot = 0; slot < ring.header()->slot_count; ++slot) {
    if (ring.descriptor(slot) == d) {
      return testing::ReadSlot(*ring.header(), ring.geometry(), ring.descriptor(slot),
                               ring.slot_data(slot));
    }
  }
  FAIL("no such slot");
  return {};
}

TEST_CASE("batches start in free slots in order and are handed over when full") {
  Fixture f(SmallRequest("list.txt", 4, 2, 1));
  StartBatches(*f.s, f.ctx);
  REQUIRE(f.s->filling.size() == 2);  // both slots
  REQUIRE(f.s->queue.size() == 8);
  for (uint32_t slot = 0; slot < 2; ++slot) {
    const ring::SlotDescriptor* d = f.s->ring->descriptor(slot);
    CHECK(d->state.load() == ring::kFilling);
    CHECK(d->sequence == slot);
    CHECK(d->sample_count == 4);
  }
  // Without shuffle the shard is 0, 1, 2, ...
  for (uint64_t i = 0; i < 4; ++i) {
    SampleTask* t = f.Take();
    CHECK(t->planned_index == i);
    CHECK(t->seq == 0);
    CHECK(t->pos == i);
    f.Decode(t);
  }
  const ring::SlotDescriptor* d0 = f.s->ring->descriptor(0);
  CHECK(d0->state.load() == ring::kReady);
  CHECK(d0->batch_status == ring::kBatchOk);
  const std::vector<testing::SlotSample> recs = Read(f, d0);
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(recs[i].status == ring::kSampleOk);
    CHECK(recs[i].planned_index == i);
    CHECK(recs[i].dataset_index == i);
    CHECK(recs[i].label == static_cast<int64_t>(i % 3));
    CHECK(recs[i].offset == 192 * i);
    CHECK(recs[i].bytes == 192);
    CHECK(recs[i].height == 8);
  }
  CHECK(f.s->batches_produced == 1);
  CHECK(f.s->samples_produced == 4);
  CHECK(f.ctx.samples_total == 4);

  // Slot 0 is ready, not free: nothing starts until the client frees it.
  StartBatches(*f.s, f.ctx);
  CHECK(f.s->filling.size() == 1);
  f.s->ring->descriptor(0)->state.store(ring::kFree);
  StartBatches(*f.s, f.ctx);
  CHECK(f.s->batches_consumed == 1);
  REQUIRE(f.s->filling.count(2) == 1);
  CHECK(f.s->filling.at(2).slot == 0);
  CHECK(f.s->filling.at(2).remaining == 2);  // the epoch's short last batch
  CHECK(f.s->ring->descriptor(0)->sample_count == 2);
  // One epoch of three batches: no fourth, however many slots free up.
  f.s->ring->descriptor(1)->state.store(ring::kFree);
  StartBatches(*f.s, f.ctx);
  CHECK(f.s->next_fill_seq == 3);
}

TEST_CASE("epochs follow one another and each shard is computed once") {
  Fixture f(SmallRequest("list.txt", 5, 2, 0));  // without end
  for (uint64_t seq = 0; seq < 6; ++seq) {
    StartBatches(*f.s, f.ctx);
    REQUIRE(f.s->filling.count(seq) == 1);
    CHECK(f.s->filling.at(seq).epoch == seq / 2);
    CHECK(f.s->filling.at(seq).batch_in_epoch == seq % 2);
    for (int i = 0; i < 5; ++i) {
      SampleTask* t = f.s->queue.front();
      if (t->seq != seq) break;
      f.s->queue.pop_front();
      f.Decode(t);
    }
    f.s->ring->descriptor(seq % 2)->state.store(ring::kFree);
  }
  CHECK(f.s->current_epoch >= 2);
  CHECK(f.s->shards.size() <= 4);
}

TEST_CASE("skip policy: a failed sample is replaced from its shard and the batch keeps its shape") {
  Fixture f(SmallRequest("list.txt", 4, 2, 1));
  StartBatches(*f.s, f.ctx);
  SampleTask* t0 = f.Take();
  SampleTask* t1 = f.Take();
  f.Decode(t0);
  FailSample(*f.s, *t1, "corrupt", f.ctx);
  // Queued again, first, with the next sample of the shard.
  REQUIRE(f.s->queue.front() == t1);
  CHECK(t1->index == 2);
  CHECK(t1->planned_index == 1);
  CHECK(t1->replacements == 1);
  // Its replacement, 2, fails too: the next one not known to be bad is 3.
  f.Take();
  FailSample(*f.s, *t1, "also corrupt", f.ctx);
  CHECK(t1->index == 3);
  f.Take();
  f.Decode(t1);
  for (int i = 0; i < 2; ++i) f.Decode(f.Take());
  const ring::SlotDescriptor* d = f.s->ring->descriptor(0);
  REQUIRE(d->state.load() == ring::kReady);
  CHECK(d->batch_status == ring::kBatchOk);
  CHECK(d->sample_count == 4);
  const std::vector<testing::SlotSample> recs = Read(f, d);
  CHECK(recs[1].status == ring::kSampleReplaced);
  CHECK(recs[1].planned_index == 1);
  CHECK(recs[1].dataset_index == 3);
  CHECK(recs[1].label == 0);  // 3 % 3
  CHECK(recs[1].bytes == 192);
  // Counted once, as the trainer sees it: one sample replaced. The failed
  // replacement is counted apart, and its file is known bad from now on.
  CHECK(f.s->samples_failed == 1);
  CHECK(f.s->samples_replaced == 1);
  CHECK(f.s->replacement_failures == 1);
  CHECK(f.ctx.samples_failed_total == 1);
  REQUIRE(f.s->failures.count(1) == 1);
  CHECK(f.s->failures.at(1).reason == "corrupt");
  CHECK(f.s->failures.at(1).count == 1);
  CHECK(f.s->failures.at(2).reason == "also corrupt");
  CHECK(f.s->failures.at(2).count == 0);  // not planned here: a replacement's try
  CHECK(f.s->failed_by_kind.at("other") == 1);
  REQUIRE(f.memory.datasets().size() == 1);
  CHECK(f.memory.datasets().front().dataset == "list.txt");
  CHECK(f.memory.datasets().front().samples_failed == 1);
  CHECK(f.events == 0);  // events are for the error policy
}

TEST_CASE("skip policy with nothing left to replace it: zeros of the output shape") {
  Fixture f(SmallRequest("list.txt", 2, 2, 1), /*entries=*/2);
  StartBatches(*f.s, f.ctx);
  SampleTask* a = f.Take();
  SampleTask* b = f.Take();
  FailSample(*f.s, *a, "bad", f.ctx);  // replaced by 1
  CHECK(a->index == 1);
  f.Take();
  FailSample(*f.s, *b, "bad too", f.ctx);  // 1 is bad; 0 is bad: none left
  FailSample(*f.s, *a, "bad too", f.ctx);
  const ring::SlotDescriptor* d = f.s->ring->descriptor(0);
  REQUIRE(d->state.load() == ring::kReady);
  CHECK(d->batch_status == ring::kBatchOk);  // the skip policy never fails a batch
  const std::vector<testing::SlotSample> recs = Read(f, d);
  for (int i = 0; i < 2; ++i) {
    CHECK(recs[i].status == ring::kSampleFailed);
    CHECK(recs[i].bytes == 192);
    CHECK(recs[i].height == 8);
  }
  const uint8_t* data = f.s->ring->slot_data(0);
  CHECK(std::all_of(data, data + 2 * 192, [](uint8_t v) { return v == 0; }));
}

TEST_CASE("a sample is replaced kMaxReplacements times at most") {
  Fixture f(SmallRequest("list.txt", 1, 2, 1), /*entries=*/100);
  StartBatches(*f.s, f.ctx);
  SampleTask* t = f.Take();
  for (uint32_t i = 0; i < kMaxReplacements; ++i) {
    FailSample(*f.s, *t, "bad", f.ctx);
    REQUIRE(f.s->queue.front() == t);
    f.Take();
  }
  CHECK(t->replacements == kMaxReplacements);
  FailSample(*f.s, *t, "bad", f.ctx);
  CHECK(f.s->ring->descriptor(0)->state.load() == ring::kReady);
  CHECK(Read(f, f.s->ring->descriptor(0))[0].status == ring::kSampleFailed);
}

TEST_CASE("error policy: a failed sample fails its batch, with the first reason and an event") {
  v1::AttachRequest req = SmallRequest("list.txt", 4, 2, 1);
  req.set_failure_policy(v1::FAILURE_POLICY_ERROR);
  Fixture f(req);
  StartBatches(*f.s, f.ctx);
  SampleTask* t0 = f.Take();
  SampleTask* t1 = f.Take();
  FailSample(*f.s, *t1, "corrupt", f.ctx);
  CHECK(t1->index == 1);  // not replaced
  FailSample(*f.s, *t0, "worse", f.ctx);
  CHECK(f.events == 1);  // one per batch
  REQUIRE(f.s->events.size() == 1);
  CHECK(f.s->events.front().kind() == v1::SessionEvent::KIND_SAMPLE_FAILED);
  CHECK(f.s->events.front().dataset_index() == 1);
  CHECK(f.s->events.front().path() == "img_1.jpg");
  for (int i = 0; i < 2; ++i) f.Decode(f.Take());
  const ring::SlotDescriptor* d = f.s->ring->descriptor(0);
  REQUIRE(d->state.load() == ring::kReady);
  CHECK(d->batch_status == ring::kBatchFailed);
  CHECK(std::string(d->error) == "sample 1 (img_1.jpg) failed: corrupt");
  CHECK(d->sample_count == 4);
  const std::vector<testing::SlotSample> recs = Read(f, d);
  CHECK(recs[0].status == ring::kSampleFailed);
  CHECK(recs[1].status == ring::kSampleFailed);
  CHECK(recs[2].status == ring::kSampleOk);
}

TEST_CASE("a worker's failure, and a size that does not fit, fail the sample") {
  Fixture f(SmallRequest("list.txt", 2, 2, 1));
  StartBatches(*f.s, f.ctx);
  SampleTask* t0 = f.Take();
  worker::ResultMsg r = DecodedResult(*f.s, *t0);
  r.code = 3;
  std::snprintf(r.reason, sizeof(r.reason), "not a JPEG");
  REQUIRE(CompleteSample(*f.s, *t0, r, f.ctx));
  CHECK(f.s->failures.at(0).reason == "not a JPEG");
  f.Take();
  r.reason[0] = '\0';
  REQUIRE(CompleteSample(*f.s, *t0, r, f.ctx));  // now on its replacement, 1
  CHECK(f.s->failures.at(1).reason == "decode failed");
  f.Take();
  r = DecodedResult(*f.s, *t0);
  r.bytes += 1;
  REQUIRE(CompleteSample(*f.s, *t0, r, f.ctx));
  CHECK(f.s->failures.at(2).reason ==
        "worker reported a sample (193 bytes, 8x8, mask 0 bytes, 0 boxes) that does not fit its slot");
  // A task whose batch is gone is left alone.
  SampleTask orphan;
  orphan.seq = 99;
  CHECK_FALSE(CompleteSample(*f.s, orphan, r, f.ctx));
}

TEST_CASE("BuildTaskMsg: the sample's place in its slot, the pipeline, the faults") {
  Fixture f(SmallRequest("list.txt", 4, 2, 1));
  StartBatches(*f.s, f.ctx);
  f.Take();
  f.Take();
  f.Take();
  f.Take();
  SampleTask* t = f.Take();  // batch 1, position 0
  TaskOptions o;
  o.max_file_bytes = 1234;
  o.fault_crash_substring = "img_4";
  auto msg = std::make_unique<worker::TaskMsg>();
  const size_t bytes = BuildTaskMsg(*f.s, *t, o, msg.get());
  CHECK(bytes == worker::TaskHeaderBytes() + std::strlen("img_4.jpg"));
  CHECK(std::string(msg->path, msg->path_bytes) == "img_4.jpg");
  CHECK(msg->ring_id == f.s->number);
  CHECK(msg->out_offset == f.s->ring->geometry().slot_bytes * 1);
  CHECK(msg->out_capacity == 192);
  CHECK(msg->max_file_bytes == 1234);
  CHECK(msg->key.dataset_index == 4);
  CHECK(msg->key.epoch == 0);
  CHECK(msg->params.out_height == 8);
  CHECK(msg->fault == worker::kFaultCrash);
  CHECK(msg->has_range == 0);
  o.fault_crash_substring.clear();
  o.fault_hang_substring = ".jpg";
  auto msg2 = std::make_unique<worker::TaskMsg>();
  BuildTaskMsg(*f.s, *t, o, msg2.get());
  CHECK(msg2->fault == worker::kFaultHang);
}

TEST_CASE("any-size samples each have the most their ops make, in order in the slot") {
  v1::AttachRequest req = SmallRequest("list.txt", 3, 2, 1);
  req.mutable_pipeline()->Clear();
  req.mutable_pipeline()->set_preset("decode");
  req.mutable_pipeline()->set_max_decode_pixels(100);  // 300 bytes a sample
  Fixture f(req);
  REQUIRE(f.s->plan.variable_size);
  REQUIRE(f.s->plan.sample_bytes() == 300);
  StartBatches(*f.s, f.ctx);
  const uint64_t slot0 = 0;
  const uint32_t sides[3][2] = {{5, 4}, {10, 10}, {2, 3}};
  for (uint32_t i = 0; i < 3; ++i) {
    SampleTask* t = f.Take();
    auto msg = std::make_unique<worker::TaskMsg>();
    BuildTaskMsg(*f.s, *t, TaskOptions{}, msg.get());
    CHECK(msg->out_offset == slot0 + 300 * i);
    CHECK(msg->out_capacity == 300);
    worker::ResultMsg r = DecodedResult(*f.s, *t);
    r.height = sides[i][0], r.width = sides[i][1];
    r.bytes = uint64_t{r.height} * r.width * 3;
    REQUIRE(CompleteSample(*f.s, *t, r, f.ctx));
  }
  const std::vector<testing::SlotSample> recs = Read(f, f.s->ring->descriptor(0));
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK(recs[i].status == ring::kSampleOk);
    CHECK(recs[i].offset == 300 * i);
    CHECK(recs[i].height == sides[i][0]);
    CHECK(recs[i].bytes == uint64_t{sides[i][0]} * sides[i][1] * 3);
  }
  // Past its place: a failed sample, not a neighbour overwritten.
  SampleTask* t = f.Take();
  worker::ResultMsg r = DecodedResult(*f.s, *t);
  r.height = 11, r.width = 10, r.bytes = 330;
  REQUIRE(CompleteSample(*f.s, *t, r, f.ctx));
  CHECK(f.s->failures.at(t->planned_index).reason.find("does not fit its slot") !=
        std::string::npos);
}

TEST_CASE("EndSession forgets the session's tasks and tells its client") {
  Fixture f(SmallRequest("list.txt", 4, 2, 1));
  StartBatches(*f.s, f.ctx);
  std::unordered_map<uint64_t, SampleTask*> in_flight;
  SampleTask* t = f.Take();
  t->id = 41;
  t->in_flight = true;
  in_flight[41] = t;
  SampleTask other;
  in_flight[7] = &other;  // another session's
  EndSession(*f.s, "detached by the client", f.ctx, &in_flight);
  CHECK(f.s->ended);
  CHECK(f.s->end_reason == "detached by the client");
  CHECK(f.s->queue.empty());
  CHECK(in_flight.size() == 1);
  CHECK(in_flight.count(7) == 1);
  CHECK(f.s->ring->header()->daemon_state.load() == ring::kStopped);
}

TEST_CASE("a ring deepens from a batch both depths put in slot 0, full time is measured") {
  v1::AttachRequest req = SmallRequest("list.txt", 1, 0, 1);  // ring_slots 0: may deepen
  Fixture f(req, 40);
  FakeClock clock;
  f.ctx.clock = &clock;
  REQUIRE(f.s->plan.depth() == 4);
  REQUIRE(f.s->plan.slots() == 16);
  CHECK(f.s->ring->committed_slots() == 4);
  auto client = testing::RingClient::Open(UniqueFd(::dup(f.s->ring->fd())),
                                          f.s->ring->geometry().total_bytes);
  REQUIRE(client.ok());
  auto decode_all = [&] {
    while (!f.s->queue.empty()) f.Decode(f.Take());
  };
  StartBatches(*f.s, f.ctx);
  decode_all();
  StartBatches(*f.s, f.ctx);  // every slot ready, none filling: full from now
  CHECK(f.s->filling.empty());
  clock.AdvanceMs(1000);
  CHECK(FullNs(*f.s, clock.NowNs()) == 1'000'000'000);

  REQUIRE(f.s->ring->Commit(8).ok());
  CHECK(f.s->ring->committed_slots() == 8);
  CHECK(f.s->ring->committed_bytes() ==
        f.s->ring->geometry().data_offset + 8 * f.s->ring->geometry().slot_bytes);
  REQUIRE(SetDepth(*f.s, 8));
  const uint64_t word = f.s->ring->header()->depth.load();
  CHECK(ring::DepthFrom(word) == 8);  // the next multiple of 4 and 8 from batch 4
  CHECK(ring::DepthCount(word) == 8);
  CHECK(ring::DepthPrev(word) == 4);
  CHECK_FALSE(SetDepth(*f.s, 16));  // the client has not passed batch 8 yet

  std::vector<uint32_t> slot_of;
  for (uint64_t seq = 0; seq < 40; ++seq) {
    REQUIRE((*client)->WaitReady(seq, std::chrono::milliseconds(0)));
    slot_of.push_back(ring::SlotOf(f.s->ring->header()->depth.load(), seq, 16));
    (*client)->Free(seq);
    if (seq == 0) {
      StartBatches(*f.s, f.ctx);  // batch 4 starts in slot 0: no longer full
      clock.AdvanceMs(500);
      CHECK(FullNs(*f.s, clock.NowNs()) == 1'000'000'000);
    }
    StartBatches(*f.s, f.ctx);
    decode_all();
  }
  for (uint64_t seq = 0; seq < 40; ++seq) CHECK(slot_of[seq] == seq % (seq < 8 ? 4 : 8));
  CHECK(SetDepth(*f.s, 16));
  CHECK(f.s->ring->Commit(17).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
