// stoker-relay: one slot of a trainer node's remote pool (engine.h, "Decode
// nodes"). To the pool it is a worker like any other: it speaks
// server/worker/worker_protocol.h on fd 3, maps the rings it is told of, and
// answers each task, in order, with a ResultMsg after writing the sample
// into the ring. Behind it, one Decode stream to one decode node
// (proto/stoker/v1/decode.proto): each task goes there with the sample's
// encoded bytes read here beneath the data root (fd 4), or without them
// when the node reads its own copy of the dataset (shared_root).
//
// Its life:
//   1. Connects (TLS or token), waiting at most timeout_ms; then says Hello,
//      and the pool starts sending tasks (WorkerPool::set_wait_for_hello).
//   2. A task whose input cannot be read here is answered here (in its
//      turn): a sample failure, as a worker would report it.
//   3. Each answer is checked (wire.h: CheckResult) and copied into the
//      ring: the one copy on the trainer node.
//   4. It exits kRelayExitNodeLost when the node cannot be reached, its
//      stream ends, or it holds tasks and answers nothing for timeout_ms;
//      kRelayExitNodeBad on a malformed answer; 0 when the daemon goes or
//      says kShutdown. The pool redoes what it held (not the samples'
//      fault) and starts it again later.
// Threads: the main thread reads the channel and writes the stream; one
// reads the stream; one watches for silence. One mutex guards the rings
// and the tasks held.

#ifndef STOKER_SERVER_REMOTE_RELAY_H_
#define STOKER_SERVER_REMOTE_RELAY_H_

#include <cstdint>
#include <string>

namespace stoker::remote {

struct RelayOptions {
  std::string node;  // HOST:PORT, or a gRPC target (ipv4:10.0.0.5:7070, dns:///name:port)
  std::string tls_name;  // the name the node's certificate must bear ("": the target's host)
  uint32_t id = 0;   // the pool's slot (logs)
  std::string tls_ca, tls_cert, tls_key;  // all or none
  std::string token_file;                 // with no TLS
  uint32_t timeout_ms = 5000;
  bool shared_root = false;
};

// Runs the relay on `channel` (the pool's socket) and `data_root` (an
// O_DIRECTORY fd); returns the exit status (see above).
int RunRelay(const RelayOptions& o, int channel, int data_root);

}  // namespace stoker::remote

#endif  // STOKER_SERVER_REMOTE_RELAY_H_
