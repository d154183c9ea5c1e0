// IndexRecordFile: the only code that links libhdf5 and liblmdb (in the
// worker, and in tests).
//
// Both libraries open files by name, and the data root's confinement is an
// fd: each file is opened beneath the root first and the library given
// "/proc/self/fd/N", the file already opened (common/hdf5_file.h), never a
// path that could resolve elsewhere.

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/hdf5_file.h"
#include "common/posix.h"
#include "server/dataset/dataset.h"
#include "server/dataset/records.h"

namespace stoker {
namespace {

std::string ProcPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

absl::StatusOr<UniqueFd> OpenFile(int root_fd, const std::string& path, struct stat* st) {
  absl::StatusOr<int> fd = OpenBeneath(root_fd, path);
  if (!fd.ok()) return fd.status();
  UniqueFd owned(*fd);
  if (::fstat(owned.get(), st) != 0) return PosixError(absl::StrCat("stat '", path, "'"), errno);
  return owned;
}

// ---- HDF5 ----

using hdf5::Hid;

// An open HDF5 file: the fd it was opened through, its handle, its base
// address (the user block before the superblock) and size.
struct H5File {
  UniqueFd fd;
  struct stat st;
  hid_t id = -1;
  uint64_t base = 0;
  ~H5File() {
    if (id >= 0) H5Fclose(id);
  }
};

absl::Status OpenH5(int root_fd, const std::string& path, H5File* f) {
  absl::StatusOr<UniqueFd> fd = OpenFile(root_fd, path, &f->st);
  if (!fd.ok()) return fd.status();
  f->fd = *std::move(fd);
  if (absl::Status s = hdf5::OpenFile(f->fd.get(), static_cast<uint64_t>(f->st.st_size), path, &f->id);
      !s.ok()) {
    return s;
  }
  Hid fcpl(H5Fget_create_plist(f->id), H5Pclose);
  hsize_t userblock = 0;
  if (fcpl.ok() && H5Pget_userblock(fcpl.get(), &userblock) >= 0) f->base = userblock;
  return absl::OkStatus();
}

absl::StatusOr<hid_t> OpenH5Dataset(const H5File& f, const std::string& path,
                                    const std::string& key, std::string_view what) {
  return hdf5::OpenDataset(f.id, key,
                           absl::StrCat("HDF5 file '", path, "' has no dataset '", key, "' for the ",
                                        std::string(what)),
                           absl::StrCat("HDF5 file '", path, "'"));
}

constexpr char kRepack[] =
    "rewrite it with `h5repack -l CONTI IN OUT` (Debian's hdf5-tools), or save it from h5py "
    "without compression";

// Where each of the dataset's n elements (elem bytes each, stored whole in
// its chunk: chunks span every dimension but the first) starts in the file.
absl::Status ElementOffsets(const H5File& f, hid_t d, int rank, const hsize_t* dims,
                            uint64_t elem, const std::string& name,
                            std::vector<uint64_t>* offsets) {
  const uint64_t n = dims[0];
  offsets->resize(n);
  Hid dcpl(H5Dget_create_plist(d), H5Pclose);
  const H5D_layout_t layout = dcpl.ok() ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(d);
    if (n != 0 && addr == HADDR_UNDEF) {
      return absl::FailedPreconditionError(absl::StrCat(name, " was never written"));
    }
    // H5Dget_offset counts from the file's start (a user block included);
    // chunk addresses below count from the superblock (f.base added).
    for (uint64_t i = 0; i < n; ++i) (*offsets)[i] = addr + i * elem;
  } else if (layout == H5D_CHUNKED) {
    if (const int filters = H5Pget_nfilters(dcpl.get()); filters != 0) {
      char filter[64] = "a filter";
      unsigned flags = 0, config = 0;
      size_t cd = 0;
      H5Pget_filter2(dcpl.get(), 0, &flags, &cd, nullptr, sizeof(filter), filter, &config);
      filter[sizeof(filter) - 1] = '\0';
      return absl::FailedPreconditionError(
          absl::StrCat(name, " is compressed (", filter,
                       "): an image has no byte range in the file to read; ", kRepack));
    }
    hsize_t chunk[H5S_MAX_RANK];
    bool whole = H5Pget_chunk(dcpl.get(), rank, chunk) == rank && chunk[0] != 0;
    for (int a = 1; whole && a < rank; ++a) whole = chunk[a] == dims[a];
    if (!whole) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, " is chunked across an image's rows or columns: an image is not one byte range; ",
          kRepack));
    }
    for (uint64_t first = 0; first < n; first += chunk[0]) {
      hsize_t at[H5S_MAX_RANK] = {first};
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t bytes = 0;
      if (H5Dget_chunk_info_by_coord(d, at, &mask, &addr, &bytes) < 0 || addr == HADDR_UNDEF) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, ": the chunk of images ", first, ".. was never written (or cannot be read)"));
      }
      if (bytes < std::min<uint64_t>(chunk[0], n - first) * elem) {
        return absl::OutOfRangeError(absl::StrCat(name, ": the chunk of images ", first,
                                                  ".. is smaller than its images"));
      }
      for (uint64_t i = first; i < std::min<uint64_t>(first + chunk[0], n); ++i) {
        (*offsets)[i] = f.base + addr + (i - first) * elem;
      }
    }
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " has a compact layout (stored in its header); ", kRepack));
  }
  const uint64_t file_size = static_cast<uint64_t>(f.st.st_size);
  for (uint64_t i = 0; i < n; ++i) {
    if ((*offsets)[i] > file_size || elem > file_size - (*offsets)[i]) {
      return absl::OutOfRangeError(absl::StrCat(name, ": image ", i, " lies past the file's end (",
                                                file_size, " bytes): a truncated file?"));
    }
  }
  return absl::OkStatus();
}

// Variable-length byte strings (h5py's vlen_dtype(np.uint8): encoded
// images). Each element is stored as its length (4 bytes) and a global heap
// ID (the heap collection's address, then the object's index, 4 bytes); a
// collection ("GCOL", version, 3 reserved, its size) holds objects, each an
// index (2), a reference count (2), 4 reserved, its size, then its bytes
// padded to 8 (HDF5's file format specification, "Global Heap"). The
// objects' places are found by walking each collection's object headers,
// as a tar's members are: no object is read.
absl::Status ResolveVlen(const H5File& f, const std::string& name, RecordIndex* out) {
  Hid fcpl(H5Fget_create_plist(f.id), H5Pclose);
  size_t sizeof_addr = 8, sizeof_size = 8;
  if (!fcpl.ok() || H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
      (sizeof_addr != 4 && sizeof_addr != 8) || (sizeof_size != 4 && sizeof_size != 8)) {
    return absl::InvalidArgumentError(name + ": the file's address sizes are not HDF5's");
  }
  const auto le = [](const uint8_t* p, size_t n) {
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = v << 8 | p[k];
    return v;
  };
  const uint64_t file_size = static_cast<uint64_t>(f.st.st_size);
  const size_t elem = 4 + sizeof_addr + 4;
  // Each collection's objects: index -> (data offset in the file, size).
  std::map<uint64_t, std::map<uint32_t, std::pair<uint64_t, uint64_t>>> heaps;
  const auto walk = [&](uint64_t collection) -> absl::Status {
    uint8_t head[16];
    const uint64_t at = f.base + collection;
    if (at > file_size || file_size - at < 8 + sizeof_size ||
        ::pread(f.fd.get(), head, 8 + sizeof_size, static_cast<off_t>(at)) !=
            static_cast<ssize_t>(8 + sizeof_size) ||
        std::memcmp(head, "GCOL", 4) != 0) {
      return absl::DataLossError(absl::StrCat(name, ": a global heap collection at ", collection,
                                              " is damaged"));
    }
    const uint64_t size = le(head + 8, sizeof_size);
    if (size > file_size - at) {
      return absl::DataLossError(absl::StrCat(name, ": a global heap collection runs past the "
                                                    "file's end"));
    }
    auto& objects = heaps[collection];
    const size_t header = 8 + sizeof_size;
    for (uint64_t p = 8 + sizeof_size; p + header <= size;) {
      uint8_t h[16];
      if (::pread(f.fd.get(), h, header, static_cast<off_t>(at + p)) !=
          static_cast<ssize_t>(header)) {
        return absl::DataLossError(name + ": a global heap object cannot be read");
      }
      const uint32_t index = static_cast<uint32_t>(le(h, 2));
      const uint64_t bytes = le(h + 8, sizeof_size);
      if (index == 0) break;  // the collection's free space
      if (bytes > size - p - header) {
        return absl::DataLossError(name + ": a global heap object runs past its collection");
      }
      objects[index] = {at + p + header, bytes};
      p += header + (bytes + 7) / 8 * 8;
    }
    return absl::OkStatus();
  };
  std::vector<uint8_t> raw(elem);
  std::vector<uint64_t> offsets, lengths;
  uint64_t empty = 0;
  for (size_t i = 0; i < out->offsets.size(); ++i) {
    if (::pread(f.fd.get(), raw.data(), elem, static_cast<off_t>(out->offsets[i])) !=
        static_cast<ssize_t>(elem)) {
      return absl::DataLossError(absl::StrCat(name, ": element ", i, " cannot be read"));
    }
    const uint64_t length = le(raw.data(), 4);
    const uint64_t collection = le(raw.data() + 4, sizeof_addr);
    const uint32_t index = static_cast<uint32_t>(le(raw.data() + 4 + sizeof_addr, 4));
    if (length == 0) {
      ++empty;
      continue;
    }
    if (heaps.count(collection) == 0) {
      if (heaps.size() > (uint64_t{1} << 22)) return absl::OutOfRangeError(name + ": too many heaps");
      if (absl::Status s = walk(collection); !s.ok()) return s;
    }
    const auto& objects = heaps[collection];
    auto it = objects.find(index);
    if (it == objects.end() || it->second.second < length) {
      return absl::DataLossError(
          absl::StrCat(name, ": element ", i, "'s bytes are not in its global heap collection"));
    }
    offsets.push_back(it->second.first);
    lengths.push_back(length);
    out->rows.push_back(i);
  }
  if (empty != 0) out->warning = absl::StrCat(name, ": left out ", empty, " empty element(s)");
  out->offsets = std::move(offsets);
  out->lengths = std::move(lengths);
  return absl::OkStatus();
}

absl::Status IndexHdf5Images(const H5File& f, const std::string& path, const std::string& key,
                             RecordIndex* out, uint64_t* row_count) {
  absl::StatusOr<hid_t> opened = OpenH5Dataset(f, path, key, "images");
  if (!opened.ok()) return opened.status();
  Hid d(*opened, H5Dclose);
  const std::string name = absl::StrCat("dataset '", key, "' of '", path, "'");
  Hid type(H5Dget_type(d.get()), H5Tclose);
  Hid space(H5Dget_space(d.get()), H5Sclose);
  hsize_t dims[H5S_MAX_RANK];
  const int rank = space.ok() ? H5Sget_simple_extent_dims(space.get(), dims, nullptr) : -1;
  std::string shape;
  for (int k = 0; k < rank; ++k) absl::StrAppend(&shape, k ? "x" : "", dims[k]);
  if (rank >= 1 && dims[0] > kMaxRecords) {
    return absl::OutOfRangeError(absl::StrCat(name, " has ", dims[0], " images, over stoker's ",
                                              kMaxRecords, " a file: split it"));
  }
  *row_count = rank >= 1 ? dims[0] : 0;
  // Encoded images: a 1-D dataset of variable-length bytes.
  if (type.ok() && H5Tget_class(type.get()) == H5T_VLEN) {
    Hid base(H5Tget_super(type.get()), H5Tclose);
    if (!base.ok() || H5Tget_class(base.get()) != H5T_INTEGER || H5Tget_size(base.get()) != 1 ||
        rank != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " holds variable-length values that are not one byte string a sample (an "
                "encoded image each: a 1-D dataset of h5py.vlen_dtype(np.uint8))"));
    }
    Hid fcpl(H5Fget_create_plist(f.id), H5Pclose);
    size_t sizeof_addr = 8, sizeof_size = 8;
    if (fcpl.ok()) H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size);
    if (absl::Status s = ElementOffsets(f, d.get(), rank, dims, 4 + sizeof_addr + 4, name,
                                        &out->offsets);
        !s.ok()) {
      return s;
    }
    return ResolveVlen(f, name, out);
  }
  if (!type.ok() || H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
      H5Tget_sign(type.get()) != H5T_SGN_NONE) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " holds neither uint8 image arrays (N x H x W [x C]) nor encoded images "
              "(variable-length bytes, h5py.vlen_dtype(np.uint8))"));
  }
  if ((rank != 3 && rank != 4) || (rank == 4 && dims[3] != 1 && dims[3] != 3)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is shaped ", shape.empty() ? "oddly" : shape,
                     ": image arrays are N x H x W (grey) or N x H x W x C with C 1 or 3"));
  }
  if (dims[1] == 0 || dims[2] == 0 || dims[1] > 65535 || dims[2] > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " holds images of ", dims[1], "x", dims[2], " pixels"));
  }
  out->height = static_cast<uint32_t>(dims[1]);
  out->width = static_cast<uint32_t>(dims[2]);
  out->channels = rank == 4 ? static_cast<uint32_t>(dims[3]) : 1;
  const uint64_t row = uint64_t{out->height} * out->width * out->channels;
  out->lengths.assign(dims[0], row);
  out->rows.resize(dims[0]);
  std::iota(out->rows.begin(), out->rows.end(), uint64_t{0});
  return ElementOffsets(f, d.get(), rank, dims, row, name, &out->offsets);
}

absl::Status ReadHdf5Labels(const H5File& f, const std::string& path, const std::string& key,
                            uint64_t n, std::vector<int64_t>* labels) {
  absl::StatusOr<hid_t> opened = OpenH5Dataset(f, path, key, "labels");
  if (!opened.ok()) return opened.status();
  Hid d(*opened, H5Dclose);
  Hid type(H5Dget_type(d.get()), H5Tclose);
  Hid space(H5Dget_space(d.get()), H5Sclose);
  const hssize_t count = space.ok() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  if (!type.ok() || H5Tget_class(type.get()) != H5T_INTEGER) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels dataset '", key, "' of '", path, "' does not hold integers"));
  }
  if (count < 0 || static_cast<uint64_t>(count) != n) {
    return absl::InvalidArgumentError(absl::StrCat("labels dataset '", key, "' of '", path,
                                                   "' holds ", count, " values for ", n,
                                                   " images"));
  }
  labels->assign(n, -1);
  if (n != 0 && H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                        labels->data()) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels dataset '", key, "' of '", path, "' could not be read"));
  }
  return absl::OkStatus();
}

absl::Status ReadTextLabels(int root_fd, const std::string& path, uint64_t n,
                            std::vector<int64_t>* labels) {
  struct stat st;
  absl::StatusOr<UniqueFd> fd = OpenFile(root_fd, path, &st);
  if (!fd.ok()) return fd.status();
  if (static_cast<uint64_t>(st.st_size) > (n + 1) * 24 + 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels file '", path, "' is too large for ", n, " labels"));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  absl::StatusOr<size_t> got = ReadFullyAt(fd->get(), 0, text.data(), text.size(), "labels file");
  if (!got.ok()) return got.status();
  text.resize(*got);
  labels->clear();
  labels->reserve(n);
  size_t at = 0, line = 1;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view v(text.data() + at, end - at);
    if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
    int64_t label = 0;
    if (!absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &label)) {
      return absl::InvalidArgumentError(absl::StrCat("labels file '", path, "' line ", line,
                                                     ": not an integer"));
    }
    labels->push_back(label);
    at = end + 1;
    ++line;
  }
  if (labels->size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("labels file '", path, "' has ",
                                                   labels->size(), " lines for ", n, " samples"));
  }
  return absl::OkStatus();
}

absl::Status IndexHdf5(int root_fd, const RecordTarget& t, RecordIndex* out) {
  H5File f;
  if (absl::Status s = OpenH5(root_fd, t.file, &f); !s.ok()) return s;
  const std::string images = t.images_key.empty() ? kDefaultRecordImages : t.images_key;
  const std::string labels_key = t.labels_key.empty() ? kDefaultRecordLabels : t.labels_key;
  uint64_t n = 0;  // the dataset's rows (some may be left out: out->rows)
  if (absl::Status s = IndexHdf5Images(f, t.file, images, out, &n); !s.ok()) return s;
  // Labels are one a row of the images' dataset.
  std::vector<int64_t> labels;
  absl::Status read = absl::OkStatus();
  if (t.labels_file.empty()) {
    if (hdf5::PathExists(f.id, labels_key)) {
      read = ReadHdf5Labels(f, t.file, labels_key, n, &labels);
    } else {
      labels.assign(n, -1);
    }
  } else if (NamedLikeHdf5(t.labels_file)) {
    H5File lf;
    read = OpenH5(root_fd, t.labels_file, &lf);
    if (read.ok()) read = ReadHdf5Labels(lf, t.labels_file, labels_key, n, &labels);
  } else {
    read = ReadTextLabels(root_fd, t.labels_file, n, &labels);
  }
  if (!read.ok()) return read;
  out->labels.resize(out->rows.size());
  for (size_t i = 0; i < out->rows.size(); ++i) out->labels[i] = labels[out->rows[i]];
  return absl::OkStatus();
}

// ---- LMDB ----

struct Lmdb {
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_cursor* cursor = nullptr;
  ~Lmdb() {
    if (cursor != nullptr) mdb_cursor_close(cursor);
    if (txn != nullptr) mdb_txn_abort(txn);
    if (env != nullptr) mdb_env_close(env);
  }
};

bool DecimalKey(const MDB_val& k, uint64_t* value) {
  const auto* p = static_cast<const char*>(k.mv_data);
  if (k.mv_size == 0 || k.mv_size > 19) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < k.mv_size; ++i) {
    if (p[i] < '0' || p[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(p[i] - '0');
  }
  *value = v;
  return true;
}

// Where `data` (a value inside LMDB's read-only map of the file) lies in the
// file. Pages hold their number in their first 8 bytes; the map starts at a
// page boundary of the OS's. So the value's page is found by stepping back
// from the OS page it is in, each candidate checked against the file's
// bytes.
bool FindMapBase(int fd, const MDB_val& v, uint64_t psize, uint64_t file_size,
                 const uint8_t** base) {
  const uint64_t os_page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto p = reinterpret_cast<uintptr_t>(v.mv_data);
  const size_t check = std::min<size_t>(v.mv_size, 256);
  std::vector<uint8_t> bytes(check);
  uintptr_t page = p & ~(os_page - 1);
  for (uint64_t step = 0; step < std::max<uint64_t>(psize / os_page, 1); ++step, page -= os_page) {
    uint64_t pgno;
    std::memcpy(&pgno, reinterpret_cast<const void*>(page), sizeof(pgno));
    if (pgno > file_size / psize) continue;
    const uint64_t off = pgno * psize + (p - page);
    if (off + v.mv_size > file_size) continue;
    if (::pread(fd, bytes.data(), check, static_cast<off_t>(off)) == static_cast<ssize_t>(check) &&
        std::memcmp(bytes.data(), v.mv_data, check) == 0) {
      *base = reinterpret_cast<const uint8_t*>(p) - off;
      return true;
    }
  }
  return false;
}

absl::Status IndexLmdb(int root_fd, const RecordTarget& t, RecordIndex* out) {
  struct stat st;
  absl::StatusOr<UniqueFd> fd = OpenFile(root_fd, t.file, &st);
  if (!fd.ok()) return fd.status();
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  const std::string name = absl::StrCat("LMDB '", t.file, "'");
  Lmdb db;
  int rc = mdb_env_create(&db.env);
  if (rc == 0) {
    rc = mdb_env_open(db.env, ProcPath(fd->get()).c_str(),
                      MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0400);
  }
  if (rc == 0) rc = mdb_txn_begin(db.env, nullptr, MDB_RDONLY, &db.txn);
  MDB_dbi dbi = 0;
  if (rc == 0) rc = mdb_dbi_open(db.txn, nullptr, 0, &dbi);
  unsigned flags = 0;
  if (rc == 0) rc = mdb_dbi_flags(db.txn, dbi, &flags);
  if (rc == 0) rc = mdb_cursor_open(db.txn, dbi, &db.cursor);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " could not be opened: ", mdb_strerror(rc),
                     " (not an LMDB data file, or damaged)"));
  }
  if ((flags & MDB_DUPSORT) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " keeps several values a key (MDB_DUPSORT): stoker reads one encoded "
                           "image a key"));
  }
  MDB_stat ms;
  mdb_env_stat(db.env, &ms);
  const uint64_t psize = ms.ms_psize;

  struct Row {
    uint64_t key;  // decimal keys: the number; else the cursor's position
    uint64_t offset;
    uint64_t length;
    bool decimal;
  };
  std::vector<Row> rows;
  const uint8_t* base = nullptr;
  uint64_t empty = 0, seen = 0;
  MDB_val k, v;
  for (rc = mdb_cursor_get(db.cursor, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(db.cursor, &k, &v, MDB_NEXT)) {
    if (++seen > kMaxRecords) {
      return absl::OutOfRangeError(
          absl::StrCat(name, " has over ", kMaxRecords, " keys: split it"));
    }
    if (v.mv_size == 0) {
      ++empty;
      continue;
    }
    if (base == nullptr && !FindMapBase(fd->get(), v, psize, file_size, &base)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": its values could not be located in the file (page size ", psize, ")"));
    }
    const auto p = static_cast<const uint8_t*>(v.mv_data);
    const uint64_t off = static_cast<uint64_t>(p - base);
    if (p < base || off > file_size || v.mv_size > file_size - off) {
      return absl::OutOfRangeError(absl::StrCat(name, ": a value lies outside the file"));
    }
    Row r;
    r.decimal = DecimalKey(k, &r.key);
    if (!r.decimal) r.key = rows.size();
    r.offset = off;
    r.length = v.mv_size;
    rows.push_back(r);
  }
  if (rc != MDB_NOTFOUND) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " could not be read to its end: ", mdb_strerror(rc)));
  }
  const uint64_t decimal =
      static_cast<uint64_t>(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.decimal; }));
  std::vector<std::string> left;
  if (empty != 0) left.push_back(absl::StrCat(empty, " empty value(s)"));
  if (decimal != 0) {
    if (decimal != rows.size()) {
      left.push_back(absl::StrCat(rows.size() - decimal,
                                  " key(s) that are not decimal numbers (metadata?)"));
      rows.erase(std::remove_if(rows.begin(), rows.end(), [](const Row& r) { return !r.decimal; }),
                 rows.end());
    }
    // "00000017" and "17" are the same number: their byte order stays.
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.key < b.key; });
  }
  if (!left.empty()) {
    out->warning = absl::StrCat(name, ": left out ", left[0], left.size() > 1 ? " and " : "",
                                left.size() > 1 ? left[1] : "");
  }
  out->offsets.reserve(rows.size());
  out->lengths.reserve(rows.size());
  for (const Row& r : rows) {
    out->offsets.push_back(r.offset);
    out->lengths.push_back(r.length);
    out->rows.push_back(r.key);
  }
  out->height = t.height;
  out->width = t.width;
  out->channels = t.channels;
  const uint64_t n = rows.size();
  if (t.labels_file.empty()) {
    out->labels.assign(n, -1);
    return absl::OkStatus();
  }
  if (NamedLikeHdf5(t.labels_file)) {
    H5File lf;
    if (absl::Status s = OpenH5(root_fd, t.labels_file, &lf); !s.ok()) return s;
    return ReadHdf5Labels(lf, t.labels_file,
                          t.labels_key.empty() ? kDefaultRecordLabels : t.labels_key, n,
                          &out->labels);
  }
  return ReadTextLabels(root_fd, t.labels_file, n, &out->labels);
}

}  // namespace

absl::StatusOr<RecordIndex> IndexRecordFile(int root_fd, const RecordTarget& target) {
  RecordIndex out;
  absl::Status s = target.kind == RecordKind::kLmdb ? IndexLmdb(root_fd, target, &out)
                                                     : IndexHdf5(root_fd, target, &out);
  if (!s.ok()) return s;
  return out;
}

}  // namespace stoker
