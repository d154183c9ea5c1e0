// The ring socket: where a client exchanges its session's ring token for
// the ring's fd (proto/stoker/ring_layout.h, "The handover"). Rings are
// memfds named in no file system, so this is the only way to one.
//
// Thread safety: Start and Stop from one thread; the lookup runs on the
// server's own thread, one request at a time.

#ifndef STOKER_SERVER_ENGINE_RING_HANDOVER_H_
#define STOKER_SERVER_ENGINE_RING_HANDOVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/posix.h"

namespace stoker {

// A random ring token: ring::kRingTokenChars hex characters from getrandom.
std::string NewRingToken();

class RingHandover {
 public:
  // A duplicate of the fd of the ring whose token is given (sent, then
  // closed; the client gets its own), or why not: NOT_FOUND for an unknown
  // token or an ended session.
  using Lookup = std::function<absl::StatusOr<UniqueFd>(std::string_view token)>;

  // Listens on `path` (created with permission bits `mode`; a stale socket
  // there is replaced: the caller has made sure no daemon serves it).
  static absl::StatusOr<std::unique_ptr<RingHandover>> Start(const std::string& path,
                                                             uint32_t mode, Lookup lookup);
  // Stops the thread, closes and removes the socket.
  ~RingHandover();

  // Requests answered with an fd, and refused.
  uint64_t handed() const { return handed_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  RingHandover() = default;
  static constexpr size_t kMaxPending = 256;  // connections waiting for their token
  void Serve();
  void Answer(int conn);

  std::string path_;
  Lookup lookup_;
  UniqueFd listen_;
  UniqueFd wake_;  // eventfd: Stop wakes the poll
  std::thread thread_;
  std::atomic<uint64_t> handed_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_RING_HANDOVER_H_
