// The images-only worker (stoker-worker-images carries neither libhdf5 nor
// liblmdb): record files and HDF5 volumes are refused, saying why; the
// other volume formats are read as ever.

#include <unistd.h>

#include <cstring>

#include "server/dataset/records.h"
#include "server/volume/hdf5_volume.h"
#include "server/volume/reader.h"

namespace stoker {

constexpr char kWhy[] =
    "this worker (stoker-worker-images) was built without HDF5 and LMDB: run stoker-worker";

absl::StatusOr<RecordIndex> IndexRecordFile(int, const RecordTarget&) {
  return absl::UnimplementedError(kWhy);
}

namespace volume {

absl::StatusOr<Volume> ReadAnyVolume(int fd, const std::string& name, const VolumeLimits& limits,
                                     const std::array<double, 3>& spacing,
                                     const std::vector<std::string>& keys) {
  char magic[8] = {};
  if (::pread(fd, magic, sizeof(magic), 0) == 8 && std::memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0) {
    return absl::UnimplementedError(name + ": " + kWhy);
  }
  return ReadVolume(fd, 0, 0, name, limits, spacing, keys);
}

}  // namespace volume
}  // namespace stoker
