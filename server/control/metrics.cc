#include "server/control/metrics.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "stoker/ring_layout.h"

namespace stoker {

namespace {

// A label value, escaped as the format asks (\\, \", \n).
std::string Escape(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) { return absl::StrFormat("%.12g", v); }

class Writer {
 public:
  // # HELP and # TYPE, once per metric family.
  void Family(absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&out_, "# HELP stoker_", name, " ", help, "\n# TYPE stoker_", name, " ", type,
                    "\n");
  }
  void Sample(absl::string_view name, absl::string_view labels, double v) {
    absl::StrAppend(&out_, "stoker_", name, labels.empty() ? "" : "{", labels,
                    labels.empty() ? "" : "}", " ", Number(v), "\n");
  }
  // A histogram's series from a LatencySummary (log2 buckets of
  // microseconds; le in seconds).
  void Histogram(absl::string_view name, absl::string_view labels, const v1::LatencySummary& l) {
    const std::string sep = labels.empty() ? "" : ",";
    uint64_t cumulative = 0;
    for (int b = 0; b < l.buckets_size(); ++b) {
      cumulative += l.buckets(b);
      const double le = static_cast<double>(uint64_t{2} << b) / 1e6;
      absl::StrAppend(&out_, "stoker_", name, "_bucket{", labels, sep, "le=\"", Number(le),
                      "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out_, "stoker_", name, "_bucket{", labels, sep, "le=\"+Inf\"} ", l.count(),
                    "\n");
    absl::StrAppend(&out_, "stoker_", name, "_sum", labels.empty() ? "" : "{", labels,
                    labels.empty() ? "" : "}", " ", Number(l.mean_ms() * l.count() / 1e3), "\n");
    absl::StrAppend(&out_, "stoker_", name, "_count", labels.empty() ? "" : "{", labels,
                    labels.empty() ? "" : "}", " ", l.count(), "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string SessionLabels(const v1::SessionStatus& s) {
  return absl::StrCat("session=\"", Escape(s.session_id()), "\",client=\"",
                      Escape(s.client_name()), "\",rank=\"", s.rank(), "\"");
}

}  // namespace

std::string RenderMetrics(const v1::StatusResponse& st) {
  Writer w;
  std::vector<std::string> labels;
  for (const auto& s : st.sessions()) labels.push_back(SessionLabels(s));
  const int n = st.sessions_size();

  w.Family("up", "gauge", "1 while stokerd serves.");
  w.Sample("up", "", 1);
  w.Family("info", "gauge", "stokerd's version and state (always 1).");
  w.Sample("info", absl::StrCat("version=\"", Escape(st.version()), "\",state=\"",
                                Escape(st.state()), "\""),
           1);
  w.Family("sessions", "gauge", "Sessions attached now.");
  w.Sample("sessions", "", n);
  w.Family("sessions_attached_total", "counter", "Sessions attached since stokerd started.");
  w.Sample("sessions_attached_total", "", st.sessions_total());
  w.Family("sessions_reclaimed_total", "counter",
           "Sessions reclaimed because their trainer went away.");
  w.Sample("sessions_reclaimed_total", "", st.sessions_reclaimed());
  w.Family("worker_restarts_total", "counter", "Worker processes restarted after a death.");
  w.Sample("worker_restarts_total", "", st.worker_restarts_total());
  const v1::AutotuneStatus& at = st.autotune();
  w.Family("workers", "gauge", "Active decode workers.");
  w.Sample("workers", "", at.workers() != 0 ? at.workers() : st.workers_size());
  w.Family("workers_max", "gauge",
           "The most workers allowed now (--workers auto: the CPU budget less the reserve).");
  w.Sample("workers_max", "", at.max_workers());
  w.Family("cpu_budget", "gauge", "The CPUs stokerd may use (cgroup quota, cpuset, affinity).");
  w.Sample("cpu_budget", "", at.cpu_budget());
  w.Family("ring_budget_bytes", "gauge", "Shared memory all rings may take (--ring-budget-mb).");
  w.Sample("ring_budget_bytes", "", st.ring_budget_bytes());
  w.Family("ring_used_bytes", "gauge", "Shared memory the sessions' rings take.");
  w.Sample("ring_used_bytes", "", st.ring_used_bytes());
  w.Family("readahead_bytes_read_total", "counter", "Bytes read ahead of the workers.");
  w.Sample("readahead_bytes_read_total", "", st.readahead().bytes_read());
  if (st.has_prepared_cache()) {
    const v1::PreparedCacheStatus& pc = st.prepared_cache();
    w.Family("prepared_cache_bytes", "gauge", "Bytes of the prepared cache's entries.");
    w.Sample("prepared_cache_bytes", "", pc.bytes());
    w.Family("prepared_cache_entries", "gauge", "Entries in the prepared cache.");
    w.Sample("prepared_cache_entries", "", pc.entries());
    w.Family("prepared_cache_hits_total", "counter",
             "Samples served from a prepared entry, by kind (volume, image).");
    w.Sample("prepared_cache_hits_total", "kind=\"volume\"", pc.volume_hits());
    w.Sample("prepared_cache_hits_total", "kind=\"image\"", pc.image_hits());
    w.Family("prepared_cache_writes_total", "counter", "Prepared entries written, by kind.");
    w.Sample("prepared_cache_writes_total", "kind=\"volume\"", pc.volume_writes());
    w.Sample("prepared_cache_writes_total", "kind=\"image\"", pc.image_writes());
    w.Family("prepared_cache_evictions_total", "counter",
             "Prepared entries removed to stay within --prepared-cache-mb.");
    w.Sample("prepared_cache_evictions_total", "", pc.evictions());
  }

  if (st.decode_nodes_size() > 0) {
    w.Family("decode_nodes_open", "gauge",
             "1 while decode nodes get work (--decode-when: always, or while trainers wait).");
    w.Sample("decode_nodes_open", "", st.decode_nodes_open() ? 1 : 0);
    struct NodeSeries {
      const char* name;
      const char* type;
      const char* help;
      double (*value)(const v1::DecodeNodeStatus&);
    };
    static const NodeSeries kNode[] = {
        {"decode_node_connected", "gauge", "Relays connected to the decode node now.",
         [](const v1::DecodeNodeStatus& d) { return double(d.connected()); }},
        {"decode_node_samples_total", "counter", "Samples the decode node decoded for us.",
         [](const v1::DecodeNodeStatus& d) { return double(d.samples_done()); }},
        {"decode_node_samples_failed_total", "counter",
         "Samples that failed on the decode node (the samples' fault).",
         [](const v1::DecodeNodeStatus& d) { return double(d.samples_failed()); }},
        {"decode_node_sent_bytes_total", "counter", "Encoded input shipped to the decode node.",
         [](const v1::DecodeNodeStatus& d) { return double(d.bytes_sent()); }},
        {"decode_node_received_bytes_total", "counter", "Samples received from the decode node.",
         [](const v1::DecodeNodeStatus& d) { return double(d.bytes_received()); }},
        {"decode_node_lost_total", "counter",
         "Relays to the decode node ended: unreachable, silent or malformed (tasks redone).",
         [](const v1::DecodeNodeStatus& d) { return double(d.lost()); }},
        {"decode_node_stolen_total", "counter",
         "Times tasks were taken back from the decode node: it fell behind while local workers "
         "had room.",
         [](const v1::DecodeNodeStatus& d) { return double(d.stolen()); }},
        {"decode_node_decode_seconds_total", "counter",
         "The decode node's decode and augment time for us.",
         [](const v1::DecodeNodeStatus& d) { return d.decode_seconds(); }},
    };
    w.Family("decode_node_latency_seconds", "histogram",
             "From a task's dispatch to a decode node's relay to its answer.");
    for (const auto& d : st.decode_nodes()) {
      w.Histogram("decode_node_latency_seconds",
                  absl::StrCat("node=\"", Escape(d.address()), "\""), d.latency());
    }
    for (const NodeSeries& series : kNode) {
      w.Family(series.name, series.type, series.help);
      for (const auto& d : st.decode_nodes()) {
        w.Sample(series.name, absl::StrCat("node=\"", Escape(d.address()), "\""),
                 series.value(d));
      }
    }
  }

  struct Counter {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const v1::SessionStatus&);
  };
  static const Counter kPerSession[] = {
      {"samples_delivered_total", "counter", "Samples decoded into the session's ring.",
       [](const v1::SessionStatus& s) { return double(s.samples_produced()); }},
      {"samples_replaced_total", "counter",
       "Samples delivered in place of a failed one (skip policy).",
       [](const v1::SessionStatus& s) { return double(s.samples_replaced()); }},
      {"batches_produced_total", "counter", "Batches made ready in the ring.",
       [](const v1::SessionStatus& s) { return double(s.batches_produced()); }},
      {"batches_consumed_total", "counter", "Batches the trainer took and gave back.",
       [](const v1::SessionStatus& s) { return double(s.batches_consumed()); }},
      {"bytes_read_total", "counter", "Bytes of input the workers read.",
       [](const v1::SessionStatus& s) { return double(s.bytes_read()); }},
      {"trainer_wait_seconds_total", "counter",
       "Time the trainer spent waiting for batches (the data stall).",
       [](const v1::SessionStatus& s) { return s.client_wait_seconds(); }},
      {"images_per_second", "gauge", "Samples delivered per second, lately.",
       [](const v1::SessionStatus& s) { return s.images_per_second(); }},
      {"epoch", "gauge", "The epoch being produced.",
       [](const v1::SessionStatus& s) { return double(s.current_epoch()); }},
      {"ring_slots", "gauge", "Batch slots in the session's ring.",
       [](const v1::SessionStatus& s) { return double(s.ring_slots()); }},
      {"ring_depth", "gauge",
       "Batches the ring prefetches (its depth; deepens for bursty trainers up to ring_slots).",
       [](const v1::SessionStatus& s) { return double(s.ring_depth()); }},
      {"ring_ready_slots", "gauge", "Slots holding a batch the trainer has not taken.",
       [](const v1::SessionStatus& s) { return double(s.ring_ready()); }},
      {"ring_filling_slots", "gauge", "Slots the workers are filling.",
       [](const v1::SessionStatus& s) { return double(s.ring_filling()); }},
      {"ring_leased_slots", "gauge", "Slots the trainer holds.",
       [](const v1::SessionStatus& s) { return double(s.ring_leased()); }},
  };
  for (const Counter& c : kPerSession) {
    w.Family(c.name, c.type, c.help);
    for (int i = 0; i < n; ++i) w.Sample(c.name, labels[i], c.get(st.sessions(i)));
  }
  w.Family("samples_failed_total", "counter",
           "Planned samples that failed, by reason (see SessionStatus.failed_by_reason).");
  for (int i = 0; i < n; ++i) {
    // Sorted by reason: a map's order is unspecified.
    std::vector<std::pair<std::string, uint64_t>> by(st.sessions(i).failed_by_reason().begin(),
                                                     st.sessions(i).failed_by_reason().end());
    std::sort(by.begin(), by.end());
    for (const auto& [reason, count] : by) {
      w.Sample("samples_failed_total",
               absl::StrCat(labels[i], ",reason=\"", Escape(reason), "\""), count);
    }
  }
  // Daemon-wide, per dataset: they only grow (server/engine/dataset_totals.h).
  struct Total {
    const char* name;
    const char* help;
    double (*get)(const v1::DatasetTotals&);
  };
  static const Total kPerDataset[] = {
      {"dataset_sessions_total", "Sessions attached to the dataset.",
       [](const v1::DatasetTotals& t) { return double(t.sessions()); }},
      {"dataset_samples_delivered_total", "Samples of the dataset decoded into rings.",
       [](const v1::DatasetTotals& t) { return double(t.samples_delivered()); }},
      {"dataset_samples_replaced_total", "Samples delivered in place of a failed one.",
       [](const v1::DatasetTotals& t) { return double(t.samples_replaced()); }},
      {"dataset_batches_delivered_total", "Batches of the dataset made ready.",
       [](const v1::DatasetTotals& t) { return double(t.batches_delivered()); }},
      {"dataset_bytes_read_total", "Bytes of the dataset the workers read.",
       [](const v1::DatasetTotals& t) { return double(t.bytes_read()); }},
      {"dataset_decode_seconds_total", "The workers' decode time on the dataset.",
       [](const v1::DatasetTotals& t) { return t.decode_seconds(); }},
  };
  for (const Total& c : kPerDataset) {
    w.Family(c.name, "counter", c.help);
    for (const v1::DatasetTotals& t : st.dataset_totals()) {
      w.Sample(c.name, absl::StrCat("dataset=\"", Escape(t.dataset()), "\""), c.get(t));
    }
  }
  w.Family("dataset_samples_failed_total", "counter",
           "Planned samples of the dataset that failed, by reason.");
  for (const v1::DatasetTotals& t : st.dataset_totals()) {
    std::vector<std::pair<std::string, uint64_t>> by(t.failed_by_reason().begin(),
                                                     t.failed_by_reason().end());
    std::sort(by.begin(), by.end());
    for (const auto& [reason, count] : by) {
      w.Sample("dataset_samples_failed_total",
               absl::StrCat("dataset=\"", Escape(t.dataset()), "\",reason=\"", Escape(reason),
                            "\""),
               count);
    }
  }
  w.Family("trainer_wait_seconds", "histogram",
           "The trainer's wait for each batch (the data stall), per batch.");
  for (int i = 0; i < n; ++i) w.Histogram("trainer_wait_seconds", labels[i], st.sessions(i).client_wait());
  w.Family("stage_seconds", "histogram", "Per-sample time in each worker stage.");
  for (int i = 0; i < n; ++i) {
    const v1::SessionStatus& s = st.sessions(i);
    w.Histogram("stage_seconds", labels[i] + ",stage=\"read\"", s.read());
    w.Histogram("stage_seconds", labels[i] + ",stage=\"decode\"", s.decode());
    w.Histogram("stage_seconds", labels[i] + ",stage=\"augment\"", s.augment());
  }
  return w.Take();
}

struct MetricsServer::Handler {
  static MHD_Result Answer(void* cls, MHD_Connection* c, const char* url, const char* method,
                           const char*, const char*, size_t*, void**) {
    auto* self = static_cast<MetricsServer*>(cls);
    std::string body;
    unsigned int code = MHD_HTTP_OK;
    const char* type = "text/plain; version=0.0.4; charset=utf-8";
    if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0) {
      code = MHD_HTTP_METHOD_NOT_ALLOWED;
      body = "only GET\n";
      type = "text/plain";
    } else if (std::strcmp(url, "/metrics") != 0) {
      code = MHD_HTTP_NOT_FOUND;
      body = "stokerd serves /metrics only\n";
      type = "text/plain";
    } else {
      body = self->render_();
    }
    MHD_Response* r =
        MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
    if (r == nullptr) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    const MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
  }
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& addr, std::function<std::string()> render) {
  const size_t colon = addr.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port) ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-addr ", addr, ": expected HOST:PORT, e.g. 0.0.0.0:9464"));
  }
  std::string host = addr.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty()) host = "0.0.0.0";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-addr ", addr, ": the host must be an IPv4 address, localhost or 0.0.0.0"));
  }
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->render_ = std::move(render);
  m->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, nullptr, nullptr, &Handler::Answer,
      m.get(), MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&sa),
      MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (m->daemon_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-addr ", addr, ": cannot listen (address in use?)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(m->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  m->port_ = info != nullptr ? info->port : static_cast<uint16_t>(port);
  return m;
}

MetricsServer::~MetricsServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace stoker
