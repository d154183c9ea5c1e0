// Helpers for the server/dataset tests: a temporary directory tree that
// removes itself.

#ifndef STOKER_TESTING_DATASET_TEST_UTIL_H_
#define STOKER_TESTING_DATASET_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stoker::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on
// destruction (symlinks removed, never followed).
class TempDir {
 public:
  TempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/stoker_dataset_test.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = std::filesystem::canonical(pattern).string();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(std::string_view rel) const { return path_ + "/" + std::string(rel); }

  // Creates the parent directories as needed.
  void Write(std::string_view rel, std::string_view contents = "x") const {
    std::filesystem::path p = *this / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << contents;
    if (!out) throw std::runtime_error("cannot write " + p.string());
  }
  void MakeDir(std::string_view rel) const { std::filesystem::create_directories(*this / rel); }
  // A symlink at `rel` whose content is `target` verbatim.
  void Symlink(std::string_view target, std::string_view rel) const {
    std::filesystem::path p = *this / rel;
    std::filesystem::create_directories(p.parent_path());
    std::filesystem::create_symlink(std::string(target), p);
  }

 private:
  std::string path_;
};

}  // namespace stoker::testing

#endif  // STOKER_TESTING_DATASET_TEST_UTIL_H_
