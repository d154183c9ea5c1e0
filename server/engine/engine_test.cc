// The engine as a whole, with its workers as in-process fakes
// (testing/fake_launcher.h) and the test as the client of the ring: every
// sample once and in order, crash attribution and outside kills through the
// real dispatcher, the error policy, Detach and Status. No process is
// spawned; the test waits on conditions with deadlines.

#include "server/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "server/control/daemon_flags.h"
#include "testing/fake_launcher.h"
#include "testing/room_test_util.h"

namespace stoker {
namespace {

using testing::FakeLauncher;
using namespace std::chrono_literals;

struct Fixture {
  explicit Fixture(FakeLauncher::Script script = nullptr, uint32_t entries = 12,
                   const image::DecodeCalibration* calibration = nullptr, bool start = true)
      : fake(std::move(script)) {
    testing::WriteManifest(dir.path(), "list.txt", static_cast<int>(entries));
    // The defaults, without the user's cache folders (no environment).
    v1::DaemonConfig config = DefaultDaemonConfig([](const char*) -> const char* { return nullptr; });
    config.set_data_root(dir.path());
    config.set_socket(dir.path() + "/stokerd.sock");  // names the shm tag only
    config.set_workers(2);
    config.set_keepalive_grace_ms(600000);  // no KeepAlive stream here
    config.set_readahead_mb(1);             // readahead on (of files that do not exist)
    config.set_io_threads(2);
    engine = std::make_unique<Engine>(config, EngineEnv{&fake, nullptr, calibration});
    if (start) REQUIRE(engine->Start().ok());
  }
  ~Fixture() { engine->Stop(); }

  // Attaches and maps the ring as a client would.
  v1::AttachResponse Attach(const v1::AttachRequest& req) {
    auto resp = engine->Attach(req);
    REQUIRE(resp.ok());
    auto fd = engine->RingFd(resp->ring().ring_token());  // the ring socket's lookup
    REQUIRE(fd.ok());
    auto c = testing::RingClient::Open(*std::move(fd), resp->ring().total_bytes());
    REQUIRE(c.ok());
    client = *std::move(c);
    return *resp;
  }

  // Takes batch `seq`: its records, checked against the pattern the fake
  // workers write; then frees its slot.
  std::vector<testing::SlotSample> Take(uint64_t seq, uint64_t sample_bytes) {
    REQUIRE(client->WaitReady(seq, 20s));
    ring::SlotDescriptor* d = client->descriptor(static_cast<uint32_t>(seq % slots));
    const uint8_t* data = client->slot_data(static_cast<uint32_t>(seq % slots));
    std::vector<testing::SlotSample> recs =
        testing::ReadSlot(*client->header(), client->geometry(), d, data);
    for (const auto& r : recs) {
      if (r.status == ring::kSampleFailed) continue;
      const uint8_t want = FakeLauncher::PatternByte(r.dataset_index);
      for (uint64_t b = 0; b < sample_bytes; ++b) REQUIRE(data[r.offset + b] == want);
    }
    batch_status = d->batch_status;
    error = d->error;
    client->Free(seq);
    return recs;
  }

  testing::ScratchDir dir;
  FakeLauncher fake;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<testing::RingClient> client;
  uint32_t slots = 2;
  uint32_t batch_status = 0;
  std::string error;
};

TEST_CASE("an engine with fake workers delivers an epoch, every sample once and in order") {
  Fixture f;
  const v1::AttachResponse resp = f.Attach(testing::SmallRequest("list.txt", 4, 2, 2));
  CHECK(resp.batches_per_epoch() == 3);
  CHECK(resp.total_batches() == 6);
  for (uint64_t seq = 0; seq < 6; ++seq) {
    auto recs = f.Take(seq, 192);
    REQUIRE(recs.size() == 4);
    for (uint32_t i = 0; i < 4; ++i) {
      CHECK(recs[i].status == ring::kSampleOk);
      CHECK(recs[i].dataset_index == (seq % 3) * 4 + i);  // no shuffle
      CHECK(recs[i].planned_index == recs[i].dataset_index);
    }
  }
  v1::StatusResponse st = f.engine->GetStatus(true, true);
  CHECK(st.state() == "serving");
  CHECK(st.samples_total() == 24);
  CHECK(st.samples_failed_total() == 0);
  REQUIRE(st.sessions_size() == 1);
  CHECK(st.sessions(0).batches_produced() == 6);
  CHECK(st.sessions(0).pipeline().preset() == "eval");
  REQUIRE(st.workers_size() == 2);
  CHECK(st.workers(0).samples_done() + st.workers(1).samples_done() == 24);
  CHECK(st.readahead().threads() == 2);
  CHECK(f.fake.tasks_of(0).size() + f.fake.tasks_of(1).size() == 24);

  REQUIRE(f.engine->Detach(resp.session_id(), "detached by the client").ok());
  CHECK(f.engine->GetStatus(false, false).sessions_size() == 0);
  CHECK(f.engine->Detach(resp.session_id(), "again").code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a sample its worker crashes on twice fails and is replaced, the batch keeping its shape") {
  Fixture f([](uint32_t, const worker::TaskMsg&, const std::string& path) {
    FakeLauncher::Reply r;
    if (path == "img_5.jpg") r.act = FakeLauncher::Act::kCrash;
    return r;
  });
  f.Attach(testing::SmallRequest("list.txt", 4, 2, 1));
  f.Take(0, 192);
  auto recs = f.Take(1, 192);
  REQUIRE(recs.size() == 4);
  CHECK(recs[1].planned_index == 5);
  CHECK(recs[1].status == ring::kSampleReplaced);
  CHECK(recs[1].dataset_index == 6);
  CHECK(f.batch_status == ring::kBatchOk);
  f.Take(2, 192);
  v1::StatusResponse st = f.engine->GetStatus(true, true);
  CHECK(st.worker_restarts_total() == kMaxSelfCrashes);
  CHECK(st.samples_failed_total() == 1);
  REQUIRE(st.sessions(0).failures_size() == 1);
  CHECK(st.sessions(0).failures(0).dataset_index() == 5);
  CHECK(st.sessions(0).failures(0).reason().find("a worker died 2 times on this file (last: "
                                                 "channel closed, killed by signal 11") == 0);
  REQUIRE(st.dataset_failures_size() == 1);
  CHECK(st.dataset_failures(0).dataset() == "list.txt");
}

TEST_CASE("a worker killed from outside redoes its samples and blames none") {
  std::atomic<int> slow_seen{0};
  Fixture f([&](uint32_t, const worker::TaskMsg&, const std::string& path) {
    FakeLauncher::Reply r;
    // The first time only: hold the worker on the sample until it is killed.
    if (path == "img_2.jpg" && slow_seen++ == 0) r.act = FakeLauncher::Act::kHang;
    return r;
  });
  f.Attach(testing::SmallRequest("list.txt", 4, 2, 1));
  REQUIRE(f.fake.WaitFor([&] { return slow_seen.load() == 1; }, 20s));
  uint32_t holder = 0;
  for (uint32_t w : {0u, 1u}) {
    const std::vector<uint64_t> t = f.fake.tasks_of(w);
    if (std::count(t.begin(), t.end(), 2) != 0) holder = w;
  }
  std::vector<uint64_t> tasks = f.fake.tasks_of(holder);
  REQUIRE(std::count(tasks.begin(), tasks.end(), 2) == 1);
  REQUIRE(f.fake.KillFromOutside(holder));
  auto recs = f.Take(0, 192);
  CHECK(recs[2].status == ring::kSampleOk);  // redone, not replaced
  CHECK(recs[2].dataset_index == 2);
  f.Take(1, 192);
  f.Take(2, 192);
  v1::StatusResponse st = f.engine->GetStatus(true, false);
  CHECK(st.samples_failed_total() == 0);
  CHECK(st.worker_restarts_total() == 1);
  CHECK(st.sessions(0).failures_size() == 0);
}

TEST_CASE("under the error policy a failing sample fails its batch") {
  Fixture f([](uint32_t, const worker::TaskMsg&, const std::string& path) {
    FakeLauncher::Reply r;
    if (path == "img_1.jpg") {
      r.act = FakeLauncher::Act::kFail;
      r.reason = "not a JPEG";
    }
    return r;
  });
  v1::AttachRequest req = testing::SmallRequest("list.txt", 4, 2, 1);
  req.set_failure_policy(v1::FAILURE_POLICY_ERROR);
  f.Attach(req);
  auto recs = f.Take(0, 192);
  CHECK(f.batch_status == ring::kBatchFailed);
  CHECK(f.error == "sample 1 (img_1.jpg) failed: not a JPEG");
  CHECK(recs[1].status == ring::kSampleFailed);
  CHECK(recs[0].status == ring::kSampleOk);
  f.Take(1, 192);
  CHECK(f.batch_status == ring::kBatchOk);
}

TEST_CASE("Attach refuses what the plan refuses, and Stop ends every session") {
  Fixture f;
  v1::AttachRequest req = testing::SmallRequest("list.txt", 13, 2, 1);
  req.set_drop_last(true);
  auto r = f.engine->Attach(req);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);  // batch > shard: no batch
  req = testing::SmallRequest("missing.txt", 4);
  CHECK(f.engine->Attach(req).status().code() == absl::StatusCode::kNotFound);
  const v1::AttachResponse resp = f.Attach(testing::SmallRequest("list.txt", 4, 2, 0));
  f.engine->Stop();
  CHECK(f.engine->state() == "stopped");
  CHECK(f.client->header()->daemon_state.load() == ring::kStopped);
  CHECK(f.engine->Attach(req).status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("an Attach that comes while the engine starts waits for it, and one that comes while it stops is refused") {
  Fixture f(nullptr, 12, nullptr, /*start=*/false);
  std::atomic<bool> returned{false};
  absl::StatusOr<v1::AttachResponse> early = absl::UnknownError("not yet");
  std::thread trainer([&] {
    early = f.engine->Attach(testing::SmallRequest("list.txt", 4, 2, 1));
    returned = true;
  });
  REQUIRE(f.fake.WaitFor([&] { return f.engine->attaches_waiting() == 1; }, 20s));
  CHECK_FALSE(returned.load());
  CHECK(f.engine->state() == "starting");
  REQUIRE(f.engine->Start().ok());
  trainer.join();
  REQUIRE(early.ok());
  CHECK(early->dataset_size() == 12);

  Fixture g(nullptr, 12, nullptr, /*start=*/false);
  std::thread stopper([&] {
    CHECK(g.fake.WaitFor([&] { return g.engine->attaches_waiting() == 1; }, 20s));
    g.engine->Stop();
  });
  auto refused = g.engine->Attach(testing::SmallRequest("list.txt", 4, 2, 1));
  stopper.join();
  CHECK(refused.status().code() == absl::StatusCode::kUnavailable);
  CHECK(refused.status().message() == "stokerd is stopped");
}

TEST_CASE("the start-up calibration's disabled scales reach every task, and Status shows them") {
  image::DecodeCalibration cal;
  for (int m : {1, 2, 4, 8}) cal.costs.push_back({m, 2.0 * (m == 4 ? 9 : m), 5.0});
  cal.disabled_dct_scales = 1u << 3;  // 4/8
  cal.seconds = 0.25;
  std::mutex mu;
  std::vector<uint32_t> seen;
  Fixture f(
      [&](uint32_t, const worker::TaskMsg& task, const std::string&) {
        std::lock_guard<std::mutex> l(mu);
        seen.push_back(task.params.disabled_dct_scales);
        return FakeLauncher::Reply();
      },
      12, &cal);
  f.Attach(testing::SmallRequest("list.txt", 4, 2, 1));
  for (uint64_t seq = 0; seq < 3; ++seq) f.Take(seq, 1);
  {
    std::lock_guard<std::mutex> l(mu);
    CHECK(seen.size() >= 12);
    for (uint32_t d : seen) CHECK(d == (1u << 3));
  }
  const v1::StatusResponse st = f.engine->GetStatus(false, false);
  REQUIRE(st.has_decode_calibration());
  const v1::DecodeCalibrationStatus& dc = st.decode_calibration();
  REQUIRE(dc.scales_size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK(dc.scales(i).scale() == (1u << i));
    CHECK(dc.scales(i).disabled() == (i == 2));
    CHECK(dc.scales(i).progressive_ms() == 5.0);
  }
  CHECK(dc.scales(2).baseline_ms() == 18.0);
  CHECK(dc.seconds() == 0.25);
}

}  // namespace
}  // namespace stoker
