// Test harness: runs the real stokerd binary on a temp socket, knows its
// pid, kills only it, and waits on conditions with deadlines.

#ifndef STOKER_TESTING_DAEMON_HARNESS_H_
#define STOKER_TESTING_DAEMON_HARNESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace stoker::testing {

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes an ImageFolder tree: root/<class>/img_<i>.jpg, `per_class` photo-
// like JPEGs per class of varied sizes. Returns the files in ImageFolder
// order (index i of the dataset is element i).
std::vector<std::string> MakeImageFolder(const std::string& root, int classes, int per_class,
                                         uint64_t seed);

class Daemon {
 public:
  struct Options {
    int workers = 2;
    std::vector<std::string> extra_args;
    // Empty: a socket in the daemon's own temp dir.
    std::string socket_path;
  };
  // Starts stokerd with --data-root `data_root` and a socket in its own temp
  // dir; waits (deadline 20 s) until its health service says SERVING.
  static std::unique_ptr<Daemon> Start(const std::string& data_root, const Options& o);
  static std::unique_ptr<Daemon> Start(const std::string& data_root) {
    return Start(data_root, Options());
  }
  ~Daemon();  // SIGKILL if still running

  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit; returns the wait status, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  std::string Log() const;

 private:
  TempDir dir_;
  std::string socket_;
  std::string log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Polls `cond` until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

// The integer values of every `"key":N` or `"key":"N"` in a JSON text, in order.
std::vector<int64_t> JsonInts(const std::string& json, const std::string& key);

}  // namespace stoker::testing

#endif  // STOKER_TESTING_DAEMON_HARNESS_H_
