#include "server/remote/node_server.h"

#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server_builder.h"
#include "server/engine/cpu_budget.h"
#include "server/remote/wire.h"
#include "spdlog/spdlog.h"

namespace stoker::remote {
namespace {

// A shipped file a relay was told the node has is kept at least this long:
// the relay's task that reads it comes well before.
constexpr int64_t kKeepShippedNs = int64_t{60} * 1'000'000'000;

}  // namespace

NodeServer::NodeServer(v1::DaemonConfig c) : config_(std::move(c)) {}

NodeServer::~NodeServer() { Stop(); }

absl::Status NodeServer::Start() {
  if (absl::Status st = CheckDecodeFlags(config_); !st.ok()) return st;
  auto root = DataRoot::Open(config_.data_root());
  if (!root.ok()) return root.status();
  root_ = std::move(*root);
  auto binary = WorkerBinaryPath(config_.worker_binary());
  if (!binary.ok()) return binary.status();
  if (!config_.prepared_cache().empty()) {
    auto cache = OpenPreparedCache(config_.prepared_cache(), config_.prepared_cache_mb(), WallNs());
    if (cache.ok()) {
      prepared_ = *std::move(cache);
    } else {
      spdlog::warn("prepared cache {} cannot be used ({}); volumes are prepared for every patch",
                   config_.prepared_cache(), cache.status().ToString());
    }
  }
  launcher_ = std::make_unique<PosixSpawnLauncher>(*binary, root_->fd(), config_.worker_sandbox(),
                                                   /*transcode_cache_fd=*/-1,
                                                   prepared_.fd.valid() ? prepared_.fd.get() : -1);
  DecodeNodeOptions o;
  const CpuBudget budget = ReadCpuBudget(SystemCpuBudgetEnv());
  o.workers = config_.workers() != 0
                  ? config_.workers()
                  : std::max<uint32_t>(1, static_cast<uint32_t>(budget.cpus + 0.5));
  o.queue_depth = config_.worker_queue_depth();
  o.task_timeout_ms = config_.task_timeout_ms();
  o.max_task_bytes = config_.max_file_bytes();
  o.keep_faults =
      !config_.fault_crash_substring().empty() || !config_.fault_hang_substring().empty();
  if (!config_.decode_token_file().empty()) {
    auto token = ReadToken(config_.decode_token_file());
    if (!token.ok()) return token.status();
    o.token = *token;
  }
  auto creds = NodeServerCredentials(config_);
  if (!creds.ok()) return creds.status();
  const char* tmp = std::getenv("TMPDIR");
  auto files = FileStore::Create(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp",
                                 static_cast<uint64_t>(config_.decode_files_mb() * 1048576.0),
                                 SystemClock(), kKeepShippedNs);
  if (!files.ok()) return files.status();
  files_ = *std::move(files);
  launcher_->set_shipped_files_fd(files_->dir_fd());
  DecodeNodeEnv env;
  env.launcher = launcher_.get();
  env.clock = SystemClock();
  env.files = files_.get();
  env.prepared = prepared_.budget.get();
  node_ = std::make_unique<DecodeNode>(env, o);
  if (absl::Status st = node_->Start(); !st.ok()) return st;

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.listen(), *creds, &port_);
  int status_port = 0;
  if (!config_.status_addr().empty()) {
    builder.AddListeningPort(config_.status_addr(), grpc::InsecureServerCredentials(),
                             &status_port);
  }
  builder.RegisterService(node_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<uint64_t>(2 * config_.max_file_bytes() + (1 << 20), INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  // Two threads per stream (decode_node.h), for many trainers' relays.
  grpc::ResourceQuota quota("stoker-decode-node");
  quota.SetMaxThreads(1024);
  builder.SetResourceQuota(quota);
  grpc_ = builder.BuildAndStart();
  if (grpc_ == nullptr || port_ == 0 || (!config_.status_addr().empty() && status_port == 0)) {
    node_->Stop();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config_.listen(),
                     config_.status_addr().empty() ? "" : " or ", config_.status_addr()));
  }
  grpc_->GetHealthCheckService()->SetServingStatus(true);
  grpc_->GetHealthCheckService()->SetServingStatus("stoker.v1.DecodeNode", true);
  spdlog::info("shipped videos and volumes kept in {} (at most {} MiB)", files_->path(),
               files_->budget() >> 20);
  spdlog::info("stokerd {} decode node: {} worker(s), listening on {} (port {}, {}){}",
               STOKER_VERSION, o.workers, config_.listen(), port_,
               config_.tls_ca().empty() ? "clear text, token (development mode)" : "mutual TLS",
               status_port != 0 ? absl::StrCat("; health on ", config_.status_addr(), " (port ",
                                               status_port, ")")
                                : "");
  return absl::OkStatus();
}

void NodeServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (grpc_ != nullptr) {
    grpc_->GetHealthCheckService()->SetServingStatus(false);
    grpc_->GetHealthCheckService()->SetServingStatus("stoker.v1.DecodeNode", false);
  }
  if (node_ != nullptr) node_->Stop();  // streams end: their handlers return
  if (grpc_ != nullptr) {
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc_->Wait();
  }
  if (node_ != nullptr) {
    const DecodeNodeStats s = node_->stats();
    spdlog::info(
        "decode node stopped: {} tasks done, {} failed, {} streams, {} MiB in, {} MiB out, {} "
        "shipped files received",
        s.tasks_done, s.tasks_failed, s.streams_total, s.bytes_in >> 20, s.bytes_out >> 20,
        s.files.received);
  }
}

}  // namespace stoker::remote
