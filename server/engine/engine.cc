#include "server/engine/engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/control/daemon_flags.h"
#include "server/engine/attach_plan.h"
#include "common/display_name.h"
#include "server/engine/liveness.h"
#include "common/memory_available.h"
#include "common/private_file.h"
#include "server/engine/ring_handover.h"
#include "server/worker/image_entry.h"
#include "server/engine/ring_owner.h"
#include "server/engine/status_export.h"
#include "server/remote/wire.h"
#include "server/worker/worker_protocol.h"
#include "spdlog/spdlog.h"
#include "pipeline/pipeline_spec.h"
#include "stoker/ring_futex.h"
#include "stoker/ring_layout.h"

namespace stoker {

namespace {

// Memory a new ring may take (rings are memfds: memory_available.h).
std::optional<uint64_t> RingMemoryAvailable() {
  return MemoryAvailableBytes(SystemMemoryTexts());
}

// ListSamples' page: the default and the largest.
constexpr uint32_t kDefaultListLimit = 4096;
constexpr uint32_t kMaxListLimit = 65536;
constexpr size_t kMaxListBytes = 2u << 20;  // of paths, per page

// NOT_FOUND for a session id; a long one is not echoed whole (an error
// message travels in gRPC's trailers, whose size is limited).
absl::Status NoSession(const std::string& session_id) {
  if (session_id.size() > 100) {
    return absl::NotFoundError(absl::StrCat("no session with an id of ", session_id.size(),
                                            " bytes (ids are short)"));
  }
  return absl::NotFoundError(absl::StrCat("no session ", session_id));
}

// Entry i as ListSamples lists it: relative to the dataset's own folder (an
// ImageFolder's root, a manifest's folder, a pattern's folder, a COCO set's
// images folder).
std::string ListedPath(const Dataset& ds, uint64_t i) {
  std::string p = ds.listed_path(i);  // other than ImageFolder's: relative to the data root
  if (ds.format() == DatasetFormat::kImageFolder) return p;
  const std::string_view name = ds.name();
  if (ds.format() == DatasetFormat::kCoco || ds.format() == DatasetFormat::kPairedFolders) {
    // Within the images folder (COCO: the image's file_name).
    if (!name.empty() && p.compare(0, name.size() + 1, std::string(name) + "/") == 0) {
      p.erase(0, name.size() + 1);
    }
    return p;
  }
  const size_t slash = name.rfind('/');
  if (slash == std::string_view::npos) return p;  // a file at the data root
  if (ds.format() == DatasetFormat::kManifest) {
    // "../x.jpg" for an entry beside the manifest's folder, as it was written.
    return std::filesystem::path(p)
        .lexically_relative(std::filesystem::path(name.substr(0, slash)))
        .string();
  }
  const std::string_view folder = name.substr(0, slash + 1);  // a pattern's folder, as text
  if (p.compare(0, folder.size(), folder) == 0) p.erase(0, folder.size());
  return p;
}

// absl::Mutex as the lock of a std::condition_variable_any (which waits on
// the monotonic clock). absl::CondVar's deadlines follow the wall clock: one
// stepped back would stall the ticker, and clients declare a daemon dead
// after heartbeat_timeout_ms without a heartbeat. Used with mu_ held; the
// wait releases and retakes it.
struct WaitableMutex {
  absl::Mutex* mu;
  void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Lock(); }
  void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Unlock(); }
};

void SendMapRing(WorkerPool& pool, uint32_t w, const DaemonSession& s) {
  worker::MapRingMsg m;
  m.ring_id = s.number;
  m.data_offset = s.ring->geometry().data_offset;
  m.data_bytes = s.ring->geometry().slot_bytes * s.plan.slots();
  m.populate_bytes = s.ring->geometry().slot_bytes * s.ring->committed_slots();
  pool.Send(w, &m, sizeof(m), s.ring->fd());
}

}  // namespace

Engine::Engine(v1::DaemonConfig config, EngineEnv env)
    : env_(env),
      clock_(env.clock != nullptr ? env.clock : SystemClock()),
      config_(std::move(config)),
      // Rounds go as deep as the deeper of the local workers' queue and the
      // relays' credits; each pool takes tasks to its own depth.
      scheduler_(std::max(config_.worker_queue_depth(),
                          config_.decode_nodes().empty() ? 0u : config_.decode_node_queue_depth())) {}

Engine::~Engine() { Stop(); }

std::string Engine::state() const {
  absl::MutexLock l(&mu_);
  return state_;
}

uint32_t Engine::attaches_waiting() const {
  absl::MutexLock l(&mu_);
  return attaches_waiting_;
}

absl::Status Engine::Start() {
  start_ns_ = clock_->NowNs();
  if (absl::Status st = remote::CheckDecodeFlags(config_); !st.ok()) return st;
  auto root = DataRoot::Open(config_.data_root());
  if (!root.ok()) return root.status();
  data_root_ = std::move(*root);
  indexer_ = std::make_unique<DataRootIndexer>(data_root_.get());
  registry_ = std::make_unique<DatasetRegistry>(indexer_.get());
  if (config_.io_threads() > 0 && config_.readahead_mb() > 0) {
    prefetch_ = std::make_unique<Prefetcher>(data_root_->fd(), config_.io_threads(),
                                             config_.readahead_mb() << 20,
                                             config_.max_file_bytes(),
                                             config_.simulate_read_latency_us());
  }
  if (!config_.index_cache().empty()) {
    // Its parents, as needed; Dataset::Open makes the folder itself 0700.
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(config_.index_cache()).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) {
      spdlog::warn("index cache {} cannot be created ({}); indexes are not cached",
                   config_.index_cache(), ec.message());
      config_.clear_index_cache();
    }
  }
  if (!config_.prepared_cache().empty()) {
    auto cache = OpenPreparedCache(config_.prepared_cache(), config_.prepared_cache_mb(), WallNs());
    if (cache.ok()) {
      prepared_cache_fd_ = std::move(cache->fd);
      prepared_cache_dir_ = std::move(cache->dir);
      prepared_cache_ = std::move(cache->budget);
      config_.set_prepared_cache_mb(cache->mb);  // status shows the budget in effect
      task_options_.prepared_cache = true;
    } else {
      spdlog::warn("prepared cache {} cannot be used ({}); volumes and eval images are prepared every epoch",
                   config_.prepared_cache(), cache.status().ToString());
      config_.clear_prepared_cache();
    }
  }
  if (!config_.transcode_cache().empty()) {
    auto fd = OpenCacheDirectory(config_.transcode_cache());
    if (fd.ok()) {
      transcode_cache_fd_ = UniqueFd(*fd);
      transcode_cache_dir_ = PosixCacheDir(transcode_cache_fd_.get());
      if (config_.transcode_cache_mb() == 0) {
        // Status shows the budget in effect.
        config_.set_transcode_cache_mb(DefaultCacheBudget(transcode_cache_fd_.get(), uint64_t{4} << 30) /
                                       1048576.0);
      }
      transcode_cache_ = std::make_unique<TranscodeCache>(
          transcode_cache_dir_.get(), MiB(config_.transcode_cache_mb()), clock_);
      if (absl::Status st = transcode_cache_->Load(); !st.ok()) fd = st;
    }
    if (!fd.ok()) {
      spdlog::warn("transcode cache {} cannot be used ({}); progressive files are not cached",
                   config_.transcode_cache(), fd.status().ToString());
      transcode_cache_.reset();
      transcode_cache_dir_.reset();
      transcode_cache_fd_.Reset();
      config_.clear_transcode_cache();
    } else {
      const TranscodeCache::Stats cs = transcode_cache_->stats();
      spdlog::info("transcode cache {}: {} entries, {:.1f} of {:.0f} MiB", config_.transcode_cache(),
                   cs.entries, cs.bytes / 1048576.0, cs.budget_bytes / 1048576.0);
    }
  }
  ring_budget_bytes_ = MiB(config_.ring_budget_mb());
  if (ring_budget_bytes_ == 0) ring_budget_bytes_ = RingMemoryAvailable().value_or(0) / 2;
  shm_tag_ = absl::StrFormat(
      "%08x", static_cast<uint32_t>(std::hash<std::string>{}(
                  absl::StrCat(config_.socket(), ":", ::getuid()))));
  if (config_.decode_calibration()) {
    // CPU time, not env_.clock (a test's may be scripted): see
    // decode_planner.h. `seconds` is then CPU seconds of this thread.
    // Kept in the index cache's folder (0700): a daemon started again on
    // this machine reuses it, so the scales disabled (and a resumed run's
    // pixels) stay. Without an index cache every start measures.
    const std::string path =
        config_.index_cache().empty()
            ? std::string()
            : (std::filesystem::path(config_.index_cache()) / "decode-calibration.txt").string();
    const std::string machine = image::CalibrationMachine();
    bool loaded = false;
    if (env_.decode_calibration != nullptr) {
      decode_calibration_ = *env_.decode_calibration;
    } else {
      std::string text;
      if (!path.empty() && ReadPrivateFile(path, &text)) {
        loaded = image::ParseCalibration(text, machine, &decode_calibration_);
      }
      if (!loaded) {
        decode_calibration_ = image::Calibrate(image::ThreadCpuNanos);
        if (!path.empty()) {
          const absl::Status st = WritePrivateFile(
              path, image::SerializeCalibration(decode_calibration_, machine));
          if (!st.ok()) spdlog::warn("decode calibration not saved: {}", st.ToString());
        }
      }
    }
    decode_calibration_source_ = loaded ? path : "measured";
    std::string table;
    for (const image::ScaleCost& c : decode_calibration_.costs) {
      const uint32_t mask = decode_calibration_.disabled_dct_scales;
      const bool off = (mask & image::DctScaleBit(c.scale)) != 0;
      absl::StrAppendFormat(&table, " %d/8 %.2f/%.2f%s", c.scale, c.baseline_ms, c.progressive_ms,
                            off ? " (disabled)" : "");
    }
    spdlog::info("decode calibration ({}, {:.2f} s CPU), baseline/progressive ms per image:{}",
                 loaded ? "loaded from " + path : "measured", decode_calibration_.seconds, table);
  }

  launcher_ = env_.launcher;
  if (launcher_ == nullptr) {
    auto binary = WorkerBinaryPath(config_.worker_binary());
    if (!binary.ok()) return binary.status();
    own_launcher_ = std::make_unique<PosixSpawnLauncher>(
        *binary, data_root_->fd(), config_.worker_sandbox(),
        transcode_cache_fd_.valid() ? transcode_cache_fd_.get() : -1,
        prepared_cache_fd_.valid() ? prepared_cache_fd_.get() : -1);
    launcher_ = own_launcher_.get();
    probe_launcher_ =
        std::make_unique<PosixSpawnLauncher>(*binary, data_root_->fd(), config_.worker_sandbox());
  }
  prober_ = env_.video_prober;
  if (prober_ == nullptr && probe_launcher_ != nullptr) {
    VideoProberOptions po;
    po.parallelism = std::max<uint32_t>(1, std::min<uint32_t>(8, std::thread::hardware_concurrency()));
    po.max_decode_pixels = config_.video_max_decode_pixels();
    po.timeout_ms = config_.video_probe_timeout_ms();
    own_prober_ = std::make_unique<WorkerVideoProber>(probe_launcher_.get(), po);
    prober_ = own_prober_.get();
  }
  task_options_.max_file_bytes = config_.max_file_bytes();
  task_options_.simulate_latency_us = config_.simulate_read_latency_us();
  task_options_.fault_crash_substring = config_.fault_crash_substring();
  task_options_.fault_hang_substring = config_.fault_hang_substring();

  if (absl::Status st = poller_.Init(); !st.ok()) return st;

  // --workers auto starts from one worker and grows as trainers wait.
  const uint32_t n = config_.workers() != 0 ? config_.workers() : 1;
  const CpuBudget budget = ReadBudget();
  {
    absl::MutexLock l(&mu_);
    budget_ = budget;
    if (config_.workers() == 0) {
      autotuner_ = std::make_unique<Autotuner>(
          env_.autotune != nullptr ? *env_.autotune : AutotuneOptions(), n);
    }
    tune_last_ns_ = clock_->NowNs();
    batch_.prefetch = prefetch_.get();
    batch_.failure_memory = &failure_memory_;
    batch_.on_event = [this] { cv_.notify_all(); };
    batch_.clock = clock_;
    pool_ = std::make_unique<WorkerPool>(launcher_, clock_, &poller_, config_.task_timeout_ms());
    if (absl::Status st = pool_->Start(n); !st.ok()) return st;
    if (!config_.decode_nodes().empty()) {
      auto remote = RemotePool::Create(config_, data_root_->fd(), clock_, &poller_,
                                       env_.remote_launcher);
      if (!remote.ok()) return remote.status();
      remote_ = std::move(*remote);
      RemotePool* r = remote_.get();
      // Reads only what never changes after Create: safe outside mu_.
      resolve_decode_nodes_ = [r] { return r->Resolve(); };
    }
    state_ = "serving";
  }
  dispatcher_ = std::thread([this] { DispatchLoop(); });
  ticker_ = std::thread([this] { TickerLoop(); });
  spdlog::info("engine serving: {} worker(s){}, CPU budget {:.2f} ({}), data root {}", n,
               config_.workers() == 0 ? " (auto)" : "", budget.cpus, budget.source,
               data_root_->path());
  return absl::OkStatus();
}

void Engine::MapRingsLocked(uint32_t w) { MapRingsLocked(*pool_, w); }

void Engine::MapRingsLocked(WorkerPool& pool, uint32_t w) {
  for (auto& [sid, s] : sessions_) SendMapRing(pool, w, *s);
}

absl::Status Engine::RoomForSessionLocked() const {
  if (state_ != "serving") return absl::UnavailableError(absl::StrCat("stokerd is ", state_));
  if (sessions_.size() >= config_.max_sessions()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the daemon serves its maximum of ", config_.max_sessions(), " sessions"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::AttachResponse> Engine::Attach(const v1::AttachRequest& req) {
  {
    // Refused early, before any indexing; asked again when the session is
    // added (Attaches that pass here together must not all get in).
    absl::MutexLock l(&mu_);
    ++attaches_waiting_;
    mu_.AwaitWithTimeout(
        absl::Condition(+[](std::string* state) { return *state != "starting"; }, &state_),
        kStartWait);
    --attaches_waiting_;
    if (absl::Status room = RoomForSessionLocked(); !room.ok()) return room;
  }
  video::VideoLimits video_limits;
  video_limits.max_decode_pixels = config_.video_max_decode_pixels();
  video_limits.max_frames_per_clip = config_.video_max_frames_per_clip();
  auto request = PlanRequest(req, video_limits);
  if (!request.ok()) return request.status();
  // The one place a session's pipeline learns the daemon's calibration.
  request->pipeline.params.disabled_dct_scales = decode_calibration_.disabled_dct_scales;

  // Indexed outside mu_ (it may take seconds), once however many Attaches
  // ask for it at the same time.
  IndexOptions io;
  io.cache_dir = config_.index_cache();
  io.allow_empty = req.allow_empty();
  io.skip_unsupported_formats = req.skip_unsupported_formats();
  io.annotations = req.annotations();
  io.masks = req.masks();
  io.image_suffix = req.image_suffix();
  io.mask_suffix = req.mask_suffix();
  io.extensions.assign(req.extensions().begin(), req.extensions().end());
  io.label_files = request->volume.has_value();
  io.record_images = req.record_images();
  io.record_labels = req.record_labels();
  io.record_labels_key = req.record_labels_key();
  io.record_shape.assign(req.record_shape().begin(), req.record_shape().end());
  if (prober_ != nullptr) {
    io.index_records = [this](const RecordTarget& t) { return prober_->IndexRecords(t); };
  }
  if (!request->volume.has_value() && req.format() == v1::DATASET_FORMAT_VOLUME_FOLDER) {
    return absl::InvalidArgumentError(
        "a folder of volumes is a volume session's dataset: give volumes (stoker.volume's "
        "Compose as transform=)");
  }
  if (request->volume.has_value() && (req.format() == v1::DATASET_FORMAT_IMAGE_FOLDER ||
                                      req.format() == v1::DATASET_FORMAT_HDF5 ||
                                      req.format() == v1::DATASET_FORMAT_LMDB ||
                                      req.format() == v1::DATASET_FORMAT_WEBDATASET ||
                                      req.format() == v1::DATASET_FORMAT_COCO ||
                                      req.format() == v1::DATASET_FORMAT_PAIRED_FOLDERS)) {
    return absl::InvalidArgumentError(
        "volumes: a volume session reads a Decathlon dataset.json, a manifest "
        "\"#columns: image label\" of volume files, or a folder of volumes (masks= its "
        "labels' folder)");
  }
  if (request->clip.has_value()) {
    if (prober_ == nullptr) {
      return absl::FailedPreconditionError("this daemon cannot index videos (no video prober)");
    }
    if (io.extensions.empty()) io.extensions.assign(std::begin(kVideoExtensions), std::end(kVideoExtensions));
  }
  auto indexed = registry_->Get(req.dataset(), req.format(), io);
  if (!indexed.ok()) return indexed.status();
  std::shared_ptr<const Dataset> ds = *std::move(indexed);
  if ((request->volume.has_value() || request->clip.has_value()) &&
      (ds->format() == DatasetFormat::kHdf5 || ds->format() == DatasetFormat::kLmdb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", ds->name(), "' is a record file, whose samples are images: ",
        request->volume.has_value()
            ? "list HDF5 volumes in a manifest \"#columns: image label\" or a dataset.json "
              "(LoadImaged(npz_keys=...) names their datasets)"
            : "videos are served from files or WebDataset shards"));
  }
  std::shared_ptr<const ClipSource> clips;
  if (request->clip.has_value()) {
    const std::string cache_dir = config_.index_cache();
    std::shared_ptr<const VideoTable> table = video_tables_.Get(
        ds, DatasetKey(ds->name(), req.format(), io), [&](const Dataset& d) {
          const int64_t t0 = MonotonicNs();
          auto t = VideoTable::Build(*data_root_, d, *prober_, cache_dir);
          spdlog::info("video index of {}: {} videos ({} probed, {} from the cache, {} without "
                       "clips) in {:.2f} s",
                       d.name(), t->videos(), t->probed(), t->reused(), t->failed(),
                       (MonotonicNs() - t0) / 1e9);
          for (const std::string& w : t->warnings()) spdlog::warn("video index of {}: {}", d.name(), w);
          return t;
        });
    clips = std::make_shared<const ClipSource>(table, *request->clip);
    if (clips->epoch_size() == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dataset '", ds->name(), "' has no clip of ", request->clip->options.frames_per_clip,
          " frames: ", table->videos(), " videos, ", table->failed(),
          " of them could not be indexed (the daemon's log names them); use shorter clips"));
    }
  }
  AttachLimits limits;
  limits.max_ring_bytes = config_.max_ring_bytes();
  {
    absl::MutexLock l(&mu_);
    RingBudgetLocked(&limits);
  }
  limits.memory_free_bytes = RingMemoryAvailable();
  SampleFields fields;
  fields.masks = ds->has_masks();
  fields.boxes = ds->has_boxes();
  fields.max_boxes = ds->max_boxes();
  auto plan = PlanSession(req, *request, clips != nullptr ? clips->epoch_size() : ds->size(),
                          limits, fields);
  if (!plan.ok()) return plan.status();

  auto s = std::make_shared<DaemonSession>();
  s->req = req;
  s->dataset = ds;
  s->clips = clips;
  s->plan = *std::move(plan);
  s->plan.prepared_recipe = PreparedRecipe(s->plan);
  // The ring is made outside mu_: reserving gigabytes of memory takes a
  // while, and mu_ also serves the dispatcher, the heartbeats and Status.
  {
    absl::MutexLock l(&mu_);
    s->number = next_session_number_++;
  }
  s->id = absl::StrFormat("%s-%d", shm_tag_, s->number);
  auto ring = RingOwner::Create(absl::StrCat("stoker-", s->id), RingSpecFor(s->plan, s->number));
  if (!ring.ok()) return ring.status();
  s->ring = std::move(*ring);
  s->ring_token = NewRingToken();

  absl::ReleasableMutexLock l(&mu_);
  // (Refused now, the ring goes with s.)
  if (absl::Status room = RoomForSessionLocked(); !room.ok()) return room;
  // Again under mu_: Attaches that planned together must not all get in.
  RingBudgetLocked(&limits);
  if (absl::Status st = CheckRingBudget(s->plan.ring_bytes, limits); !st.ok()) return st;
  InitSession(*s, clock_->NowNs());
  if (s->plan.slots() > s->plan.depth()) {
    s->depth_policy = std::make_unique<RingDepthPolicy>(s->plan.depth(), s->plan.slots());
  }
  sessions_[s->id] = s;
  ++sessions_total_;
  for (uint32_t w = 0; w < pool_->size(); ++w) SendMapRing(*pool_, w, *s);
  for (uint32_t w = 0; remote_ != nullptr && w < remote_->pool().size(); ++w) {
    SendMapRing(remote_->pool(), w, *s);
  }
  s->watcher = std::make_unique<ReleaseWatcher>(&s->ring->header()->release_count,
                                                [this] { poller_.Wake(); });

  const ring::Geometry& g = s->ring->geometry();
  v1::AttachResponse resp =
      AttachResponseFor(s->plan, *ds, s->id, s->ring->name(), s->ring_token, g,
                        config_.heartbeat_timeout_ms());
  spdlog::info(
      "session {} attached: client '{}' pid {}, dataset {} ({} samples), pipeline {}, batch {}, "
      "rank {}/{}, {} slots of {} bytes, ring {}",
      s->id, req.client_name(), req.client_pid(), ds->name(), ds->size(),
      pipeline::Describe(s->plan.request.pipeline.effective), req.batch_size(), req.rank(),
      s->plan.sampler.world_size, s->plan.slots(), g.slot_bytes, s->ring->name());
  l.Release();
  poller_.Wake();
  return resp;
}

absl::StatusOr<UniqueFd> Engine::RingFd(std::string_view token) {
  absl::MutexLock l(&mu_);
  for (const auto& [id, s] : sessions_) {
    if (s->ended || s->ring_token.size() != token.size()) continue;
    unsigned char diff = 0;  // the same time whatever the first differing character
    for (size_t i = 0; i < token.size(); ++i) diff |= s->ring_token[i] ^ token[i];
    if (diff != 0) continue;
    UniqueFd fd(::fcntl(s->ring->fd(), F_DUPFD_CLOEXEC, 0));
    if (!fd.valid()) return PosixError("dup ring fd", errno);
    return fd;
  }
  return absl::NotFoundError("no attached session has that ring token (it ended, or never was)");
}

absl::Status Engine::Detach(const std::string& session_id, const std::string& why) {
  std::vector<std::shared_ptr<DaemonSession>> removed;
  {
    absl::MutexLock l(&mu_);
    if (sessions_.find(session_id) == sessions_.end()) {
      return NoSession(session_id);
    }
    RemoveSessionLocked(session_id, why, &removed);
  }
  FinalizeRemoved(removed);
  return absl::OkStatus();
}

void Engine::RemoveSessionLocked(const std::string& id, const std::string& why,
                                 std::vector<std::shared_ptr<DaemonSession>>* removed) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  std::shared_ptr<DaemonSession> s = it->second;
  sessions_.erase(it);
  worker::UnmapRingMsg m;
  m.ring_id = s->number;
  pool_->SendAll(&m, sizeof(m), -1);
  if (remote_ != nullptr) remote_->pool().SendAll(&m, sizeof(m), -1);
  EndSession(*s, why, batch_, &in_flight_);
  v1::SessionStatus final_status;
  ExportSession(*s, clock_->NowNs(), false, &final_status);
  dataset_totals_.Retire(final_status);
  removed->push_back(s);
  cv_.notify_all();
}

void Engine::FinalizeRemoved(std::vector<std::shared_ptr<DaemonSession>>& removed) {
  for (auto& s : removed) {
    if (s->watcher != nullptr) s->watcher->Stop();
    absl::MutexLock l(&mu_);
    s->filling.clear();
    s->ring.reset();  // unmaps and closes
  }
  removed.clear();
}

absl::Status Engine::KeepAlive(const std::string& session_id,
                               const std::function<bool()>& cancelled,
                               const std::function<bool(const v1::SessionEvent&)>& send) {
  std::shared_ptr<DaemonSession> s;
  {
    absl::MutexLock l(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return NoSession(session_id);
    s = it->second;
    if (s->keepalive_open) {
      return absl::AlreadyExistsError("this session's KeepAlive stream is already open");
    }
    s->keepalive_open = true;
  }
  v1::SessionEvent hello;
  hello.set_kind(v1::SessionEvent::KIND_ATTACHED);
  hello.set_message(s->id);
  bool peer_ok = send(hello);
  for (;;) {
    std::deque<v1::SessionEvent> out;
    bool ended;
    std::string reason;
    {
      absl::MutexLock l(&mu_);
      WaitableMutex lock{&mu_};
      cv_.wait_for(lock, std::chrono::milliseconds(200),
                   [&] { return !s->events.empty() || s->ended; });
      out.swap(s->events);
      ended = s->ended;
      reason = s->end_reason;
    }
    for (const auto& e : out) peer_ok = peer_ok && send(e);
    if (ended) {
      v1::SessionEvent e;
      e.set_kind(v1::SessionEvent::KIND_ENDED);
      e.set_message(DisplayName(reason));
      send(e);
      return absl::OkStatus();
    }
    if (!peer_ok || cancelled()) {
      std::vector<std::shared_ptr<DaemonSession>> removed;
      {
        absl::MutexLock l(&mu_);
        s->keepalive_open = false;
        if (!s->ended) {
          ++sessions_reclaimed_;
          RemoveSessionLocked(s->id, kWhyStreamClosed, &removed);
        }
      }
      FinalizeRemoved(removed);
      return absl::CancelledError("client went away");
    }
  }
}

void Engine::StartBatchesLocked() {
  if (state_ != "serving") return;
  for (auto& [id, s] : sessions_) StartBatches(*s, batch_);
}

void Engine::DispatchLocked() {
  if (sessions_.empty()) return;
  std::vector<DaemonSession*> order;
  order.reserve(sessions_.size());
  for (auto& [id, s] : sessions_) order.push_back(s.get());
  // Local workers first, then the remote ones (decode nodes) while their
  // gate is open.
  const size_t local = pool_->size();
  const bool remote_open = remote_ != nullptr && remote_->open();
  const size_t remote = remote_open ? remote_->pool().size() : 0;
  scheduler_.Round(
      local + remote, order.size(),
      [&](size_t w, uint32_t depth) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return w < local ? depth < std::max(1u, config_.worker_queue_depth()) &&
                               pool_->CanTake(static_cast<uint32_t>(w), depth)
                         : depth < std::max(1u, config_.decode_node_queue_depth()) &&
                               remote_->pool().CanTake(static_cast<uint32_t>(w - local), depth);
      },
      [&](size_t i) { return !order[i]->queue.empty(); },
      [&](size_t w, size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (w < local) {
          DispatchOneLocked(*pool_, static_cast<uint32_t>(w), *order[i]);
        } else {
          DispatchOneLocked(remote_->pool(), static_cast<uint32_t>(w - local), *order[i]);
        }
      });
}

void Engine::DispatchOneLocked(WorkerPool& pool, uint32_t w, DaemonSession& s) {
  SampleTask* t = s.queue.front();
  ReleaseReadahead(*t, batch_);
  worker::TaskMsg msg;
  const size_t bytes = BuildTaskMsg(s, *t, task_options_, &msg);
  if (bytes == 0) {
    s.queue.pop_front();
    FailSample(s, *t, "path too long", batch_, "path_too_long");
    return;
  }
  msg.task_id = next_task_id_++;
  if (transcode_cache_ != nullptr && &pool == pool_.get()) {
    msg.cache =
        transcode_cache_->WritesAllowed() ? worker::kTaskCacheReadWrite : worker::kTaskCacheRead;
  }
  // A failed send leaves the task queued (the worker is marked unsendable).
  if (!pool.SendTask(w, msg, bytes)) return;
  if (remote_ != nullptr && &pool == &remote_->pool()) remote_->Sent(msg.task_id, clock_->NowNs());
  s.queue.pop_front();
  t->id = msg.task_id;
  t->in_flight = true;
  in_flight_[t->id] = t;
}

DaemonSession* Engine::FindByNumberLocked(uint64_t number) {
  for (auto& [id, s] : sessions_) {
    if (s->number == number) return s.get();
  }
  return nullptr;
}

void Engine::OnResultLocked(WorkerPool& pool, uint32_t w, const worker::ResultMsg& r) {
  if (remote_ != nullptr && &pool == &remote_->pool()) remote_->CountResult(w, r, clock_->NowNs());
  // First, whatever became of the task: an entry written is on disk.
  if (prepared_cache_ != nullptr) prepared_cache_->Report(r);
  if (transcode_cache_ != nullptr && r.cache_event != kCacheNone) {
    CacheReport cr;
    cr.event = static_cast<CacheEvent>(r.cache_event);
    cr.key = CacheKey{r.cache_key_hi, r.cache_key_lo};
    cr.entry_bytes = r.cache_entry_bytes;
    cr.bytes_written = r.cache_bytes_written;
    cr.write_errno = static_cast<int>(r.cache_write_errno);
    cr.temp_left = r.cache_temp_left != 0;
    cr.transcode_ns = r.transcode_ns;
    if (transcode_cache_->OnReport(cr)) {
      const TranscodeCache::Stats cs = transcode_cache_->stats();
      spdlog::warn(
          "transcode cache {}: writing a copy failed: {}; no copies are made for {} s (files it "
          "cannot keep are decoded from their originals, not re-coded), then it tries again",
          config_.transcode_cache(), cs.writes_paused_reason,
          (cs.writes_paused_until_ns - clock_->NowNs() + 999'999'999) / 1'000'000'000);
    }
  }
  auto it = in_flight_.find(r.task_id);
  if (it == in_flight_.end()) return;  // its session is gone
  SampleTask* t = it->second;
  in_flight_.erase(it);
  t->in_flight = false;
  DaemonSession* s = FindByNumberLocked(t->session);
  if (s == nullptr) return;
  if (s->filling.count(t->seq) == 0) return;
  pool.CountSample(w, r.code == 0);
  CompleteSample(*s, *t, r, batch_);
}

void Engine::OnWorkerDeathLocked(WorkerPool& pool, uint32_t w, const std::string& cause) {
  const WorkerDeath death = pool.Bury(w, cause, stopping_.load());
  if (remote_ != nullptr && &pool == &remote_->pool()) remote_->CountDeath(w, death.tasks);
  // The oldest task is the one the worker was on; the rest were only queued.
  bool first = true;
  std::vector<std::pair<DaemonSession*, SampleTask*>> requeue;
  for (uint64_t id : death.tasks) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) {
      first = false;
      continue;
    }
    SampleTask* t = it->second;
    in_flight_.erase(it);
    t->in_flight = false;
    DaemonSession* s = FindByNumberLocked(t->session);
    if (s == nullptr) continue;
    if (first) {
      first = false;
      if (t->crashes.Count(death.self_inflicted)) {
        FailSample(*s, *t,
                   absl::StrCat("a worker died ", t->crashes.deaths, " times on this file (last: ",
                                death.why, ")"),
                   batch_, "worker_crash");
        continue;
      }
    }
    requeue.emplace_back(s, t);
  }
  for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) it->first->queue.push_front(it->second);
}

void Engine::DispatchLoop() {
  while (!stopping_.load()) {
    const std::vector<uint32_t> ready = poller_.Wait(50);
    absl::MutexLock l(&mu_);
    for (uint32_t id : ready) {
      const bool remote = id >= RemotePool::kPollerIdBase;
      if (remote && remote_ == nullptr) continue;
      WorkerPool& pool = remote ? remote_->pool() : *pool_;
      const uint32_t w = remote ? id - RemotePool::kPollerIdBase : id;
      const bool died = pool.Service(
          w, [&](const worker::ResultMsg& r)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { OnResultLocked(pool, w, r); });
      if (died) OnWorkerDeathLocked(pool, w, "channel closed");
    }
    for (uint32_t w : pool_->Supervise(stopping_.load())) MapRingsLocked(w);
    if (remote_ != nullptr) StealBackLocked();
    if (remote_ != nullptr) {
      for (uint32_t w : remote_->pool().Supervise(stopping_.load())) {
        MapRingsLocked(remote_->pool(), w);
      }
    }
    StartBatchesLocked();
    DispatchLocked();
    // Waiters on cv_ (KeepAlive streams, the ticker) are woken where their
    // conditions change; only a drain waits on batches finishing. Waking them
    // all here, once per result, cost stokerd a third of its CPU.
    if (state_ == "draining") cv_.notify_all();
  }
}

void Engine::TickerLoop() {
  constexpr int64_t kTuneEveryNs = 1'000'000'000;
  constexpr int64_t kBudgetEveryNs = 10'000'000'000;
  int64_t budget_read_ns = MonotonicNs();
  int64_t resolved_ns = MonotonicNs();
  while (!stopping_.load()) {
    std::vector<std::shared_ptr<DaemonSession>> removed;
    std::optional<CpuBudget> budget;
    // The decode nodes' names, resolved again (DNS: outside mu_).
    std::optional<std::vector<std::vector<std::string>>> resolved;
    if (resolve_decode_nodes_ && MonotonicNs() - resolved_ns >= RemotePool::kResolveEveryNs) {
      resolved = resolve_decode_nodes_();
      resolved_ns = MonotonicNs();
    }
    if (config_.cpu_budget() == 0 && MonotonicNs() - budget_read_ns >= kBudgetEveryNs) {
      budget = ReadBudget();  // files: outside mu_
      budget_read_ns = MonotonicNs();
    }
    {
      absl::MutexLock l(&mu_);
      if (budget.has_value()) {
        if (budget->cpus != budget_.cpus) {
          spdlog::info("CPU budget {:.2f} -> {:.2f} ({})", budget_.cpus, budget->cpus,
                       budget->source);
        }
        budget_ = *budget;
      }
      if (resolved.has_value() && remote_ != nullptr) {
        for (uint32_t w : remote_->Refresh(*resolved)) MapRingsLocked(remote_->pool(), w);
        poller_.Wake();
      }
      const int64_t now = clock_->NowNs();
      if (now - gate_last_ns_ >= kTuneEveryNs) GateRemoteLocked(now);
      if (now - tune_last_ns_ >= kTuneEveryNs) AutotuneLocked(now);
      if (now - depth_last_ns_ >= kTuneEveryNs) DeepenRingsLocked(now);
      const TickVerdict v = Tick(sessions_, now, config_.keepalive_grace_ms());
      for (const auto& id : v.stale) {
        ++sessions_reclaimed_;
        RemoveSessionLocked(id, kWhyNoKeepAlive, &removed);
      }
      WaitableMutex lock{&mu_};
      cv_.wait_for(lock, std::chrono::milliseconds(ring::kHeartbeatPeriodMs),
                   [this] { return stopping_.load(); });
    }
    FinalizeRemoved(removed);
  }
}

v1::StatusResponse Engine::GetStatus(bool include_failures, bool include_dataset_failures) {
  v1::StatusResponse r;
  r.set_version(STOKER_VERSION);
  r.set_pid(::getpid());
  *r.mutable_config() = config_;
  absl::MutexLock l(&mu_);
  const int64_t now = clock_->NowNs();
  r.set_uptime_seconds((now - start_ns_) / 1e9);
  r.set_state(state_);
  r.set_sessions_total(sessions_total_);
  r.set_sessions_reclaimed(sessions_reclaimed_);
  r.set_samples_total(batch_.samples_total);
  r.set_samples_failed_total(batch_.samples_failed_total);
  r.set_worker_restarts_total(pool_ != nullptr ? pool_->restarts_total() : 0);
  ExportReadahead(prefetch_.get(), config_, r.mutable_readahead());
  if (transcode_cache_ != nullptr) {
    ExportTranscodeCache(transcode_cache_->stats(), config_, clock_->NowNs(),
                         r.mutable_transcode_cache());
  }
  if (prepared_cache_ != nullptr) {
    ExportPreparedCache(prepared_cache_->stats(), config_, r.mutable_prepared_cache());
  }
  if (config_.decode_calibration()) {
    ExportDecodeCalibration(decode_calibration_, decode_calibration_source_,
                            r.mutable_decode_calibration());
  }
  {
    AttachLimits shm;
    RingBudgetLocked(&shm);
    r.set_ring_budget_bytes(shm.ring_budget_bytes);
    r.set_ring_used_bytes(shm.ring_used_bytes);
  }
  if (pool_ != nullptr) {
    ExportWorkers(*pool_, &r);
    ExportAutotuneLocked(r.mutable_autotune());
  }
  if (remote_ != nullptr) remote_->Export(&r);
  for (auto& [id, s] : sessions_) ExportSession(*s, now, include_failures, r.add_sessions());
  dataset_totals_.Export(r.sessions(), r.mutable_dataset_totals());
  if (include_dataset_failures) ExportDatasetFailures(failure_memory_, &r);
  return r;
}

absl::StatusOr<v1::ListSamplesResponse> Engine::ListSamples(const v1::ListSamplesRequest& req) {
  if (req.limit() > kMaxListLimit) {
    return absl::InvalidArgumentError(absl::StrCat("limit ", req.limit(),
                                                   " is over the largest page, ", kMaxListLimit));
  }
  std::shared_ptr<const Dataset> ds;
  {
    absl::MutexLock l(&mu_);
    auto it = sessions_.find(req.session_id());
    if (it == sessions_.end()) return NoSession(req.session_id());
    ds = it->second->dataset;
  }
  v1::ListSamplesResponse resp;
  resp.set_dataset_size(ds->size());
  const uint64_t limit = req.limit() == 0 ? kDefaultListLimit : req.limit();
  const uint64_t begin = std::min<uint64_t>(req.offset(), ds->size());
  const uint64_t end = begin + std::min<uint64_t>(limit, ds->size() - begin);
  resp.mutable_paths()->Reserve(static_cast<int>(end - begin));
  resp.mutable_labels()->Reserve(static_cast<int>(end - begin));
  size_t bytes = 0;
  for (uint64_t i = begin; i < end && (i == begin || bytes < kMaxListBytes); ++i) {
    std::string* path = resp.add_paths();
    *path = ListedPath(*ds, i);
    bytes += path->size();
    resp.add_labels(ds->label(i));
  }
  return resp;
}

void Engine::Drain() {
  std::vector<std::shared_ptr<DaemonSession>> removed;
  {
    absl::MutexLock l(&mu_);
    if (state_ != "serving") return;
    state_ = "draining";
    spdlog::info("draining: finishing in-flight batches of {} session(s)", sessions_.size());
    for (auto& [id, s] : sessions_) {
      v1::SessionEvent e;
      e.set_kind(v1::SessionEvent::KIND_DRAINING);
      e.set_message("stokerd is shutting down");
      s->events.push_back(std::move(e));
    }
    cv_.notify_all();
    WaitableMutex lock{&mu_};
    cv_.wait_for(lock, std::chrono::milliseconds(config_.drain_timeout_ms()),
                 [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                   for (auto& [id, s] : sessions_) {
                     if (!s->filling.empty()) return false;
                   }
                   return true;
                 });
    std::vector<std::string> ids;
    for (auto& [id, s] : sessions_) {
      s->ring->header()->daemon_state.store(ring::kDraining, std::memory_order_release);
      ids.push_back(id);
    }
    for (const auto& id : ids) RemoveSessionLocked(id, "stokerd is shutting down", &removed);
  }
  FinalizeRemoved(removed);
}

void Engine::Stop() {
  if (stopping_.load()) return;
  Drain();
  {
    absl::MutexLock l(&mu_);
    state_ = "stopped";
  }
  stopping_.store(true);
  poller_.Wake();
  cv_.notify_all();
  if (dispatcher_.joinable()) dispatcher_.join();
  if (ticker_.joinable()) ticker_.join();
  absl::MutexLock l(&mu_);
  batch_.prefetch = nullptr;
  prefetch_.reset();
  if (pool_ != nullptr) pool_->Shutdown(2000);
  if (remote_ != nullptr) remote_->pool().Shutdown(2000);
}

}  // namespace stoker
