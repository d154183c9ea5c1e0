#include "testing/room_test_util.h"

#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/engine/attach_plan.h"
#include "stoker/ring_futex.h"

namespace stoker::testing {

ScratchDir::ScratchDir() {
  std::string tmpl = "/tmp/stoker-room-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  if (p != nullptr) path_ = p;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

void WriteManifest(const std::string& dir, const std::string& name, int n) {
  std::ofstream f(dir + "/" + name);
  for (int i = 0; i < n; ++i) f << "img_" << i << ".jpg\t" << i % 3 << "\n";
}

std::shared_ptr<const Dataset> ManifestDataset(const DataRoot& root, const std::string& dir,
                                               const std::string& name, int n) {
  WriteManifest(dir, name, n);
  auto ds = Dataset::Open(root, name, DatasetFormat::kManifest);
  return ds.ok() ? *ds : nullptr;
}

v1::AttachRequest SmallRequest(const std::string& dataset, uint32_t batch, uint32_t slots,
                               uint32_t epochs) {
  v1::AttachRequest req;
  req.set_dataset(dataset);
  req.set_format(v1::DATASET_FORMAT_MANIFEST);
  req.set_batch_size(batch);
  req.set_ring_slots(slots);
  req.set_shuffle(false);
  req.set_epochs(epochs);
  req.mutable_pipeline()->set_preset("eval");
  req.mutable_pipeline()->add_size(8);
  return req;
}

absl::StatusOr<std::shared_ptr<DaemonSession>> MakeSession(std::shared_ptr<const Dataset> ds,
                                                     const v1::AttachRequest& req,
                                                     uint64_t number) {
  auto request = PlanRequest(req);
  if (!request.ok()) return request.status();
  auto plan = PlanSession(req, *request, ds->size(), AttachLimits{});
  if (!plan.ok()) return plan.status();
  auto s = std::make_shared<DaemonSession>();
  s->req = req;
  s->dataset = std::move(ds);
  s->plan = *std::move(plan);
  s->number = number;
  static std::atomic<int> counter{0};
  s->id = absl::StrCat("room-", number);
  const std::string name = absl::StrCat("stoker-roomtest-", ::getpid(), "-", counter++);
  auto ring = RingOwner::Create(name, RingSpecFor(s->plan, number));
  if (!ring.ok()) return ring.status();
  s->ring = *std::move(ring);
  InitSession(*s, MonotonicNs());
  return s;
}

worker::ResultMsg DecodedResult(const DaemonSession& s, const SampleTask& t) {
  worker::ResultMsg r{};
  r.task_id = t.id;
  r.height = s.plan.params().out_height;
  r.width = s.plan.params().out_width;
  r.channels = 3;
  r.bytes = uint64_t{r.height} * r.width * 3 * ring::DTypeBytes(s.plan.params().dtype);
  return r;
}

absl::StatusOr<std::unique_ptr<RingClient>> RingClient::Open(UniqueFd fd,
                                                             uint64_t total_bytes) {
  std::unique_ptr<RingClient> c(new RingClient());
  c->fd_ = std::move(fd);
  if (!c->fd_.valid()) return absl::InvalidArgumentError("no ring fd");
  if (absl::Status st = MapShared(c->fd_.get(), 0, total_bytes, &c->map_); !st.ok()) return st;
  const ring::RingHeader* h = c->header();
  c->slots_ = h->slot_count;
  c->geometry_.descriptor_offset = h->descriptor_offset;
  c->geometry_.descriptor_stride = h->descriptor_stride;
  c->geometry_.data_offset = h->data_offset;
  c->geometry_.slot_bytes = h->slot_bytes;
  c->geometry_.total_bytes = h->total_bytes;
  c->geometry_.record_bytes = ring::RecordBytes(h->field_count);
  return c;
}

ring::SlotDescriptor* RingClient::descriptor(uint32_t slot) const {
  return ring::Descriptor(map_.addr(), geometry_, slot);
}

const uint8_t* RingClient::slot_data(uint32_t slot) const {
  return static_cast<const uint8_t*>(map_.addr()) + geometry_.data_offset +
         geometry_.slot_bytes * slot;
}

bool RingClient::WaitReady(uint64_t seq, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ring::SlotDescriptor* d = descriptor(ring::SlotOf(header()->depth.load(), seq, slots_));
  for (;;) {
    const uint32_t st = d->state.load(std::memory_order_acquire);
    if (st == ring::kReady && d->sequence == seq) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ring::FutexWait(&d->state, st, 20);
  }
}

void RingClient::Free(uint64_t seq) {
  ring::SlotDescriptor* d = descriptor(ring::SlotOf(header()->depth.load(), seq, slots_));
  d->state.store(ring::kFree, std::memory_order_release);
  header()->batches_consumed.fetch_add(1);
  header()->release_count.fetch_add(1, std::memory_order_release);
  ring::FutexWakeAll(&header()->release_count);
}

}  // namespace stoker::testing

namespace stoker::testing {

std::vector<SlotSample> ReadSlot(const ring::RingHeader& h, const ring::Geometry& g,
                                 ring::SlotDescriptor* d, const uint8_t* slot_data) {
  auto find = [&h](std::string_view name) {
    for (uint32_t k = 0; k < h.field_count; ++k) {
      if (ring::FieldName(h.fields[k]) == name) return static_cast<int>(k);
    }
    return -1;
  };
  const int image = find(ring::kImageField), label = find(ring::kLabelField);
  const int boxes = find(ring::kBoxesField), mask = find(ring::kMaskField);
  const bool nchw = h.layout == ring::kNCHW;
  std::vector<SlotSample> out(d->sample_count);
  for (uint32_t i = 0; i < d->sample_count; ++i) {
    ring::SampleRecord* r = ring::Record(d, g, i);
    const ring::FieldRecord* fr = ring::FieldRecords(r);
    SlotSample& o = out[i];
    o.status = r->status;
    o.dataset_index = r->dataset_index;
    o.planned_index = r->planned_index;
    if (label >= 0) {
      std::memcpy(&o.label, slot_data + h.fields[label].offset + 8 * i, 8);
    }
    if (image >= 0) {
      const ring::FieldSpec& f = h.fields[image];
      o.offset = f.offset + f.stride * i;
      o.height = fr[image].shape[nchw ? 1 : 0];
      o.width = fr[image].shape[nchw ? 2 : 1];
      (void)ring::ValueBytes(f.dtype, f.rank, fr[image].shape, f.stride, &o.bytes);
    }
    if (mask >= 0) {
      const ring::FieldSpec& f = h.fields[mask];
      o.mask_offset = f.offset + f.stride * i;
      (void)ring::ValueBytes(f.dtype, f.rank, fr[mask].shape, f.stride, &o.mask_bytes);
    }
    if (boxes >= 0) o.box_count = fr[boxes].shape[0];
  }
  return out;
}

}  // namespace stoker::testing
