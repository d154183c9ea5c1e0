// One entry point for a volume file whatever its format, found by its first
// bytes (never its name): a .npy by its NUMPY magic, an .npz by a zip's
// (npz.h: `npz_keys` chooses its arrays), else NIfTI (plain or gzip'd;
// nifti.h says what is not one). `spacing` is for formats without geometry
// (npy.h); NIfTI keeps its own.
//
// Thread-safe: no shared state.

#ifndef STOKER_SERVER_VOLUME_READER_H_
#define STOKER_SERVER_VOLUME_READER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/volume/nifti.h"
#include "server/volume/volume.h"

namespace stoker::volume {

absl::StatusOr<Volume> ReadVolume(int fd, uint64_t offset, uint64_t length,
                                  const std::string& name, const VolumeLimits& limits,
                                  const std::array<double, 3>& spacing = {0, 0, 0},
                                  const std::vector<std::string>& npz_keys = {});

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_READER_H_
