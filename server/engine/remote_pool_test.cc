// The remote pool without a network: fake relays (threads, as fake workers
// are), a scripted resolver, the slots per address as names come and go.

#include "server/engine/remote_pool.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>

#include "common/clock.h"
#include "testing/fake_launcher.h"

namespace stoker {
namespace {

struct Fixture {
  Fixture() {
    char dir[] = "/tmp/stkrpXXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    folder = dir;
    std::ofstream(folder + "/token") << "0123456789abcdef0123456789abcdef\n";
    REQUIRE(poller.Init().ok());
    config.set_decode_nodes("a.svc:7070, b.svc:7070");
    config.set_decode_token_file(folder + "/token");
    config.set_decode_node_workers(2);
    config.set_decode_when("stalled");
    config.set_task_timeout_ms(30000);
  }
  ~Fixture() {
    if (pool != nullptr) pool->pool().Shutdown(1000);
    std::remove((folder + "/token").c_str());
    ::rmdir(folder.c_str());
  }
  void Create() {
    auto p = RemotePool::Create(config, -1, SystemClock(), &poller, &launcher,
                                [this](const std::string& e) { return dns[e]; });
    REQUIRE(p.ok());
    pool = std::move(*p);
  }
  std::map<std::string, uint32_t> SlotsByAddress() {
    std::map<std::string, uint32_t> out;
    for (uint32_t i = 0; i < pool->pool().size(); ++i) {
      const WorkerSlot& w = pool->pool().worker(i);
      if (!w.retiring && !w.retired) ++out[pool->address_of(i)];
    }
    return out;
  }

  std::string folder;
  v1::DaemonConfig config;
  Poller poller;
  testing::FakeLauncher launcher;
  std::map<std::string, std::vector<std::string>> dns = {
      {"a.svc:7070", {"ipv4:10.0.0.1:7070", "ipv4:10.0.0.2:7070"}},
      {"b.svc:7070", {"ipv4:10.0.1.1:7070"}}};
  std::unique_ptr<RemotePool> pool;
};

TEST_CASE("remote pool: each address of each name gets its relays") {
  Fixture f;
  f.Create();
  CHECK(f.pool->pool().size() == 6);
  CHECK(f.SlotsByAddress() == std::map<std::string, uint32_t>{{"ipv4:10.0.0.1:7070", 2},
                                                             {"ipv4:10.0.0.2:7070", 2},
                                                             {"ipv4:10.0.1.1:7070", 2}});
  CHECK(f.pool->node_of(0) == "a.svc:7070");
  CHECK(f.pool->node_of(5) == "b.svc:7070");
  CHECK(f.pool->pool().poller_id_base() == RemotePool::kPollerIdBase);
  v1::StatusResponse st;
  f.pool->Export(&st);
  REQUIRE(st.decode_nodes_size() == 2);
  CHECK(st.decode_nodes(0).address() == "a.svc:7070");
  CHECK(st.decode_nodes(0).slots() == 4);
  CHECK(st.decode_nodes(1).slots() == 2);
  CHECK(st.workers_size() == 6);
  CHECK(st.workers(0).node() == "a.svc:7070 (ipv4:10.0.0.1:7070)");
  CHECK_FALSE(st.decode_nodes_open());  // stalled: closed until a trainer waits
}

TEST_CASE("remote pool: a new address gets relays, a vanished one's retire, a DNS failure keeps") {
  Fixture f;
  f.Create();
  f.dns["a.svc:7070"] = {"ipv4:10.0.0.2:7070", "ipv4:10.0.0.3:7070"};  // .1 gone, .3 new
  f.dns["b.svc:7070"] = {};                                            // does not resolve now
  const std::vector<uint32_t> launched = f.pool->Refresh(f.pool->Resolve());
  CHECK(launched == std::vector<uint32_t>{6, 7});
  CHECK(f.SlotsByAddress() == std::map<std::string, uint32_t>{{"ipv4:10.0.0.2:7070", 2},
                                                             {"ipv4:10.0.0.3:7070", 2},
                                                             {"ipv4:10.0.1.1:7070", 2}});
  CHECK(f.pool->pool().worker(0).retiring);
  CHECK(f.pool->pool().worker(1).retiring);
  // The same answer again changes nothing.
  CHECK(f.pool->Refresh(f.pool->Resolve()).empty());
  // The retiring relays are asked to go once they hold nothing.
  CHECK(f.pool->pool().active() == 6);
  f.pool->pool().Supervise(false);
  CHECK(f.pool->pool().worker(0).shutdown_sent);
  CHECK(f.pool->pool().worker(1).shutdown_sent);
  CHECK_FALSE(f.pool->pool().worker(2).shutdown_sent);
  v1::StatusResponse st;
  f.pool->Export(&st);
  CHECK(st.decode_nodes(0).slots() == 4);
}

TEST_CASE("remote pool: results and deaths count against their name, a name with a scheme is dialled as given") {
  Fixture f;
  f.config.set_decode_nodes("a.svc:7070,ipv4:127.0.0.1:9");
  f.dns["ipv4:127.0.0.1:9"] = {"ipv4:127.0.0.1:9"};
  f.config.set_decode_when("always");
  f.Create();
  REQUIRE(f.pool->pool().size() == 6);
  CHECK(f.pool->address_of(4) == "ipv4:127.0.0.1:9");
  worker::ResultMsg ok{};
  ok.bytes = 1000;
  ok.input_bytes = 300;
  ok.decode_ns = 2'000'000;
  worker::ResultMsg failed{};
  failed.code = 3;
  ok.task_id = 11;
  f.pool->Sent(11, 1'000'000);
  f.pool->CountResult(0, ok, 4'000'000);  // 3 ms after it was sent
  ok.task_id = 12;
  f.pool->CountResult(3, ok, 5'000'000);  // never Sent: no latency
  f.pool->CountResult(4, failed, 5'000'000);
  f.pool->Sent(13, 1'000'000);
  f.pool->CountDeath(5, {13});
  CHECK(f.pool->Tick(1'000'000'000, 0, 0));  // always open
  ok.task_id = 13;
  f.pool->CountResult(1, ok, 9'000'000'000);  // its relay died: forgotten
  f.pool->Tick(2'000'000'000, 0, 0);
  v1::StatusResponse st;
  f.pool->Export(&st);
  CHECK(st.decode_nodes(0).samples_done() == 3);
  CHECK(st.decode_nodes(0).latency().count() == 1);
  CHECK(st.decode_nodes(0).latency().mean_ms() == Approx(3.0));
  CHECK(st.decode_nodes(0).bytes_received() == 3000);
  CHECK(st.decode_nodes(0).bytes_sent() == 900);
  CHECK(st.decode_nodes(0).samples_per_second() == Approx(1.0));
  CHECK(st.decode_nodes(1).samples_failed() == 1);
  CHECK(st.decode_nodes(1).lost() == 1);
  CHECK(st.decode_nodes_open());
}

TEST_CASE("remote pool: a relay holding a task too long while local workers idle is a laggard") {
  Fixture f;
  f.Create();
  worker::TaskMsg t{};
  t.type = worker::kTask;
  t.task_id = 77;
  REQUIRE(f.pool->pool().SendTask(0, t, worker::TaskHeaderBytes()));
  const int64_t t0 = 1'000'000'000;
  f.pool->Sent(77, t0);
  const int64_t floor = RemotePool::kStealFloorNs;
  CHECK(f.pool->Laggards(t0 + floor - 1, true).empty());
  CHECK(f.pool->Laggards(t0 + floor + 1, true) == std::vector<uint32_t>{0});
  CHECK(f.pool->Laggards(t0 + 10 * floor, false).empty());  // local workers busy: wait
  // Its node answers in 200 ms as a rule: four times that, not the floor.
  worker::ResultMsg r{};
  for (uint64_t id = 100; id < 120; ++id) {
    f.pool->Sent(id, 0);
    r.task_id = id;
    f.pool->CountResult(1, r, 200'000'000);
  }
  CHECK(f.pool->Laggards(t0 + floor + 1, true).empty());
  CHECK(f.pool->Laggards(t0 + 4 * 262'144'000 + 1, true) == std::vector<uint32_t>{0});
  // Stopped: taken back once, not again while its death is on its way.
  f.pool->CountStolen(0);
  f.pool->pool().Stop(0);
  CHECK(f.pool->Laggards(t0 + 10 * floor, true).empty());
  v1::StatusResponse st;
  f.pool->Export(&st);
  CHECK(st.decode_nodes(0).stolen() == 1);
}

TEST_CASE("ResolveNode: a gRPC target is itself, a name becomes its addresses") {
  CHECK(ResolveNode("ipv4:10.1.2.3:7070") == std::vector<std::string>{"ipv4:10.1.2.3:7070"});
  CHECK(ResolveNode("127.0.0.1:7070") == std::vector<std::string>{"ipv4:127.0.0.1:7070"});
  CHECK(ResolveNode("[::1]:7070") == std::vector<std::string>{"ipv6:[::1]:7070"});
  CHECK(ResolveNode("no-such-host.invalid:7070").empty());
  CHECK(ResolveNode("no-port").empty());
}

}  // namespace
}  // namespace stoker
