// The worker's loop in-process: Serve on a thread, the daemon's side of the
// socketpair here, a memfd ring and a scratch data root. No process is
// spawned.

#include "server/worker/worker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/posix.h"
#include "server/image/pipeline.h"
#include "server/worker/worker_protocol.h"
#include "testing/test_jpeg.h"
#include "testing/test_params.h"

namespace stoker::worker {
namespace {

constexpr uint64_t kRingBytes = 4 << 20;
constexpr uint64_t kRingId = 7;

struct ScratchDir {
  std::string path;
  ScratchDir() {
    char tmpl[] = "/tmp/stoker-worker-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~ScratchDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  void Write(const std::string& rel, const std::vector<uint8_t>& bytes) const {
    std::ofstream(path + "/" + rel, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
};

// The daemon's side: a worker serving on a thread, a ring it has mapped.
struct Daemon {
  ScratchDir data;
  UniqueFd root;
  UniqueFd ours, theirs;
  UniqueFd ring;
  Mapping ring_map;
  std::future<int> served;

  Daemon() {
    root = UniqueFd(::open(data.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    ours = UniqueFd(sv[0]);
    theirs = UniqueFd(sv[1]);
    served = std::async(std::launch::async,
                        [this] { return Serve({theirs.get(), root.get(), -1}); });
    HelloMsg hello;
    REQUIRE(::recv(ours.get(), &hello, sizeof(hello), 0) == sizeof(hello));
    CHECK(hello.type == kHello);
    CHECK(hello.pid == ::getpid());
    ring = UniqueFd(::memfd_create("worker-test-ring", MFD_CLOEXEC));
    REQUIRE(::ftruncate(ring.get(), kRingBytes) == 0);
    REQUIRE(MapShared(ring.get(), 0, kRingBytes, &ring_map).ok());
    MapRingMsg m;
    m.ring_id = kRingId;
    m.data_bytes = kRingBytes;
    m.populate_bytes = 1 << 20;
    REQUIRE(SendWithFd(ours.get(), &m, sizeof(m), ring.get()));
  }
  ~Daemon() {
    ours.Reset();  // the worker's channel closes: Serve returns
    if (served.valid()) served.wait();
  }

  TaskMsg Task(const std::string& path, uint64_t out_offset = 0,
               uint64_t out_capacity = kRingBytes) const {
    TaskMsg t;
    t.task_id = 42;
    t.ring_id = kRingId;
    t.out_offset = out_offset;
    t.out_capacity = out_capacity;
    t.params = image::testing::DecodeParams();
    t.key = {3, 1, 9};
    t.path_bytes = static_cast<uint32_t>(path.size());
    std::memcpy(t.path, path.data(), path.size());
    return t;
  }

  ResultMsg Run(const TaskMsg& t) {
    REQUIRE(::send(ours.get(), &t, TaskHeaderBytes() + t.path_bytes + t.mask_path_bytes,
                   MSG_NOSIGNAL) > 0);
    ResultMsg r;
    REQUIRE(::recv(ours.get(), &r, sizeof(r), 0) == sizeof(r));
    CHECK(r.type == kResult);
    CHECK(r.task_id == t.task_id);
    return r;
  }

  const uint8_t* out(uint64_t offset) const {
    return static_cast<const uint8_t*>(ring_map.addr()) + offset;
  }
};

std::vector<uint8_t> Photo(uint32_t h, uint32_t w, uint64_t seed) {
  return image::testing::EncodeJpeg(image::testing::MakePhoto(h, w, 3, seed), h, w, 3, {});
}

TEST_CASE("a task's pixels go into its ring at its offset, as SampleProcessor makes them") {
  Daemon d;
  const std::vector<uint8_t> jpeg = Photo(48, 64, 5);
  d.data.Write("a.jpg", jpeg);
  const ResultMsg r = d.Run(d.Task("a.jpg", 4096, 64 * 48 * 3));
  INFO(r.reason);
  REQUIRE(r.code == 0);
  CHECK(r.height == 48);
  CHECK(r.width == 64);
  CHECK(r.channels == 3);
  CHECK(r.bytes == 64 * 48 * 3);
  CHECK(r.input_bytes == jpeg.size());
  CHECK(r.format == static_cast<uint32_t>(image::ImageFormat::kJpeg));

  image::SampleProcessor proc;
  std::vector<uint8_t> want(64 * 48 * 3);
  image::SampleResult res;
  REQUIRE(proc.Process(jpeg.data(), jpeg.size(), d.Task("a.jpg").params, {3, 1, 9}, want.data(),
                       want.size(), &res)
              .ok());
  CHECK(std::memcmp(d.out(4096), want.data(), want.size()) == 0);
  CHECK(d.out(4095)[0] == 0);  // nothing before its offset
}

TEST_CASE("a sample that fails is a result with a code and a reason, and the worker goes on") {
  Daemon d;
  d.data.Write("good.jpg", Photo(16, 16, 1));
  std::vector<uint8_t> cut = Photo(32, 32, 2);
  cut.resize(cut.size() / 3);
  d.data.Write("cut.jpg", cut);
  d.data.Write("junk.jpg", std::vector<uint8_t>(100, 0x5a));
  ScratchDir outside;
  outside.Write("secret.jpg", Photo(16, 16, 3));
  const std::string escape = "../" + outside.path.substr(outside.path.rfind('/') + 1) + "/secret.jpg";

  for (const std::string& path : {std::string("missing.jpg"), std::string("junk.jpg"), escape}) {
    CAPTURE(path);
    const ResultMsg r = d.Run(d.Task(path));
    CHECK(r.code != 0);
    CHECK(std::strlen(r.reason) > 0);
  }
  const ResultMsg truncated = d.Run(d.Task("cut.jpg"));
  CHECK((truncated.code != 0 || truncated.height == 32));  // libjpeg pads a cut scan
  const ResultMsg good = d.Run(d.Task("good.jpg"));
  CHECK(good.code == 0);
  CHECK(good.height == 16);
}

TEST_CASE("a task that names memory outside its ring, or an unmapped ring, is refused") {
  Daemon d;
  d.data.Write("a.jpg", Photo(16, 16, 1));
  ResultMsg r = d.Run(d.Task("a.jpg", kRingBytes - 16, 1024));
  CHECK(r.code == static_cast<uint32_t>(absl::StatusCode::kInternal));
  CHECK(std::string(r.reason) == "task names memory outside its ring");
  TaskMsg t = d.Task("a.jpg");
  t.ring_id = kRingId + 1;
  CHECK(d.Run(t).code == static_cast<uint32_t>(absl::StatusCode::kInternal));
  UnmapRingMsg u;
  u.ring_id = kRingId;
  REQUIRE(::send(d.ours.get(), &u, sizeof(u), MSG_NOSIGNAL) == sizeof(u));
  CHECK(d.Run(d.Task("a.jpg")).code == static_cast<uint32_t>(absl::StatusCode::kInternal));
}

TEST_CASE("Serve ends with its exit status: shutdown 0, a closed channel 0, out of protocol 2") {
  {
    Daemon d;
    ShutdownMsg s;
    REQUIRE(::send(d.ours.get(), &s, sizeof(s), MSG_NOSIGNAL) == sizeof(s));
    CHECK(d.served.get() == 0);
  }
  {
    Daemon d;
    d.ours.Reset();
    CHECK(d.served.get() == 0);
  }
  {
    Daemon d;
    const char three[3] = {1, 2, 3};
    REQUIRE(::send(d.ours.get(), three, sizeof(three), MSG_NOSIGNAL) == 3);
    CHECK(d.served.get() == 2);
  }
  {
    Daemon d;  // a task whose path length disagrees with its datagram
    TaskMsg t = d.Task("a.jpg");
    REQUIRE(::send(d.ours.get(), &t, TaskHeaderBytes() + 2, MSG_NOSIGNAL) > 0);
    CHECK(d.served.get() == 2);
  }
  {
    Daemon d;  // a ring without its fd
    MapRingMsg m;
    m.ring_id = 9;
    m.data_bytes = 4096;
    REQUIRE(::send(d.ours.get(), &m, sizeof(m), MSG_NOSIGNAL) == sizeof(m));
    CHECK(d.served.get() == 2);
  }
}

}  // namespace
}  // namespace stoker::worker
