// HDF5 datasets as volumes (many preprocessed sets keep their volumes as
// datasets of one .h5 file, read with h5py): a dataset named by its path in
// the file ("ct", "/case_001/image"), numeric (bool as uint8, (u)int8 ..
// (u)int64, float32, float64), shaped as a .npy (npy.h: 2-D, 3-D with axis 0
// being i as h5py and numpy index it, or 4-D channel-first); its values
// equal h5py's `f[key][()]`. Several keys are stacked as channels (as
// npz.h's). No geometry: the spacing given, as for .npy.
//
// Only the worker and the tools link this (libhdf5, in a sandboxed
// process: common/hdf5_file.h); reader.h's ReadVolume, which the fuzz
// target covers, reads the other formats.
//
// Errors, each naming the file and the dataset: NOT_FOUND for a dataset
// that is not there (the message lists the file's top level), or no key
// for a file holding several datasets; INVALID_ARGUMENT for a file that is
// not HDF5 or is damaged, or a path that is not a dataset; UNIMPLEMENTED
// for float16, compound, string or other types; RESOURCE_EXHAUSTED over
// the limits (checked before reading).
//
// Thread-compatible (libhdf5: one thread at a time).

#ifndef STOKER_SERVER_VOLUME_HDF5_VOLUME_H_
#define STOKER_SERVER_VOLUME_HDF5_VOLUME_H_

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/volume/nifti.h"
#include "server/volume/volume.h"

namespace stoker::volume {

// The datasets `keys` of the HDF5 file `fd` (empty: its one dataset).
absl::StatusOr<Volume> ReadHdf5Volume(int fd, const std::string& name, const VolumeLimits& limits,
                                      const std::vector<std::string>& keys,
                                      const std::array<double, 3>& spacing = {0, 0, 0});

// reader.h's ReadVolume for a whole file, and HDF5 files (by their
// signature) through ReadHdf5Volume: what a worker reads a volume file with.
absl::StatusOr<Volume> ReadAnyVolume(int fd, const std::string& name, const VolumeLimits& limits,
                                     const std::array<double, 3>& spacing,
                                     const std::vector<std::string>& keys);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_HDF5_VOLUME_H_
