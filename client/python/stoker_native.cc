// stoker._native: the pybind11 binding of the C++ client (stoker/client.h).
//
// The pure-Python package (client/python/stoker/) builds the user-facing
// Loader on top of this. What this file guarantees:
//   * A batch's pixels are ONE numpy array over the ring slot (no copy). Its
//     `base` is a capsule owning the stoker::Batch lease, so the slot goes back
//     to the daemon when the last array/tensor viewing it is collected. The
//     variable-size decode pipeline gives a list of arrays sharing one capsule.
//   * Every blocking call (Connect, Attach, Next, Detach, Status, Health and
//     the Session destructor, which detaches) runs with the GIL released.
//     Batch::Release does not block (an atomic store and a futex wake), so the
//     capsule destructor runs with the GIL held.
//   * A non-OK absl::Status becomes a typed exception (see MakeExceptions);
//     each carries `.code`, the status code's name.
//   * The pipeline is not parsed here: attach passes its keywords through as
//     one JSON string (AttachOptions::pipeline), and effective_pipeline asks
//     stoker/pipeline_spec.h, the one place that knows their defaults.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <limits>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "native_common.h"
#include "stoker/client.h"
#include "stoker/cuda.h"  // device copies
#include "pipeline/pipeline_spec.h"  // the pipeline keywords' one definition
#include "pipeline/sample_fields.h"  // field dtype names
#include "cuda_normalize.h"  // device copies: the CPU reference (client/src)

namespace py = pybind11;

namespace stoker {
namespace {

using namespace native;  // NOLINT: native_common.h, this module's own

// ---------------------------------------------------------------------------
// Session

// Which batch holds each ring slot, as far as this binding knows. Touched
// only with the GIL held (by next() and by capsule destructors), so it needs
// no lock of its own.
struct LeaseTable {
  explicit LeaseTable(uint32_t slots) : holder(slots, -1) {}
  std::vector<int64_t> holder;  // per slot: the sequence of the batch holding it, or -1
};

// What a batch's capsule owns: the lease and the bookkeeping to end it.
struct Lease {
  Batch batch;
  std::shared_ptr<LeaseTable> table;
  uint32_t slot = 0;
};

void DestroyLease(void* p) {
  auto* lease = static_cast<Lease*>(p);
  lease->table->holder[lease->slot] = -1;
  delete lease;  // ~Batch releases the slot: an atomic store and a futex wake
}

// The lease capsule is named, so copy_to_device can tell one of ours from
// any other array base.
constexpr const char* kLeaseCapsule = "stoker.lease";

void DestroyLeaseCapsule(PyObject* capsule) {
  void* p = PyCapsule_GetPointer(capsule, kLeaseCapsule);
  if (p == nullptr) {
    PyErr_Clear();
    return;
  }
  DestroyLease(p);
}

class PySession {
 public:
  PySession(std::unique_ptr<Session> s) : session_(std::move(s)) {
    const SessionInfo& i = session_->info();
    slots_ = i.ring_slots != 0 ? i.ring_slots : 1;
    leases_ = std::make_shared<LeaseTable>(slots_);
  }

  ~PySession() { Close(); }

  py::dict Info() const {
    const SessionInfo& i = session_->info();
    py::dict d;
    d["session_id"] = i.session_id;
    d["ring_name"] = i.ring_name;
    d["dataset_size"] = i.dataset_size;
    d["shard_size"] = i.shard_size;
    d["batches_per_epoch"] = i.batches_per_epoch;
    d["total_batches"] = i.total_batches;
    d["start_epoch"] = i.start_epoch;
    d["start_batch"] = i.start_batch;
    d["batch_size"] = i.batch_size;
    d["height"] = i.height;
    d["width"] = i.width;
    d["channels"] = i.channels;
    // client.h's DType and Layout values are the ring's (stoker/ring_layout.h).
    d["dtype"] = std::string(pipeline::DTypeName(static_cast<uint32_t>(i.dtype)));
    d["layout"] = std::string(pipeline::LayoutName(static_cast<uint32_t>(i.layout)));
    d["ring_slots"] = i.ring_slots;
    d["slot_bytes"] = i.slot_bytes;
    d["sample_bytes"] = i.sample_bytes;
    d["mask_dtype"] = i.mask_dtype == 0 ? py::object(py::none())
                      : py::object(py::str(i.mask_dtype == 4 ? "uint16" : "uint8"));
    d["box_stride"] = i.box_stride;
    // Every field of the samples: (name, dtype name, max_shape, fixed_shape).
    py::list fields;
    for (const FieldInfo& f : i.fields) {
      py::list bound;
      for (uint32_t b : f.max_shape) bound.append(b);
      fields.append(py::make_tuple(f.name,
                                   std::string(pipeline::FieldDTypeName(static_cast<uint32_t>(f.dtype))),
                                   py::tuple(bound), f.fixed_shape));
    }
    d["fields"] = fields;
    // File-system names: bytes, decoded as os.fsdecode does (a name that is
    // not UTF-8 keeps its bytes as surrogates, as os.listdir gives it).
    py::list classes;
    for (const std::string& c : i.class_names) {
      classes.append(py::reinterpret_steal<py::object>(
          PyUnicode_DecodeFSDefaultAndSize(c.data(), static_cast<Py_ssize_t>(c.size()))));
    }
    d["class_names"] = classes;
    d["effective_pipeline_json"] = i.effective_pipeline_json;
    d["effective_volumes_json"] = i.effective_volumes_json;
    return d;
  }

  // ({field name: (values, shapes)}, indices, planned_indices, statuses,
  //  epoch, batch_in_epoch, sequence): every field of the samples
  //  (ring_layout.h, "field") as FieldValues and FieldShapes give it.
  py::tuple Next(int64_t timeout_ms) {
    if (session_ == nullptr) Raise(g_exc.stoker_error, "the session was detached", "CANCELLED");
    // The ring hands batches out through its slots in order: batch s lies in
    // slot s % depth (the ring may deepen). If a batch still referenced holds
    // that slot, the daemon can never fill it: say so now rather than wait
    // forever.
    const uint32_t slot = session_->SlotOf(next_seq_);
    if (const int64_t held = slot < slots_ ? leases_->holder[slot] : -1; held >= 0) {
      Raise(g_exc.ring_exhausted,
            "batch " + std::to_string(next_seq_) + " needs ring slot " + std::to_string(slot) +
                ", still held by batch " + std::to_string(held) +
                " (its images are still referenced). The ring reuses its slots in order, " +
                std::to_string(next_seq_ - static_cast<uint64_t>(held)) +
                " batches apart now: drop (or copy) a batch before taking that many more, "
                "use copy=True, or attach with more ring_slots",
            "FAILED_PRECONDITION");
    }
    absl::StatusOr<Batch> r;
    uint64_t delivered = 0;
    // Wait in slices so that Ctrl-C (a pending signal) interrupts a long
    // wait; the client tracks the daemon's heartbeat across calls.
    constexpr int64_t kSliceMs = 200;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      int64_t slice = kSliceMs;
      if (timeout_ms >= 0) {
        const int64_t spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
        slice = std::max<int64_t>(0, std::min(kSliceMs, timeout_ms - spent));
      }
      {
        py::gil_scoped_release nogil;
        r = session_->Next(slice);
        delivered = session_->delivered();
      }
      if (r.ok() || !absl::IsDeadlineExceeded(r.status())) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (timeout_ms >= 0 && slice < kSliceMs) {
        r = absl::DeadlineExceededError("no batch within " + std::to_string(timeout_ms) + " ms");
        break;
      }
    }
    next_seq_ = delivered;
    if (!r.ok()) RaiseStatus(r.status(), Where::kNext);
    const uint32_t held_slot = r->slot();
    auto* lease = new Lease{std::move(*r), leases_, held_slot};
    leases_->holder[lease->slot] = static_cast<int64_t>(lease->batch.sequence());
    // From here the capsule owns the lease, whatever happens.
    py::capsule owner = py::reinterpret_steal<py::capsule>(
        PyCapsule_New(lease, kLeaseCapsule, &DestroyLeaseCapsule));
    if (!owner) {
      DestroyLease(lease);
      throw py::error_already_set();
    }
    Batch* batch = &lease->batch;
    const uint32_t n = batch->size();

    py::dict fields;
    for (const BatchField& f : batch->fields()) {
      fields[py::str(f.name())] = py::make_tuple(FieldValues(f, n, owner), FieldShapes(f, n));
    }
    py::array_t<int64_t> indices(n, batch->indices().data());
    py::array_t<int64_t> planned(n, batch->planned_indices().data());
    py::array_t<int32_t> statuses(n);
    int32_t* st = statuses.mutable_data();
    for (uint32_t i = 0; i < n; ++i) st[i] = static_cast<int32_t>(batch->status(i));
    return py::make_tuple(std::move(fields), std::move(indices), std::move(planned),
                          std::move(statuses), batch->epoch(), batch->batch_in_epoch(),
                          batch->sequence());
  }

  uint64_t Delivered() const { return session_ == nullptr ? delivered_ : session_->delivered(); }

  void Detach() {
    if (session_ == nullptr) return;
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->Detach();
    }
    delivered_ = session_->delivered();
    Close();
    // A daemon that already went away has nothing left to detach.
    if (!st.ok() && st.code() != absl::StatusCode::kUnavailable) RaiseStatus(st, Where::kDetach);
  }

  bool detached() const { return session_ == nullptr; }

  // (paths, labels) of entries [offset, offset + limit): see
  // Session::ListSamples. Paths are decoded as os.fsdecode does (a name that
  // is not UTF-8 keeps its bytes as surrogates, as os.listdir gives it).
  py::tuple ListSamples(uint64_t offset, uint32_t limit) {
    if (session_ == nullptr) Raise(g_exc.stoker_error, "the session was detached", "CANCELLED");
    absl::StatusOr<SampleList> r;
    {
      py::gil_scoped_release nogil;
      r = session_->ListSamples(offset, limit);
    }
    if (!r.ok()) RaiseStatus(r.status(), Where::kStatus);
    py::list paths(r->paths.size());
    py::list labels(r->labels.size());
    for (size_t i = 0; i < r->paths.size(); ++i) {
      PyObject* p = PyUnicode_DecodeFSDefaultAndSize(r->paths[i].data(),
                                                     static_cast<Py_ssize_t>(r->paths[i].size()));
      if (p == nullptr) throw py::error_already_set();
      PyList_SET_ITEM(paths.ptr(), static_cast<Py_ssize_t>(i), p);
      labels[i] = py::int_(r->labels[i]);
    }
    return py::make_tuple(std::move(paths), std::move(labels));
  }

  // Batches whose arrays are still alive (their slots not yet back).
  uint32_t Held() const {
    uint32_t n = 0;
    for (int64_t h : leases_->holder) n += h >= 0 ? 1 : 0;
    return n;
  }

  // Device copies: the session's path (registered ring or staging) and counters.
  py::dict DeviceStatus() const;

 private:
  // Destroys the Session (it detaches and joins its KeepAlive thread, both of
  // which may block) without holding the GIL. Outstanding batches stay valid.
  void Close() {
    if (session_ == nullptr) return;
    std::unique_ptr<Session> s = std::move(session_);
    if (PyGILState_Check() && !_Py_IsFinalizing()) {
      py::gil_scoped_release nogil;
      s.reset();
    } else {
      s.reset();
    }
  }

  std::unique_ptr<Session> session_;
  uint64_t delivered_ = 0;
  uint64_t next_seq_ = 0;  // the sequence of the batch next() delivers next
  uint32_t slots_ = 1;
  std::shared_ptr<LeaseTable> leases_;
  // Constant after construction.
};

// ---------------------------------------------------------------------------
// Device copies (stoker/cuda.h): copy_to_device, cuda_status,
// normalize_reference, Session.device_status.

py::dict StatusDict(const DeviceTransferStatus& t) {
  py::dict d;
  d["built_with_cuda"] = t.built_with_cuda;
  d["mode"] = t.mode;
  d["detail"] = t.detail;
  d["copies"] = t.copies;
  d["bytes"] = t.bytes;
  d["registered_bytes"] = t.registered_bytes;
  d["staging_bytes"] = t.staging_bytes;
  d["in_flight"] = t.in_flight;
  d["deferred_slots"] = t.deferred_slots;
  d["released_after_copy"] = t.released_after_copy;
  return d;
}

py::dict PySession::DeviceStatus() const {
  if (session_ == nullptr) {
    DeviceTransferStatus t;
    t.built_with_cuda = BuiltWithCuda();
    t.mode = "detached";
    return StatusDict(t);
  }
  return StatusDict(session_->DeviceStatus());
}

DeviceDType ParseDeviceDType(py::handle v) {
  return Choose<DeviceDType>(v, "dtype",
                             {{"asis", DeviceDType::kAsIs},
                              {"float32", DeviceDType::kFloat32},
                              {"float16", DeviceDType::kFloat16},
                              {"bfloat16", DeviceDType::kBFloat16}});
}

// The Batch lease owning `images` (an array from Session.next, or a list of
// them), or an InvalidRequestError.
Lease* LeaseOf(py::handle images) {
  py::handle a = images;
  if (PyList_Check(images.ptr())) {
    if (PyList_Size(images.ptr()) == 0) RaiseInvalid("copy_to_device: an empty list");
    a = PyList_GetItem(images.ptr(), 0);
  }
  PyObject* base = PyObject_HasAttrString(a.ptr(), "base") ? PyObject_GetAttrString(a.ptr(), "base")
                                                             : nullptr;
  if (base == nullptr) {
    PyErr_Clear();
    RaiseInvalid("copy_to_device: images must be the ndarray that Session.next returned");
  }
  py::object owner = py::reinterpret_steal<py::object>(base);
  if (!PyCapsule_IsValid(owner.ptr(), kLeaseCapsule)) {
    RaiseInvalid(
        "copy_to_device: images must be the ndarray that Session.next returned (not a copy or "
        "a view of it)");
  }
  return static_cast<Lease*>(PyCapsule_GetPointer(owner.ptr(), kLeaseCapsule));
}

void CopyToDevicePy(py::handle images, uint64_t stream, uint64_t dst, uint64_t dst_bytes,
                    py::handle dtype, py::handle layout, py::handle mean, py::handle std,
                    int device, uint64_t scratch, uint64_t scratch_bytes, int64_t sample) {
  Lease* lease = LeaseOf(images);
  if (!lease->batch.valid()) RaiseInvalid("copy_to_device: the batch was released");
  DeviceCopyOptions o;
  o.dtype = ParseDeviceDType(dtype);
  o.layout = ToLayout(layout);
  if (!mean.is_none()) {
    std::vector<float> m = ToTriple(mean, "mean");
    std::copy(m.begin(), m.end(), o.mean);
  }
  if (!std.is_none()) {
    std::vector<float> sd = ToTriple(std, "std");
    std::copy(sd.begin(), sd.end(), o.std);
  }
  o.device = device;
  o.scratch = reinterpret_cast<void*>(static_cast<uintptr_t>(scratch));
  o.scratch_bytes = scratch_bytes;
  absl::Status st;
  {
    // `images` (held by our caller) keeps the lease alive meanwhile. The
    // first copy of a session registers the ring: not instant.
    py::gil_scoped_release nogil;
    auto* s = reinterpret_cast<CUstream_st*>(static_cast<uintptr_t>(stream));
    void* d = reinterpret_cast<void*>(static_cast<uintptr_t>(dst));
    st = sample < 0 ? lease->batch.CopyToDevice(s, d, dst_bytes, o)
                    : lease->batch.CopySampleToDevice(
                          static_cast<uint32_t>(std::min<int64_t>(sample, UINT32_MAX)), s, d,
                          dst_bytes, o);
  }
  if (!st.ok()) RaiseStatus(st, Where::kDevice);
}

py::dict CudaStatusPy() {
  py::dict d;
  int count = 0;
  absl::Status st;
  {
    py::gil_scoped_release nogil;
    st = CudaDeviceCount(&count);
  }
  d["built_with_cuda"] = BuiltWithCuda();
  d["device_count"] = count;
  d["error"] = st.ok() ? std::string() : std::string(st.message());
  return d;
}

// The CPU reference of the device normalize (client/src/cuda_normalize.h):
// [n, h, w, 3] uint8 -> float32 / float16 / bfloat16 (as uint16 bits).
py::array NormalizeReferencePy(const py::array_t<uint8_t, py::array::c_style>& src,
                               py::handle dtype, py::handle layout, py::handle mean,
                               py::handle std) {
  if (src.ndim() != 4 || src.shape(3) != 3) RaiseInvalid("normalize_reference: [n, h, w, 3] uint8");
  cuda::NormalizeParams p;
  p.n = static_cast<uint32_t>(src.shape(0));
  p.h = static_cast<uint32_t>(src.shape(1));
  p.w = static_cast<uint32_t>(src.shape(2));
  const DeviceDType d = ParseDeviceDType(dtype);
  if (d == DeviceDType::kAsIs) RaiseInvalid("normalize_reference: a float dtype");
  p.dtype = static_cast<cuda::OutDType>(static_cast<uint32_t>(d));
  p.nchw = ToLayout(layout) == Layout::kNCHW;
  if (!mean.is_none()) {
    std::vector<float> m = ToTriple(mean, "mean");
    std::copy(m.begin(), m.end(), p.mean);
  }
  if (!std.is_none()) {
    std::vector<float> sd = ToTriple(std, "std");
    std::copy(sd.begin(), sd.end(), p.std);
  }
  const py::ssize_t n = p.n, h = p.h, w = p.w;
  std::vector<py::ssize_t> shape =
      p.nchw ? std::vector<py::ssize_t>{n, 3, h, w} : std::vector<py::ssize_t>{n, h, w, 3};
  py::array out = p.dtype == cuda::OutDType::kFloat32 ? py::array(py::dtype::of<float>(), shape)
                  : p.dtype == cuda::OutDType::kFloat16
                      ? py::array(py::dtype("float16"), shape)
                      : py::array(py::dtype::of<uint16_t>(), shape);
  cuda::NormalizeReference(src.data(), out.mutable_data(), p);
  return out;
}
// --- end device copies -------------------------------------------------------

// ---------------------------------------------------------------------------
// Host buffers for batches made in the trainer's process (a padded batch of
// images of their own sizes). A fresh buffer of tens of MB comes from mmap
// and faults in each page at its first write: three times the cost of
// copying the batch into it. Freed buffers are kept (a few, up to
// kMaxCachedBytes) and handed out again to a request they fit within 2x.

class BufferCache {
 public:
  static constexpr size_t kMaxCached = 4;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  static BufferCache& Get() {
    static BufferCache* cache = new BufferCache();  // leaked: capsules may outlive exit
    return *cache;
  }
  // A buffer of at least `bytes` (64-byte aligned); its capacity in *got.
  void* Take(size_t bytes, size_t* got) {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= 2 * bytes) {
        void* p = it->second;
        *got = it->first;
        cached_bytes_ -= it->first;
        free_.erase(it);
        return p;
      }
    }
    *got = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    return std::aligned_alloc(64, *got);
  }
  void Give(void* p, size_t capacity) {
    std::lock_guard<std::mutex> l(mu_);
    if (free_.size() >= kMaxCached || cached_bytes_ + capacity > kMaxCachedBytes) {
      // Drop the smallest kept one if this is larger, else this one.
      if (free_.empty() || free_.begin()->first >= capacity) {
        std::free(p);
        return;
      }
      cached_bytes_ -= free_.begin()->first;
      std::free(free_.begin()->second);
      free_.erase(free_.begin());
      if (cached_bytes_ + capacity > kMaxCachedBytes) {
        std::free(p);
        return;
      }
    }
    free_.emplace(capacity, p);
    cached_bytes_ += capacity;
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;  // capacity -> buffer
  size_t cached_bytes_ = 0;
};

struct CachedBuffer {
  void* data;
  size_t capacity;
};

py::array HostBufferPy(size_t bytes) {
  size_t capacity = 0;
  void* p = BufferCache::Get().Take(bytes, &capacity);
  if (p == nullptr) throw std::bad_alloc();
  auto* owner = new CachedBuffer{p, capacity};
  py::capsule capsule(owner, [](void* o) {
    auto* b = static_cast<CachedBuffer*>(o);
    BufferCache::Get().Give(b->data, b->capacity);
    delete b;
  });
  return py::array(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(bytes)}, {1},
                   static_cast<uint8_t*>(p), capsule);
}

// ---------------------------------------------------------------------------
// Client

class PyClient {
 public:
  PyClient(const std::string& address, int64_t rpc_timeout_ms) : address_(address) {
    ClientOptions co;
    if (rpc_timeout_ms > 0) co.rpc_timeout_ms = rpc_timeout_ms;
    absl::StatusOr<std::unique_ptr<Client>> c;
    {
      py::gil_scoped_release nogil;
      c = Client::Connect(address, co);
    }
    if (!c.ok()) RaiseStatus(c.status(), Where::kConnect);
    client_ = std::move(*c);
  }

  ~PyClient() {
    if (PyGILState_Check() && !_Py_IsFinalizing()) {
      py::gil_scoped_release nogil;
      client_.reset();
    }
  }

  std::unique_ptr<PySession> Attach(const py::object& dataset, const py::kwargs& kw) {
    AttachOptions o = ParseAttach(FsName(dataset, "dataset"), kw);
    absl::StatusOr<std::unique_ptr<Session>> s;
    {
      py::gil_scoped_release nogil;
      s = client_->Attach(o);
    }
    if (!s.ok()) RaiseStatus(s.status(), Where::kAttach);
    return std::make_unique<PySession>(std::move(*s));
  }

  std::string StatusJson(bool include_failures) {
    absl::StatusOr<std::string> r;
    {
      py::gil_scoped_release nogil;
      r = client_->StatusJson(include_failures);
    }
    if (!r.ok()) RaiseStatus(r.status(), Where::kStatus);
    return *r;
  }

  void Health(const std::string& service) {
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = client_->Health(service);
    }
    if (!st.ok()) RaiseStatus(st, Where::kHealth);
  }

  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::unique_ptr<Client> client_;
};

// `code`: the class's default `.code`, which an error raised from Python
// keeps; one raised here for a status gets that status's name instead.
PyObject* NewException(py::module_& m, const char* name, const char* code, const char* doc,
                       py::handle bases) {
  std::string full = std::string("stoker.") + name;
  PyObject* e = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (e == nullptr) throw py::error_already_set();
  py::setattr(py::handle(e), "code", py::str(code));
  m.attr(name) = py::handle(e);  // the module takes a reference; ours is leaked on purpose
  return e;
}

}  // namespace
}  // namespace stoker

PYBIND11_MODULE(_native, m) {
  using namespace stoker;
  using namespace stoker::native;
  m.doc() = "Native binding of the stoker C++ client. Use the `stoker` package instead.";

  py::handle runtime_error(PyExc_RuntimeError);
  g_exc.stoker_error = NewException(m, "StokerError", "UNKNOWN",
                                    "Base of every stoker error. `.code` is the status code name "
                                    "(e.g. 'UNAVAILABLE').",
                                    runtime_error);
  py::handle base(g_exc.stoker_error);
  g_exc.daemon_unavailable =
      NewException(m, "DaemonUnavailableError", "UNAVAILABLE",
                   "stokerd cannot be reached, went away, is shutting down or ended the session.",
                   base);
  g_exc.sample_error = NewException(
      m, "SampleError", "ABORTED",
      "A sample of the batch failed under failure_policy='error'; the message names the file. "
      "The session goes on with the next batch.",
      base);
  g_exc.ring_exhausted = NewException(
      m, "RingExhaustedError", "FAILED_PRECONDITION",
      "Every ring slot is held by batches still referenced (arrays/tensors not yet collected); "
      "drop some, or attach with more ring_slots.",
      base);
  g_exc.invalid_request = NewException(
      m, "InvalidRequestError", "INVALID_ARGUMENT",
      "The daemon refused the request (bad options, a missing or empty dataset, a path outside "
      "the data root).",
      py::make_tuple(base, py::handle(PyExc_ValueError)));
  g_exc.resource_exhausted = NewException(
      m, "ResourceExhaustedError", "RESOURCE_EXHAUSTED",
      "The daemon is out of sessions or shared memory for this request.", base);
  g_exc.timeout = NewException(m, "StokerTimeoutError", "DEADLINE_EXCEEDED",
                               "No batch within timeout_ms (also a builtin TimeoutError).",
                               py::make_tuple(base, py::handle(PyExc_TimeoutError)));
  g_exc.end_of_data = NewException(m, "EndOfData", "OUT_OF_RANGE",
                                   "Every batch of every epoch of the session was delivered.",
                                   base);
  g_exc.cuda_unavailable = NewException(
      m, "CudaUnavailableError", "FAILED_PRECONDITION",
      "A device copy needs CUDA: stoker was built without it, or there is no driver or no GPU "
      "(the message says which). Loader(cpu_fallback=True) yields CPU tensors instead.",
      base);
  g_exc.data_loss = NewException(m, "DataLossError", "DATA_LOSS",
                                 "The ring's contents are inconsistent (a bug or a corrupted ring).",
                                 base);

  py::class_<PySession>(m, "Session",
                        "An attached session. Obtain from Client.attach(); not thread-safe for "
                        "concurrent next() calls from several threads (they serialize).")
      .def_property_readonly("info", &PySession::Info,
                             "What the daemon said at attach, after defaults (a new dict).")
      .def("next", &PySession::Next, py::arg("timeout_ms") = -1,
           "Waits for the next batch (GIL released). Returns (fields, indices, "
           "planned_indices, statuses, epoch, batch_in_epoch, sequence): fields maps each "
           "field's name (info['fields']: image, label, then mask or boxes, box_labels, "
           "box_flags) to (values, shapes). values is one zero-copy ndarray over the ring slot, "
           "[n, *max_shape], when the field's rooms hold its bound (a fixed shape, or boxes "
           "padded to the most a sample has: sample i's first shapes[i][0] rows), else a list "
           "of each sample's ndarray of its own shape (any-size images and masks); shapes is "
           "int32 [n, rank]. "
           "The slot returns to the daemon when the last of them is collected. Raises EndOfData "
           "after the last "
           "batch, SampleError, RingExhaustedError, StokerTimeoutError, "
           "DaemonUnavailableError.")
      .def_property_readonly("delivered", &PySession::Delivered, "Batches handed out so far.")
      .def_property_readonly("detached", &PySession::detached)
      .def_property_readonly("held", &PySession::Held,
                             "Batches handed out whose arrays are still alive.")
      .def_property_readonly("device_status", &PySession::DeviceStatus,
                             "Device copies: {'built_with_cuda', 'mode' ('none', 'registered', "
                             "'staging'), 'detail', 'copies', 'bytes', 'registered_bytes', "
                             "'staging_bytes', 'in_flight', 'deferred_slots', "
                             "'released_after_copy'}.")
      .def("list_samples", &PySession::ListSamples, py::arg("offset") = 0,
           py::arg("limit") = 0,
           "(paths, labels) of dataset entries [offset, offset + limit), in index order "
           "(GIL released): paths relative to the dataset's folder, as torchvision's "
           "ImageFolder(root).samples has them relative to root. limit 0 means 4096, at most "
           "65536; a page may be shorter (at the end, or past 2 MiB of paths; never empty "
           "before the end): go on from offset + len(paths) up to info['dataset_size']. "
           "Raises InvalidRequestError for a limit over 65536 or an ended session.")
      .def("detach", &PySession::Detach,
           "Ends the session on the daemon (GIL released). Arrays already returned stay "
           "readable. Idempotent.");

  py::class_<PyClient>(m, "Client", "A connection to one stokerd (connects lazily).")
      .def(py::init<const std::string&, int64_t>(), py::arg("address"),
           py::arg("rpc_timeout_ms") = 0)
      .def_property_readonly("address", &PyClient::address)
      .def("attach", &PyClient::Attach, py::arg("dataset"),
           "attach(dataset, **options) -> Session. Options: pipeline_json (a JSON object of "
           "pipeline keywords, stoker/pipeline_spec.h: pipeline, ops, size, dtype, layout, mean, "
           "std, exact_decode, ...; the daemon fills in the rest), format, allow_empty, "
           "skip_unsupported_formats, batch_size, seed, shuffle, epochs (0: without end), rank, "
           "world_size, drop_last, ring_slots, failure_policy, start_epoch, start_batch, "
           "register_ring_with_cuda, client_name. None means the default. A bad pipeline or "
           "option raises InvalidRequestError.")
      .def("status_json", &PyClient::StatusJson, py::arg("include_failures") = false)
      .def("health", &PyClient::Health, py::arg("service") = "stoker.v1.Stoker",
           "Returns None when the daemon is SERVING, raises DaemonUnavailableError otherwise.");

  // --- Device copies ---
  m.def("copy_to_device", &CopyToDevicePy, py::arg("images"), py::arg("stream"), py::arg("dst"),
        py::arg("dst_bytes"), py::arg("dtype") = "asis", py::arg("layout") = "nchw",
        py::arg("mean") = py::none(), py::arg("std") = py::none(), py::arg("device") = -1,
        py::arg("scratch") = 0, py::arg("scratch_bytes") = 0, py::arg("sample") = -1,
        "copy_to_device(images, stream, dst, dst_bytes, dtype='asis', layout='nchw', mean=None, "
        "std=None, device=-1, scratch=0, scratch_bytes=0, sample=-1): enqueues the copy of the "
        "batch that owns `images` (the ndarray Session.next returned, or its list), or of its "
        "sample `sample` alone (>= 0: an any-size batch goes one sample a copy), onto the CUDA stream `stream` (an int "
        "cudaStream_t, 0: the legacy default stream) into device memory at `dst` (an int "
        "pointer), normalizing on the GPU for dtype float32/float16/bfloat16 (uint8 NHWC "
        "sessions; layout 'nchw' or 'nhwc'). `scratch`: device memory of at least images.nbytes "
        "bytes, stream-ordered on `stream` (0: stoker allocates). Returns at once (GIL "
        "released); the batch's slot goes back to the daemon only after the copy completed. "
        "Raises CudaUnavailableError (built without CUDA, no driver, no GPU), "
        "InvalidRequestError, ResourceExhaustedError, StokerError.");
  m.def("effective_pipeline", &EffectivePipelinePy, py::arg("pipeline_json"),
        "effective_pipeline(pipeline_json) -> str: the pipeline that the JSON "
        "object of pipeline keywords asks for, after defaults, as the daemon would run and "
        "report it (the PipelineSpec's JSON: preset, ops, size, output, ...). Needs no daemon; "
        "raises InvalidRequestError naming a bad keyword or op.");
  m.def("op_table", &OpTablePy,
        "the ops stoker runs, one dict each (name, kind, moves: pixels, geometry or "
        "output_tensor; source: torchvision.transforms or detection_reference; needs_boxes; holds_ops)");
  m.def("attach_defaults", &AttachDefaultsPy,
        "the Attach defaults (stoker.proto's AttachDefaults): batch_size, ring_depth, "
        "ring_max_depth");
  m.def("daemon_flags", &DaemonFlagsPy,
        "stokerd's flags, one dict per DaemonConfig field (field, flag, env, type, default, "
        "help, required, hidden, zero_word)");
  m.def("cuda_status", &CudaStatusPy,
        "{'built_with_cuda': bool, 'device_count': int, 'error': str ('' when devices were "
        "found)}. Never raises.");
  m.def("host_buffer", &HostBufferPy, py::arg("bytes"),
        "host_buffer(bytes) -> uint8 ndarray: uninitialized host memory for a batch made in "
        "this process (a padded batch), from a small cache of freed ones: pages already "
        "faulted in. Its memory goes back to the cache when the array (and every view of it) "
        "is gone.");
  m.def("normalize_reference", &NormalizeReferencePy, py::arg("images"), py::arg("dtype"),
        py::arg("layout") = "nchw", py::arg("mean") = py::none(), py::arg("std") = py::none(),
        "The CPU reference of the device normalize: [n,h,w,3] uint8 -> (x/255-mean)/std as "
        "float32, float16 or bfloat16 (returned as uint16 bits), NCHW or NHWC.");
}
