#include "tools/stokerctl/doctor.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/stokerctl/status_view.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace stoker::ctl {

namespace {

// What decode nodes (README.md, "More CPUs than one node has") would do for
// a trainer the workers bind: borrow other machines' CPUs when this node
// has none to add; with decode nodes, whether they are connected and used.
std::string DecodeNodeAdvice(const v1::StatusResponse& st) {
  const v1::AutotuneStatus& at = st.autotune();
  if (st.decode_nodes_size() == 0) {
    if (at.mode() == "auto" && at.workers() < at.max_workers()) return "";
    return absl::StrFormat(
        "decode nodes: this node's %.2f CPUs are all in use; other machines' CPUs can decode "
        "for it (stokerd --decode-node on them, --decode-nodes here: README, \"More CPUs than "
        "one node has\")",
        at.cpu_budget());
  }
  uint32_t slots = 0, connected = 0;
  for (const v1::DecodeNodeStatus& d : st.decode_nodes()) {
    slots += d.slots();
    connected += d.connected();
  }
  if (connected == 0) {
    return absl::StrFormat(
        "decode nodes: none of the %d relay(s) to %d node(s) is connected (stokerctl status "
        "lists them; the log says why: unreachable, refused, or cut off)",
        slots, st.decode_nodes_size());
  }
  if (!st.decode_nodes_open()) {
    return absl::StrCat("decode nodes: connected but given no work: ",
                        st.decode_nodes_reason());
  }
  return absl::StrFormat(
      "more decode nodes: the %d connected relay(s) to %d node(s) are in use; add nodes (or "
      "raise the decode Deployment's replicas)",
      connected, st.decode_nodes_size());
}

constexpr double kPartlyShare = 0.05;
constexpr double kBoundShare = 0.30;
constexpr double kStormRate = 0.05;

std::string Percent(double share) { return absl::StrFormat("%.0f%%", share * 100); }

// The mean of a latency over the window, from two summaries (ms; 0 without
// samples in between).
double WindowMeanMs(const v1::LatencySummary& a, const v1::LatencySummary& b) {
  const double n = static_cast<double>(b.count()) - static_cast<double>(a.count());
  if (n <= 0) return 0;
  const double total = b.mean_ms() * b.count() - a.mean_ms() * a.count();
  return std::max(0.0, total / n);
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kHealthy:
      return "healthy";
    case Verdict::kPartly:
      return "partly data-bound";
    case Verdict::kDataBound:
      return "data-bound";
  }
  return "?";
}

Diagnosis Diagnose(const v1::StatusResponse& before, const v1::StatusResponse& after,
                   double window_seconds) {
  Diagnosis d;
  const double up = after.uptime_seconds() - before.uptime_seconds();
  d.window_seconds = up > 0 ? up : window_seconds;
  const v1::AutotuneStatus& at = after.autotune();
  d.workers = absl::StrFormat("%s, %d worker(s) of at most %d; CPU budget %.2f (%s)",
                              at.mode().empty() ? "fixed" : at.mode(), at.workers(),
                              at.max_workers(), at.cpu_budget(), at.cpu_budget_source());
  d.autotuner = at.phase();
  if (at.decisions_size() > 0) {
    const v1::AutotuneDecision& last = at.decisions(at.decisions_size() - 1);
    d.autotuner += absl::StrFormat("; last change %d -> %d at %.0f s: %s", last.from_workers(),
                                   last.to_workers(), last.at_seconds(), last.reason());
  }
  if (after.sessions_size() == 0) d.daemon_findings.push_back("no session is attached");
  const uint64_t restarts = after.worker_restarts_total() - before.worker_restarts_total();
  if (restarts > 0) {
    d.daemon_findings.push_back(absl::StrFormat(
        "workers were restarted %d time(s) in the window: the log says why (a crash on a "
        "file, a hang, an outside kill)",
        restarts));
  }
  std::map<std::string, const v1::SessionStatus*> old;
  for (const auto& s : before.sessions()) old[s.session_id()] = &s;
  const v1::SessionStatus empty;
  for (const auto& s : after.sessions()) {
    auto it = old.find(s.session_id());
    const v1::SessionStatus& a = it != old.end() ? *it->second : empty;
    const double dt = it != old.end() ? d.window_seconds
                                      : std::min(d.window_seconds, s.uptime_seconds());
    SessionDiagnosis sd;
    sd.session_id = s.session_id();
    sd.client = s.client_name();
    sd.rank = s.rank();
    const double wait = s.client_wait_seconds() - a.client_wait_seconds();
    sd.stall_share = dt > 0 ? std::clamp(wait / dt, 0.0, 1.0) : 0;
    const double delivered =
        static_cast<double>(s.samples_produced()) - static_cast<double>(a.samples_produced());
    const double failed =
        static_cast<double>(s.samples_failed()) - static_cast<double>(a.samples_failed());
    const uint64_t consumed = s.batches_consumed() - a.batches_consumed();
    sd.images_per_second = dt > 0 ? delivered / dt : 0;
    sd.failure_rate = delivered + failed > 0 ? failed / (delivered + failed) : 0;
    sd.read_ms = WindowMeanMs(a.read(), s.read());
    sd.decode_ms = WindowMeanMs(a.decode(), s.decode());
    sd.augment_ms = WindowMeanMs(a.augment(), s.augment());
    sd.idle = consumed == 0 && sd.stall_share < 0.01;
    if (sd.idle) {
      sd.bound = "-";
      sd.findings.push_back(
          "its trainer took no batch in the window and did not wait for one: it is not reading "
          "(evaluating, checkpointing, or stopped)");
      d.sessions.push_back(std::move(sd));
      continue;
    }
    sd.verdict = sd.stall_share >= kBoundShare    ? Verdict::kDataBound
                 : sd.stall_share >= kPartlyShare ? Verdict::kPartly
                                                  : Verdict::kHealthy;
    sd.findings.push_back(absl::StrFormat(
        "its trainer waited for data %s of the time (%.1f of %.1f s), so its GPU was busy at "
        "most %s of it; %.0f images/s",
        Percent(sd.stall_share), wait, dt, Percent(1 - sd.stall_share), sd.images_per_second));
    if (sd.verdict == Verdict::kHealthy) {
      sd.bound = "the consumer";
      sd.findings.push_back(absl::StrFormat(
          "the trainer is the bound: batches wait for it (ring: %d ready, %d filling, %d held, of "
          "%s); nothing to fix in the data path",
          s.ring_ready(), s.ring_filling(), s.ring_leased(), RingDepth(s)));
    } else {
      const double stages[3] = {sd.read_ms, sd.decode_ms, sd.augment_ms};
      const char* names[3] = {"read", "decode", "augment"};
      const int top = static_cast<int>(std::max_element(stages, stages + 3) - stages);
      sd.bound = names[top];
      sd.findings.push_back(absl::StrFormat(
          "the workers bound it, mostly in %s: per sample read %.2f ms, decode %.2f ms, "
          "augment %.2f ms",
          sd.bound, sd.read_ms, sd.decode_ms, sd.augment_ms));
      // What would help, most likely first.
      if (at.mode() == "auto" && at.workers() < at.max_workers()) {
        sd.advice.push_back(absl::StrFormat(
            "wait: the autotuner is growing the pool (%d of at most %d workers; %s)", at.workers(),
            at.max_workers(), at.phase()));
      } else if (at.mode() == "auto") {
        sd.advice.push_back(absl::StrFormat(
            "more CPUs: the pool is at the most the CPU budget allows (%d worker(s); budget "
            "%.2f CPUs from %s, %.1f reserved for %d trainer(s)); raise the container's CPU "
            "limit, or lower --reserve-cpus if the trainers need fewer",
            at.workers(), at.cpu_budget(), at.cpu_budget_source(), at.reserved_cpus(),
            at.trainers()));
      } else {
        sd.advice.push_back(absl::StrFormat(
            "more workers: stokerd runs a fixed --workers %d on a CPU budget of %.2f; "
            "--workers auto grows the pool while trainers wait",
            at.workers(), at.cpu_budget()));
      }
      if (sd.bound == "read") {
        const v1::ReadaheadStatus& ra = after.readahead();
        if (ra.threads() == 0) {
          sd.advice.push_back(
              "readahead on slow storage: it is off; --io-threads 16 --readahead-mb 64 reads "
              "files ahead of the workers");
        } else {
          sd.advice.push_back(absl::StrFormat(
              "readahead on slow storage: raise --readahead-mb (now %.0f MiB, %d threads; %d "
              "sample(s) were dispatched before their readahead began)",
              ra.budget_bytes() / 1048576.0, ra.threads(), ra.late()));
        }
      }
      const std::string& dtype = s.pipeline().output().dtype();
      if (!dtype.empty() && dtype != "uint8") {
        sd.advice.push_back(absl::StrCat(
            "uint8 output with GPU normalize: this session asks for ", dtype,
            " from the workers; Loader(..., device=\"cuda\") serves uint8 NHWC, 1/",
            dtype == "float32" ? "4" : "2",
            " of the bytes, and normalizes on the GPU"));
      }
      if (s.pipeline().size_size() > 0) {
        uint64_t area = 1;
        for (uint32_t v : s.pipeline().size()) area *= v;
        if (s.pipeline().size_size() == 1) area *= s.pipeline().size(0);
        if (area > 256 * 256) {
          sd.advice.push_back(absl::StrFormat(
              "a smaller output: %s px per sample costs the resize and the ring in proportion "
              "(224 is %.0f%% of it)",
              absl::StrJoin(s.pipeline().size(), "x"), 100.0 * 224 * 224 / area));
        }
      }
      if (const std::string nodes = DecodeNodeAdvice(after); !nodes.empty()) {
        sd.advice.push_back(nodes);
      }
    }
    if (sd.failure_rate >= kStormRate) {
      sd.findings.insert(
          sd.findings.begin() + 1,
          absl::StrFormat("a bad-file storm: %s of the samples failed in the window (%.0f)",
                          Percent(sd.failure_rate), failed));
      sd.advice.push_back(
          "bad files: `stokerctl status --failures` lists them; each costs a read and a decode "
          "try, and its replacement another");
    }
    d.verdict = std::max(d.verdict, sd.verdict);
    d.sessions.push_back(std::move(sd));
  }
  // Worst first, then as Status lists them.
  std::stable_sort(d.sessions.begin(), d.sessions.end(),
                   [](const SessionDiagnosis& x, const SessionDiagnosis& y) {
                     return x.stall_share > y.stall_share;
                   });
  return d;
}

std::string RenderDiagnosis(const Diagnosis& d, size_t width) {
  std::string out = absl::StrFormat("stokerd doctor: %s (over %.1f s)\n", VerdictName(d.verdict),
                                    d.window_seconds);
  out += WrapWords("workers:", d.workers, width, 2);
  if (!d.autotuner.empty()) out += WrapWords("autotuner:", d.autotuner, width, 2);
  for (const std::string& f : d.daemon_findings) out += WrapWords("-", f, width, 3);
  for (const SessionDiagnosis& s : d.sessions) {
    out += absl::StrFormat("\nsession %s (%s, rank %d): %s\n", s.session_id,
                           s.client.empty() ? "-" : s.client, s.rank,
                           s.idle ? "idle" : VerdictName(s.verdict));
    for (const std::string& f : s.findings) out += WrapWords("  -", f, width, 5);
    if (!s.advice.empty()) {
      out += "  what would help:\n";
      for (const std::string& a : s.advice) out += WrapWords("    *", a, width, 7);
    }
  }
  return out;
}

std::string DiagnosisJson(const Diagnosis& d) {
  google::protobuf::Struct root;
  auto& f = *root.mutable_fields();
  f["verdict"].set_string_value(VerdictName(d.verdict));
  f["exit_code"].set_number_value(static_cast<int>(d.verdict));
  f["window_seconds"].set_number_value(d.window_seconds);
  f["workers"].set_string_value(d.workers);
  f["autotuner"].set_string_value(d.autotuner);
  auto* df = f["findings"].mutable_list_value();
  for (const std::string& s : d.daemon_findings) df->add_values()->set_string_value(s);
  auto* list = f["sessions"].mutable_list_value();
  for (const SessionDiagnosis& s : d.sessions) {
    auto& o = *list->add_values()->mutable_struct_value()->mutable_fields();
    o["session_id"].set_string_value(s.session_id);
    o["client"].set_string_value(s.client);
    o["rank"].set_number_value(s.rank);
    o["verdict"].set_string_value(s.idle ? "idle" : VerdictName(s.verdict));
    o["stall_share"].set_number_value(s.stall_share);
    o["images_per_second"].set_number_value(s.images_per_second);
    o["bound"].set_string_value(s.bound);
    o["read_ms"].set_number_value(s.read_ms);
    o["decode_ms"].set_number_value(s.decode_ms);
    o["augment_ms"].set_number_value(s.augment_ms);
    o["failure_rate"].set_number_value(s.failure_rate);
    auto* fl = o["findings"].mutable_list_value();
    for (const std::string& x : s.findings) fl->add_values()->set_string_value(x);
    auto* al = o["advice"].mutable_list_value();
    for (const std::string& x : s.advice) al->add_values()->set_string_value(x);
  }
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(root, &json);
  return json;
}

}  // namespace stoker::ctl
