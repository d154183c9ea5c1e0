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

#include "pipeline/sample_fields.h"
#include "stoker/ring_futex.h"
#include "stoker/ring_layout.h"

namespace stoker {
namespace {

std::string UniqueName(const char* what) {
  return "stoker-test-" + std::to_string(::getpid()) + "-" + what;
}

// A still-image ring's spec: an h x w x 3 uint8 image (fixed, or of `room`
// bytes and any size when h is 0) and a label per sample.
RingSpec ImageRing(uint32_t slots, uint32_t batch, uint32_t h, uint32_t w, uint64_t room = 0) {
  RingSpec spec;
  spec.slot_count = slots;
  spec.batch_size = batch;
  const bool fixed = h != 0;
  spec.fields.push_back(pipeline::MakeField(ring::kImageField, ring::kUint8, {h, w, 3},
                                            fixed ? uint64_t{h} * w * 3 : room, fixed));
  spec.fields.push_back(pipeline::MakeField(ring::kLabelField, ring::kInt64, {}, 8, true));
  return spec;
}

TEST_CASE("geometry is page aligned, fits its parts and refuses absurd sizes") {
  ring::Geometry g;
  REQUIRE(ring::ComputeGeometry(4, 64, 2, 64 * 224 * 224 * 3, &g));
  CHECK(g.descriptor_offset == ring::kHeaderBytes);
  CHECK(g.data_offset % ring::kPageBytes == 0);
  CHECK(g.slot_bytes % ring::kPageBytes == 0);
  CHECK(g.slot_bytes >= 64ull * 224 * 224 * 3);
  CHECK(g.data_offset >= g.descriptor_offset + 4 * g.descriptor_stride);
  CHECK(g.descriptor_stride == sizeof(ring::SlotDescriptor) + 64 * ring::RecordBytes(2));
  CHECK(g.total_bytes == g.data_offset + 4 * g.slot_bytes);
  CHECK_FALSE(ring::ComputeGeometry(0, 64, 2, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, 0, 2, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(ring::kMaxSlots + 1, 64, 2, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, ring::kMaxBatchSize + 1, 2, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, 64, 2, uint64_t{1} << 50, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, 64, 0, 100, &g));
  CHECK_FALSE(ring::ComputeGeometry(4, 64, ring::kMaxFields + 1, 100, &g));
}

TEST_CASE("a created ring is named nowhere, sealed, valid, and outlives its owner in a mapping") {
  RingSpec spec = ImageRing(3, 5, 8, 8);
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
    REQUIRE(h.field_count == 2);
    CHECK(ring::FieldName(h.fields[0]) == "image");
    CHECK(h.fields[0].offset == 0);
    CHECK(h.fields[1].offset == ring::AlignUp(5 * 192, 64));  // laid out by Create
    CHECK(ring::SameField(h.fields[1], (*r)->fields()[1]));
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
  auto r = RingOwner::Create(UniqueName("sealed"), ImageRing(2, 4, 64, 64));
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
  auto r = RingOwner::Create(UniqueName("validate"), ImageRing(4, 2, 32, 32));
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
  CHECK(corrupt([](ring::RingHeader& h) { h.layout = 0; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.field_count = 0; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.field_count = 3; }) != nullptr);
  // Each field's rooms must lie in the slot, its name, dtype, rank and
  // bounds be ones a reader can size views from.
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].stride = h.slot_bytes; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[1].offset = h.slot_bytes; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[1].offset = UINT64_MAX - 63; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[1].offset += 8; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].stride = UINT64_MAX / 2; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].dtype = 99; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].rank = 6; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].max_shape[4] = 1; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].max_shape[0] = 33; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].flags = 2; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].name[0] = 'X'; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) { h.fields[0].name[0] = '\0'; }) != nullptr);
  CHECK(corrupt([](ring::RingHeader& h) {
          std::memset(h.fields[1].name, 'a', sizeof(h.fields[1].name));  // no NUL
        }) != nullptr);
  CHECK(ring::ValidateHeader(good, g.total_bytes - 1, g, 4, 2) != nullptr);
}

TEST_CASE("a sample's field shape outside its bounds or room is refused") {
  // Fixed: 4 x 4 x 3 float32, exactly its room.
  ring::FieldSpec fixed =
      pipeline::MakeField("image", ring::kFloat32, {4, 4, 3}, 4 * 4 * 3 * 4, true);
  REQUIRE(ring::ValidateField(fixed, 2, 4096) == nullptr);
  ring::FieldRecord r{};
  uint64_t bytes = 0;
  auto shape = [&r](std::initializer_list<uint32_t> s) {
    r = ring::FieldRecord{};
    std::copy(s.begin(), s.end(), r.shape);
    return r;
  };
  CHECK(ring::ValidateFieldRecord(shape({4, 4, 3}), fixed, &bytes) == nullptr);
  CHECK(bytes == 192);
  CHECK(ring::ValidateFieldRecord(shape({4, 3, 3}), fixed, &bytes) != nullptr);  // not its bound
  CHECK(ring::ValidateFieldRecord(shape({4, 4, 3, 1}), fixed, &bytes) != nullptr);  // past rank
  // A fixed field's stride must be its bytes, or the batch is no array.
  ring::FieldSpec loose = fixed;
  loose.stride += 4;
  CHECK(ring::ValidateField(loose, 2, 4096) != nullptr);

  // Any size within a 3000-byte room: height and width unbounded.
  ring::FieldSpec any = pipeline::MakeField("image", ring::kUint8, {0, 0, 3}, 3000, false);
  REQUIRE(ring::ValidateField(any, 2, 8192) == nullptr);
  CHECK(ring::ValidateFieldRecord(shape({10, 100, 3}), any, &bytes) == nullptr);
  CHECK(bytes == 3000);
  CHECK(ring::ValidateFieldRecord(shape({0, 0, 3}), any, &bytes) == nullptr);  // empty: failed
  CHECK(bytes == 0);
  CHECK(ring::ValidateFieldRecord(shape({10, 101, 3}), any, &bytes) != nullptr);  // over the room
  CHECK(ring::ValidateFieldRecord(shape({10, 100, 4}), any, &bytes) != nullptr);  // over a bound
  // A product that wraps 64 bits must not pass for a small one.
  CHECK(ring::ValidateFieldRecord(shape({0x80000000u, 0x80000000u, 3}), any, &bytes) != nullptr);
  ring::FieldSpec five = pipeline::MakeField("v", ring::kInt64, {0, 0, 0, 0, 0}, 1 << 20, false);
  REQUIRE(ring::ValidateField(five, 1, 1 << 20) == nullptr);
  ring::FieldRecord big{};
  for (uint32_t& d : big.shape) d = 0xffffffffu;
  CHECK(ring::ValidateFieldRecord(big, five, &bytes) != nullptr);

  // Boxes: up to 5 rows of 4.
  ring::FieldSpec boxes = pipeline::MakeField("boxes", ring::kFloat32, {5, 4}, 80, false);
  REQUIRE(ring::ValidateField(boxes, 2, 4096) == nullptr);
  CHECK(ring::ValidateFieldRecord(shape({0, 4}), boxes, &bytes) == nullptr);
  CHECK(ring::ValidateFieldRecord(shape({5, 4}), boxes, &bytes) == nullptr);
  CHECK(ring::ValidateFieldRecord(shape({6, 4}), boxes, &bytes) != nullptr);
  // A field whose rooms end past the slot: refused however it is sized.
  CHECK(ring::ValidateField(boxes, 52, 4096) != nullptr);
  ring::FieldSpec scalar = pipeline::MakeField("label", ring::kInt64, {}, 8, true);
  CHECK(ring::ValidateField(scalar, 4, 32) == nullptr);
  CHECK(ring::ValidateFieldRecord(ring::FieldRecord{}, scalar, &bytes) == nullptr);
  CHECK(bytes == 8);
  ring::SampleRecord rec{};
  CHECK(ring::ValidateRecord(rec) == nullptr);
  rec.status = 7;
  CHECK(ring::ValidateRecord(rec) != nullptr);
}

TEST_CASE("a ring is refused for fields it cannot hold") {
  RingSpec spec = ImageRing(2, 4, 8, 8);
  spec.fields[1].flags = 7;
  CHECK(RingOwner::Create(UniqueName("flags"), spec).status().code() ==
        absl::StatusCode::kInvalidArgument);
  spec = ImageRing(2, 4, 8, 8);
  spec.fields[1].offset = 64 * 1024;  // not where LayoutFields puts it
  CHECK_THAT(std::string(RingOwner::Create(UniqueName("offset"), spec).status().message()),
             Catch::Matchers::Contains("planned at 65536, laid out at"));
  spec = ImageRing(2, 4, 8, 8);
  spec.fields.clear();
  CHECK_FALSE(RingOwner::Create(UniqueName("nofields"), spec).ok());
  spec = ImageRing(2, 4, 8, 8);
  spec.fields.resize(ring::kMaxFields + 1, spec.fields[1]);
  CHECK_FALSE(RingOwner::Create(UniqueName("many"), spec).ok());
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
