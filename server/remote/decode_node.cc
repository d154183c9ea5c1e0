#include "server/remote/decode_node.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/remote/wire.h"
#include "spdlog/spdlog.h"

namespace stoker::remote {
namespace {

constexpr uint64_t kArenaRing = 1;
constexpr char kNoStore[] = "this decode node takes no shipped files: use --decode-shared-root";

uint64_t Align(uint64_t n) { return (n + 63) / 64 * 64; }

}  // namespace

DecodeNode::DecodeNode(DecodeNodeEnv env, DecodeNodeOptions o)
    : launcher_(env.launcher),
      clock_(env.clock),
      files_(env.files),
      prepared_(env.prepared),
      options_(std::move(o)),
      arena_bytes_(Arena(options_.arena_bytes).capacity()),
      arena_(options_.arena_bytes) {}

DecodeNode::~DecodeNode() { Stop(); }

absl::Status DecodeNode::Start() {
  arena_fd_ = UniqueFd(::memfd_create("stoker-decode-arena", MFD_CLOEXEC));
  if (!arena_fd_.valid()) return PosixError("memfd_create", errno);
  if (::ftruncate(arena_fd_.get(), static_cast<off_t>(arena_bytes_)) != 0) {
    return PosixError("ftruncate the arena", errno);
  }
  if (absl::Status st = MapShared(arena_fd_.get(), 0, arena_bytes_, &arena_map_); !st.ok()) {
    return st;
  }
  if (absl::Status st = poller_.Init(); !st.ok()) return st;
  {
    absl::MutexLock l(&mu_);
    pool_ = std::make_unique<WorkerPool>(launcher_, clock_, &poller_, options_.task_timeout_ms);
    if (absl::Status st = pool_->Start(options_.workers); !st.ok()) return st;
    for (uint32_t w = 0; w < pool_->size(); ++w) MapArenaLocked(w);
  }
  dispatcher_ = std::thread([this] { DispatchLoop(); });
  return absl::OkStatus();
}

void DecodeNode::Stop() {
  if (stopping_.exchange(true)) return;
  {
    absl::MutexLock l(&mu_);
    freed_.SignalAll();
    for (Stream* s : streams_) s->ready.Signal();
  }
  poller_.Wake();
  if (dispatcher_.joinable()) dispatcher_.join();
  absl::MutexLock l(&mu_);
  if (pool_ != nullptr) pool_->Shutdown(2000);
}

DecodeNodeStats DecodeNode::stats() const {
  absl::MutexLock l(&mu_);
  DecodeNodeStats s = stats_;
  s.worker_restarts = pool_ != nullptr ? pool_->restarts_total() : 0;
  s.arena_used = arena_.used();
  if (files_ != nullptr) s.files = files_->stats();
  if (prepared_ != nullptr) {
    const PreparedCacheBudget::Stats p = prepared_->stats();
    s.prepared_entries = p.entries;
    s.prepared_hits = p.volume_hits + p.image_hits;
  }
  return s;
}

void DecodeNode::MapArenaLocked(uint32_t w) {
  worker::MapRingMsg m;
  m.ring_id = kArenaRing;
  m.data_offset = 0;
  m.data_bytes = arena_.capacity();
  m.populate_bytes = 1;  // faulted in as tasks use it
  pool_->Send(w, &m, sizeof(m), arena_fd_.get());
}

grpc::Status DecodeNode::Info(grpc::ServerContext* ctx, const v1::DecodeNodeInfoRequest*,
                              v1::DecodeNodeInfo* out) {
  if (grpc::Status st = CheckCall(*ctx, options_.token); !st.ok()) return st;
  out->set_workers(options_.workers);
  out->set_version(STOKER_VERSION);
  out->set_fingerprint(ProtocolFingerprint());
  const DecodeNodeStats s = stats();
  out->set_streams_open(static_cast<uint32_t>(s.streams_open));
  out->set_streams_total(s.streams_total);
  out->set_tasks_done(s.tasks_done);
  out->set_tasks_failed(s.tasks_failed);
  out->set_bytes_in(s.bytes_in);
  out->set_bytes_out(s.bytes_out);
  out->set_worker_restarts(s.worker_restarts);
  out->set_arena_used_bytes(s.arena_used);
  out->set_files_held(s.files.files);
  out->set_files_bytes(s.files.bytes);
  out->set_files_received(s.files.received);
  out->set_prepared_entries(s.prepared_entries);
  out->set_prepared_hits(s.prepared_hits);
  return grpc::Status::OK;
}

grpc::Status DecodeNode::Has(grpc::ServerContext* ctx, const v1::HasFilesRequest* req,
                             v1::HasFilesReply* out) {
  if (grpc::Status st = CheckCall(*ctx, options_.token); !st.ok()) return st;
  if (files_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, kNoStore);
  }
  if (req->keys_size() > 4096) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "more than 4096 keys in one question");
  }
  const std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  for (bool have : files_->Has(keys)) out->add_have(have);
  out->set_max_bytes(files_->budget());
  return grpc::Status::OK;
}

absl::Status DecodeNode::Receive(Stream* s, const v1::FileChunk& c) {
  if (files_ == nullptr) {
    return absl::FailedPreconditionError(kNoStore);
  }
  if (c.offset() == 0) {
    auto up = files_->Begin(c.key(), c.size());
    if (!up.ok()) return up.status();
    s->upload = *std::move(up);
  } else if (s->upload == nullptr || s->upload->key() != c.key() ||
             s->upload->size() != c.size() || s->upload->written() != c.offset()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shipped file ", c.key(), ": a piece at ", c.offset(), " out of order"));
  }
  if (absl::Status st = s->upload->Append(c.data()); !st.ok()) return st;
  {
    absl::MutexLock l(&mu_);
    stats_.bytes_in += c.data().size();
  }
  if (s->upload->written() < s->upload->size()) return absl::OkStatus();
  return files_->Commit(std::move(s->upload));
}

absl::Status DecodeNode::PinFiles(const worker::TaskMsg& m, std::vector<std::string>* keys) {
  if (files_ == nullptr) {
    return absl::FailedPreconditionError(kNoStore);
  }
  if (m.clip.params.frames == 0 && m.has_volume == 0) {
    return absl::InvalidArgumentError("shipped files for a task that is not a clip or a volume");
  }
  for (std::string_view k : TaskFiles(m)) keys->emplace_back(k);
  for (const std::string& k : *keys) {
    if (!IsStoreKey(k)) return absl::InvalidArgumentError("a shipped task names a file by no key");
  }
  if (keys->empty()) return absl::InvalidArgumentError("a shipped task names no file");
  if (absl::Status st = files_->Acquire(*keys); !st.ok()) {
    keys->clear();
    return absl::FailedPreconditionError(st.message());
  }
  return absl::OkStatus();
}

void DecodeNode::UnpinFilesLocked(Task& t) {
  if (t.files.empty()) return;
  files_->Release(t.files);
  t.files.clear();
}

absl::Status DecodeNode::Submit(Stream* s, const v1::DecodeTask& req) {
  if (req.task().empty() && req.has_file()) return Receive(s, req.file());
  auto t = std::make_shared<Task>();
  t->msg = std::make_unique<worker::TaskMsg>();
  worker::TaskMsg& m = *t->msg;
  if (absl::Status st = ParseTask(req.task(), options_.max_task_bytes, &m, &t->msg_bytes);
      !st.ok()) {
    return st;
  }
  const bool has_mask = m.mask_path_bytes != 0 || m.has_volume != 0;
  if ((m.clip.params.frames != 0 || m.has_volume != 0) && !req.input().empty()) {
    return absl::InvalidArgumentError(
        "a video clip's or a volume's files are shipped whole (DecodeTask.file), not as the "
        "task's input");
  }
  if (req.input().empty() && !req.mask().empty()) {
    return absl::InvalidArgumentError("a mask's bytes without its image's");
  }
  if (!req.input().empty() && m.mask_path_bytes != 0 && req.mask().empty()) {
    return absl::InvalidArgumentError("a task with a mask whose bytes were not sent");
  }
  if (req.input().size() > options_.max_task_bytes || req.mask().size() > options_.max_task_bytes) {
    return absl::InvalidArgumentError("an input over the node's limit");
  }
  const uint64_t box_bytes = m.has_boxes != 0 ? BoxBytes(m.box_count) : 0;
  if (req.boxes().size() != box_bytes) {
    return absl::InvalidArgumentError("boxes of the wrong size");
  }
  // The task's range: inputs, then each output's room.
  uint64_t at = 0;
  const uint64_t input_at = at;
  at += Align(req.input().size());
  const uint64_t mask_input_at = at;
  at += Align(req.mask().size());
  const uint64_t out_at = at;
  uint64_t view_at[image::kMaxViews] = {};
  if (m.params.view_count != 0) {
    for (uint32_t k = 0; k < image::OutputCount(m.params); ++k) {
      view_at[k] = at;
      at += Align(m.view_out_capacity[k]);
    }
  } else {
    at += Align(m.out_capacity);
  }
  const uint64_t mask_out_at = at;
  at += has_mask ? Align(m.mask_out_capacity) : 0;
  const uint64_t box_at = at;
  at += Align(uint64_t{m.box_count} * 16) * (m.has_boxes != 0);
  const uint64_t label_at = at;
  at += Align(uint64_t{m.box_count} * 8) * (m.has_boxes != 0);
  const uint64_t flag_at = at;
  at += Align(m.box_count) * (m.has_boxes != 0);
  const uint64_t total = at;

  t->trainer_id = m.task_id;
  t->stream = s;
  if (m.shipped_files != 0) {
    if (absl::Status st = PinFiles(m, &t->files); !st.ok()) return st;
  }
  {
    absl::MutexLock l(&mu_);
    stats_.bytes_in += req.input().size() + req.mask().size();
    if (total > arena_.capacity()) {
      UnpinFilesLocked(*t);
      // Answered at once: the node could never hold it.
      t->done = true;
      t->result = worker::ResultMsg{};
      t->result.task_id = m.task_id;
      t->result.code = static_cast<uint32_t>(absl::StatusCode::kResourceExhausted);
      worker::CopyText(absl::StrCat("the sample needs ", total, " bytes of the decode node's ",
                                    arena_.capacity(), " of task memory"),
                       t->result.reason);
      t->arena_offset = UINT64_MAX;
      ++stats_.tasks_failed;
      s->order.push_back(t);
      s->ready.Signal();
      return absl::OkStatus();
    }
    std::optional<uint64_t> off;
    while (!(off = arena_.Allocate(total)).has_value()) {
      if (stopping_.load() || s->dropped) {
        UnpinFilesLocked(*t);
        return absl::CancelledError("the stream ended");
      }
      freed_.Wait(&mu_);
    }
    t->arena_offset = *off;
  }
  uint8_t* base = static_cast<uint8_t*>(arena_map_.addr()) + t->arena_offset;
  std::memcpy(base + input_at, req.input().data(), req.input().size());
  std::memcpy(base + mask_input_at, req.mask().data(), req.mask().size());
  const uint64_t o = t->arena_offset;
  m.ring_id = kArenaRing;
  m.out_offset = o + out_at;
  for (uint32_t k = 0; m.params.view_count != 0 && k < image::OutputCount(m.params); ++k) {
    m.view_out_offset[k] = o + view_at[k];
  }
  if (m.params.view_count != 0) {
    m.out_offset = m.view_out_offset[0];
    m.out_capacity = m.view_out_capacity[0];
  }
  m.mask_out_offset = o + mask_out_at;
  m.box_out_offset = o + box_at;
  m.box_label_out_offset = o + label_at;
  m.box_flag_out_offset = o + flag_at;
  if (m.has_boxes != 0) PlaceBoxes(m, req.boxes(), static_cast<uint8_t*>(arena_map_.addr()));
  m.inline_input = req.input().empty() ? 0 : 1;
  m.input_offset = o + input_at;
  m.input_length = req.input().size();
  m.mask_input_offset = o + mask_input_at;
  m.mask_input_length = req.mask().size();
  if (m.inline_input != 0) {
    // The trainer made a raw record an image before shipping it.
    m.has_range = 0;
    m.raw_height = m.raw_width = m.raw_channels = 0;
    m.mask_has_range = 0;
  }
  m.cache = worker::kTaskCacheOff;
  m.prepared_recipe = 0;
  m.simulate_latency_us = 0;
  if (!options_.keep_faults) m.fault = worker::kFaultNone;

  absl::MutexLock l(&mu_);
  if (stopping_.load() || s->dropped) {
    arena_.Free(t->arena_offset);
    UnpinFilesLocked(*t);
    freed_.SignalAll();
    return absl::CancelledError("the stream ended");
  }
  t->id = next_id_++;
  m.task_id = t->id;
  t->queued = true;
  s->order.push_back(t);
  queue_.push_back(t);
  poller_.Wake();
  return absl::OkStatus();
}

void DecodeNode::Answer(const Task& t, v1::DecodeResult* out) const {
  worker::ResultMsg r = t.result;
  r.task_id = t.trainer_id;
  out->set_result(std::string(reinterpret_cast<const char*>(&r), sizeof(r)));
  if (r.code != 0 || t.arena_offset == UINT64_MAX) return;
  const worker::TaskMsg& m = *t.msg;
  const uint8_t* base = static_cast<const uint8_t*>(arena_map_.addr());
  std::string* output = out->mutable_output();
  if (m.params.view_count != 0) {
    for (uint32_t k = 0; k < image::OutputCount(m.params); ++k) {
      output->append(reinterpret_cast<const char*>(base + m.view_out_offset[k]),
                     m.view_out_capacity[k]);
    }
  } else {
    output->assign(reinterpret_cast<const char*>(base + m.out_offset),
                   std::min<uint64_t>(r.bytes, m.out_capacity));
  }
  if (r.mask_bytes != 0) {
    out->set_mask(reinterpret_cast<const char*>(base + m.mask_out_offset),
                  std::min<uint64_t>(r.mask_bytes, m.mask_out_capacity));
  }
  if (m.has_boxes != 0) AppendBoxes(m, base, out->mutable_boxes());
}

grpc::Status DecodeNode::Decode(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::DecodeResult, v1::DecodeTask>* stream) {
  if (grpc::Status st = CheckCall(*ctx, options_.token); !st.ok()) return st;
  Stream s;
  {
    absl::MutexLock l(&mu_);
    ++stats_.streams_open;
    streams_.insert(&s);
    ++stats_.streams_total;
  }
  std::thread reader([&] {
    v1::DecodeTask req;
    absl::Status st;
    while (st.ok() && stream->Read(&req)) st = Submit(&s, req);
    absl::MutexLock l(&mu_);
    if (!st.ok() && st.code() != absl::StatusCode::kCancelled) s.error = std::string(st.message());
    s.reader_done = true;
    s.ready.Signal();
  });
  grpc::Status end = grpc::Status::OK;
  mu_.Lock();
  for (;;) {
    if (stopping_.load()) {
      end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the decode node is stopping");
      break;
    }
    if (!s.error.empty()) {
      end = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, s.error);
      break;
    }
    if (ctx->IsCancelled()) break;
    if (!s.order.empty() && s.order.front()->done) {
      std::shared_ptr<Task> t = std::move(s.order.front());
      s.order.pop_front();
      // (No buffer hint for answers ready together: a hinted Write of the
      // synchronous API may wait for the next write, which this thread
      // would make.)
      v1::DecodeResult res;
      mu_.Unlock();
      Answer(*t, &res);
      const size_t bytes = res.output().size() + res.mask().size();
      const bool ok = stream->Write(res);
      mu_.Lock();
      if (t->arena_offset != UINT64_MAX) arena_.Free(t->arena_offset);
      t->arena_offset = UINT64_MAX;
      stats_.bytes_out += bytes;
      freed_.SignalAll();
      if (!ok) break;
      continue;
    }
    if (s.reader_done && s.order.empty()) break;
    s.ready.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
  DropStreamLocked(&s);
  --stats_.streams_open;
  streams_.erase(&s);
  // A reader still in Read (the stream was cut, or the node stops) is woken
  // by the cancellation; one that ended keeps the status to return.
  const bool reading = !s.reader_done;
  mu_.Unlock();
  if (reading) ctx->TryCancel();
  reader.join();
  mu_.Lock();
  // A reader that was still submitting when the stream was dropped.
  DropStreamLocked(&s);
  mu_.Unlock();
  return end;
}

void DecodeNode::DropStreamLocked(Stream* s) {
  for (auto& t : s->order) {
    t->stream = nullptr;
    if (t->queued) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), t));
      t->queued = false;
    }
    if (!t->in_flight && t->arena_offset != UINT64_MAX) {
      arena_.Free(t->arena_offset);
      t->arena_offset = UINT64_MAX;
    }
    if (!t->in_flight) UnpinFilesLocked(*t);
  }
  s->order.clear();
  s->dropped = true;
  freed_.SignalAll();  // its reader may wait for task memory
}

void DecodeNode::FinishLocked(Task& t) {
  t.done = true;
  t.in_flight = false;
  UnpinFilesLocked(t);
  if (t.result.code == 0) {
    ++stats_.tasks_done;
  } else {
    ++stats_.tasks_failed;
  }
  if (t.stream == nullptr && t.arena_offset != UINT64_MAX) {  // orphaned
    arena_.Free(t.arena_offset);
    t.arena_offset = UINT64_MAX;
    freed_.SignalAll();
  }
  if (t.stream != nullptr) t.stream->ready.Signal();
}

void DecodeNode::OnResultLocked(const worker::ResultMsg& r) {
  auto it = in_flight_.find(r.task_id);
  if (it == in_flight_.end()) return;
  std::shared_ptr<Task> t = std::move(it->second);
  in_flight_.erase(it);
  if (prepared_ != nullptr) prepared_->Report(r);
  t->result = r;
  FinishLocked(*t);
}

void DecodeNode::OnDeathLocked(uint32_t w, const std::string& cause) {
  const WorkerDeath death = pool_->Bury(w, cause, stopping_.load());
  bool first = true;
  std::vector<std::shared_ptr<Task>> requeue;
  for (uint64_t id : death.tasks) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) {
      first = false;
      continue;
    }
    std::shared_ptr<Task> t = std::move(it->second);
    in_flight_.erase(it);
    t->in_flight = false;
    const bool on_it = first;
    first = false;
    if (t->stream == nullptr) {  // orphaned: nobody waits for it
      if (t->arena_offset != UINT64_MAX) arena_.Free(t->arena_offset);
      t->arena_offset = UINT64_MAX;
      UnpinFilesLocked(*t);
      freed_.SignalAll();
      continue;
    }
    if (on_it && t->crashes.Count(death.self_inflicted)) {
      t->result = worker::ResultMsg{};
      t->result.code = static_cast<uint32_t>(absl::StatusCode::kInternal);
      worker::CopyText(absl::StrCat("a decode node worker died ", t->crashes.deaths,
                                    " times on this file (last: ", death.why, ")"),
                       t->result.reason);
      FinishLocked(*t);
      continue;
    }
    requeue.push_back(std::move(t));
  }
  for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) {
    (*it)->queued = true;
    queue_.push_front(std::move(*it));
  }
}

void DecodeNode::DispatchLoop() {
  while (!stopping_.load()) {
    const std::vector<uint32_t> ready = poller_.Wait(50);
    absl::MutexLock l(&mu_);
    for (uint32_t w : ready) {
      const bool died = pool_->Service(
          w, [&](const worker::ResultMsg& r)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { OnResultLocked(r); });
      if (died) OnDeathLocked(w, "channel closed");
    }
    for (uint32_t w : pool_->Supervise(stopping_.load())) MapArenaLocked(w);
    for (uint32_t depth = 0; depth < options_.queue_depth && !queue_.empty(); ++depth) {
      for (uint32_t w = 0; w < pool_->size() && !queue_.empty(); ++w) {
        if (!pool_->CanTake(w, depth)) continue;
        std::shared_ptr<Task> t = queue_.front();
        if (!pool_->SendTask(w, *t->msg, t->msg_bytes)) continue;
        queue_.pop_front();
        t->queued = false;
        t->in_flight = true;
        in_flight_[t->id] = std::move(t);
      }
    }
  }
}

}  // namespace stoker::remote
