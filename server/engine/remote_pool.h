// The trainer node's remote pool (stokerd --decode-nodes): a second
// WorkerPool whose workers are stoker-relays (server/remote/relay.h), each
// the daemon's end of one stream to one decode node. To the engine they are
// more workers: the same tasks, the same in-order answers, the same
// supervision and exactly-once ledger; a relay that loses its node ends
// with worker::kExitNodeLost and its tasks are redone without blame.
//
// This room adds what is remote about them: which node each slot serves
// (slots_per_node consecutive slots per node, in --decode-nodes order), the
// per-node counters Status shows, and the gate (remote_gate.h) that says
// when they get work. Slot ids are the pool's; their Poller ids start at
// kPollerIdBase so that the local and remote pools share one Poller.
//
// Not thread-safe: the engine's lock guards it.

#ifndef STOKER_SERVER_ENGINE_REMOTE_POOL_H_
#define STOKER_SERVER_ENGINE_REMOTE_POOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/engine/remote_gate.h"
#include "server/engine/worker_launcher.h"
#include "server/engine/worker_pool.h"
#include "server/worker/worker_protocol.h"
#include "stoker/v1/config.pb.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

class RemotePool {
 public:
  static constexpr uint32_t kPollerIdBase = 1u << 20;

  // Nodes from --decode-nodes; slots per node from --decode-node-workers,
  // else each node's Info (its workers; 2 when it cannot be asked within
  // 2 s, with a warning). `launcher`: null for stoker-relay processes
  // beside this executable (tests inject one). Errors: the flags
  // (CheckDecodeFlags), the credentials' files, the relay binary.
  static absl::StatusOr<std::unique_ptr<RemotePool>> Create(const v1::DaemonConfig& c,
                                                            int data_root_fd, Clock* clock,
                                                            Poller* poller,
                                                            WorkerLauncher* launcher);

  WorkerPool& pool() { return *pool_; }
  const WorkerPool& pool() const { return *pool_; }
  const std::string& node_of(uint32_t slot) const { return nodes_[slot / slots_per_node_]; }

  // A relay's answer; its death (`lost`: not the sample's doing, i.e. any
  // relay death but a crash on a sample reported by the node).
  void CountResult(uint32_t slot, const worker::ResultMsg& r);
  void CountDeath(uint32_t slot);

  // The ticker's second: feeds the gate, and the per-node rates.
  bool Tick(int64_t now_ns, double wait_share, double local_busy_share);
  bool open() const { return gate_.open(); }

  // Status: each slot as a WorkerStatus (with its node), each node's
  // counters, the gate.
  void Export(v1::StatusResponse* r) const;

 private:
  struct NodeTally {
    uint64_t done = 0, failed = 0, sent = 0, received = 0, lost = 0, decode_ns = 0;
    uint64_t done_at_tick = 0;
    double rate = 0;
  };
  RemotePool(std::vector<std::string> nodes, uint32_t slots_per_node, bool always);

  std::vector<std::string> nodes_;
  const uint32_t slots_per_node_;
  std::unique_ptr<PosixSpawnLauncher> own_launcher_;
  std::unique_ptr<WorkerPool> pool_;
  std::vector<NodeTally> tallies_;
  RemoteGate gate_;
  bool shared_root_ = false;
  int64_t tick_ns_ = 0;
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_REMOTE_POOL_H_
