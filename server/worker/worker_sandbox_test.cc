// The worker's seccomp filter (worker_sandbox.h) against what its decoders
// do: a forked child installs the filter, then indexes and decodes a video
// clip as a worker will, and sends its bytes back over a pipe. (A fork, not
// a spawned worker: the filter is all this tests.)

#include "server/worker/worker_sandbox.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/posix.h"
#include "server/video/clip_decoder.h"
#include "server/video/video_probe.h"
#include "server/video/video_test_util.h"

namespace stoker {
namespace {

using video::testing::TempFile;
using video::testing::WriteVideo;

// In the child: the exit code names the step that failed (0: none).
[[noreturn]] void DecodeSandboxed(const std::string& path, int threads, int out_fd) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(10);
  if (!ApplyWorkerSandbox().ok()) _exit(11);
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));  // openat, allowed
  if (!fd.valid()) _exit(12);
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  absl::StatusOr<video::VideoIndex> index =
      video::Probe(fd.get(), 0, static_cast<uint64_t>(size), path);
  if (!index.ok() || index->pts.size() < 20) _exit(13);
  absl::StatusOr<std::unique_ptr<video::ClipDecoder>> d =
      video::ClipDecoder::Open(fd.get(), 0, static_cast<uint64_t>(size), path, {}, threads);
  if (!d.ok()) _exit(14);
  std::vector<uint8_t> rgb(size_t{8} * index->width * index->height * 3);
  video::ClipShape shape;
  if (!(*d)->Decode(*index, index->pts.data() + 11, 8, rgb.data(), rgb.size(), &shape).ok()) {
    _exit(15);
  }
  size_t sent = 0;
  while (sent < rgb.size()) {
    const ssize_t n = write(out_fd, rgb.data() + sent, rgb.size() - sent);
    if (n <= 0) _exit(16);
    sent += static_cast<size_t>(n);
  }
  _exit(0);
}

// Runs DecodeSandboxed in a child; its exit code and the bytes it sent.
int RunChild(const std::string& path, int threads, std::vector<uint8_t>* bytes) {
  int p[2];
  REQUIRE(pipe2(p, O_CLOEXEC) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    DecodeSandboxed(path, threads, p[1]);
  }
  close(p[1]);
  uint8_t buf[65536];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof(buf))) > 0) bytes->insert(bytes->end(), buf, buf + n);
  close(p[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#else
constexpr bool kUnderAsan = false;
#endif

TEST_CASE("a video clip indexes and decodes under the worker's seccomp filter") {
  if (!WorkerSandboxAvailable()) {
    WARN("built without libseccomp: no filter to test");
    return;
  }
  if (kUnderAsan) {
    // ASan's runtime makes calls the filter refuses (sigaltstack at exit),
    // as scripts/sanitize.sh knows: its daemons run --no-worker-sandbox.
    WARN("under AddressSanitizer: the filter is tested in the plain build");
    return;
  }
  TempFile f(".mp4");
  REQUIRE(WriteVideo(f.path, "mp4", "mpeg4", 40, 10, 2));
  // The clip as decoded without a filter.
  UniqueFd fd = f.Open();
  absl::StatusOr<video::VideoIndex> index = video::Probe(fd.get(), 0, f.Size(), f.path);
  REQUIRE(index.ok());
  absl::StatusOr<std::unique_ptr<video::ClipDecoder>> d =
      video::ClipDecoder::Open(fd.get(), 0, f.Size(), f.path);
  REQUIRE(d.ok());
  std::vector<uint8_t> want(size_t{8} * index->width * index->height * 3);
  video::ClipShape shape;
  REQUIRE((*d)->Decode(*index, index->pts.data() + 11, 8, want.data(), want.size(), &shape).ok());
  // One thread, and slice threads asked for: the filter allows no new
  // thread (clone), and FFmpeg then decodes on the calling one.
  for (int threads : {1, 2}) {
    std::vector<uint8_t> got;
    INFO("threads " << threads);
    CHECK(RunChild(f.path, threads, &got) == 0);
    CHECK(got == want);
  }
}

}  // namespace
}  // namespace stoker
