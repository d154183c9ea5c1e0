#include "server/volume/volume_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/posix.h"

namespace stoker::volume {
namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/stoker-volume-cache-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
    fd = UniqueFd(::open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(fd.valid());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
  UniqueFd fd;
};

PreparedVolume Sample() {
  PreparedVolume v;
  v.image.shape = {5, 4, 3};
  v.image.channels = 2;
  v.image.affine = {1.5, 0, 0, -10, 0, 1.5, 0, -20, 0, 0, 2, -30, 0, 0, 0, 1};
  v.image.values.resize(static_cast<size_t>(v.image.Voxels()));
  for (size_t n = 0; n < v.image.values.size(); ++n) {
    v.image.values[n] = n % 7 == 0 ? 0.f : static_cast<float>(n) * 0.25f;
  }
  v.has_label = true;
  v.label.assign(60, 0);
  v.label[7] = 1;
  v.label[8] = 2;
  v.label[59] = 1;
  REQUIRE(ForegroundBackground(v.image, v.label, 0.0, &v.foreground, &v.background).ok());
  return v;
}

void Flip(const std::string& path, off_t at) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(fd.valid());
  uint8_t b = 0;
  REQUIRE(::pread(fd.get(), &b, 1, at) == 1);
  b ^= 0x10;
  REQUIRE(::pwrite(fd.get(), &b, 1, at) == 1);
}

TEST_CASE("Foreground and background voxels as MONAI's map_binary_to_indices") {
  PreparedVolume v = Sample();
  CHECK(v.foreground == std::vector<uint32_t>{7, 8, 59});
  // Background: label 0 and some channel > 0. Channel 0 is 0 at n % 7 == 0
  // (0, 7, 14, ...), channel 1 (values 60..119) at 63, 70, ...: voxel 0 is
  // background through channel 1 (60 * 0.25 > 0), so every label-0 voxel
  // is, the threshold being 0.
  CHECK(v.background.size() == 57);
  std::vector<uint32_t> fg, bg;
  REQUIRE(ForegroundBackground(v.image, v.label, 20.0, &fg, &bg).ok());
  CHECK(fg == v.foreground);
  for (uint32_t b : bg) {
    CHECK((v.image.values[b] > 20.f || v.image.values[60 + b] > 20.f));
  }
  CHECK(bg.size() < v.background.size());
  v.label.pop_back();
  CHECK(ForegroundBackground(v.image, v.label, 0.0, &fg, &bg).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("An entry maps back as written, each section page-aligned") {
  TempDir dir;
  const PreparedVolume v = Sample();
  REQUIRE(WriteEntry(dir.fd.get(), "a", 42, v).ok());
  CHECK_FALSE(std::filesystem::exists(dir.path + "/.tmp-a"));
  absl::StatusOr<std::unique_ptr<MappedEntry>> e = MappedEntry::Open(dir.fd.get(), "a", 42, true);
  REQUIRE(e.ok());
  const MappedEntry& m = **e;
  CHECK(m.shape() == v.image.shape);
  CHECK(m.channels() == 2);
  CHECK(m.affine() == v.image.affine);
  CHECK(std::vector<float>(m.image(), m.image() + 120) == v.image.values);
  REQUIRE(m.label() != nullptr);
  CHECK(std::vector<uint8_t>(m.label(), m.label() + 60) == v.label);
  CHECK(std::vector<uint32_t>(m.foreground(), m.foreground() + m.foreground_count()) ==
        v.foreground);
  CHECK(std::vector<uint32_t>(m.background(), m.background() + m.background_count()) ==
        v.background);
  CHECK(reinterpret_cast<uintptr_t>(m.image()) % 4096 == 0);
  CHECK(reinterpret_cast<uintptr_t>(m.label()) % 4096 == 0);
  CHECK(reinterpret_cast<uintptr_t>(m.foreground()) % 4096 == 0);

  PreparedVolume unlabelled = v;
  unlabelled.has_label = false;
  unlabelled.label.clear();
  unlabelled.foreground.clear();
  unlabelled.background.clear();
  REQUIRE(WriteEntry(dir.fd.get(), "b", 7, unlabelled).ok());
  e = MappedEntry::Open(dir.fd.get(), "b", 7, true);
  REQUIRE(e.ok());
  CHECK((*e)->label() == nullptr);
  CHECK((*e)->foreground_count() == 0);
}

TEST_CASE("Missing, stale, torn and flipped entries are told apart") {
  TempDir dir;
  REQUIRE(WriteEntry(dir.fd.get(), "a", 42, Sample()).ok());
  CHECK(MappedEntry::Open(dir.fd.get(), "none", 42, false).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(MappedEntry::Open(dir.fd.get(), "a", 43, false).status().code() ==
        absl::StatusCode::kFailedPrecondition);

  const std::string path = dir.path + "/a";
  std::filesystem::copy_file(path, dir.path + "/payload");
  Flip(dir.path + "/payload", 4096 + 17);
  // A payload bit: found only when the payload is verified.
  CHECK(MappedEntry::Open(dir.fd.get(), "payload", 42, false).ok());
  CHECK(MappedEntry::Open(dir.fd.get(), "payload", 42, true).status().code() ==
        absl::StatusCode::kDataLoss);

  std::filesystem::copy_file(path, dir.path + "/header");
  Flip(dir.path + "/header", 30);  // the shape
  CHECK(MappedEntry::Open(dir.fd.get(), "header", 42, false).status().code() ==
        absl::StatusCode::kDataLoss);

  std::filesystem::copy_file(path, dir.path + "/short");
  std::filesystem::resize_file(dir.path + "/short", std::filesystem::file_size(path) - 4);
  CHECK(MappedEntry::Open(dir.fd.get(), "short", 42, false).status().code() ==
        absl::StatusCode::kDataLoss);
  std::filesystem::resize_file(dir.path + "/short", 100);
  CHECK(MappedEntry::Open(dir.fd.get(), "short", 42, false).status().code() ==
        absl::StatusCode::kDataLoss);
}

TEST_CASE("A second writer of the same entry is turned away, the first's file kept") {
  TempDir dir;
  UniqueFd held(::openat(dir.fd.get(), ".tmp-a", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  REQUIRE(held.valid());
  CHECK(WriteEntry(dir.fd.get(), "a", 1, Sample()).code() == absl::StatusCode::kAlreadyExists);
  CHECK(std::filesystem::exists(dir.path + "/.tmp-a"));
  CHECK_FALSE(std::filesystem::exists(dir.path + "/a"));
}

TEST_CASE("A claim is held while its writer lives, and taken back once it is gone") {
  TempDir dir;
  absl::StatusOr<UniqueFd> claim = ClaimEntry(dir.fd.get(), "v");
  REQUIRE(claim.ok());
  CHECK(ClaimEntry(dir.fd.get(), "v").status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(ProbeClaim(dir.fd.get(), "v", 0) == ClaimState::kHeld);  // locked
  CHECK(ProbeClaim(dir.fd.get(), "w", 0) == ClaimState::kNone);  // no temporary
  // The writer dies (its fd closed: the lock goes): young, still taken as
  // held; stale, removed.
  *claim = UniqueFd();
  CHECK(ProbeClaim(dir.fd.get(), "v", int64_t{3600} * 1'000'000'000) == ClaimState::kHeld);
  CHECK(ProbeClaim(dir.fd.get(), "v", 0) == ClaimState::kNone);
  CHECK_FALSE(std::filesystem::exists(dir.path + "/.tmp-v"));
  // Claimed and written: the entry is there, the temporary gone.
  absl::StatusOr<UniqueFd> again = ClaimEntry(dir.fd.get(), "v");
  REQUIRE(again.ok());
  REQUIRE(WriteClaimedEntry(dir.fd.get(), *std::move(again), "v", 5, Sample()).ok());
  CHECK(MappedEntry::Open(dir.fd.get(), "v", 5, true).ok());
  CHECK_FALSE(std::filesystem::exists(dir.path + "/.tmp-v"));
  CHECK(std::filesystem::file_size(dir.path + "/v") == EntryBytes(Sample()));
}

}  // namespace
}  // namespace stoker::volume
