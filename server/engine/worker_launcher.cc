#include "server/engine/worker_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/worker/worker_protocol.h"

extern char** environ;

namespace stoker {

absl::StatusOr<std::string> BesideExecutable(const std::string& name) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return PosixError("readlink /proc/self/exe", errno);
  self[n] = '\0';
  std::string path(self);
  path.resize(path.rfind('/') + 1);
  path += name;
  if (::access(path.c_str(), X_OK) != 0) return PosixError(name + " " + path, errno);
  return path;
}

absl::StatusOr<std::string> WorkerBinaryPath(const std::string& configured) {
  if (configured.empty()) return BesideExecutable("stoker-worker");
  if (::access(configured.c_str(), X_OK) != 0) {
    return PosixError("worker binary " + configured, errno);
  }
  return configured;
}

PosixSpawnLauncher::PosixSpawnLauncher(std::string binary, int data_root_fd, bool sandbox,
                                       int transcode_cache_fd, int volume_cache_fd)
    : binary_(std::move(binary)),
      data_root_fd_(data_root_fd),
      sandbox_(sandbox),
      transcode_cache_fd_(transcode_cache_fd),
      prepared_cache_fd_(volume_cache_fd) {}

absl::StatusOr<LaunchedWorker> PosixSpawnLauncher::Launch(uint32_t worker_id) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return PosixError("socketpair", errno);
  }
  UniqueFd ours(sv[0]);
  // Above the range the child's dup2 targets use, so no dup2 is a no-op
  // that would leave FD_CLOEXEC set.
  UniqueFd theirs(::fcntl(sv[1], F_DUPFD_CLOEXEC, 10));
  ::close(sv[1]);
  UniqueFd root(::fcntl(data_root_fd_, F_DUPFD_CLOEXEC, 10));
  UniqueFd cache;
  if (transcode_cache_fd_ >= 0) cache = UniqueFd(::fcntl(transcode_cache_fd_, F_DUPFD_CLOEXEC, 10));
  UniqueFd volumes;
  if (prepared_cache_fd_ >= 0) volumes = UniqueFd(::fcntl(prepared_cache_fd_, F_DUPFD_CLOEXEC, 10));
  UniqueFd shipped;
  if (shipped_files_fd_ >= 0) shipped = UniqueFd(::fcntl(shipped_files_fd_, F_DUPFD_CLOEXEC, 10));
  if (!theirs.valid() || !root.valid() || (transcode_cache_fd_ >= 0 && !cache.valid()) ||
      (prepared_cache_fd_ >= 0 && !volumes.valid()) ||
      (shipped_files_fd_ >= 0 && !shipped.valid())) {
    return PosixError("fcntl F_DUPFD_CLOEXEC", errno);
  }

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), worker::kChannelFd);
  posix_spawn_file_actions_adddup2(&fa, root.get(), worker::kDataRootFd);
  if (cache.valid()) posix_spawn_file_actions_adddup2(&fa, cache.get(), worker::kTranscodeCacheFd);
  if (volumes.valid()) posix_spawn_file_actions_adddup2(&fa, volumes.get(), worker::kPreparedCacheFd);
  if (shipped.valid()) posix_spawn_file_actions_adddup2(&fa, shipped.get(), worker::kShippedFilesFd);
  std::string parent = std::to_string(::getpid());
  std::string id = std::to_string(worker_id);
  std::vector<std::string> extra;
  if (extra_args_) extra = extra_args_(worker_id);
  std::vector<char*> argv = {const_cast<char*>(binary_.c_str()),
                             const_cast<char*>("--parent"),
                             parent.data(),
                             const_cast<char*>("--id"),
                             id.data(),
                             const_cast<char*>(sandbox_ ? "--sandbox" : "--no-sandbox")};
  for (std::string& a : extra) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, binary_.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return PosixError("posix_spawn " + binary_, rc);
  LaunchedWorker w;
  w.pid = pid;
  w.channel = std::move(ours);
  return w;
}

void PosixSpawnLauncher::Kill(pid_t pid) { ::kill(pid, SIGKILL); }

WorkerExit PosixSpawnLauncher::Reap(pid_t pid) {
  WorkerExit e;
  int wstatus = 0;
  pid_t r = ::waitpid(pid, &wstatus, 0);
  if (r == pid && WIFSIGNALED(wstatus)) {
    e.known = true;
    e.signaled = true;
    e.signal = WTERMSIG(wstatus);
  } else if (r == pid && WIFEXITED(wstatus)) {
    e.known = true;
    e.exit_status = WEXITSTATUS(wstatus);
  }
  return e;
}

bool PosixSpawnLauncher::TryReap(pid_t pid) {
  int wstatus;
  return ::waitpid(pid, &wstatus, WNOHANG) != 0;
}

double PosixSpawnLauncher::CpuSeconds(pid_t pid) {
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

}  // namespace stoker
