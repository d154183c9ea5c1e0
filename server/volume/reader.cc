#include "server/volume/reader.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/volume/npy.h"

namespace stoker::volume {

absl::StatusOr<Volume> ReadVolume(int fd, uint64_t offset, uint64_t length,
                                  const std::string& name, const VolumeLimits& limits,
                                  const std::array<double, 3>& spacing) {
  uint8_t magic[6] = {0, 0, 0, 0, 0, 0};
  ssize_t r;
  do {
    r = ::pread(fd, magic, length != 0 && length < sizeof(magic) ? length : sizeof(magic),
                static_cast<off_t>(offset));
  } while (r < 0 && errno == EINTR);
  if (r < 0) return absl::InternalError(absl::StrCat(name, ": read: ", std::strerror(errno)));
  if (r == static_cast<ssize_t>(sizeof(magic)) && std::memcmp(magic, "\x93NUMPY", 6) == 0) {
    return ReadNpy(fd, offset, length, name, limits, spacing);
  }
  return ReadNifti(fd, offset, length, name, limits);
}

}  // namespace stoker::volume
