#include "server/control/service.h"


#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/control/metrics.h"
#include "spdlog/spdlog.h"

namespace stoker {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

namespace {

// Sessions are for clients on this host, through the Unix socket.
grpc::Status RefuseTcp(grpc::ServerContext* ctx) {
  const std::string peer = ctx->peer();
  if (peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "sessions are served on the Unix socket only; this TCP listener "
                        "(--status-addr) serves Status, Watch and health");
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status StokerService::Attach(grpc::ServerContext* ctx, const v1::AttachRequest* req,
                                   v1::AttachResponse* resp) {
  if (grpc::Status t = RefuseTcp(ctx); !t.ok()) return t;
  auto r = engine_->Attach(*req);
  if (!r.ok()) {
    spdlog::info("attach refused ({}): {}", ctx->peer(), r.status().ToString());
    return ToGrpc(r.status());
  }
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status StokerService::Detach(grpc::ServerContext* ctx, const v1::DetachRequest* req,
                                   v1::DetachResponse*) {
  if (grpc::Status t = RefuseTcp(ctx); !t.ok()) return t;
  return ToGrpc(engine_->Detach(req->session_id(), "detached by the client"));
}

grpc::Status StokerService::KeepAlive(grpc::ServerContext* ctx, const v1::KeepAliveRequest* req,
                                      grpc::ServerWriter<v1::SessionEvent>* writer) {
  if (grpc::Status t = RefuseTcp(ctx); !t.ok()) return t;
  absl::Status st = engine_->KeepAlive(
      req->session_id(), [ctx] { return ctx->IsCancelled(); },
      [writer](const v1::SessionEvent& e) { return writer->Write(e); });
  return ToGrpc(st);
}

grpc::Status StokerService::Status(grpc::ServerContext*, const v1::StatusRequest* req,
                                   v1::StatusResponse* resp) {
  *resp = engine_->GetStatus(req->include_failures(), req->include_dataset_failures());
  return grpc::Status::OK;
}

grpc::Status StokerService::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                  grpc::ServerWriter<v1::StatusResponse>* writer) {
  const int64_t interval_ms =
      std::clamp<int64_t>(req->interval_ms() == 0 ? 1000 : req->interval_ms(), 50, 60000);
  while (!ctx->IsCancelled()) {
    v1::StatusResponse st =
        engine_->GetStatus(req->include_failures(), req->include_dataset_failures());
    if (!writer->Write(st) || st.state() == "stopped" || st.state() == "draining") break;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
    while (std::chrono::steady_clock::now() < until && !ctx->IsCancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(interval_ms, 50)));
    }
  }
  return grpc::Status::OK;
}

grpc::Status StokerService::ListSamples(grpc::ServerContext* ctx,
                                        const v1::ListSamplesRequest* req,
                                        v1::ListSamplesResponse* resp) {
  if (grpc::Status t = RefuseTcp(ctx); !t.ok()) return t;
  auto r = engine_->ListSamples(*req);
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

Server::Server(v1::DaemonConfig config)
    : config_(config), engine_(std::move(config)), service_(&engine_) {}

Server::~Server() { Stop(); }

namespace {

// True when something accepts connections on the Unix socket at `path`.
bool SocketAnswers(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

absl::Status Server::Start() {
  if (config_.socket().empty()) return absl::InvalidArgumentError("--socket is required");
  const std::string ring_socket = config_.socket() + ring::kRingSocketSuffix;
  if (ring_socket.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path is longer than ",
        sizeof(sockaddr_un::sun_path) - sizeof(ring::kRingSocketSuffix), " bytes (the ring socket ",
        "beside it, <socket>", ring::kRingSocketSuffix, ", must fit in ",
        sizeof(sockaddr_un::sun_path) - 1, ")"));
  }
  struct stat st;
  if (::lstat(config_.socket().c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrCat(config_.socket(), " exists and is not a socket"));
    }
    if (SocketAnswers(config_.socket())) {
      return absl::AlreadyExistsError(
          absl::StrCat("another daemon is serving on ", config_.socket()));
    }
    ::unlink(config_.socket().c_str());
    spdlog::info("removed the stale socket {}", config_.socket());
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + config_.socket(), grpc::InsecureServerCredentials());
  int tcp_port = 0;
  if (!config_.status_addr().empty()) {
    builder.AddListeningPort(config_.status_addr(), grpc::InsecureServerCredentials(), &tcp_port);
  }
  builder.RegisterService(&service_);
  builder.SetMaxReceiveMessageSize(4 << 20);
  // The socket is created owner-only; chmod widens it if asked.
  mode_t old_umask = ::umask(0177);
  grpc_ = builder.BuildAndStart();
  ::umask(old_umask);
  if (grpc_ == nullptr || (!config_.status_addr().empty() && tcp_port == 0)) {
    if (grpc_ != nullptr) {
      grpc_->Shutdown();
      grpc_->Wait();
      grpc_.reset();
      ::unlink(config_.socket().c_str());
    }
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config_.socket(),
                                               config_.status_addr().empty() ? "" : " or ",
                                               config_.status_addr()));
  }
  ::chmod(config_.socket().c_str(), config_.socket_mode());
  auto handover = RingHandover::Start(ring_socket, config_.socket_mode(),
                                      [this](std::string_view t) { return engine_.RingFd(t); });
  if (!handover.ok()) {
    grpc_->Shutdown();
    grpc_->Wait();
    grpc_.reset();
    ::unlink(config_.socket().c_str());
    return handover.status();
  }
  handover_ = std::move(*handover);
  // NOT_SERVING until the engine and its workers are up.
  auto* health = grpc_->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus("stoker.v1.Stoker", false);
  absl::Status s = engine_.Start();
  if (!s.ok()) {
    grpc_->Shutdown();
    grpc_->Wait();
    grpc_.reset();
    ::unlink(config_.socket().c_str());
    return s;
  }
  if (!config_.metrics_addr().empty()) {
    auto m = MetricsServer::Start(config_.metrics_addr(),
                                  [this] { return RenderMetrics(engine_.GetStatus(false, false)); });
    if (!m.ok()) {
      grpc_->Shutdown();
      grpc_.reset();
      ::unlink(config_.socket().c_str());
      return m.status();
    }
    metrics_ = std::move(*m);
    spdlog::info("Prometheus metrics on http://{}/metrics (port {})", config_.metrics_addr(),
                 metrics_->port());
  }
  health->SetServingStatus(true);
  health->SetServingStatus("stoker.v1.Stoker", true);
  if (tcp_port != 0) {
    spdlog::info("status and health (no sessions) on tcp {} (port {})", config_.status_addr(),
                 tcp_port);
  }
  spdlog::info("stokerd {} listening on unix:{}", STOKER_VERSION, config_.socket());
  return absl::OkStatus();
}

void Server::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (grpc_ != nullptr) {
    auto* health = grpc_->GetHealthCheckService();
    health->SetServingStatus(false);
    health->SetServingStatus("stoker.v1.Stoker", false);
  }
  metrics_.reset();
  engine_.Drain();
  if (grpc_ != nullptr) {
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc_->Wait();
  }
  engine_.Stop();
  handover_.reset();  // removes the ring socket
  if (grpc_ != nullptr) ::unlink(config_.socket().c_str());
  spdlog::info("stokerd stopped");
}

}  // namespace stoker
