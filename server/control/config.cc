#include "server/control/config.h"

#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace stoker {

namespace {

std::string JsonEscape(std::string_view in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace

std::string DaemonConfig::ToJson() const {
  return absl::StrFormat(
      "{\"socket_path\":\"%s\",\"status_addr\":\"%s\",\"metrics_addr\":\"%s\",\"data_root\":\"%s\",\"workers\":%s,\"workers_max\":%u,\"reserve_cpus\":%g,\"cpu_budget\":%g,\"worker_binary\":\"%s\","
      "\"socket_mode\":\"%o\",\"max_sessions\":%u,\"max_ring_bytes\":%u,\"shm_budget_bytes\":%u,"
      "\"worker_queue_depth\":%u,\"task_timeout_ms\":%u,\"keepalive_grace_ms\":%u,"
      "\"heartbeat_timeout_ms\":%u,\"max_file_bytes\":%u,\"drain_timeout_ms\":%u,"
      "\"log_level\":\"%s\",\"log_json\":%s,\"worker_sandbox\":%s,\"fault_injection\":%s,"
      "\"parent_pid\":%d,\"index_cache\":\"%s\",\"io_threads\":%u,\"readahead_bytes\":%u,"
      "\"simulate_read_latency_us\":%u,\"transcode_cache\":\"%s\",\"transcode_cache_bytes\":%u,"
      "\"decode_calibration\":%s}",
      JsonEscape(socket_path), JsonEscape(status_addr), JsonEscape(metrics_addr), JsonEscape(data_root),
      workers == 0 ? std::string("\"auto\"") : std::to_string(workers), workers_max, reserve_cpus,
      cpu_budget, JsonEscape(worker_binary),
      socket_mode, max_sessions, max_ring_bytes, shm_budget_bytes, worker_queue_depth, task_timeout_ms,
      keepalive_grace_ms, heartbeat_timeout_ms, max_file_bytes, drain_timeout_ms,
      JsonEscape(log_level), log_json ? "true" : "false", worker_sandbox ? "true" : "false",
      (fault_crash_substring.empty() && fault_hang_substring.empty()) ? "false" : "true",
      parent_pid, JsonEscape(index_cache), io_threads, readahead_bytes, simulate_read_latency_us,
      JsonEscape(transcode_cache), transcode_cache_bytes, decode_calibration ? "true" : "false");
}

}  // namespace stoker
