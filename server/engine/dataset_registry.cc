#include "server/engine/dataset_registry.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/posix.h"
#include "spdlog/spdlog.h"

namespace stoker {

absl::StatusOr<std::string> DataRootIndexer::CanonicalName(const std::string& dataset) {
  return Dataset::CanonicalName(*root_, dataset);
}

absl::StatusOr<std::shared_ptr<const Dataset>> DataRootIndexer::Open(
    const std::string& dataset, DatasetFormat format, const IndexOptions& options) {
  return Dataset::Open(*root_, dataset, format, options);
}

bool DataRootIndexer::Unchanged(const Dataset& dataset, std::string* why) {
  return dataset.Unchanged(*root_, why);
}

std::string DatasetKey(const std::string& name, int format, const IndexOptions& io) {
  return absl::StrCat(format, ":", io.flags(), ":", name, io.identity());
}

absl::StatusOr<std::shared_ptr<const Dataset>> DatasetRegistry::Get(const std::string& dataset,
                                                                    int format,
                                                                    IndexOptions io) {
  auto resolved = indexer_->CanonicalName(dataset);
  if (!resolved.ok()) return resolved.status();
  const std::string ds_key = DatasetKey(*resolved, format, io);  // of the gate and the index
  std::shared_ptr<absl::Mutex> gate;
  {
    absl::MutexLock l(&mu_);
    std::shared_ptr<absl::Mutex>& g = gates_[ds_key];
    if (g == nullptr) g = std::make_shared<absl::Mutex>();
    gate = g;
  }
  absl::Cleanup drop_gate = [this, &ds_key, &gate] {
    absl::MutexLock l(&mu_);
    auto it = gates_.find(ds_key);
    if (it != gates_.end() && it->second == gate && gate.use_count() == 2) gates_.erase(it);
  };
  absl::ReleasableMutexLock gate_lock(gate.get());
  std::shared_ptr<const Dataset> ds;
  {
    absl::MutexLock l(&mu_);
    auto it = datasets_.find(ds_key);
    if (it != datasets_.end()) ds = it->second;
  }
  if (ds != nullptr) {
    std::string why;
    if (!indexer_->Unchanged(*ds, &why)) {
      spdlog::info("dataset {} changed since it was indexed ({}); indexing again", ds->name(), why);
      ds = nullptr;
    }
  }
  if (ds == nullptr) {
    const int64_t t0 = MonotonicNs();
    io.progress = [dataset, t0](uint64_t n) {
      spdlog::info("indexing {}: {} entries so far ({:.1f} s)", dataset, n,
                   (MonotonicNs() - t0) / 1e9);
    };
    auto opened = indexer_->Open(dataset, static_cast<DatasetFormat>(format), io);
    if (!opened.ok()) return opened.status();
    ds = *opened;
    for (const std::string& w : ds->warnings()) spdlog::warn("dataset {}: {}", ds->name(), w);
    spdlog::info("{} dataset {}: {} samples, {} classes in {:.1f} ms; index {:.1f} MB{}",
                 ds->from_cache() ? "loaded the cached index of" : "indexed", ds->name(),
                 ds->size(), ds->class_names().size(), (MonotonicNs() - t0) / 1e6,
                 ds->memory_bytes() / 1e6, ds->from_cache() ? " on the heap (mapped)" : "");
    // Kept under the name Open resolved, which is the name of what it indexed
    // (a symlink swapped since CanonicalName above must not file one
    // dataset's index under another's name).
    absl::MutexLock l(&mu_);
    datasets_[DatasetKey(ds->name(), format, io)] = ds;
  }
  gate_lock.Release();
  std::move(drop_gate).Invoke();
  return ds;
}

size_t DatasetRegistry::size() const {
  absl::MutexLock l(&mu_);
  return datasets_.size();
}

size_t DatasetRegistry::gates() const {
  absl::MutexLock l(&mu_);
  return gates_.size();
}

}  // namespace stoker
