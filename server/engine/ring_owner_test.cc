// The ring protocol: geometry, validation of what a reader finds in shared
// memory, the owner's creation, its seals, and futex waits across processes.

#include "server/engine/ring_owner.h"

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
  return "stoker-test-" + std::to_string(::getpid()) + "-" + what;
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

TEST_CASE("a created ring is named nowhere, sealed, valid, and outlives its owner in a mapping") {
  RingSpec spec;
  spec.slot_count = 3;
  spec.batch_size = 5;
  spec.sample_bytes = 8 * 8 * 3;
  spec.height = spec.width = 8;
  const std::string name = UniqueName("create");
  void* client = nullptr;
  uint64_t total = 0;
  {
    auto r = RingOwner::Create(name, spec);
    REQUIRE(r.ok());
    CHECK((*r)->name() == "memfd:" + name);
    CHECK_FALSE(std::filesystem::exists("/dev/shm/" + name));  // in no file system
    total = (*r)->geometry().total_bytes;
    struct stat st;
    REQUIRE(::fstat((*r)->fd(), &st) == 0);
    CHECK(static_cast<uint64_t>(st.st_size) == total);
    const int seals = ::fcntl((*r)->fd(), F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    const ring::RingHeader& h = *(*r)->header();
    CHECK(ring::ValidateHeader(h, total, (*r)->geometry(), 3, 5) == nullptr);
    for (uint32_t s = 0; s < 3; ++s) CHECK((*r)->descriptor(s)->state.load() == ring::kFree);
    // Two rings of one name are two rings.
    auto again = RingOwner::Create(name, spec);
    REQUIRE(again.ok());
    (*again)->header()->daemon_heartbeat.store(77);
    CHECK((*r)->header()->daemon_heartbeat.load() != 77);
    // A client's mapping, as the handover gives it.
    const int fd = ::dup((*r)->fd());
    client = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(client != MAP_FAILED);
  }
  // The owner is gone (a daemon SIGKILLed): the client reads on, and the
  // memory goes with its mapping.
  CHECK(static_cast<ring::RingHeader*>(client)->magic == ring::kMagic);
  ::munmap(client, total);
}

TEST_CASE("a client cannot cut its ring short: the seals refuse it") {
  RingSpec spec;
  spec.slot_count = 2;
  spec.batch_size = 4;
  spec.sample_bytes = 64 * 64 * 3;
  auto r = RingOwner::Create(UniqueName("sealed"), spec);
  REQUIRE(r.ok());
  // The client's way in: the fd the handover gives it, read-write.
  const int fd = ::dup((*r)->fd());
  REQUIRE(fd >= 0);
  CHECK(::ftruncate(fd, 0) == -1);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, static_cast<off_t>((*r)->geometry().total_bytes * 2)) == -1);
  ::close(fd);
  std::memset((*r)->slot_data(1), 0x5a, 4096);
  CHECK((*r)->slot_data(1)[4095] == 0x5a);
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
