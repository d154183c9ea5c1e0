// ReadPrivateFile and WritePrivateFile (private_file.h) on a real folder.

#include "common/private_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace stoker {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "stoker-private-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST_CASE("a private file written is read back, owner-only, its folder made 0700",
          "[private_file]") {
  TempDir t;
  const std::string path = (t.path / "cache" / "calibration.txt").string();
  REQUIRE(WritePrivateFile(path, "1/8 0.5\n").ok());
  std::string text;
  REQUIRE(ReadPrivateFile(path, &text));
  CHECK(text == "1/8 0.5\n");
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat((t.path / "cache").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // Replaced whole; no temporary left beside it.
  REQUIRE(WritePrivateFile(path, "new").ok());
  REQUIRE(ReadPrivateFile(path, &text));
  CHECK(text == "new");
  CHECK(std::distance(fs::directory_iterator(t.path / "cache"), fs::directory_iterator()) == 1);
}

TEST_CASE("what another could have written is not read", "[private_file]") {
  TempDir t;
  const fs::path file = t.path / "f";
  std::ofstream(file) << "x";
  std::string text;
  ::chmod(file.c_str(), 0622);  // group- and other-writable
  CHECK_FALSE(ReadPrivateFile(file.string(), &text));
  ::chmod(file.c_str(), 0600);
  CHECK(ReadPrivateFile(file.string(), &text));
  const fs::path link = t.path / "link";
  fs::create_symlink(file, link);
  CHECK_FALSE(ReadPrivateFile(link.string(), &text));  // a symlink
  CHECK_FALSE(ReadPrivateFile(t.path.string(), &text));  // a folder
  CHECK_FALSE(ReadPrivateFile((t.path / "absent").string(), &text));
  {
    std::ofstream big(t.path / "big");
    big << std::string((1 << 20) + 1, 'a');
  }
  ::chmod((t.path / "big").c_str(), 0600);
  CHECK_FALSE(ReadPrivateFile((t.path / "big").string(), &text));  // over 1 MiB
}

TEST_CASE("a write into a folder that cannot be made fails with the path", "[private_file]") {
  TempDir t;
  const fs::path blocker = t.path / "file";
  std::ofstream(blocker) << "x";
  const absl::Status st = WritePrivateFile((blocker / "sub" / "c.txt").string(), "y");
  CHECK_FALSE(st.ok());
  CHECK(std::string(st.message()).find("file/sub") != std::string::npos);
}

}  // namespace
}  // namespace stoker
