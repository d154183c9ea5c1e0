// Prometheus metrics (stokerd --metrics-addr HOST:PORT): GET /metrics in the
// Prometheus text exposition format 0.0.4, made from the daemon's Status, so
// every figure has one definition (the Status field named beside it below).
//
// Metrics (prefix stoker_; per-session ones carry the labels session,
// client (AttachRequest.client_name) and rank):
//   counters    samples_delivered_total, samples_replaced_total,
//               samples_failed_total{reason} (SessionStatus.failed_by_reason),
//               batches_produced_total, batches_consumed_total,
//               bytes_read_total, trainer_wait_seconds_total (the data
//               stall), worker_restarts_total, sessions_attached_total,
//               sessions_reclaimed_total, readahead_bytes_read_total,
//               with --prepared-cache prepared_cache_hits_total{kind},
//               prepared_cache_writes_total{kind} (kind volume|image),
//               prepared_cache_evictions_total;
//               daemon-wide per dataset (label dataset; they only grow, ended
//               sessions included: StatusResponse.dataset_totals):
//               dataset_sessions_total, dataset_samples_delivered_total,
//               dataset_samples_replaced_total, dataset_samples_failed_total
//               {reason}, dataset_batches_delivered_total,
//               dataset_bytes_read_total, dataset_decode_seconds_total
//   gauges      up (1), info{version}, sessions, workers (active),
//               workers_max (what the autotuner may use now), cpu_budget,
//               ring_budget_bytes, ring_used_bytes,
//               ring_slots, ring_ready_slots, ring_filling_slots,
//               ring_leased_slots, images_per_second, epoch, with
//               --prepared-cache prepared_cache_bytes, prepared_cache_entries
//   histograms  trainer_wait_seconds (per batch), stage_seconds{stage=read|
//               decode|augment} (per sample): the Status's log2 buckets,
//               le = 2^(b+1) microseconds
//
// RenderMetrics is pure (testable from a StatusResponse); MetricsServer
// serves it over HTTP with libmicrohttpd (its own thread; the render
// callback is called on it, once per scrape).

#ifndef STOKER_SERVER_CONTROL_METRICS_H_
#define STOKER_SERVER_CONTROL_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "stoker/v1/stoker.pb.h"

struct MHD_Daemon;

namespace stoker {

// The Prometheus text format of `s`.
std::string RenderMetrics(const v1::StatusResponse& s);

class MetricsServer {
 public:
  // Listens on `addr` ("HOST:PORT"; port 0 picks a free one; HOST an IPv4
  // address, "localhost" or "0.0.0.0") and answers GET /metrics with
  // `render()`, any other path with 404, other methods with 405.
  // INVALID_ARGUMENT for a bad address, UNAVAILABLE when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& addr, std::function<std::string()> render);
  ~MetricsServer();  // stops listening; waits for a scrape in progress
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  MetricsServer() = default;
  struct Handler;  // libmicrohttpd's callback (metrics.cc)
  friend struct Handler;

  std::function<std::string()> render_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_CONTROL_METRICS_H_
