// stokerd: the stoker daemon. See README.md.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "server/control/daemon_flags.h"
#include "server/control/service.h"
#include "server/remote/node_server.h"
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
  // Every flag comes from DaemonConfig (proto/stoker/v1/config.proto).
  stoker::ParsedDaemonFlags parsed;
  const absl::Status flags = stoker::ParseDaemonFlags(
      std::vector<std::string>(argv + 1, argv + argc), stoker::ProcessEnv(), STOKER_VERSION,
      &parsed);
  if (!flags.ok()) {
    std::fprintf(stderr, "stokerd: %s\n", std::string(flags.message()).c_str());
    return 2;
  }
  if (parsed.exit) {
    std::fputs(parsed.output.c_str(), stdout);
    return 0;
  }
  const stoker::v1::DaemonConfig& c = parsed.config;

  auto logger = spdlog::stderr_logger_mt("stokerd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(c.log_level()));
  if (c.log_json()) {
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

  if (c.decode_node()) {
    // A decode node: only workers, behind the DecodeNode service
    // (server/remote/node_server.h).
    stoker::remote::NodeServer node(c);
    if (absl::Status st = node.Start(); !st.ok()) {
      spdlog::critical("cannot start: {}", st.ToString());
      return 1;
    }
    int sig = 0;
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
    }
    spdlog::info("received {}; shutting down", strsignal(sig));
    node.Stop();
    return 0;
  }
  stoker::Server server(c);
  absl::Status st = server.Start();
  if (!st.ok()) {
    spdlog::critical("cannot start: {}", st.ToString());
    return 1;
  }
  spdlog::info("effective configuration: {}", stoker::EffectiveFlagsLine(server.engine().config()));
  if (c.parent_pid() > 0) {
    // A private daemon must not outlive the trainer that started it, even one
    // killed with SIGKILL: once we are reparented, shut down as on SIGTERM.
    const pid_t parent = static_cast<pid_t>(c.parent_pid());
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
