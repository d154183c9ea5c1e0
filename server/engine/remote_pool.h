// The trainer node's remote pool (stokerd --decode-nodes): a second
// WorkerPool whose workers are stoker-relays (server/remote/relay.h), each
// the daemon's end of one stream to one decode node. To the engine they are
// more workers: the same tasks, the same in-order answers, the same
// supervision and exactly-once ledger; a relay that loses its node ends
// with worker::kExitNodeLost and its tasks are redone without blame.
//
// This room adds what is remote about them:
//   - where each slot dials. Every --decode-nodes entry HOST:PORT is
//     resolved (a Kubernetes headless Service's name is every ready pod's
//     address) and each address gets slots_per_node slots; a relay dials its
//     address, checking the node's certificate against HOST. The engine
//     resolves the entries again every kResolveEveryNs (outside its lock)
//     and calls Refresh: a new address gets its slots, a vanished one's
//     slots retire once they hold nothing (an address that no longer
//     resolves at all keeps its slots: a DNS failure is not a node gone).
//     An entry with a gRPC scheme ("dns:///", "ipv4:") is dialled as given.
//   - the per-node counters Status shows, by --decode-nodes entry;
//   - the gate (remote_gate.h) that says when the relays get work.
// Slot ids are the pool's; their Poller ids start at kPollerIdBase so that
// the local and remote pools share one Poller.
//
// Not thread-safe: the engine's lock guards it (Resolve needs no lock).

#ifndef STOKER_SERVER_ENGINE_REMOTE_POOL_H_
#define STOKER_SERVER_ENGINE_REMOTE_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/engine/latency.h"
#include "server/engine/remote_gate.h"
#include "server/engine/worker_launcher.h"
#include "server/engine/worker_pool.h"
#include "server/worker/worker_protocol.h"
#include "stoker/v1/config.pb.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

// An entry's addresses as a relay dials them ("ipv4:10.0.0.5:7070",
// "ipv6:[fd00::5]:7070"); empty when it cannot be resolved now. An entry
// with a scheme is itself. Injected into RemotePool for tests.
using NodeResolver = std::function<std::vector<std::string>(const std::string& entry)>;
// getaddrinfo of the entry's host (TCP), sorted, without duplicates.
std::vector<std::string> ResolveNode(const std::string& entry);

class RemotePool {
 public:
  static constexpr uint32_t kPollerIdBase = 1u << 20;
  static constexpr int64_t kResolveEveryNs = 10'000'000'000;

  // Nodes from --decode-nodes; slots per address from --decode-node-workers,
  // else each entry's Info (its workers; 2 when it cannot be asked within
  // 2 s, with a warning). `launcher`: null for stoker-relay processes
  // beside this executable (tests inject one, and `resolver`). Errors: the
  // flags (CheckDecodeFlags), the credentials' files, the relay binary.
  static absl::StatusOr<std::unique_ptr<RemotePool>> Create(const v1::DaemonConfig& c,
                                                            int data_root_fd, Clock* clock,
                                                            Poller* poller,
                                                            WorkerLauncher* launcher,
                                                            NodeResolver resolver = nullptr);

  WorkerPool& pool() { return *pool_; }
  const WorkerPool& pool() const { return *pool_; }
  // The --decode-nodes entries, as given.
  const std::vector<std::string>& entries() const { return entries_; }
  // Slot `slot`'s entry and the address it dials.
  const std::string& node_of(uint32_t slot) const;
  const std::string& address_of(uint32_t slot) const { return addresses_[slot_address_[slot]].target; }

  // Resolves every entry (no lock needed: reads only the entries).
  std::vector<std::vector<std::string>> Resolve() const;
  // Applies a resolution (Resolve's, by entry): slots for new addresses,
  // retirement for vanished ones. Returns the slots launched (the engine
  // tells them the rings).
  std::vector<uint32_t> Refresh(const std::vector<std::vector<std::string>>& resolved);

  // A task sent to relay `slot` at `now_ns`; its answer (the latency is
  // the difference); the relay's death, with the tasks it held.
  void Sent(uint64_t task_id, int64_t now_ns) { sent_ns_[task_id] = now_ns; }
  void CountResult(uint32_t slot, const worker::ResultMsg& r, int64_t now_ns);
  void CountDeath(uint32_t slot, const std::vector<uint64_t>& tasks);

  // Relays that fell behind: each holds a task sent over kStealAfter x its
  // node's median latency ago (at least kStealFloorNs), while the local
  // workers have room and no sample waits to be sent (`local_idle`): better
  // redone here than waited for. The engine stops them (WorkerPool::Stop:
  // no blame) and their tasks go back to the queue; CountStolen counts it.
  std::vector<uint32_t> Laggards(int64_t now_ns, bool local_idle) const;
  void CountStolen(uint32_t slot) { ++tallies_[addresses_[slot_address_[slot]].entry].stolen; }
  static constexpr int64_t kStealFloorNs = 500'000'000;
  static constexpr uint64_t kStealAfter = 4;

  // The ticker's second: feeds the gate, and the per-node rates.
  bool Tick(int64_t now_ns, double wait_share, double local_busy_share);
  bool open() const { return gate_.open(); }

  // Status: each live slot as a WorkerStatus (with its node), each entry's
  // counters, the gate.
  void Export(v1::StatusResponse* r) const;

 private:
  struct NodeTally {
    uint64_t done = 0, failed = 0, sent = 0, received = 0, lost = 0, decode_ns = 0, stolen = 0;
    uint64_t done_at_tick = 0;
    double rate = 0;
    LatencyHistogram latency;
  };
  struct Address {
    uint32_t entry = 0;
    std::string target;    // what the relay dials
    std::string tls_name;  // the name the node's certificate must have ("": the target's)
    bool live = true;      // still resolved; its slots are not retiring
  };
  RemotePool(std::vector<std::string> entries, uint32_t slots_per_node, bool always,
             NodeResolver resolver);
  // Adds `target` of entry `e` and its slots; the ids launched.
  std::vector<uint32_t> AddAddress(uint32_t e, const std::string& target);

  std::vector<std::string> entries_;
  const uint32_t slots_per_node_;
  NodeResolver resolver_;
  std::unique_ptr<PosixSpawnLauncher> own_launcher_;
  std::unique_ptr<WorkerPool> pool_;
  std::vector<Address> addresses_;       // append-only
  std::vector<uint32_t> slot_address_;   // by slot: its index in addresses_
  std::vector<NodeTally> tallies_;       // by entry
  RemoteGate gate_;
  std::unordered_map<uint64_t, int64_t> sent_ns_;  // by task id, while in flight
  bool shared_root_ = false;
  int64_t tick_ns_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_REMOTE_POOL_H_
