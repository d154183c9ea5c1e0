// The daemon's video indexing (video_prober.h) with the real worker code
// (worker::Serve) on threads behind a launcher, over real SOCK_SEQPACKET
// channels, on real video files; no process is spawned. Then a VideoTable
// built through it, and its cache reused.

#include "server/engine/video_prober.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "server/video/video_probe.h"
#include "server/video/video_test_util.h"
#include "server/worker/worker.h"

namespace stoker {
namespace {

// Workers as threads running worker::Serve on `root`.
class ThreadLauncher : public WorkerLauncher {
 public:
  explicit ThreadLauncher(int root) : root_(root) {}
  ~ThreadLauncher() override {
    for (auto& [pid, w] : workers_) {
      ::shutdown(w.daemon_end, SHUT_RDWR);
      w.thread.join();
    }
  }
  absl::StatusOr<LaunchedWorker> Launch(uint32_t id) override {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      return absl::InternalError("socketpair");
    }
    std::lock_guard<std::mutex> l(mu_);
    const pid_t pid = next_pid_++;
    Worker& w = workers_[pid];
    w.daemon_end = sv[0];
    w.thread = std::thread([fd = sv[1], root = root_] {
      worker::Serve({fd, root, -1});
      ::close(fd);
    });
    ++launches;
    LaunchedWorker lw;
    lw.pid = pid;
    lw.channel = UniqueFd(::dup(sv[0]));
    ::close(sv[0]);
    return lw;
  }
  void Kill(pid_t) override {}
  WorkerExit Reap(pid_t pid) override {
    std::thread t;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = workers_.find(pid);
      if (it == workers_.end()) return {};
      t = std::move(it->second.thread);
      workers_.erase(it);
    }
    t.join();  // the channel closed (or Shutdown): Serve returned
    WorkerExit e;
    e.known = true;
    return e;
  }
  bool TryReap(pid_t) override { return false; }
  double CpuSeconds(pid_t) override { return 0; }
  int launches = 0;

 private:
  struct Worker {
    int daemon_end = -1;
    std::thread thread;
  };
  const int root_;
  std::mutex mu_;
  std::map<pid_t, Worker> workers_;
  pid_t next_pid_ = 100;
};

TEST_CASE("videos are indexed in workers, several at once, as video::Probe indexes them",
          "[video_prober]") {
  namespace fs = std::filesystem;
  video::testing::TempFile a(".mp4"), b(".mkv");
  if (!video::testing::WriteVideo(a.path, "mp4", "libx264", 60, 24, 2) ||
      !video::testing::WriteVideo(b.path, "matroska", "mpeg4", 30, 12, 1)) {
    WARN("this FFmpeg lacks the encoders");
    return;
  }
  const std::string dir = fs::path(a.path).parent_path().string();
  UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(root.valid());
  // A text file and a missing one beside the videos.
  const std::string junk = a.path + ".txt";
  { FILE* f = std::fopen(junk.c_str(), "w"); std::fputs("not a video", f); std::fclose(f); }
  ThreadLauncher launcher(root.get());
  VideoProberOptions o;
  o.parallelism = 2;
  o.max_decode_pixels = 1 << 24;
  WorkerVideoProber prober(&launcher, o);
  std::vector<ProbeTarget> targets;
  for (const std::string& p : {a.path, b.path, junk, a.path + ".missing", a.path}) {
    ProbeTarget t;
    t.path = fs::path(p).filename().string();
    t.display = t.path;
    targets.push_back(t);
  }
  uint64_t last_progress = 0;
  const std::vector<ProbeOutcome> got =
      prober.ProbeAll(targets, [&](uint64_t done) { last_progress = done; });
  ::unlink(junk.c_str());
  REQUIRE(got.size() == 5);
  CHECK(last_progress == 5);
  CHECK(launcher.launches == 2);
  for (int k : {0, 1, 4}) {
    INFO(k << ": " << got[k].status.ToString());
    REQUIRE(got[k].status.ok());
    UniqueFd fd(::open((k == 1 ? b.path : a.path).c_str(), O_RDONLY | O_CLOEXEC));
    auto direct = video::Probe(fd.get(), 0, k == 1 ? b.Size() : a.Size(), "direct");
    REQUIRE(direct.ok());
    CHECK(got[k].pts == direct->pts);
    CHECK(got[k].keyframes == direct->keyframes);
    CHECK(got[k].info.fps == direct->fps);
    CHECK(got[k].info.width == direct->width);
    CHECK(got[k].info.time_base_den == direct->time_base_den);
  }
  CHECK(got[0].pts.size() == 60);
  CHECK(got[1].pts.size() == 30);
  CHECK(got[2].status.code() == absl::StatusCode::kDataLoss);
  CHECK(got[3].status.code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace stoker
