// Dataset::Open: ImageFolder order, labels, empty classes and unsupported
// formats as torchvision's, manifests, confinement of every entry, the
// options in the cache's key, and the memory of a million-entry index.

#include "server/dataset/dataset.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "testing/dataset_test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

struct Entry {
  std::string path;
  int64_t label;
  bool operator==(const Entry& o) const { return path == o.path && label == o.label; }
};

std::ostream& operator<<(std::ostream& os, const Entry& e) {
  return os << "{" << e.path << ", " << e.label << "}";
}

std::vector<Entry> Entries(const Dataset& d) {
  std::vector<Entry> entries;
  for (uint64_t i = 0; i < d.size(); ++i) entries.push_back({std::string(d.path(i)), d.label(i)});
  return entries;
}

std::unique_ptr<DataRoot> OpenRoot(const std::string& dir) {
  auto root = DataRoot::Open(dir);
  REQUIRE(root.ok());
  return std::move(*root);
}

bool Mentions(const absl::Status& s, std::string_view what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

// The tree of the ImageFolder order test. torchvision 0.14's ImageFolder
// (Debian 12's) lists the same order and labels for it (checked once by
// hand, with class "c" removed since torchvision refuses an empty class, and
// with its extensions accepting u.png too), naming the symlinked files
// through their links (b_2/link.jpg, b_2/abs/img1.jpeg, ...) where
// Dataset::path gives their canonical targets.
void MakeImageFolder(const TempDir& tmp) {
  tmp.Write("root/ds/B/img2.JPG");
  tmp.Write("root/ds/B/img1.jpeg");
  tmp.Write("root/ds/B/notes.txt");
  tmp.Write("root/ds/a/z.jpg");
  tmp.Write("root/ds/a/Thumbs.db");
  tmp.Symlink("nonexistent.jpg", "root/ds/a/dangling.jpg");
  tmp.Write("root/ds/a/a.jpg/t.jpg");  // a directory named a.jpg: walked, not listed
  tmp.Write("root/ds/a/sub/y.Jpeg");
  tmp.Write("root/ds/a/sub/deeper/x.jpg");
  tmp.Write("root/ds/a/sub b/w.jpg");
  tmp.Write("root/ds/a/sub-c/v.jpg");
  tmp.Write("root/ds/a/sub0/u.jpg");
  tmp.Write("root/ds/a/sub0/u.png");
  tmp.Write("root/ds/b_2/1.jpg");
  tmp.Write("root/ds/b_2/.hidden.jpg");
  tmp.Symlink("../a/z.jpg", "root/ds/b_2/link.jpg");
  tmp.Symlink(tmp / "root/ds/B", "root/ds/b_2/abs");  // absolute, inside the root
  tmp.MakeDir("root/ds/c");                           // a class without images
  tmp.Write("root/ds/c/readme.md");
  tmp.Write("root/ds/readme.jpg");                     // not in a class folder
  tmp.Symlink("B/img1.jpeg", "root/ds/zz_file_link");  // a file link: not a class
  tmp.Symlink("/etc/passwd", "root/ds/B/passwd.txt");  // not an image: never looked at
}

std::vector<std::string> Listed(const Dataset& d) {
  std::vector<std::string> listed;
  for (uint64_t i = 0; i < d.size(); ++i) listed.push_back(d.listed_path(i));
  return listed;
}

IndexOptions Lenient() {
  IndexOptions o;
  o.allow_empty = true;
  return o;
}

TEST_CASE("ImageFolder: labels and order as torchvision's", "[dataset][image_folder]") {
  TempDir tmp;
  MakeImageFolder(tmp);
  auto root = OpenRoot(tmp / "root");
  // As torchvision, which refuses the empty class "c".
  auto strict = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder);
  CHECK(absl::IsFailedPrecondition(strict.status()));
  CHECK(Mentions(strict.status(), "no valid file for the classes c ("));

  auto opened = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, Lenient());
  REQUIRE(opened.ok());
  const Dataset& d = **opened;
  CHECK(d.name() == "ds");
  CHECK(d.class_names() == std::vector<std::string>{"B", "a", "b_2", "c"});
  const std::vector<Entry> expected = {
      {"ds/B/img1.jpeg", 0},   {"ds/B/img2.JPG", 0},         {"ds/a/dangling.jpg", 1},
      {"ds/a/z.jpg", 1},       {"ds/a/a.jpg/t.jpg", 1},      {"ds/a/sub/y.Jpeg", 1},
      {"ds/a/sub b/w.jpg", 1},  // ' ' < '-' < '/' < '0': not depth-first
      {"ds/a/sub-c/v.jpg", 1}, {"ds/a/sub/deeper/x.jpg", 1}, {"ds/a/sub0/u.jpg", 1},
      {"ds/a/sub0/u.png", 1},  {"ds/b_2/.hidden.jpg", 2},    {"ds/b_2/1.jpg", 2},
      {"ds/a/z.jpg", 2},      // b_2/link.jpg
      {"ds/B/img1.jpeg", 2},  // b_2/abs/img1.jpeg
      {"ds/B/img2.JPG", 2},   // b_2/abs/img2.JPG
  };
  CHECK(Entries(d) == expected);
  // torchvision's samples, less the dataset folder: through the links.
  CHECK(Listed(d) == std::vector<std::string>{
                         "B/img1.jpeg", "B/img2.JPG", "a/dangling.jpg", "a/z.jpg", "a/a.jpg/t.jpg",
                         "a/sub/y.Jpeg", "a/sub b/w.jpg", "a/sub-c/v.jpg", "a/sub/deeper/x.jpg",
                         "a/sub0/u.jpg", "a/sub0/u.png", "b_2/.hidden.jpg", "b_2/1.jpg",
                         "b_2/link.jpg", "b_2/abs/img1.jpeg", "b_2/abs/img2.JPG"});

  // kAuto picks ImageFolder for a directory; an absolute path inside works.
  auto automatic = Dataset::Open(*root, tmp / "root/ds", DatasetFormat::kAuto, Lenient());
  REQUIRE(automatic.ok());
  CHECK(Entries(**automatic) == expected);
  CHECK((*automatic)->name() == "ds");
}

TEST_CASE("ImageFolder: the data root itself, and a class reached by a symlink",
          "[dataset][image_folder]") {
  TempDir tmp;
  tmp.Write("root/cat/1.jpg");
  tmp.Write("raw/dogs/2.JPEG");
  tmp.Symlink("../raw/dogs", "root/dog");
  auto root = OpenRoot(tmp.path());  // the tree lies at root/, the data root is tmp
  auto opened = Dataset::Open(*root, "root", DatasetFormat::kAuto);
  REQUIRE(opened.ok());
  CHECK((*opened)->class_names() == std::vector<std::string>{"cat", "dog"});
  CHECK(Entries(**opened) == std::vector<Entry>{{"root/cat/1.jpg", 0}, {"raw/dogs/2.JPEG", 1}});
  CHECK(Listed(**opened) == std::vector<std::string>{"cat/1.jpg", "dog/2.JPEG"});

  TempDir tmp2;
  tmp2.Write("x/1.jpg");
  auto root2 = OpenRoot(tmp2.path());
  auto at_root = Dataset::Open(*root2, ".", DatasetFormat::kImageFolder);
  REQUIRE(at_root.ok());
  CHECK((*at_root)->name() == "");
  CHECK(Entries(**at_root) == std::vector<Entry>{{"x/1.jpg", 0}});
  CHECK(Listed(**at_root) == std::vector<std::string>{"x/1.jpg"});
}

TEST_CASE("ImageFolder: symlink loops are walked once", "[dataset][image_folder]") {
  TempDir tmp;
  tmp.Write("ds/cls/1.jpg");
  tmp.Write("ds/cls/sub/2.jpg");
  tmp.Symlink("..", "ds/cls/sub/up");
  tmp.Symlink(".", "ds/cls/self");
  tmp.Symlink("self.jpg", "ds/cls/self.jpg");  // a file link to itself: ELOOP
  auto root = OpenRoot(tmp.path());
  auto opened = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder);
  REQUIRE(opened.ok());
  CHECK(Entries(**opened) == std::vector<Entry>{
                                 {"ds/cls/1.jpg", 0},
                                 {"ds/cls/self.jpg", 0},  // listed; fails as a sample
                                 {"ds/cls/sub/2.jpg", 0},
                             });
}

TEST_CASE("ImageFolder: classes without an image file fail the request, as torchvision's",
          "[dataset][image_folder]") {
  TempDir tmp;
  tmp.MakeDir("root/ds/.ipynb_checkpoints");  // what Jupyter leaves beside the classes
  tmp.Write("root/ds/cat/1.jpg");
  tmp.Write("root/ds/dog/readme.txt");
  tmp.Write("root/ds/emu/2.jpg");
  tmp.Write("root/ds/notes.txt");
  auto root = OpenRoot(tmp / "root");

  auto strict = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder);
  CHECK(absl::IsFailedPrecondition(strict.status()));
  INFO(strict.status().message());
  CHECK(Mentions(strict.status(), "no valid file for the classes .ipynb_checkpoints, dog ("));
  CHECK(Mentions(strict.status(), "allow_empty=True"));
  CHECK(!Mentions(strict.status(), "cat"));
  CHECK(!Mentions(strict.status(), "format stoker cannot read"));

  IndexOptions o;
  o.allow_empty = true;
  auto lenient = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, o);
  REQUIRE(lenient.ok());
  // Every class keeps its label, as ImageFolder(allow_empty=True).
  CHECK((*lenient)->class_names() ==
        std::vector<std::string>{".ipynb_checkpoints", "cat", "dog", "emu"});
  CHECK(Entries(**lenient) == std::vector<Entry>{{"ds/cat/1.jpg", 1}, {"ds/emu/2.jpg", 3}});

  SECTION("no class folder at all") {
    tmp.Write("root/flat/1.jpg");
    auto s = Dataset::Open(*root, "flat", DatasetFormat::kImageFolder, o).status();
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(Mentions(s, "no class folder"));
  }
  SECTION("every class empty, even with allow_empty") {
    tmp.MakeDir("root/hollow/a");
    tmp.MakeDir("root/hollow/b");
    CHECK(absl::IsFailedPrecondition(
        Dataset::Open(*root, "hollow", DatasetFormat::kImageFolder, o).status()));
  }
  SECTION("many empty classes: a bounded list") {
    for (int k = 0; k < 30; ++k) tmp.MakeDir("root/many/e" + std::to_string(100 + k));
    tmp.Write("root/many/full/1.jpg");
    auto s = Dataset::Open(*root, "many", DatasetFormat::kImageFolder).status();
    CHECK(Mentions(s, "e100, e101"));
    CHECK(Mentions(s, "e119 and 10 more"));
    CHECK(!Mentions(s, "e120"));
  }
}

TEST_CASE("ImageFolder: every extension of torchvision's IMG_EXTENSIONS is listed, in any case",
          "[dataset][image_folder]") {
  TempDir tmp;
  tmp.Write("root/ds/a/1.jpg");
  tmp.Write("root/ds/a/2.PNG");
  tmp.Write("root/ds/a/3.webp");
  tmp.Symlink("missing.png", "root/ds/a/gone.png");  // listed by torchvision too
  tmp.Write("root/ds/a/notes.txt");
  tmp.Write("root/ds/a/scan.pdf");
  tmp.Write("root/ds/a/anim.gif");  // not in IMG_EXTENSIONS
  tmp.Write("root/ds/a/noext");
  tmp.Write("root/ds/a/x.png/inside.bmp");  // a directory named x.png: walked
  tmp.Write("root/ds/b/x.tiff");  // b: no JPEG at all
  tmp.Write("root/ds/b/y.bmp");
  tmp.Write("root/ds/b/z.Tif");
  tmp.Write("root/ds/b/w.ppm");
  tmp.Write("root/ds/b/v.pgm");
  tmp.Write("root/ds/c/z.jpeg");
  auto root = OpenRoot(tmp / "root");
  IndexOptions ignored;  // accepted, no effect
  ignored.skip_unsupported_formats = true;
  for (const IndexOptions& o : {IndexOptions(), ignored}) {
    auto d = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, o);
    REQUIRE(d.ok());
    CHECK((*d)->class_names() == std::vector<std::string>{"a", "b", "c"});
    CHECK(Entries(**d) == std::vector<Entry>{{"ds/a/1.jpg", 0},
                                             {"ds/a/2.PNG", 0},
                                             {"ds/a/3.webp", 0},
                                             {"ds/a/gone.png", 0},
                                             {"ds/a/x.png/inside.bmp", 0},
                                             {"ds/b/v.pgm", 1},
                                             {"ds/b/w.ppm", 1},
                                             {"ds/b/x.tiff", 1},
                                             {"ds/b/y.bmp", 1},
                                             {"ds/b/z.Tif", 1},
                                             {"ds/c/z.jpeg", 2}});
  }
}

// Folder mtimes 10 s in the past: an index of a tree changed within the last
// 2 s is not cached.
void AgeFolders(const std::string& dir) {
  const auto past = std::filesystem::file_time_type::clock::now() - std::chrono::seconds(10);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_directory() && !e.is_symlink()) std::filesystem::last_write_time(e.path(), past);
  }
  std::filesystem::last_write_time(dir, past);
}

TEST_CASE("ImageFolder: extensions list files as DatasetFolder(extensions=...) does",
          "[dataset][image_folder]") {
  // torchvision 0.14's make_dataset(root, classes, extensions=("avi", "mp4"))
  // on this tree (without class c) lists exactly these, in this order; with
  // c it raises "Found no valid file for the classes c".
  TempDir tmp;
  tmp.Write("root/ds/a/clip1.mp4");
  tmp.Write("root/ds/a/clip2.AVI");
  tmp.Write("root/ds/a/photo.jpg");
  tmp.Write("root/ds/a/movie.webm");
  tmp.Write("root/ds/a/xavi");  // ends with "avi": torchvision lists it too
  tmp.Write("root/ds/a/notes.txt");
  tmp.Write("root/ds/b/sub/c.mp4");
  tmp.Write("root/ds/b/d.avi");
  tmp.Write("root/ds/c/only.jpg");
  AgeFolders(tmp / "root");
  auto root = OpenRoot(tmp / "root");
  IndexOptions videos;
  videos.extensions = {"avi", "mp4"};
  videos.cache_dir = tmp / "cache";
  auto refused = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, videos);
  CHECK(absl::IsFailedPrecondition(refused.status()));
  CHECK(Mentions(refused.status(), "no valid file for the classes c"));
  CHECK(Mentions(refused.status(), "its extensions are avi mp4"));
  videos.allow_empty = true;
  auto d = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, videos);
  REQUIRE(d.ok());
  const std::vector<Entry> listed = {{"ds/a/clip1.mp4", 0},
                                     {"ds/a/clip2.AVI", 0},
                                     {"ds/a/xavi", 0},
                                     {"ds/b/d.avi", 1},
                                     {"ds/b/sub/c.mp4", 1}};
  CHECK(Entries(**d) == listed);
  // The same folder's image index is another dataset, in the cache too.
  IndexOptions images;
  images.cache_dir = videos.cache_dir;
  images.allow_empty = true;
  auto pictures = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, images);
  REQUIRE(pictures.ok());
  CHECK(!(*pictures)->from_cache());
  CHECK(Entries(**pictures) ==
        std::vector<Entry>{{"ds/a/photo.jpg", 0}, {"ds/c/only.jpg", 2}});
  auto cached = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, videos);
  REQUIRE(cached.ok());
  CHECK((*cached)->from_cache());
  CHECK(Entries(**cached) == listed);
  CHECK(videos.identity() != images.identity());
}

TEST_CASE("Index cache: indexes made with other options are kept apart", "[dataset][cache]") {
  TempDir tmp;
  tmp.Write("root/ds/a/1.jpg");
  tmp.Write("root/ds/a/2.png");
  tmp.Write("root/ds/b/3.jpg");
  tmp.MakeDir("root/ds/c");  // empty: a class only with allow_empty
  tmp.Write("raw/4.jpg");
  tmp.Symlink("../../../raw/4.jpg", "root/ds/b/link.jpg");  // a listed path of its own
  tmp.Symlink(tmp / "raw/4.jpg", "root/ds/b/out.jpg");
  AgeFolders(tmp / "root");
  auto root = OpenRoot(tmp / "root");
  IndexOptions lenient;
  lenient.cache_dir = tmp / "cache";
  lenient.allow_empty = true;
  IndexOptions strict;
  strict.cache_dir = lenient.cache_dir;

  auto first = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, lenient);
  REQUIRE(first.ok());
  CHECK(!(*first)->from_cache());
  // The same folder without the opt-in must not get the index cached with it.
  auto refused = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, strict);
  CHECK(absl::IsFailedPrecondition(refused.status()));
  CHECK(Mentions(refused.status(), "no valid file for the classes c"));
  auto again = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder, lenient);
  REQUIRE(again.ok());
  CHECK((*again)->from_cache());
  CHECK(Entries(**again) == Entries(**first));
  CHECK(Listed(**again) == Listed(**first));
  CHECK((*again)->class_names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(Listed(**again) ==
        std::vector<std::string>{"a/1.jpg", "a/2.png", "b/3.jpg", "b/link.jpg", "b/out.jpg"});
  CHECK(Entries(**again) == std::vector<Entry>{{"ds/a/1.jpg", 0},
                                               {"ds/a/2.png", 0},
                                               {"ds/b/3.jpg", 1},
                                               {"ds/b/link.jpg", 1},  // leaves the root
                                               {"ds/b/out.jpg", 1}});
}

TEST_CASE("ImageFolder: a folder leading outside the root fails the request",
          "[dataset][image_folder]") {
  TempDir tmp;
  tmp.Write("outside/secret.jpg");
  tmp.Write("outside/dir/x.jpg");
  tmp.Write("root/ds/cls/ok.jpg");
  auto root = OpenRoot(tmp / "root");
  // The fix for both ways of running the daemon.
  auto hints = [](const absl::Status& s) {
    return Mentions(s, "--data-root") && Mentions(s, "Loader(data_root=...)");
  };

  SECTION("a directory symlink inside a class") {
    tmp.Symlink(tmp / "outside/dir", "root/ds/cls/sub");
    auto s = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder).status();
    CHECK(absl::IsPermissionDenied(s));
    CHECK(Mentions(s, "ds/cls/sub"));
    CHECK(hints(s));
  }
  SECTION("a class folder symlink") {
    tmp.Symlink(tmp / "outside/dir", "root/ds/other");
    auto s = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder).status();
    CHECK(absl::IsPermissionDenied(s));
    INFO(s.message());
    CHECK(Mentions(s, "'ds/other' leaves the data root"));
    CHECK(hints(s));
  }
  SECTION("a relative class folder symlink") {
    tmp.Symlink("../../outside/dir", "root/ds/other");
    auto s = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder).status();
    CHECK(absl::IsPermissionDenied(s));
    CHECK(hints(s));
  }
  SECTION("the dataset itself") {
    tmp.Symlink(tmp / "outside", "root/elsewhere");
    for (std::string ds : {std::string("elsewhere"), std::string("../outside"), tmp / "outside"}) {
      CAPTURE(ds);
      auto s = Dataset::Open(*root, ds, DatasetFormat::kAuto).status();
      CHECK(absl::IsPermissionDenied(s));
      CHECK(hints(s));
    }
  }
  SECTION("every sample a link outside (a farm of links into a pool beside the root)") {
    tmp.Write("outside/pool/a.jpg");
    tmp.Write("outside/pool/b.jpg");
    tmp.Symlink(tmp / "outside/pool/a.jpg", "root/farm/x/a.jpg");
    tmp.Symlink("../../../outside/pool/b.jpg", "root/farm/y/b.jpg");
    auto s = Dataset::Open(*root, "farm", DatasetFormat::kImageFolder).status();
    CHECK(absl::IsPermissionDenied(s));
    INFO(s.message());
    CHECK(Mentions(s, "every sample is a symlink leaving the data root, e.g. 'farm/x/a.jpg'"));
    CHECK(hints(s));
  }
  SECTION("but not a link outside that is no image") {
    tmp.Symlink(tmp / "outside/secret.jpg", "root/ds/cls/notes.txt");
    tmp.Symlink(tmp / "outside/secret.jpg", "root/ds/not_a_class");
    auto opened = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder);
    REQUIRE(opened.ok());
    CHECK(Entries(**opened) == std::vector<Entry>{{"ds/cls/ok.jpg", 0}});
  }
}

TEST_CASE("ImageFolder: a file link that dangles or leaves the root is a sample that fails",
          "[dataset][image_folder]") {
  TempDir tmp;
  tmp.Write("outside/secret.jpg", "secret");
  tmp.Write("root/ds/cls/ok.jpg");
  tmp.Symlink(tmp / "outside/secret.jpg", "root/ds/cls/abs.jpg");
  tmp.Symlink("../../../outside/secret.jpg", "root/ds/cls/rel.jpg");
  tmp.Symlink("../../../outside/missing.jpg", "root/ds/cls/rel_missing.jpg");
  tmp.Symlink("/nonexistent/x.jpg", "root/ds/cls/abs_missing.jpg");
  tmp.Symlink("nothing.jpg", "root/ds/cls/dangling.jpg");
  auto root = OpenRoot(tmp / "root");
  auto opened = Dataset::Open(*root, "ds", DatasetFormat::kImageFolder);
  REQUIRE(opened.ok());
  REQUIRE((*opened)->warnings().size() == 1);
  CHECK((*opened)->warnings()[0].find("4 files are symlinks leaving the data root") == 0);
  // Listed as torchvision lists them, by the links' own paths.
  CHECK(Entries(**opened) == std::vector<Entry>{{"ds/cls/abs.jpg", 0},
                                                {"ds/cls/abs_missing.jpg", 0},
                                                {"ds/cls/dangling.jpg", 0},
                                                {"ds/cls/ok.jpg", 0},
                                                {"ds/cls/rel.jpg", 0},
                                                {"ds/cls/rel_missing.jpg", 0}});
  CHECK(Listed(**opened) == std::vector<std::string>{"cls/abs.jpg", "cls/abs_missing.jpg",
                                                     "cls/dangling.jpg", "cls/ok.jpg",
                                                     "cls/rel.jpg", "cls/rel_missing.jpg"});
  // What a worker gets: a refusal that says why, never the file outside.
  for (const char* escaping :
       {"ds/cls/abs.jpg", "ds/cls/rel.jpg", "ds/cls/rel_missing.jpg", "ds/cls/abs_missing.jpg"}) {
    CAPTURE(escaping);
    auto fd = OpenBeneath(root->fd(), escaping);
    CHECK(absl::IsPermissionDenied(fd.status()));
    CHECK(Mentions(fd.status(), "leaves the data root"));
  }
  auto dangling = OpenBeneath(root->fd(), "ds/cls/dangling.jpg");
  CHECK(absl::IsNotFound(dangling.status()));
  CHECK(Mentions(dangling.status(), "dangling symlink"));
  auto missing = OpenBeneath(root->fd(), "ds/cls/missing.jpg");
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(!Mentions(missing.status(), "dangling"));
}

TEST_CASE("Dataset::Open: errors for paths and formats", "[dataset]") {
  TempDir tmp;
  tmp.Write("root/empty/cls/readme.txt");
  tmp.Write("root/list.txt", "a.jpg\t0\n");
  tmp.Write("outside/list.txt", "a.jpg\t0\n");
  auto root = OpenRoot(tmp / "root");
  CHECK(absl::IsFailedPrecondition(Dataset::Open(*root, "empty", DatasetFormat::kAuto).status()));
  CHECK(absl::IsNotFound(Dataset::Open(*root, "missing", DatasetFormat::kAuto).status()));
  CHECK(absl::IsPermissionDenied(
      Dataset::Open(*root, "../outside/list.txt", DatasetFormat::kAuto).status()));
  CHECK(absl::IsPermissionDenied(Dataset::Open(*root, "/etc", DatasetFormat::kAuto).status()));
  CHECK(absl::IsInvalidArgument(
      Dataset::Open(*root, "list.txt", DatasetFormat::kImageFolder).status()));
  CHECK(absl::IsInvalidArgument(Dataset::Open(*root, "empty", DatasetFormat::kManifest).status()));
  CHECK(absl::IsInvalidArgument(
      Dataset::Open(*root, "list.txt", static_cast<DatasetFormat>(99)).status()));
}

TEST_CASE("Manifest: entries, comments, CRLF, labels", "[dataset][manifest]") {
  TempDir tmp;
  auto root = OpenRoot(tmp.path());
  tmp.Write("m/list.txt",
            "# a comment\r\n"
            "\r\n"
            "img/a.jpg\t0\r\n"
            "   \n"
            "./img/b.jpg\t-3\n"
            "../top.jpg\t9223372036854775807\n"
            "sub/../img/c.jpg\t-9223372036854775808\n"
            "  # an indented comment\n"
            "with space.jpg\t 7\n"
            "tab\tin name.jpg\t4\n" +
                tmp.path() + "/abs/x.jpg\t1");  // no final newline
  auto opened = Dataset::Open(*root, "m/list.txt", DatasetFormat::kManifest);
  REQUIRE(opened.ok());
  const Dataset& d = **opened;
  CHECK(d.name() == "m/list.txt");
  CHECK(d.class_names().empty());
  // Nothing listed exists: manifest entries are not stat'ed.
  CHECK(Entries(d) == std::vector<Entry>{
                          {"m/img/a.jpg", 0},
                          {"m/img/b.jpg", -3},
                          {"top.jpg", std::numeric_limits<int64_t>::max()},
                          {"m/img/c.jpg", std::numeric_limits<int64_t>::min()},
                          {"m/with space.jpg", 7},
                          {"m/tab\tin name.jpg", 4},
                          {"abs/x.jpg", 1},
                      });
  auto automatic = Dataset::Open(*root, "m/list.txt", DatasetFormat::kAuto);
  REQUIRE(automatic.ok());
  CHECK((*automatic)->size() == d.size());
}

TEST_CASE("Manifest: malformed lines name their line", "[dataset][manifest]") {
  TempDir tmp;
  tmp.MakeDir("root");
  auto root = OpenRoot(tmp / "root");
  struct Case {
    std::string contents;
    absl::StatusCode code;
    std::string where;
  };
  const std::vector<Case> cases = {
      {"a.jpg\t1\nno tab here\n", absl::StatusCode::kInvalidArgument, "line 2:"},
      {"# c\n\r\na.jpg\tx\n", absl::StatusCode::kInvalidArgument, "line 3:"},
      {"a.jpg\t99999999999999999999\n", absl::StatusCode::kInvalidArgument, "line 1:"},
      {"a.jpg\t\n", absl::StatusCode::kInvalidArgument, "line 1:"},
      {"a.jpg\t1.5\n", absl::StatusCode::kInvalidArgument, "line 1:"},
      {"\t5\n", absl::StatusCode::kInvalidArgument, "line 1:"},
      {"a.jpg\t1\r\n../../x.jpg\t2\r\n", absl::StatusCode::kPermissionDenied, "line 2:"},
      {"ok.jpg\t1\n/etc/passwd\t1\n", absl::StatusCode::kPermissionDenied, "line 2:"},
      {std::string(70000, 'a') + "\t1\n", absl::StatusCode::kInvalidArgument, "line 1:"},
      {"# only\n\n# comments\n", absl::StatusCode::kFailedPrecondition, ""},
      {"", absl::StatusCode::kFailedPrecondition, ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "root/m/bad" + std::to_string(i) + ".txt";
    tmp.Write(name, cases[i].contents);
    auto s = Dataset::Open(*root, name.substr(5), DatasetFormat::kManifest).status();
    INFO("case " << i << ": " << s.ToString());
    CHECK(s.code() == cases[i].code);
    CHECK(Mentions(s, cases[i].where));
    if (!cases[i].where.empty()) CHECK(Mentions(s, "manifest m/bad" + std::to_string(i)));
  }
}

TEST_CASE("Manifest: #columns declares image, label and mask columns, masks survive the cache",
          "[dataset][manifest][cache]") {
  TempDir tmp;
  tmp.Write("root/seg/list.txt",
            "#columns: image\tmask\n"
            "# VOC-style: an image and its class map, no label\n"
            "img/a.jpg\tmasks/a.png\n"
            "img/b.jpg\t../seg2/b.png\n");
  tmp.Write("root/seg/labelled.txt",
            "#columns: mask label image\n"
            "m/1.png\t3\ti/1.jpg\n");
  tmp.Write("root/seg/plain.txt", "img/a.jpg\t0\n");
  AgeFolders(tmp / "root");
  // A manifest written within the last 2 s is not cached either.
  std::filesystem::last_write_time(
      tmp / "root/seg/list.txt",
      std::filesystem::file_time_type::clock::now() - std::chrono::seconds(10));
  auto root = OpenRoot(tmp / "root");
  IndexOptions cached;
  cached.cache_dir = tmp / "cache";
  for (int pass = 0; pass < 2; ++pass) {
    auto opened = Dataset::Open(*root, "seg/list.txt", DatasetFormat::kManifest, cached);
    REQUIRE(opened.ok());
    const Dataset& d = **opened;
    CHECK(d.from_cache() == (pass == 1));
    CHECK(Entries(d) == std::vector<Entry>{{"seg/img/a.jpg", -1}, {"seg/img/b.jpg", -1}});
    REQUIRE(d.has_masks());
    CHECK(d.mask_path(0) == "seg/masks/a.png");
    CHECK(d.mask_path(1) == "seg2/b.png");
  }
  auto labelled = Dataset::Open(*root, "seg/labelled.txt", DatasetFormat::kManifest);
  REQUIRE(labelled.ok());
  CHECK(Entries(**labelled) == std::vector<Entry>{{"seg/i/1.jpg", 3}});
  CHECK((*labelled)->mask_path(0) == "seg/m/1.png");
  auto plain = Dataset::Open(*root, "seg/plain.txt", DatasetFormat::kManifest);
  REQUIRE(plain.ok());
  CHECK(!(*plain)->has_masks());
  CHECK((*plain)->mask_path(0).empty());

  struct Case {
    std::string contents;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"#columns: image mask\na.jpg\n", absl::StatusCode::kInvalidArgument,
       "line 2: expected 2 tab-separated fields"},
      {"#columns: image mask\na.jpg\tm.png\textra\n", absl::StatusCode::kInvalidArgument,
       "expected 2"},
      {"#columns: label mask\n1\tm.png\n", absl::StatusCode::kInvalidArgument,
       "needs an image column"},
      {"#columns: image image\n", absl::StatusCode::kInvalidArgument, "given twice"},
      {"#columns: image depth\n", absl::StatusCode::kInvalidArgument, "'depth' is not one of"},
      {"#columns: image mask\na.jpg\t\n", absl::StatusCode::kInvalidArgument, "empty mask path"},
      {"#columns: image mask\na.jpg\t../../../m.png\n", absl::StatusCode::kPermissionDenied,
       "leaves the data root"},
      {"#columns: image label\na.jpg\tx\n", absl::StatusCode::kInvalidArgument,
       "label 'x'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "seg/bad" + std::to_string(i) + ".txt";
    tmp.Write("root/" + name, cases[i].contents);
    auto st = Dataset::Open(*root, name, DatasetFormat::kManifest).status();
    INFO("case " << i << ": " << st.ToString());
    CHECK(st.code() == cases[i].code);
    CHECK(Mentions(st, cases[i].says));
  }
}

TEST_CASE("Volume sets: a Decathlon dataset.json and a manifest whose label column is a file",
          "[dataset][manifest][decathlon]") {
  TempDir tmp;
  tmp.Write("root/Task09_Spleen/dataset.json", R"({
    "name": "Spleen", "labels": {"0": "background", "1": "spleen"},
    "training": [{"image": "./imagesTr/spleen_2.nii.gz", "label": "./labelsTr/spleen_2.nii.gz"},
                 {"image": "imagesTr/spleen_3.nii.gz", "label": "labelsTr/spleen_3.nii.gz"}],
    "test": ["./imagesTs/spleen_1.nii.gz"]})");
  tmp.Write("root/vols/list.txt",
            "#columns: image label\n"
            "ct/a.nii.gz\tseg/a.nii.gz\n");
  auto root = OpenRoot(tmp / "root");
  for (DatasetFormat f : {DatasetFormat::kDecathlon, DatasetFormat::kAuto}) {
    auto d = Dataset::Open(*root, "Task09_Spleen/dataset.json", f);
    REQUIRE(d.ok());
    CHECK((*d)->format() == DatasetFormat::kDecathlon);
    CHECK(Entries(**d) == std::vector<Entry>{{"Task09_Spleen/imagesTr/spleen_2.nii.gz", -1},
                                             {"Task09_Spleen/imagesTr/spleen_3.nii.gz", -1}});
    CHECK((*d)->mask_path(1) == "Task09_Spleen/labelsTr/spleen_3.nii.gz");
    CHECK((*d)->class_names() == std::vector<std::string>{"background", "spleen"});
  }
  // BraTS as MONAI's tutorials list it: an image's modalities, a file each.
  tmp.Write("root/brats/dataset.json", R"({"training": [
      {"image": ["./a/t1.nii.gz", "./a/t1ce.nii.gz", "./a/t2.nii.gz", "./a/flair.nii.gz"],
       "label": "./a/seg.nii.gz"}]})");
  auto brats = Dataset::Open(*root, "brats/dataset.json", DatasetFormat::kAuto);
  REQUIRE(brats.ok());
  CHECK((*brats)->path(0) == std::string("brats/a/t1.nii.gz\0brats/a/t1ce.nii.gz\0"
                                         "brats/a/t2.nii.gz\0brats/a/flair.nii.gz", 76));
  CHECK((*brats)->display(0) ==
        "brats/a/t1.nii.gz, brats/a/t1ce.nii.gz, brats/a/t2.nii.gz, brats/a/flair.nii.gz");
  CHECK((*brats)->mask_path(0) == "brats/a/seg.nii.gz");

  IndexOptions volumes;
  volumes.label_files = true;

  // A folder of volumes, and with masks its labels' folder (same names).
  for (const char* f : {"imagesTr/b.nii.gz", "imagesTr/a.nii.gz", "imagesTr/sub/c.npy",
                        "imagesTr/notes.txt", "imagesTr/d.h5", "labelsTr/a.nii.gz",
                        "labelsTr/sub/c.npy", "labelsTr/d.h5"}) {
    tmp.Write(std::string("root/vf/") + f);
  }
  auto folder = Dataset::Open(*root, "vf/imagesTr", DatasetFormat::kAuto, volumes);
  REQUIRE(folder.ok());
  CHECK((*folder)->format() == DatasetFormat::kVolumeFolder);
  CHECK(Entries(**folder) == std::vector<Entry>{{"vf/imagesTr/a.nii.gz", -1},
                                                {"vf/imagesTr/b.nii.gz", -1},
                                                {"vf/imagesTr/d.h5", -1},
                                                {"vf/imagesTr/sub/c.npy", -1}});
  CHECK(!(*folder)->has_masks());
  IndexOptions with_labels = volumes;
  with_labels.masks = "vf/labelsTr";
  auto paired = Dataset::Open(*root, "vf/imagesTr", DatasetFormat::kAuto, with_labels);
  REQUIRE(paired.ok());
  CHECK((*paired)->format() == DatasetFormat::kVolumeFolder);
  REQUIRE((*paired)->size() == 3);  // b has no label: left out
  CHECK((*paired)->mask_path(0) == "vf/labelsTr/a.nii.gz");
  CHECK((*paired)->mask_path(2) == "vf/labelsTr/sub/c.npy");
  CHECK((*paired)->warnings().size() == 1);
  CHECK(Mentions(Dataset::Open(*root, "vf/labelsTr/sub", DatasetFormat::kVolumeFolder,
                               with_labels).status(), "has a label of the same name"));
  // Without a volume session the same folder is an ImageFolder.
  CHECK(Dataset::Open(*root, "vf", DatasetFormat::kAuto).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  auto m = Dataset::Open(*root, "vols/list.txt", DatasetFormat::kManifest, volumes);
  REQUIRE(m.ok());
  CHECK(Entries(**m) == std::vector<Entry>{{"vols/ct/a.nii.gz", -1}});
  CHECK((*m)->mask_path(0) == "vols/seg/a.nii.gz");
  // Without label_files the same column is an integer label.
  CHECK(Mentions(Dataset::Open(*root, "vols/list.txt", DatasetFormat::kManifest).status(),
                 "is not a signed 64-bit integer"));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[]", "not a JSON object"},
      {R"({"training": {}})", "has no \"training\" list"},
      {R"({"training": [{"label": "a.nii"}]})", "training[0] has no \"image\""},
      {R"({"training": [{"image": "a.nii", "label": ["l1.nii", "l2.nii"]}]})",
       "is a list of 2 files: a label is one file"},
      {R"({"training": [{"image": []}]})", "an image's channels are 1 to 16 files"},
      {R"({"training": [{"image": ["a.nii", "../../x.nii"]}]})", "leaves the data root"},
      {R"({"training": [{"image": "../../../x.nii"}]})", "leaves the data root"},
      {R"({"training": []})", "lists no training entry"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string name = "bad" + std::to_string(i) + ".json";
    tmp.Write("root/" + name, bad[i].first);
    auto st = Dataset::Open(*root, name, DatasetFormat::kAuto).status();
    INFO("case " << i << ": " << st.ToString());
    CHECK(!st.ok());
    CHECK(Mentions(st, bad[i].second));
  }
}

TEST_CASE("Manifest: a million entries index quickly and compactly", "[dataset][manifest][large]") {
  TempDir tmp;
  constexpr uint64_t kEntries = 1'000'000;
  std::string contents;
  contents.reserve(kEntries * 32);
  char line[64];
  for (uint64_t i = 0; i < kEntries; ++i) {
    int n = snprintf(line, sizeof(line), "n%08" PRIu64 "/img_%07" PRIu64 ".JPEG\t%" PRIu64 "\n",
                     i / 1300, i, i % 1000);
    contents.append(line, n);
  }
  tmp.Write("train/manifest.tsv", contents);
  contents = std::string();
  auto root = OpenRoot(tmp.path());

  const auto start = std::chrono::steady_clock::now();
  auto opened = Dataset::Open(*root, "train/manifest.tsv", DatasetFormat::kAuto);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(opened.ok());
  const Dataset& d = **opened;
  REQUIRE(d.size() == kEntries);
  CHECK(d.path(0) == "train/n00000000/img_0000000.JPEG");
  CHECK(d.path(kEntries - 1) == "train/n00000769/img_0999999.JPEG");
  CHECK(d.label(kEntries - 1) == 999);

  uint64_t path_bytes = 0;
  for (uint64_t i = 0; i < d.size(); ++i) path_bytes += d.path(i).size();
  const uint64_t overhead = d.memory_bytes() - path_bytes;
  // Timings are reported, not asserted.
  WARN("1,000,000-entry manifest indexed in "
       << seconds * 1000 << " ms; index " << d.memory_bytes() << " bytes = " << path_bytes
       << " path bytes + " << static_cast<double>(overhead) / kEntries << " bytes per entry");
  CHECK(d.memory_bytes() <= 60 * kEntries + path_bytes);
}

}  // namespace
}  // namespace stoker
