// stoker-worker: one decode/augment process of stokerd. Started by the
// daemon with exec (never forked from it), its channel at fd 3 and the data
// root at fd 4; it serves tasks until the channel closes or kShutdown.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/dataset/dataset.h"
#include "server/image/pipeline.h"
#include "server/posix.h"
#include "server/worker_protocol.h"
#include "server/worker_sandbox.h"

namespace stoker::worker {
namespace {

struct RingMap {
  Mapping map;
  uint64_t bytes = 0;
};

void SetReason(ResultMsg* r, absl::StatusCode code, std::string_view reason) {
  r->code = static_cast<uint32_t>(code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown
                                                                 : code);
  size_t n = std::min(reason.size(), sizeof(r->reason) - 1);
  std::memcpy(r->reason, reason.data(), n);
  r->reason[n] = '\0';
}

// Reads [offset, offset + length) of the file (all of it when length is 0)
// into `buf`.
absl::Status ReadInput(const TaskMsg& t, std::string_view path, std::vector<uint8_t>* buf) {
  absl::StatusOr<int> fd_or = OpenBeneath(kDataRootFd, path);
  if (!fd_or.ok()) return fd_or.status();
  UniqueFd fd(*fd_or);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return PosixError("fstat", errno);
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError("is a directory");
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError("not a regular file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t begin = t.has_range ? t.file_offset : 0;
  const uint64_t length = t.has_range ? t.file_length : size;
  if (begin > size || length > size - begin) {
    return absl::OutOfRangeError(absl::StrCat("member [", begin, ", +", length,
                                              ") lies beyond the end of the file (", size,
                                              " bytes): a truncated shard?"));
  }
  if (length == 0) return absl::InvalidArgumentError("empty file");
  if (t.max_file_bytes != 0 && length > t.max_file_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("file is ", length, " bytes, over the cap of ", t.max_file_bytes));
  }
  if (t.simulate_latency_us != 0 && !Cached(fd.get(), begin)) ::usleep(t.simulate_latency_us);
  buf->resize(length);
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd.get(), buf->data() + done, length - done,
                        static_cast<off_t>(begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("read", errno);
    if (n == 0) return absl::DataLossError("file shrank while being read");
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

bool SendAll(const void* msg, size_t bytes) {
  for (;;) {
    ssize_t n = ::send(kChannelFd, msg, bytes, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

int Serve() {
  std::unordered_map<uint64_t, RingMap> rings;
  image::SampleProcessor processor;
  std::vector<uint8_t> input;
  input.reserve(1 << 20);
  auto msg_buf = std::make_unique<TaskMsg>();
  char* raw = reinterpret_cast<char*>(msg_buf.get());

  HelloMsg hello;
  hello.pid = ::getpid();
  if (!SendAll(&hello, sizeof(hello))) return 1;

  for (;;) {
    UniqueFd owned_fd;
    const ssize_t n = ReceiveWithFd(kChannelFd, raw, sizeof(TaskMsg), &owned_fd);
    if (n <= 0) return 0;  // the daemon is gone
    if (static_cast<size_t>(n) < sizeof(uint32_t)) return 2;
    uint32_t type;
    std::memcpy(&type, raw, sizeof(type));
    switch (type) {
      case kMapRing: {
        if (static_cast<size_t>(n) != sizeof(MapRingMsg) || !owned_fd.valid()) return 2;
        MapRingMsg m;
        std::memcpy(&m, raw, sizeof(m));
        RingMap rm;
        // MAP_POPULATE: map every page now. Otherwise each worker takes a
        // page fault on the first write to each 4 KiB of every slot, for as
        // long as the ring lives (float32 batches: ~150 per sample).
        if (!MapShared(owned_fd.get(), m.data_offset, m.data_bytes, &rm.map, /*populate=*/true)
                 .ok()) {
          return 3;
        }
        // The client can truncate the ring; a write into the cut-off part
        // must not kill this worker (and count a crash against the file).
        rm.map.WatchTruncation();
        rm.bytes = m.data_bytes;
        rings[m.ring_id] = std::move(rm);
        break;
      }
      case kUnmapRing: {
        if (static_cast<size_t>(n) != sizeof(UnmapRingMsg)) return 2;
        UnmapRingMsg m;
        std::memcpy(&m, raw, sizeof(m));
        rings.erase(m.ring_id);
        break;
      }
      case kShutdown:
        return 0;
      case kTask: {
        const TaskMsg& t = *msg_buf;
        if (static_cast<size_t>(n) < TaskHeaderBytes() || t.path_bytes > kMaxPathBytes ||
            static_cast<size_t>(n) != TaskHeaderBytes() + t.path_bytes) {
          return 2;
        }
        std::string_view path(t.path, t.path_bytes);
        ResultMsg r{};
        r.task_id = t.task_id;
        r.reason[0] = '\0';
        auto it = rings.find(t.ring_id);
        if (it == rings.end() || t.out_offset > it->second.bytes ||
            t.out_capacity > it->second.bytes - t.out_offset) {
          SetReason(&r, absl::StatusCode::kInternal, "task names memory outside its ring");
          if (!SendAll(&r, sizeof(r))) return 1;
          break;
        }
        if (t.fault == kFaultCrash) ::abort();
        if (t.fault == kFaultHang) ::pause();
        int64_t t0 = MonotonicNs();
        absl::Status st = ReadInput(t, path, &input);
        r.read_ns = static_cast<uint64_t>(MonotonicNs() - t0);
        if (st.ok()) {
          image::SampleResult res;
          uint8_t* out = static_cast<uint8_t*>(it->second.map.addr()) + t.out_offset;
          st = processor.Process(input.data(), input.size(), t.params, t.key, out,
                                 t.out_capacity, &res);
          r.height = res.height;
          r.width = res.width;
          r.channels = res.channels;
          r.bytes = res.bytes;
          r.decode_ns = res.decode_ns;
          r.augment_ns = res.augment_ns;
        }
        if (!st.ok()) SetReason(&r, st.code(), std::string(st.message()));
        if (!SendAll(&r, sizeof(r))) return 1;
        // Keep the read buffer from pinning a huge file's memory forever.
        if (input.capacity() > (64u << 20)) std::vector<uint8_t>().swap(input);
        break;
      }
      default:
        return 2;
    }
  }
}

}  // namespace
}  // namespace stoker::worker

int main(int argc, char** argv) {
  // Die with the daemon; exit at once if it died before this line.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  bool sandbox = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--parent") == 0 && i + 1 < argc &&
        ::getppid() != std::atoi(argv[i + 1])) {
      return 1;
    }
    if (std::strcmp(argv[i], "--no-sandbox") == 0) sandbox = false;
  }
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  // A crashing worker is replaced; a core file of it helps no one.
  struct rlimit no_core = {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  if (sandbox && stoker::WorkerSandboxAvailable()) {
    absl::Status st = stoker::ApplyWorkerSandbox();
    if (!st.ok()) {
      std::fprintf(stderr, "stoker-worker: %s\n", std::string(st.message()).c_str());
      return 4;
    }
  }
  return stoker::worker::Serve();
}
