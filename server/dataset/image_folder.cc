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
// make_dataset then keeps the names ending in one of IMG_EXTENSIONS, and
// raises when a class has none (torchvision 0.14's folder.py).
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

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "server/image/decode/image_decoder.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

// Directories walked per request, a bound for trees whose symlinks reach the
// same directories many times over (no loop, but exponential paths).
constexpr size_t kMaxDirectories = size_t{1} << 22;

// Class names listed in an error, at most (a message travels in gRPC's
// trailers, whose size is limited).
constexpr size_t kMaxNamesListed = 20;


// The extensions a walk lists as ".a .b .c", for messages.
std::string Spelled(const std::vector<std::string>& extensions) {
  std::string out;
  if (extensions.empty()) {
    for (const char* ext : image::kImageFolderExtensions) {
      out.append(out.empty() ? "" : " ").append(ext);
    }
  }
  for (const std::string& ext : extensions) out.append(out.empty() ? "" : " ").append(ext);
  return out;
}

// Whether a walk lists the file `name` (torchvision's
// has_file_allowed_extension: the name, lowercased, ends with one of them;
// none given: IMG_EXTENSIONS).
bool Listed(std::string_view name, const std::vector<std::string>& extensions) {
  if (extensions.empty()) return image::HasImageFolderExtension(name);
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  for (const std::string& ext : extensions) {
    if (absl::EndsWith(lower, ext)) return true;
  }
  return false;
}

std::string NameList(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxNamesListed; ++i) {
    if (i > 0) out.append(", ");
    out.append(names[i]);
  }
  if (names.size() > kMaxNamesListed) {
    out.append(Cat(" and ", names.size() - kMaxNamesListed, " more"));
  }
  return out;
}

enum class Kind { kSkip, kDirectory, kFile };

struct Classified {
  Kind kind = Kind::kSkip;
  // Canonical path of what a symlink leads to; empty: the entry's own path
  // (its directory's canonical path + its name).
  std::string real;
  // A file link that leaves the root: why (PERMISSION_DENIED).
  absl::Status escape;
};

// What an entry is for the walk, following symlinks (os.walk's is_dir()).
// A symlink is resolved only when it matters: a directory, or a JPEG name
// with `want_files`. A directory leading outside the root is
// PERMISSION_DENIED; a JPEG link that does, dangles or loops is a kFile
// named by the link itself (real empty), which fails as a sample.
// `files`: the extensions of the files wanted (see Listed), or nullptr for
// directories only.
absl::StatusOr<Classified> Classify(const DataRoot& root, int dir_fd, const std::string& dir_real,
                                    std::string_view dir_display, std::string_view name,
                                    unsigned char d_type, const std::vector<std::string>* files) {
  const std::string name_str(name);
  struct stat st;
  if (d_type == DT_UNKNOWN) {
    if (fstatat(dir_fd, name_str.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Classified{};  // removed since readdir
      return PosixError(Cat("stat '", JoinPath(dir_display, name), "'"), errno);
    }
    d_type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
  }
  if (d_type == DT_DIR) return Classified{Kind::kDirectory, "", {}};
  const Kind file_kind = files != nullptr && Listed(name, *files) ? Kind::kFile : Kind::kSkip;
  if (d_type != DT_LNK) return Classified{file_kind, "", {}};

  const bool target_exists = fstatat(dir_fd, name_str.c_str(), &st, 0) == 0;
  const bool target_is_dir = target_exists && S_ISDIR(st.st_mode);
  if (!target_is_dir && file_kind != Kind::kFile) return Classified{file_kind, "", {}};
  const std::string display = JoinPath(dir_display, name);
  absl::StatusOr<ResolvedPath> resolved =
      ResolveBeneath(root, dir_real, name, display, /*allow_missing=*/!target_exists);
  if (!resolved.ok()) {
    if (target_is_dir) return resolved.status();
    // A file link that leaves the root, loops or vanished: listed (as
    // torchvision lists it) by its own path, which the worker's OpenBeneath
    // refuses or does not find; a counted sample failure, never followed.
    Classified c{Kind::kFile, "", {}};
    if (absl::IsPermissionDenied(resolved.status())) c.escape = resolved.status();
    return c;
  }
  if (target_is_dir) return Classified{Kind::kDirectory, std::move(resolved->path), {}};
  if (!resolved->exists) return Classified{Kind::kFile, "", {}};  // dangling, but confined
  return Classified{Kind::kFile, std::move(resolved->path), {}};
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

// What the walk of a class found besides its samples.
struct ClassCounts {
  uint64_t escaping = 0;     // samples that are links leaving the root
  absl::Status escape;       // why the first of them does
};

class ClassWalker {
 public:
  // `dataset_dir`: the dataset's canonical folder, the start of every path
  // the walk is given.
  ClassWalker(const DataRoot& root, std::string_view dataset_dir,
              const std::vector<std::string>& extensions, size_t* directories_walked)
      : root_(root),
        dataset_dir_(dataset_dir),
        extensions_(extensions),
        directories_walked_(directories_walked) {}

  // Appends the class's entries, in torchvision's order, to `out`. Image
  // files in a format stoker cannot decode yet are counted, not listed.
  absl::Status Walk(std::string display, std::string real, int64_t label, DatasetIndex* out,
                    ClassCounts* counts) {
    dirs_.clear();
    files_.clear();
    arena_.clear();
    out_ = out;
    counts_ = counts;
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
              Classify(root_, dir_fd, real, display, name, d_type, &extensions_);
          if (!c.ok()) return c.status();
          if (c->kind == Kind::kDirectory) {
            dirs_.push_back(WalkDir{JoinPath(display, name),
                                    c->real.empty() ? JoinPath(real, name) : std::move(c->real),
                                    static_cast<int64_t>(index)});
          } else if (c->kind == Kind::kFile) {
            if (!c->escape.ok() && counts_->escaping++ == 0) counts_->escape = c->escape;
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
    // The listed path (torchvision's, less the dataset folder) is stored
    // only where it is not the path less the dataset folder.
    const size_t listed_skip = dataset_dir_.empty() ? 0 : dataset_dir_.size() + 1;
    std::string listed;
    for (const WalkFile& f : files_) {
      const size_t start = out->paths.size();
      if (f.path_len == 0) {
        const std::string& dir = dirs_[f.dir].real;
        out->paths.append(dir);
        if (!dir.empty()) out->paths.push_back('/');
        out->paths.append(name(f));
      } else {
        out->paths.append(arena.substr(f.path_offset, f.path_len));
      }
      const std::string_view display = dirs_[f.dir].display;
      const std::string_view path = std::string_view(out->paths).substr(start);
      if (path.size() != display.size() + 1 + f.name_len ||
          path.substr(0, display.size()) != display || path.substr(display.size() + 1) != name(f)) {
        listed = JoinPath(display.substr(listed_skip), name(f));
        out->SetListed(listed);
      }
      out->EndEntry(label);
    }
  }

  const DataRoot& root_;
  const std::string_view dataset_dir_;
  const std::vector<std::string>& extensions_;
  size_t* directories_walked_;
  std::vector<WalkDir> dirs_;
  std::vector<WalkFile> files_;
  std::string arena_;  // file names and symlink targets of files_
  DatasetIndex* out_ = nullptr;
  ClassCounts* counts_ = nullptr;
};

}  // namespace

absl::Status IndexImageFolder(const DataRoot& root, const std::string& dir,
                              const IndexOptions& options, DatasetIndex* out) {
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
                         Classify(root, dir_fd, dir, dir, name, d_type, /*files=*/nullptr);
                     if (!c.ok()) return c.status();
                     if (c->kind == Kind::kDirectory) {
                       classes.push_back(ClassDir{std::string(name),
                                                  c->real.empty() ? JoinPath(dir, name) : c->real});
                     }
                     return absl::OkStatus();
                   });
  if (!status.ok()) return status;
  const std::string shown = dir.empty() ? "." : dir;  // the dataset, in messages
  if (classes.empty()) {
    return absl::FailedPreconditionError(
        Cat("ImageFolder '", shown,
            "' has no class folder (one sub-folder per class, as torchvision's ImageFolder "
            "needs)"));
  }
  std::sort(classes.begin(), classes.end(),
            [](const ClassDir& a, const ClassDir& b) { return a.name < b.name; });

  size_t directories_walked = 0;
  ClassWalker walker(root, dir, options.extensions, &directories_walked);
  std::vector<std::string> empty;  // no image file at all: torchvision's empty classes
  uint64_t escaping = 0;
  absl::Status escape;
  for (size_t label = 0; label < classes.size(); ++label) {
    out->class_names.push_back(classes[label].name);
    const uint64_t before = out->size();
    ClassCounts counts;
    status = walker.Walk(JoinPath(dir, classes[label].name), std::move(classes[label].real),
                         static_cast<int64_t>(label), out, &counts);
    if (!status.ok()) return status;
    if (out->size() == before) empty.push_back(classes[label].name);
    if (escaping == 0) escape = counts.escape;
    escaping += counts.escaping;
  }
  // Links leaving the root fail as samples; when they are all there is, the
  // dataset cannot be served at all (a farm of links into a pool beside the
  // root): that is the request's error, with its fix.
  if (escaping != 0 && escaping == out->size()) {
    return absl::PermissionDeniedError(
        Cat("ImageFolder '", shown, "': every sample is a symlink leaving the data root, e.g. ",
            escape.message()));
  }
  if (escaping != 0) {
    out->warnings.push_back(Cat(escaping,
                                escaping == 1
                                    ? " file is a symlink leaving the data root; it fails"
                                    : " files are symlinks leaving the data root; they fail",
                                " as samples. The first: ", escape.message()));
  }

  // Every problem in one message: the user fixes them in one go.
  std::vector<std::string> problems;
  if (!empty.empty() && !options.allow_empty) {
    problems.push_back(
        Cat("found no valid file for the classes ", NameList(empty),
            " (torchvision's ImageFolder raises FileNotFoundError for them; its extensions are ",
            Spelled(options.extensions),
            "). Every folder in the dataset folder, hidden ones included, is a class and takes a "
            "label: remove these folders, or pass "
            "allow_empty=True (stoker.Loader(allow_empty=True), AttachRequest.allow_empty) to keep "
            "them as classes without samples, as ImageFolder(allow_empty=True) does"));
  }
  if (!problems.empty()) {
    std::string message = Cat("ImageFolder '", shown, "': ", problems[0]);
    for (size_t k = 1; k < problems.size(); ++k) message.append(Cat(". Also: ", problems[k]));
    return absl::FailedPreconditionError(message);
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
