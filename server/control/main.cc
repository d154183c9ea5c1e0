// stokerd: the stoker daemon. See README.md.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "server/control/service.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace {

// %* in a log pattern: the message, escaped for a JSON string.
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (u < 0x20) {
        const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 15]};
        dest.append(esc, esc + sizeof(esc));
      } else {
        dest.push_back(c);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};

}  // namespace

int main(int argc, char** argv) {
  stoker::DaemonConfig c;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    c.index_cache = std::string(xdg) + "/stoker/index";
    c.transcode_cache = std::string(xdg) + "/stoker/transcode";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    c.index_cache = std::string(home) + "/.cache/stoker/index";
    c.transcode_cache = std::string(home) + "/.cache/stoker/transcode";
  }
  CLI::App app{"stokerd: decodes and augments JPEG datasets into shared-memory rings"};
  app.set_version_flag("--version", std::string(STOKER_VERSION));
  app.add_option("--socket", c.socket_path, "gRPC Unix socket path")->required();
  app.add_option("--data-root", c.data_root, "every dataset must lie beneath this directory")
      ->required();
  app.add_option("--index-cache", c.index_cache,
                 "cache dataset indexes in this folder (created 0700; '' for none)")
      ->capture_default_str();
  app.add_option("--transcode-cache", c.transcode_cache,
                 "keep lossless baseline copies of progressive JPEGs in this folder (created "
                 "0700; later epochs decode the copies, 2-3x faster); 'off' (or '') for none")
      ->capture_default_str();
  double transcode_cache_mb = 0;
  app.add_option("--transcode-cache-mb", transcode_cache_mb,
                 "the transcode cache's copies take at most this many MiB (a fraction is fine; "
                 "0: 4096, and at most a quarter of its file system's free space at start-up)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics-addr", c.metrics_addr,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 0.0.0.0:9464)");
  app.add_option("--status-addr", c.status_addr,
                 "also serve status and health (never sessions) on this TCP HOST:PORT");
  std::string workers = "auto";
  app.add_option("--workers", workers,
                 "decode worker processes: N, or auto (grown while a trainer waits for data and "
                 "it helps, shrunk when they idle, within the CPU budget)")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        char* end = nullptr;
        const unsigned long n = std::strtoul(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n < 1 || n > 1024) return "auto, or a number 1-1024";
        return "";
      })
      ->capture_default_str();
  app.add_option("--workers-max", c.workers_max,
                 "with --workers auto: the most workers (0: as the CPU budget allows)");
  app.add_option("--reserve-cpus", c.reserve_cpus,
                 "with --workers auto: CPUs left to the trainers (default: 1 per attached "
                 "trainer process)");
  app.add_option("--cpu-budget", c.cpu_budget,
                 "the CPUs stokerd may use (default: its cgroup's quota and cpuset and its "
                 "affinity mask, read every 10 s)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--worker-binary", c.worker_binary,
                 "the worker executable (default: stoker-worker beside stokerd)");
  app.add_option("--max-sessions", c.max_sessions, "attached sessions at most");
  app.add_option("--max-ring-bytes", c.max_ring_bytes, "shared memory per session at most");
  double shm_budget_mb = 0;
  app.add_option("--shm-budget-mb", shm_budget_mb,
                 "memory all sessions' rings may take together, in MiB (0: half the memory "
                 "available at start-up, the cgroup's limit included); an Attach past it is "
                 "refused")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--worker-queue-depth", c.worker_queue_depth,
                 "tasks queued per worker (hides the round trip)");
  app.add_option("--task-timeout-ms", c.task_timeout_ms,
                 "a worker stuck on one sample this long is replaced");
  app.add_option("--keepalive-grace-ms", c.keepalive_grace_ms,
                 "a session without a KeepAlive stream this long is reclaimed");
  app.add_option("--heartbeat-timeout-ms", c.heartbeat_timeout_ms,
                 "clients declare the daemon dead after this long without a heartbeat");
  app.add_option("--io-threads", c.io_threads, "readahead threads (0: no readahead)")
      ->capture_default_str();
  uint64_t readahead_mb = c.readahead_bytes >> 20;
  app.add_option("--readahead-mb", readahead_mb,
                 "bytes of input read ahead of the workers at most, in MiB (0: no readahead)")
      ->capture_default_str();
  app.add_option("--simulate-read-latency-us", c.simulate_read_latency_us,
                 "BENCHMARKS/TESTS ONLY: a read of uncached data first sleeps this long")
      ->group("");
  app.add_option("--max-file-bytes", c.max_file_bytes, "larger input files fail as samples");
  app.add_option("--drain-timeout-ms", c.drain_timeout_ms,
                 "on SIGTERM, wait at most this long for in-flight batches");
  app.add_option("--socket-mode", c.socket_mode, "permission bits of the socket (octal)")
      ->transform([](std::string s) { return std::to_string(std::stoul(s, nullptr, 8)); });
  std::string decode_calibration = c.decode_calibration ? "on" : "off";
  app.add_option("--decode-calibration", decode_calibration,
                 "on: time the decode at each DCT scale at start-up and never use a scale that "
                 "decodes slower than a larger one; off: no measurement, every scale allowed")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_flag("!--no-worker-sandbox", c.worker_sandbox,
               "run workers without their seccomp filter (debugging)");
  app.add_option("--parent-pid", c.parent_pid,
                 "drain and exit when this process (our parent) exits: for a private daemon");
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error");
  app.add_flag("--log-json", c.log_json, "log JSON lines");
  app.add_option("--fault-crash-substring", c.fault_crash_substring,
                 "TESTS ONLY: workers crash on files whose path contains this")
      ->group("");
  app.add_option("--fault-hang-substring", c.fault_hang_substring,
                 "TESTS ONLY: workers hang on files whose path contains this")
      ->group("");
  CLI11_PARSE(app, argc, argv);
  c.workers = workers == "auto" ? 0 : static_cast<uint32_t>(std::stoul(workers));
  c.readahead_bytes = readahead_mb << 20;
  c.shm_budget_bytes = static_cast<uint64_t>(shm_budget_mb * 1048576.0);
  c.decode_calibration = decode_calibration == "on";
  if (c.transcode_cache == "off") c.transcode_cache.clear();
  c.transcode_cache_bytes = static_cast<uint64_t>(transcode_cache_mb * 1048576.0);

  auto logger = spdlog::stderr_logger_mt("stokerd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(c.log_level));
  if (c.log_json) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonMessage>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","pid":%P,"msg":"%*"})");
    spdlog::set_formatter(std::move(f));
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ stokerd[%P] %v");
  }
  spdlog::flush_on(spdlog::level::info);

  // Signals are taken by sigwait below; every thread started after this
  // inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  stoker::Server server(c);
  absl::Status st = server.Start();
  if (!st.ok()) {
    spdlog::critical("cannot start: {}", st.ToString());
    return 1;
  }
  spdlog::info("effective configuration: {}", server.engine().config().ToJson());
  if (c.parent_pid > 0) {
    // A private daemon must not outlive the trainer that started it, even one
    // killed with SIGKILL: once we are reparented, shut down as on SIGTERM.
    const pid_t parent = static_cast<pid_t>(c.parent_pid);
    std::thread([parent] {
      while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(250));
      spdlog::warn("parent process {} exited; shutting down", parent);
      kill(getpid(), SIGTERM);
    }).detach();
  }
  int sig = 0;
  while (sigwait(&set, &sig) == 0) {
    if (sig == SIGHUP) continue;
    break;
  }
  spdlog::info("received {}; shutting down", strsignal(sig));
  server.Stop();
  return 0;
}
