// IndexRecordFile against files written here by libhdf5 and liblmdb (the
// libraries h5py and python-lmdb wrap): every range it gives must hold the
// bytes that were stored for that sample.

#include "server/dataset/records.h"

#include <fcntl.h>
#include <hdf5.h>
#include <lmdb.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/posix.h"
#include "server/dataset/dataset.h"
#include "testing/dataset_test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

std::vector<uint8_t> Pixels(uint64_t n, uint64_t row, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n * row);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct H5Options {
  std::vector<hsize_t> dims = {10, 6, 5, 3};
  hsize_t chunk_rows = 0;  // 0: contiguous
  bool gzip = false;
  hsize_t userblock = 0;
  bool labels = true;      // a "y" dataset (N x 1 x 1 x 1 uint8, PCam's shape)
  hid_t type = H5T_NATIVE_UINT8;
};

// Writes `pixels` as dataset "x" (and labels i % 2 as "y").
void WriteH5(const std::string& path, const std::vector<uint8_t>& pixels, const H5Options& o) {
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (o.userblock != 0) H5Pset_userblock(fcpl, o.userblock);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t space = H5Screate_simple(static_cast<int>(o.dims.size()), o.dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (o.chunk_rows != 0) {
    std::vector<hsize_t> chunk = o.dims;
    chunk[0] = o.chunk_rows;
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    if (o.gzip) H5Pset_deflate(dcpl, 4);
  }
  hid_t d = H5Dcreate2(f, "x", o.type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(d >= 0);
  REQUIRE(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, pixels.data()) >= 0);
  H5Dclose(d);
  if (o.labels) {
    hsize_t ydims[4] = {o.dims[0], 1, 1, 1};
    hid_t ys = H5Screate_simple(4, ydims, nullptr);
    std::vector<uint8_t> y(o.dims[0]);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<uint8_t>(i % 2);
    hid_t yd = H5Dcreate2(f, "y", H5T_NATIVE_UINT8, ys, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(yd, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data());
    H5Dclose(yd);
    H5Sclose(ys);
  }
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Pclose(fcpl);
  H5Fclose(f);
}

std::string ReadRange(const std::string& path, uint64_t offset, uint64_t length) {
  std::string out(length, '\0');
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::pread(fd.get(), out.data(), length, static_cast<off_t>(offset)) ==
          static_cast<ssize_t>(length));
  return out;
}

struct Root {
  TempDir tmp;
  UniqueFd fd{::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
};

void CheckRows(const Root& root, const std::string& file, const RecordIndex& index,
               const std::vector<uint8_t>& pixels, uint64_t row) {
  REQUIRE(index.offsets.size() * row == pixels.size());
  for (size_t i = 0; i < index.offsets.size(); ++i) {
    CHECK(index.lengths[i] == row);
    CHECK(ReadRange(root.tmp / file, index.offsets[i], row) ==
          std::string(reinterpret_cast<const char*>(pixels.data()) + i * row, row));
  }
}

TEST_CASE("an HDF5 image array gives each image's bytes, contiguous or in chunks", "[records]") {
  Root root;
  const std::vector<uint8_t> pixels = Pixels(10, 6 * 5 * 3, 1);
  for (const auto& [chunk_rows, userblock] :
       std::vector<std::pair<hsize_t, hsize_t>>{{0, 0}, {4, 0}, {1, 0}, {0, 1024}, {3, 512}}) {
    H5Options o;
    o.chunk_rows = chunk_rows;
    o.userblock = userblock;
    WriteH5(root.tmp / "x.h5", pixels, o);
    RecordTarget t;
    t.file = "x.h5";
    auto index = IndexRecordFile(root.fd.get(), t);
    INFO("chunk rows " << chunk_rows << ", user block " << userblock << ": " << index.status());
    REQUIRE(index.ok());
    CHECK(index->height == 6);
    CHECK(index->width == 5);
    CHECK(index->channels == 3);
    CheckRows(root, "x.h5", *index, pixels, 90);
    REQUIRE(index->labels.size() == 10);
    for (size_t i = 0; i < 10; ++i) CHECK(index->labels[i] == static_cast<int64_t>(i % 2));
  }
}

TEST_CASE("HDF5 labels come from a y file, a text file, or are -1", "[records]") {
  Root root;
  const std::vector<uint8_t> pixels = Pixels(7, 4 * 4, 2);
  H5Options o;
  o.dims = {7, 4, 4};  // grey
  o.labels = false;
  WriteH5(root.tmp / "x.h5", pixels, o);
  RecordTarget t;
  t.file = "x.h5";
  auto none = IndexRecordFile(root.fd.get(), t);
  REQUIRE(none.ok());
  CHECK(none->channels == 1);
  CHECK(none->labels == std::vector<int64_t>(7, -1));
  CheckRows(root, "x.h5", *none, pixels, 16);

  // PCam's layout: the labels in their own file, dataset "y".
  H5Options y;
  y.dims = {7, 1, 1};
  WriteH5(root.tmp / "y.h5", Pixels(7, 1, 3), y);
  t.labels_file = "y.h5";
  auto from_y = IndexRecordFile(root.fd.get(), t);
  REQUIRE(from_y.ok());
  CHECK(from_y->labels == std::vector<int64_t>{0, 1, 0, 1, 0, 1, 0});

  root.tmp.Write("labels.txt", "3\n-1\n4\n1\n5\n9\n2\n");
  t.labels_file = "labels.txt";
  auto from_text = IndexRecordFile(root.fd.get(), t);
  REQUIRE(from_text.ok());
  CHECK(from_text->labels == std::vector<int64_t>{3, -1, 4, 1, 5, 9, 2});

  root.tmp.Write("short.txt", "1\n2\n");
  t.labels_file = "short.txt";
  auto short_labels = IndexRecordFile(root.fd.get(), t);
  REQUIRE(!short_labels.ok());
  CHECK(std::string(short_labels.status().message()).find("2 lines for 7 samples") !=
        std::string::npos);

  t.labels_file = "y.h5";
  t.labels_key = "labels";
  auto missing = IndexRecordFile(root.fd.get(), t);
  REQUIRE(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("no dataset 'labels'") != std::string::npos);
  CHECK(std::string(missing.status().message()).find("x, y") != std::string::npos);
}

TEST_CASE("an HDF5 dataset of variable-length bytes gives each value's bytes", "[records]") {
  Root root;
  std::vector<std::string> values;
  std::mt19937 rng(14);
  for (int i = 0; i < 30; ++i) {
    std::string v(i == 7 ? 0 : 10 + (i * 977) % 20000, '\0');  // 7: empty; some past 4 KiB
    for (char& c : v) c = static_cast<char>(rng());
    values.push_back(v);
  }
  hid_t f = H5Fcreate((root.tmp / "enc.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t n = values.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t type = H5Tvlen_create(H5T_NATIVE_UINT8);
  hid_t d = H5Dcreate2(f, "images", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<hvl_t> vl(values.size());
  for (size_t i = 0; i < values.size(); ++i) vl[i] = {values[i].size(), values[i].data()};
  REQUIRE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, vl.data()) >= 0);
  std::vector<int32_t> labels(values.size());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(100 + i);
  hid_t ld = H5Dcreate2(f, "y", H5T_NATIVE_INT32, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ld, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
  H5Dclose(ld);
  H5Dclose(d);
  H5Tclose(type);
  H5Sclose(space);
  H5Fclose(f);

  RecordTarget t;
  t.file = "enc.h5";
  t.images_key = "images";
  auto index = IndexRecordFile(root.fd.get(), t);
  REQUIRE(index.ok());
  CHECK(index->channels == 0);
  REQUIRE(index->offsets.size() == 29);
  CHECK(index->warning.find("left out 1 empty") != std::string::npos);
  for (size_t k = 0; k < 29; ++k) {
    const size_t i = k < 7 ? k : k + 1;
    INFO("row " << i);
    CHECK(index->rows[k] == i);
    CHECK(index->labels[k] == static_cast<int64_t>(100 + i));
    REQUIRE(index->lengths[k] == values[i].size());
    CHECK(ReadRange(root.tmp / "enc.h5", index->offsets[k], index->lengths[k]) == values[i]);
  }
}

TEST_CASE("HDF5 files stoker cannot range-read are refused, naming the fix", "[records]") {
  Root root;
  RecordTarget t;
  t.file = "x.h5";
  const auto message = [&](const H5Options& o, std::vector<uint8_t> pixels) {
    WriteH5(root.tmp / "x.h5", pixels, o);
    auto index = IndexRecordFile(root.fd.get(), t);
    REQUIRE(!index.ok());
    return std::string(index.status().message());
  };
  H5Options gz;
  gz.chunk_rows = 2;
  gz.gzip = true;
  CHECK(message(gz, Pixels(10, 90, 4)).find("compressed (deflate)") != std::string::npos);
  CHECK(message(gz, Pixels(10, 90, 4)).find("h5repack -l CONTI") != std::string::npos);
  H5Options split;
  split.chunk_rows = 2;
  split.dims = {10, 6, 5, 3};
  {
    // Chunks of half an image.
    hid_t f = H5Fcreate((root.tmp / "x.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = {4, 6, 5, 3}, chunk[4] = {1, 3, 5, 3};
    hid_t s = H5Screate_simple(4, dims, nullptr);
    hid_t p = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(p, 4, chunk);
    hid_t d = H5Dcreate2(f, "x", H5T_NATIVE_UINT8, s, H5P_DEFAULT, p, H5P_DEFAULT);
    std::vector<uint8_t> px = Pixels(4, 90, 5);
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px.data());
    H5Dclose(d);
    H5Pclose(p);
    H5Sclose(s);
    H5Fclose(f);
    auto index = IndexRecordFile(root.fd.get(), t);
    REQUIRE(index.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(index.status().message()).find("chunked across") != std::string::npos);
  }
  H5Options f32;
  f32.type = H5T_NATIVE_FLOAT;
  CHECK(message(f32, Pixels(10, 90, 6)).find("neither uint8 image arrays") != std::string::npos);
  H5Options rgba;
  rgba.dims = {2, 3, 3, 4};
  CHECK(message(rgba, Pixels(2, 36, 7)).find("shaped 2x3x3x4") != std::string::npos);

  t.images_key = "images/train";
  CHECK(message(H5Options(), Pixels(10, 90, 8)).find("has no dataset 'images/train'") !=
        std::string::npos);
  t.images_key.clear();

  root.tmp.Write("x.h5", "not hdf5 at all, just text");
  auto text = IndexRecordFile(root.fd.get(), t);
  CHECK(text.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(text.status().message()).find("not an HDF5 file") != std::string::npos);

  // Truncated: the header is there, the pixels are not.
  WriteH5(root.tmp / "x.h5", Pixels(10, 90, 9), H5Options());
  const std::string whole = ReadRange(root.tmp / "x.h5", 0, 2048);
  root.tmp.Write("x.h5", whole);
  auto cut = IndexRecordFile(root.fd.get(), t);
  CHECK(!cut.ok());

  t.file = "../x.h5";
  CHECK(IndexRecordFile(root.fd.get(), t).status().code() == absl::StatusCode::kPermissionDenied);
}

// An LMDB written as python-lmdb writes one: small values inline in leaf
// pages, large ones on overflow pages.
void WriteLmdb(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& kv) {
  std::filesystem::create_directories(dir);
  MDB_env* env;
  REQUIRE(mdb_env_create(&env) == 0);
  mdb_env_set_mapsize(env, size_t{64} << 20);
  REQUIRE(mdb_env_open(env, dir.c_str(), 0, 0600) == 0);
  MDB_txn* txn;
  REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
  MDB_dbi dbi;
  REQUIRE(mdb_dbi_open(txn, nullptr, 0, &dbi) == 0);
  for (const auto& [key, value] : kv) {
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
  }
  REQUIRE(mdb_txn_commit(txn) == 0);
  mdb_env_close(env);
}

TEST_CASE("an LMDB's values are ranges of data.mdb, in the keys' numeric order", "[records]") {
  Root root;
  std::vector<std::pair<std::string, std::string>> kv;
  std::mt19937 rng(11);
  for (int i = 0; i < 40; ++i) {
    std::string v(i % 3 == 0 ? 20000 + i : 30 + i * 7, '\0');  // overflow pages, inline
    for (char& c : v) c = static_cast<char>(rng());
    kv.emplace_back(std::to_string(i), v);  // "10" sorts before "2" in LMDB
  }
  kv.emplace_back("__len__", "40");
  kv.emplace_back("41", "");
  WriteLmdb(root.tmp / "db", kv);
  root.tmp.Write("labels.txt", [] {
    std::string s;
    for (int i = 0; i < 40; ++i) s += std::to_string(i * 10) + "\n";
    return s;
  }());
  RecordTarget t;
  t.kind = RecordKind::kLmdb;
  t.file = "db/data.mdb";
  t.labels_file = "labels.txt";
  auto index = IndexRecordFile(root.fd.get(), t);
  REQUIRE(index.ok());
  REQUIRE(index->offsets.size() == 40);
  CHECK(index->channels == 0);
  for (int i = 0; i < 40; ++i) {
    INFO("key " << i);
    CHECK(index->lengths[i] == kv[i].second.size());
    CHECK(ReadRange(root.tmp / "db/data.mdb", index->offsets[i], index->lengths[i]) ==
          kv[i].second);
    CHECK(index->labels[i] == i * 10);
  }
  CHECK(index->warning.find("1 empty value") != std::string::npos);
  CHECK(index->warning.find("1 key(s) that are not decimal") != std::string::npos);
}

TEST_CASE("an LMDB without decimal keys keeps LMDB's order, and a damaged one is refused",
          "[records]") {
  Root root;
  WriteLmdb(root.tmp / "db", {{"b", "second"}, {"a", "first"}, {"c", std::string(9000, 'z')}});
  RecordTarget t;
  t.kind = RecordKind::kLmdb;
  t.file = "db/data.mdb";
  auto index = IndexRecordFile(root.fd.get(), t);
  REQUIRE(index.ok());
  REQUIRE(index->offsets.size() == 3);
  CHECK(ReadRange(root.tmp / "db/data.mdb", index->offsets[0], 5) == "first");
  CHECK(ReadRange(root.tmp / "db/data.mdb", index->offsets[1], 6) == "second");
  CHECK(index->lengths[2] == 9000);
  CHECK(index->labels == std::vector<int64_t>(3, -1));

  root.tmp.Write("bad/data.mdb", std::string(16384, 'q'));
  t.file = "bad/data.mdb";
  auto bad = IndexRecordFile(root.fd.get(), t);
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("could not be opened") != std::string::npos);
}

TEST_CASE("Dataset::Open serves a record file as ranges of one file", "[records]") {
  TempDir tmp;
  auto root = DataRoot::Open(tmp.path());
  REQUIRE(root.ok());
  const std::vector<uint8_t> pixels = Pixels(10, 90, 12);
  std::filesystem::create_directories(tmp / "set");
  WriteH5(tmp / "set/x.h5", pixels, H5Options());
  WriteLmdb(tmp / "db", {{"1", "one"}, {"0", "zero"}});
  IndexOptions io;
  int calls = 0;
  io.index_records = [&](const RecordTarget& t) {
    ++calls;
    return IndexRecordFile((*root)->fd(), t);
  };
  auto h5 = Dataset::Open(**root, "set/x.h5", DatasetFormat::kAuto, io);
  REQUIRE(h5.ok());
  const Dataset& d = **h5;
  CHECK(d.format() == DatasetFormat::kHdf5);
  REQUIRE(d.size() == 10);
  CHECK(d.path(3) == "set/x.h5");
  CHECK(d.display(3) == "set/x.h5:3");
  CHECK(d.has_range(3));
  CHECK(d.range_length(3) == 90);
  CHECK(ReadRange(tmp / "set/x.h5", d.range_offset(3), 90) ==
        std::string(reinterpret_cast<const char*>(pixels.data()) + 270, 90));
  CHECK(d.label(3) == 1);
  CHECK((d.raw_height() == 6 && d.raw_width() == 5 && d.raw_channels() == 3));
  std::string why;
  CHECK(d.Unchanged(**root, &why));
  WriteH5(tmp / "set/x.h5", Pixels(12, 90, 13), H5Options());
  CHECK(!d.Unchanged(**root, &why));

  auto db = Dataset::Open(**root, "db", DatasetFormat::kAuto, io);
  REQUIRE(db.ok());
  CHECK((*db)->format() == DatasetFormat::kLmdb);
  CHECK((*db)->path(0) == "db/data.mdb");
  CHECK(ReadRange(tmp / "db/data.mdb", (*db)->range_offset(0), 4) == "zero");
  CHECK((*db)->raw_channels() == 0);
  CHECK(calls == 2);

  CHECK(Dataset::Open(**root, "db", DatasetFormat::kAuto, IndexOptions()).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(Dataset::Open(**root, "set", DatasetFormat::kHdf5, io).status().code() ==
        absl::StatusCode::kInvalidArgument);
  io.record_labels = "../elsewhere.txt";
  CHECK(Dataset::Open(**root, "set/x.h5", DatasetFormat::kHdf5, io).status().code() ==
        absl::StatusCode::kPermissionDenied);
}

TEST_CASE("PnmHeader makes raw pixels a PNM image", "[records]") {
  CHECK(PnmHeader(96, 64, 3) == "P6\n64 96\n255\n");
  CHECK(PnmHeader(2, 5, 1) == "P5\n5 2\n255\n");
}

}  // namespace
}  // namespace stoker
