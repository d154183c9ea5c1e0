#include "server/engine/remote_pool.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "server/remote/relay.h"
#include "server/remote/wire.h"
#include "spdlog/spdlog.h"
#include "stoker/v1/decode.grpc.pb.h"

namespace stoker {
namespace {

constexpr uint32_t kDefaultSlots = 2;

// The node's workers by its Info, or 0 when it cannot be asked.
uint32_t AskWorkers(const v1::DaemonConfig& c, const std::string& node, const std::string& token) {
  auto creds = remote::RelayChannelCredentials(c.tls_ca(), c.tls_cert(), c.tls_key());
  if (!creds.ok()) return 0;
  auto stub = v1::DecodeNode::NewStub(grpc::CreateChannel(remote::NodeTarget(node), *creds));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ctx.AddMetadata(remote::kFingerprintKey, remote::ProtocolFingerprint());
  if (!token.empty()) ctx.AddMetadata(remote::kTokenKey, token);
  v1::DecodeNodeInfoRequest req;
  v1::DecodeNodeInfo info;
  const grpc::Status st = stub->Info(&ctx, req, &info);
  if (!st.ok()) {
    spdlog::warn("decode node {}: {} (code {}); assuming {} workers until it answers", node,
                 st.error_message(), static_cast<int>(st.error_code()), kDefaultSlots);
    return 0;
  }
  spdlog::info("decode node {}: stoker {}, {} workers", node, info.version(), info.workers());
  return info.workers();
}

}  // namespace

RemotePool::RemotePool(std::vector<std::string> nodes, uint32_t slots_per_node, bool always)
    : nodes_(std::move(nodes)),
      slots_per_node_(slots_per_node),
      tallies_(nodes_.size()),
      gate_(always) {}

absl::StatusOr<std::unique_ptr<RemotePool>> RemotePool::Create(const v1::DaemonConfig& c,
                                                               int data_root_fd, Clock* clock,
                                                               Poller* poller,
                                                               WorkerLauncher* launcher) {
  if (absl::Status st = remote::CheckDecodeFlags(c); !st.ok()) return st;
  std::vector<std::string> nodes;
  for (absl::string_view part : absl::StrSplit(c.decode_nodes(), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) nodes.emplace_back(part);
  }
  if (nodes.empty()) {
    return absl::InvalidArgumentError("--decode-nodes names no node (HOST:PORT[,HOST:PORT...])");
  }
  std::string token;
  if (!c.decode_token_file().empty()) {
    auto t = remote::ReadToken(c.decode_token_file());
    if (!t.ok()) return t.status();
    token = *t;
  }
  // The credentials' files are read now, so that a bad one stops the start.
  if (auto creds = remote::RelayChannelCredentials(c.tls_ca(), c.tls_cert(), c.tls_key());
      !creds.ok()) {
    return creds.status();
  }
  uint32_t slots = c.decode_node_workers();
  if (slots == 0) {
    for (const std::string& n : nodes) slots = std::max(slots, AskWorkers(c, n, token));
    if (slots == 0) slots = kDefaultSlots;
  }
  std::unique_ptr<RemotePool> p(new RemotePool(nodes, slots, c.decode_when() == "always"));
  p->shared_root_ = c.decode_shared_root();
  if (launcher == nullptr) {
    auto binary = BesideExecutable("stoker-relay");
    if (!binary.ok()) return binary.status();
    p->own_launcher_ = std::make_unique<PosixSpawnLauncher>(*binary, data_root_fd, false);
    const std::vector<std::string> node_list = nodes;
    p->own_launcher_->set_extra_args([c, node_list, slots](uint32_t id) {
      std::vector<std::string> a = {"--node", node_list[(id / slots) % node_list.size()],
                                    "--timeout-ms", std::to_string(c.decode_node_timeout_ms())};
      if (c.decode_shared_root()) a.push_back("--shared-root");
      if (!c.tls_ca().empty()) {
        a.insert(a.end(), {"--tls-ca", c.tls_ca(), "--tls-cert", c.tls_cert(), "--tls-key",
                           c.tls_key()});
      }
      if (!c.decode_token_file().empty()) a.insert(a.end(), {"--token-file", c.decode_token_file()});
      return a;
    });
    launcher = p->own_launcher_.get();
  }
  p->pool_ = std::make_unique<WorkerPool>(launcher, clock, poller, c.task_timeout_ms(),
                                          kPollerIdBase);
  p->pool_->set_wait_for_hello(true);
  if (absl::Status st = p->pool_->Start(slots * static_cast<uint32_t>(nodes.size())); !st.ok()) {
    return st;
  }
  spdlog::info("decode nodes: {} x {} remote worker(s) ({}; {}), given work {}",
               nodes.size(), slots, c.decode_nodes(),
               c.decode_shared_root() ? "they read their own data root" : "samples shipped",
               c.decode_when() == "always" ? "always" : "while trainers wait for data");
  return p;
}

void RemotePool::CountResult(uint32_t slot, const worker::ResultMsg& r) {
  NodeTally& t = tallies_[slot / slots_per_node_];
  if (r.code == 0) {
    ++t.done;
    t.received += r.bytes + r.mask_bytes;
    t.decode_ns += r.decode_ns + r.augment_ns;
  } else {
    ++t.failed;
  }
  if (!shared_root_) t.sent += r.input_bytes;
}

void RemotePool::CountDeath(uint32_t slot) { ++tallies_[slot / slots_per_node_].lost; }

bool RemotePool::Tick(int64_t now_ns, double wait_share, double local_busy_share) {
  const int64_t elapsed = now_ns - tick_ns_;
  for (NodeTally& t : tallies_) {
    if (tick_ns_ != 0 && elapsed > 0) t.rate = (t.done - t.done_at_tick) * 1e9 / elapsed;
    t.done_at_tick = t.done;
  }
  tick_ns_ = now_ns;
  return gate_.Observe(wait_share, local_busy_share);
}

void RemotePool::Export(v1::StatusResponse* r) const {
  std::vector<uint32_t> connected(nodes_.size());
  for (uint32_t i = 0; i < pool_->size(); ++i) {
    const WorkerSlot& w = pool_->worker(i);
    auto* ws = r->add_workers();
    ws->set_id(w.id);
    ws->set_pid(w.dead ? 0 : w.pid);
    ws->set_state(w.dead ? "restarting" : !w.greeted ? "connecting" : w.state);
    ws->set_restarts(w.restarts);
    ws->set_crashes(w.crashes);
    ws->set_samples_done(w.samples_done);
    ws->set_samples_failed(w.samples_failed);
    ws->set_in_flight(static_cast<uint32_t>(w.in_flight.size()));
    ws->set_cpu_seconds(pool_->CpuSeconds(i));
    ws->set_node(node_of(i));
    if (!w.dead && w.greeted) ++connected[i / slots_per_node_];
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const NodeTally& t = tallies_[n];
    auto* d = r->add_decode_nodes();
    d->set_address(nodes_[n]);
    d->set_slots(slots_per_node_);
    d->set_connected(connected[n]);
    d->set_samples_done(t.done);
    d->set_samples_failed(t.failed);
    d->set_bytes_sent(t.sent);
    d->set_bytes_received(t.received);
    d->set_lost(t.lost);
    d->set_decode_seconds(static_cast<double>(t.decode_ns) / 1e9);
    d->set_samples_per_second(t.rate);
  }
  r->set_decode_nodes_open(gate_.open());
  r->set_decode_nodes_reason(gate_.reason());
}

}  // namespace stoker
