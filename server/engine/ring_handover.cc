#include "server/engine/ring_handover.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "stoker/ring_layout.h"

namespace stoker {

std::string NewRingToken() {
  unsigned char raw[ring::kRingTokenChars / 2];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = ::getrandom(raw + got, sizeof(raw) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : raw) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RingHandover>> RingHandover::Start(const std::string& path,
                                                                  uint32_t mode, Lookup lookup) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("the ring socket path ", path, " is longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  auto h = std::unique_ptr<RingHandover>(new RingHandover());
  h->path_ = path;
  h->lookup_ = std::move(lookup);
  h->listen_.Reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!h->listen_.valid()) return PosixError("socket", errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ::unlink(path.c_str());
  const mode_t old_umask = ::umask(0177);  // owner-only from the start; chmod widens
  const int rc = ::bind(h->listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::umask(old_umask);
  if (rc != 0) return PosixError("bind " + path, err);
  if (::chmod(path.c_str(), mode) != 0 || ::listen(h->listen_.get(), 64) != 0) {
    const int e = errno;
    ::unlink(path.c_str());
    return PosixError("listen " + path, e);
  }
  h->wake_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!h->wake_.valid()) {
    ::unlink(path.c_str());
    return PosixError("eventfd", errno);
  }
  h->thread_ = std::thread([p = h.get()] { p->Serve(); });
  return h;
}

RingHandover::~RingHandover() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
  if (!path_.empty()) ::unlink(path_.c_str());
}

void RingHandover::Serve() {
  // Connections waiting for their token, each dropped kHandoverTimeoutMs
  // after it came: one that says nothing holds up no other.
  struct Pending {
    UniqueFd conn;
    int64_t deadline_ms;
  };
  std::vector<Pending> pending;
  for (;;) {
    std::vector<pollfd> fds = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    for (const Pending& p : pending) fds.push_back({p.conn.get(), POLLIN, 0});
    int64_t wait_ms = -1;
    const int64_t now = MonotonicMs();
    for (const Pending& p : pending) {
      const int64_t left = std::max<int64_t>(0, p.deadline_ms - now);
      wait_ms = wait_ms < 0 ? left : std::min(wait_ms, left);
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("ring socket {}: poll: {}", path_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int64_t after = MonotonicMs();
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[i + 2].revents != 0) {
        Answer(pending[i].conn.get());
      } else if (after < pending[i].deadline_ms) {
        still.push_back(std::move(pending[i]));
      }
    }
    pending = std::move(still);
    if ((fds[0].revents & POLLIN) != 0) {
      UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (conn.valid() && pending.size() < kMaxPending) {
        pending.push_back({std::move(conn), after + ring::kHandoverTimeoutMs});
      }
    }
  }
}

void RingHandover::Answer(int conn) {
  char token[ring::kRingTokenChars + 1];
  const ssize_t n = ::recv(conn, token, sizeof(token), MSG_DONTWAIT);
  absl::StatusOr<UniqueFd> fd = absl::InvalidArgumentError("a ring token has 32 hex characters");
  if (n == static_cast<ssize_t>(ring::kRingTokenChars)) {
    fd = lookup_(std::string_view(token, static_cast<size_t>(n)));
  }
  if (fd.ok()) {
    const char ok = ring::kHandoverOk;
    if (SendWithFd(conn, &ok, 1, fd->get())) handed_.fetch_add(1);
    return;
  }
  refused_.fetch_add(1);
  const std::string reply = absl::StrCat(std::string(1, ring::kHandoverRefused), fd.status().message());
  (void)SendWithFd(conn, reply.data(), reply.size(), -1);
}

}  // namespace stoker
