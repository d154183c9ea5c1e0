#include "server/worker/image_entry.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/bytes.h"
#include "common/hash64.h"
#include "common/posix.h"

namespace stoker::worker {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'I', 'v', '1', 0, 0};
constexpr size_t kHeaderBytes = 64;
constexpr uint64_t kSeed = 0x53544b49;

}  // namespace

std::string ImageEntryName(uint64_t id) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, id);
  return std::string(hex) + ".stki";
}

void ImageEntryIds(uint64_t recipe, const SourceIdentity& file, uint64_t* id, uint64_t* key) {
  std::string what(file.path);
  what.append(reinterpret_cast<const char*>(&recipe), sizeof(recipe));
  *id = Hash64(what.data(), what.size(), kSeed);
  const CacheKey identity = CacheKeyFor(file);
  what.append(reinterpret_cast<const char*>(&identity), sizeof(identity));
  *key = Hash64(what.data(), what.size(), kSeed + 1);
}

bool ReadImageEntry(int dir_fd, const std::string& name, uint64_t key, uint8_t* out,
                    uint64_t capacity, ImageEntryInfo* info) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  uint8_t h[kHeaderBytes];
  absl::StatusOr<size_t> got = ReadFullyAt(fd.get(), 0, h, sizeof(h), name);
  if (!got.ok() || *got != sizeof(h) || std::memcmp(h, kMagic, 8) != 0 ||
      LoadAt<uint64_t>(h, 56) != Hash64(h, 56, kSeed) || LoadAt<uint64_t>(h, 8) != key) {
    return false;
  }
  info->height = LoadAt<uint32_t>(h, 16);
  info->width = LoadAt<uint32_t>(h, 20);
  info->channels = LoadAt<uint32_t>(h, 24);
  info->format = LoadAt<uint32_t>(h, 32);
  info->bytes = LoadAt<uint64_t>(h, 40);
  if (info->bytes > capacity) return false;
  got = ReadFullyAt(fd.get(), kHeaderBytes, out, static_cast<size_t>(info->bytes), name);
  return got.ok() && *got == info->bytes &&
         Hash64(out, static_cast<size_t>(info->bytes), kSeed) == LoadAt<uint64_t>(h, 48);
}

absl::Status WriteImageEntry(int dir_fd, const std::string& name, uint64_t key,
                             const uint8_t* data, const ImageEntryInfo& info) {
  const std::string tmp = ".tmp-" + name;
  UniqueFd fd(::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    if (errno == EEXIST) return absl::AlreadyExistsError(tmp + ": another writer holds it");
    return PosixError("creating " + tmp, errno);
  }
  uint8_t h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, 8);
  StoreAt<uint64_t>(h, 8, key);
  StoreAt<uint32_t>(h, 16, info.height);
  StoreAt<uint32_t>(h, 20, info.width);
  StoreAt<uint32_t>(h, 24, info.channels);
  StoreAt<uint32_t>(h, 32, info.format);
  StoreAt<uint64_t>(h, 40, info.bytes);
  StoreAt<uint64_t>(h, 48, Hash64(data, static_cast<size_t>(info.bytes), kSeed));
  StoreAt<uint64_t>(h, 56, Hash64(h, 56, kSeed));

  absl::Status st = WriteFullyAt(fd.get(), kHeaderBytes, data, info.bytes, tmp);
  if (st.ok()) st = WriteFullyAt(fd.get(), 0, h, kHeaderBytes, tmp);
  if (st.ok() && ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    st = PosixError("renaming " + tmp, errno);
  }
  if (!st.ok()) ::unlinkat(dir_fd, tmp.c_str(), 0);
  return st;
}

}  // namespace stoker::worker
