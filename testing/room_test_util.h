// Tests only: what the engine's room tests share. A scratch directory, a
// manifest dataset (its files need not exist: nothing is decoded), a small
// request, a session as Attach makes one but without an engine, and the
// client's side of a ring.

#ifndef STOKER_TESTING_ROOM_TEST_UTIL_H_
#define STOKER_TESTING_ROOM_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/dataset/dataset.h"
#include "common/posix.h"
#include "server/engine/session.h"
#include "server/engine/transcode_cache.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::testing {

// A fresh directory under /tmp, removed (recursively) on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A cache folder in memory (transcode_cache.h's CacheDir): the files'
// (bytes, mtime) by name, and what was removed, in order.
class FakeCacheDir : public CacheDir {
 public:
  absl::Status List(std::vector<CacheDirEntry>* out) override {
    out->clear();
    for (const auto& [name, f] : files) out->push_back({name, f.first, f.second});
    return absl::OkStatus();
  }
  absl::Status Remove(const std::string& name) override {
    files.erase(name);
    removed.push_back(name);
    return absl::OkStatus();
  }
  std::map<std::string, std::pair<uint64_t, int64_t>> files;
  std::vector<std::string> removed;
};

// Writes `dir`/`name`: a manifest of `n` entries "img_<i>.jpg<TAB><i % 3>".
void WriteManifest(const std::string& dir, const std::string& name, int n);

// The manifest `name` of `n` entries in `dir`, indexed (`root` must stay).
std::shared_ptr<const Dataset> ManifestDataset(const DataRoot& root, const std::string& dir,
                                               const std::string& name, int n);

// Attach's request for `dataset`: batch `batch`, the eval preset at 8x8 uint8
// (192 bytes a sample), `slots` ring slots, no shuffle, `epochs` epochs.
v1::AttachRequest SmallRequest(const std::string& dataset, uint32_t batch, uint32_t slots = 2,
                               uint32_t epochs = 1);

// A session as Attach makes it over `ds` (plan, a ring under a unique shm
// name, InitSession), numbered `number`, without an engine.
absl::StatusOr<std::shared_ptr<DaemonSession>> MakeSession(std::shared_ptr<const Dataset> ds,
                                                     const v1::AttachRequest& req,
                                                     uint64_t number = 1);

// A decoded worker result for `t` of session `s`: the output shape.
worker::ResultMsg DecodedResult(const DaemonSession& s, const SampleTask& t);

// The client's view of a ring: maps it, leases and frees slots.
class RingClient {
 public:
  // Maps the ring of `total_bytes` whose fd is `fd` (taken over).
  static absl::StatusOr<std::unique_ptr<RingClient>> Open(UniqueFd fd, uint64_t total_bytes);
  ring::RingHeader* header() const { return static_cast<ring::RingHeader*>(map_.addr()); }
  ring::SlotDescriptor* descriptor(uint32_t slot) const;
  const ring::Geometry& geometry() const { return geometry_; }
  const uint8_t* slot_data(uint32_t slot) const;
  // Waits (deadline `timeout`) until batch `seq` is ready in its slot.
  bool WaitReady(uint64_t seq, std::chrono::milliseconds timeout) const;
  // Frees batch `seq`'s slot as a client does when its lease ends.
  void Free(uint64_t seq);

 private:
  RingClient() = default;
  UniqueFd fd_;
  Mapping map_;
  ring::Geometry geometry_;
  uint32_t slots_ = 0;
};

// One sample of a ready slot as a reader finds it: its record and its
// still-image fields (ring_layout.h, "field"), read by name from the header.
struct SlotSample {
  uint32_t status = 0;
  uint64_t dataset_index = 0;
  uint64_t planned_index = 0;
  int64_t label = 0;
  uint64_t offset = 0;  // the image's room in the slot's data
  uint64_t bytes = 0;   // the image's bytes, by its shape
  uint32_t height = 0;
  uint32_t width = 0;
  uint64_t mask_offset = 0;
  uint64_t mask_bytes = 0;
  uint32_t box_count = 0;
};
std::vector<SlotSample> ReadSlot(const ring::RingHeader& h, const ring::Geometry& g,
                                 ring::SlotDescriptor* d, const uint8_t* slot_data);

}  // namespace stoker::testing

#endif  // STOKER_TESTING_ROOM_TEST_UTIL_H_
