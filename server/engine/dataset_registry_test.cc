// The dataset registry over a real data root, through an indexer that
// counts (and can hold) its calls.

#include "server/engine/dataset_registry.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "testing/room_test_util.h"

namespace stoker {
namespace {

// DataRootIndexer, counted; Open can be held until released, and Unchanged
// can be made to say no.
class CountingIndexer : public DatasetIndexer {
 public:
  explicit CountingIndexer(const DataRoot* root) : real_(root) {}
  absl::StatusOr<std::string> CanonicalName(const std::string& d) override {
    return real_.CanonicalName(d);
  }
  absl::StatusOr<std::shared_ptr<const Dataset>> Open(const std::string& d, DatasetFormat f,
                                                      const IndexOptions& o) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      ++opens_;
      cv_.notify_all();
      cv_.wait(l, [&] { return !hold_; });
    }
    return real_.Open(d, f, o);
  }
  bool Unchanged(const Dataset& ds, std::string* why) override {
    std::lock_guard<std::mutex> l(mu_);
    if (changed_) *why = "test said so";
    return !changed_;
  }
  int opens() {
    std::lock_guard<std::mutex> l(mu_);
    return opens_;
  }
  void Hold(bool hold) {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = hold;
    cv_.notify_all();
  }
  void SetChanged(bool changed) {
    std::lock_guard<std::mutex> l(mu_);
    changed_ = changed;
  }
  bool WaitOpens(int n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(10), [&] { return opens_ >= n; });
  }

 private:
  DataRootIndexer real_;
  std::mutex mu_;
  std::condition_variable cv_;
  int opens_ = 0;
  bool hold_ = false;
  bool changed_ = false;
};

constexpr int kManifest = static_cast<int>(DatasetFormat::kManifest);

TEST_CASE("the registry indexes a dataset once, shares it, and indexes it again when changed") {
  testing::ScratchDir dir;
  auto root = *DataRoot::Open(dir.path());
  testing::WriteManifest(dir.path(), "list.txt", 6);
  CountingIndexer indexer(root.get());
  DatasetRegistry reg(&indexer);
  auto a = reg.Get("list.txt", kManifest, {});
  REQUIRE(a.ok());
  CHECK((*a)->size() == 6);
  auto b = reg.Get("./list.txt", kManifest, {});  // the same canonical name
  REQUIRE(b.ok());
  CHECK(*a == *b);
  CHECK(indexer.opens() == 1);
  CHECK(reg.size() == 1);
  CHECK(reg.gates() == 0);  // gates leave with their last user

  indexer.SetChanged(true);
  auto c = reg.Get("list.txt", kManifest, {});
  REQUIRE(c.ok());
  CHECK(*c != *a);
  CHECK(indexer.opens() == 2);
  CHECK(reg.size() == 1);  // replaced under its key
}

TEST_CASE("options that change an index, and the format asked for, are other keys") {
  testing::ScratchDir dir;
  auto root = *DataRoot::Open(dir.path());
  testing::WriteManifest(dir.path(), "list.txt", 6);
  CountingIndexer indexer(root.get());
  DatasetRegistry reg(&indexer);
  IndexOptions io;
  REQUIRE(reg.Get("list.txt", kManifest, io).ok());
  io.allow_empty = true;
  REQUIRE(reg.Get("list.txt", kManifest, io).ok());
  REQUIRE(reg.Get("list.txt", static_cast<int>(DatasetFormat::kAuto), {}).ok());
  CHECK(indexer.opens() == 3);
  CHECK(reg.size() == 3);
  io.cache_dir = dir.path() + "/cache";  // not part of the key
  REQUIRE(reg.Get("list.txt", kManifest, io).ok());
  CHECK(indexer.opens() == 3);
  CHECK(DatasetKey("x", 2, io) == "2:1:x");
  io.annotations = "a.json";  // COCO: one images folder, several annotation files
  CHECK(DatasetKey("x", 4, io) == "4:1:x\na.json");
  CHECK(DatasetKey("x", 4, io) != DatasetKey("x", 2, io));
}

TEST_CASE("concurrent requests for one dataset index it once and share it") {
  testing::ScratchDir dir;
  auto root = *DataRoot::Open(dir.path());
  testing::WriteManifest(dir.path(), "list.txt", 6);
  CountingIndexer indexer(root.get());
  DatasetRegistry reg(&indexer);
  indexer.Hold(true);
  std::vector<std::shared_ptr<const Dataset>> got(4);
  std::vector<std::thread> ranks;
  for (int i = 0; i < 4; ++i) {
    ranks.emplace_back([&, i] {
      auto ds = reg.Get("list.txt", kManifest, {});
      if (ds.ok()) got[i] = *ds;
    });
  }
  REQUIRE(indexer.WaitOpens(1));
  CHECK(reg.gates() == 1);  // the others wait on it
  indexer.Hold(false);
  for (auto& t : ranks) t.join();
  CHECK(indexer.opens() == 1);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(got[i] != nullptr);
    CHECK(got[i] == got[0]);
  }
  CHECK(reg.gates() == 0);
}

TEST_CASE("the registry passes errors on and keeps nothing of them") {
  testing::ScratchDir dir;
  auto root = *DataRoot::Open(dir.path());
  CountingIndexer indexer(root.get());
  DatasetRegistry reg(&indexer);
  auto missing = reg.Get("nothing.txt", kManifest, {});
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  auto outside = reg.Get("../elsewhere", kManifest, {});
  CHECK(outside.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(reg.size() == 0);
  CHECK(reg.gates() == 0);
}

}  // namespace
}  // namespace stoker
