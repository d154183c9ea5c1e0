// libFuzzer target: the volume readers (server/volume/reader.h: NIfTI plain
// or gzip'd, NumPy .npy and .npz) on arbitrary bytes: a volume or an error, never a
// crash, a hang, a read past its buffers or an allocation past the limits
// (a gzip bomb included: nothing is inflated past the header's voxels).

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "server/volume/npy.h"
#include "server/volume/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("stoker_fuzz_volume", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  stoker::volume::VolumeLimits limits;
  limits.max_voxels = uint64_t{1} << 22;
  limits.max_bytes = uint64_t{32} << 20;
  // Header alone, from memory, as the index reads it.
  (void)stoker::volume::ParseNiftiHeader(data, size, "x");
  (void)stoker::volume::ParseNpyHeader(data, size, "x");
  absl::StatusOr<stoker::volume::Volume> v =
      stoker::volume::ReadVolume(fd, 0, 0, "x", limits, {0.5, 0.5, 2.0});
  if (v.ok()) {
    const int64_t n = v->Voxels();
    if (n <= 0 || static_cast<uint64_t>(n) > limits.max_voxels) std::abort();
    if (v->voxels.size() != static_cast<uint64_t>(n) * stoker::volume::VoxelBytes(v->type)) {
      std::abort();
    }
    std::vector<float> values(static_cast<size_t>(n));
    if (!stoker::volume::ToFloat32(*v, values.data()).ok()) std::abort();
  }
  close(fd);
  return 0;
}
