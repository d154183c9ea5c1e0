#include "server/dataset/beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>
#include <utility>

#include "server/dataset/dataset.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

// As the kernel's limit on symlinks followed in one lookup.
constexpr int kMaxSymlinks = 40;

// Set once openat2 answered ENOSYS: the kernel will not grow it later.
std::atomic<bool> openat2_unavailable{false};

absl::Status Escapes(std::string_view display) {
  return absl::PermissionDeniedError(Cat("'", display, "' leaves the data root"));
}

absl::Status SymlinkEscapes(std::string_view display, std::string_view link,
                            std::string_view target) {
  return absl::PermissionDeniedError(Cat(
      "'", display, "' leaves the data root through the symlink '", link, "' -> '", target, "'"));
}

// The fix, for the two ways of running the daemon, appended to an escape
// found while resolving (where the root is known).
absl::Status WithRootHint(const DataRoot& root, const absl::Status& escape) {
  return absl::PermissionDeniedError(
      Cat(escape.message(), ". The daemon reads only beneath its data root '", root.path(),
          "': start stokerd with a --data-root that holds it or, for the private daemon "
          "that stoker.Loader starts, pass Loader(data_root=...)"));
}

absl::StatusOr<std::string> ReadLinkAt(int dir_fd, const std::string& path) {
  std::string target(256, '\0');
  while (true) {
    ssize_t n = readlinkat(dir_fd, path.c_str(), target.data(), target.size());
    if (n < 0) return PosixError(Cat("readlink '", path, "'"), errno);
    if (static_cast<size_t>(n) < target.size()) {
      target.resize(n);
      return target;
    }
    if (target.size() > PATH_MAX) return PosixError(Cat("readlink '", path, "'"), ENAMETOOLONG);
    target.resize(target.size() * 2);
  }
}

// realpath(3) of an absolute path outside the root's prefix, as relative to
// the root when it lands beneath it (the path went through an alias of the
// root, e.g. /data -> /mnt/data).
std::optional<std::string> RealPathBeneath(std::string_view root_path, const std::string& path) {
  std::unique_ptr<char, decltype(&free)> real(realpath(path.c_str(), nullptr), &free);
  if (real == nullptr) return std::nullopt;
  return StripRootPrefix(root_path, real.get());
}

void PushComponents(std::string_view path, std::vector<std::string>* pending) {
  std::vector<std::string_view> components = SplitPath(path);
  for (auto it = components.rbegin(); it != components.rend(); ++it) pending->emplace_back(*it);
}

int FileOpenFlags(OpenKind kind) {
  // O_NONBLOCK keeps a FIFO named like a sample from blocking the opener; it
  // is refused (not a regular file) right after, and cleared on files.
  return kind == OpenKind::kDirectory ? O_RDONLY | O_DIRECTORY | O_CLOEXEC
                                      : O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
}

// fd >= 0, or -errno.
int TryOpenat2(int root_fd, const char* path, int flags) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    int err = errno;
    // EAGAIN: a concurrent rename made the kernel unsure about a "..".
    if (err == EINTR || (err == EAGAIN && attempt < 16)) continue;
    return -err;
  }
}

bool IsSymlinkAt(int dir_fd, const std::string& name) {
  struct stat st;
  return fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

// Whether the last component of `path` is a symlink, looked at beneath
// `root_fd` (for the message of a file not found).
bool LastIsSymlink(int root_fd, const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return IsSymlinkAt(root_fd, path);
  const int parent =
      TryOpenat2(root_fd, path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return false;
  UniqueFd closer(parent);
  return IsSymlinkAt(parent, path.substr(slash + 1));
}

absl::Status SymlinkRefused(std::string_view path) {
  return absl::PermissionDeniedError(
      Cat("open '", path, "': symlinks are not followed where the kernel lacks openat2"));
}

// The fallback: one component at a time, never following a symlink, keeping
// the directories opened so far for "..".
absl::StatusOr<int> OpenByComponents(int root_fd, std::string_view path, int flags) {
  if (!path.empty() && path.front() == '/') return Escapes(path);
  std::vector<std::string_view> components = SplitPath(path);
  std::vector<UniqueFd> opened;  // directories beneath root_fd, outermost first
  auto current = [&] { return opened.empty() ? root_fd : opened.back().get(); };
  std::string last = ".";
  for (size_t i = 0; i < components.size(); ++i) {
    if (components[i] == "..") {
      if (opened.empty()) return Escapes(path);
      opened.pop_back();
      continue;
    }
    std::string name(components[i]);
    if (i + 1 == components.size()) {
      last = std::move(name);
      break;
    }
    int fd = openat(current(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOTDIR && IsSymlinkAt(current(), name)) return SymlinkRefused(path);
      return PosixError(Cat("open '", path, "'"), err);
    }
    opened.emplace_back(fd);
  }
  int fd;
  do {
    fd = openat(current(), last.c_str(), flags | O_NOFOLLOW);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = errno;
    if ((err == ELOOP || err == ENOTDIR) && IsSymlinkAt(current(), last)) {
      return SymlinkRefused(path);
    }
    return PosixError(Cat("open '", path, "'"), err);
  }
  return fd;
}

}  // namespace

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> components;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(start, end - start);
    if (!component.empty() && component != ".") components.push_back(component);
    start = end + 1;
  }
  return components;
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  return Cat(a, "/", b);
}

absl::Status AppendNormalized(std::string_view base, std::string_view path, std::string* out) {
  const size_t start = out->size();
  out->append(base);
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(pos, end - pos);
    pos = end + 1;
    if (component.empty() || component == ".") continue;
    if (component == "..") {
      if (out->size() == start) {
        out->resize(start);
        return Escapes(path);
      }
      size_t slash = out->rfind('/');
      out->resize(slash == std::string::npos || slash < start ? start : slash);
      continue;
    }
    if (out->size() > start) out->push_back('/');
    out->append(component);
  }
  return absl::OkStatus();
}

std::optional<std::string> StripRootPrefix(std::string_view root_path, std::string_view path) {
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::vector<std::string_view> root = SplitPath(root_path);
  std::vector<std::string_view> components = SplitPath(path);
  if (components.size() < root.size()) return std::nullopt;
  for (size_t i = 0; i < root.size(); ++i) {
    if (components[i] != root[i]) return std::nullopt;
  }
  std::string rest;
  for (size_t i = root.size(); i < components.size(); ++i) {
    if (!rest.empty()) rest.push_back('/');
    rest.append(components[i]);
  }
  return rest;
}

absl::StatusOr<ResolvedPath> ResolveBeneath(const DataRoot& root, std::string_view base,
                                            std::string_view path, std::string_view display,
                                            bool allow_missing) {
  ResolvedPath result;
  result.path = std::string(base);
  result.exists = true;
  result.is_dir = true;
  std::vector<std::string> pending;  // components still to walk; next at the back
  PushComponents(path, &pending);
  int symlinks = 0;
  while (!pending.empty()) {
    std::string component = std::move(pending.back());
    pending.pop_back();
    if (component == "..") {
      if (result.path.empty()) return WithRootHint(root, Escapes(display));
      size_t slash = result.path.rfind('/');
      result.path.resize(slash == std::string::npos ? 0 : slash);
      result.is_dir = result.exists;
      continue;
    }
    std::string candidate = JoinPath(result.path, component);
    if (!result.exists) {
      result.path = std::move(candidate);
      continue;
    }
    struct stat st;
    if (fstatat(root.fd(), candidate.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        if (!allow_missing) {
          return absl::NotFoundError(Cat("'", display, "' not found in the data root"));
        }
        result.exists = false;
        result.is_dir = false;
        result.path = std::move(candidate);
        continue;
      }
      return PosixError(Cat("stat '", candidate, "'"), err);
    }
    if (!S_ISLNK(st.st_mode)) {
      result.path = std::move(candidate);
      result.is_dir = S_ISDIR(st.st_mode);
      continue;
    }
    if (++symlinks > kMaxSymlinks) {
      // Not PERMISSION_DENIED (as ELOOP maps): that code means "escapes".
      return absl::FailedPreconditionError(
          Cat("'", display, "': more than ", kMaxSymlinks, " symlinks (a loop?)"));
    }
    absl::StatusOr<std::string> target = ReadLinkAt(root.fd(), candidate);
    if (!target.ok()) return target.status();
    if (target->empty()) return PosixError(Cat("resolve '", display, "'"), ENOENT);
    if (target->front() != '/') {
      PushComponents(*target, &pending);  // relative to the link's directory
      continue;
    }
    if (std::optional<std::string> rest = StripRootPrefix(root.path(), *target)) {
      result.path.clear();
      PushComponents(*rest, &pending);
      continue;
    }
    std::optional<std::string> aliased = RealPathBeneath(root.path(), *target);
    if (!aliased.has_value()) {
      return WithRootHint(root, SymlinkEscapes(display, candidate, *target));
    }
    result.path = std::move(*aliased);  // canonical already
    result.is_dir = true;               // corrected by the next stat, if any
    if (pending.empty()) {
      if (fstatat(root.fd(), result.path.empty() ? "." : result.path.c_str(), &st, 0) != 0) {
        return PosixError(Cat("stat '", result.path, "'"), errno);
      }
      result.is_dir = S_ISDIR(st.st_mode);
    }
  }
  return result;
}

absl::StatusOr<ResolvedPath> ResolveUserPath(const DataRoot& root, std::string_view user_path) {
  if (user_path.empty()) return absl::InvalidArgumentError("empty path");
  if (user_path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("path contains a NUL byte");
  }
  if (user_path.front() != '/') {
    return ResolveBeneath(root, "", user_path, user_path, /*allow_missing=*/false);
  }
  if (std::optional<std::string> rest = StripRootPrefix(root.path(), user_path)) {
    return ResolveBeneath(root, "", *rest, user_path, /*allow_missing=*/false);
  }
  // Maybe an alias of the root (a symlink to it, or ".." that comes back).
  if (std::optional<std::string> real = RealPathBeneath(root.path(), std::string(user_path))) {
    return ResolveBeneath(root, "", *real, user_path, /*allow_missing=*/false);
  }
  return WithRootHint(
      root, absl::PermissionDeniedError(Cat("'", user_path, "' is outside the data root")));
}

absl::StatusOr<int> OpenBeneathImpl(int root_fd, std::string_view relative_path, OpenKind kind,
                                    bool use_openat2) {
  if (relative_path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("path contains a NUL byte");
  }
  const int flags = FileOpenFlags(kind);
  const std::string path = relative_path.empty() ? "." : std::string(relative_path);
  UniqueFd fd;
  if (use_openat2 && !openat2_unavailable.load(std::memory_order_relaxed)) {
    int rc = TryOpenat2(root_fd, path.c_str(), flags);
    if (rc >= 0) {
      fd.Reset(rc);
    } else if (rc == -EXDEV) {
      return Escapes(relative_path);
    } else if (rc == -ENOSYS) {
      openat2_unavailable.store(true, std::memory_order_relaxed);
    } else if (rc == -ENOENT && LastIsSymlink(root_fd, path)) {
      return PosixError(Cat("open '", relative_path, "' (a dangling symlink)"), ENOENT);
    } else if (rc != -EPERM) {  // EPERM: a seccomp filter that predates openat2
      return PosixError(Cat("open '", relative_path, "'"), -rc);
    }
  }
  if (!fd.valid()) {
    absl::StatusOr<int> opened = OpenByComponents(root_fd, path, flags);
    if (!opened.ok()) return opened.status();
    fd.Reset(*opened);
  }
  if (kind == OpenKind::kRegularFile) {
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return PosixError(Cat("fstat '", relative_path, "'"), errno);
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(Cat("open '", relative_path, "': not a regular file"));
    }
    int fl = fcntl(fd.get(), F_GETFL);
    if (fl < 0 || fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
      return PosixError(Cat("fcntl '", relative_path, "'"), errno);
    }
  }
  return fd.Release();
}

}  // namespace dataset_internal
}  // namespace stoker
