#include "server/engine/remote_pool.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "server/engine/status_export.h"
#include "server/remote/wire.h"
#include "spdlog/spdlog.h"
#include "stoker/v1/decode.grpc.pb.h"

namespace stoker {
namespace {

constexpr uint32_t kDefaultRelaysPerAddress = 2;

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
                 st.error_message(), static_cast<int>(st.error_code()), kDefaultRelaysPerAddress);
    return 0;
  }
  spdlog::info("decode node {}: stoker {}, {} workers", node, info.version(), info.workers());
  return info.workers();
}

}  // namespace

std::vector<std::string> ResolveNode(const std::string& entry) {
  if (remote::NodeTarget(entry) == entry) return {entry};  // a gRPC target as given
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos) return {};
  std::string host = entry.substr(0, colon);
  const std::string port = entry.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return {};
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof(ip));
      out.push_back(absl::StrCat("ipv4:", ip, ":", port));
    } else if (a->ai_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip,
                  sizeof(ip));
      out.push_back(absl::StrCat("ipv6:[", ip, "]:", port));
    }
  }
  ::freeaddrinfo(res);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

RemotePool::RemotePool(std::vector<std::string> entries, uint32_t slots_per_node, bool always,
                       NodeResolver resolver)
    : entries_(std::move(entries)),
      slots_per_node_(slots_per_node),
      resolver_(resolver ? std::move(resolver) : NodeResolver(ResolveNode)),
      tallies_(entries_.size()),
      gate_(always) {}

absl::StatusOr<std::unique_ptr<RemotePool>> RemotePool::Create(const v1::DaemonConfig& c,
                                                               int data_root_fd, Clock* clock,
                                                               Poller* poller,
                                                               WorkerLauncher* launcher,
                                                               NodeResolver resolver) {
  if (absl::Status st = remote::CheckDecodeFlags(c); !st.ok()) return st;
  std::vector<std::string> entries;
  for (absl::string_view part : absl::StrSplit(c.decode_nodes(), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) entries.emplace_back(part);
  }
  if (entries.empty()) {
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
    for (const std::string& n : entries) slots = std::max(slots, AskWorkers(c, n, token));
    if (slots == 0) slots = kDefaultRelaysPerAddress;
  }
  std::unique_ptr<RemotePool> p(
      new RemotePool(entries, slots, c.decode_when() == "always", std::move(resolver)));
  p->shared_root_ = c.decode_shared_root();
  if (launcher == nullptr) {
    auto binary = BesideExecutable("stoker-relay");
    if (!binary.ok()) return binary.status();
    p->own_launcher_ = std::make_unique<PosixSpawnLauncher>(*binary, data_root_fd, false);
    RemotePool* self = p.get();
    p->own_launcher_->set_extra_args([c, self](uint32_t id) {
      const Address& a = self->addresses_[self->slot_address_[id]];
      std::vector<std::string> args = {"--node", a.target, "--timeout-ms",
                                       std::to_string(c.decode_node_timeout_ms())};
      if (!a.tls_name.empty()) args.insert(args.end(), {"--tls-name", a.tls_name});
      if (c.decode_shared_root()) args.push_back("--shared-root");
      if (!c.tls_ca().empty()) {
        args.insert(args.end(), {"--tls-ca", c.tls_ca(), "--tls-cert", c.tls_cert(),
                                 "--tls-key", c.tls_key()});
      }
      if (!c.decode_token_file().empty()) {
        args.insert(args.end(), {"--token-file", c.decode_token_file()});
      }
      return args;
    });
    launcher = p->own_launcher_.get();
  }
  p->pool_ = std::make_unique<WorkerPool>(launcher, clock, poller, c.task_timeout_ms(),
                                          kPollerIdBase);
  p->pool_->set_wait_for_hello(true);
  const auto resolved = p->Resolve();
  for (uint32_t e = 0; e < p->entries_.size(); ++e) {
    // Not resolved now: the name itself, which the relay resolves (and
    // retries) until Refresh finds its addresses.
    const std::vector<std::string> targets =
        resolved[e].empty() ? std::vector<std::string>{remote::NodeTarget(p->entries_[e])}
                            : resolved[e];
    for (const std::string& t : targets) p->AddAddress(e, t);
  }
  spdlog::info("decode nodes: {} at {} address(es), {} relay(s) each ({}), given work {}",
               c.decode_nodes(), p->addresses_.size(), slots,
               c.decode_shared_root() ? "they read their own data root" : "samples shipped",
               c.decode_when() == "always" ? "always" : "while trainers wait for data");
  return p;
}

const std::string& RemotePool::node_of(uint32_t slot) const {
  return entries_[addresses_[slot_address_[slot]].entry];
}

std::vector<uint32_t> RemotePool::AddAddress(uint32_t e, const std::string& target) {
  Address a;
  a.entry = e;
  a.target = target;
  // Dialled by address: the certificate is checked against the entry's host.
  if (target != entries_[e] && target != remote::NodeTarget(entries_[e])) {
    const std::string& entry = entries_[e];
    std::string host = entry.substr(0, entry.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    a.tls_name = host;
  }
  addresses_.push_back(std::move(a));
  std::vector<uint32_t> launched;
  for (uint32_t i = 0; i < slots_per_node_; ++i) {
    slot_address_.push_back(static_cast<uint32_t>(addresses_.size() - 1));
    if (auto id = pool_->Add(); id.has_value()) launched.push_back(*id);
  }
  return launched;
}

std::vector<std::vector<std::string>> RemotePool::Resolve() const {
  std::vector<std::vector<std::string>> out;
  out.reserve(entries_.size());
  for (const std::string& e : entries_) out.push_back(resolver_(e));
  return out;
}

std::vector<uint32_t> RemotePool::Refresh(const std::vector<std::vector<std::string>>& resolved) {
  std::vector<uint32_t> launched;
  for (uint32_t e = 0; e < entries_.size() && e < resolved.size(); ++e) {
    if (resolved[e].empty()) continue;  // a DNS failure: keep what we have
    const std::set<std::string> now(resolved[e].begin(), resolved[e].end());
    std::set<std::string> have;
    for (size_t i = 0; i < addresses_.size(); ++i) {
      Address& a = addresses_[i];
      if (a.entry != e || !a.live) continue;
      if (now.count(a.target) != 0) {
        have.insert(a.target);
        continue;
      }
      a.live = false;  // gone from the name: its relays finish and retire
      for (uint32_t s = 0; s < slot_address_.size(); ++s) {
        if (slot_address_[s] == i) pool_->Retire(s);
      }
      spdlog::info("decode node {}: {} no longer resolves; its relays retire", entries_[e],
                   a.target);
    }
    for (const std::string& t : now) {
      if (have.count(t) != 0) continue;
      spdlog::info("decode node {}: new address {}: {} relay(s)", entries_[e], t,
                   slots_per_node_);
      for (uint32_t id : AddAddress(e, t)) launched.push_back(id);
    }
  }
  return launched;
}

void RemotePool::CountResult(uint32_t slot, const worker::ResultMsg& r, int64_t now_ns) {
  NodeTally& t = tallies_[addresses_[slot_address_[slot]].entry];
  if (auto it = sent_ns_.find(r.task_id); it != sent_ns_.end()) {
    t.latency.Add(static_cast<uint64_t>(std::max<int64_t>(0, now_ns - it->second)));
    sent_ns_.erase(it);
  }
  if (r.code == 0) {
    ++t.done;
    t.received += r.bytes + r.mask_bytes;
    t.decode_ns += r.decode_ns + r.augment_ns;
  } else {
    ++t.failed;
  }
  if (!shared_root_) t.sent += r.input_bytes;
}

void RemotePool::CountDeath(uint32_t slot, const std::vector<uint64_t>& tasks) {
  ++tallies_[addresses_[slot_address_[slot]].entry].lost;
  for (uint64_t id : tasks) sent_ns_.erase(id);
}

std::vector<uint32_t> RemotePool::Laggards(int64_t now_ns, bool local_idle) const {
  std::vector<uint32_t> out;
  if (!local_idle) return out;
  for (uint32_t i = 0; i < pool_->size(); ++i) {
    const WorkerSlot& w = pool_->worker(i);
    if (w.dead || w.hung || w.stopped || w.in_flight.empty()) continue;
    auto sent = sent_ns_.find(w.in_flight.front());
    if (sent == sent_ns_.end()) continue;
    const v1::LatencySummary l = Summarize(tallies_[addresses_[slot_address_[i]].entry].latency);
    const int64_t typical = l.count() >= 16 ? static_cast<int64_t>(l.p50_ms() * 1e6) : 0;
    const int64_t limit =
        std::max<int64_t>(kStealFloorNs, static_cast<int64_t>(kStealAfter) * typical);
    if (now_ns - sent->second > limit) out.push_back(i);
  }
  return out;
}

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
  std::vector<uint32_t> connected(entries_.size()), slots(entries_.size());
  for (uint32_t i = 0; i < pool_->size(); ++i) {
    const WorkerSlot& w = pool_->worker(i);
    if (w.retired) continue;
    const uint32_t e = addresses_[slot_address_[i]].entry;
    auto* ws = r->add_workers();
    ExportWorker(*pool_, i, ws);
    if (!w.dead && !w.retiring && !w.greeted) ws->set_state("connecting");
    ws->set_node(absl::StrCat(entries_[e], " (", address_of(i), ")"));
    if (!w.retiring) ++slots[e];
    if (!w.dead && w.greeted && !w.retiring) ++connected[e];
  }
  for (size_t n = 0; n < entries_.size(); ++n) {
    const NodeTally& t = tallies_[n];
    auto* d = r->add_decode_nodes();
    d->set_address(entries_[n]);
    d->set_slots(slots[n]);
    d->set_connected(connected[n]);
    d->set_samples_done(t.done);
    d->set_samples_failed(t.failed);
    d->set_bytes_sent(t.sent);
    d->set_bytes_received(t.received);
    d->set_lost(t.lost);
    d->set_stolen(t.stolen);
    d->set_decode_seconds(static_cast<double>(t.decode_ns) / 1e9);
    d->set_samples_per_second(t.rate);
    *d->mutable_latency() = Summarize(t.latency);
  }
  r->set_decode_nodes_open(gate_.open());
  r->set_decode_nodes_reason(gate_.reason());
}

}  // namespace stoker
