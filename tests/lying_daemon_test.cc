// The client against a daemon that lies: a real gRPC server on a Unix socket
// and a real shared-memory ring (RingOwner), whose Attach answer, ring header
// or sample records disagree with each other. The client must refuse each
// with DATA_LOSS before it sizes a view from the lie, never read past the
// ring. The honest variant of the same fake must attach and deliver, so that
// each refusal is the lie's doing.

#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "server/engine/ring_handover.h"
#include "pipeline/sample_fields.h"
#include "server/engine/ring_owner.h"
#include "stoker/client.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.grpc.pb.h"
#include "testing/daemon_harness.h"

namespace stoker {
namespace {

using testing::TempDir;

constexpr uint32_t kSlots = 2, kBatch = 2, kSide = 32;
constexpr uint64_t kSampleBytes = kSide * kSide * 3;

// What a test changes in an honest Attach: the response, and the ring as it
// is handed out (its header, its first slot).
using Lie = std::function<void(v1::AttachResponse*, RingOwner*)>;

class FakeStoker final : public v1::Stoker::Service {
 public:
  // `variable`: a variable-size decode ring (no fixed shape), as stokerd
  // makes for pipeline "decode" without a size.
  FakeStoker(Lie lie, bool variable) : lie_(std::move(lie)), variable_(variable) {}

  grpc::Status Attach(grpc::ServerContext*, const v1::AttachRequest*,
                      v1::AttachResponse* resp) override {
    RingSpec spec;
    spec.slot_count = kSlots;
    spec.batch_size = kBatch;
    const uint32_t side = variable_ ? 0 : kSide;
    spec.fields.push_back(pipeline::MakeField(ring::kImageField, ring::kUint8, {side, side, 3},
                                              kSampleBytes, !variable_));
    spec.fields.push_back(pipeline::MakeField(ring::kLabelField, ring::kInt64, {}, 8, true));
    spec.layout = ring::kNHWC;
    spec.batches_per_epoch = 50;
    spec.total_batches = 50;
    const std::string name =
        "stoker-test-lying-" + std::to_string(::getpid()) + "-" + std::to_string(++n_);
    auto r = RingOwner::Create(name, spec);
    if (!r.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, std::string(r.status().message()));
    ring_ = std::move(*r);
    const ring::Geometry& g = ring_->geometry();
    resp->set_session_id("fake-" + std::to_string(n_));
    auto* ri = resp->mutable_ring();
    ri->set_ring_name(ring_->name());
    ri->set_ring_token(token_);
    ri->set_total_bytes(g.total_bytes);
    ri->set_slot_count(kSlots);
    ri->set_slot_bytes(g.slot_bytes);
    for (const ring::FieldSpec& f : ring_->fields()) *ri->add_fields() = pipeline::FieldInfoOf(f);
    ri->set_layout_version(ring::kLayoutVersion);
    ri->set_data_offset(g.data_offset);
    ri->set_descriptor_offset(g.descriptor_offset);
    resp->set_dataset_size(100);
    resp->set_shard_size(100);
    resp->set_batches_per_epoch(50);
    resp->set_total_batches(50);
    resp->set_height(variable_ ? 0 : kSide);
    resp->set_width(variable_ ? 0 : kSide);
    resp->set_channels(3);
    resp->set_heartbeat_timeout_ms(3000);
    resp->mutable_effective_pipeline()->mutable_output()->set_dtype("uint8");
    resp->mutable_effective_pipeline()->mutable_output()->set_layout("nhwc");
    // Batch 0, ready: two good samples of the shape above.
    ring::SlotDescriptor* d = ring_->descriptor(0);
    d->sequence = 0;
    d->sample_count = kBatch;
    for (uint32_t i = 0; i < kBatch; ++i) {
      ring::SampleRecord* r = ring::Record(d, ring_->geometry(), i);
      *r = ring::SampleRecord{};
      r->dataset_index = r->planned_index = i;
      ring::FieldRecord* fr = ring::FieldRecords(r);
      fr[0] = ring::FieldRecord{{kSide, kSide, 3, 0, 0}, 0};
      fr[1] = ring::FieldRecord{};
    }
    lie_(resp, ring_.get());
    d->state.store(ring::kReady, std::memory_order_release);
    return grpc::Status::OK;
  }

  grpc::Status KeepAlive(grpc::ServerContext* ctx, const v1::KeepAliveRequest*,
                         grpc::ServerWriter<v1::SessionEvent>*) override {
    while (!ctx->IsCancelled() && !stop_.load()) {
      ring_->header()->daemon_heartbeat.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return grpc::Status::OK;
  }

  grpc::Status Detach(grpc::ServerContext*, const v1::DetachRequest*,
                      v1::DetachResponse*) override {
    return grpc::Status::OK;
  }

  void Stop() { stop_.store(true); }

  // The ring socket's lookup: the ring's fd, or with `unsealed` a copy of
  // the ring in memory that is not sealed against shrinking.
  absl::StatusOr<UniqueFd> RingFd(std::string_view token, bool unsealed) {
    if (token != token_ || ring_ == nullptr) return absl::NotFoundError("no such ring");
    if (!unsealed) return UniqueFd(::dup(ring_->fd()));
    const uint64_t bytes = ring_->geometry().total_bytes;
    UniqueFd copy(::memfd_create("unsealed", MFD_CLOEXEC));
    if (!copy.valid() || ::ftruncate(copy.get(), static_cast<off_t>(bytes)) != 0 ||
        !WriteAll(copy.get(), ring_->header(), bytes)) {
      return absl::InternalError("cannot copy the ring");
    }
    return copy;
  }

 private:
  Lie lie_;
  bool variable_;
  int n_ = 0;
  const std::string token_ = NewRingToken();
  std::unique_ptr<RingOwner> ring_;
  std::atomic<bool> stop_{false};
};

// Serves a FakeStoker with `lie` and attaches to it; returns the first batch
// (or the refusal of the Attach or of Next).
absl::Status AttachAndTake(Lie lie, bool variable = false, bool unsealed = false) {
  TempDir dir;
  const std::string socket = dir.path() + "/fake.sock";
  FakeStoker service(std::move(lie), variable);
  auto handover = RingHandover::Start(
      socket + ring::kRingSocketSuffix, 0600,
      [&](std::string_view t) { return service.RingFd(t, unsealed); });
  REQUIRE(handover.ok());
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  b.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  REQUIRE(server != nullptr);
  absl::Status result;
  {
    auto client = Client::Connect(socket);
    REQUIRE(client.ok());
    AttachOptions o;
    o.dataset = "ds";
    o.batch_size = kBatch;
    o.ring_slots = kSlots;
    auto s = (*client)->Attach(o);
    if (!s.ok()) {
      result = s.status();
    } else {
      auto batch = (*s)->Next(5000);
      result = batch.status();
      if (batch.ok()) {
        // Every view of it lies within the slot it came from.
        CHECK(batch->size() == kBatch);
        CHECK(batch->height(1) == kSide);
        CHECK(batch->width(1) == kSide);
      }
    }
  }
  service.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return result;
}

TEST_CASE("a lying daemon: the honest fake attaches and delivers") {
  CHECK(AttachAndTake([](v1::AttachResponse*, RingOwner*) {}).ok());
  CHECK(AttachAndTake([](v1::AttachResponse*, RingOwner*) {}, /*variable=*/true).ok());
}

TEST_CASE("a lying daemon: a ring not sealed against shrinking is refused") {
  // Such a daemon could cut the ring short under the client's mapping.
  absl::Status st = AttachAndTake([](v1::AttachResponse*, RingOwner*) {}, false, true);
  INFO(st.ToString());
  CHECK(absl::IsDataLoss(st));
  CHECK(absl::StrContains(st.message(), "not sealed"));
}

TEST_CASE("a lying daemon: a shape in Attach that is not the sample size is refused") {
  auto expect_loss = [](Lie lie, const char* what) {
    absl::Status st = AttachAndTake(std::move(lie));
    INFO(what << ": " << st.ToString());
    CHECK(absl::IsDataLoss(st));
  };
  // 20,000,000 x 32 x 3 bytes would size every view at 1.9 GB over 3 KB.
  expect_loss([](v1::AttachResponse* r, RingOwner*) { r->set_height(20000000); }, "height");
  expect_loss([](v1::AttachResponse* r, RingOwner*) { r->set_channels(4); }, "channels");
  expect_loss([](v1::AttachResponse* r, RingOwner*) { r->set_width(0); }, "no width");
  expect_loss(
      [](v1::AttachResponse* r, RingOwner*) {
        r->mutable_ring()->mutable_fields(0)->set_fixed_shape(false);
      },
      "a variable-size ring with a fixed shape");
  expect_loss(
      [](v1::AttachResponse* r, RingOwner*) { r->mutable_ring()->mutable_fields(0)->set_stride(1); },
      "an image room smaller than its shape");
  expect_loss(
      [](v1::AttachResponse* r, RingOwner*) { r->mutable_ring()->mutable_fields(1)->set_dtype(1); },
      "a label of bytes");
  expect_loss(
      [](v1::AttachResponse* r, RingOwner*) {
        r->mutable_ring()->mutable_fields(1)->set_offset(uint64_t{1} << 39);
      },
      "a field past its slot");
  expect_loss([](v1::AttachResponse* r, RingOwner*) { r->mutable_ring()->clear_fields(); },
              "no fields");
  expect_loss(
      [](v1::AttachResponse* r, RingOwner*) { r->mutable_ring()->mutable_fields(1)->set_name("image"); },
      "a field named twice");
}

TEST_CASE("a lying daemon: a ring header that disagrees with Attach is refused") {
  auto expect_loss = [](Lie lie, const char* what) {
    absl::Status st = AttachAndTake(std::move(lie));
    INFO(what << ": " << st.ToString());
    CHECK(absl::IsDataLoss(st));
  };
  expect_loss(
      [](v1::AttachResponse*, RingOwner* ring) { ring->header()->fields[0].max_shape[0] = 31; },
      "height");
  expect_loss(
      [](v1::AttachResponse*, RingOwner* ring) { ring->header()->fields[0].dtype = ring::kFloat32; },
      "dtype");
  expect_loss(
      [](v1::AttachResponse*, RingOwner* ring) { ring->header()->fields[1].offset += 64; },
      "a label elsewhere");
  expect_loss([](v1::AttachResponse*, RingOwner* ring) { ring->header()->layout = ring::kNCHW; },
              "layout");
}

TEST_CASE("a lying daemon: a record whose field shape is not as the header bounds it is refused") {
  auto expect_loss = [](Lie lie, const char* what) {
    for (bool variable : {false, true}) {
      absl::Status st = AttachAndTake(lie, variable);
      INFO(what << (variable ? " (variable size): " : ": ") << st.ToString());
      CHECK(absl::IsDataLoss(st));
    }
  };
  auto field = [](RingOwner* ring, uint32_t sample, uint32_t k) -> ring::FieldRecord& {
    return ring::FieldRecords(ring::Record(ring->descriptor(0), ring->geometry(), sample))[k];
  };
  expect_loss([&](v1::AttachResponse*, RingOwner* ring) { field(ring, 1, 0).shape[2] = 4; },
              "four channels");
  expect_loss([&](v1::AttachResponse*, RingOwner* ring) { field(ring, 0, 0).shape[3] = 1; },
              "a dimension past the rank");
  expect_loss([&](v1::AttachResponse*, RingOwner* ring) { field(ring, 1, 1).shape[0] = 2; },
              "a label with a shape");
  expect_loss(
      [&](v1::AttachResponse*, RingOwner* ring) {
        ring::Record(ring->descriptor(0), ring->geometry(), 0)->status = 9;
      },
      "an unknown status");
}

TEST_CASE("a lying daemon: a failed sample whose shape is not its size is refused") {
  for (bool variable : {false, true}) {
    absl::Status st = AttachAndTake(
        [](v1::AttachResponse*, RingOwner* ring) {
          ring::SampleRecord* r = ring::Record(ring->descriptor(0), ring->geometry(), 1);
          r->status = ring::kSampleFailed;
          ring::FieldRecord& image = ring::FieldRecords(r)[0];
          image.shape[0] = image.shape[1] = 40000;  // 4.8 GB of view over a 12 KB slot
        },
        variable);
    INFO((variable ? "variable size: " : "fixed shape: ") << st.ToString());
    CHECK(absl::IsDataLoss(st));
  }
}

}  // namespace
}  // namespace stoker
