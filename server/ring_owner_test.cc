// The ring protocol: geometry, validation of what a reader finds in shared
// memory, the owner's creation and removal, the sweep of stale rings, and
// futex waits across processes.

#include "server/ring_owner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "stoker/ring_futex.h"
#include "stoker/ring_layout.h"

namespace stoker {
namespace {

std::string UniqueName(const char* what) {
  return "/stoker-test-" + std::to_string(::getpid()) + "-" + what;
}

TEST_CASE("geometry is page aligned, fits its parts and refuses absurd sizes") {
  ring::Geometry g;
  REQUIRE(ring::ComputeGeometry(4, 64, 64 * 224 * 224 * 3, &g));
  CHECK(g.descriptor_offset == ring::kHeaderBytes);
  CHECK(g.data_offset % ring::kPageBytes == 0);
  CHECK(g.slot_bytes % ring::kPageBytes == 0);
  CHECK(g.slot_bytes >= 64ull * 224 * 224 * 3);
  CHECK(g.data_offset >= g.descriptor_offset + 4 * g.descriptor_stride);
  CHECK(g.total_bytes == g.data_offset + 4 * g.slot_bytes);
  CHECK_FALSE(ring::ComputeGeometry(0, 64, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, 0, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(ring::kMaxSlots + 1, 64, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, ring::kMaxBatchSize + 1, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, 64, uint64_t{1} << 50, &g));
}

TEST_CASE("a created ring is owner-only, valid, and removed with its owner") {
  RingSpec spec;
  spec.slot_count = 3;
  spec.batch_size = 5;
  spec.sample_bytes = 8 * 8 * 3;
  spec.height = spec.width = 8;
  const std::string name = UniqueName("create");
  const std::string path = "/dev/shm" + name;
  {
    auto r = RingOwner::Create(name, spec);
    REQUIRE(r.ok());
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(static_cast<uint64_t>(st.st_size) == (*r)->geometry().total_bytes);
    const ring::RingHeader& h = *(*r)->header();
    CHECK(ring::ValidateHeader(h, (*r)->geometry().total_bytes, (*r)->geometry(), 3, 5) ==
          nullptr);
    for (uint32_t s = 0; s < 3; ++s) CHECK((*r)->descriptor(s)->state.load() == ring::kFree);
    // A second ring of the same name is refused, not reused.
    CHECK(RingOwner::Create(name, spec).status().code() == absl::StatusCode::kAlreadyExists);
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a ring cut short by another process is noticed, and its stores do not kill us") {
  RingSpec spec;
  spec.slot_count = 2;
  spec.batch_size = 4;
  spec.sample_bytes = 64 * 64 * 3;
  const std::string name = UniqueName("truncated");
  auto r = RingOwner::Create(name, spec);
  REQUIRE(r.ok());
  CHECK_FALSE((*r)->Truncated());
  // The client's way in: the object by name, read-write.
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 0) == 0);
  ::close(fd);
  CHECK((*r)->Truncated());  // by its size, before any access
  // What the daemon does to a ring: heartbeats, slot states, sample bytes.
  // Each would raise SIGBUS; they land on private zero pages instead.
  (*r)->header()->daemon_heartbeat.fetch_add(1);
  (*r)->descriptor(1)->state.store(ring::kFilling);
  std::memset((*r)->slot_data(1), 0x5a, 4096);
  CHECK((*r)->slot_data(1)[4095] == 0x5a);
  CHECK((*r)->Truncated());

  // A fault outside every watched mapping still kills, as it would have;
  // so does a SIGBUS sent with kill(), which is no fault at all.
  for (const bool sent : {false, true}) {
    INFO((sent ? "kill(SIGBUS)" : "a fault outside the watched mappings"));
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (sent) {
        ::kill(::getpid(), SIGBUS);
        ::_exit(0);
      }
      const int mfd = ::memfd_create("unwatched", 0);
      if (mfd < 0 || ::ftruncate(mfd, 8192) != 0) ::_exit(10);
      void* p = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
      if (p == MAP_FAILED || ::ftruncate(mfd, 0) != 0) ::_exit(11);
      static_cast<volatile char*>(p)[0] = 1;
      ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("wait status " << status);
#if defined(__SANITIZE_ADDRESS__)
    // ASan's own SIGBUS handler, the one ours hands the signal over to,
    // reports it and aborts (or exits 1). Either way the child must not live
    // on: exit 0 would mean it was absorbed, 10 and 11 that it could not set up.
    CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) != 1));
#else
    CHECK(WIFSIGNALED(status));
    if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGBUS);
#endif
  }
}

TEST_CASE("the reader's validation catches every corrupted header field") {
  RingSpec spec;
  spec.slot_count = 4;
  spec.batch_size = 2;
  spec.sample_bytes = 4096;
  auto r = RingOwner::Create(UniqueName("validate"), spec);
  REQUIRE(r.ok());
  const ring::Geometry g = (*r)->geometry();
  ring::RingHeader good;
  std::memcpy(static_cast<void*>(&good), (*r)->header(), sizeof(good));
  REQUIRE(ring::ValidateHeader(good, g.total_bytes, g, 4, 2) == nullptr);
  auto corrupt = [&](auto mutate) {
    ring::RingHeader h;
    std::memcpy(static_cast<void*>(&h), static_cast<const void*>(&good), sizeof(h));
    mutate(h);
    return ring::ValidateHeader(h, g.total_bytes, g, 4, 2);
  };
  CHECK(corrupt([](ring::RingHeader& h) { h.magic ^= 1; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.version = 99; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.slot_count = 400; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.batch_size = 3; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.total_bytes *= 2; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.data_offset = 0; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.slot_bytes += 4096; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.descriptor_stride = 1; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.sample_bytes = h.slot_bytes; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.dtype = 7; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.layout = 0; }) != nullptr);
  CHECK(ring::ValidateHeader(good, g.total_bytes - 1, g, 4, 2) != nullptr);
}

TEST_CASE("a sample record naming bytes outside its slot is refused") {
  const uint64_t slot = 3 * 4096;
  ring::SampleRecord r{};
  r.height = 4;
  r.width = 4;
  r.channels = 3;
  r.bytes = 48;
  r.offset = 0;
  CHECK(ring::ValidateRecord(r, slot, ring::kUint8) == nullptr);
  r.offset = slot - 47;
  CHECK(ring::ValidateRecord(r, slot, ring::kUint8) != nullptr);
  r.offset = UINT64_MAX - 10;  // overflow
  CHECK(ring::ValidateRecord(r, slot, ring::kUint8) != nullptr);
  r.offset = 0;
  r.bytes = 47;  // disagrees with its shape
  CHECK(ring::ValidateRecord(r, slot, ring::kUint8) != nullptr);
  r.bytes = 48 * 4;
  CHECK(ring::ValidateRecord(r, slot, ring::kFloat32) == nullptr);
  r.channels = 9;
  CHECK(ring::ValidateRecord(r, slot, ring::kFloat32) != nullptr);
  r.channels = 3;
  r.status = 7;
  CHECK(ring::ValidateRecord(r, slot, ring::kFloat32) != nullptr);
  // A failed sample is held to its shape too: readers size its view from it.
  r.status = ring::kSampleFailed;
  r.bytes = 0;
  r.height = r.width = 0;  // variable size: an empty sample
  CHECK(ring::ValidateRecord(r, slot, ring::kFloat32) == nullptr);
  r.height = r.width = 40000;
  CHECK(ring::ValidateRecord(r, slot, ring::kFloat32) != nullptr);
  r.height = r.width = 4;
  r.bytes = 48 * 4;  // zeros of the output shape
  CHECK(ring::ValidateRecord(r, slot, ring::kFloat32) == nullptr);
}

TEST_CASE("the sweep removes rings of dead daemons only") {
  const std::string tag = "sweep" + std::to_string(::getpid());
  pid_t child = ::fork();
  if (child == 0) _exit(0);
  int st;
  ::waitpid(child, &st, 0);  // `child` is now a dead pid
  auto make = [&](pid_t pid) {
    std::string n = "/stoker-" + tag + "-" + std::to_string(pid) + "-1";
    int fd = ::shm_open(n.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
    return "/dev/shm" + n;
  };
  const std::string dead = make(child);
  const std::string live = make(::getppid());
  CHECK(SweepStaleRings(tag) == 1);
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));
  ::unlink(live.c_str());
}

TEST_CASE("a futex wait across processes wakes on the other's store, and times out") {
  void* mem = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* word = new (mem) std::atomic<uint32_t>(0);
  auto t0 = std::chrono::steady_clock::now();
  ring::FutexWait(word, 0, 50);  // nobody wakes it: returns on its deadline
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(40));

  pid_t child = ::fork();
  if (child == 0) {
    while (word->load() == 0) ring::FutexWait(word, 0, 1000);
    word->store(2);
    ring::FutexWakeAll(word);
    _exit(0);
  }
  word->store(1);
  ring::FutexWakeAll(word);
  t0 = std::chrono::steady_clock::now();
  while (word->load() != 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    ring::FutexWait(word, 1, 1000);
  }
  CHECK(word->load() == 2);
  int st;
  ::waitpid(child, &st, 0);
  ::munmap(mem, 4096);
}

}  // namespace
}  // namespace stoker
