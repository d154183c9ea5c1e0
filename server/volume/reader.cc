#include "server/volume/reader.h"

#include <cstring>

#include "common/posix.h"
#include "server/volume/npy.h"
#include "server/volume/npz.h"

namespace stoker::volume {

absl::StatusOr<Volume> ReadVolume(int fd, uint64_t offset, uint64_t length,
                                  const std::string& name, const VolumeLimits& limits,
                                  const std::array<double, 3>& spacing,
                                  const std::vector<std::string>& npz_keys) {
  uint8_t magic[6] = {0, 0, 0, 0, 0, 0};
  absl::StatusOr<size_t> r = ReadFullyAt(
      fd, offset, magic, length != 0 && length < sizeof(magic) ? length : sizeof(magic), name);
  if (!r.ok()) return r.status();
  if (*r == sizeof(magic) && std::memcmp(magic, "\x93NUMPY", 6) == 0) {
    return ReadNpy(fd, offset, length, name, limits, spacing);
  }
  if (*r >= 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0) {
    return ReadNpz(fd, offset, length, name, limits, npz_keys, spacing);
  }
  return ReadNifti(fd, offset, length, name, limits);
}

}  // namespace stoker::volume
