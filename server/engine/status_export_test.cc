// Status export and the failure memory it reports.

#include "server/engine/status_export.h"

#include <catch2/catch.hpp>

#include "testing/fake_launcher.h"
#include "testing/room_test_util.h"

namespace stoker {
namespace {

TEST_CASE("ExportSession reports a session's progress, ring and failures") {
  testing::ScratchDir dir;
  auto root = *DataRoot::Open(dir.path());
  auto ds = testing::ManifestDataset(*root, dir.path(), "list.txt", 10);
  REQUIRE(ds != nullptr);
  v1::AttachRequest req = testing::SmallRequest("list.txt", 4, 3);
  req.set_client_name("trainer");
  req.set_client_pid(4242);
  auto made = testing::MakeSession(ds, req, 3);
  REQUIRE(made.ok());
  DaemonSession& s = **made;
  FailureMemory memory;
  BatchContext ctx;
  ctx.failure_memory = &memory;
  StartBatches(s, ctx);
  for (int i = 0; i < 4; ++i) {
    SampleTask* t = s.queue.front();
    s.queue.pop_front();
    if (i == 2) {
      FailSample(s, *t, "broken", ctx);
      t = s.queue.front();
      s.queue.pop_front();
    }
    REQUIRE(CompleteSample(s, *t, testing::DecodedResult(s, *t), ctx));
  }
  s.rate_window = {{0, 0}, {2'000'000'000, 100}};

  v1::SessionStatus ss;
  ExportSession(s, s.created_ns + 5'000'000'000, /*include_failures=*/false, &ss);
  CHECK(ss.session_id() == s.id);
  CHECK(ss.client_name() == "trainer");
  CHECK(ss.client_pid() == 4242);
  CHECK(ss.dataset() == "list.txt");
  CHECK(ss.pipeline().preset() == "eval");
  CHECK(ss.pipeline().ops_size() == 2);                 // effective: expanded
  CHECK(ss.requested_pipeline().ops_size() == 0);       // as asked
  CHECK(ss.requested_pipeline().size_size() == 1);
  CHECK(ss.batch_size() == 4);
  CHECK(ss.world_size() == 1);
  CHECK(ss.batches_produced() == 1);
  CHECK(ss.batches_consumed() == 0);
  CHECK(ss.samples_produced() == 4);
  CHECK(ss.samples_failed() == 1);
  CHECK(ss.samples_replaced() == 1);
  CHECK(ss.ring_slots() == 3);
  CHECK(ss.ring_ready() == 1);
  CHECK(ss.ring_filling() == 2);
  CHECK(ss.ring_leased() == 0);
  CHECK(ss.ring_bytes() == s.ring->geometry().total_bytes);
  CHECK(ss.ring_name() == s.ring->name());
  CHECK(ss.images_per_second() == Approx(50.0));
  CHECK(ss.uptime_seconds() == Approx(5.0));
  CHECK(ss.failures_size() == 0);
  // A client claiming more consumed than produced is shown no more.
  s.ring->header()->batches_consumed.store(99);
  ExportSession(s, s.created_ns, /*include_failures=*/true, &ss);
  CHECK(ss.batches_consumed() == 1);
  REQUIRE(ss.failures_size() == 1);
  CHECK(ss.failures(0).path() == "img_2.jpg");
  CHECK(ss.failures(0).reason() == "broken");
  CHECK(ss.failures(0).dataset_index() == 2);
  CHECK(ss.failures(0).count() == 1);
}

TEST_CASE("the failure memory keeps its bounds, most recent dataset first") {
  FailureMemory m;
  m.Remember("a", 5, "a/5.jpg", "bad");
  m.Remember("b", 1, "b/1.jpg", "bad");
  m.Remember("a", 2, "a/2.jpg", "worse");
  m.Remember("a", 5, "a/5.jpg", "bad again");
  REQUIRE(m.datasets().size() == 2);
  const DatasetFailureLog& a = m.datasets().front();
  CHECK(a.dataset == "a");
  CHECK(a.samples_failed == 3);
  CHECK(a.by_path.at("a/5.jpg").count == 2);
  CHECK(a.by_path.at("a/5.jpg").reason == "bad");  // the first reason stays

  v1::StatusResponse r;
  ExportDatasetFailures(m, &r);
  REQUIRE(r.dataset_failures_size() == 2);
  CHECK(r.dataset_failures(0).dataset() == "a");
  REQUIRE(r.dataset_failures(0).failures_size() == 2);
  CHECK(r.dataset_failures(0).failures(0).dataset_index() == 2);  // by index
  CHECK(r.dataset_failures(0).failures(1).dataset_index() == 5);

  for (size_t i = 0; i < kKeptFailureDatasets; ++i)
    m.Remember("d" + std::to_string(i), 0, "x", "r");
  CHECK(m.datasets().size() == kKeptFailureDatasets);
  CHECK(m.datasets().back().dataset == "d0");  // "a" and "b" went

  FailureMemory many;
  for (size_t i = 0; i < kKeptFailuresPerDataset + 5; ++i) {
    many.Remember("big", i, "p" + std::to_string(i), "r");
  }
  CHECK(many.datasets().front().by_path.size() == kKeptFailuresPerDataset);
  CHECK(many.datasets().front().failures_not_kept == 5);
  CHECK(many.datasets().front().samples_failed == kKeptFailuresPerDataset + 5);

  FailureMemory wide;
  const std::string long_path(4000, 'p');
  size_t kept = 0;
  for (size_t i = 0; i < 100; ++i) {
    wide.Remember("wide", i, long_path + std::to_string(i), "r");
  }
  kept = wide.datasets().front().by_path.size();
  CHECK(kept > 60);  // 256 KiB of ~4 KB paths
  CHECK(kept < 70);
  CHECK(wide.datasets().front().failures_not_kept == 100 - kept);
  CHECK(wide.datasets().front().bytes <= kKeptFailureBytesPerDataset);
}

TEST_CASE("ExportWorkers and ExportReadahead") {
  testing::FakeLauncher fake;
  FakeClock clock;
  Poller poller;
  REQUIRE(poller.Init().ok());
  WorkerPool pool(&fake, &clock, &poller, 1000);
  REQUIRE(pool.Start(2).ok());
  REQUIRE(fake.KillFromOutside(1));
  bool died = false;
  for (int i = 0; i < 500 && !died; ++i) {
    for (uint32_t w : poller.Wait(20)) {
      if (pool.Service(w, [](const worker::ResultMsg&) {})) {
        pool.Bury(w, "channel closed", false);
        died = true;
      }
    }
  }
  REQUIRE(died);
  v1::StatusResponse r;
  ExportWorkers(pool, &r);
  REQUIRE(r.workers_size() == 2);
  CHECK(r.workers(0).id() == 0);
  CHECK(r.workers(0).state() == "idle");
  CHECK(r.workers(0).pid() == pool.worker(0).pid);
  CHECK(r.workers(1).state() == "restarting");
  CHECK(r.workers(1).pid() == 0);
  CHECK(r.workers(1).restarts() == 1);
  CHECK(r.workers(1).crashes() == 1);

  v1::DaemonConfig config;
  v1::ReadaheadStatus ra;
  ExportReadahead(nullptr, config, &ra);
  CHECK(ra.threads() == 0);
}

}  // namespace
}  // namespace stoker
