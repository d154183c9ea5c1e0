#include "server/volume/hdf5_volume.h"

#include <sys/stat.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hdf5_file.h"
#include "common/posix.h"
#include "server/volume/npy.h"
#include "server/volume/reader.h"

namespace stoker::volume {
namespace {

using hdf5::Hid;

// The only dataset at the file's top level, or "" when there are none or
// several.
std::string OnlyDataset(hid_t file) {
  struct Acc {
    std::string name;
    int datasets = 0;
  } acc;
  H5Literate(
      file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
      [](hid_t group, const char* name, const H5L_info_t*, void* data) -> herr_t {
        auto* a = static_cast<Acc*>(data);
        H5O_info_t info;
        if (H5Oget_info_by_name(group, name, &info, H5P_DEFAULT) >= 0 &&
            info.type == H5O_TYPE_DATASET) {
          a->name = name;
          ++a->datasets;
        }
        return a->datasets > 1 ? 1 : 0;
      },
      &acc);
  return acc.datasets == 1 ? acc.name : "";
}

// numpy's descr of an HDF5 numeric type read as this machine's native one
// (and that native type), or "" for a type stoker does not read.
std::string Descr(hid_t type, hid_t* native) {
  const H5T_class_t c = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (c == H5T_INTEGER) {
    const bool sign = H5Tget_sign(type) == H5T_SGN_2;
    static const hid_t* const kSigned[] = {&H5T_NATIVE_INT8_g, &H5T_NATIVE_INT16_g,
                                           &H5T_NATIVE_INT32_g, &H5T_NATIVE_INT64_g};
    static const hid_t* const kUnsigned[] = {&H5T_NATIVE_UINT8_g, &H5T_NATIVE_UINT16_g,
                                             &H5T_NATIVE_UINT32_g, &H5T_NATIVE_UINT64_g};
    const int k = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : size == 8 ? 3 : -1;
    if (k < 0) return "";
    H5open();
    *native = *(sign ? kSigned : kUnsigned)[k];
    return absl::StrCat(size == 1 ? "|" : "<", sign ? "i" : "u", size);
  }
  if (c == H5T_ENUM && size == 1) {  // h5py's bool: an enum of int8 (FALSE 0, TRUE 1)
    H5open();
    *native = H5T_NATIVE_INT8_g;
    return "|i1";
  }
  if (c == H5T_FLOAT && (size == 4 || size == 8)) {
    H5open();
    *native = size == 4 ? H5T_NATIVE_FLOAT_g : H5T_NATIVE_DOUBLE_g;
    return size == 4 ? "<f4" : "<f8";
  }
  return "";
}

absl::StatusOr<Volume> ReadDataset(hid_t file, const std::string& name, const std::string& key,
                                   const VolumeLimits& limits,
                                   const std::array<double, 3>& spacing) {
  const std::string what = absl::StrCat(name, ":", key);
  absl::StatusOr<hid_t> opened =
      hdf5::OpenDataset(file, key, absl::StrCat(name, ": no dataset '", key, "'"), name);
  if (!opened.ok()) return opened.status();
  Hid d(*opened, H5Dclose);
  Hid type(H5Dget_type(d.get()), H5Tclose);
  hid_t native = -1;
  const std::string descr = type.ok() ? Descr(type.get(), &native) : "";
  if (descr.empty()) {
    return absl::UnimplementedError(
        what + ": not a type stoker reads (bool, (u)int8..(u)int64, float32, float64)");
  }
  Hid space(H5Dget_space(d.get()), H5Sclose);
  hsize_t dims[H5S_MAX_RANK];
  const int rank = space.ok() ? H5Sget_simple_extent_dims(space.get(), dims, nullptr) : -1;
  if (rank < 2 || rank > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", rank, " dimensions (a volume has 2 to 4, as a .npy)"));
  }
  const size_t elem = H5Tget_size(native);
  uint64_t count = 1;
  std::vector<std::string> shape;
  for (int a = 0; a < rank; ++a) {
    if (dims[a] == 0) return absl::DataLossError(what + ": a dimension of 0");
    if (count > limits.max_voxels / dims[a]) {
      count = limits.max_voxels + 1;
      break;
    }
    count *= dims[a];
    shape.push_back(absl::StrCat(dims[a]));
  }
  if (count > limits.max_voxels || count * elem > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": over the daemon's volume limits (", limits.max_voxels, " voxels, ",
        limits.max_bytes, " bytes)"));
  }
  // The values as a .npy in memory: npy.h's one definition of axes and
  // types makes them a Volume.
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                    absl::StrJoin(shape, ", "), "), }");
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::vector<uint8_t> npy(10 + header.size() + count * elem);
  std::memcpy(npy.data(), "\x93NUMPY\x01\x00", 8);
  npy[8] = static_cast<uint8_t>(header.size() & 0xff);
  npy[9] = static_cast<uint8_t>(header.size() >> 8);
  std::memcpy(npy.data() + 10, header.data(), header.size());
  if (H5Dread(d.get(), native, H5S_ALL, H5S_ALL, H5P_DEFAULT, npy.data() + 10 + header.size()) <
      0) {
    return absl::DataLossError(what + ": its values could not be read (damaged or truncated?)");
  }
  return ReadNpyBytes(npy.data(), npy.size(), what, limits, spacing);
}

}  // namespace

absl::StatusOr<Volume> ReadHdf5Volume(int fd, const std::string& name, const VolumeLimits& limits,
                                      const std::vector<std::string>& keys,
                                      const std::array<double, 3>& spacing) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return PosixError("stat " + name, errno);
  hid_t id = -1;
  if (absl::Status s = hdf5::OpenFile(fd, static_cast<uint64_t>(st.st_size), name, &id); !s.ok()) {
    return s;
  }
  Hid file(id, H5Fclose);
  std::vector<std::string> chosen = keys;
  if (chosen.empty()) {
    const std::string only = OnlyDataset(file.get());
    if (only.empty()) {
      return absl::NotFoundError(absl::StrCat(
          name, ": name the dataset to read (LoadImaged(npz_keys=[...])): it holds ",
          hdf5::Listing(file.get())));
    }
    chosen.push_back(only);
  }
  Volume out;
  for (size_t k = 0; k < chosen.size(); ++k) {
    absl::StatusOr<Volume> v = ReadDataset(file.get(), name, chosen[k], limits, spacing);
    if (!v.ok()) return v.status();
    if (k == 0) {
      out = *std::move(v);
    } else if (absl::Status s = AppendChannels(&out, *std::move(v), limits, name, chosen[0],
                                               chosen[k]);
               !s.ok()) {
      return s;
    }
  }
  return out;
}

absl::StatusOr<Volume> ReadAnyVolume(int fd, const std::string& name, const VolumeLimits& limits,
                                     const std::array<double, 3>& spacing,
                                     const std::vector<std::string>& keys) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return PosixError("stat " + name, errno);
  if (hdf5::LooksLikeHdf5(fd, static_cast<uint64_t>(st.st_size))) {
    return ReadHdf5Volume(fd, name, limits, keys, spacing);
  }
  return ReadVolume(fd, 0, 0, name, limits, spacing, keys);
}

}  // namespace stoker::volume
