// Faults injected into a real daemon: bad files under both failure
// policies, a worker that crashes on one file, a stopped (hung) worker, a
// client killed with SIGKILL. Each checks that nothing is lost or repeated.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "stoker/client.h"
#include "testing/daemon_harness.h"

extern char** environ;

namespace stoker::testing {
namespace {

namespace fs = std::filesystem;

AttachOptions Small(uint32_t batch, uint32_t epochs) {
  AttachOptions o;
  o.dataset = "ds";
  o.batch_size = batch;
  o.epochs = epochs;
  o.seed = 5;
  o.pipeline = R"({"size": 24})";
  o.client_name = "fault_test";
  return o;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

// Consumes every batch; returns, per epoch, the planned indices delivered
// and counts statuses.
struct Tally {
  std::vector<std::vector<int64_t>> planned;
  std::map<SampleStatus, int> statuses;
  std::vector<std::string> errors;
};

Tally ConsumeAll(Session& s, uint32_t epochs) {
  Tally t;
  t.planned.resize(epochs);
  for (;;) {
    auto b = s.Next(30000);
    if (absl::IsOutOfRange(b.status())) break;
    if (absl::IsAborted(b.status())) {
      t.errors.emplace_back(b.status().message());
      continue;
    }
    REQUIRE(b.ok());
    for (uint32_t i = 0; i < b->size(); ++i) {
      t.planned[b->epoch()].push_back(b->planned_indices()[i]);
      ++t.statuses[b->status(i)];
      if (b->status(i) == SampleStatus::kReplaced) {
        CHECK(b->indices()[i] != b->planned_indices()[i]);
      }
    }
  }
  return t;
}

std::vector<int64_t> Iota(int n) {
  std::vector<int64_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST_CASE("bad files are replaced under 'skip', named under 'error', and quarantined") {
  TempDir data;
  auto files = MakeImageFolder(data.path() + "/ds", 2, 12, 3);  // 24 samples
  // Break three of them, each a different way.
  WriteFile(files[3], "");
  WriteFile(files[10], "this is text, not a JPEG");
  {
    std::ifstream in(files[17], std::ios::binary);
    std::string jpeg((std::istreambuf_iterator<char>(in)), {});
    WriteFile(files[17], jpeg.substr(0, jpeg.size() / 2));  // truncated
  }
  const std::set<int64_t> bad = {3, 10, 17};
  auto daemon = Daemon::Start(data.path());
  auto client = Client::Connect(daemon->socket());
  REQUIRE(client.ok());

  SECTION("skip") {
    auto s = (*client)->Attach(Small(5, 2));
    REQUIRE(s.ok());
    Tally t = ConsumeAll(**s, 2);
    for (auto& e : t.planned) {
      std::sort(e.begin(), e.end());
      CHECK(e == Iota(24));  // every planned sample has its place, once
    }
    CHECK(t.statuses[SampleStatus::kReplaced] == 6);  // 3 per epoch
    CHECK(t.statuses[SampleStatus::kFailed] == 0);
    auto js = (*client)->StatusJson(true);
    REQUIRE(js.ok());
    for (int64_t i : bad) {
      CHECK(js->find(fs::path(files[i]).filename().string()) != std::string::npos);
    }
    // Only the bad files are in the quarantine: the session's list and the
    // daemon's memory of the dataset each name the three of them once.
    const std::vector<int64_t> listed = JsonInts(*js, "dataset_index");
    CHECK(listed.size() == 6);
    CHECK(std::set<int64_t>(listed.begin(), listed.end()) == bad);
    CHECK(daemon->Log().find("Premature end") != std::string::npos);
  }
  SECTION("error") {
    AttachOptions o = Small(5, 1);
    o.failure_policy = FailurePolicy::kError;
    auto s = (*client)->Attach(o);
    REQUIRE(s.ok());
    Tally t = ConsumeAll(**s, 1);
    REQUIRE(t.errors.size() >= 1);
    bool named = false;
    for (const auto& e : t.errors) {
      for (int64_t i : bad) named |= e.find(fs::path(files[i]).filename().string()) != std::string::npos;
    }
    CHECK(named);
  }
}

TEST_CASE("a worker that dies twice on one file quarantines it, the rest is delivered") {
  TempDir data;
  auto files = MakeImageFolder(data.path() + "/ds", 2, 10, 4);  // 20 samples
  fs::rename(files[7], data.path() + "/ds/class_0/poison_7.jpg");
  Daemon::Options o;
  o.extra_args = {"--fault-crash-substring", "poison"};
  auto daemon = Daemon::Start(data.path(), o);
  auto client = Client::Connect(daemon->socket());
  REQUIRE(client.ok());
  auto s = (*client)->Attach(Small(4, 1));
  REQUIRE(s.ok());
  Tally t = ConsumeAll(**s, 1);
  std::sort(t.planned[0].begin(), t.planned[0].end());
  CHECK(t.planned[0] == Iota(20));
  CHECK(t.statuses[SampleStatus::kReplaced] == 1);
  auto js = (*client)->StatusJson(true);
  REQUIRE(js.ok());
  CHECK(js->find("poison_7.jpg") != std::string::npos);
  CHECK(js->find("died 2 times") != std::string::npos);
  CHECK(JsonInts(*js, "worker_restarts_total").at(0) >= 2);
}

TEST_CASE("a stopped (hung) worker is killed after the task deadline and replaced") {
  TempDir data;
  MakeImageFolder(data.path() + "/ds", 2, 10, 5);
  Daemon::Options o;
  o.workers = 2;
  o.extra_args = {"--task-timeout-ms", "1500"};
  auto daemon = Daemon::Start(data.path(), o);
  auto client = Client::Connect(daemon->socket());
  REQUIRE(client.ok());
  auto js = (*client)->StatusJson();
  REQUIRE(js.ok());
  const int64_t victim = JsonInts(*js, "pid").at(1);
  REQUIRE(::kill(static_cast<pid_t>(victim), SIGSTOP) == 0);
  auto s = (*client)->Attach(Small(4, 2));
  REQUIRE(s.ok());
  Tally t = ConsumeAll(**s, 2);
  for (auto& e : t.planned) {
    std::sort(e.begin(), e.end());
    CHECK(e == Iota(20));
  }
  CHECK(t.statuses[SampleStatus::kOk] == 40);
  js = (*client)->StatusJson();
  REQUIRE(js.ok());
  CHECK(JsonInts(*js, "worker_restarts_total").at(0) >= 1);
  CHECK(daemon->Log().find("made no progress") != std::string::npos);
  ::kill(static_cast<pid_t>(victim), SIGKILL);  // in case it was not reaped yet
}

TEST_CASE("a client killed with SIGKILL has its session and ring reclaimed within seconds") {
  TempDir data;
  MakeImageFolder(data.path() + "/ds", 2, 10, 6);
  auto daemon = Daemon::Start(data.path());
  auto client = Client::Connect(daemon->socket());
  REQUIRE(client.ok());

  std::vector<std::string> args = {STOKERCTL_PATH, "consume",   "--socket", daemon->socket(),
                                   "--dataset",    "ds",        "--epochs", "0",
                                   "--batch-size", "4",         "--size",   "24"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  REQUIRE(::posix_spawn(&pid, STOKERCTL_PATH, nullptr, nullptr, argv.data(), environ) == 0);
  // The ring is a memfd ("memfd:stoker-<session>"): reclaimed, the daemon
  // no longer maps it.
  std::string ring;
  auto daemon_maps_ring = [&] {
    std::ifstream maps("/proc/" + std::to_string(daemon->pid()) + "/maps");
    std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
    return text.find("/" + ring + " ") != std::string::npos;
  };
  REQUIRE(WaitFor(
      [&] {
        auto js = (*client)->StatusJson();
        if (!js.ok()) return false;
        auto at = js->find("\"ring_name\":\"");
        if (at == std::string::npos) return false;
        at += 13;
        ring = js->substr(at, js->find('"', at) - at);
        return JsonInts(*js, "batches_consumed").size() == 1 &&
               JsonInts(*js, "batches_consumed")[0] > 2;
      },
      std::chrono::seconds(20)));
  CHECK(ring.rfind("memfd:stoker-", 0) == 0);
  CHECK(daemon_maps_ring());
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int st;
  ::waitpid(pid, &st, 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(WaitFor(
      [&] {
        auto js = (*client)->StatusJson();
        return js.ok() && js->find("\"sessions\":[]") != std::string::npos && !daemon_maps_ring();
      },
      // Under a half second when the machine is idle; seen over 5 s once
      // with a build and the Python suite running beside it on 2 cores.
      std::chrono::seconds(15)));
  INFO("reclaimed after "
       << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  auto js = (*client)->StatusJson();
  REQUIRE(js.ok());
  CHECK(JsonInts(*js, "sessions_reclaimed").at(0) == 1);
  // The daemon serves the next client as before.
  auto s = (*client)->Attach(Small(4, 1));
  REQUIRE(s.ok());
  CHECK(ConsumeAll(**s, 1).planned[0].size() == 20);
}

}  // namespace
}  // namespace stoker::testing
