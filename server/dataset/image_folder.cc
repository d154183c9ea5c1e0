// The ImageFolder indexer: torchvision's ImageFolder order, confined to the
// data root.
//
// torchvision lists, for each class in sorted order,
//   for root, _, fnames in sorted(os.walk(class_dir, followlinks=True)):
//     for fname in sorted(fnames): ...
// Sorting the walk's tuples sorts directories by their whole path string, so
// "a/sub b" comes before "a/sub/deeper" (' ' < '/') and "a/sub0" after it:
// not a depth-first order. Here every directory of a class is collected
// first, then directories are sorted by path and files by (directory, name).
// fnames holds every non-directory after following symlinks, dangling
// symlinks included; a directory named "x.jpg" is walked, not listed.
//
// Differences with os.walk, all on trees torchvision cannot index anyway:
// a directory that is its own ancestor (a symlink loop) is not walked again,
// and an unreadable directory fails the request instead of being skipped.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "server/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

// Directories walked per request, a bound for trees whose symlinks reach the
// same directories many times over (no loop, but exponential paths).
constexpr size_t kMaxDirectories = size_t{1} << 22;

bool HasJpegExtension(std::string_view name) {
  return absl::EndsWithIgnoreCase(ToAbsl(name), ".jpg") ||
         absl::EndsWithIgnoreCase(ToAbsl(name), ".jpeg");
}

// Calls fn(name, d_type, dir_fd) for each entry of the directory but "." and
// "..", in readdir order.
template <typename Fn>
absl::Status ForEachEntry(UniqueFd fd, std::string_view display, Fn&& fn) {
  DIR* dir = fdopendir(fd.get());
  if (dir == nullptr) return PosixError(Cat("opendir '", display, "'"), errno);
  (void)fd.Release();  // owned by `dir` now
  std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, &closedir);
  while (true) {
    errno = 0;
    const struct dirent* entry = readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) return PosixError(Cat("readdir '", display, "'"), errno);
      return absl::OkStatus();
    }
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    absl::Status status = fn(name, entry->d_type, dirfd(dir));
    if (!status.ok()) return status;
  }
}

enum class Kind { kSkip, kDirectory, kFile };

struct Classified {
  Kind kind = Kind::kSkip;
  // Canonical path of what a symlink leads to; empty: the entry's own path
  // (its directory's canonical path + its name).
  std::string real;
};

// What an entry is for the walk, following symlinks (os.walk's is_dir()).
// A symlink is resolved only when it matters: a directory, or a JPEG name
// with `want_files`; one leading outside the root is PERMISSION_DENIED.
absl::StatusOr<Classified> Classify(const DataRoot& root, int dir_fd, const std::string& dir_real,
                                    std::string_view dir_display, std::string_view name,
                                    unsigned char d_type, bool want_files) {
  const std::string name_str(name);
  struct stat st;
  if (d_type == DT_UNKNOWN) {
    if (fstatat(dir_fd, name_str.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Classified{};  // removed since readdir
      return PosixError(Cat("stat '", JoinPath(dir_display, name), "'"), errno);
    }
    d_type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
  }
  if (d_type == DT_DIR) return Classified{Kind::kDirectory, ""};
  const bool jpeg = want_files && HasJpegExtension(name);
  if (d_type != DT_LNK) return Classified{jpeg ? Kind::kFile : Kind::kSkip, ""};

  const bool target_exists = fstatat(dir_fd, name_str.c_str(), &st, 0) == 0;
  const bool target_is_dir = target_exists && S_ISDIR(st.st_mode);
  if (!target_is_dir && !jpeg) return Classified{};
  const std::string display = JoinPath(dir_display, name);
  absl::StatusOr<ResolvedPath> resolved =
      ResolveBeneath(root, dir_real, name, display, /*allow_missing=*/!target_exists);
  if (!resolved.ok()) {
    if (target_is_dir || absl::IsPermissionDenied(resolved.status())) return resolved.status();
    // A file link that loops or vanished: listed, it fails later as a sample.
    return Classified{Kind::kFile, ""};
  }
  if (target_is_dir) return Classified{Kind::kDirectory, std::move(resolved->path)};
  if (!resolved->exists) return Classified{Kind::kFile, ""};  // dangling, but confined
  return Classified{Kind::kFile, std::move(resolved->path)};
}

struct WalkDir {
  std::string display;  // path as torchvision names it (through symlinks), relative to the root
  std::string real;     // canonical path
  int64_t parent;       // index in the walk, -1 for the class folder
  dev_t dev = 0;
  ino_t ino = 0;
};

struct WalkFile {
  uint32_t dir;
  uint32_t name_len;
  uint32_t path_len;  // 0: the directory's canonical path + "/" + name
  uint64_t name_offset;
  uint64_t path_offset;
};

class ClassWalker {
 public:
  ClassWalker(const DataRoot& root, size_t* directories_walked)
      : root_(root), directories_walked_(directories_walked) {}

  // Appends the class's entries, in torchvision's order, to `out`.
  absl::Status Walk(std::string display, std::string real, int64_t label, DatasetIndex* out) {
    dirs_.clear();
    files_.clear();
    arena_.clear();
    out_ = out;
    dirs_.push_back(WalkDir{std::move(display), std::move(real), -1});
    for (size_t i = 0; i < dirs_.size(); ++i) {
      absl::Status status = ListDirectory(i);
      if (!status.ok()) return status;
    }
    Emit(label, out);
    return absl::OkStatus();
  }

 private:
  absl::Status ListDirectory(size_t index) {
    if (++*directories_walked_ > kMaxDirectories) {
      return absl::ResourceExhaustedError(
          Cat("more than ", kMaxDirectories, " directories under '", dirs_[index].display,
              "' (symlinks reaching the same folders many times?)"));
    }
    // Copies: dirs_ grows while this directory is listed.
    const std::string display = dirs_[index].display;
    const std::string real = dirs_[index].real;
    absl::StatusOr<int> opened =
        OpenBeneathImpl(root_.fd(), real, OpenKind::kDirectory, /*use_openat2=*/true);
    if (!opened.ok()) return opened.status();
    UniqueFd fd(*opened);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return PosixError(Cat("fstat '", display, "'"), errno);
    dirs_[index].dev = st.st_dev;
    dirs_[index].ino = st.st_ino;
    out_->Watch(real, fd.get(), /*is_dir=*/true);
    for (int64_t p = dirs_[index].parent; p >= 0; p = dirs_[p].parent) {
      if (dirs_[p].dev == st.st_dev && dirs_[p].ino == st.st_ino) return absl::OkStatus();  // loop
    }
    return ForEachEntry(
        std::move(fd), display,
        [&](std::string_view name, unsigned char d_type, int dir_fd) -> absl::Status {
          absl::StatusOr<Classified> c =
              Classify(root_, dir_fd, real, display, name, d_type, /*want_files=*/true);
          if (!c.ok()) return c.status();
          if (c->kind == Kind::kDirectory) {
            dirs_.push_back(WalkDir{JoinPath(display, name),
                                    c->real.empty() ? JoinPath(real, name) : std::move(c->real),
                                    static_cast<int64_t>(index)});
          } else if (c->kind == Kind::kFile) {
            WalkFile f;
            f.dir = static_cast<uint32_t>(index);
            f.name_offset = arena_.size();
            f.name_len = static_cast<uint32_t>(name.size());
            arena_.append(name);
            f.path_offset = arena_.size();
            f.path_len = static_cast<uint32_t>(c->real.size());
            arena_.append(c->real);
            files_.push_back(f);
          }
          return absl::OkStatus();
        });
  }

  void Emit(int64_t label, DatasetIndex* out) {
    std::vector<uint32_t> order(dirs_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return dirs_[a].display < dirs_[b].display; });
    std::vector<uint32_t> rank(dirs_.size());
    for (uint32_t k = 0; k < order.size(); ++k) rank[order[k]] = k;
    std::string_view arena = arena_;
    auto name = [&](const WalkFile& f) { return arena.substr(f.name_offset, f.name_len); };
    std::sort(files_.begin(), files_.end(), [&](const WalkFile& a, const WalkFile& b) {
      if (rank[a.dir] != rank[b.dir]) return rank[a.dir] < rank[b.dir];
      return name(a) < name(b);
    });
    for (const WalkFile& f : files_) {
      if (f.path_len == 0) {
        const std::string& dir = dirs_[f.dir].real;
        out->paths.append(dir);
        if (!dir.empty()) out->paths.push_back('/');
        out->paths.append(name(f));
      } else {
        out->paths.append(arena.substr(f.path_offset, f.path_len));
      }
      out->EndEntry(label);
    }
  }

  const DataRoot& root_;
  size_t* directories_walked_;
  std::vector<WalkDir> dirs_;
  std::vector<WalkFile> files_;
  std::string arena_;  // file names and symlink targets of files_
  DatasetIndex* out_ = nullptr;
};

}  // namespace

absl::Status IndexImageFolder(const DataRoot& root, const std::string& dir, DatasetIndex* out) {
  absl::StatusOr<int> opened =
      OpenBeneathImpl(root.fd(), dir, OpenKind::kDirectory, /*use_openat2=*/true);
  if (!opened.ok()) return opened.status();
  out->Watch(dir, *opened, /*is_dir=*/true);

  struct ClassDir {
    std::string name;
    std::string real;
  };
  std::vector<ClassDir> classes;
  absl::Status status =
      ForEachEntry(UniqueFd(*opened), dir,
                   [&](std::string_view name, unsigned char d_type, int dir_fd) -> absl::Status {
                     absl::StatusOr<Classified> c =
                         Classify(root, dir_fd, dir, dir, name, d_type, /*want_files=*/false);
                     if (!c.ok()) return c.status();
                     if (c->kind == Kind::kDirectory) {
                       classes.push_back(ClassDir{std::string(name),
                                                  c->real.empty() ? JoinPath(dir, name) : c->real});
                     }
                     return absl::OkStatus();
                   });
  if (!status.ok()) return status;
  std::sort(classes.begin(), classes.end(),
            [](const ClassDir& a, const ClassDir& b) { return a.name < b.name; });

  size_t directories_walked = 0;
  ClassWalker walker(root, &directories_walked);
  for (size_t label = 0; label < classes.size(); ++label) {
    out->class_names.push_back(classes[label].name);
    status = walker.Walk(JoinPath(dir, classes[label].name), std::move(classes[label].real),
                         static_cast<int64_t>(label), out);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
