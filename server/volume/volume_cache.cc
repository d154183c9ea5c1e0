#include "server/volume/volume_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"
#include "common/hash64.h"

namespace stoker::volume {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'V', 'C', 'v', '1', '\0'};
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kHeaderHashAt = kVolumeEntryHeaderBytes - 8;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

absl::Status Errno(const std::string& what) {
  return absl::ErrnoToStatus(errno, what);
}

}  // namespace

absl::Status ForegroundBackground(const FloatVolume& image, const std::vector<uint8_t>& label,
                                  double image_threshold, std::vector<uint32_t>* fg,
                                  std::vector<uint32_t>* bg) {
  const int64_t n = image.ChannelVoxels();
  if (static_cast<int64_t>(label.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("the label has ", label.size(),
                                                   " voxels and the image ", n, " a channel"));
  }
  if (n >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError("a volume of 2^32 voxels or more");
  }
  fg->clear();
  bg->clear();
  for (int64_t v = 0; v < n; ++v) {
    if (label[static_cast<size_t>(v)] != 0) {
      fg->push_back(static_cast<uint32_t>(v));
      continue;
    }
    for (int64_t c = 0; c < image.channels; ++c) {
      if (image.values[static_cast<size_t>(c * n + v)] > image_threshold) {
        bg->push_back(static_cast<uint32_t>(v));
        break;
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// Where an entry's sections lie (the header's table).
struct Sections {
  uint64_t image_at, image_bytes, label_at, label_bytes, fg_at, bg_at, end;
};

Sections SectionsOf(const PreparedVolume& v) {
  Sections s;
  s.image_at = kVolumeEntryHeaderBytes;
  s.image_bytes = static_cast<uint64_t>(v.image.Voxels()) * 4;
  s.label_at = AlignUp(s.image_at + s.image_bytes);
  s.label_bytes = v.has_label ? static_cast<uint64_t>(v.image.ChannelVoxels()) : 0;
  s.fg_at = AlignUp(s.label_at + s.label_bytes);
  s.bg_at = AlignUp(s.fg_at + v.foreground.size() * 4);
  s.end = s.bg_at + v.background.size() * 4;
  return s;
}

}  // namespace

uint64_t EntryBytes(const PreparedVolume& v) { return SectionsOf(v).end; }

std::string VolumeEntryName(uint64_t id) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, id);
  return std::string(hex) + ".stkv";
}

absl::StatusOr<UniqueFd> ClaimEntry(int dir_fd, const std::string& name) {
  const std::string tmp = ".tmp-" + name;
  UniqueFd fd(::openat(dir_fd, tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    if (errno == EEXIST) return absl::AlreadyExistsError(tmp + ": another writer holds it");
    return Errno("creating " + tmp);
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const absl::Status st = Errno("locking " + tmp);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return st;
  }
  return fd;
}

ClaimState ProbeClaim(int dir_fd, const std::string& name, int64_t stale_after_ns) {
  const std::string tmp = ".tmp-" + name;
  UniqueFd fd(::openat(dir_fd, tmp.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ClaimState::kNone;
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) return ClaimState::kHeld;
  // Unlocked: its writer is gone, or has only just created it (it locks
  // right after): gone only once it is old enough.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ClaimState::kHeld;
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t age = (now.tv_sec - st.st_mtim.tv_sec) * 1'000'000'000 + (now.tv_nsec - st.st_mtim.tv_nsec);
  if (age < stale_after_ns) return ClaimState::kHeld;
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  return ClaimState::kNone;
}

absl::Status WriteEntry(int dir_fd, const std::string& name, uint64_t key,
                        const PreparedVolume& v) {
  absl::StatusOr<UniqueFd> claimed = ClaimEntry(dir_fd, name);
  if (!claimed.ok()) return claimed.status();
  return WriteClaimedEntry(dir_fd, *std::move(claimed), name, key, v);
}

absl::Status WriteClaimedEntry(int dir_fd, UniqueFd fd, const std::string& name, uint64_t key,
                               const PreparedVolume& v) {
  const uint64_t voxels = static_cast<uint64_t>(v.image.Voxels());
  const uint64_t channel_voxels = static_cast<uint64_t>(v.image.ChannelVoxels());
  if (v.image.values.size() != voxels || (v.has_label && v.label.size() != channel_voxels)) {
    return absl::InvalidArgumentError("a prepared volume whose values do not fit its shape");
  }
  const Sections sec = SectionsOf(v);
  const uint64_t image_at = sec.image_at, image_bytes = sec.image_bytes;
  const uint64_t label_at = sec.label_at, label_bytes = sec.label_bytes;
  const uint64_t fg_at = sec.fg_at, bg_at = sec.bg_at, end = sec.end;

  const std::string tmp = ".tmp-" + name;
  auto fail = [&](absl::Status s) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return s;
  };
  auto put = [&](uint64_t at, const void* data, uint64_t bytes) {
    return WriteFullyAt(fd.get(), at, data, bytes, tmp).ok();
  };

  // Every byte up to `end` written, the padding between sections as zeros
  // (no ftruncate: the workers' sandbox does not allow it).
  static const uint8_t kZeros[4096] = {};
  auto pad = [&](uint64_t from, uint64_t to) { return from >= to || put(from, kZeros, to - from); };
  if (!put(0, kZeros, kVolumeEntryHeaderBytes) ||
      !put(image_at, v.image.values.data(), image_bytes) || !pad(image_at + image_bytes, label_at) ||
      (label_bytes != 0 && !put(label_at, v.label.data(), label_bytes)) ||
      !pad(label_at + label_bytes, fg_at) ||
      (!v.foreground.empty() && !put(fg_at, v.foreground.data(), v.foreground.size() * 4)) ||
      !pad(fg_at + v.foreground.size() * 4, bg_at) ||
      (!v.background.empty() && !put(bg_at, v.background.data(), v.background.size() * 4))) {
    return fail(Errno("writing " + tmp));
  }
  // The payload hash over what the file now holds (padding included).
  uint64_t payload_hash = 0;
  {
    void* m = ::mmap(nullptr, end, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) return fail(Errno("mapping " + tmp));
    Mapping map(m, end);
    payload_hash = Hash64(static_cast<const uint8_t*>(m) + kVolumeEntryHeaderBytes,
                          end - kVolumeEntryHeaderBytes, kVolumeEntryVersion);
  }
  std::vector<uint8_t> h(kVolumeEntryHeaderBytes, 0);
  std::memcpy(h.data(), kMagic, 8);
  StoreAt<uint32_t>(h.data(), 8, kVolumeEntryVersion);
  StoreAt<uint32_t>(h.data(), 12, static_cast<uint32_t>(kVolumeEntryHeaderBytes));
  StoreAt<uint64_t>(h.data(), 16, key);
  for (int a = 0; a < 3; ++a) StoreAt<int64_t>(h.data(), 24 + 8 * a, v.image.shape[a]);
  StoreAt<int64_t>(h.data(), 48, v.image.channels);
  StoreAt<uint32_t>(h.data(), 56, v.has_label ? 1 : 0);
  for (int i = 0; i < 16; ++i) StoreAt<double>(h.data(), 64 + 8 * i, v.image.affine[i]);
  const uint64_t sections[8] = {image_at, image_bytes, label_at,  label_bytes,
                                fg_at,    v.foreground.size(), bg_at, v.background.size()};
  for (int i = 0; i < 8; ++i) StoreAt<uint64_t>(h.data(), 192 + 8 * i, sections[i]);
  StoreAt<uint64_t>(h.data(), 256, end - kVolumeEntryHeaderBytes);
  StoreAt<uint64_t>(h.data(), 264, payload_hash);
  StoreAt<uint64_t>(h.data(), kHeaderHashAt, Hash64(h.data(), kHeaderHashAt, kVolumeEntryVersion));
  if (!put(0, h.data(), h.size())) return fail(Errno("writing " + tmp));
  if (::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    return fail(Errno("renaming " + tmp));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MappedEntry>> MappedEntry::Open(int dir_fd, const std::string& name,
                                                               uint64_t key, bool verify_payload) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::NotFoundError(name + ": no entry");
    return Errno("opening " + name);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("stat " + name);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(name, ": ", why));
  };
  if (!S_ISREG(st.st_mode) || size < kVolumeEntryHeaderBytes) return bad("shorter than a header");
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (m == MAP_FAILED) return Errno("mapping " + name);
  std::unique_ptr<MappedEntry> e(new MappedEntry());
  e->map_ = Mapping(m, size);
  const auto* h = static_cast<const uint8_t*>(m);
  if (std::memcmp(h, kMagic, 8) != 0 || LoadAt<uint32_t>(h, 8) != kVolumeEntryVersion ||
      LoadAt<uint32_t>(h, 12) != kVolumeEntryHeaderBytes) {
    return bad("not a volume cache entry of this version");
  }
  if (LoadAt<uint64_t>(h, kHeaderHashAt) != Hash64(h, kHeaderHashAt, kVolumeEntryVersion)) {
    return bad("its header hash does not match");
  }
  if (LoadAt<uint64_t>(h, 16) != key) {
    return absl::FailedPreconditionError(name + ": stale (its sources or recipe changed)");
  }
  for (int a = 0; a < 3; ++a) e->shape_[a] = LoadAt<int64_t>(h, 24 + 8 * a);
  e->channels_ = LoadAt<int64_t>(h, 48);
  const bool has_label = LoadAt<uint32_t>(h, 56) != 0;
  for (int i = 0; i < 16; ++i) e->affine_[i] = LoadAt<double>(h, 64 + 8 * i);
  uint64_t voxels = 1;
  for (int64_t d : {e->shape_[0], e->shape_[1], e->shape_[2]}) {
    if (d < 1 || d > (int64_t{1} << 32)) return bad("a shape out of range");
    voxels *= static_cast<uint64_t>(d);
    if (voxels >= (uint64_t{1} << 32)) return bad("a shape out of range");
  }
  if (e->channels_ < 1 || e->channels_ > 4096) return bad("a channel count out of range");
  uint64_t s[8];
  for (int i = 0; i < 8; ++i) s[i] = LoadAt<uint64_t>(h, 192 + 8 * i);
  auto fits = [&](uint64_t at, uint64_t bytes) {
    return at % 4 == 0 && at >= kVolumeEntryHeaderBytes && at <= size && bytes <= size - at;
  };
  const uint64_t image_bytes = voxels * static_cast<uint64_t>(e->channels_) * 4;
  if (s[1] != image_bytes || !fits(s[0], s[1])) return bad("its image section does not fit");
  if (s[3] != (has_label ? voxels : 0) || !fits(s[2], s[3])) {
    return bad("its label section does not fit");
  }
  if (s[5] > voxels || !fits(s[4], s[5] * 4) || s[7] > voxels || !fits(s[6], s[7] * 4)) {
    return bad("its voxel lists do not fit");
  }
  if (LoadAt<uint64_t>(h, 256) != size - kVolumeEntryHeaderBytes) return bad("it is cut short");
  if (verify_payload && LoadAt<uint64_t>(h, 264) != Hash64(h + kVolumeEntryHeaderBytes,
                                                        size - kVolumeEntryHeaderBytes,
                                                        kVolumeEntryVersion)) {
    return bad("its payload hash does not match");
  }
  e->image_ = reinterpret_cast<const float*>(h + s[0]);
  e->label_ = has_label ? h + s[2] : nullptr;
  e->fg_ = reinterpret_cast<const uint32_t*>(h + s[4]);
  e->fg_count_ = s[5];
  e->bg_ = reinterpret_cast<const uint32_t*>(h + s[6]);
  e->bg_count_ = s[7];
  return e;
}

}  // namespace stoker::volume
