// The C++ client's insides (client.cc): the gRPC channel, and the
// client's side of one session (SessionCore: the mapped ring, the KeepAlive
// stream, the order of batches), shared by Session and its Batches; the
// ring's handover and the conversions the Client uses. Internal to
// stoker_client.

#ifndef STOKER_CLIENT_SRC_SESSION_CORE_H_
#define STOKER_CLIENT_SRC_SESSION_CORE_H_

#include "stoker/client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/posix.h"
#include "cuda_transfer.h"  // device copies (stoker/cuda.h)
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/sample_fields.h"
#include "stoker/ring_futex.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.grpc.pb.h"

namespace stoker::internal {

// The handover (ring_layout.h): the ring's fd for its token, from the ring
// socket beside the daemon's socket.
absl::StatusOr<UniqueFd> ReceiveRing(const std::string& daemon_socket, const std::string& token);
v1::DatasetFormat ToProto(DatasetFormat f);
// A gRPC status as a Status, `what` first; UNAVAILABLE says stokerd cannot
// be reached.
absl::Status FromGrpc(const grpc::Status& s, const std::string& what);
std::chrono::system_clock::time_point Deadline(int64_t ms);

class RpcChannel {
 public:
  explicit RpcChannel(std::shared_ptr<grpc::Channel> ch)
      : channel(std::move(ch)),
        stub(v1::Stoker::NewStub(channel)),
        health(grpc::health::v1::Health::NewStub(channel)) {}
  ~RpcChannel() {
    if (::getpid() != owner_pid) {
      // In a forked child gRPC's threads do not exist, and shutting a channel
      // down waits for them forever. The child's copy is left as it is.
      (void)stub.release();
      (void)health.release();
      new std::shared_ptr<grpc::Channel>(std::move(channel));
    }
  }
  const pid_t owner_pid = ::getpid();
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Stoker::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

// The client's side of one session: the mapped ring, the KeepAlive stream
// and the order of batches. Shared by the Session and its Batches, so the
// mapping outlives every lease.
class SessionCore {
 public:
  ~SessionCore() {
    if (Forked()) {
      // A forked child's copy: the parent's CUDA state, gRPC stream and
      // KeepAlive thread are not this process's to touch. Let them go.
      (void)transfer_.release();
      (void)keepalive_ctx_.release();
      if (keepalive_.joinable()) new std::thread(std::move(keepalive_));
    }
    transfer_.reset();  // device copy: waits for copies still reading the ring
    // ring_ unmaps after this body, once nothing reads it.
  }

  // Whether this is a child forked from the process that attached. Its copy
  // of the session must leave the ring alone: a release from it would free a
  // slot the parent still reads, a Next would take the parent's batches.
  bool Forked() const { return ::getpid() != owner_pid_; }

  absl::Status Map(const v1::AttachResponse& r, uint32_t batch_size,
                   const std::string& daemon_socket) {
    const v1::RingInfo& ri = r.ring();
    slots_ = ri.slot_count();
    batch_size_ = batch_size;
    if (ri.layout_version() != ring::kLayoutVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat("the daemon's ring layout is version ", ri.layout_version(),
                       ", this client reads version ", ring::kLayoutVersion));
    }
    // Every size used below comes from these fields and this geometry,
    // computed here.
    if (ri.fields_size() == 0 || ri.fields_size() > int{ring::kMaxFields}) {
      return absl::DataLossError(absl::StrCat("the daemon's samples have ", ri.fields_size(),
                                              " fields"));
    }
    uint64_t slot_data = 0;
    for (const v1::FieldInfo& info : ri.fields()) {
      absl::StatusOr<ring::FieldSpec> f = pipeline::FieldSpecOf(info);
      if (!f.ok()) return f.status();
      if (f->stride > ring::kMaxRoomBytes || f->offset > (uint64_t{1} << 40)) {
        return absl::DataLossError("the daemon's field layout is inconsistent");
      }
      slot_data = std::max(slot_data, f->offset + f->stride * batch_size);
      fields_.push_back(*f);
    }
    if (!ring::ComputeGeometry(slots_, batch_size, static_cast<uint32_t>(fields_.size()),
                               slot_data, &geometry_) ||
        geometry_.total_bytes != ri.total_bytes() || geometry_.slot_bytes != ri.slot_bytes() ||
        geometry_.data_offset != ri.data_offset()) {
      return absl::DataLossError("the daemon's ring geometry is inconsistent");
    }
    const v1::Output& out = r.effective_pipeline().output();
    dtype_ = pipeline::DTypeFromName(out.dtype());
    nhwc_ = pipeline::LayoutFromName(out.layout()) == ring::kNHWC;
    if (dtype_ == 0 || pipeline::LayoutFromName(out.layout()) == 0) {
      return absl::DataLossError(absl::StrCat("the daemon's output dtype '", out.dtype(),
                                              "' or layout '", out.layout(), "' is unknown"));
    }
    if (absl::Status st = FindRoles(r); !st.ok()) return st;
    for (const ring::FieldSpec& f : fields_) {
      FieldInfo info;
      info.name = std::string(ring::FieldName(f));
      info.dtype = static_cast<DType>(f.dtype);
      info.max_shape.assign(f.max_shape, f.max_shape + f.rank);
      info.room_bytes = f.stride;
      info.fixed_shape = (f.flags & ring::kFieldFixedShape) != 0;
      field_infos_.push_back(std::move(info));
    }
    total_batches_ = r.total_batches();
    // The daemon's --heartbeat-timeout-ms (its one default is in config.proto).
    if (r.heartbeat_timeout_ms() == 0) {
      return absl::DataLossError("the daemon's Attach answer has no heartbeat timeout");
    }
    heartbeat_timeout_ms_ = r.heartbeat_timeout_ms();
    absl::StatusOr<UniqueFd> received = ReceiveRing(daemon_socket, ri.ring_token());
    if (!received.ok()) return received.status();
    const int fd = received->get();
    // Sealed against shrinking (ring_owner.h), or a daemon could cut the
    // ring short under our mapping and kill us with SIGBUS.
    struct stat st;
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return absl::DataLossError("the ring's memory is not sealed against shrinking");
    }
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < geometry_.total_bytes) {
      return absl::DataLossError("the ring's memory is smaller than its layout");
    }
    // The header, read once and checked before anything is mapped.
    ring::RingHeader snapshot;
    if (::pread(fd, &snapshot, sizeof(snapshot), 0) != static_cast<ssize_t>(sizeof(snapshot))) {
      return absl::DataLossError("the ring's header cannot be read");
    }
    if (const char* why =
            ring::ValidateHeader(snapshot, geometry_.total_bytes, geometry_, slots_, batch_size)) {
      return absl::DataLossError(absl::StrCat("ring header: ", why));
    }
    bool same = snapshot.field_count == fields_.size() && (snapshot.layout == ring::kNHWC) == nhwc_;
    for (uint32_t k = 0; same && k < fields_.size(); ++k) {
      same = ring::SameField(snapshot.fields[k], fields_[k]);
    }
    if (!same) return absl::DataLossError("ring header: the sample fields differ from Attach");
    // Fault the pages of the ring's first depth in now (MAP_POPULATE), not on
    // the first read of each slot in the training loop. Slots beyond it are
    // holes in the ring's memory until the ring deepens: faulting them in
    // would allocate them.
    const uint32_t depth =
        std::min(ring::DepthCount(snapshot.depth.load(std::memory_order_relaxed)), slots_);
    const uint64_t populate = geometry_.data_offset + geometry_.slot_bytes * depth;
    if (absl::Status mapped = MapShared(fd, 0, geometry_.total_bytes, &ring_, /*populate=*/true,
                                        populate);
        !mapped.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("mmap ring: ", mapped.message()));
    }
    return absl::OkStatus();
  }

  // Finds the still-image fields (ring_layout.h, "field") the Batch's own
  // accessors view, and checks each against the shape they assume: an
  // answer that breaks one is refused, so no view can size past its room.
  absl::Status FindRoles(const v1::AttachResponse& r) {
    std::vector<int> views;
    for (uint32_t k = 0; k < fields_.size(); ++k) {
      const ring::FieldSpec& f = fields_[k];
      if (const char* why = ring::ValidateField(f, batch_size_, geometry_.slot_bytes)) {
        return absl::DataLossError(absl::StrCat("the daemon's field '", std::string(ring::FieldName(f)),
                                                "': ", why));
      }
      const std::string_view name = ring::FieldName(f);
      for (uint32_t j = 0; j < k; ++j) {
        if (ring::FieldName(fields_[j]) == name) {
          return absl::DataLossError(absl::StrCat("the daemon names field '", std::string(name), "' twice"));
        }
      }
      int* role = name == ring::kImageField       ? &roles_.image
                  : name == ring::kLabelField     ? &roles_.label
                  : name == ring::kMaskField      ? &roles_.mask
                  : name == ring::kBoxesField     ? &roles_.boxes
                  : name == ring::kBoxLabelsField ? &roles_.box_labels
                  : name == ring::kBoxFlagsField  ? &roles_.box_flags
                  : name == ring::kClipField      ? &roles_.clip
                  : name == ring::kVolumeField    ? &roles_.volume
                  : name == ring::kVolumeLabelField ? &roles_.volume_label
                                                  : nullptr;
      if (role != nullptr) *role = static_cast<int>(k);
      if (name.substr(0, sizeof(ring::kViewFieldPrefix) - 1) == ring::kViewFieldPrefix) {
        views.push_back(static_cast<int>(k));
      }
    }
    // A multi-view session has no image field: its first view stands for it.
    if (roles_.image < 0 && !views.empty() &&
        ring::FieldName(fields_[views[0]]) == absl::StrCat(ring::kViewFieldPrefix, 0)) {
      roles_.image = views[0];
    }
    const auto bad = [](std::string_view what) {
      return absl::DataLossError(absl::StrCat("the daemon's ", std::string(what), " field is not as this "
                                              "client reads it"));
    };
    // clip: [T, 3, H, W] or [3, T, H, W] of the output dtype, fixed, the
    // AttachResponse's size; a video session has no image field.
    if (roles_.clip >= 0) {
      const ring::FieldSpec& c = fields_[roles_.clip];
      const bool tchw = c.max_shape[1] == 3;
      if (roles_.image >= 0 || !views.empty() || c.dtype != dtype_ || c.rank != 4 ||
          (c.flags & ring::kFieldFixedShape) == 0 || (!tchw && c.max_shape[0] != 3) ||
          c.max_shape[2] != r.height() || c.max_shape[3] != r.width() || r.channels() != 3) {
        return bad("clip");
      }
      roles_.image = roles_.clip;
    }
    // volume: [S, C, X, Y, Z] of the output dtype, fixed, C the
    // AttachResponse's channels; volume_label [S, 1, X, Y, Z] beside it,
    // uint8 or int64; no image, clip or view field.
    if (roles_.volume >= 0) {
      const ring::FieldSpec& v = fields_[roles_.volume];
      if (roles_.image >= 0 || roles_.clip >= 0 || !views.empty() || v.dtype != dtype_ ||
          v.rank != 5 || (v.flags & ring::kFieldFixedShape) == 0 || v.max_shape[1] != r.channels()) {
        return bad("volume");
      }
      if (roles_.volume_label >= 0) {
        const ring::FieldSpec& l = fields_[roles_.volume_label];
        if ((l.dtype != ring::kUint8 && l.dtype != ring::kInt64) || l.rank != 5 ||
            (l.flags & ring::kFieldFixedShape) == 0 || l.max_shape[0] != v.max_shape[0] ||
            l.max_shape[1] != 1 || !std::equal(l.max_shape + 2, l.max_shape + 5, v.max_shape + 2)) {
          return bad("volume_label");
        }
      }
      roles_.image = roles_.volume;
    } else if (roles_.volume_label >= 0) {
      return bad("volume_label");
    }
    // image: [H, W, 3] or [3, H, W] of the output dtype, fixed exactly when
    // the output has a size (the AttachResponse's).
    if (roles_.image < 0) return bad("image");
    const ring::FieldSpec& img = fields_[roles_.image];
    const uint32_t c = nhwc_ ? 2 : 0, y = nhwc_ ? 0 : 1, x = nhwc_ ? 1 : 2;
    const bool fixed = (img.flags & ring::kFieldFixedShape) != 0;
    if (roles_.clip < 0 && roles_.volume < 0 &&
        (img.dtype != dtype_ || img.rank != 3 || img.max_shape[c] != 3 || r.channels() != 3 ||
         img.max_shape[y] != r.height() || img.max_shape[x] != r.width() ||
         fixed != (r.height() != 0 && r.width() != 0))) {
      return bad("image");
    }
    // Every view as the image is, fixed, of its own size.
    for (int k : views) {
      const ring::FieldSpec& v = fields_[k];
      if (roles_.image != views[0] || v.dtype != dtype_ || v.rank != 3 || v.max_shape[c] != 3 ||
          (v.flags & ring::kFieldFixedShape) == 0) {
        return bad(ring::FieldName(v));
      }
    }
    if (roles_.label < 0) return bad("label");
    const ring::FieldSpec& label = fields_[roles_.label];
    if (label.dtype != ring::kInt64 || label.rank != 0) return bad("label");
    if (roles_.mask >= 0) {
      const ring::FieldSpec& m = fields_[roles_.mask];
      if ((m.dtype != ring::kUint8 && m.dtype != ring::kUint16) || m.rank != 2) return bad("mask");
    }
    const int box_roles = (roles_.boxes >= 0) + (roles_.box_labels >= 0) + (roles_.box_flags >= 0);
    if (box_roles != 0) {
      if (box_roles != 3) return bad("boxes");
      const ring::FieldSpec& b = fields_[roles_.boxes];
      const ring::FieldSpec& bl = fields_[roles_.box_labels];
      const ring::FieldSpec& bf = fields_[roles_.box_flags];
      const uint32_t n = b.max_shape[0];
      if (b.dtype != ring::kFloat32 || b.rank != 2 || b.max_shape[1] != 4 || n == 0 ||
          n > ring::kMaxBoxesPerSample || bl.dtype != ring::kInt64 || bl.rank != 1 ||
          bl.max_shape[0] != n || bf.dtype != ring::kUint8 || bf.rank != 1 ||
          bf.max_shape[0] != n) {
        return bad("boxes");
      }
    }
    return absl::OkStatus();
  }

  void* base() const { return ring_.addr(); }
  ring::RingHeader* header() const { return static_cast<ring::RingHeader*>(base()); }
  ring::SlotDescriptor* descriptor(uint32_t slot) const {
    return ring::Descriptor(base(), geometry_, slot);
  }
  uint8_t* slot_data(uint32_t slot) const {
    return static_cast<uint8_t*>(base()) + geometry_.data_offset + geometry_.slot_bytes * slot;
  }

  void StartKeepAlive(std::shared_ptr<RpcChannel> rpc, const std::string& session_id) {
    rpc_ = std::move(rpc);
    session_id_ = session_id;
    keepalive_ctx_ = std::make_unique<grpc::ClientContext>();
    keepalive_ = std::thread([this] { KeepAliveLoop(); });
  }

  void StopKeepAlive() {
    stopping_.store(true);
    if (keepalive_ctx_ != nullptr) keepalive_ctx_->TryCancel();
    if (keepalive_.joinable()) keepalive_.join();
  }

  void KeepAliveLoop() {
    v1::KeepAliveRequest req;
    req.set_session_id(session_id_);
    auto reader = rpc_->stub->KeepAlive(keepalive_ctx_.get(), req);
    v1::SessionEvent e;
    std::string ended;
    while (reader->Read(&e)) {
      if (e.kind() == v1::SessionEvent::KIND_ENDED) ended = e.message();
      if (e.kind() == v1::SessionEvent::KIND_DRAINING) {
        MutexLock l(&mu_);
        draining_ = e.message();
      }
    }
    grpc::Status st = reader->Finish();
    if (stopping_.load()) return;
    SetGone(!ended.empty()
                ? absl::StrCat("stokerd ended the session: ", ended)
                : absl::StrCat("lost the connection to stokerd: ", st.error_message()));
  }

  void SetGone(const std::string& why) {
    {
      MutexLock l(&mu_);
      if (gone_.empty()) gone_ = why;
    }
    // Wake our own waiter, if any (once the ring is mapped).
    if (!mapped_.load(std::memory_order_acquire)) return;
    for (uint32_t s = 0; s < slots_; ++s) ring::FutexWakeAll(&descriptor(s)->state);
  }

  std::string gone() {
    MutexLock l(&mu_);
    return gone_;
  }

  // --- Device copy (stoker/cuda.h) -----------------------------------------
  // Made at attach; touches no CUDA API until the first CopyToDevice.
  void StartDeviceTransfer(bool register_ring) {
    transfer_ = std::make_unique<DeviceTransfer>(base(), geometry_.total_bytes, slots_,
                                                 geometry_.data_offset, geometry_.slot_bytes,
                                                 register_ring,
                                                 [this](uint32_t slot) { ReleaseNow(slot); });
  }
  // Hands back the slots whose device copies completed; returns how many
  // released slots still wait for theirs.
  uint32_t ReapDeviceCopies() { return transfer_ != nullptr ? transfer_->Reap() : 0; }
  bool DeviceDeferred(uint32_t slot) const {
    return transfer_ != nullptr && transfer_->Deferred(slot);
  }

  // The host's lease ended: free the slot now, or once the device copy
  // reading it has completed.
  void Release(uint32_t slot) {
    if (Forked()) return;  // the parent's lease, inherited: not ours to end
    if (transfer_ != nullptr) {
      if (transfer_->EndLease(slot)) return;  // ReapDeviceCopies frees it
      ReleaseNow(slot);
      (void)transfer_->Reap();
      return;
    }
    ReleaseNow(slot);
  }
  // --- end device copy -------------------------------------------------------

  void ReleaseNow(uint32_t slot) {
    ring::SlotDescriptor* d = descriptor(slot);
    d->state.store(ring::kFree, std::memory_order_release);
    auto* h = header();
    h->batches_consumed.fetch_add(1, std::memory_order_relaxed);
    h->release_count.fetch_add(1, std::memory_order_release);
    ring::FutexWakeAll(&h->release_count);
    leased_.fetch_sub(1);
  }

  // Constant after Map.
  const pid_t owner_pid_ = ::getpid();
  Mapping ring_;  // the ring, mapped whole
  ring::Geometry geometry_;
  uint32_t slots_ = 0;
  uint32_t batch_size_ = 0;
  uint32_t dtype_ = ring::kUint8;
  // The samples' fields as Attach named them (the header must agree), their
  // public description, and the still-image ones' indexes (FindRoles).
  std::vector<ring::FieldSpec> fields_;
  std::vector<FieldInfo> field_infos_;
  internal::FieldRoles roles_;
  bool nhwc_ = true;  // the session's layout (device copy: normalize needs uint8 NHWC)
  uint64_t total_batches_ = 0;
  int64_t heartbeat_timeout_ms_ = 0;  // AttachResponse.heartbeat_timeout_ms
  std::shared_ptr<RpcChannel> rpc_;
  int64_t rpc_timeout_ms_ = 30000;  // ClientOptions::rpc_timeout_ms
  std::string session_id_;

  Mutex next_mu_;  // one Next at a time
  uint64_t next_seq_ STOKER_GUARDED_BY(next_mu_) = 0;
  uint64_t heartbeat_ STOKER_GUARDED_BY(next_mu_) = 0;
  int64_t heartbeat_seen_ms_ STOKER_GUARDED_BY(next_mu_) = 0;
  // Of a wait that spans timed-out calls.
  int64_t wait_started_ns_ STOKER_GUARDED_BY(next_mu_) = 0;
  std::atomic<uint32_t> leased_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> detached_{false};
  std::atomic<bool> mapped_{false};  // ring_, slots_, geometry_ are set
  std::unique_ptr<grpc::ClientContext> keepalive_ctx_;
  std::thread keepalive_;
  Mutex mu_;
  std::string gone_ STOKER_GUARDED_BY(mu_);
  std::string draining_ STOKER_GUARDED_BY(mu_);
  std::unique_ptr<DeviceTransfer> transfer_;  // device copy; set at attach
};

}  // namespace stoker::internal

#endif  // STOKER_CLIENT_SRC_SESSION_CORE_H_
