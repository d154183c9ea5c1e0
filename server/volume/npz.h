// NumPy .npz archives as volumes (nnU-Net's preprocessed cases, anything
// saved with np.savez or np.savez_compressed): a zip of .npy members, each
// stored or deflated, zip64 as numpy writes them (every member with zip64
// sizes).
//
// Which arrays, as MONAI's NumpyReader(npz_keys=...) takes them: the members
// named by `keys` ("data" is the member data.npy), in that order, or every
// member in the archive's order when `keys` is empty; more than one are
// stacked as channels (a 3-D array is one channel, a 4-D one its first
// dimension's), so they must share their spatial shape and dtype. Each
// member is read as npy.h reads a .npy (geometry: `spacing`, as there).
//
// Errors, each naming the file (and the member):
//  - DATA_LOSS: no end of central directory, entries or local headers that
//    do not fit the file, a deflate stream that does not inflate to its
//    stated size, and npy.h's own;
//  - NOT_FOUND: a key that no member has (the message lists the members);
//  - UNIMPLEMENTED: a member compressed otherwise than stored or deflated,
//    or encrypted;
//  - INVALID_ARGUMENT: arrays to stack whose shapes or dtypes differ;
//  - RESOURCE_EXHAUSTED: over the limits (a member's stated size is checked
//    before anything is inflated: inflating stops there).
//
// Thread-safe: no shared state.

#ifndef STOKER_SERVER_VOLUME_NPZ_H_
#define STOKER_SERVER_VOLUME_NPZ_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/volume/nifti.h"
#include "server/volume/volume.h"

namespace stoker::volume {

// The archive in bytes [offset, offset + length) of `fd` (length 0: to the
// end of the file).
absl::StatusOr<Volume> ReadNpz(int fd, uint64_t offset, uint64_t length, const std::string& name,
                               const VolumeLimits& limits, const std::vector<std::string>& keys,
                               const std::array<double, 3>& spacing = {0, 0, 0});

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_NPZ_H_
