#include "tools/stokerctl/status_view.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/volume_pipeline.h"
#include "stoker/v1/stoker.grpc.pb.h"

namespace stoker::ctl {
namespace {

constexpr char kEllipsis[] = "\u2026";  // one character, three bytes
constexpr size_t kGap = 2;               // spaces between columns

// Characters, not bytes, of UTF-8 text.
size_t Len(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The byte offset of character `chars` of s (s.size() past its end).
size_t ByteAt(std::string_view s, size_t chars) {
  size_t i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && chars-- == 0) break;
  }
  return i;
}

std::string Shorten(const std::string& s, size_t width, Trim how) {
  const size_t len = Len(s);
  if (len <= width) return s;
  if (width == 0) return "";
  if (how == Trim::kHead) return kEllipsis + s.substr(ByteAt(s, len - (width - 1)));
  return s.substr(0, ByteAt(s, width - 1)) + kEllipsis;
}

// Items joined by two spaces, a new line where the next would pass `width`.
std::string Wrap(const std::vector<std::string>& items, size_t width) {
  std::string out, line;
  for (const std::string& it : items) {
    if (!line.empty() && Len(line) + kGap + Len(it) > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : "  ") + Shorten(it, width, Trim::kTail);
  }
  return out + line + "\n";
}

}  // namespace

std::string RingDepth(const v1::SessionStatus& s) {
  const uint32_t depth = s.ring_depth() != 0 ? s.ring_depth() : s.ring_slots();
  if (depth >= s.ring_slots()) return absl::StrCat(depth);
  return absl::StrCat(depth, "/", s.ring_slots());
}

std::string WrapWords(std::string_view head, std::string_view text, size_t width, size_t indent) {
  std::string out, line = std::string(head) + "  ";
  bool fresh = true;  // nothing on `line` but its head or indent
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!fresh && Len(line) + 1 + Len(word) > width) {
      out += Shorten(line, width, Trim::kTail) + "\n";
      line.assign(std::min(indent, width / 2), ' ');
      fresh = true;
    }
    if (!fresh) line += ' ';
    line += word;
    fresh = false;
  }
  return out + Shorten(line, width, Trim::kTail) + "\n";
}

namespace {

// The sessions table's PIPELINE cell: the preset's name, or "custom".
std::string PipelineCell(const v1::PipelineSpec& p) {
  return p.preset().empty() ? "custom" : p.preset();
}

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
}

std::string Ms(const v1::LatencySummary& l) {
  if (l.count() == 0) return "-";
  return absl::StrFormat("%.1f/%.1f", l.p50_ms(), l.p99_ms());
}

}  // namespace

size_t TerminalWidth() {
  struct winsize ws = {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && n > 0 && n < 100000) return static_cast<size_t>(n);
  }
  return 80;
}

std::string LayoutTable(const std::vector<Column>& columns,
                        const std::vector<std::vector<std::string>>& rows, size_t width) {
  const size_t n = columns.size();
  std::vector<size_t> natural(n);
  for (size_t i = 0; i < n; ++i) {
    natural[i] = Len(columns[i].header);
    for (const auto& r : rows) {
      if (i < r.size()) natural[i] = std::max(natural[i], Len(r[i]));
    }
  }
  auto floor_of = [&](size_t i, bool soft) {
    if (columns[i].trim == Trim::kNone) return natural[i];
    return std::min(natural[i], std::max<size_t>(1, soft ? columns[i].soft_width
                                                         : columns[i].min_width));
  };
  // Widths for the columns shown: natural, then the widest trimmed column
  // shortened one character at a time down to its floor until it fits.
  auto fit = [&](const std::vector<bool>& shown, bool soft, std::vector<size_t>* w) {
    w->assign(natural.begin(), natural.end());
    size_t total = 0, count = 0;
    for (size_t i = 0; i < n; ++i) {
      if (shown[i]) total += (*w)[i] + (count++ ? kGap : 0);
    }
    while (total > width) {
      size_t pick = n;
      for (size_t i = 0; i < n; ++i) {
        if (shown[i] && (*w)[i] > floor_of(i, soft) && (pick == n || (*w)[i] > (*w)[pick])) {
          pick = i;
        }
      }
      if (pick == n) break;
      --(*w)[pick];
      --total;
    }
    return total <= width;
  };
  std::vector<bool> shown(n, true);
  std::vector<size_t> w;
  if (!fit(shown, true, &w)) {
    // The columns that are never dropped, then the others by rank (highest
    // first) wherever one still fits.
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i) {
      shown[i] = columns[i].rank == Column::kAlways;
      if (!shown[i]) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return columns[a].rank > columns[b].rank; });
    const bool fits = fit(shown, true, &w);
    for (size_t i : order) {
      if (!fits) break;
      shown[i] = true;
      if (!fit(shown, true, &w)) shown[i] = false;
    }
    if (!fit(shown, true, &w)) fit(shown, false, &w);
  }
  std::vector<size_t> visible;
  for (size_t i = 0; i < n; ++i) {
    if (shown[i]) visible.push_back(i);
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells, bool header) {
    std::string line;
    for (size_t k = 0; k < visible.size(); ++k) {
      const size_t i = visible[k];
      const std::string& raw = header ? columns[i].header : (i < cells.size() ? cells[i] : "");
      const std::string cell = Shorten(raw, w[i], columns[i].trim == Trim::kHead ? Trim::kHead
                                                                                 : Trim::kTail);
      line += cell;
      if (k + 1 < visible.size()) line += std::string(w[i] - Len(cell) + kGap, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();  // an empty last cell
    out += Shorten(line, width, Trim::kTail) + "\n";
  };
  emit({}, true);
  for (const auto& r : rows) emit(r, false);
  return out;
}

std::string RenderStatus(const v1::StatusResponse& s, size_t width) {
  std::string out = Wrap(
      {absl::StrCat("stokerd ", s.version()), absl::StrCat("pid ", s.pid()),
       absl::StrCat("up ", Duration(s.uptime_seconds())), s.state(),
       absl::StrCat("workers ", s.workers_size()), absl::StrCat("sessions ", s.sessions_size()),
       absl::StrCat("samples ", s.samples_total(), " (", s.samples_failed_total(), " failed)"),
       absl::StrCat("worker restarts ", s.worker_restarts_total()),
       absl::StrFormat("rings %.0f of %.0f MiB", s.ring_used_bytes() / 1048576.0,
                       s.ring_budget_bytes() / 1048576.0),
       absl::StrCat("reclaimed ", s.sessions_reclaimed())},
      width);
  out += "\n";
  const v1::ReadaheadStatus& ra = s.readahead();
  if (ra.threads() == 0) {
    out += "readahead off\n\n";
  } else {
    out += Wrap({"readahead", absl::StrCat(ra.threads(), " threads"),
                 absl::StrFormat("budget %.0f MiB", ra.budget_bytes() / 1048576.0),
                 absl::StrCat("read ", ra.files_read(), " files (", ra.cold_files(), " cold)"),
                 absl::StrCat("already cached ", ra.files_cached()),
                 absl::StrCat("late ", ra.late()),
                 absl::StrFormat("window %.1f MiB (max %.1f)", ra.window_bytes() / 1048576.0,
                                 ra.window_bytes_max() / 1048576.0)},
                width);
    out += "\n";
  }
  if (!s.has_decode_calibration()) {
    out += "decode calibration off\n\n";
  } else {
    // Baseline/progressive ms per image at each DCT scale; "disabled": never
    // chosen by this daemon.
    const v1::DecodeCalibrationStatus& dc = s.decode_calibration();
    std::vector<std::string> parts = {
        "decode calibration",
        dc.source().empty() || dc.source() == "measured" ? absl::StrFormat("%.2fs", dc.seconds())
                                                          : "loaded"};
    for (const v1::DecodeScaleCost& c : dc.scales()) {
      parts.push_back(absl::StrFormat("%u/8 %.2f/%.2f ms%s", c.scale(), c.baseline_ms(),
                                      c.progressive_ms(), c.disabled() ? " disabled" : ""));
    }
    out += Wrap(parts, width);
    out += "\n";
  }
  if (s.has_prepared_cache()) {
    const v1::PreparedCacheStatus& pc = s.prepared_cache();
    out += Wrap({"prepared cache", pc.dir(),
                 absl::StrFormat("%.1f of %.0f MiB", pc.bytes() / 1048576.0,
                                 pc.budget_bytes() / 1048576.0),
                 absl::StrCat(pc.entries(), " entries"),
                 absl::StrFormat("volumes %d hits, %d written", pc.volume_hits(), pc.volume_writes()),
                 absl::StrFormat("images %d hits, %d written", pc.image_hits(), pc.image_writes()),
                 absl::StrCat("evicted ", pc.evictions())},
                width);
    out += "\n";
  }
  if (s.has_transcode_cache()) {
    const v1::TranscodeCacheStatus& tc = s.transcode_cache();
    out += Wrap(
        {"transcode cache", tc.dir(),
         absl::StrFormat("%.1f of %.0f MiB", tc.bytes() / 1048576.0, tc.budget_bytes() / 1048576.0),
         absl::StrCat(tc.entries(), " entries"),
         absl::StrFormat("hit rate %.1f%% (%d hits, %d misses)", 100.0 * tc.hit_rate(), tc.hits(),
                         tc.misses()),
         absl::StrCat("written ", tc.writes()),
         absl::StrFormat("transcode %.1fs", tc.transcode_seconds()),
         absl::StrCat("evicted ", tc.evictions()), absl::StrCat("bad ", tc.bad_entries()),
         absl::StrCat("write failures ", tc.write_failures()),
         absl::StrCat("refused ", tc.writes_refused())},
        width);
    out += "\n";
    if (!tc.writes_paused_reason().empty()) {
      out += absl::StrFormat(
          "  transcode cache writes paused: %s; back on in %.0f s (files it cannot keep are "
          "decoded from their originals)\n",
          tc.writes_paused_reason(), tc.writes_resume_in_seconds());
    }
  }
  if (s.has_autotune()) {
    const v1::AutotuneStatus& at = s.autotune();
    std::vector<std::string> parts = {
        absl::StrCat("workers ", at.mode()),
        absl::StrCat(at.workers(), " of at most ", at.max_workers()),
        absl::StrFormat("CPU budget %.2f (%s)", at.cpu_budget(), at.cpu_budget_source())};
    if (at.mode() == "auto") {
      parts.push_back(absl::StrFormat("reserved %.1f for %d trainer(s)", at.reserved_cpus(),
                                      at.trainers()));
    }
    parts.push_back(at.phase());
    out += Wrap(parts, width);
    // The latest decisions, newest last (three at most here; Status has 32).
    const int n = at.decisions_size();
    for (int i = std::max(0, n - 3); i < n; ++i) {
      const v1::AutotuneDecision& d = at.decisions(i);
      out += Shorten(absl::StrFormat("  at %s: %d -> %d: %s", Duration(d.at_seconds()),
                                     d.from_workers(), d.to_workers(), d.reason()),
                     width, Trim::kTail) +
             "\n";
    }
    out += "\n";
  }
  constexpr int kAlways = Column::kAlways;
  std::vector<std::vector<std::string>> rows;
  for (const auto& x : s.workers()) {
    // A remote worker (a relay to a decode node): "r<id>", its node below.
    rows.push_back({absl::StrCat(x.node().empty() ? "" : "r", x.id()), absl::StrCat(x.pid()),
                    x.state(),
                    absl::StrCat(x.in_flight()), absl::StrCat(x.samples_done()),
                    absl::StrCat(x.samples_failed()), absl::StrCat(x.restarts()),
                    absl::StrFormat("%.1fs", x.cpu_seconds())});
  }
  out += LayoutTable({{"WORKER"}, {"PID", 3}, {"STATE"}, {"IN-FLIGHT", 1}, {"DONE"},
                      {"FAILED"}, {"RESTARTS", 2}, {"CPU", 4}},
                     rows, width);
  if (s.decode_nodes_size() > 0) {
    out += "\n" + Shorten(absl::StrCat("decode nodes (relays r*): ", s.decode_nodes_reason()),
                          width, Trim::kTail) +
           "\n";
    rows.clear();
    for (const auto& d : s.decode_nodes()) {
      rows.push_back({d.address(), absl::StrCat(d.connected(), "/", d.slots()),
                      absl::StrCat(d.samples_done()), absl::StrCat(d.samples_failed()),
                      absl::StrCat(d.lost()), absl::StrFormat("%.0f", d.samples_per_second()),
                      Ms(d.latency()),
                      absl::StrFormat("%.1fM", d.bytes_sent() / 1048576.0),
                      absl::StrFormat("%.1fM", d.bytes_received() / 1048576.0)});
    }
    out += LayoutTable({{"NODE"}, {"CONNECTED"}, {"DONE"}, {"FAILED", 2}, {"LOST", 1},
                        {"RATE", 1}, {"LATENCY", 2}, {"SENT", 3}, {"RECEIVED", 3}},
                       rows, width);
  }
  if (s.sessions_size() == 0) {
    out += "\nno sessions\n";
  } else {
    rows.clear();
    for (const auto& x : s.sessions()) {
      rows.push_back(
          {x.session_id(), x.client_name().empty() ? "-" : x.client_name(),
           absl::StrCat(x.client_pid()), absl::StrCat(x.rank(), "/", x.world_size()),
           x.dataset(), PipelineCell(x.pipeline()), absl::StrCat(x.batch_size()),
           absl::StrCat(x.current_epoch()), absl::StrCat(x.batches_produced()),
           absl::StrCat(x.batches_consumed()), absl::StrFormat("%.0f", x.images_per_second()),
           absl::StrCat(x.ring_ready(), "/", x.ring_filling(), "/", x.ring_leased(), " of ",
                        RingDepth(x)),
           Ms(x.client_wait()), absl::StrFormat("%.1fs", x.client_wait_seconds()), Ms(x.read()),
           Ms(x.decode()), Ms(x.augment()), Duration(x.uptime_seconds()),
           absl::StrCat(x.samples_failed()), absl::StrCat(x.samples_replaced())});
    }
    // Dropped first when narrow: the stage latencies, then what a glance
    // at top can do without; kept: who, what, how fast, stalls, failures.
    out += "\n" + LayoutTable({{"SESSION"},
                               {"CLIENT", kAlways, Trim::kTail, 14, 6},
                               {"PID", 7},
                               {"RANK", 8},
                               {"DATASET", kAlways, Trim::kHead, 20, 8},
                               {"PIPELINE", 9},
                               {"BATCH", 6},
                               {"EPOCH", 14},
                               {"PRODUCED", 5},
                               {"CONSUMED", 13},
                               {"IMG/S"},
                               {"RING r/f/l", 12},
                               {"WAIT p50/p99 ms", 11},
                               {"STALL"},
                               {"READ p50/p99 ms", 1},
                               {"DECODE p50/p99 ms", 3},
                               {"AUGMENT p50/p99 ms", 2},
                               {"UP", 4},
                               {"FAILED"},
                               {"REPL", 10}},
                              rows, width);
    // Why a ring deepened last (or why the budget stopped it).
    for (const auto& x : s.sessions()) {
      if (x.ring_depth_reason().empty()) continue;
      out += WrapWords(absl::StrCat("ring ", x.session_id(), " (", RingDepth(x), ")"),
                       x.ring_depth_reason(), width, 2);
    }
    // How each session's samples were decoded (paths without samples left out).
    rows.clear();
    for (const auto& x : s.sessions()) {
      for (const auto& dp : x.decode_paths()) {
        if (dp.samples() == 0) continue;
        rows.push_back({x.session_id(), dp.path(), absl::StrCat(dp.samples()),
                        absl::StrFormat("%.2f", dp.mean_decode_ms()),
                        absl::StrFormat("%.1fs", dp.decode_seconds())});
      }
    }
    if (!rows.empty()) {
      out += "\ndecode paths\n" +
             LayoutTable({{"SESSION"}, {"PATH"}, {"SAMPLES"}, {"MEAN DECODE ms"}, {"TOTAL", 1}},
                         rows, width);
    }
    // Each session's files by format (their content), with their decode
    // latency: a slow format or a failing one shows here.
    rows.clear();
    for (const auto& x : s.sessions()) {
      for (const auto& f : x.formats()) {
        rows.push_back({x.session_id(), f.format(), absl::StrCat(f.samples()),
                        absl::StrCat(f.failed()), Ms(f.decode()),
                        absl::StrFormat("%.2f", f.decode().mean_ms())});
      }
    }
    if (!rows.empty()) {
      out += "\nformats\n" + LayoutTable({{"SESSION"},
                                          {"FORMAT"},
                                          {"SAMPLES"},
                                          {"FAILED"},
                                          {"DECODE p50/p99 ms"},
                                          {"MEAN ms", 1}},
                                         rows, width);
    }
    // Each session's pipeline in full (the table shows only its preset).
    out += "\npipelines\n";
    for (const auto& x : s.sessions()) {
      out += WrapWords(x.session_id(),
                       x.has_volumes() ? DescribeVolumes(x.volumes()) : pipeline::Describe(x.pipeline()),
                       width, 4);
    }
  }
  rows.clear();
  for (const auto& x : s.sessions()) {
    for (const auto& fl : x.failures()) {
      rows.push_back({x.session_id(), fl.path(), absl::StrCat(fl.count()), fl.reason()});
    }
  }
  if (!rows.empty()) {
    out += "\nfailed samples\n" +
           LayoutTable({{"SESSION"},
                        {"PATH", kAlways, Trim::kHead, 40, 16},
                        {"COUNT"},
                        {"REASON", kAlways, Trim::kTail, 30, 12}},
                       rows, width);
  }
  rows.clear();
  uint64_t not_kept = 0;
  for (const auto& d : s.dataset_failures()) {
    for (const auto& fl : d.failures()) {
      rows.push_back({d.dataset(), fl.path(), absl::StrCat(fl.dataset_index()),
                      absl::StrCat(fl.count()), fl.reason()});
    }
    not_kept += d.failures_not_kept();
  }
  if (!rows.empty()) {
    out += "\nfailed samples by dataset (ended sessions included)\n" +
           LayoutTable({{"DATASET", kAlways, Trim::kHead, 20, 8},
                        {"PATH", kAlways, Trim::kHead, 40, 16},
                        {"INDEX", 1},
                        {"COUNT"},
                        {"REASON", kAlways, Trim::kTail, 30, 12}},
                       rows, width);
    if (not_kept != 0) {
      out += Wrap({absl::StrCat(not_kept, " more failures, of files past the daemon's bound per "
                                          "dataset (not listed)")},
                  width);
    }
  }
  return out;
}

std::string GrpcTarget(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return address;
  if (address.find('/') != std::string::npos || address.find(':') == std::string::npos) {
    return "unix:" + address;
  }
  return address;  // HOST:PORT
}

absl::Status FetchStatus(const std::string& address, bool include_failures,
                         bool include_dataset_failures, v1::StatusResponse* out) {
  auto stub = v1::Stoker::NewStub(
      grpc::CreateChannel(GrpcTarget(address), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatusRequest req;
  req.set_include_failures(include_failures);
  req.set_include_dataset_failures(include_dataset_failures);
  grpc::Status st = stub->Status(&ctx, req, out);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("status: ", st.error_message()));
  }
  return absl::OkStatus();
}

absl::Status RunTop(const std::string& address, uint32_t interval_ms, uint32_t iterations) {
  auto stub = v1::Stoker::NewStub(
      grpc::CreateChannel(GrpcTarget(address), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.set_interval_ms(interval_ms);
  req.set_include_failures(true);
  auto reader = stub->Watch(&ctx, req);
  v1::StatusResponse s;
  uint32_t shown = 0;
  const bool tty = ::isatty(STDOUT_FILENO);
  while (reader->Read(&s)) {
    // Home the cursor and clear the screen, as top does.
    if (tty) std::fputs("\033[H\033[2J", stdout);
    std::fputs(RenderStatus(s, TerminalWidth()).c_str(), stdout);
    std::fflush(stdout);
    if (iterations != 0 && ++shown >= iterations) {
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status st = reader->Finish();
  if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("watch: ", st.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace stoker::ctl
