// stokerd --decode-node: the process around a DecodeNode. Serves the
// DecodeNode service on --listen with the decode credentials (wire.h), the
// standard health service there and, in clear text for Kubernetes probes, on
// --status-addr; the workers are ordinary stoker-workers confined to
// --data-root (where a node reads samples itself, --decode-shared-root on
// the trainers) and to the store of files trainers ship (file_store.h, a
// private folder under $TMPDIR, --decode-files-mb) and its --prepared-cache
// (a volume is prepared once per node, not once per patch).
//
// Thread safety: Start and Stop from one thread.

#ifndef STOKER_SERVER_REMOTE_NODE_SERVER_H_
#define STOKER_SERVER_REMOTE_NODE_SERVER_H_

#include <memory>

#include "absl/status/status.h"
#include "grpcpp/server.h"
#include "server/dataset/dataset.h"
#include "server/engine/worker_launcher.h"
#include "server/remote/decode_node.h"
#include "stoker/v1/config.pb.h"

namespace stoker::remote {

class NodeServer {
 public:
  explicit NodeServer(v1::DaemonConfig c);
  ~NodeServer();
  // Errors: the flags (CheckDecodeFlags), the data root, the worker binary,
  // the credentials' files, the arena, a port that cannot be bound.
  [[nodiscard]] absl::Status Start();
  void Stop();
  int port() const { return port_; }

 private:
  const v1::DaemonConfig config_;
  std::unique_ptr<DataRoot> root_;
  PreparedCache prepared_;  // --prepared-cache: volumes prepared once per node
  std::unique_ptr<PosixSpawnLauncher> launcher_;
  std::unique_ptr<FileStore> files_;  // shipped videos and volumes; outlives node_
  std::unique_ptr<DecodeNode> node_;
  std::unique_ptr<grpc::Server> grpc_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace stoker::remote

#endif  // STOKER_SERVER_REMOTE_NODE_SERVER_H_
