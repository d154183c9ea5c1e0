// WebDataset shards (tar headers written here byte by byte, so that damaged
// and unusual ones can be made), brace patterns, and the index cache.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/dataset/dataset.h"
#include "testing/dataset_test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

// A tar archive in memory: ustar headers, optional GNU long names and pax
// path records, as GNU tar and Python's tarfile write them.
class TarWriter {
 public:
  void File(const std::string& name, const std::string& data, char type = '0') {
    std::string n = name;
    if (n.size() > 99) {
      Header("././@LongLink", n.size() + 1, 'L');
      Data(n + '\0');
      n = n.substr(0, 99);
    }
    Header(n, data.size(), type);
    Data(data);
  }
  void Pax(const std::string& path, const std::string& data) {
    const std::string rec = "path=" + path + "\n";
    std::string len = std::to_string(rec.size() + 3);
    std::string record = len + " " + rec;
    if (record.size() != std::stoul(len)) record = std::to_string(record.size() + 1) + " " + rec;
    Header("PaxHeaders/x", record.size(), 'x');
    Data(record);
    Header(path.substr(0, 99), data.size(), '0');
    Data(data);
  }
  void End() { bytes_.append(1024, '\0'); }
  // A member whose size field is GNU base-256 `size` (no data follows).
  void HugeMember(const std::string& name, uint64_t size) {
    Header(name, 0, '0');
    char* h = bytes_.data() + bytes_.size() - 512;
    std::memset(h + 124, 0, 12);
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>(size >> (8 * i));
    Checksum(h);
  }
  std::string& bytes() { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  void Header(const std::string& name, size_t size, char type) {
    char h[512] = {};
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011zo", size);
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = type;
    std::memcpy(h + 257, "ustar\0" "00", 8);
    Checksum(h);
    bytes_.append(h, 512);
  }
  // The header's checksum field, over its 512 bytes as they are.
  static void Checksum(char* h) {
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum);
  }
  void Data(const std::string& d) {
    bytes_.append(d);
    bytes_.append((512 - d.size() % 512) % 512, '\0');
  }
  std::string bytes_;
};

void WriteFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string ReadRange(const std::string& path, uint64_t offset, uint64_t length) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string s(length, '\0');
  in.read(s.data(), static_cast<std::streamsize>(length));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// Whether one of the dataset's warnings says `what`.
bool Warned(const Dataset& d, std::string_view what) {
  for (const auto& w : d.warnings()) {
    if (w.find(what) != std::string::npos) return true;
  }
  return false;
}

std::unique_ptr<DataRoot> OpenRoot(const std::string& dir) {
  auto root = DataRoot::Open(dir);
  REQUIRE(root.ok());
  return std::move(*root);
}

TEST_CASE("Brace patterns expand like the shell's, zero padding kept", "[dataset][webdataset]") {
  auto e = Dataset::ExpandBraces("s/train-{0008..0011}-{a,bc}.tar");
  REQUIRE(e.ok());
  CHECK(*e == std::vector<std::string>{"s/train-0008-a.tar", "s/train-0008-bc.tar",
                                       "s/train-0009-a.tar", "s/train-0009-bc.tar",
                                       "s/train-0010-a.tar", "s/train-0010-bc.tar",
                                       "s/train-0011-a.tar", "s/train-0011-bc.tar"});
  CHECK(*Dataset::ExpandBraces("x.tar") == std::vector<std::string>{"x.tar"});
  for (const char* bad : {"a{1..", "a}b", "a{}b", "a{3..1}", "a{x..y}", "{0..99999}{0..9}"}) {
    CAPTURE(bad);
    CHECK(absl::IsInvalidArgument(Dataset::ExpandBraces(bad).status()));
  }
  // Within the count limit but not within the byte limit: 100,000 copies of
  // a 1 KB suffix would be 100 MB (and a 4 MB request, 400 GB). Refused
  // before anything is built, as is a pattern longer than a path may be.
  // Range endpoints padded wider than any number: 100,000 names of 4 KB.
  CHECK(absl::IsInvalidArgument(
      Dataset::ExpandBraces("{" + std::string(4000, '0') + "..99999}").status()));
  const std::string long_suffix = "{0..99999}" + std::string(1000, 'a') + ".tar";
  CHECK(absl::IsInvalidArgument(Dataset::ExpandBraces(long_suffix).status()));
  CHECK(absl::IsInvalidArgument(Dataset::ExpandBraces(std::string(5000, 'a')).status()));
  const std::string long_prefix = std::string(1000, 'a') + "{0..9}{0..9}{0..9}{0..9}{0..9}";
  CHECK(absl::IsInvalidArgument(Dataset::ExpandBraces(long_prefix).status()));
  // 10,000 names of 30 bytes are fine.
  auto many = Dataset::ExpandBraces("shards/train-{0000..9999}.tar");
  REQUIRE(many.ok());
  CHECK(many->size() == 10000);
  CHECK(many->back() == "shards/train-9999.tar");
}

TEST_CASE("WebDataset: every image key is an image, jpg first, else the first image member",
          "[dataset][webdataset]") {
  TempDir tmp;
  TarWriter a;
  const std::vector<std::string> keys = {"png", "webp", "tif", "tiff", "bmp", "ppm", "pgm", "JPG"};
  for (size_t k = 0; k < keys.size(); ++k) {
    a.File("s" + std::to_string(k) + "." + keys[k], "IMAGE-" + keys[k]);
    a.File("s" + std::to_string(k) + ".cls", std::to_string(k));
  }
  a.File("m.cls", "9");
  a.File("m.png", "MASK");   // a segmentation sample: the png is its mask...
  a.File("m.jpg", "IMAGE");  // ...the jpg its image, whichever comes first
  a.File("n.webp", "FIRST");  // no jpg: the first image member
  a.File("n.png", "SECOND");
  a.File("g.gif", "NOT-AN-IMAGE-KEY");  // no image member: skipped
  a.End();
  WriteFile(tmp / "root/shard.tar", a.bytes());
  auto root = OpenRoot(tmp / "root");
  auto opened = Dataset::Open(*root, "shard.tar", DatasetFormat::kAuto);
  REQUIRE(opened.ok());
  const Dataset& d = **opened;
  REQUIRE(d.size() == keys.size() + 2);
  for (uint64_t i = 0; i < keys.size(); ++i) {
    CAPTURE(i);
    CHECK(d.label(i) == static_cast<int64_t>(i));
    CHECK(ReadRange(tmp / "root/shard.tar", d.range_offset(i), d.range_length(i)) ==
          "IMAGE-" + keys[i]);
  }
  CHECK(ReadRange(tmp / "root/shard.tar", d.range_offset(keys.size()),
                  d.range_length(keys.size())) == "IMAGE");
  CHECK(d.label(keys.size()) == 9);
  CHECK(ReadRange(tmp / "root/shard.tar", d.range_offset(keys.size() + 1),
                  d.range_length(keys.size() + 1)) == "FIRST");
  CHECK(d.warnings().size() == 2);  // g without an image, n without a label
}

TEST_CASE("WebDataset: a video set's samples are its mp4, avi or webm members",
          "[dataset][webdataset]") {
  TempDir tmp;
  TarWriter a;
  a.File("v0.mp4", "VIDEO-0");
  a.File("v0.cls", "4");
  a.File("v1.jpg", "A-THUMBNAIL");  // not a sample of a video set
  a.File("v1.WEBM", "VIDEO-1");
  a.File("v1.json", R"({"label": 7})");
  a.File("v2.jpg", "IMAGE-ONLY");  // no video member: skipped
  a.File("v3.avi", "VIDEO-3");
  a.File("v3.mp4", "SECOND");  // one video a sample: the first
  a.End();
  WriteFile(tmp / "root/videos.tar", a.bytes());
  auto root = OpenRoot(tmp / "root");
  IndexOptions io;
  io.extensions = {"mp4", ".avi", "webm"};
  auto opened = Dataset::Open(*root, "videos.tar", DatasetFormat::kAuto, io);
  REQUIRE(opened.ok());
  const Dataset& d = **opened;
  REQUIRE(d.size() == 3);
  CHECK(ReadRange(tmp / "root/videos.tar", d.range_offset(0), d.range_length(0)) == "VIDEO-0");
  CHECK(d.label(0) == 4);
  CHECK(ReadRange(tmp / "root/videos.tar", d.range_offset(1), d.range_length(1)) == "VIDEO-1");
  CHECK(d.label(1) == 7);
  CHECK(ReadRange(tmp / "root/videos.tar", d.range_offset(2), d.range_length(2)) == "VIDEO-3");
  CHECK_FALSE(d.has_masks());
  bool named = false;
  for (const std::string& w : d.warnings()) named |= w.find("no member keyed mp4, avi, webm") != std::string::npos;
  CHECK(named);
  // The same shard as an image set: its jpg members.
  auto images = Dataset::Open(*root, "videos.tar", DatasetFormat::kAuto);
  REQUIRE(images.ok());
  CHECK((*images)->size() == 2);
}

TEST_CASE("WebDataset: a png beside a jpg is the mask, json boxes make a detection set",
          "[dataset][webdataset][cache]") {
  TempDir tmp;
  TarWriter a;
  a.File("a.jpg", "IMAGE-A");
  a.File("a.png", "MASK-A");
  a.File("a.json", R"({"label": 3, "boxes": [[1, 2, 11, 22], [0, 0, 5, 5]], "labels": [7, 8],
                     "iscrowd": [0, 1]})");
  a.File("b.seg.png", "MASK-B");  // before its image
  a.File("b.png", "IMAGE-B");
  a.File("b.json", R"({"boxes": [[1, 2, 3], [NaN, 0, 1, 1]]})");
  a.File("c.jpg", "IMAGE-C");  // no mask, no boxes
  a.End();
  WriteFile(tmp / "root/seg.tar", a.bytes());
  auto root = OpenRoot(tmp / "root");
  IndexOptions io;
  io.cache_dir = tmp / "cache";
  std::filesystem::last_write_time(
      tmp / "root/seg.tar", std::filesystem::file_time_type::clock::now() - std::chrono::seconds(10));
  for (int pass = 0; pass < 2; ++pass) {
    auto opened = Dataset::Open(*root, "seg.tar", DatasetFormat::kAuto, io);
    REQUIRE(opened.ok());
    const Dataset& d = **opened;
    CHECK(d.from_cache() == (pass == 1));
    REQUIRE(d.size() == 3);
    REQUIRE(d.has_masks());
    CHECK(d.mask_path(0) == "seg.tar");
    CHECK(ReadRange(tmp / "root/seg.tar", d.mask_range_offset(0), d.mask_range_length(0)) ==
          "MASK-A");
    CHECK(ReadRange(tmp / "root/seg.tar", d.range_offset(1), d.range_length(1)) == "IMAGE-B");
    CHECK(ReadRange(tmp / "root/seg.tar", d.mask_range_offset(1), d.mask_range_length(1)) ==
          "MASK-B");
    CHECK(d.mask_path(2).empty());  // fails as a sample in a segmentation session
    CHECK(d.label(0) == 3);
    REQUIRE(d.has_boxes());
    CHECK(d.max_boxes() == 2);
    REQUIRE(d.box_count(0) == 2);
    CHECK(std::vector<float>(d.box_xyxy(0), d.box_xyxy(0) + 8) ==
          std::vector<float>{1, 2, 11, 22, 0, 0, 5, 5});
    CHECK((d.box_labels(0)[0] == 7 && d.box_labels(0)[1] == 8));
    CHECK((d.box_flags(0)[0] == 0 && d.box_flags(0)[1] == 1));
    REQUIRE(d.box_count(1) == 2);
    CHECK(std::isnan(d.box_xyxy(1)[0]));  // 3 numbers: not a box, fails its sample
    CHECK(std::isnan(d.box_xyxy(1)[4]));
    CHECK(d.box_labels(1)[0] == -1);
    CHECK(d.box_count(2) == 0);
  }
}

TEST_CASE("WebDataset: samples grouped by key, labels from .cls and .json, ranges exact",
          "[dataset][webdataset]") {
  TempDir tmp;
  TarWriter a;
  a.File("d/k1.jpg", "IMAGE-ONE");
  a.File("d/k1.cls", " 3\n");
  a.File("d/k2.JPEG", "IMAGE-TWO!");
  a.File("d/k2.json", "{\"caption\": \"x\", \"label\" : -7}");
  a.File("d/k3.cls", "1");  // no image: skipped
  a.File("d/dir", "", '5');
  a.File("d/k4.jpg", "IMAGE-FOUR");  // no label: -1
  a.File("d/k4.seg.jpg", "NOT-THE-IMAGE");  // extension "seg.jpg"
  a.End();
  TarWriter b;
  const std::string long_key = "deep/" + std::string(120, 'n') + "/k5";
  b.File(long_key + ".jpg", "IMAGE-FIVE");  // GNU long name
  b.File(long_key + ".cls", "5");
  b.Pax("pax/k6.jpg", "IMAGE-SIX");
  b.File("pax/k6.cls", "6");
  b.End();
  WriteFile(tmp / "root/shards/s-00.tar", a.bytes());
  WriteFile(tmp / "root/shards/s-01.tar", b.bytes());
  auto root = OpenRoot(tmp / "root");
  auto opened = Dataset::Open(*root, "shards/s-{00..01}.tar", DatasetFormat::kAuto);
  REQUIRE(opened.ok());
  const Dataset& d = **opened;
  CHECK(d.format() == DatasetFormat::kWebDataset);
  CHECK(d.name() == "shards/s-{00..01}.tar");
  REQUIRE(d.size() == 5);
  const std::vector<std::string> images = {"IMAGE-ONE", "IMAGE-TWO!", "IMAGE-FOUR", "IMAGE-FIVE",
                                           "IMAGE-SIX"};
  const std::vector<int64_t> labels = {3, -7, -1, 5, 6};
  for (uint64_t i = 0; i < d.size(); ++i) {
    CAPTURE(i);
    CHECK(d.has_range(i));
    CHECK(d.label(i) == labels[i]);
    CHECK(ReadRange(tmp / ("root/" + std::string(d.path(i))), d.range_offset(i),
                    d.range_length(i)) == images[i]);
  }
  CHECK(d.path(0) == "shards/s-00.tar");
  CHECK(d.path(3) == "shards/s-01.tar");
  CHECK(d.display(1) == "shards/s-00.tar:d/k2.JPEG");
  CHECK(d.display(3) == "shards/s-01.tar:" + long_key + ".jpg");
  CHECK(d.display(4) == "shards/s-01.tar:pax/k6.jpg");
  CHECK(d.warnings().size() == 2);  // k3 without an image, k4 without a label

  // One .tar file is a WebDataset too.
  auto one = Dataset::Open(*root, "shards/s-01.tar", DatasetFormat::kAuto);
  REQUIRE(one.ok());
  CHECK((*one)->size() == 2);
  // A missing shard names itself.
  auto missing = Dataset::Open(*root, "shards/s-{00..02}.tar", DatasetFormat::kAuto);
  CHECK(absl::IsNotFound(missing.status()));
  // A pattern that leaves the root is refused.
  CHECK(absl::IsPermissionDenied(
      Dataset::Open(*root, "../x-{0..1}.tar", DatasetFormat::kAuto).status()));
}

TEST_CASE("WebDataset: truncated and damaged shards", "[dataset][webdataset]") {
  TempDir tmp;
  TarWriter t;
  t.File("a.jpg", std::string(3000, 'A'));
  t.File("a.cls", "0");
  t.File("b.jpg", std::string(3000, 'B'));
  // Truncated in the middle of b.jpg: b is kept, its range runs past the end.
  const size_t cut = t.size() - 1000;
  WriteFile(tmp / "root/trunc.tar", t.bytes().substr(0, cut));
  // A damaged header after the first sample: later members are not indexed.
  TarWriter u;
  u.File("a.jpg", "AAAA");
  const size_t second = u.size();
  u.File("b.jpg", "BBBB");
  u.File("c.jpg", "CCCC");
  u.End();
  u.bytes()[second + 10] ^= 0x55;
  WriteFile(tmp / "root/bad.tar", u.bytes());
  auto root = OpenRoot(tmp / "root");

  auto trunc = Dataset::Open(*root, "trunc.tar", DatasetFormat::kAuto);
  REQUIRE(trunc.ok());
  REQUIRE((*trunc)->size() == 2);
  const uint64_t file_size = cut;
  CHECK((*trunc)->range_offset(1) + (*trunc)->range_length(1) > file_size);

  auto bad = Dataset::Open(*root, "bad.tar", DatasetFormat::kAuto);
  REQUIRE(bad.ok());
  CHECK((*bad)->size() == 1);
  CHECK(Warned(**bad, "bad checksum"));

  // Sizes near 2^64 (GNU base-256): the rounded end of the member wraps
  // around to this header, or to an earlier one. The index must end with a
  // warning, not walk the same headers forever.
  for (uint64_t huge : {~uint64_t{0} - 511, ~uint64_t{0} - 1023, uint64_t{1} << 62}) {
    TarWriter w;
    w.File("a.jpg", "AAAA");
    w.HugeMember("b.jpg", huge);
    w.File("c.jpg", "CCCC");
    w.End();
    WriteFile(tmp / "root/huge.tar", w.bytes());
    auto huge_ds = Dataset::Open(*root, "huge.tar", DatasetFormat::kAuto);
    REQUIRE(huge_ds.ok());
    CHECK((*huge_ds)->size() == 1);
    CHECK(Warned(**huge_ds, "member size"));
  }

  WriteFile(tmp / "root/nothing.tar", std::string(1024, '\0'));
  CHECK(absl::IsFailedPrecondition(
      Dataset::Open(*root, "nothing.tar", DatasetFormat::kAuto).status()));
}

std::vector<std::string> Paths(const Dataset& d) {
  std::vector<std::string> out;
  for (uint64_t i = 0; i < d.size(); ++i) out.push_back(d.display(i) + "=" + std::to_string(d.label(i)));
  return out;
}

// mtimes must move on even where the file system's clock is coarse.
void Later(const std::string& path) {
  struct timespec times[2] = {{0, UTIME_OMIT}, {0, 0}};
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  times[1].tv_sec = st.st_mtim.tv_sec + 5;
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

// Indexes made "now" are not cached (a change within the same mtime tick
// could go unseen); put everything 10 s in the past.
void Age(const std::string& dir) {
  const struct timespec past[2] = {{time(nullptr) - 10, 0}, {time(nullptr) - 10, 0}};
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    utimensat(AT_FDCWD, e.path().c_str(), past, AT_SYMLINK_NOFOLLOW);
  }
  utimensat(AT_FDCWD, dir.c_str(), past, 0);
}

TEST_CASE("Index cache: used while nothing changed, rebuilt when something did",
          "[dataset][cache]") {
  TempDir tmp;
  tmp.Write("root/folder/a/1.jpg");
  tmp.Write("root/folder/a/sub/2.jpg");
  tmp.Write("root/folder/b/3.jpg");
  tmp.Write("root/list.tsv", "folder/a/1.jpg\t4\nfolder/b/3.jpg\t5\n");
  TarWriter t;
  t.File("k.jpg", "K");
  t.File("k.cls", "9");
  t.End();
  WriteFile(tmp / "root/s.tar", t.bytes());
  Age(tmp / "root");
  auto root = OpenRoot(tmp / "root");
  IndexOptions o;
  o.cache_dir = tmp / "cache";
  uint64_t progress_calls = 0;
  o.progress = [&](uint64_t) { ++progress_calls; };

  for (const char* ds : {"folder", "list.tsv", "s.tar"}) {
    CAPTURE(ds);
    auto first = Dataset::Open(*root, ds, DatasetFormat::kAuto, o);
    REQUIRE(first.ok());
    CHECK(!(*first)->from_cache());
    auto second = Dataset::Open(*root, ds, DatasetFormat::kAuto, o);
    REQUIRE(second.ok());
    CHECK((*second)->from_cache());
    CHECK(Paths(**second) == Paths(**first));
    CHECK((*second)->class_names() == (*first)->class_names());
    CHECK((*second)->memory_bytes() < (*first)->memory_bytes());
    std::string why;
    CHECK((*second)->Unchanged(*root, &why));
  }
  CHECK(progress_calls >= 6);

  // A file added two folders down: that folder's mtime moves.
  auto before = Dataset::Open(*root, "folder", DatasetFormat::kAuto, o);
  REQUIRE(before.ok());
  tmp.Write("root/folder/a/sub/4.jpg");
  Later(tmp / "root/folder/a/sub");
  std::string why;
  CHECK(!(*before)->Unchanged(*root, &why));
  CHECK(why.find("folder/a/sub") != std::string::npos);
  auto after = Dataset::Open(*root, "folder", DatasetFormat::kAuto, o);
  REQUIRE(after.ok());
  CHECK(!(*after)->from_cache());
  CHECK((*after)->size() == 4);

  // The manifest rewritten; the shard replaced.
  tmp.Write("root/list.tsv", "folder/b/3.jpg\t5\n");
  Later(tmp / "root/list.tsv");
  auto m = Dataset::Open(*root, "list.tsv", DatasetFormat::kAuto, o);
  REQUIRE(m.ok());
  CHECK(!(*m)->from_cache());
  CHECK((*m)->size() == 1);
  TarWriter t2;
  t2.File("k.jpg", "K");
  t2.File("j.jpg", "J");
  t2.End();
  WriteFile(tmp / "root/s2.tar", t2.bytes());
  std::filesystem::rename(tmp / "root/s2.tar", tmp / "root/s.tar");
  auto s = Dataset::Open(*root, "s.tar", DatasetFormat::kAuto, o);
  REQUIRE(s.ok());
  CHECK(!(*s)->from_cache());
  CHECK((*s)->size() == 2);

  // A damaged cache file is ignored, said so, and replaced.
  Age(tmp / "root");
  REQUIRE(Dataset::Open(*root, "folder", DatasetFormat::kAuto, o).ok());  // cached again
  for (const auto& e : std::filesystem::directory_iterator(tmp / "cache")) {
    std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) / 2);
  }
  auto damaged = Dataset::Open(*root, "folder", DatasetFormat::kAuto, o);
  REQUIRE(damaged.ok());
  CHECK(!(*damaged)->from_cache());
  CHECK((*damaged)->size() == 4);
  CHECK(!(*damaged)->warnings().empty());
  CHECK((*Dataset::Open(*root, "folder", DatasetFormat::kAuto, o))->from_cache());

  // A cache file that others may write is not trusted: indexed again, said
  // so, and replaced by a private one. No temp file is left behind.
  std::filesystem::remove_all(tmp / "cache");
  REQUIRE(Dataset::Open(*root, "folder", DatasetFormat::kAuto, o).ok());  // the one index
  for (const auto& e : std::filesystem::directory_iterator(tmp / "cache")) {
    REQUIRE(chmod(e.path().c_str(), 0666) == 0);
  }
  auto shared = Dataset::Open(*root, "folder", DatasetFormat::kAuto, o);
  REQUIRE(shared.ok());
  CHECK(!(*shared)->from_cache());
  CHECK(Warned(**shared, "writable by others"));
  CHECK((*Dataset::Open(*root, "folder", DatasetFormat::kAuto, o))->from_cache());
  for (const auto& e : std::filesystem::directory_iterator(tmp / "cache")) {
    CAPTURE(e.path());
    CHECK(e.path().string().find(".tmp.") == std::string::npos);
    struct stat fst;
    REQUIRE(stat(e.path().c_str(), &fst) == 0);
    CHECK((fst.st_mode & 0777) == 0600);
  }

  struct stat st;
  REQUIRE(stat((tmp / "cache").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
}

TEST_CASE("Index cache: shards named by a pattern through links follow the links",
          "[dataset][cache]") {
  // As git-annex or DVC keep them: wds/s0.tar -> ../blobs/v1.tar, updated by
  // pointing the link at v2.tar.
  TempDir tmp;
  for (const auto& [blob, members] : {std::pair{"v1", 2}, std::pair{"v2", 5}}) {
    TarWriter t;
    for (int m = 0; m < members; ++m) t.File(std::to_string(m) + ".jpg", "J");
    t.End();
    WriteFile(tmp / (std::string("root/blobs/") + blob + ".tar"), t.bytes());
  }
  std::filesystem::create_directories(tmp / "root/wds");
  std::filesystem::create_symlink("../blobs/v1.tar", tmp / "root/wds/s0.tar");
  Age(tmp / "root");
  auto root = OpenRoot(tmp / "root");
  IndexOptions o;
  o.cache_dir = tmp / "cache";
  auto v1 = Dataset::Open(*root, "wds/s{0..0}.tar", DatasetFormat::kAuto, o);
  REQUIRE(v1.ok());
  CHECK((*v1)->size() == 2);
  CHECK((*Dataset::Open(*root, "wds/s{0..0}.tar", DatasetFormat::kAuto, o))->from_cache());
  std::string why;
  CHECK((*v1)->Unchanged(*root, &why));

  std::filesystem::remove(tmp / "root/wds/s0.tar");
  std::filesystem::create_symlink("../blobs/v2.tar", tmp / "root/wds/s0.tar");
  CHECK_FALSE((*v1)->Unchanged(*root, &why));
  CHECK(why.find("resolve to other files") != std::string::npos);
  auto v2 = Dataset::Open(*root, "wds/s{0..0}.tar", DatasetFormat::kAuto, o);
  REQUIRE(v2.ok());
  CHECK_FALSE((*v2)->from_cache());
  CHECK((*v2)->size() == 5);
}

}  // namespace
}  // namespace stoker
