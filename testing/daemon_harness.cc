#include "testing/daemon_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "testing/test_jpeg.h"
#include "stoker/client.h"

extern char** environ;

namespace stoker::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  char tmpl[] = "/tmp/stkXXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> MakeImageFolder(const std::string& root, int classes, int per_class,
                                         uint64_t seed) {
  std::vector<std::string> files;
  for (int k = 0; k < classes; ++k) {
    std::string dir = root + "/class_" + std::to_string(k);
    fs::create_directories(dir);
    for (int i = 0; i < per_class; ++i) {
      const uint64_t s = seed * 1000003 + k * 1009 + i;
      const uint32_t h = 48 + static_cast<uint32_t>(s * 7 % 150);
      const uint32_t w = 48 + static_cast<uint32_t>(s * 13 % 170);
      image::testing::EncodeOptions eo;
      eo.quality = 80 + static_cast<int>(s % 15);
      eo.subsampling = (s % 3 == 0) ? 444 : 420;
      eo.progressive = s % 5 == 0;
      auto jpeg = image::testing::EncodeJpeg(image::testing::MakePhoto(h, w, 3, s), h, w, 3, eo);
      char name[32];
      std::snprintf(name, sizeof(name), "/img_%04d.jpg", i);
      std::ofstream(dir + name, std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg.data()), jpeg.size());
      files.push_back(dir + name);
    }
  }
  return files;
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

std::unique_ptr<Daemon> Daemon::Start(const std::string& data_root, const Options& o) {
  auto d = std::unique_ptr<Daemon>(new Daemon());
  d->socket_ = o.socket_path.empty() ? d->dir_.path() + "/s.sock" : o.socket_path;
  d->log_ = d->dir_.path() + "/stokerd.log";
  std::vector<std::string> args = {STOKERD_PATH,  "--socket",     d->socket_,
                                   "--data-root", data_root,      "--workers",
                                   std::to_string(o.workers), "--log-level", "debug",
                                   // a cache of its own: never the user's ~/.cache
                                   "--index-cache", d->dir_.path() + "/index"};
  // The transcode cache is on by default (in ~/.cache): off unless asked.
  if (std::none_of(o.extra_args.begin(), o.extra_args.end(), [](const std::string& a) {
        return a.rfind("--transcode-cache", 0) == 0;
      })) {
    args.insert(args.end(), {"--transcode-cache", "off"});
  }
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  // Flags for every test daemon, from the environment: scripts/sanitize.sh
  // passes --no-worker-sandbox (ASan's longjmp hook needs sigaltstack, which
  // the workers' seccomp filter denies).
  if (const char* env = std::getenv("STOKER_TEST_DAEMON_ARGS")) {
    std::istringstream words(env);
    for (std::string w; words >> w;) args.push_back(w);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, d->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  int rc = ::posix_spawn(&d->pid_, STOKERD_PATH, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn stokerd");
  bool up = WaitFor(
      [&] {
        int st;
        if (::waitpid(d->pid_, &st, WNOHANG) == d->pid_) {
          d->reaped_ = true;
          return true;
        }
        // A fresh channel per try: one that first failed to connect backs off.
        struct stat sb;
        if (::stat(d->socket_.c_str(), &sb) != 0) return false;
        auto client = Client::Connect(d->socket_);
        return client.ok() && (*client)->Health().ok();
      },
      std::chrono::seconds(20));
  if (!up || d->reaped_) throw std::runtime_error("stokerd did not start:\n" + d->Log());
  return d;
}

Daemon::~Daemon() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
}

void Daemon::Signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

int Daemon::Wait(std::chrono::milliseconds timeout) {
  int status = -1;
  bool done = WaitFor(
      [&] {
        if (reaped_) return true;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          reaped_ = true;
          return true;
        }
        return false;
      },
      timeout);
  return done ? status : -1;
}

std::string Daemon::Log() const {
  std::ifstream f(log_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int64_t> JsonInts(const std::string& json, const std::string& key) {
  std::vector<int64_t> out;
  std::regex re("\"" + key + "\":\"?(-?[0-9]+)\"?");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back(std::stoll((*it)[1].str()));
  }
  return out;
}

}  // namespace stoker::testing
