#include "server/dataset/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/match.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "server/dataset/beneath.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {

using dataset_internal::Cat;
using dataset_internal::JoinPath;
using dataset_internal::ToAbsl;

absl::StatusOr<std::unique_ptr<DataRoot>> DataRoot::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty data root");
  std::unique_ptr<char, decltype(&free)> real(realpath(dir.c_str(), nullptr), &free);
  if (real == nullptr) return PosixError(Cat("data root '", dir, "'"), errno);
  int fd = open(real.get(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOTDIR) {
      return absl::InvalidArgumentError(Cat("data root '", dir, "' is not a directory"));
    }
    return PosixError(Cat("open data root '", dir, "'"), err);
  }
  return std::unique_ptr<DataRoot>(new DataRoot(real.get(), fd));
}

DataRoot::~DataRoot() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::string> DataRoot::Resolve(std::string_view user_path) const {
  absl::StatusOr<dataset_internal::ResolvedPath> resolved =
      dataset_internal::ResolveUserPath(*this, user_path);
  if (!resolved.ok()) return resolved.status();
  return std::move(resolved->path);
}

absl::StatusOr<int> OpenBeneath(int root_fd, std::string_view relative_path) {
  return dataset_internal::OpenBeneathImpl(root_fd, relative_path,
                                           dataset_internal::OpenKind::kRegularFile,
                                           /*use_openat2=*/true);
}

namespace {

constexpr size_t kMaxExpansions = 100000;
// A pattern longer than a path may be is refused, and so is one whose
// expansion would take more than this many bytes (the count limit alone lets
// 100,000 copies of a long suffix through).
constexpr size_t kMaxPatternBytes = 4096;
constexpr size_t kMaxExpandedBytes = size_t{64} << 20;

bool IsPattern(std::string_view p) { return p.find('{') != std::string_view::npos; }

bool EndsWithTar(std::string_view p) {
  return p.size() >= 4 && absl::EqualsIgnoreCase(ToAbsl(p.substr(p.size() - 4)), ".tar");
}

// `user_path` resolved (canonical, relative to the root), which must be a
// directory: INVALID_ARGUMENT saying it is not one, and what it should be.
absl::StatusOr<std::string> ResolveDir(const DataRoot& root, std::string_view user_path,
                                       std::string_view what) {
  absl::StatusOr<dataset_internal::ResolvedPath> dir =
      dataset_internal::ResolveUserPath(root, user_path);
  if (!dir.ok()) return dir.status();
  if (!dir->is_dir) {
    return absl::InvalidArgumentError(Cat("'", user_path, "' is not a directory (", what, ")"));
  }
  return std::move(dir->path);
}

// Whether the folder `dir` (canonical, relative to the root) is an LMDB's:
// it holds a regular file data.mdb.
bool HasLmdbData(const DataRoot& root, const std::string& dir) {
  absl::StatusOr<int> fd = OpenBeneath(root.fd(), dir.empty() ? "data.mdb" : dir + "/data.mdb");
  if (!fd.ok()) return false;
  ::close(*fd);
  return true;
}

// The shard paths of a WebDataset, canonical, in order.
absl::StatusOr<std::vector<std::string>> ResolveShards(const DataRoot& root,
                                                       std::string_view user_path) {
  absl::StatusOr<std::vector<std::string>> expanded = Dataset::ExpandBraces(user_path);
  if (!expanded.ok()) return expanded.status();
  std::vector<std::string> shards;
  shards.reserve(expanded->size());
  for (const std::string& p : *expanded) {
    absl::StatusOr<dataset_internal::ResolvedPath> r = dataset_internal::ResolveUserPath(root, p);
    if (!r.ok()) return r.status();
    if (r->is_dir) return absl::InvalidArgumentError(Cat("shard '", p, "' is a directory"));
    shards.push_back(std::move(r->path));
  }
  return shards;
}

// Whether an index's files are `files`, in order.
bool SameFiles(const Dataset::Arrays& a, const std::vector<std::string>& files) {
  if (a.offsets.size != files.size() + 1) return false;
  const std::string_view all(a.paths.data, a.paths.size);
  for (size_t f = 0; f < files.size(); ++f) {
    if (all.substr(a.offsets[f], a.offsets[f + 1] - a.offsets[f]) != files[f]) return false;
  }
  return true;
}

}  // namespace

struct Dataset::Storage {
  dataset_internal::DatasetIndex built;
  std::unique_ptr<dataset_internal::MappedIndex> mapped;
};

Dataset::~Dataset() = default;

absl::StatusOr<std::vector<std::string>> Dataset::ExpandBraces(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(Cat("a shard pattern of ", pattern.size(),
                                          " bytes is over the limit of ", kMaxPatternBytes));
  }
  std::vector<std::string> out{""};
  size_t out_bytes = 0;  // the sum of out's lengths
  auto too_big = [&pattern] {
    return absl::InvalidArgumentError(Cat("'", pattern, "' expands to more than ",
                                          kMaxExpandedBytes >> 20, " MiB of shard names"));
  };
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '}') return absl::InvalidArgumentError(Cat("unbalanced '}' in '", pattern, "'"));
    if (c != '{') {
      size_t end = pattern.find_first_of("{}", i);
      if (end == std::string_view::npos) end = pattern.size();
      const std::string_view run = pattern.substr(i, end - i);
      if (out_bytes + out.size() * run.size() > kMaxExpandedBytes) return too_big();
      for (std::string& o : out) o.append(run);
      out_bytes += out.size() * run.size();
      i = end;
      continue;
    }
    const size_t close = pattern.find('}', i);
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(Cat("unbalanced '{' in '", pattern, "'"));
    }
    const std::string_view body = pattern.substr(i + 1, close - i - 1);
    if (body.empty() || body.find('{') != std::string_view::npos) {
      return absl::InvalidArgumentError(Cat("bad brace group '{", body, "}' in '", pattern, "'"));
    }
    std::vector<std::string> choices;
    const size_t dots = body.find("..");
    if (dots != std::string_view::npos) {
      const std::string_view a = body.substr(0, dots), b = body.substr(dots + 2);
      uint64_t lo, hi;
      // Endpoints of at most 20 digits: zero padding wider than any uint64
      // would make 100,000 names of kilobytes each before any byte check.
      if (a.size() > 20 || b.size() > 20 || !absl::SimpleAtoi(ToAbsl(a), &lo) ||
          !absl::SimpleAtoi(ToAbsl(b), &hi) || lo > hi || hi - lo >= kMaxExpansions ||
          !absl::ascii_isdigit(static_cast<unsigned char>(a[0]))) {
        return absl::InvalidArgumentError(Cat("bad range '{", body, "}' in '", pattern, "'"));
      }
      for (uint64_t v = lo; v <= hi; ++v) {
        std::string d = std::to_string(v);
        if (d.size() < a.size()) d.insert(0, a.size() - d.size(), '0');
        choices.push_back(std::move(d));
      }
    } else {
      size_t from = 0;
      while (true) {
        const size_t comma = body.find(',', from);
        choices.emplace_back(
            body.substr(from, comma == std::string_view::npos ? body.size() - from : comma - from));
        if (comma == std::string_view::npos) break;
        from = comma + 1;
      }
    }
    if (out.size() * choices.size() > kMaxExpansions) {
      return absl::InvalidArgumentError(
          Cat("'", pattern, "' names more than ", kMaxExpansions, " shards"));
    }
    size_t choice_bytes = 0;
    for (const std::string& ch : choices) choice_bytes += ch.size();
    // out.size() * choices.size() <= kMaxExpansions and each length is
    // below kMaxPatternBytes + 20, so neither product overflows.
    const size_t next_bytes = out_bytes * choices.size() + out.size() * choice_bytes;
    if (next_bytes > kMaxExpandedBytes) return too_big();
    out_bytes = next_bytes;
    std::vector<std::string> next;
    next.reserve(out.size() * choices.size());
    for (const std::string& o : out) {
      for (const std::string& ch : choices) next.push_back(o + ch);
    }
    out.swap(next);
    i = close + 1;
  }
  return out;
}

namespace {

uint32_t MaxBoxes(const Dataset::Arrays& a) {
  uint64_t most = 0;
  for (uint64_t i = 0; i + 1 < a.box_offsets.size; ++i) {
    most = std::max(most, a.box_offsets[i + 1] - a.box_offsets[i]);
  }
  return static_cast<uint32_t>(std::min<uint64_t>(most, UINT32_MAX));
}

}  // namespace

absl::StatusOr<std::string> Dataset::CanonicalName(const DataRoot& root,
                                                   std::string_view user_path) {
  if (!IsPattern(user_path)) return root.Resolve(user_path);
  // A pattern: its folder resolved, the pattern itself kept.
  const size_t slash = user_path.rfind('/', user_path.find('{'));
  if (slash == std::string_view::npos) return std::string(user_path);
  std::string_view dir = user_path.substr(0, slash);
  absl::StatusOr<std::string> d = root.Resolve(dir.empty() ? "/" : dir);
  if (!d.ok()) return d.status();
  return JoinPath(*d, user_path.substr(slash + 1));
}

std::string Dataset::display(uint64_t i) const {
  std::string out(path(i));
  for (size_t at = out.find('\0'); at != std::string::npos; at = out.find('\0', at)) {
    out.replace(at, 1, ", ");  // a volume's channel files (kDecathlon)
  }
  if (a_.name_offsets.size != 0) {
    out.push_back(':');
    out.append(a_.names.data + a_.name_offsets[i], a_.name_offsets[i + 1] - a_.name_offsets[i]);
  }
  return out;
}

std::string Dataset::listed_path(uint64_t i) const {
  if (format_ != DatasetFormat::kImageFolder) return display(i);
  if (a_.listed_offsets.size != 0 && a_.listed_offsets[i + 1] != a_.listed_offsets[i]) {
    return std::string(a_.listed.data + a_.listed_offsets[i],
                       a_.listed_offsets[i + 1] - a_.listed_offsets[i]);
  }
  // The path less "<name>/" (nothing for a dataset at the root itself).
  std::string_view p = path(i);
  if (!name_.empty()) p.remove_prefix(name_.size() + 1);
  return std::string(p);
}

absl::StatusOr<std::shared_ptr<const Dataset>> Dataset::Open(const DataRoot& root,
                                                             std::string_view user_path,
                                                             DatasetFormat format,
                                                             const IndexOptions& options) {
  if (format == DatasetFormat::kAuto && !options.annotations.empty()) {
    format = DatasetFormat::kCoco;
  }
  if (format == DatasetFormat::kAuto && !options.masks.empty()) {
    format = options.label_files ? DatasetFormat::kVolumeFolder : DatasetFormat::kPairedFolders;
  }
  if (format == DatasetFormat::kAuto && (IsPattern(user_path) || EndsWithTar(user_path))) {
    format = DatasetFormat::kWebDataset;
  }
  std::vector<std::string> shards;
  std::string name;
  std::string annotations;  // COCO: the canonical JSON path
  std::string masks;        // paired folders: the canonical masks folder
  if (format == DatasetFormat::kAuto && options.label_files) {
    // A volume session's folder is a folder of volumes, not of classes.
    absl::StatusOr<dataset_internal::ResolvedPath> resolved =
        dataset_internal::ResolveUserPath(root, user_path);
    if (resolved.ok() && resolved->is_dir && !HasLmdbData(root, resolved->path)) {
      format = DatasetFormat::kVolumeFolder;
    }
  }
  if (format == DatasetFormat::kVolumeFolder) {
    absl::StatusOr<std::string> dir = ResolveDir(root, user_path, "a folder of volumes");
    if (!dir.ok()) return dir.status();
    name = *std::move(dir);
    if (!options.masks.empty()) {
      absl::StatusOr<std::string> labels =
          ResolveDir(root, options.masks, "the label volumes' folder");
      if (!labels.ok()) return labels.status();
      masks = *std::move(labels);
    }
  } else if (format == DatasetFormat::kPairedFolders) {
    if (options.masks.empty()) {
      return absl::InvalidArgumentError(
          "paired folders need the masks folder: give masks= (the dataset path is the images "
          "folder)");
    }
    for (const std::string* s : {&options.image_suffix, &options.mask_suffix}) {
      if (s->find('/') != std::string::npos || s->find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(
            Cat("image_suffix and mask_suffix are the ends of file names, not paths: '", *s, "'"));
      }
    }
    const std::string_view given[2] = {user_path, options.masks};
    std::string* const resolved[2] = {&name, &masks};
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<std::string> dir = ResolveDir(root, given[k], "paired folders: images and masks");
      if (!dir.ok()) return dir.status();
      *resolved[k] = *std::move(dir);
    }
  } else if (format == DatasetFormat::kCoco) {
    if (options.annotations.empty()) {
      return absl::InvalidArgumentError(
          "a COCO dataset needs its instances JSON: give annotations= (the dataset path is the "
          "images folder)");
    }
    absl::StatusOr<std::string> images = ResolveDir(root, user_path, "a COCO dataset's images folder");
    if (!images.ok()) return images.status();
    absl::StatusOr<dataset_internal::ResolvedPath> json =
        dataset_internal::ResolveUserPath(root, options.annotations);
    if (!json.ok()) return json.status();
    if (json->is_dir) {
      return absl::InvalidArgumentError(
          Cat("annotations '", options.annotations, "' is a directory, not a COCO JSON file"));
    }
    name = *std::move(images);
    annotations = std::move(json->path);
  } else if (format == DatasetFormat::kWebDataset) {
    absl::StatusOr<std::vector<std::string>> s = ResolveShards(root, user_path);
    if (!s.ok()) return s.status();
    shards = std::move(*s);
    absl::StatusOr<std::string> n = CanonicalName(root, user_path);
    if (!n.ok()) return n.status();
    name = std::move(*n);
  } else {
    absl::StatusOr<dataset_internal::ResolvedPath> resolved =
        dataset_internal::ResolveUserPath(root, user_path);
    if (!resolved.ok()) return resolved.status();
    const auto ends = [&](std::initializer_list<const char*> suffixes) {
      for (const char* e : suffixes) {
        if (absl::EndsWith(resolved->path, e)) return true;
      }
      return false;
    };
    switch (format) {
      case DatasetFormat::kAuto:
        format = resolved->is_dir ? (HasLmdbData(root, resolved->path) ? DatasetFormat::kLmdb
                                                                       : DatasetFormat::kImageFolder)
                 : NamedLikeHdf5(resolved->path)          ? DatasetFormat::kHdf5
                 : ends({".mdb", ".lmdb"})               ? DatasetFormat::kLmdb
                 : absl::EndsWith(resolved->path, ".json") ? DatasetFormat::kDecathlon
                                                       : DatasetFormat::kManifest;
        break;
      case DatasetFormat::kHdf5:
        if (resolved->is_dir) {
          return absl::InvalidArgumentError(
              Cat("'", user_path, "' is a directory, not an HDF5 file"));
        }
        break;
      case DatasetFormat::kLmdb:
        if (resolved->is_dir && !HasLmdbData(root, resolved->path)) {
          return absl::InvalidArgumentError(
              Cat("'", user_path, "' holds no data.mdb (an LMDB's folder, or its data.mdb)"));
        }
        break;
      case DatasetFormat::kImageFolder:
        if (!resolved->is_dir) {
          return absl::InvalidArgumentError(
              Cat("'", user_path, "' is not a directory (an ImageFolder dataset)"));
        }
        break;
      case DatasetFormat::kManifest:
      case DatasetFormat::kDecathlon:
        if (resolved->is_dir) {
          return absl::InvalidArgumentError(
              Cat("'", user_path, "' is a directory, not a manifest file"));
        }
        break;
      default:
        return absl::InvalidArgumentError(Cat("unknown dataset format ", static_cast<int>(format)));
    }
    name = std::move(resolved->path);
  }

  std::shared_ptr<Dataset> dataset(new Dataset());
  dataset->name_ = name;
  dataset->format_ = format;
  dataset->storage_ = std::make_unique<Storage>();
  const int format_id = static_cast<int>(format);
  const uint32_t flags = options.flags();
  // What the cache file is kept under and holds: the name and the identity
  // of the other files, canonical.
  IndexOptions canonical = options;
  canonical.annotations = annotations;
  canonical.masks = masks;
  const std::string cache_name = name + canonical.identity();

  const bool records = format == DatasetFormat::kHdf5 || format == DatasetFormat::kLmdb;
  // The cache first (record files are not cached: their index is read from
  // their headers and keys).
  std::string cache_file;
  if (!options.cache_dir.empty() && !records) {
    if (mkdir(options.cache_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      dataset->warnings_.push_back(
          Cat("index cache ", options.cache_dir, " cannot be created: ", std::strerror(errno)));
    } else {
      cache_file =
          dataset_internal::CachePath(options.cache_dir, root.path(), cache_name, format_id, flags);
      std::string why;
      auto mapped =
          dataset_internal::LoadIndex(root, cache_file, cache_name, format_id, flags, &why);
      // A pattern's shards may be links that now point elsewhere (git-annex,
      // DVC): the cached index must be of the files the pattern names now.
      if (mapped != nullptr && format == DatasetFormat::kWebDataset &&
          !SameFiles(mapped->arrays, shards)) {
        why = "the shards now resolve to other files";
        mapped = nullptr;
      }
      if (mapped != nullptr) {
        Dataset& d = *dataset;
        d.a_ = mapped->arrays;
        d.class_names_ = mapped->class_names;
        d.warnings_ = mapped->warnings;
        d.from_cache_ = true;
        d.max_boxes_ = MaxBoxes(d.a_);
        d.storage_->mapped = std::move(mapped);
        if (options.progress) options.progress(d.size());
        return std::shared_ptr<const Dataset>(std::move(dataset));
      }
      if (!why.empty()) dataset->warnings_.push_back(Cat("index cache not used: ", why));
    }
  }

  const int64_t started_ns = MonotonicNs();
  dataset_internal::DatasetIndex& index = dataset->storage_->built;
  if (options.progress) {
    // At most every 2 s (the indexers call at every 65,536 entries).
    auto last = std::make_shared<int64_t>(started_ns);
    index.progress = [last, cb = options.progress](uint64_t n) {
      const int64_t now = MonotonicNs();
      if (now - *last >= 2'000'000'000) {
        *last = now;
        cb(n);
      }
    };
  }
  absl::Status status;
  if (format == DatasetFormat::kImageFolder) {
    status = dataset_internal::IndexImageFolder(root, name, options, &index);
  } else if (format == DatasetFormat::kManifest) {
    status = dataset_internal::IndexManifest(root, name, options.label_files, &index);
  } else if (format == DatasetFormat::kDecathlon) {
    status = dataset_internal::IndexDecathlon(root, name, &index);
  } else if (records) {
    const std::string file =
        format == DatasetFormat::kLmdb && HasLmdbData(root, name)
            ? (name.empty() ? std::string("data.mdb") : name + "/data.mdb")
            : name;
    uint32_t raw[3] = {0, 0, 0};
    status = dataset_internal::IndexRecords(root, format, file, options, &index, raw);
    dataset->raw_height_ = raw[0];
    dataset->raw_width_ = raw[1];
    dataset->raw_channels_ = raw[2];
  } else if (format == DatasetFormat::kCoco) {
    status = dataset_internal::IndexCoco(root, name, annotations, &index);
  } else if (format == DatasetFormat::kVolumeFolder) {
    status = dataset_internal::IndexVolumeFolder(root, name, masks, &index);
  } else if (format == DatasetFormat::kPairedFolders) {
    status = dataset_internal::IndexPairedFolders(root, name, masks, options.image_suffix,
                                                  options.mask_suffix, &index);
  } else {
    status = dataset_internal::IndexWebDataset(root, shards, options.extensions, &index);
  }
  index.progress = nullptr;
  if (!status.ok()) return status;
  if (index.size() == 0) {
    std::string keys;
    for (const std::string& e : options.extensions) keys += (keys.empty() ? "" : ", ") + e;
    return absl::FailedPreconditionError(
        !options.extensions.empty()
            ? Cat("'", user_path, "' has no ", format == DatasetFormat::kWebDataset ? "member" : "file",
                  " named with one of ", keys)
        : format == DatasetFormat::kImageFolder
            ? Cat("ImageFolder '", user_path, "' has no .jpg/.jpeg file in a class folder")
        : format == DatasetFormat::kManifest
            ? Cat("manifest '", user_path, "' lists no entry")
        : format == DatasetFormat::kDecathlon
            ? Cat("dataset.json '", user_path, "' lists no training entry")
        : format == DatasetFormat::kCoco
            ? Cat("annotations '", options.annotations, "' list no image")
        : records
            ? Cat("record file '", user_path, "' holds no sample")
            : Cat("no sample with a .jpg/.jpeg member in the shards '", user_path, "'"));
  }
  if (options.progress) options.progress(index.size());
  // Vectors grown by doubling may hold twice what they need; a copy to
  // release it is worth it only then.
  auto trim = [](auto& buffer) {
    if (buffer.capacity() > buffer.size() + buffer.size() / 8) buffer.shrink_to_fit();
  };
  trim(index.paths);
  trim(index.offsets);
  trim(index.labels);
  trim(index.entry_file);
  trim(index.ranges);
  trim(index.names);
  trim(index.name_offsets);
  trim(index.listed);
  trim(index.listed_offsets);
  trim(index.masks);
  trim(index.mask_offsets);
  trim(index.box_offsets);
  trim(index.boxes);
  trim(index.box_labels);
  trim(index.box_flags);
  trim(index.mask_ranges);

  if (!cache_file.empty()) {
    // A folder changed within the last 2 s may change again within the same
    // mtime tick, unseen: do not cache such a racy index (the next attach
    // indexes, and caches, again).
    bool racy = false;
    const int64_t now_ns = WallNs();
    for (const auto& w : index.watched) racy = racy || w.mtime_ns > now_ns - 2'000'000'000;
    if (!racy) {
      absl::Status saved =
          dataset_internal::SaveIndex(cache_file, cache_name, format_id, flags, index);
      if (!saved.ok()) index.warnings.push_back(Cat("index cache not written: ", saved.message()));
    }
  }
  Dataset& d = *dataset;
  d.a_ = index.arrays();
  d.max_boxes_ = MaxBoxes(d.a_);
  d.class_names_ = index.class_names;
  for (std::string& w : index.warnings) d.warnings_.push_back(std::move(w));
  index.warnings.clear();
  return std::shared_ptr<const Dataset>(std::move(dataset));
}

bool Dataset::Unchanged(const DataRoot& root, std::string* why) const {
  if (format_ == DatasetFormat::kWebDataset && IsPattern(name_)) {
    absl::StatusOr<std::vector<std::string>> shards = ResolveShards(root, name_);
    if (!shards.ok() || !SameFiles(a_, *shards)) {
      *why = Cat("the shards of ", name_, " now resolve to other files");
      return false;
    }
  }
  const auto& watched =
      storage_->mapped != nullptr ? storage_->mapped->watched : storage_->built.watched;
  for (const auto& w : watched) {
    if (!dataset_internal::StillSame(root, w, why)) return false;
  }
  return true;
}

uint64_t Dataset::memory_bytes() const {
  const dataset_internal::DatasetIndex& b = storage_->built;
  uint64_t bytes = b.paths.capacity() + b.offsets.capacity() * sizeof(uint64_t) +
                   b.labels.capacity() * sizeof(int64_t) +
                   b.entry_file.capacity() * sizeof(uint32_t) +
                   b.ranges.capacity() * sizeof(uint64_t) + b.names.capacity() +
                   b.name_offsets.capacity() * sizeof(uint64_t) + b.listed.capacity() +
                   b.listed_offsets.capacity() * sizeof(uint64_t) + b.masks.capacity() +
                   b.mask_offsets.capacity() * sizeof(uint64_t) +
                   b.box_offsets.capacity() * sizeof(uint64_t) +
                   b.boxes.capacity() * sizeof(float) + b.box_labels.capacity() * sizeof(int64_t) +
                   b.box_flags.capacity() + b.mask_ranges.capacity() * sizeof(uint64_t) +
                   name_.capacity() +
                   class_names_.capacity() * sizeof(std::string);
  for (const std::string& name : class_names_) bytes += name.capacity();
  return bytes;
}

}  // namespace stoker
