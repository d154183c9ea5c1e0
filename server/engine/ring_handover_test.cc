// The ring socket: a token buys the ring's fd, nothing else does, and a
// client that says nothing holds up no one.

#include "server/engine/ring_handover.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <set>

#include "stoker/ring_layout.h"

namespace stoker {
namespace {

// One request as a client makes it: the reply's first byte, the rest, and
// the fd that came with it.
struct Reply {
  char code = 0;
  std::string text;
  UniqueFd fd;
};

Reply Ask(const std::string& path, const std::string& token) {
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  REQUIRE(::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::send(s.get(), token.data(), token.size(), 0) == static_cast<ssize_t>(token.size()));
  char buf[512];
  Reply r;
  const ssize_t n = ReceiveWithFd(s.get(), buf, sizeof(buf), &r.fd);
  REQUIRE(n >= 1);
  r.code = buf[0];
  r.text.assign(buf + 1, static_cast<size_t>(n) - 1);
  return r;
}

TEST_CASE("ring tokens are 32 hex characters, and differ") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string t = NewRingToken();
    CHECK(t.size() == ring::kRingTokenChars);
    CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(t);
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("the ring socket hands the ring's fd for its token, and refuses any other") {
  char dir[] = "/tmp/stkhXXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/s.sock.ring";
  const std::string token = NewRingToken();
  const int memory = ::memfd_create("ring", MFD_CLOEXEC);
  REQUIRE(::ftruncate(memory, 4096) == 0);
  static_cast<char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memory, 0))[7] = 42;
  auto h = RingHandover::Start(path, 0600, [&](std::string_view t) -> absl::StatusOr<UniqueFd> {
    if (t != token) return absl::NotFoundError("no attached session has that ring token");
    return UniqueFd(::dup(memory));
  });
  REQUIRE(h.ok());
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  Reply ok = Ask(path, token);
  CHECK(ok.code == ring::kHandoverOk);
  REQUIRE(ok.fd.valid());
  auto* p = static_cast<char*>(::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, ok.fd.get(), 0));
  REQUIRE(p != MAP_FAILED);
  CHECK(p[7] == 42);  // the same memory
  ::munmap(p, 4096);

  std::string wrong = token;
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  for (const std::string& t : {wrong, std::string("short"), token + "x"}) {
    Reply no = Ask(path, t);
    CHECK(no.code == ring::kHandoverRefused);
    CHECK_FALSE(no.fd.valid());
    CHECK_FALSE(no.text.empty());
  }
  CHECK((*h)->handed() == 1);
  CHECK((*h)->refused() == 3);

  // A client that connects and says nothing holds up no other: the next
  // is answered at once (and the silent one is dropped after the timeout).
  UniqueFd silent(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  REQUIRE(::connect(silent.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(Ask(path, token).code == ring::kHandoverOk);
  CHECK(std::chrono::steady_clock::now() - t0 <
        std::chrono::milliseconds(ring::kHandoverTimeoutMs));

  h->reset();
  ::rmdir(dir);
  CHECK(::stat(path.c_str(), &st) != 0);  // removed
  ::close(memory);
}

TEST_CASE("a ring socket path too long for a Unix socket is refused with its length") {
  auto h = RingHandover::Start(std::string(200, 'x'), 0600,
                               [](std::string_view) -> absl::StatusOr<UniqueFd> {
                                 return absl::NotFoundError("none");
                               });
  CHECK(h.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
