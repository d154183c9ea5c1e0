#include "common/hdf5_file.h"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace stoker::hdf5 {

bool LooksLikeHdf5(int fd, uint64_t size) {
  char magic[8];
  for (uint64_t at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2) {
    if (::pread(fd, magic, 8, static_cast<off_t>(at)) == 8 &&
        std::memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0) {
      return true;
    }
  }
  return false;
}

absl::Status OpenFile(int fd, uint64_t size, const std::string& name, hid_t* file) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the status says it
  if (!LooksLikeHdf5(fd, size)) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an HDF5 file"));
  }
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl.ok()) H5Pset_file_locking(fapl.get(), false, true);
  *file = H5Fopen(absl::StrCat("/proc/self/fd/", fd).c_str(), H5F_ACC_RDONLY,
                  fapl.ok() ? fapl.get() : H5P_DEFAULT);
  if (*file < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' could not be opened as HDF5 (damaged or truncated?)"));
  }
  return absl::OkStatus();
}

bool PathExists(hid_t file, const std::string& key) {
  if (key.empty() || key.find('\0') != std::string::npos) return false;
  size_t at = key[0] == '/' ? 1 : 0;
  for (;;) {
    const size_t slash = key.find('/', at);
    const std::string prefix = key.substr(0, slash);
    if (!prefix.empty() && prefix != "/" && H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      return false;
    }
    if (slash == std::string::npos) return true;
    at = slash + 1;
  }
}

std::string Listing(hid_t file) {
  std::vector<std::string> names;
  H5Literate(
      file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        auto* n = static_cast<std::vector<std::string>*>(data);
        n->emplace_back(name);
        return n->size() >= 20 ? 1 : 0;
      },
      &names);
  if (names.empty()) return "nothing";
  std::string out;
  for (const std::string& n : names) absl::StrAppend(&out, out.empty() ? "" : ", ", n);
  return out;
}

absl::StatusOr<hid_t> OpenDataset(hid_t file, const std::string& key, const std::string& missing,
                                  const std::string& where) {
  if (!PathExists(file, key)) {
    return absl::NotFoundError(absl::StrCat(missing, " (it holds ", Listing(file), ")"));
  }
  H5O_info_t info;
  if (H5Oget_info_by_name(file, key.c_str(), &info, H5P_DEFAULT) < 0 ||
      info.type != H5O_TYPE_DATASET) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", key, "' is not a dataset (a group?)"));
  }
  const hid_t d = H5Dopen2(file, key.c_str(), H5P_DEFAULT);
  if (d < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dataset '", key, "' could not be opened"));
  }
  return d;
}

}  // namespace stoker::hdf5
