// The doctor's diagnosis from made-up pairs of Status responses: verdicts
// and their exit codes, the bounding stage, the advice, idle and new
// sessions, bad-file storms.

#include "tools/stokerctl/doctor.h"

#include <catch2/catch.hpp>
#include <string>

namespace stoker::ctl {
namespace {

void Latency(v1::LatencySummary* l, uint64_t count, double mean_ms) {
  l->set_count(count);
  l->set_mean_ms(mean_ms);
}

// A daemon at `uptime` with one session that has waited `wait_s` in all,
// delivered `samples` (read/decode/augment ms per sample as given).
v1::StatusResponse Status(double uptime, double wait_s, uint64_t samples, uint64_t batches,
                          double read_ms = 0.1, double decode_ms = 3, double augment_ms = 0.5,
                          uint64_t failed = 0) {
  v1::StatusResponse st;
  st.set_uptime_seconds(uptime);
  auto* at = st.mutable_autotune();
  at->set_mode("auto");
  at->set_workers(4);
  at->set_max_workers(4);
  at->set_cpu_budget(5);
  at->set_cpu_budget_source("affinity: 5 CPUs");
  at->set_reserved_cpus(1);
  at->set_trainers(1);
  at->set_phase("steady at 4");
  st.mutable_readahead()->set_threads(16);
  auto* s = st.add_sessions();
  s->set_session_id("s-1");
  s->set_client_name("train");
  s->set_uptime_seconds(uptime);
  s->set_client_wait_seconds(wait_s);
  s->set_samples_produced(samples);
  s->set_samples_failed(failed);
  s->set_batches_consumed(batches);
  s->set_ring_slots(4);
  s->mutable_pipeline()->mutable_output()->set_dtype("float32");
  s->mutable_pipeline()->add_size(224);
  s->mutable_pipeline()->add_size(224);
  Latency(s->mutable_read(), samples, read_ms);
  Latency(s->mutable_decode(), samples, decode_ms);
  Latency(s->mutable_augment(), samples, augment_ms);
  return st;
}

TEST_CASE("doctor: a starved trainer is data-bound, by decode, at the budget") {
  const auto a = Status(100, 10, 10000, 100);
  const auto b = Status(110, 16, 12000, 130, 0.1, 3.4, 0.5);  // waited 6 of 10 s
  const Diagnosis d = Diagnose(a, b, 10);
  REQUIRE(d.sessions.size() == 1);
  const SessionDiagnosis& s = d.sessions[0];
  CHECK(d.verdict == Verdict::kDataBound);
  CHECK(static_cast<int>(d.verdict) == 2);
  CHECK(s.stall_share == Approx(0.6));
  CHECK(s.images_per_second == Approx(200));
  CHECK(s.bound == "decode");
  CHECK(s.decode_ms == Approx(3 + 0.4 * 6));  // the window's mean: (12000*3.4 - 10000*3) / 2000
  CHECK(s.findings[0].find("waited for data 60%") != std::string::npos);
  CHECK(s.findings[0].find("busy at most 40%") != std::string::npos);
  REQUIRE(s.advice.size() >= 2);
  CHECK(s.advice[0].find("more CPUs") == 0);
  CHECK(s.advice[1].find("uint8 output with GPU normalize") == 0);
  const std::string text = RenderDiagnosis(d, 80);
  CHECK(text.find("stokerd doctor: data-bound") == 0);
  for (size_t i = 0, j; i < text.size(); i = j + 1) {
    j = text.find('\n', i);
    CHECK(j - i <= 80);
  }
  const std::string json = DiagnosisJson(d);
  CHECK(json.find("\"exit_code\":2") != std::string::npos);
  CHECK(json.find("\"bound\":\"decode\"") != std::string::npos);
}

TEST_CASE("doctor: a node out of CPUs is pointed at decode nodes, and told how they fare") {
  const auto a = Status(100, 10, 10000, 100);
  auto b = Status(110, 16, 12000, 130, 0.1, 3.4, 0.5);
  const auto advice = [&](const v1::StatusResponse& after) {
    const Diagnosis d = Diagnose(a, after, 10);
    return d.sessions[0].advice.back();
  };
  CHECK(advice(b).find("decode nodes: this node's 5.00 CPUs are all in use") == 0);
  CHECK(advice(b).find("--decode-nodes") != std::string::npos);
  auto* n = b.add_decode_nodes();
  n->set_address("10.0.0.7:7070");
  n->set_slots(8);
  CHECK(advice(b).find("none of the 8 relay(s) to 1 node(s) is connected") != std::string::npos);
  n->set_connected(8);
  b.set_decode_nodes_reason("closed: no trainer has waited yet");
  CHECK(advice(b) == "decode nodes: connected but given no work: closed: no trainer has waited yet");
  b.set_decode_nodes_open(true);
  CHECK(advice(b).find("more decode nodes: the 8 connected relay(s)") == 0);
  // Still growing the local pool: no word of decode nodes yet.
  auto growing = Status(110, 16, 12000, 130, 0.1, 3.4, 0.5);
  growing.mutable_autotune()->set_workers(2);
  CHECK(advice(growing).find("decode nodes") == std::string::npos);
}

TEST_CASE("doctor: a fed trainer is healthy, the consumer is the bound") {
  const Diagnosis d = Diagnose(Status(100, 10, 10000, 100), Status(110, 10.1, 11000, 110), 10);
  CHECK(d.verdict == Verdict::kHealthy);
  CHECK(d.sessions[0].bound == "the consumer");
  CHECK(d.sessions[0].advice.empty());
}

TEST_CASE("doctor: partly data-bound, slow storage points at readahead") {
  const auto b = Status(110, 11.5, 11000, 110, 9.0, 3, 0.5);
  // The window's read mean: (11000 * 9 - 10000 * 0.1) / 1000 = 98 ms.
  const Diagnosis d = Diagnose(Status(100, 10, 10000, 100), b, 10);
  CHECK(d.verdict == Verdict::kPartly);
  CHECK(d.sessions[0].bound == "read");
  bool readahead = false;
  for (const auto& a : d.sessions[0].advice) readahead |= a.find("readahead") == 0;
  CHECK(readahead);
}

TEST_CASE("doctor: the autotuner still growing, a fixed pool, a bad-file storm") {
  auto b = Status(110, 15, 12000, 130, 0.1, 3, 0.5, /*failed=*/400);
  b.mutable_autotune()->set_workers(2);
  Diagnosis d = Diagnose(Status(100, 10, 10000, 100), b, 10);
  CHECK(d.sessions[0].advice[0].find("the autotuner is growing the pool") != std::string::npos);
  CHECK(d.sessions[0].findings[1].find("bad-file storm: 17%") != std::string::npos);
  b.mutable_autotune()->set_mode("fixed");
  d = Diagnose(Status(100, 10, 10000, 100), b, 10);
  CHECK(d.sessions[0].advice[0].find("more workers: stokerd runs a fixed --workers 2") == 0);
}

TEST_CASE("doctor: an idle trainer, a new session, no session") {
  // Took no batch and waited for none: idle, not healthy nor bound.
  Diagnosis d = Diagnose(Status(100, 10, 10000, 100), Status(110, 10, 10000, 100), 10);
  CHECK(d.sessions[0].idle);
  CHECK(d.verdict == Verdict::kHealthy);
  CHECK(RenderDiagnosis(d, 100).find("): idle") != std::string::npos);
  // A session that attached within the window is measured over its life.
  v1::StatusResponse none;
  none.set_uptime_seconds(100);
  auto fresh = Status(110, 1.5, 400, 10);
  fresh.mutable_sessions(0)->set_uptime_seconds(2);
  d = Diagnose(none, fresh, 10);
  CHECK(d.sessions[0].stall_share == Approx(0.75));
  CHECK(d.verdict == Verdict::kDataBound);
  none.set_uptime_seconds(110);
  d = Diagnose(none, none, 10);
  CHECK(d.sessions.empty());
  CHECK(d.daemon_findings[0] == "no session is attached");
}

}  // namespace
}  // namespace stoker::ctl
