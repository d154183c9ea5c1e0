// The decode node's store of shipped files, on a real folder with a fake
// clock: uploads, what is kept and what is removed.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "server/remote/file_store.h"
#include "testing/dataset_test_util.h"

namespace stoker::remote {
namespace {

constexpr int64_t kKeepNs = 60'000'000'000;

std::string Key(char c) { return std::string(32, c); }

bool OnDisk(const FileStore& s, const std::string& name) {
  struct stat st;
  return ::fstatat(s.dir_fd(), name.c_str(), &st, 0) == 0;
}

std::string Read(const FileStore& s, const std::string& name) {
  UniqueFd fd(::openat(s.dir_fd(), name.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out(64, '\0');
  const ssize_t n = fd.valid() ? ::read(fd.get(), out.data(), out.size()) : -1;
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

void Put(FileStore& s, const std::string& key, const std::string& bytes) {
  auto up = s.Begin(key, bytes.size());
  REQUIRE(up.ok());
  REQUIRE((*up)->Append(bytes.substr(0, bytes.size() / 2)).ok());
  REQUIRE((*up)->Append(bytes.substr(bytes.size() / 2)).ok());
  REQUIRE(s.Commit(*std::move(up)).ok());
}

TEST_CASE("store keys are 32 lowercase hex digits, nothing that names a path") {
  CHECK(IsStoreKey("0123456789abcdef0123456789abcdef"));
  CHECK_FALSE(IsStoreKey("0123456789ABCDEF0123456789abcdef"));
  CHECK_FALSE(IsStoreKey("../../../../etc/passwd0123456789"));
  CHECK_FALSE(IsStoreKey(Key('a') + "0"));
  CHECK_FALSE(IsStoreKey(""));
}

TEST_CASE("shipped files: uploaded in chunks, found, pinned, and the folder removed at the end") {
  FakeClock clock;
  testing::TempDir tmp;
  std::string folder;
  {
    auto store = FileStore::Create(tmp.path(), 1 << 20, &clock, kKeepNs);
    REQUIRE(store.ok());
    FileStore& s = **store;
    folder = s.path();
    CHECK(s.Has({Key('a')}) == std::vector<bool>{false});
    CHECK(s.Acquire({Key('a')}).code() == absl::StatusCode::kNotFound);
    Put(s, Key('a'), "hello, shipped video");
    CHECK(Read(s, Key('a')) == "hello, shipped video");
    CHECK(s.Has({Key('b'), Key('a')}) == std::vector<bool>{false, true});
    // A second upload of a file already there changes nothing.
    Put(s, Key('a'), "the same file again");
    CHECK(Read(s, Key('a')) == "hello, shipped video");
    CHECK(s.stats().files == 1);
    CHECK(s.stats().received == 1);
    // Acquire is all or nothing.
    CHECK(s.Acquire({Key('a'), Key('c')}).code() == absl::StatusCode::kNotFound);
    REQUIRE(s.Acquire({Key('a')}).ok());
    s.Release({Key('a')});

    // Partial uploads leave nothing; wrong sizes and keys are refused.
    {
      auto up = s.Begin(Key('d'), 10);
      REQUIRE(up.ok());
      REQUIRE((*up)->Append("12345").ok());
      CHECK((*up)->Append("6789012").code() == absl::StatusCode::kInvalidArgument);
      CHECK(s.Commit(*std::move(up)).code() == absl::StatusCode::kInvalidArgument);
    }
    CHECK_FALSE(OnDisk(s, Key('d')));
    CHECK(s.Begin("../escape", 10).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.Begin(Key('e'), 0).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.Begin(Key('e'), (1 << 20) + 1).status().code() == absl::StatusCode::kInvalidArgument);
    {
      auto dropped = s.Begin(Key('f'), 4);  // destroyed before Commit
      REQUIRE(dropped.ok());
      REQUIRE((*dropped)->Append("ab").ok());
    }
    struct stat st;
    CHECK(::stat(folder.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }
  struct stat st;
  CHECK(::stat(folder.c_str(), &st) != 0);  // gone, contents and all
}

TEST_CASE("a store removes the folders of killed nodes, never a live one's") {
  FakeClock clock;
  testing::TempDir tmp;
  auto live = FileStore::Create(tmp.path(), 100, &clock, kKeepNs);
  REQUIRE(live.ok());
  Put(**live, Key('1'), "kept");
  // A killed node's folder: nobody holds its lock.
  tmp.Write("stoker-shipped-dead01/0123456789abcdef0123456789abcdef", "left behind");
  tmp.Write("stoker-shipped-dead01/.up-3", "partial");
  tmp.Write("not-a-store/file", "someone else's");
  auto next = FileStore::Create(tmp.path(), 100, &clock, kKeepNs);
  REQUIRE(next.ok());
  struct stat st;
  CHECK(::stat((tmp / "stoker-shipped-dead01").c_str(), &st) != 0);
  CHECK(::stat((tmp / "not-a-store/file").c_str(), &st) == 0);
  CHECK(Read(**live, Key('1')) == "kept");
  CHECK(::stat((*live)->path().c_str(), &st) == 0);
}

TEST_CASE("over its budget the store removes the least recently used files not in use") {
  FakeClock clock;
  testing::TempDir tmp;
  auto store = FileStore::Create(tmp.path(), 100, &clock, kKeepNs);
  REQUIRE(store.ok());
  FileStore& s = **store;
  const std::string forty(40, 'x');
  Put(s, Key('1'), forty);
  clock.AdvanceMs(1000);
  Put(s, Key('2'), forty);
  clock.AdvanceMs(1000);
  // Over budget, but both were used within the keep window: kept.
  Put(s, Key('3'), forty);
  CHECK(s.stats().files == 3);
  CHECK(s.stats().bytes == 120);
  // Later: 1 is pinned by a task, 2 was just asked for; 3 is the oldest free.
  clock.AdvanceMs(kKeepNs / 1'000'000);
  REQUIRE(s.Acquire({Key('1')}).ok());
  clock.AdvanceMs(10);
  CHECK(s.Has({Key('2')}) == std::vector<bool>{true});
  clock.AdvanceMs(kKeepNs / 1'000'000);
  Put(s, Key('4'), forty);  // 160 bytes: two must go, the pinned one stays
  CHECK(s.Has({Key('1'), Key('2'), Key('3'), Key('4')}) ==
        std::vector<bool>{true, false, false, true});
  CHECK_FALSE(OnDisk(s, Key('2')));
  CHECK_FALSE(OnDisk(s, Key('3')));
  CHECK(s.stats().removed == 2);
  CHECK(s.stats().bytes == 80);
}

}  // namespace
}  // namespace stoker::remote
