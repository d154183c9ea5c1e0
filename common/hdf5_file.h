// HDF5 files opened through an fd already opened beneath the data root:
// what the record indexer (server/dataset/records.h) and the volume reader
// (server/volume/hdf5_volume.h) share. libhdf5 opens files by name, so it is
// given "/proc/self/fd/N", the file already opened (never a path that could
// resolve elsewhere). Only sandboxed workers (and tests, tools) link this:
// stokerd never runs libhdf5 on a file.
//
// Thread-compatible: libhdf5 (Debian's, built without thread safety) must be
// called from one thread at a time; the workers are single-threaded.

#ifndef STOKER_COMMON_HDF5_FILE_H_
#define STOKER_COMMON_HDF5_FILE_H_

#include <hdf5.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::hdf5 {

// An hid_t closed by its own close function (H5Dclose, H5Tclose, ...).
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Whether the file `fd` refers to (`size` bytes) starts with HDF5's
// signature, at 0 or after a user block (512, 1024, 2048, ... bytes).
bool LooksLikeHdf5(int fd, uint64_t size);

// Opens the file `fd` refers to read only, without a file lock (one would
// fail on a read-only mount), with libhdf5's error printing off.
// INVALID_ARGUMENT naming `name`: not HDF5, or damaged. The caller closes
// *file (H5Fclose) and keeps fd open meanwhile.
absl::Status OpenFile(int fd, uint64_t size, const std::string& name, hid_t* file);

// Whether `key` ("x", "/a/b") names an object: each group on the way must
// exist (H5Lexists fails, rather than says no, past a missing group).
bool PathExists(hid_t file, const std::string& key);

// The objects at the file's top level, "x, y" (at most 20), or "nothing":
// for messages that say what a file holds.
std::string Listing(hid_t file);

// Opens the dataset `key` of `file`; the caller closes it (H5Dclose).
// NOT_FOUND `missing` + " (it holds <Listing>)" when there is none;
// INVALID_ARGUMENT, naming `where` and the key, when it is not a dataset (a
// group) or cannot be opened.
absl::StatusOr<hid_t> OpenDataset(hid_t file, const std::string& key, const std::string& missing,
                                  const std::string& where);

}  // namespace stoker::hdf5

#endif  // STOKER_COMMON_HDF5_FILE_H_
