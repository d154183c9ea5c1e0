// The index cache: a dataset's index in one file, memory-mapped when used.
//
// Layout (little-endian, as the daemon that wrote it; every section starts
// on an 8-byte boundary so that the arrays can be used in place):
//
//   Header   magic "STKIDX1\0", version, format, flags, section table
//   sections name | paths | offsets | entry_file | ranges | names |
//            name_offsets | labels | class names | warnings | watched |
//            listed | listed_offsets | masks | mask_offsets | box_offsets |
//            boxes | box_labels | box_flags | mask_ranges
//
// String lists (class names, warnings) are stored as NUL-separated text.
// `watched` lists what the index was made from, with inode, size and mtime;
// the cache is used only if every one of them still looks the same. The
// file is written to a temporary name and renamed, so a reader never sees a
// half-written index; a file that fails any check is ignored (re-indexed).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'I', 'D', 'X', '1', '\0'};
// 2: flags (IndexOptions::flags()) and the listed paths.
// 3: every IMG_EXTENSIONS file listed. 4: masks. 5: boxes. 6: WebDataset
// masks and boxes.
constexpr uint32_t kVersion = 6;

enum Section : uint32_t {
  kName,
  kPaths,
  kOffsets,
  kEntryFile,
  kRanges,
  kNames,
  kNameOffsets,
  kLabels,
  kClassNames,
  kWarnings,
  kWatched,
  kListed,
  kListedOffsets,
  kMasks,
  kMaskOffsets,
  kBoxOffsets,
  kBoxes,
  kBoxLabels,
  kBoxFlags,
  kMaskRanges,
  kSectionCount
};

struct SectionRef {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t format;
  uint32_t flags;
  uint32_t reserved;
  uint64_t total_bytes;
  SectionRef sections[kSectionCount];
};

// One watched path, followed by its path bytes (padded to 8).
struct WatchedRecord {
  uint64_t ino;
  uint64_t size;
  int64_t mtime_ns;
  uint32_t is_dir;
  uint32_t path_bytes;
};

std::string Joined(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& s : list) {
    out.append(s);
    out.push_back('\0');
  }
  return out;
}

std::vector<std::string> Split(std::string_view blob) {
  std::vector<std::string> out;
  while (!blob.empty()) {
    const size_t end = blob.find('\0');
    if (end == std::string_view::npos) break;
    out.emplace_back(blob.substr(0, end));
    blob.remove_prefix(end + 1);
  }
  return out;
}

std::string WatchedBlob(const std::vector<WatchedPath>& watched) {
  std::string out;
  for (const WatchedPath& w : watched) {
    WatchedRecord r{w.ino, w.size, w.mtime_ns, w.is_dir ? 1u : 0u,
                    static_cast<uint32_t>(w.path.size())};
    out.append(reinterpret_cast<const char*>(&r), sizeof(r));
    out.append(w.path);
    out.append((8 - w.path.size() % 8) % 8, '\0');
  }
  return out;
}

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

bool StillSame(const DataRoot& root, const WatchedPath& w, std::string* why) {
  absl::StatusOr<int> fd =
      OpenBeneathImpl(root.fd(), w.path, w.is_dir ? OpenKind::kDirectory : OpenKind::kRegularFile,
                      /*use_openat2=*/true);
  if (!fd.ok()) {
    *why = Cat("'", w.path, "' cannot be opened now");
    return false;
  }
  UniqueFd closer(*fd);
  struct stat st;
  if (fstat(*fd, &st) != 0) {
    *why = Cat("'", w.path, "' cannot be stat'ed");
    return false;
  }
  if (st.st_ino != w.ino || MtimeNs(st) != w.mtime_ns ||
      (!w.is_dir && static_cast<uint64_t>(st.st_size) != w.size)) {
    *why = Cat("'", w.path, "' changed");
    return false;
  }
  return true;
}

Dataset::Arrays DatasetIndex::arrays() const {
  Dataset::Arrays a;
  a.paths = {paths.data(), paths.size()};
  a.offsets = {offsets.data(), offsets.size()};
  if (!entry_file.empty()) {
    a.entry_file = {entry_file.data(), entry_file.size()};
    a.ranges = {ranges.data(), ranges.size()};
    a.names = {names.data(), names.size()};
    a.name_offsets = {name_offsets.data(), name_offsets.size()};
  }
  a.labels = {labels.data(), labels.size()};
  if (!listed_offsets.empty()) {
    a.listed = {listed.data(), listed.size()};
    a.listed_offsets = {listed_offsets.data(), listed_offsets.size()};
  }
  if (!mask_offsets.empty()) {
    a.masks = {masks.data(), masks.size()};
    a.mask_offsets = {mask_offsets.data(), mask_offsets.size()};
  }
  if (!box_offsets.empty()) {
    a.box_offsets = {box_offsets.data(), box_offsets.size()};
    a.boxes = {boxes.data(), boxes.size()};
    a.box_labels = {box_labels.data(), box_labels.size()};
    a.box_flags = {box_flags.data(), box_flags.size()};
  }
  if (!mask_ranges.empty()) a.mask_ranges = {mask_ranges.data(), mask_ranges.size()};
  return a;
}

void DatasetIndex::Watch(std::string path, int fd, bool is_dir) {
  struct stat st;
  if (fstat(fd, &st) != 0) return;
  watched.push_back(WatchedPath{std::move(path), is_dir, static_cast<uint64_t>(st.st_ino),
                                is_dir ? 0 : static_cast<uint64_t>(st.st_size), MtimeNs(st)});
}

std::string CachePath(const std::string& cache_dir, const std::string& root_path,
                      const std::string& name, int format, uint32_t flags) {
  // FNV-1a 64 of what identifies the dataset; the file also stores its name.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  mix(root_path);
  mix(name);
  mix(std::to_string(format));
  mix(std::to_string(flags));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return Cat(cache_dir, "/", hex, ".idx");
}

absl::Status SaveIndex(const std::string& file, const std::string& name, int format, uint32_t flags,
                       const DatasetIndex& index) {
  const std::string class_names = Joined(index.class_names);
  const std::string warnings = Joined(index.warnings);
  const std::string watched = WatchedBlob(index.watched);
  struct Part {
    const void* data;
    uint64_t bytes;
  };
  const Part parts[kSectionCount] = {
      {name.data(), name.size()},
      {index.paths.data(), index.paths.size()},
      {index.offsets.data(), index.offsets.size() * sizeof(uint64_t)},
      {index.entry_file.data(), index.entry_file.size() * sizeof(uint32_t)},
      {index.ranges.data(), index.ranges.size() * sizeof(uint64_t)},
      {index.names.data(), index.names.size()},
      {index.name_offsets.data(), index.name_offsets.size() * sizeof(uint64_t)},
      {index.labels.data(), index.labels.size() * sizeof(int64_t)},
      {class_names.data(), class_names.size()},
      {warnings.data(), warnings.size()},
      {watched.data(), watched.size()},
      {index.listed.data(), index.listed.size()},
      {index.listed_offsets.data(), index.listed_offsets.size() * sizeof(uint64_t)},
      {index.masks.data(), index.masks.size()},
      {index.mask_offsets.data(), index.mask_offsets.size() * sizeof(uint64_t)},
      {index.box_offsets.data(), index.box_offsets.size() * sizeof(uint64_t)},
      {index.boxes.data(), index.boxes.size() * sizeof(float)},
      {index.box_labels.data(), index.box_labels.size() * sizeof(int64_t)},
      {index.box_flags.data(), index.box_flags.size()},
      {index.mask_ranges.data(), index.mask_ranges.size() * sizeof(uint64_t)},
  };
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.format = static_cast<uint32_t>(format);
  h.flags = flags;
  uint64_t at = sizeof(Header);
  for (uint32_t k = 0; k < kSectionCount; ++k) {
    at = (at + 7) & ~uint64_t{7};
    h.sections[k] = SectionRef{at, parts[k].bytes};
    at += parts[k].bytes;
  }
  h.total_bytes = at;

  // A fresh name of its own (O_EXCL, mode 0600): two writers of one index do
  // not share a temp file, and a link planted at a guessable name is not
  // followed.
  std::string tmp = Cat(file, ".tmp.XXXXXX");
  UniqueFd fd(mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd.valid()) return PosixError(Cat("create ", tmp), errno);
  bool ok = true;
  uint64_t written = 0;
  auto write_all = [&](const void* data, uint64_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (ok && bytes > 0) {
      ssize_t n = write(fd.get(), p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = false;
        break;
      }
      p += n;
      bytes -= static_cast<uint64_t>(n);
      written += static_cast<uint64_t>(n);
    }
  };
  static const char kZeros[8] = {};
  write_all(&h, sizeof(h));
  for (uint32_t k = 0; k < kSectionCount && ok; ++k) {
    write_all(kZeros, h.sections[k].offset - written);
    write_all(parts[k].data, parts[k].bytes);
  }
  const int err = errno;
  if (!ok || fsync(fd.get()) != 0 || close(fd.Release()) != 0 ||
      rename(tmp.c_str(), file.c_str()) != 0) {
    unlink(tmp.c_str());
    return PosixError(Cat("write index cache ", file), ok ? errno : err);
  }
  return absl::OkStatus();
}

MappedIndex::~MappedIndex() {
  if (addr != nullptr) munmap(addr, bytes);
}

std::unique_ptr<MappedIndex> LoadIndex(const DataRoot& root, const std::string& file,
                                       const std::string& name, int format, uint32_t flags,
                                       std::string* why) {
  why->clear();
  UniqueFd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno != ENOENT) *why = Cat("cannot open ", file, ": ", std::strerror(errno));
    return nullptr;
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < sizeof(Header)) {
    *why = Cat(file, " is not an index file");
    return nullptr;
  }
  // Only an index this user wrote, and that nobody else may change, is used
  // (a cache folder can be shared, e.g. a Kubernetes emptyDir is 0777).
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    *why = Cat(file, " is owned by another user or writable by others; not used");
    return nullptr;
  }
  auto m = std::make_unique<MappedIndex>();
  m->bytes = static_cast<size_t>(st.st_size);
  void* addr = mmap(nullptr, m->bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (addr == MAP_FAILED) {
    *why = Cat("cannot map ", file, ": ", std::strerror(errno));
    return nullptr;
  }
  m->addr = addr;
  const char* base = static_cast<const char*>(addr);
  Header h;
  std::memcpy(&h, base, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kVersion ||
      h.format != static_cast<uint32_t>(format) || h.flags != flags || h.total_bytes != m->bytes) {
    *why = Cat(file, " is from another version, format, options or a partial write");
    return nullptr;
  }
  for (const SectionRef& s : h.sections) {
    if (s.offset % 8 != 0 || s.offset > m->bytes || s.bytes > m->bytes - s.offset) {
      *why = Cat(file, " has a section outside the file");
      return nullptr;
    }
  }
  auto text = [&](Section k) {
    return std::string_view(base + h.sections[k].offset, h.sections[k].bytes);
  };
  bool shape_ok = true;
  auto array = [&](Section k, auto* span) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(span->data)>>;
    if (h.sections[k].bytes % sizeof(T) != 0) shape_ok = false;
    span->data = reinterpret_cast<const T*>(base + h.sections[k].offset);
    span->size = h.sections[k].bytes / sizeof(T);
  };
  if (text(kName) != name) {
    *why = Cat(file, " holds another dataset");
    return nullptr;
  }
  Dataset::Arrays& a = m->arrays;
  a.paths = {base + h.sections[kPaths].offset, h.sections[kPaths].bytes};
  array(kOffsets, &a.offsets);
  array(kEntryFile, &a.entry_file);
  array(kRanges, &a.ranges);
  a.names = {base + h.sections[kNames].offset, h.sections[kNames].bytes};
  array(kNameOffsets, &a.name_offsets);
  array(kLabels, &a.labels);
  a.listed = {base + h.sections[kListed].offset, h.sections[kListed].bytes};
  array(kListedOffsets, &a.listed_offsets);
  a.masks = {base + h.sections[kMasks].offset, h.sections[kMasks].bytes};
  array(kMaskOffsets, &a.mask_offsets);
  array(kBoxOffsets, &a.box_offsets);
  array(kBoxes, &a.boxes);
  array(kBoxLabels, &a.box_labels);
  array(kBoxFlags, &a.box_flags);
  array(kMaskRanges, &a.mask_ranges);
  // The arrays must agree with one another, and every offset stay inside
  // its buffer: a damaged cache must not send a worker elsewhere.
  const uint64_t n = a.labels.size;
  const uint64_t files = a.offsets.size == 0 ? 0 : a.offsets.size - 1;
  const bool tar = a.entry_file.size != 0;
  if (!shape_ok || a.offsets.size == 0 || (!tar && files != n) ||
      (tar && (a.entry_file.size != n || a.ranges.size != 2 * n || a.name_offsets.size != n + 1)) ||
      (!tar && (a.ranges.size != 0 || a.name_offsets.size > 1)) ||
      (a.listed_offsets.size != 0 && a.listed_offsets.size != n + 1) ||
      (a.mask_offsets.size != 0 && a.mask_offsets.size != n + 1) ||
      (a.box_offsets.size != 0 && a.box_offsets.size != n + 1) ||
      a.boxes.size != 4 * a.box_labels.size || a.box_flags.size != a.box_labels.size ||
      (a.mask_ranges.size != 0 && a.mask_ranges.size != 2 * n)) {
    *why = Cat(file, " is inconsistent");
    return nullptr;
  }
  for (uint64_t f = 0; f < files; ++f) {
    if (a.offsets[f] > a.offsets[f + 1] || a.offsets[f + 1] > a.paths.size) shape_ok = false;
  }
  if (tar) {
    for (uint64_t i = 0; i < n; ++i) {
      if (a.entry_file[i] >= files || a.name_offsets[i] > a.name_offsets[i + 1] ||
          a.name_offsets[i + 1] > a.names.size) {
        shape_ok = false;
      }
    }
  }
  for (uint64_t i = 0; i + 1 < a.listed_offsets.size; ++i) {
    if (a.listed_offsets[i] > a.listed_offsets[i + 1] || a.listed_offsets[i + 1] > a.listed.size) {
      shape_ok = false;
    }
  }
  for (uint64_t i = 0; i + 1 < a.mask_offsets.size; ++i) {
    if (a.mask_offsets[i] > a.mask_offsets[i + 1] || a.mask_offsets[i + 1] > a.masks.size) {
      shape_ok = false;
    }
  }
  for (uint64_t i = 0; i + 1 < a.box_offsets.size; ++i) {
    if (a.box_offsets[i] > a.box_offsets[i + 1]) shape_ok = false;
  }
  if (a.box_offsets.size != 0 && a.box_offsets[a.box_offsets.size - 1] != a.box_labels.size) {
    shape_ok = false;
  }
  if (!shape_ok || a.offsets[0] != 0 || (a.listed_offsets.size != 0 && a.listed_offsets[0] != 0) ||
      (a.mask_offsets.size != 0 && a.mask_offsets[0] != 0) ||
      (a.box_offsets.size != 0 && a.box_offsets[0] != 0)) {
    *why = Cat(file, " is inconsistent");
    return nullptr;
  }
  if (!tar) a.name_offsets = {};  // saved as {0}
  m->class_names = Split(text(kClassNames));
  m->warnings = Split(text(kWarnings));
  // Has anything it was made from changed?
  std::string_view watched = text(kWatched);
  while (!watched.empty()) {
    WatchedRecord r;
    if (watched.size() < sizeof(r)) {
      *why = Cat(file, " is inconsistent");
      return nullptr;
    }
    std::memcpy(&r, watched.data(), sizeof(r));
    watched.remove_prefix(sizeof(r));
    const uint64_t padded = (uint64_t{r.path_bytes} + 7) & ~uint64_t{7};
    if (watched.size() < padded) {
      *why = Cat(file, " is inconsistent");
      return nullptr;
    }
    WatchedPath w{std::string(watched.substr(0, r.path_bytes)), r.is_dir != 0, r.ino, r.size,
                  r.mtime_ns};
    watched.remove_prefix(padded);
    if (!StillSame(root, w, why)) return nullptr;
    m->watched.push_back(std::move(w));
  }
  return m;
}

}  // namespace dataset_internal
}  // namespace stoker
