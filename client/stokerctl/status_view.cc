#include "client/stokerctl/status_view.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "stoker/v1/stoker.grpc.pb.h"

namespace stoker::ctl {
namespace {

// Columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> width;
    for (const auto& r : rows_) {
      width.resize(std::max(width.size(), r.size()));
      for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    std::string out;
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

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

std::string RenderStatus(const v1::StatusResponse& s) {
  std::string out = absl::StrFormat(
      "stokerd %s  pid %d  up %s  %s  workers %d  sessions %d  samples %d (%d failed)  "
      "worker restarts %d  reclaimed %d\n\n",
      s.version(), s.pid(), Duration(s.uptime_seconds()), s.state(), s.workers_size(),
      s.sessions_size(), s.samples_total(), s.samples_failed_total(), s.worker_restarts_total(),
      s.sessions_reclaimed());
  const v1::ReadaheadStatus& ra = s.readahead();
  if (ra.threads() == 0) {
    out += "readahead off\n\n";
  } else {
    out += absl::StrFormat(
        "readahead  %d threads  budget %.0f MiB  read %d files (%d cold)  already cached %d  "
        "late %d  window %.1f MiB (max %.1f)\n\n",
        ra.threads(), ra.budget_bytes() / 1048576.0, ra.files_read(), ra.cold_files(),
        ra.files_cached(), ra.late(), ra.window_bytes() / 1048576.0,
        ra.window_bytes_max() / 1048576.0);
  }
  Table w({"WORKER", "PID", "STATE", "IN-FLIGHT", "DONE", "FAILED", "RESTARTS", "CPU"});
  for (const auto& x : s.workers()) {
    w.Add({absl::StrCat(x.id()), absl::StrCat(x.pid()), x.state(), absl::StrCat(x.in_flight()),
           absl::StrCat(x.samples_done()), absl::StrCat(x.samples_failed()),
           absl::StrCat(x.restarts()), absl::StrFormat("%.1fs", x.cpu_seconds())});
  }
  out += w.Render();
  if (s.sessions_size() == 0) return out + "\nno sessions\n";
  Table t({"SESSION", "CLIENT", "PID", "RANK", "DATASET", "PIPELINE", "BATCH", "EPOCH",
           "PRODUCED", "CONSUMED", "IMG/S", "RING r/f/l", "WAIT p50/p99 ms", "STALL",
           "DECODE p50/p99 ms", "FAILED"});
  for (const auto& x : s.sessions()) {
    t.Add({x.session_id(), x.client_name().empty() ? "-" : x.client_name(),
           absl::StrCat(x.client_pid()), absl::StrCat(x.rank(), "/", x.world_size()), x.dataset(),
           x.pipeline(), absl::StrCat(x.batch_size()), absl::StrCat(x.current_epoch()),
           absl::StrCat(x.batches_produced()), absl::StrCat(x.batches_consumed()),
           absl::StrFormat("%.0f", x.images_per_second()),
           absl::StrCat(x.ring_ready(), "/", x.ring_filling(), "/", x.ring_leased(), " of ",
                        x.ring_slots()),
           Ms(x.client_wait()), absl::StrFormat("%.1fs", x.client_wait_seconds()),
           Ms(x.decode()), absl::StrCat(x.samples_failed(), " (", x.samples_replaced(), " repl)")});
  }
  out += "\n" + t.Render();
  bool any = false;
  Table f({"SESSION", "PATH", "COUNT", "REASON"});
  for (const auto& x : s.sessions()) {
    for (const auto& fl : x.failures()) {
      any = true;
      f.Add({x.session_id(), fl.path(), absl::StrCat(fl.count()), fl.reason()});
    }
  }
  if (any) out += "\nfailed samples\n" + f.Render();
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
                         v1::StatusResponse* out) {
  auto stub = v1::Stoker::NewStub(
      grpc::CreateChannel(GrpcTarget(address), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatusRequest req;
  req.set_include_failures(include_failures);
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
    std::fputs(RenderStatus(s).c_str(), stdout);
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
