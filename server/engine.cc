#include "server/engine.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/dataset/sampler.h"
#include "server/image/pipeline.h"
#include "server/latency.h"
#include "server/lower_pipeline.h"
#include "server/ring_owner.h"
#include "server/worker_protocol.h"
#include "spdlog/spdlog.h"
#include "stoker/pipeline_spec.h"
#include "stoker/ring_futex.h"
#include "stoker/ring_layout.h"

extern char** environ;

namespace stoker {

namespace {

constexpr uint32_t kDefaultSlots = 4;
constexpr uint32_t kMaxSlotsPerSession = 64;
constexpr uint32_t kMaxReplacements = 64;
// Deaths of a worker while on the same sample before the sample fails:
// crashes it caused itself (SIGSEGV, abort, a hang), and any death at all.
constexpr uint32_t kMaxSelfCrashes = 2;
constexpr uint32_t kMaxAnyDeaths = 8;
// A dataset path longer than this is refused (it could not name a file).
constexpr size_t kMaxDatasetBytes = 4096;
constexpr size_t kMaxFailuresListed = 1000;
// The failure memory's bounds (stated in stoker.proto's DatasetFailures).
constexpr size_t kKeptFailureDatasets = 64;
constexpr size_t kKeptFailuresPerDataset = 1000;
constexpr size_t kKeptFailureBytesPerDataset = 256 << 10;  // paths + reasons
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

// The key of an indexed dataset: its canonical name, the format asked for
// and the options that change what the index holds.
std::string DatasetKey(const std::string& name, int format, const IndexOptions& io) {
  return absl::StrCat(format, ":", io.flags(), ":", name);
}

// Entry i as ListSamples lists it: relative to the dataset's own folder (an
// ImageFolder's root, a manifest's folder, a pattern's folder).
std::string ListedPath(const Dataset& ds, uint64_t i) {
  std::string p = ds.listed_path(i);  // other than ImageFolder's: relative to the data root
  if (ds.format() == DatasetFormat::kImageFolder) return p;
  const std::string_view name = ds.name();
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

std::string JsonEscape(std::string_view in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(f, line)) return 0;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (rest >> field); ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

std::string DaemonConfig::ToJson() const {
  return absl::StrFormat(
      "{\"socket_path\":\"%s\",\"status_addr\":\"%s\",\"data_root\":\"%s\",\"workers\":%u,\"worker_binary\":\"%s\","
      "\"socket_mode\":\"%o\",\"shm_mode\":\"%o\",\"max_sessions\":%u,\"max_ring_bytes\":%u,"
      "\"worker_queue_depth\":%u,\"task_timeout_ms\":%u,\"keepalive_grace_ms\":%u,"
      "\"heartbeat_timeout_ms\":%u,\"max_file_bytes\":%u,\"drain_timeout_ms\":%u,"
      "\"log_level\":\"%s\",\"log_json\":%s,\"worker_sandbox\":%s,\"fault_injection\":%s,"
      "\"parent_pid\":%d,\"index_cache\":\"%s\",\"io_threads\":%u,\"readahead_bytes\":%u,"
      "\"simulate_read_latency_us\":%u}",
      JsonEscape(socket_path), JsonEscape(status_addr), JsonEscape(data_root), workers, JsonEscape(worker_binary),
      socket_mode, shm_mode, max_sessions, max_ring_bytes, worker_queue_depth, task_timeout_ms,
      keepalive_grace_ms, heartbeat_timeout_ms, max_file_bytes, drain_timeout_ms,
      JsonEscape(log_level), log_json ? "true" : "false", worker_sandbox ? "true" : "false",
      (fault_crash_substring.empty() && fault_hang_substring.empty()) ? "false" : "true",
      parent_pid, JsonEscape(index_cache), io_threads, readahead_bytes, simulate_read_latency_us);
}

// One sample's work. Lives in its BatchFill until the batch is finished.
struct SampleTask {
  uint64_t id = 0;  // while in flight
  bool in_flight = false;
  uint64_t session = 0;
  uint64_t seq = 0;
  uint32_t pos = 0;
  uint32_t epoch = 0;
  uint64_t shard_pos = 0;
  uint64_t planned_index = 0;
  uint64_t index = 0;  // what is being decoded: planned or a replacement
  uint32_t replacements = 0;
  uint32_t self_crashes = 0;
  uint32_t deaths = 0;
  uint64_t prefetch_key = 0;  // queued for readahead (0: not)
};

struct SampleOutcome {
  uint32_t status = ring::kSampleOk;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;
  uint64_t bytes = 0;
  uint64_t index = 0;
};

struct BatchFill {
  uint64_t seq = 0;
  uint32_t slot = 0;
  uint32_t epoch = 0;
  uint64_t batch_in_epoch = 0;
  uint32_t remaining = 0;
  std::vector<std::unique_ptr<SampleTask>> tasks;  // one per sample, stable addresses
  std::vector<SampleOutcome> outcomes;
  bool failed = false;
  std::string error;
};

struct FailureRecord {
  std::string path;
  std::string reason;
  uint64_t count = 0;
};

struct FailureEntry {
  uint64_t index = 0;
  std::string reason;
  uint64_t count = 0;
};

// The failure memory of one dataset (Engine::failure_memory_).
struct DatasetFailureLog {
  std::string dataset;
  uint64_t samples_failed = 0;
  uint64_t failures_not_kept = 0;
  // At most kKeptFailuresPerDataset entries, whose paths and reasons hold at
  // most kKeptFailureBytesPerDataset bytes.
  std::map<std::string, FailureEntry> by_path;
  size_t bytes = 0;
};

struct Session {
  // Constant after Attach.
  std::string id;
  uint64_t number = 0;
  v1::AttachRequest req;
  std::shared_ptr<const Dataset> dataset;
  SamplerOptions sampler;
  image::PipelineParams params;
  v1::PipelineSpec pipeline;  // effective
  bool variable_size = false;
  uint64_t sample_bytes = 0;  // capacity per sample
  uint64_t shard_size = 0;
  uint64_t batches_per_epoch = 0;
  uint64_t total_batches = 0;  // 0: without end
  uint64_t start_global = 0;   // start_epoch * bpe + start_batch
  uint32_t slots = 0;
  bool policy_error = false;
  std::unique_ptr<RingOwner> ring;
  int64_t created_ns = 0;
  std::thread watcher;
  std::atomic<bool> stop_watch{false};

  // Guarded by Engine::mu_.
  uint64_t next_fill_seq = 0;
  std::map<uint64_t, BatchFill> filling;
  std::deque<SampleTask*> queue;  // front first
  std::vector<uint8_t> slot_busy;
  std::map<uint32_t, std::vector<uint64_t>> shards;  // by epoch
  uint64_t batches_produced = 0;
  uint64_t batches_consumed = 0;
  uint64_t samples_produced = 0;
  uint64_t samples_failed = 0;
  uint64_t samples_replaced = 0;
  uint32_t current_epoch = 0;
  std::map<uint64_t, FailureRecord> failures;  // by dataset index
  std::deque<v1::SessionEvent> events;
  bool ended = false;
  std::string end_reason;
  bool keepalive_open = false;
  int64_t keepalive_closed_ns = 0;
  std::deque<std::pair<int64_t, uint64_t>> rate_window;  // (ns, samples_produced)
  LatencyHistogram read_latency;
  LatencyHistogram decode_latency;
  LatencyHistogram augment_latency;
};

struct WorkerSlot {
  uint32_t id = 0;
  pid_t pid = -1;
  UniqueFd channel;
  std::string state = "starting";
  std::deque<uint64_t> in_flight;  // task ids, oldest first
  int64_t last_progress_ns = 0;
  int64_t respawn_at_ns = 0;  // when dead: when to start again
  int64_t started_ns = 0;
  bool dead = true;
  bool hung = false;         // killed by us: it hung, or answered out of order
  bool unsendable = false;   // a send to it failed; its death comes by epoll
  uint64_t restarts = 0;
  uint64_t crashes = 0;
  uint64_t samples_done = 0;
  uint64_t samples_failed = 0;
  double cpu_seconds_before = 0;  // of earlier incarnations
};

struct ResultView {
  const worker::ResultMsg* msg;
};

namespace {

bool SendWithFd(int channel, const void* msg, size_t bytes, int fd) {
  struct iovec iov = {const_cast<void*>(msg), bytes};
  struct msghdr mh = {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof(control));
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(channel, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

void SendMapRing(WorkerSlot& w, const Session& s) {
  worker::MapRingMsg m;
  m.ring_id = s.number;
  m.data_offset = s.ring->geometry().data_offset;
  m.data_bytes = s.ring->geometry().slot_bytes * s.slots;
  SendWithFd(w.channel.get(), &m, sizeof(m), s.ring->fd());
}

}  // namespace

Engine::Engine(DaemonConfig config) : config_(std::move(config)) {}

Engine::~Engine() { Stop(); }

std::string Engine::state() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

absl::Status Engine::Start() {
  start_ns_ = MonotonicNs();
  auto root = DataRoot::Open(config_.data_root);
  if (!root.ok()) return root.status();
  data_root_ = std::move(*root);
  if (config_.io_threads > 0 && config_.readahead_bytes > 0) {
    prefetch_ = std::make_unique<Prefetcher>(data_root_->fd(), config_.io_threads,
                                             config_.readahead_bytes, config_.max_file_bytes,
                                             config_.simulate_read_latency_us);
  }
  if (!config_.index_cache.empty()) {
    // Its parents, as needed; Dataset::Open makes the folder itself 0700.
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(config_.index_cache).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) {
      spdlog::warn("index cache {} cannot be created ({}); indexes are not cached",
                   config_.index_cache, ec.message());
      config_.index_cache.clear();
    }
  }
  shm_tag_ = absl::StrFormat(
      "%08x", static_cast<uint32_t>(std::hash<std::string>{}(
                  absl::StrCat(config_.socket_path, ":", ::getuid()))));
  int swept = SweepStaleRings(shm_tag_);
  if (swept > 0) spdlog::info("swept {} stale shared-memory ring(s) of an earlier daemon", swept);

  worker_binary_ = config_.worker_binary;
  if (worker_binary_.empty()) {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return PosixError("readlink /proc/self/exe", errno);
    self[n] = '\0';
    std::string dir(self);
    dir.resize(dir.rfind('/'));
    worker_binary_ = dir + "/stoker-worker";
  }
  if (::access(worker_binary_.c_str(), X_OK) != 0) {
    return PosixError("worker binary " + worker_binary_, errno);
  }

  epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_.valid()) return PosixError("epoll_create1", errno);
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return PosixError("eventfd", errno);
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = UINT64_MAX;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev);

  uint32_t n = config_.workers != 0 ? config_.workers
                                    : std::max(1u, std::thread::hardware_concurrency());
  {
    std::lock_guard<std::mutex> l(mu_);
    for (uint32_t i = 0; i < n; ++i) {
      auto w = std::make_unique<WorkerSlot>();
      w->id = i;
      absl::Status st = SpawnWorkerLocked(*w);
      if (!st.ok()) return st;
      workers_.push_back(std::move(w));
    }
    state_ = "serving";
  }
  dispatcher_ = std::thread([this] { DispatchLoop(); });
  ticker_ = std::thread([this] { TickerLoop(); });
  spdlog::info("engine serving: {} worker(s), data root {}", n, data_root_->path());
  return absl::OkStatus();
}

absl::Status Engine::SpawnWorkerLocked(WorkerSlot& w) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return PosixError("socketpair", errno);
  }
  UniqueFd ours(sv[0]);
  // Above the range the child's dup2 targets use, so no dup2 is a no-op
  // that would leave FD_CLOEXEC set.
  UniqueFd theirs(::fcntl(sv[1], F_DUPFD_CLOEXEC, 10));
  ::close(sv[1]);
  UniqueFd root(::fcntl(data_root_->fd(), F_DUPFD_CLOEXEC, 10));
  if (!theirs.valid() || !root.valid()) return PosixError("fcntl F_DUPFD_CLOEXEC", errno);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), worker::kChannelFd);
  posix_spawn_file_actions_adddup2(&fa, root.get(), worker::kDataRootFd);
  std::string parent = std::to_string(::getpid());
  std::string id = std::to_string(w.id);
  char* argv[] = {const_cast<char*>(worker_binary_.c_str()),
                  const_cast<char*>("--parent"),
                  parent.data(),
                  const_cast<char*>("--id"),
                  id.data(),
                  const_cast<char*>(config_.worker_sandbox ? "--sandbox" : "--no-sandbox"),
                  nullptr};
  pid_t pid = -1;
  // posix_spawn uses vfork-style cloning and runs no atfork handlers: safe in
  // a process whose gRPC threads are running.
  int rc = ::posix_spawn(&pid, worker_binary_.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return PosixError("posix_spawn " + worker_binary_, rc);

  w.pid = pid;
  w.channel = std::move(ours);
  w.dead = false;
  w.hung = false;
  w.unsendable = false;
  w.state = "idle";
  w.in_flight.clear();
  w.started_ns = MonotonicNs();
  w.last_progress_ns = w.started_ns;
  struct epoll_event ev = {};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = w.id;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, w.channel.get(), &ev);
  for (auto& [sid, s] : sessions_) SendMapRing(w, *s);
  spdlog::debug("worker {} started, pid {}", w.id, pid);
  return absl::OkStatus();
}

void Engine::Wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)n;
}

absl::Status Engine::RoomForSessionLocked() const {
  if (state_ != "serving") return absl::UnavailableError(absl::StrCat("stokerd is ", state_));
  if (sessions_.size() >= config_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the daemon serves its maximum of ", config_.max_sessions, " sessions"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::AttachResponse> Engine::Attach(const v1::AttachRequest& req) {
  {
    // Refused early, before any indexing; asked again when the session is
    // added (Attaches that pass here together must not all get in).
    std::lock_guard<std::mutex> l(mu_);
    if (absl::Status room = RoomForSessionLocked(); !room.ok()) return room;
  }
  if (req.batch_size() == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (req.batch_size() > ring::kMaxBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size ", req.batch_size(), " is over the limit of ",
                     ring::kMaxBatchSize));
  }
  const uint32_t world = req.world_size() == 0 ? 1 : req.world_size();
  if (req.rank() >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", req.rank(), " is not below world_size ", world));
  }
  const uint32_t slots = req.ring_slots() == 0 ? kDefaultSlots : req.ring_slots();
  if (slots < 2 || slots > kMaxSlotsPerSession) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring_slots must be within 2..", kMaxSlotsPerSession));
  }
  if (req.failure_policy() != v1::FAILURE_POLICY_UNSPECIFIED &&
      req.failure_policy() != v1::FAILURE_POLICY_SKIP &&
      req.failure_policy() != v1::FAILURE_POLICY_ERROR) {
    return absl::InvalidArgumentError("unknown failure_policy");
  }
  auto effective = pipeline::Effective(req.pipeline(), req.batch_size());
  if (!effective.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", effective.status().message()));
  }
  auto params = LowerPipeline(*effective);
  if (!params.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: ", params.status().message()));
  }
  if (req.dataset().empty()) return absl::InvalidArgumentError("dataset is empty");
  if (req.dataset().size() > kMaxDatasetBytes) {
    return absl::InvalidArgumentError(absl::StrCat("dataset is ", req.dataset().size(),
                                                   " bytes long, over the limit of ",
                                                   kMaxDatasetBytes));
  }
  if (!v1::DatasetFormat_IsValid(req.format())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dataset format ", req.format()));
  }

  // Index the dataset (outside mu_: it may take seconds), once however many
  // Attaches ask for it at the same time; kept by its canonical name and the
  // format asked for.
  auto resolved = Dataset::CanonicalName(*data_root_, req.dataset());
  if (!resolved.ok()) return resolved.status();
  IndexOptions io;
  io.cache_dir = config_.index_cache;
  io.allow_empty = req.allow_empty();
  io.skip_unsupported_formats = req.skip_unsupported_formats();
  const std::string ds_key = DatasetKey(*resolved, req.format(), io);  // of the gate and the index
  std::shared_ptr<std::mutex> gate;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::shared_ptr<std::mutex>& g = index_gates_[ds_key];
    if (g == nullptr) g = std::make_shared<std::mutex>();
    gate = g;
  }
  // The gate leaves the table with its last user (keys are client text: a
  // table that only grew would keep every pattern ever asked for).
  absl::Cleanup drop_gate = [this, &ds_key, &gate] {
    std::lock_guard<std::mutex> l(mu_);
    auto it = index_gates_.find(ds_key);
    if (it != index_gates_.end() && it->second == gate && gate.use_count() == 2) {
      index_gates_.erase(it);
    }
  };
  std::unique_lock<std::mutex> gate_lock(*gate);
  std::shared_ptr<const Dataset> ds;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = datasets_.find(ds_key);
    if (it != datasets_.end()) ds = it->second;
  }
  if (ds != nullptr) {
    std::string why;
    if (!ds->Unchanged(*data_root_, &why)) {
      spdlog::info("dataset {} changed since it was indexed ({}); indexing again", ds->name(), why);
      ds = nullptr;
    }
  }
  if (ds == nullptr) {
    const int64_t t0 = MonotonicNs();
    const std::string what(req.dataset());
    io.progress = [what, t0](uint64_t n) {
      spdlog::info("indexing {}: {} entries so far ({:.1f} s)", what, n, (MonotonicNs() - t0) / 1e9);
    };
    auto opened = Dataset::Open(*data_root_, req.dataset(),
                                static_cast<DatasetFormat>(req.format()), io);
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
    std::lock_guard<std::mutex> l(mu_);
    datasets_[DatasetKey(ds->name(), req.format(), io)] = ds;
  }
  gate_lock.unlock();
  std::move(drop_gate).Invoke();

  auto s = std::make_shared<Session>();
  s->req = req;
  s->dataset = ds;
  s->params = *params;
  s->pipeline = *std::move(effective);
  s->sampler.seed = req.seed();
  s->sampler.shuffle = req.shuffle();
  s->sampler.rank = req.rank();
  s->sampler.world_size = world;
  s->sampler.batch_size = req.batch_size();
  s->sampler.drop_last = req.drop_last();
  s->shard_size = ShardSize(ds->size(), s->sampler);
  if (req.batch_size() > s->shard_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size ", req.batch_size(), " is larger than this rank's shard of the dataset (",
        s->shard_size, " of ", ds->size(), " samples)"));
  }
  s->batches_per_epoch = BatchesPerEpoch(ds->size(), s->sampler);
  s->start_global = uint64_t{req.start_epoch()} * s->batches_per_epoch + req.start_batch();
  if (req.start_batch() >= s->batches_per_epoch) {
    return absl::OutOfRangeError(absl::StrCat("start_batch ", req.start_batch(),
                                              " is not below the batches per epoch, ",
                                              s->batches_per_epoch));
  }
  if (req.epochs() != 0) {
    uint64_t end = uint64_t{req.epochs()} * s->batches_per_epoch;
    if (s->start_global >= end) {
      return absl::OutOfRangeError("the start position is at or past the last epoch");
    }
    s->total_batches = end - s->start_global;
  }
  s->slots = slots;
  s->policy_error = req.failure_policy() == v1::FAILURE_POLICY_ERROR;
  s->variable_size = s->params.out_height == 0;
  s->sample_bytes = image::MaxSampleBytes(s->params);
  const uint64_t ring_bytes = s->sample_bytes * req.batch_size() * slots;
  if (s->sample_bytes == 0 || ring_bytes / slots / req.batch_size() != s->sample_bytes ||
      ring_bytes > config_.max_ring_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the ring would take ", ring_bytes, " bytes (", slots, " slots x ", req.batch_size(),
        " samples x ", s->sample_bytes, " bytes), over this daemon's --max-ring-bytes of ",
        config_.max_ring_bytes));
  }
  struct statvfs vfs;
  if (::statvfs("/dev/shm", &vfs) == 0) {
    uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    if (ring_bytes + (1u << 20) > free_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the ring needs ", ring_bytes, " bytes of /dev/shm but only ", free_bytes,
          " are free: give the container a larger /dev/shm (e.g. --shm-size) or use fewer "
          "ring_slots or a smaller batch"));
    }
  }

  // The ring is made outside mu_: reserving gigabytes of /dev/shm takes a
  // while, and mu_ also serves the dispatcher, the heartbeats and Status.
  {
    std::lock_guard<std::mutex> l(mu_);
    s->number = next_session_number_++;
  }
  s->id = absl::StrFormat("%s-%d", shm_tag_, s->number);
  RingSpec rs;
  rs.slot_count = slots;
  rs.batch_size = req.batch_size();
  if (s->variable_size) {
    rs.variable_bytes = s->sample_bytes;
  } else {
    rs.sample_bytes = s->sample_bytes;
  }
  rs.height = s->params.out_height;
  rs.width = s->params.out_width;
  rs.channels = 3;
  rs.dtype = s->params.dtype;
  rs.layout = s->params.layout;
  rs.session_number = s->number;
  rs.batches_per_epoch = s->batches_per_epoch;
  rs.total_batches = s->total_batches;
  rs.mode = config_.shm_mode;
  const std::string shm_name =
      absl::StrFormat("/stoker-%s-%d-%d", shm_tag_, ::getpid(), s->number);
  auto ring = RingOwner::Create(shm_name, rs);
  if (!ring.ok()) return ring.status();
  s->ring = std::move(*ring);

  std::unique_lock<std::mutex> l(mu_);
  // (Refused now, the ring is unlinked as s goes.)
  if (absl::Status room = RoomForSessionLocked(); !room.ok()) return room;
  s->slot_busy.assign(slots, 0);
  s->created_ns = MonotonicNs();
  s->keepalive_closed_ns = s->created_ns;
  s->current_epoch = req.start_epoch();
  sessions_[s->id] = s;
  ++sessions_total_;
  for (auto& w : workers_) {
    if (!w->dead) SendMapRing(*w, *s);
  }
  s->watcher = std::thread([this, s] { WatchReleases(s); });

  v1::AttachResponse resp;
  resp.set_session_id(s->id);
  auto* ri = resp.mutable_ring();
  const ring::Geometry& g = s->ring->geometry();
  ri->set_shm_name(shm_name);
  ri->set_total_bytes(g.total_bytes);
  ri->set_slot_count(slots);
  ri->set_slot_bytes(g.slot_bytes);
  ri->set_sample_bytes(s->variable_size ? 0 : s->sample_bytes);
  ri->set_layout_version(ring::kLayoutVersion);
  ri->set_data_offset(g.data_offset);
  ri->set_descriptor_offset(g.descriptor_offset);
  resp.set_dataset_size(ds->size());
  resp.set_shard_size(s->shard_size);
  resp.set_batches_per_epoch(s->batches_per_epoch);
  resp.set_total_batches(s->total_batches);
  for (const auto& c : ds->class_names()) resp.add_class_names(c);
  resp.set_height(s->params.out_height);
  resp.set_width(s->params.out_width);
  resp.set_channels(3);
  *resp.mutable_effective_pipeline() = s->pipeline;
  resp.set_heartbeat_timeout_ms(config_.heartbeat_timeout_ms);
  spdlog::info(
      "session {} attached: client '{}' pid {}, dataset {} ({} samples), pipeline {}, batch {}, "
      "rank {}/{}, {} slots of {} bytes, ring {}",
      s->id, req.client_name(), req.client_pid(), ds->name(), ds->size(),
      pipeline::Describe(s->pipeline), req.batch_size(), req.rank(), world, slots, g.slot_bytes,
      shm_name);
  l.unlock();
  Wake();
  return resp;
}

void Engine::WatchReleases(std::shared_ptr<Session> s) {
  auto* h = s->ring->header();
  uint32_t last = h->release_count.load(std::memory_order_acquire);
  while (!s->stop_watch.load()) {
    ring::FutexWait(&h->release_count, last, 200);
    uint32_t now = h->release_count.load(std::memory_order_acquire);
    if (now != last) {
      last = now;
      Wake();
    }
  }
}

absl::Status Engine::Detach(const std::string& session_id, const std::string& why) {
  std::vector<std::shared_ptr<Session>> removed;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (sessions_.find(session_id) == sessions_.end()) {
      return NoSession(session_id);
    }
    RemoveSessionLocked(session_id, why, &removed);
  }
  FinalizeRemoved(removed);
  return absl::OkStatus();
}

void Engine::RemoveSessionLocked(const std::string& id, const std::string& why,
                                 std::vector<std::shared_ptr<Session>>* removed) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  std::shared_ptr<Session> s = it->second;
  sessions_.erase(it);
  s->ended = true;
  s->end_reason = why;
  for (auto& [seq, fill] : s->filling) {
    for (auto& t : fill.tasks) {
      if (t->in_flight) in_flight_.erase(t->id);
      if (t->prefetch_key != 0 && prefetch_ != nullptr) prefetch_->Done(t->prefetch_key);
      t->prefetch_key = 0;
    }
  }
  s->queue.clear();
  worker::UnmapRingMsg m;
  m.ring_id = s->number;
  for (auto& w : workers_) {
    if (!w->dead) SendWithFd(w->channel.get(), &m, sizeof(m), -1);
  }
  auto* h = s->ring->header();
  h->daemon_state.store(ring::kStopped, std::memory_order_release);
  ring::FutexWakeAll(&h->daemon_state);
  for (uint32_t slot = 0; slot < s->slots; ++slot) {
    ring::FutexWakeAll(&s->ring->descriptor(slot)->state);
  }
  spdlog::info("session {} ended: {} ({} batches produced, {} samples failed)", s->id, why,
               s->batches_produced, s->samples_failed);
  removed->push_back(s);
  cv_.notify_all();
}

void Engine::FinalizeRemoved(std::vector<std::shared_ptr<Session>>& removed) {
  for (auto& s : removed) {
    s->stop_watch.store(true);
    ring::FutexWakeAll(&s->ring->header()->release_count);
    if (s->watcher.joinable()) s->watcher.join();
    std::lock_guard<std::mutex> l(mu_);
    s->filling.clear();
    s->ring.reset();  // unmaps and unlinks
  }
  removed.clear();
}

absl::Status Engine::KeepAlive(const std::string& session_id,
                               const std::function<bool()>& cancelled,
                               const std::function<bool(const v1::SessionEvent&)>& send) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> l(mu_);
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
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(200),
                   [&] { return !s->events.empty() || s->ended; });
      out.swap(s->events);
      ended = s->ended;
      reason = s->end_reason;
    }
    for (const auto& e : out) peer_ok = peer_ok && send(e);
    if (ended) {
      v1::SessionEvent e;
      e.set_kind(v1::SessionEvent::KIND_ENDED);
      e.set_message(reason);
      send(e);
      return absl::OkStatus();
    }
    if (!peer_ok || cancelled()) {
      std::vector<std::shared_ptr<Session>> removed;
      {
        std::lock_guard<std::mutex> l(mu_);
        s->keepalive_open = false;
        if (!s->ended) {
          ++sessions_reclaimed_;
          RemoveSessionLocked(s->id, "client went away (its KeepAlive stream closed)", &removed);
        }
      }
      FinalizeRemoved(removed);
      return absl::CancelledError("client went away");
    }
  }
}

const std::vector<uint64_t>& ShardFor(Session& s, uint32_t epoch) {
  auto it = s.shards.find(epoch);
  if (it != s.shards.end()) return it->second;
  // A ring spans few epochs at once; keep the last four computed.
  while (s.shards.size() >= 4) s.shards.erase(s.shards.begin());
  return s.shards[epoch] = ShardIndices(s.dataset->size(), s.sampler, epoch);
}

void Engine::StartBatchesLocked() {
  if (state_ != "serving") return;
  for (auto& [id, sp] : sessions_) {
    Session& s = *sp;
    while ((s.total_batches == 0 || s.next_fill_seq < s.total_batches) &&
           s.filling.size() < s.slots) {
      const uint64_t seq = s.next_fill_seq;
      const uint32_t slot = static_cast<uint32_t>(seq % s.slots);
      ring::SlotDescriptor* d = s.ring->descriptor(slot);
      if (s.slot_busy[slot]) {
        if (d->state.load(std::memory_order_acquire) != ring::kFree) break;
        s.slot_busy[slot] = 0;
        ++s.batches_consumed;
      }
      const uint64_t global = s.start_global + seq;
      const uint32_t epoch = static_cast<uint32_t>(global / s.batches_per_epoch);
      const uint64_t b = global % s.batches_per_epoch;
      const std::vector<uint64_t>& shard = ShardFor(s, epoch);
      const uint64_t first = b * s.sampler.batch_size;
      const uint32_t count =
          static_cast<uint32_t>(std::min<uint64_t>(s.sampler.batch_size, s.shard_size - first));
      BatchFill& f = s.filling[seq];
      f.seq = seq;
      f.slot = slot;
      f.epoch = epoch;
      f.batch_in_epoch = b;
      f.remaining = count;
      f.outcomes.assign(count, SampleOutcome{});
      f.tasks.reserve(count);
      for (uint32_t i = 0; i < count; ++i) {
        auto owned = std::make_unique<SampleTask>();
        SampleTask& t = *owned;
        t.session = s.number;
        t.seq = seq;
        t.pos = i;
        t.epoch = epoch;
        t.shard_pos = first + i;
        t.planned_index = shard[first + i];
        t.index = t.planned_index;
        s.queue.push_back(&t);
        if (prefetch_ != nullptr) {
          t.prefetch_key = next_prefetch_key_++;
          const Dataset& ds = *s.dataset;
          prefetch_->Enqueue(t.prefetch_key, std::string(ds.path(t.index)), ds.has_range(t.index),
                             ds.range_offset(t.index), ds.range_length(t.index));
        }
        f.tasks.push_back(std::move(owned));
      }
      d->sequence = seq;
      d->batch_in_epoch = b;
      d->epoch = epoch;
      d->sample_count = count;
      d->batch_status = ring::kBatchOk;
      d->error[0] = '\0';
      d->state.store(ring::kFilling, std::memory_order_release);
      s.slot_busy[slot] = 1;
      s.current_epoch = epoch;
      ++s.next_fill_seq;
    }
  }
}

void Engine::DispatchLocked() {
  if (sessions_.empty()) return;
  std::vector<Session*> order;
  order.reserve(sessions_.size());
  for (auto& [id, s] : sessions_) order.push_back(s.get());
  // Fill the emptiest workers first; one task at a time, sessions in turn.
  for (uint32_t depth = 0; depth < std::max(1u, config_.worker_queue_depth); ++depth) {
    for (auto& wp : workers_) {
      WorkerSlot& w = *wp;
      if (w.dead || w.hung || w.unsendable || w.in_flight.size() > depth) continue;
      Session* pick = nullptr;
      for (size_t k = 0; k < order.size(); ++k) {
        Session* cand = order[(rr_cursor_ + k) % order.size()];
        if (!cand->queue.empty()) {
          pick = cand;
          rr_cursor_ = (rr_cursor_ + k + 1) % order.size();
          break;
        }
      }
      if (pick == nullptr) return;
      SampleTask* t = pick->queue.front();
      BatchFill& f = pick->filling[t->seq];
      if (t->prefetch_key != 0 && prefetch_ != nullptr) {
        prefetch_->Done(t->prefetch_key);
        t->prefetch_key = 0;
      }
      worker::TaskMsg msg;
      const std::string_view path = pick->dataset->path(t->index);
      if (path.size() > worker::kMaxPathBytes) {
        pick->queue.pop_front();
        FailSampleLocked(*pick, *t, "path too long");
        continue;
      }
      msg.path_bytes = static_cast<uint32_t>(path.size());
      msg.task_id = next_task_id_++;
      msg.ring_id = pick->number;
      const uint64_t slot_base = pick->ring->geometry().slot_bytes * f.slot;
      if (pick->variable_size) {
        msg.out_offset = slot_base;
        msg.out_capacity = pick->ring->geometry().slot_bytes;
      } else {
        msg.out_offset = slot_base + pick->sample_bytes * t->pos;
        msg.out_capacity = pick->sample_bytes;
      }
      msg.max_file_bytes = config_.max_file_bytes;
      if (pick->dataset->has_range(t->index)) {
        msg.has_range = 1;
        msg.file_offset = pick->dataset->range_offset(t->index);
        msg.file_length = pick->dataset->range_length(t->index);
      }
      msg.key.seed = pick->sampler.seed;
      msg.key.epoch = t->epoch;
      msg.key.dataset_index = t->index;
      msg.params = pick->params;
      msg.simulate_latency_us = config_.simulate_read_latency_us;
      if (!config_.fault_crash_substring.empty() &&
          path.find(config_.fault_crash_substring) != std::string_view::npos) {
        msg.fault = worker::kFaultCrash;
      } else if (!config_.fault_hang_substring.empty() &&
                 path.find(config_.fault_hang_substring) != std::string_view::npos) {
        msg.fault = worker::kFaultHang;
      }
      std::memcpy(msg.path, path.data(), path.size());
      if (!SendWithFd(w.channel.get(), &msg, worker::TaskHeaderBytes() + path.size(), -1)) {
        // The worker is gone (killed from outside, say) or stuck; its death
        // is handled from epoll, or by the hang check. Leave the task queued.
        // Not `hung`: a send that failed says nothing about the sample the
        // worker was on, and must not count as a crash it caused.
        w.unsendable = true;
        continue;
      }
      pick->queue.pop_front();
      t->id = msg.task_id;
      t->in_flight = true;
      in_flight_[t->id] = t;
      if (w.in_flight.empty()) w.last_progress_ns = MonotonicNs();
      w.in_flight.push_back(t->id);
      w.state = "busy";
    }
  }
}

Session* Engine::FindByNumberLocked(uint64_t number) {
  for (auto& [id, s] : sessions_) {
    if (s->number == number) return s.get();
  }
  return nullptr;
}

void Engine::OnResultLocked(WorkerSlot& w, const ResultView& rv) {
  const worker::ResultMsg& r = *rv.msg;
  if (w.in_flight.empty() || w.in_flight.front() != r.task_id) {
    spdlog::error("worker {} (pid {}) answered out of order; replacing it", w.id, w.pid);
    ::kill(w.pid, SIGKILL);
    w.hung = true;
    return;
  }
  w.in_flight.pop_front();
  w.last_progress_ns = MonotonicNs();
  if (w.in_flight.empty()) w.state = "idle";
  auto it = in_flight_.find(r.task_id);
  if (it == in_flight_.end()) return;  // its session is gone
  SampleTask* t = it->second;
  in_flight_.erase(it);
  t->in_flight = false;
  Session* s = FindByNumberLocked(t->session);
  if (s == nullptr) return;
  auto fit = s->filling.find(t->seq);
  if (fit == s->filling.end()) return;
  BatchFill& f = fit->second;
  if (r.code != 0) {
    ++w.samples_failed;
    std::string reason(r.reason, strnlen(r.reason, sizeof(r.reason)));
    FailSampleLocked(*s, *t, reason.empty() ? "decode failed" : reason);
    return;
  }
  ++w.samples_done;
  s->read_latency.Add(r.read_ns);
  s->decode_latency.Add(r.decode_ns);
  s->augment_latency.Add(r.augment_ns);
  const uint64_t want = uint64_t{r.height} * r.width * r.channels *
                        ring::DTypeBytes(s->params.dtype);
  const uint64_t capacity =
      s->variable_size ? s->ring->geometry().slot_bytes : s->sample_bytes;
  if (r.bytes != want || r.bytes > capacity || (!s->variable_size && r.bytes != s->sample_bytes)) {
    FailSampleLocked(*s, *t, "worker reported a sample size that does not fit its slot");
    return;
  }
  SampleOutcome& o = f.outcomes[t->pos];
  o.status = t->index == t->planned_index ? ring::kSampleOk : ring::kSampleReplaced;
  o.height = r.height;
  o.width = r.width;
  o.channels = r.channels;
  o.bytes = r.bytes;
  o.index = t->index;
  if (o.status == ring::kSampleReplaced) ++s->samples_replaced;
  ++s->samples_produced;
  ++samples_total_;
  if (--f.remaining == 0) FinishBatchLocked(*s, t->seq);
}

void Engine::FailSampleLocked(Session& s, SampleTask& t, const std::string& reason) {
  BatchFill& f = s.filling[t.seq];
  const std::string path = s.dataset->display(t.index);
  FailureRecord& rec = s.failures[t.index];
  if (rec.count++ == 0) {
    rec.path = path;
    rec.reason = reason;
    spdlog::warn("session {}: sample {} ({}) failed: {}", s.id, t.index, path, reason);
  }
  RememberFailureLocked(s.dataset->name(), t.index, path, reason);
  ++s.samples_failed;
  ++samples_failed_total_;
  if (!s.policy_error && t.replacements < kMaxReplacements) {
    // Replace it by the next sample of the shard not known to be bad: the
    // choice depends only on the shard order and on which files are bad.
    const std::vector<uint64_t>& shard = ShardFor(s, t.epoch);
    for (uint64_t k = 1; k <= s.shard_size && t.replacements < kMaxReplacements; ++k) {
      uint64_t cand = shard[(t.shard_pos + k) % s.shard_size];
      if (cand == t.index || s.failures.count(cand) != 0) continue;
      t.index = cand;
      ++t.replacements;
      t.self_crashes = 0;
      t.deaths = 0;
      s.queue.push_front(&t);
      return;
    }
  }
  SampleOutcome& o = f.outcomes[t.pos];
  o.status = ring::kSampleFailed;
  o.index = t.index;
  if (s.policy_error && !f.failed) {
    f.failed = true;
    f.error = absl::StrCat("sample ", t.index, " (", path, ") failed: ", reason);
    v1::SessionEvent e;
    e.set_kind(v1::SessionEvent::KIND_SAMPLE_FAILED);
    e.set_message(f.error);
    e.set_path(path);
    e.set_dataset_index(t.index);
    s.events.push_back(std::move(e));
    cv_.notify_all();
  }
  if (--f.remaining == 0) FinishBatchLocked(s, t.seq);
}

void Engine::RememberFailureLocked(const std::string& dataset, uint64_t index,
                                   const std::string& path, const std::string& reason) {
  auto it = std::find_if(failure_memory_.begin(), failure_memory_.end(),
                         [&](const DatasetFailureLog& d) { return d.dataset == dataset; });
  if (it == failure_memory_.end()) {
    if (failure_memory_.size() >= kKeptFailureDatasets) failure_memory_.pop_back();
    failure_memory_.emplace_front();
    failure_memory_.front().dataset = dataset;
  } else if (it != failure_memory_.begin()) {
    failure_memory_.splice(failure_memory_.begin(), failure_memory_, it);
  }
  DatasetFailureLog& d = failure_memory_.front();
  ++d.samples_failed;
  auto e = d.by_path.find(path);
  if (e == d.by_path.end()) {
    const size_t bytes = path.size() + reason.size();
    if (d.by_path.size() >= kKeptFailuresPerDataset ||
        d.bytes + bytes > kKeptFailureBytesPerDataset) {
      ++d.failures_not_kept;
      return;
    }
    d.bytes += bytes;
    e = d.by_path.emplace(path, FailureEntry{index, reason, 0}).first;
  }
  ++e->second.count;
}

void Engine::FinishBatchLocked(Session& s, uint64_t seq) {
  auto it = s.filling.find(seq);
  BatchFill& f = it->second;
  ring::SlotDescriptor* d = s.ring->descriptor(f.slot);
  ring::SampleRecord* recs = ring::Records(d);
  const ring::Geometry& g = s.ring->geometry();
  uint8_t* data = s.ring->slot_data(f.slot);
  for (uint32_t i = 0; i < f.outcomes.size(); ++i) {
    const SampleOutcome& o = f.outcomes[i];
    ring::SampleRecord& r = recs[i];
    r.planned_index = f.tasks[i]->planned_index;
    r.dataset_index = o.index;
    r.label = s.dataset->label(o.index);
    r.status = o.status;
    r.offset = s.variable_size ? 0 : s.sample_bytes * i;
    if (o.status == ring::kSampleFailed) {
      // Zeros of the output shape, so that a fixed-shape batch keeps it.
      r.height = s.params.out_height;
      r.width = s.params.out_width;
      r.channels = 3;
      r.bytes = s.variable_size ? 0 : s.sample_bytes;
      if (r.bytes != 0) std::memset(data + r.offset, 0, r.bytes);
    } else {
      r.height = o.height;
      r.width = o.width;
      r.channels = o.channels;
      r.bytes = o.bytes;
    }
  }
  (void)g;
  if (f.failed) {
    d->batch_status = ring::kBatchFailed;
    size_t n = std::min<size_t>(f.error.size(), ring::kErrorBytes - 1);
    std::memcpy(d->error, f.error.data(), n);
    d->error[n] = '\0';
  }
  d->state.store(ring::kReady, std::memory_order_release);
  ring::FutexWakeAll(&d->state);
  ++s.batches_produced;
  s.filling.erase(it);
}

void Engine::OnWorkerDeathLocked(WorkerSlot& w, const std::string& cause) {
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, w.channel.get(), nullptr);
  w.channel.Reset();
  ::kill(w.pid, SIGKILL);
  int wstatus = 0;
  pid_t r = ::waitpid(w.pid, &wstatus, 0);
  bool self_inflicted = w.hung;
  std::string why = cause;
  if (r == w.pid && WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    why = absl::StrCat(cause, ", killed by signal ", sig, " (", strsignal(sig), ")");
    if (sig != SIGKILL) self_inflicted = true;
  } else if (r == w.pid && WIFEXITED(wstatus)) {
    why = absl::StrCat(cause, ", exited with status ", WEXITSTATUS(wstatus));
    self_inflicted = true;
  }
  const bool shutting_down = stopping_.load();
  if (!shutting_down) {
    spdlog::warn("worker {} (pid {}) died: {}; {} sample(s) in flight will be redone", w.id,
                 w.pid, why, w.in_flight.size());
  }
  // The oldest task is the one the worker was on; the rest were only queued.
  bool first = true;
  std::vector<std::pair<Session*, SampleTask*>> requeue;
  for (uint64_t id : w.in_flight) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) {
      first = false;
      continue;
    }
    SampleTask* t = it->second;
    in_flight_.erase(it);
    t->in_flight = false;
    Session* s = FindByNumberLocked(t->session);
    if (s == nullptr) continue;
    if (first) {
      first = false;
      ++t->deaths;
      if (self_inflicted) ++t->self_crashes;
      if (t->self_crashes >= kMaxSelfCrashes || t->deaths >= kMaxAnyDeaths) {
        FailSampleLocked(*s, *t,
                         absl::StrCat("a worker died ", t->deaths, " times on this file (last: ",
                                      why, ")"));
        continue;
      }
    }
    requeue.emplace_back(s, t);
  }
  for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) it->first->queue.push_front(it->second);
  w.in_flight.clear();
  w.dead = true;
  w.hung = false;
  w.state = "restarting";
  ++w.crashes;
  if (!shutting_down) {
    ++w.restarts;
    ++worker_restarts_total_;
    // Restart at once, unless it keeps dying young.
    const int64_t now = MonotonicNs();
    w.respawn_at_ns = (now - w.started_ns < 1000000000LL) ? now + 500000000LL : now;
  }
}

void Engine::DispatchLoop() {
  struct epoll_event events[64];
  alignas(worker::ResultMsg) char buf[sizeof(worker::ResultMsg) + 64];
  while (!stopping_.load()) {
    int n = ::epoll_wait(epoll_fd_.get(), events, 64, 50);
    std::lock_guard<std::mutex> l(mu_);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == UINT64_MAX) {
        uint64_t v;
        while (::read(wake_fd_.get(), &v, sizeof(v)) > 0) {
        }
        continue;
      }
      WorkerSlot& w = *workers_[events[i].data.u64];
      if (w.dead) continue;
      bool died = false;
      for (;;) {
        ssize_t got = ::recv(w.channel.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got <= 0) {
          died = true;
          break;
        }
        uint32_t type;
        std::memcpy(&type, buf, sizeof(type));
        if (type == worker::kHello && got == sizeof(worker::HelloMsg)) {
          continue;
        }
        if (type != worker::kResult || got != sizeof(worker::ResultMsg)) {
          spdlog::error("worker {} sent a malformed message; replacing it", w.id);
          died = true;
          break;
        }
        ResultView rv{reinterpret_cast<const worker::ResultMsg*>(buf)};
        OnResultLocked(w, rv);
        if (w.hung) break;
      }
      if (died) OnWorkerDeathLocked(w, "channel closed");
    }
    const int64_t now = MonotonicNs();
    for (auto& wp : workers_) {
      WorkerSlot& w = *wp;
      if (!w.dead && !w.in_flight.empty() && !w.hung &&
          now - w.last_progress_ns > int64_t{config_.task_timeout_ms} * 1000000) {
        spdlog::warn("worker {} (pid {}) made no progress for {} ms; killing it", w.id, w.pid,
                     config_.task_timeout_ms);
        w.hung = true;
        ::kill(w.pid, SIGKILL);
      }
      if (w.dead && !stopping_.load() && now >= w.respawn_at_ns) {
        absl::Status st = SpawnWorkerLocked(w);
        if (!st.ok()) {
          spdlog::error("cannot restart worker {}: {}", w.id, st.ToString());
          w.respawn_at_ns = now + 1000000000LL;
        }
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
  while (!stopping_.load()) {
    std::vector<std::shared_ptr<Session>> removed;
    {
      std::unique_lock<std::mutex> l(mu_);
      const int64_t now = MonotonicNs();
      std::vector<std::string> stale;
      std::vector<std::string> cut;
      for (auto& [id, s] : sessions_) {
        if (s->ring->Truncated()) {
          cut.push_back(id);
          continue;
        }
        s->ring->header()->daemon_heartbeat.fetch_add(1, std::memory_order_release);
        s->rate_window.emplace_back(now, s->samples_produced);
        while (s->rate_window.size() > 2 &&
               now - s->rate_window.front().first > 10'000'000'000LL) {
          s->rate_window.pop_front();
        }
        if (!s->keepalive_open &&
            now - s->keepalive_closed_ns > int64_t{config_.keepalive_grace_ms} * 1000000) {
          stale.push_back(id);
        }
      }
      for (const auto& id : stale) {
        ++sessions_reclaimed_;
        RemoveSessionLocked(id, "no KeepAlive stream from the client; reclaimed", &removed);
      }
      for (const auto& id : cut) {
        spdlog::error("session {}: its ring was truncated by another process", id);
        RemoveSessionLocked(id,
                            "its shared-memory ring was truncated by another process (the "
                            "trainer?); the session cannot go on",
                            &removed);
      }
      cv_.wait_for(l, std::chrono::milliseconds(ring::kHeartbeatPeriodMs),
                   [this] { return stopping_.load(); });
    }
    FinalizeRemoved(removed);
  }
}

v1::StatusResponse Engine::GetStatus(bool include_failures, bool include_dataset_failures) {
  v1::StatusResponse r;
  r.set_version(STOKER_VERSION);
  r.set_pid(::getpid());
  r.set_config_json(config_.ToJson());
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = MonotonicNs();
  r.set_uptime_seconds((now - start_ns_) / 1e9);
  r.set_state(state_);
  r.set_sessions_total(sessions_total_);
  r.set_sessions_reclaimed(sessions_reclaimed_);
  r.set_samples_total(samples_total_);
  r.set_samples_failed_total(samples_failed_total_);
  r.set_worker_restarts_total(worker_restarts_total_);
  auto* ra = r.mutable_readahead();
  if (prefetch_ != nullptr) {
    const Prefetcher::Stats st = prefetch_->stats();
    ra->set_threads(config_.io_threads);
    ra->set_budget_bytes(config_.readahead_bytes);
    ra->set_files_read(st.files_read);
    ra->set_bytes_read(st.bytes_read);
    ra->set_cold_files(st.cold_files);
    ra->set_files_cached(st.files_cached);
    ra->set_late(st.late);
    ra->set_window_bytes(st.window_bytes);
    ra->set_window_bytes_max(st.window_bytes_max);
  }
  for (auto& wp : workers_) {
    auto* ws = r.add_workers();
    ws->set_id(wp->id);
    ws->set_pid(wp->dead ? 0 : wp->pid);
    ws->set_state(wp->dead ? "restarting" : wp->state);
    ws->set_restarts(wp->restarts);
    ws->set_crashes(wp->crashes);
    ws->set_samples_done(wp->samples_done);
    ws->set_samples_failed(wp->samples_failed);
    ws->set_in_flight(static_cast<uint32_t>(wp->in_flight.size()));
    ws->set_cpu_seconds(wp->dead ? 0 : ProcessCpuSeconds(wp->pid));
  }
  for (auto& [id, s] : sessions_) {
    auto* ss = r.add_sessions();
    ss->set_session_id(id);
    ss->set_client_name(s->req.client_name());
    ss->set_client_pid(s->req.client_pid());
    ss->set_rank(s->sampler.rank);
    ss->set_world_size(s->sampler.world_size);
    ss->set_dataset(s->dataset->name());
    *ss->mutable_pipeline() = s->pipeline;
    *ss->mutable_requested_pipeline() = s->req.pipeline();
    ss->set_batch_size(s->sampler.batch_size);
    ss->set_batches_produced(s->batches_produced);
    uint64_t consumed = s->ring->header()->batches_consumed.load(std::memory_order_relaxed);
    ss->set_batches_consumed(std::min(consumed, s->batches_produced));
    ss->set_samples_produced(s->samples_produced);
    ss->set_samples_failed(s->samples_failed);
    ss->set_samples_replaced(s->samples_replaced);
    ss->set_current_epoch(s->current_epoch);
    ss->set_ring_slots(s->slots);
    uint32_t by_state[4] = {0, 0, 0, 0};
    for (uint32_t slot = 0; slot < s->slots; ++slot) {
      uint32_t st = s->ring->descriptor(slot)->state.load();
      if (st < 4) ++by_state[st];
    }
    ss->set_ring_ready(by_state[ring::kReady]);
    ss->set_ring_filling(by_state[ring::kFilling]);
    ss->set_ring_leased(by_state[ring::kLeased]);
    // The client writes these; they are figures to show, nothing more.
    const ring::RingHeader* h = s->ring->header();
    uint64_t waits[ring::kWaitBuckets];
    for (uint32_t b = 0; b < ring::kWaitBuckets; ++b) {
      waits[b] = h->client_wait_hist[b].load(std::memory_order_relaxed);
    }
    const uint64_t wait_ns = h->client_wait_ns.load(std::memory_order_relaxed);
    ss->set_client_wait_seconds(wait_ns / 1e9);
    *ss->mutable_client_wait() = Summarize(waits, wait_ns);
    *ss->mutable_read() = Summarize(s->read_latency);
    *ss->mutable_decode() = Summarize(s->decode_latency);
    *ss->mutable_augment() = Summarize(s->augment_latency);
    ss->set_ring_bytes(s->ring->geometry().total_bytes);
    ss->set_shm_name(s->ring->name());
    if (s->rate_window.size() >= 2) {
      const auto& a = s->rate_window.front();
      const auto& b = s->rate_window.back();
      if (b.first > a.first) {
        ss->set_images_per_second((b.second - a.second) / ((b.first - a.first) / 1e9));
      }
    }
    ss->set_uptime_seconds((now - s->created_ns) / 1e9);
    ss->set_keepalive_open(s->keepalive_open);
    if (include_failures) {
      size_t n = 0;
      for (const auto& [index, f] : s->failures) {
        if (n++ >= kMaxFailuresListed) break;
        auto* fr = ss->add_failures();
        fr->set_path(f.path);
        fr->set_reason(f.reason);
        fr->set_count(f.count);
        fr->set_dataset_index(index);
      }
    }
  }
  if (include_dataset_failures) {
    for (const DatasetFailureLog& d : failure_memory_) {
      auto* df = r.add_dataset_failures();
      df->set_dataset(d.dataset);
      df->set_samples_failed(d.samples_failed);
      df->set_failures_not_kept(d.failures_not_kept);
      std::vector<const std::pair<const std::string, FailureEntry>*> order;
      order.reserve(d.by_path.size());
      for (const auto& kv : d.by_path) order.push_back(&kv);
      std::sort(order.begin(), order.end(),
                [](const auto* a, const auto* b) { return a->second.index < b->second.index; });
      for (const auto* kv : order) {
        auto* fr = df->add_failures();
        fr->set_path(kv->first);
        fr->set_reason(kv->second.reason);
        fr->set_count(kv->second.count);
        fr->set_dataset_index(kv->second.index);
      }
    }
  }
  return r;
}

absl::StatusOr<v1::ListSamplesResponse> Engine::ListSamples(const v1::ListSamplesRequest& req) {
  if (req.limit() > kMaxListLimit) {
    return absl::InvalidArgumentError(absl::StrCat("limit ", req.limit(),
                                                   " is over the largest page, ", kMaxListLimit));
  }
  std::shared_ptr<const Dataset> ds;
  {
    std::lock_guard<std::mutex> l(mu_);
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
  std::vector<std::shared_ptr<Session>> removed;
  {
    std::unique_lock<std::mutex> l(mu_);
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
    cv_.wait_for(l, std::chrono::milliseconds(config_.drain_timeout_ms), [this] {
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
    std::lock_guard<std::mutex> l(mu_);
    state_ = "stopped";
  }
  stopping_.store(true);
  Wake();
  cv_.notify_all();
  if (dispatcher_.joinable()) dispatcher_.join();
  if (ticker_.joinable()) ticker_.join();
  prefetch_.reset();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& w : workers_) {
    if (w->dead) continue;
    worker::ShutdownMsg m;
    SendWithFd(w->channel.get(), &m, sizeof(m), -1);
  }
  const int64_t deadline = MonotonicNs() + 2'000'000'000LL;
  for (auto& w : workers_) {
    if (w->dead) continue;
    int wstatus;
    while (::waitpid(w->pid, &wstatus, WNOHANG) == 0) {
      if (MonotonicNs() > deadline) {
        ::kill(w->pid, SIGKILL);
        ::waitpid(w->pid, &wstatus, 0);
        break;
      }
      ::usleep(5000);
    }
    w->dead = true;
    w->channel.Reset();
  }
}

}  // namespace stoker
