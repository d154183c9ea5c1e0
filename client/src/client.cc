#include "stoker/client.h"

#include "session_core.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/posix.h"
#include "cuda_transfer.h"  // device copies (stoker/cuda.h)
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "pipeline/pipeline_spec.h"
#include "pipeline/sample_fields.h"
#include "stoker/ring_futex.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.grpc.pb.h"

namespace stoker {

using internal::Deadline;
using internal::FromGrpc;
using internal::ToProto;

// ---------------------------------------------------------------------------
// Batch

Batch::Batch() = default;
Batch::~Batch() { Release(); }
Batch::Batch(Batch&& o) noexcept { *this = std::move(o); }
Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    Release();
    core_ = std::move(o.core_);
    slot_ = o.slot_;
    sequence_ = o.sequence_;
    epoch_ = o.epoch_;
    batch_in_epoch_ = o.batch_in_epoch_;
    slot_data_ = std::exchange(o.slot_data_, nullptr);
    labels_ = std::move(o.labels_);
    indices_ = std::move(o.indices_);
    planned_ = std::move(o.planned_);
    statuses_ = std::move(o.statuses_);
    fields_ = std::move(o.fields_);
    roles_ = o.roles_;
    nchw_ = o.nchw_;
  }
  return *this;
}

uint32_t DTypeBytes(DType d) { return ring::DTypeBytes(static_cast<uint32_t>(d)); }

const BatchField* Batch::field(std::string_view name) const {
  for (const BatchField& f : fields_) {
    if (f.name() == name) return &f;
  }
  return nullptr;
}

void* Batch::data() const { return slot_data_; }

uint64_t Batch::data_bytes() const {
  const BatchField& f = fields_[roles_.image];
  return size() == 0 ? 0 : f.stride() * (size() - 1) + f.bytes(size() - 1);
}

void* Batch::sample_data(uint32_t i) const { return fields_[roles_.image].data(i); }
uint32_t Batch::height(uint32_t i) const {
  if (roles_.clip >= 0) return fields_[roles_.clip].shape(i)[2];
  return fields_[roles_.image].shape(i)[nchw_ ? 1 : 0];
}
uint32_t Batch::width(uint32_t i) const {
  if (roles_.clip >= 0) return fields_[roles_.clip].shape(i)[3];
  return fields_[roles_.image].shape(i)[nchw_ ? 2 : 1];
}

const float* Batch::boxes(uint32_t i) const {
  return roles_.boxes < 0 ? nullptr : static_cast<const float*>(fields_[roles_.boxes].data(i));
}

const int64_t* Batch::box_labels(uint32_t i) const {
  return roles_.boxes < 0 ? nullptr : static_cast<const int64_t*>(fields_[roles_.box_labels].data(i));
}

const uint8_t* Batch::box_flags(uint32_t i) const {
  return roles_.boxes < 0 ? nullptr : static_cast<const uint8_t*>(fields_[roles_.box_flags].data(i));
}

void* Batch::mask_data(uint32_t i) const {
  return roles_.mask < 0 ? nullptr : fields_[roles_.mask].data(i);
}

void Batch::Release() {
  if (core_ == nullptr) return;
  core_->Release(slot_);
  core_.reset();
  slot_data_ = nullptr;
}

// --- Device copy (stoker/cuda.h) -------------------------------------------
absl::Status Batch::CopyToDevice(CUstream_st* stream, void* dst, uint64_t dst_bytes,
                                 const DeviceCopyOptions& options) {
  if (core_ == nullptr) return absl::FailedPreconditionError("the batch was released");
  internal::DeviceTransfer::Source s;
  s.slot = slot_;
  s.data = slot_data_;
  s.bytes = data_bytes();
  s.samples = size();
  s.uint8_nhwc = core_->dtype_ == ring::kUint8 && core_->nhwc_;
  if (s.samples > 0) {
    s.height = height(0);
    s.width = width(0);
    const uint64_t sample = uint64_t{s.height} * s.width * 3;
    s.same_shape = sample != 0 && fields_[roles_.image].stride() == sample;
    for (uint32_t i = 0; i < s.samples && s.same_shape; ++i) {
      s.same_shape = height(i) == s.height && width(i) == s.width && sample_bytes(i) == sample;
    }
  }
  return core_->transfer_->Copy(s, stream, dst, dst_bytes, options);
}

absl::Status Batch::CopySampleToDevice(uint32_t i, CUstream_st* stream, void* dst,
                                       uint64_t dst_bytes, const DeviceCopyOptions& options) {
  if (core_ == nullptr) return absl::FailedPreconditionError("the batch was released");
  if (i >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", i, " of a batch of ", size()));
  }
  if (sample_bytes(i) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", i, " is empty (0 x 0)"));
  }
  internal::DeviceTransfer::Source s;
  s.slot = slot_;
  s.data = static_cast<uint8_t*>(sample_data(i));
  s.bytes = sample_bytes(i);
  s.samples = 1;
  s.uint8_nhwc = core_->dtype_ == ring::kUint8 && core_->nhwc_;
  s.height = height(i);
  s.width = width(i);
  s.same_shape = uint64_t{s.height} * s.width * 3 == s.bytes;
  return core_->transfer_->Copy(s, stream, dst, dst_bytes, options);
}
// --- end device copy ----------------------------------------------------------

// ---------------------------------------------------------------------------
// Session

Session::~Session() {
  if (core_ == nullptr || core_->Forked()) return;
  (void)Detach();
  core_->StopKeepAlive();
}

uint64_t Session::delivered() const {
  MutexLock l(&core_->next_mu_);
  return core_->next_seq_;
}

uint32_t Session::SlotOf(uint64_t seq) const {
  const internal::SessionCore& c = *core_;
  return ring::SlotOf(c.header()->depth.load(std::memory_order_acquire), seq, c.slots_);
}

DeviceTransferStatus Session::DeviceStatus() const {  // device copy
  return core_->transfer_ != nullptr ? core_->transfer_->Status() : DeviceTransferStatus{};
}

absl::Status Session::Detach() {
  if (core_->detached_.exchange(true)) return absl::OkStatus();
  if (core_->Forked()) return absl::OkStatus();  // the parent's session goes on
  core_->stopping_.store(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(internal::Deadline(5000));
  v1::DetachRequest req;
  req.set_session_id(info_.session_id);
  v1::DetachResponse resp;
  grpc::Status st = core_->rpc_->stub->Detach(&ctx, req, &resp);
  core_->StopKeepAlive();
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) return absl::OkStatus();  // already gone
  return internal::FromGrpc(st, "detach");
}

absl::StatusOr<SampleList> Session::ListSamples(uint64_t offset, uint32_t limit) const {
  if (core_->Forked()) {
    return absl::FailedPreconditionError(
        "this session was attached by another process (this one is a fork of it)");
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(internal::Deadline(core_->rpc_timeout_ms_));
  v1::ListSamplesRequest req;
  req.set_session_id(info_.session_id);
  req.set_offset(offset);
  req.set_limit(limit);
  v1::ListSamplesResponse resp;
  grpc::Status st = core_->rpc_->stub->ListSamples(&ctx, req, &resp);
  if (!st.ok()) return internal::FromGrpc(st, "list samples");
  if (resp.paths_size() != resp.labels_size()) {
    return absl::DataLossError("list samples: the daemon sent unequal paths and labels");
  }
  SampleList out;
  out.paths.assign(std::make_move_iterator(resp.mutable_paths()->begin()),
                   std::make_move_iterator(resp.mutable_paths()->end()));
  out.labels.assign(resp.labels().begin(), resp.labels().end());
  out.dataset_size = resp.dataset_size();
  return out;
}

absl::StatusOr<Batch> Session::Next(int64_t timeout_ms) {
  internal::SessionCore& c = *core_;
  // Before the lock: a fork taken while another thread waited in Next has
  // that lock held forever in the child.
  if (c.Forked()) {
    return absl::FailedPreconditionError(
        "this session was attached by another process (this one is a fork of it); attach a "
        "session of its own");
  }
  MutexLock l(&c.next_mu_);
  const uint64_t seq = c.next_seq_;
  if (c.total_batches_ != 0 && seq >= c.total_batches_) {
    return absl::OutOfRangeError("every batch of every epoch was delivered");
  }
  if (c.detached_.load()) return absl::FailedPreconditionError("the session was detached");
  ring::RingHeader* h = c.header();
  // Read once: a depth change never moves the batch a reader may be
  // waiting for (ring_layout.h, "Depth").
  const uint32_t slot = ring::SlotOf(h->depth.load(std::memory_order_acquire), seq, c.slots_);
  if (slot >= c.slots_) {
    return absl::DataLossError("ring corrupt: its depth word names more slots than it has");
  }
  ring::SlotDescriptor* d = c.descriptor(slot);
  const int64_t start_ns = MonotonicNs();
  const int64_t start = start_ns / 1000000;
  const int64_t deadline = timeout_ms < 0 ? INT64_MAX : start + timeout_ms;
  if (c.heartbeat_seen_ms_ == 0) c.heartbeat_seen_ms_ = start;
  for (;;) {
    // Device copy: slots whose copies completed go back to the daemon first.
    const uint32_t deferred = c.ReapDeviceCopies();
    uint32_t st = d->state.load(std::memory_order_acquire);
    if (st == ring::kReady) {
      if (d->sequence != seq) {
        return absl::DataLossError(absl::StrCat("ring out of order: slot ", slot, " holds batch ",
                                                d->sequence, ", expected ", seq));
      }
      if (d->state.compare_exchange_strong(st, ring::kLeased, std::memory_order_acq_rel)) break;
      continue;
    }
    std::string gone = c.gone();
    if (!gone.empty()) return absl::UnavailableError(gone);
    uint32_t ds = h->daemon_state.load(std::memory_order_acquire);
    if (ds == ring::kDraining) return absl::UnavailableError("stokerd is shutting down");
    if (ds != ring::kRunning) return absl::UnavailableError("stokerd ended the session");
    // If we still hold the batch in batch n's slot, waiting could never end.
    // (A slot released while a device copy still reads it comes back by
    // itself: wait for it.)
    if ((st == ring::kLeased && !c.DeviceDeferred(slot) &&
         d->state.load(std::memory_order_acquire) == ring::kLeased) ||
        int64_t{c.leased_.load()} - deferred >= int64_t{c.slots_}) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ring slot of batch ", seq, " is held by an unreleased batch (", c.leased_.load(),
          " of ", c.slots_, " slots held); release it (or drop its tensors) before asking for "
          "the next, or attach with more ring_slots"));
    }
    // The heartbeat is tracked across calls, so short timeouts in a loop
    // still notice a dead daemon.
    const int64_t now = MonotonicMs();
    uint64_t hb = h->daemon_heartbeat.load(std::memory_order_acquire);
    if (hb != c.heartbeat_) {
      c.heartbeat_ = hb;
      c.heartbeat_seen_ms_ = now;
    } else if (now - c.heartbeat_seen_ms_ > c.heartbeat_timeout_ms_) {
      return absl::UnavailableError(absl::StrCat(
          "stokerd stopped responding (no heartbeat for ", now - c.heartbeat_seen_ms_, " ms)"));
    }
    if (now >= deadline) {
      // A caller that waits in slices (Python, to take Ctrl-C) still
      // reports the whole wait for this batch.
      if (c.wait_started_ns_ == 0) c.wait_started_ns_ = start_ns;
      return absl::DeadlineExceededError(
          absl::StrCat("no batch within ", timeout_ms, " ms (batch ", seq, ")"));
    }
    // Device copy: nothing wakes us when a copy completes, so poll then.
    ring::FutexWait(&d->state, st, std::min<int64_t>(deferred > 0 ? 1 : 100, deadline - now));
  }

  // The data stall, for the daemon's status.
  const int64_t wait_start = c.wait_started_ns_ != 0 ? c.wait_started_ns_ : start_ns;
  c.wait_started_ns_ = 0;
  const uint64_t waited = static_cast<uint64_t>(MonotonicNs() - wait_start);
  h->client_wait_ns.fetch_add(waited, std::memory_order_relaxed);
  h->client_wait_hist[ring::WaitBucket(waited)].fetch_add(1, std::memory_order_relaxed);

  // The slot is ours. Copy what we need out of shared memory, and check it
  // against the geometry learned at attach before exposing a byte.
  c.leased_.fetch_add(1);
  Batch b;
  b.core_ = core_;
  b.slot_ = slot;
  b.sequence_ = seq;
  b.epoch_ = d->epoch;
  b.batch_in_epoch_ = d->batch_in_epoch;
  b.slot_data_ = c.slot_data(slot);
  c.next_seq_ = seq + 1;
  const uint32_t count = d->sample_count;
  if (count == 0 || count > c.batch_size_) {
    return absl::DataLossError(absl::StrCat("ring: batch of ", count, " samples"));
  }
  if (d->batch_status != ring::kBatchOk) {
    char msg[ring::kErrorBytes];
    std::memcpy(msg, d->error, sizeof(msg));
    msg[sizeof(msg) - 1] = '\0';
    return absl::AbortedError(msg);  // ~Batch releases the slot
  }
  const auto field_count = static_cast<uint32_t>(c.fields_.size());
  b.labels_.resize(count);
  b.indices_.resize(count);
  b.planned_.resize(count);
  b.statuses_.resize(count);
  b.fields_.resize(field_count);
  for (uint32_t k = 0; k < field_count; ++k) {
    BatchField& f = b.fields_[k];
    f.info_ = &c.field_infos_[k];
    f.base_ = b.slot_data_ + c.fields_[k].offset;
    f.stride_ = c.fields_[k].stride;
    f.shapes_.assign(size_t{count} * BatchField::kMaxRank, 0);
    f.bytes_.assign(count, 0);
  }
  const internal::FieldRoles& roles = c.roles_;
  b.roles_ = roles;
  b.nchw_ = !c.nhwc_;
  static_assert(BatchField::kMaxRank == ring::kMaxRank);
  ring::SampleRecord r;
  ring::FieldRecord fr[ring::kMaxFields];
  for (uint32_t i = 0; i < count; ++i) {
    // Copied out of shared memory first: what is checked is what is used.
    const ring::SampleRecord* rec = ring::Record(d, c.geometry_, i);
    std::memcpy(&r, rec, sizeof(r));
    std::memcpy(fr, ring::FieldRecords(const_cast<ring::SampleRecord*>(rec)),
                sizeof(ring::FieldRecord) * field_count);
    if (const char* why = ring::ValidateRecord(r)) {
      return absl::DataLossError(absl::StrCat("ring: sample ", i, ": ", why));
    }
    for (uint32_t k = 0; k < field_count; ++k) {
      uint64_t bytes = 0;
      if (const char* why = ring::ValidateFieldRecord(fr[k], c.fields_[k], &bytes)) {
        return absl::DataLossError(absl::StrCat("ring: sample ", i, "'s ",
                                                std::string(ring::FieldName(c.fields_[k])), ": ",
                                                why));
      }
      std::copy(fr[k].shape, fr[k].shape + ring::kMaxRank, b.fields_[k].shapes_.data() +
                                                               size_t{i} * ring::kMaxRank);
      b.fields_[k].bytes_[i] = bytes;
    }
    // The views the Batch's own accessors make assume these shapes (a
    // clip's is fixed: its field's, checked above).
    const uint32_t* img = fr[roles.image].shape;
    const uint32_t h = img[c.nhwc_ ? 0 : 1], w = img[c.nhwc_ ? 1 : 2];
    if (roles.clip < 0 && roles.volume < 0 && img[c.nhwc_ ? 2 : 0] != 3) {
      return absl::DataLossError(absl::StrCat("ring: sample ", i, " has ",
                                              img[c.nhwc_ ? 2 : 0], " channels, not 3"));
    }
    if (roles.mask >= 0 && (fr[roles.mask].shape[0] != h || fr[roles.mask].shape[1] != w)) {
      return absl::DataLossError(
          absl::StrCat("ring: sample ", i, "'s mask disagrees with its image's shape"));
    }
    if (roles.boxes >= 0 && (fr[roles.boxes].shape[1] != 4 ||
                             fr[roles.box_labels].shape[0] != fr[roles.boxes].shape[0] ||
                             fr[roles.box_flags].shape[0] != fr[roles.boxes].shape[0])) {
      return absl::DataLossError(absl::StrCat("ring: sample ", i, "'s boxes disagree"));
    }
    std::memcpy(&b.labels_[i], b.fields_[roles.label].data(i), sizeof(int64_t));
    b.indices_[i] = static_cast<int64_t>(r.dataset_index);
    b.planned_[i] = static_cast<int64_t>(r.planned_index);
    b.statuses_[i] = r.status;
  }
  return b;
}

// ---------------------------------------------------------------------------
// Client

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address,
                                                        const ClientOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("empty daemon address");
  std::string target = address;
  if (absl::StartsWith(address, "/") || absl::StartsWith(address, "./")) {
    target = "unix:" + address;
  } else if (!absl::StartsWith(address, "unix:") && address.find(':') == std::string::npos) {
    target = "unix:" + address;  // a relative socket path
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // A trainer often starts before its sidecar: reconnect quickly once the
  // daemon is up instead of backing off for tens of seconds. gRPC reads
  // MIN_RECONNECT_BACKOFF as the time one connection attempt may take to
  // finish its handshake: at 100 ms a daemon on a loaded machine (its CPUs
  // busy decoding) failed attaches with "connection attempt timed out before
  // receiving SETTINGS frame"; it keeps gRPC's 20 s, and every RPC's own
  // deadline still bounds a call to a hung daemon.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto c = std::unique_ptr<Client>(new Client());
  c->rpc_ = std::make_shared<internal::RpcChannel>(std::move(channel));
  c->options_ = options;
  if (absl::StartsWith(target, "unix://")) {
    c->socket_path_ = target.substr(7);
  } else if (absl::StartsWith(target, "unix:")) {
    c->socket_path_ = target.substr(5);
  }
  return c;
}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Session>> Client::Attach(const AttachOptions& o) {
  v1::AttachRequest req;
  req.set_dataset(o.dataset);
  req.set_format(internal::ToProto(o.format));
  req.set_annotations(o.annotations);
  req.set_masks(o.masks);
  req.set_image_suffix(o.image_suffix);
  req.set_mask_suffix(o.mask_suffix);
  req.set_record_images(o.record_images);
  req.set_record_labels(o.record_labels);
  req.set_record_labels_key(o.record_labels_key);
  for (uint32_t d : o.record_shape) req.add_record_shape(d);
  // The request form goes to the daemon; Effective only checks it here, so
  // that a bad pipeline fails before any RPC, as the daemon would fail it.
  auto spec = pipeline::SpecFromKeywordsJson(o.pipeline);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", spec.status().message()));
  }
  if (auto e = pipeline::Effective(*spec); !e.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", e.status().message()));
  }
  *req.mutable_pipeline() = *std::move(spec);
  const uint32_t batch_size =
      o.batch_size != 0 ? o.batch_size : static_cast<uint32_t>(v1::ATTACH_DEFAULT_BATCH_SIZE);
  req.set_batch_size(batch_size);
  req.set_seed(o.seed);
  req.set_shuffle(o.shuffle);
  req.set_epochs(o.epochs);
  req.set_rank(o.rank);
  req.set_world_size(o.world_size);
  req.set_drop_last(o.drop_last);
  req.set_ring_slots(o.ring_slots);
  req.set_failure_policy(static_cast<v1::FailurePolicy>(o.failure_policy));
  req.set_start_epoch(o.start_epoch);
  req.set_start_batch(o.start_batch);
  req.set_client_name(o.client_name);
  req.set_client_pid(static_cast<uint32_t>(::getpid()));
  req.set_allow_empty(o.allow_empty);
  req.set_skip_unsupported_formats(o.skip_unsupported_formats);
  for (const std::string& e : o.extensions) req.add_extensions(e);
  if (o.clips.frames_per_clip != 0) {
    v1::ClipSpec* c = req.mutable_clips();
    c->set_frames_per_clip(o.clips.frames_per_clip);
    c->set_step_between_clips(o.clips.step_between_clips);
    c->set_frame_rate(o.clips.frame_rate);
    if (o.clips.sampler == "random") {
      c->set_sampler(v1::CLIP_SAMPLER_RANDOM);
    } else if (o.clips.sampler == "uniform") {
      c->set_sampler(v1::CLIP_SAMPLER_UNIFORM);
    } else if (!o.clips.sampler.empty() && o.clips.sampler != "all") {
      return absl::InvalidArgumentError(absl::StrCat(
          "clips.sampler '", o.clips.sampler, "': \"all\", \"random\" or \"uniform\""));
    }
    c->set_clips_per_video(o.clips.clips_per_video);
    c->set_layout(o.clips.layout);
  }
  if (!o.volumes_json.empty()) {
    const auto parsed = google::protobuf::util::JsonStringToMessage(o.volumes_json, req.mutable_volumes());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volumes: not a VolumeSpec: ", std::string(parsed.message().data(), parsed.message().size())));
    }
  }

  grpc::ClientContext ctx;
  ctx.set_deadline(
      internal::Deadline(std::max(options_.attach_timeout_ms, options_.rpc_timeout_ms)));
  v1::AttachResponse resp;
  grpc::Status st = rpc_->stub->Attach(&ctx, req, &resp);
  if (!st.ok()) return internal::FromGrpc(st, "attach");

  auto session = std::unique_ptr<Session>(new Session());
  auto core = std::make_shared<internal::SessionCore>();
  // The KeepAlive stream first: mapping (and populating) a large ring can
  // take longer than the daemon's grace for a session without one.
  core->rpc_timeout_ms_ = options_.rpc_timeout_ms;
  core->StartKeepAlive(rpc_, resp.session_id());
  absl::Status ms = core->Map(resp, batch_size, socket_path_);
  if (ms.ok()) core->mapped_.store(true, std::memory_order_release);
  if (!ms.ok()) {
    core->stopping_.store(true);
    core->StopKeepAlive();
    grpc::ClientContext dctx;
    dctx.set_deadline(internal::Deadline(5000));
    v1::DetachRequest dreq;
    dreq.set_session_id(resp.session_id());
    v1::DetachResponse dresp;
    (void)rpc_->stub->Detach(&dctx, dreq, &dresp);
    return ms;
  }
  SessionInfo& i = session->info_;
  i.session_id = resp.session_id();
  i.ring_name = resp.ring().ring_name();
  i.dataset_size = resp.dataset_size();
  i.shard_size = resp.shard_size();
  i.batches_per_epoch = resp.batches_per_epoch();
  i.total_batches = resp.total_batches();
  i.start_epoch = o.start_epoch;
  i.start_batch = o.start_batch;
  i.batch_size = batch_size;
  i.height = resp.height();
  i.width = resp.width();
  i.channels = resp.channels();
  i.dtype = static_cast<DType>(core->dtype_);
  i.layout = core->nhwc_ ? Layout::kNHWC : Layout::kNCHW;
  i.ring_slots = resp.ring().slot_count();
  i.slot_bytes = resp.ring().slot_bytes();
  const internal::FieldRoles& roles = core->roles_;
  const auto& specs = core->fields_;
  const ring::FieldSpec& image = specs[roles.image];
  i.sample_bytes = (image.flags & ring::kFieldFixedShape) != 0 ? image.stride : 0;
  i.mask_dtype = roles.mask >= 0 ? specs[roles.mask].dtype : 0;
  i.box_stride = roles.boxes >= 0 ? specs[roles.boxes].max_shape[0] : 0;
  i.fields = core->field_infos_;
  i.class_names.assign(resp.class_names().begin(), resp.class_names().end());
  i.effective_pipeline_json = pipeline::ToJson(resp.effective_pipeline());
  if (resp.has_effective_volumes()) {
    google::protobuf::util::JsonPrintOptions jo;
    (void)google::protobuf::util::MessageToJsonString(resp.effective_volumes(), &i.effective_volumes_json, jo);
  }
  core->StartDeviceTransfer(o.register_ring_with_cuda);  // device copy
  session->core_ = std::move(core);
  return session;
}

absl::StatusOr<std::string> Client::StatusJson(bool include_failures) {
  grpc::ClientContext ctx;
  ctx.set_deadline(internal::Deadline(options_.rpc_timeout_ms));
  v1::StatusRequest req;
  req.set_include_failures(include_failures);
  req.set_include_dataset_failures(include_failures);
  v1::StatusResponse resp;
  grpc::Status st = rpc_->stub->Status(&ctx, req, &resp);
  if (!st.ok()) return internal::FromGrpc(st, "status");
  std::string json;
  google::protobuf::util::JsonPrintOptions jo;
  jo.preserve_proto_field_names = true;
  jo.always_print_primitive_fields = true;
  auto js = google::protobuf::util::MessageToJsonString(resp, &json, jo);
  if (!js.ok()) return absl::InternalError("status: cannot render JSON");
  return json;
}

absl::Status Client::Health(const std::string& service) {
  grpc::ClientContext ctx;
  ctx.set_deadline(internal::Deadline(std::min<int64_t>(options_.rpc_timeout_ms, 5000)));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = rpc_->health->Check(&ctx, req, &resp);
  if (!st.ok()) return internal::FromGrpc(st, "health");
  if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "health: ", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status())));
  }
  return absl::OkStatus();
}

}  // namespace stoker
