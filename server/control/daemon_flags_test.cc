#include "server/control/daemon_flags.h"

#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "server/video/video_probe.h"

#include "absl/strings/str_split.h"

namespace stoker {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  auto owned = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [owned](const char* name) -> const char* {
    auto it = owned->find(name);
    return it == owned->end() ? nullptr : it->second.c_str();
  };
}

const DaemonFlag& Flag(const std::string& name) {
  for (const DaemonFlag& f : DaemonFlags()) {
    if (f.name == name) return f;
  }
  FAIL("no flag --" << name);
  return DaemonFlags().front();
}

absl::Status Parse(std::vector<std::string> args, ParsedDaemonFlags* out,
                   std::map<std::string, std::string> env = {}) {
  return ParseDaemonFlags(args, FakeEnv(std::move(env)), "9.9.9", out);
}

TEST_CASE("every field of DaemonConfig is a flag, an environment variable and has a help line") {
  const google::protobuf::Descriptor* d = v1::DaemonConfig::descriptor();
  REQUIRE(DaemonFlags().size() == static_cast<size_t>(d->field_count()));
  for (const DaemonFlag& f : DaemonFlags()) {
    CAPTURE(f.name);
    CHECK_FALSE(f.spec->help().empty());
    CHECK(f.env.rfind("STOKER_", 0) == 0);
  }
  CHECK(Flag("data-root").env == "STOKER_DATA_ROOT");
  CHECK(Flag("ring-budget-mb").field->name() == "ring_budget_mb");
}

TEST_CASE("every default is a value its own flag takes, and reads back as written") {
  v1::DaemonConfig c;
  for (const DaemonFlag& f : DaemonFlags()) {
    const std::string& def = f.spec->default_value();
    if (def.empty() || def.rfind("~/", 0) == 0) continue;
    CAPTURE(f.name, def);
    REQUIRE(SetFlag(f, def, &c).ok());
    CHECK(FlagValue(f, c) == def);
  }
}

TEST_CASE("the defaults: one place, the user's cache folder from XDG_CACHE_HOME or HOME") {
  v1::DaemonConfig c = DefaultDaemonConfig(FakeEnv({{"HOME", "/home/ann"}}));
  CHECK(c.socket_mode() == 0600);
  CHECK(c.workers() == 0);  // auto
  CHECK(c.max_sessions() == 64);
  CHECK(c.heartbeat_timeout_ms() == 3000);
  CHECK(c.readahead_mb() == 64);
  CHECK(c.io_threads() == 16);
  CHECK(c.worker_sandbox());
  CHECK(c.decode_calibration());
  CHECK_FALSE(c.log_json());
  CHECK(c.log_level() == "info");
  CHECK_FALSE(c.has_reserve_cpus());
  CHECK(c.index_cache() == "/home/ann/.cache/stoker/index");
  CHECK(c.transcode_cache() == "/home/ann/.cache/stoker/transcode");
  // The video bounds' defaults are video::VideoLimits' (a tool without the
  // daemon decodes under the same).
  CHECK(c.video_max_decode_pixels() == video::VideoLimits().max_decode_pixels);
  CHECK(c.video_max_frames_per_clip() == video::VideoLimits().max_frames_per_clip);
  c = DefaultDaemonConfig(FakeEnv({{"HOME", "/home/ann"}, {"XDG_CACHE_HOME", "/var/c"}}));
  CHECK(c.transcode_cache() == "/var/c/stoker/transcode");
  c = DefaultDaemonConfig(FakeEnv({{"XDG_CACHE_HOME", "relative"}}));
  CHECK(c.index_cache().empty());
  CHECK(c.transcode_cache().empty());
}

TEST_CASE("flags: --name value, --name=value, bools bare or negated, zero words, octal") {
  ParsedDaemonFlags p;
  REQUIRE(Parse({"--socket", "/s.sock", "--data-root=/data", "--workers", "auto",
                 "--socket-mode", "0660", "--log-json", "--no-worker-sandbox",
                 "--decode-calibration", "off", "--transcode-cache", "off",
                 "--ring-budget-mb", "1.5", "--reserve-cpus", "0"},
                &p)
              .ok());
  CHECK(p.config.socket() == "/s.sock");
  CHECK(p.config.data_root() == "/data");
  CHECK(p.config.workers() == 0);
  CHECK(p.config.socket_mode() == 0660);
  CHECK(p.config.log_json());
  CHECK_FALSE(p.config.worker_sandbox());
  CHECK_FALSE(p.config.decode_calibration());
  CHECK(p.config.transcode_cache().empty());
  CHECK(MiB(p.config.ring_budget_mb()) == 3u << 19);
  REQUIRE(p.config.has_reserve_cpus());
  CHECK(p.config.reserve_cpus() == 0);
  CHECK(FlagValue(Flag("workers"), p.config) == "auto");
  CHECK(FlagValue(Flag("transcode-cache"), p.config) == "off");
  CHECK(FlagValue(Flag("socket-mode"), p.config) == "0660");

  REQUIRE(Parse({"--socket", "s", "--data-root", "d", "--workers", "8", "--log-json=false"}, &p)
              .ok());
  CHECK(p.config.workers() == 8);
  CHECK_FALSE(p.config.log_json());
}

TEST_CASE("bad flags: each error names the flag and what it takes") {
  ParsedDaemonFlags p;
  auto error = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", "s", "--data-root", "d"});
    absl::Status st = Parse(args, &p);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    return std::string(st.message());
  };
  CHECK(error({"--workers", "0"}) == "--workers 0: takes auto, or an integer 1-1024 (stokerd --help)");
  CHECK(error({"--workers", "2000"}).find("1-1024") != std::string::npos);
  CHECK(error({"--workers", "-3"}).find("--workers -3: takes") == 0);
  CHECK(error({"--socket-mode", "9"}) == "--socket-mode 9: takes an octal integer 0-511 (stokerd --help)");
  CHECK(error({"--ring-budget-mb", "-1"}).find("a number >= 0") != std::string::npos);
  CHECK(error({"--ring-budget-mb", "nan"}).find("--ring-budget-mb nan") == 0);
  CHECK(error({"--log-level", "loud"}) ==
        "--log-level loud: takes trace, debug, info, warn, error (stokerd --help)");
  CHECK(error({"--log-json=maybe"}) == "--log-json maybe: takes on or off (stokerd --help)");
  CHECK(error({"--max-sessions"}) == "--max-sessions needs a value: an integer >= 1 (stokerd --help)");
  CHECK(error({"--shm-budget-mb", "3"}) == "unknown flag --shm-budget-mb (stokerd --help lists them)");
  CHECK(error({"--no-workers"}) == "unknown flag --no-workers (stokerd --help lists them)");
  CHECK(error({"--workers", "2", "--workers", "3"}) == "--workers is given twice (stokerd --help)");
  CHECK(error({"positional"}).find("unexpected argument positional") == 0);
  CHECK(error({"--heartbeat-timeout-ms", "5"}).find(">= 100") != std::string::npos);

  absl::Status st = Parse({"--data-root", "d"}, &p);
  CHECK(st.message().find("--socket is required") == 0);
  // A decode node serves no sessions: no --socket needed.
  REQUIRE(Parse({"--decode-node", "--listen", "0.0.0.0:7070", "--data-root", "d"}, &p).ok());
  CHECK(p.config.decode_node());
  CHECK(p.config.socket().empty());
}

TEST_CASE("stokerd --from-env: STOKER_<NAME> for each flag not given, and a flag given wins") {
  ParsedDaemonFlags p;
  std::map<std::string, std::string> env = {{"STOKER_SOCKET", "/run/stoker/stoker.sock"},
                                            {"STOKER_DATA_ROOT", "/data"},
                                            {"STOKER_WORKERS", "auto"},
                                            {"STOKER_RESERVE_CPUS", "0"},
                                            {"STOKER_LOG_JSON", "1"},
                                            {"STOKER_INDEX_CACHE", ""},
                                            {"STOKER_MAX_SESSIONS", "8"}};
  REQUIRE(Parse({"--from-env", "--max-sessions", "2"}, &p, env).ok());
  CHECK(p.config.socket() == "/run/stoker/stoker.sock");
  CHECK(p.config.data_root() == "/data");
  CHECK(p.config.reserve_cpus() == 0);
  CHECK(p.config.log_json());
  CHECK(p.config.index_cache().empty());
  CHECK(p.config.max_sessions() == 2);

  // Without --from-env the environment is not read: a trainer's STOKER_SOCKET
  // must not reach the private daemon it starts.
  absl::Status st = Parse({"--data-root", "d"}, &p, env);
  CHECK(st.message().find("--socket is required") == 0);

  env["STOKER_WORKERS"] = "many";
  st = Parse({"--from-env"}, &p, env);
  CHECK(st.message() == "STOKER_WORKERS: --workers many: takes auto, or an integer 1-1024 (stokerd --help)");
}

TEST_CASE("stokerd --help lists every flag not hidden with its default, and --version the version") {
  ParsedDaemonFlags p;
  REQUIRE(Parse({"--help"}, &p).ok());
  CHECK(p.exit);
  for (const DaemonFlag& f : DaemonFlags()) {
    CAPTURE(f.name);
    CHECK((p.output.find("--" + f.name + "\n") != std::string::npos ||
           p.output.find("--" + f.name + ",") != std::string::npos) == !f.spec->hidden());
  }
  CHECK(p.output.find("--workers\n      decode worker processes") != std::string::npos);
  CHECK(p.output.find("[default auto]") != std::string::npos);
  REQUIRE(Parse({"--version"}, &p).ok());
  CHECK(p.output == "9.9.9\n");
}

TEST_CASE("the effective flags line round-trips through the parser") {
  ParsedDaemonFlags p;
  REQUIRE(Parse({"--socket", "/s", "--data-root", "/d", "--workers", "3", "--reserve-cpus", "1.5",
                 "--fault-hang-substring", "x"},
                &p, {{"HOME", "/h"}})
              .ok());
  const std::string line = EffectiveFlagsLine(p.config);
  CHECK(line.find("--socket=/s --data-root=/d --socket-mode=0600") == 0);
  CHECK(line.find("--fault-hang-substring=x") != std::string::npos);
  CHECK(line.find("--fault-crash-substring") == std::string::npos);
  std::vector<std::string> args;
  for (absl::string_view part : absl::StrSplit(line, ' ')) args.emplace_back(part);
  ParsedDaemonFlags q;
  REQUIRE(Parse(args, &q).ok());
  CHECK(q.config.SerializeAsString() == p.config.SerializeAsString());
}

}  // namespace
}  // namespace stoker
