// The gRPC face of the daemon: forwards to Engine and converts Status.

#ifndef STOKER_SERVER_CONTROL_SERVICE_H_
#define STOKER_SERVER_CONTROL_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/engine/ring_handover.h"
#include "server/engine/engine.h"
#include "stoker/v1/stoker.grpc.pb.h"

namespace grpc {
class Server;
}

namespace stoker {

class MetricsServer;  // server/control/metrics.h

class StokerService final : public v1::Stoker::Service {
 public:
  explicit StokerService(Engine* engine) : engine_(engine) {}
  grpc::Status Attach(grpc::ServerContext* ctx, const v1::AttachRequest* req,
                      v1::AttachResponse* resp) override;
  grpc::Status Detach(grpc::ServerContext* ctx, const v1::DetachRequest* req,
                      v1::DetachResponse* resp) override;
  grpc::Status KeepAlive(grpc::ServerContext* ctx, const v1::KeepAliveRequest* req,
                         grpc::ServerWriter<v1::SessionEvent>* writer) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                     grpc::ServerWriter<v1::StatusResponse>* writer) override;
  grpc::Status ListSamples(grpc::ServerContext* ctx, const v1::ListSamplesRequest* req,
                           v1::ListSamplesResponse* resp) override;

 private:
  Engine* engine_;
};

// stokerd's server: the engine plus gRPC (the Stoker service, the standard
// health service and reflection) on a Unix socket, the ring socket beside it
// (<socket>.ring, ring_handover.h: where clients get their rings' fds), and
// optionally on a TCP
// address for status and health only (Attach, Detach, KeepAlive and
// ListSamples are refused there: a ring is only reachable on the same host).
class Server {
 public:
  explicit Server(v1::DaemonConfig config);
  ~Server();

  // Starts the engine, then listens. Refuses a socket path another live
  // daemon answers on; removes a stale one.
  [[nodiscard]] absl::Status Start();
  // Reports NOT_SERVING, drains the engine, stops gRPC and the workers,
  // removes the socket. Idempotent.
  void Stop();
  Engine& engine() { return engine_; }

 private:
  v1::DaemonConfig config_;
  Engine engine_;
  StokerService service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<MetricsServer> metrics_;  // --metrics-addr
  std::unique_ptr<RingHandover> handover_;
  bool stopped_ = false;
};

grpc::Status ToGrpc(const absl::Status& s);

}  // namespace stoker

#endif  // STOKER_SERVER_CONTROL_SERVICE_H_
