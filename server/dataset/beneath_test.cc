// DataRoot::Resolve, OpenBeneath (openat2 and its fallback) and the path
// helpers under them.

#include "server/dataset/beneath.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "server/dataset/dataset.h"
#include "testing/dataset_test_util.h"
#include "common/posix.h"

namespace stoker {
namespace {

using dataset_internal::AppendNormalized;
using dataset_internal::OpenBeneathImpl;
using dataset_internal::OpenKind;
using dataset_internal::SplitPath;
using dataset_internal::StripRootPrefix;
using testing::TempDir;

TEST_CASE("SplitPath drops empty and dot components", "[dataset][beneath]") {
  CHECK(SplitPath("").empty());
  CHECK(SplitPath("/").empty());
  CHECK(SplitPath("/a//./b/") == std::vector<std::string_view>{"a", "b"});
  CHECK(SplitPath("../a/..") == std::vector<std::string_view>{"..", "a", ".."});
}

TEST_CASE("AppendNormalized applies dot-dot lexically and refuses escapes", "[dataset][beneath]") {
  std::string out = "keep|";
  REQUIRE(AppendNormalized("a", "b/../c/./d", &out).ok());
  CHECK(out == "keep|a/c/d");

  out = "keep|";
  REQUIRE(AppendNormalized("a/b", "../../x", &out).ok());
  CHECK(out == "keep|x");

  out = "keep|";
  REQUIRE(AppendNormalized("", "x/..", &out).ok());
  CHECK(out == "keep|");

  out = "keep|";
  absl::Status s = AppendNormalized("a", "../../x", &out);
  CHECK(absl::IsPermissionDenied(s));
  CHECK(out == "keep|");
  CHECK(absl::IsPermissionDenied(AppendNormalized("", "..", &out)));
  CHECK(out == "keep|");
}

TEST_CASE("StripRootPrefix compares whole components", "[dataset][beneath]") {
  CHECK(StripRootPrefix("/r/x", "/r/x/a/b") == "a/b");
  CHECK(StripRootPrefix("/r/x", "/r/x") == "");
  CHECK(StripRootPrefix("/r/x", "//r/./x/a/") == "a");
  CHECK(StripRootPrefix("/r/x", "/r/x/../y") == "../y");
  CHECK_FALSE(StripRootPrefix("/r/x", "/r/xy").has_value());
  CHECK_FALSE(StripRootPrefix("/r/x", "/r").has_value());
  CHECK_FALSE(StripRootPrefix("/r/x", "r/x/a").has_value());
  CHECK(StripRootPrefix("/", "/a/b") == "a/b");
}

// tmp/root is the data root; tmp/outside holds what must stay out of reach.
struct Tree {
  TempDir tmp;
  std::unique_ptr<DataRoot> root;

  Tree() {
    tmp.Write("outside/secret.txt", "secret");
    tmp.Write("root/ds/B/img1.jpeg", "jpeg bytes");
    tmp.Write("root/top.txt", "top");
    tmp.Symlink(tmp / "outside", "root/out_dir");           // absolute, outside
    tmp.Symlink("../outside/secret.txt", "root/out_file");  // relative, outside
    tmp.Symlink("ds/B", "root/alias");                      // relative, inside
    tmp.Symlink(tmp / "root/ds", "root/abs_alias");         // absolute, inside
    tmp.Symlink("../../top.txt", "root/ds/B/up.txt");       // inside via ..
    tmp.Symlink("loop2", "root/loop1");
    tmp.Symlink("loop1", "root/loop2");
    tmp.Symlink(tmp / "root", "root_alias");  // an alias of the root
    REQUIRE(mkfifo((tmp / "root/ds/fifo.jpg").c_str(), 0600) == 0);
    auto opened = DataRoot::Open(tmp / "root");
    REQUIRE(opened.ok());
    root = std::move(*opened);
  }
};

TEST_CASE("DataRoot::Open canonicalizes and checks the directory", "[dataset][beneath]") {
  Tree t;
  CHECK(t.root->path() == t.tmp / "root");
  auto via_alias = DataRoot::Open(t.tmp / "root_alias/.");
  REQUIRE(via_alias.ok());
  CHECK((*via_alias)->path() == t.tmp / "root");
  CHECK(absl::IsNotFound(DataRoot::Open(t.tmp / "missing").status()));
  CHECK(absl::IsInvalidArgument(DataRoot::Open(t.tmp / "root/top.txt").status()));
  CHECK(absl::IsInvalidArgument(DataRoot::Open("").status()));
}

TEST_CASE("DataRoot::Resolve gives canonical paths inside the root", "[dataset][beneath]") {
  Tree t;
  auto resolve = [&](const std::string& p) { return t.root->Resolve(p); };
  CHECK(*resolve(".") == "");
  CHECK(*resolve("ds/B") == "ds/B");
  CHECK(*resolve("ds/../ds/./B/") == "ds/B");
  CHECK(*resolve("alias") == "ds/B");
  CHECK(*resolve("alias/img1.jpeg") == "ds/B/img1.jpeg");
  CHECK(*resolve("abs_alias/B") == "ds/B");
  CHECK(*resolve("ds/B/up.txt") == "top.txt");
  // Absolute paths inside the root, also through an alias of it.
  CHECK(*resolve(t.tmp / "root/ds") == "ds");
  CHECK(*resolve(t.tmp / "root") == "");
  CHECK(*resolve(t.tmp / "root_alias/ds/B") == "ds/B");
}

TEST_CASE("DataRoot::Resolve refuses escapes and reports missing paths", "[dataset][beneath]") {
  Tree t;
  auto code = [&](const std::string& p) { return t.root->Resolve(p).status().code(); };
  CHECK(code("../x") == absl::StatusCode::kPermissionDenied);
  CHECK(code("..") == absl::StatusCode::kPermissionDenied);
  CHECK(code("ds/../../root") == absl::StatusCode::kPermissionDenied);
  CHECK(code("/etc") == absl::StatusCode::kPermissionDenied);
  CHECK(code("/etc/does-not-exist") == absl::StatusCode::kPermissionDenied);
  CHECK(code(t.tmp / "root/../outside") == absl::StatusCode::kPermissionDenied);
  CHECK(code("out_dir") == absl::StatusCode::kPermissionDenied);
  CHECK(code("out_dir/secret.txt") == absl::StatusCode::kPermissionDenied);
  CHECK(code("out_file") == absl::StatusCode::kPermissionDenied);
  CHECK(code("missing") == absl::StatusCode::kNotFound);
  CHECK(code("ds/missing/deeper") == absl::StatusCode::kNotFound);
  CHECK(code("top.txt/below") == absl::StatusCode::kNotFound);
  CHECK(code("") == absl::StatusCode::kInvalidArgument);
  CHECK(code("loop1") == absl::StatusCode::kFailedPrecondition);  // not an escape
  // The message names what the client asked for.
  CHECK(std::string(t.root->Resolve("out_dir/secret.txt").status().message())
            .find("out_dir/secret.txt") != std::string::npos);
}

std::string ReadAll(int fd) {
  std::string data(64, '\0');
  ssize_t n = read(fd, data.data(), data.size());
  data.resize(n < 0 ? 0 : n);
  return data;
}

TEST_CASE("OpenBeneath opens files beneath the root and nothing else", "[dataset][beneath]") {
  Tree t;
  const bool use_openat2 = GENERATE(true, false);
  INFO("use_openat2 = " << use_openat2);
  auto open = [&](const std::string& p) {
    return OpenBeneathImpl(t.root->fd(), p, OpenKind::kRegularFile, use_openat2);
  };

  auto fd = open("ds/B/img1.jpeg");
  REQUIRE(fd.ok());
  UniqueFd owned(*fd);
  CHECK(ReadAll(owned.get()) == "jpeg bytes");
  CHECK((fcntl(owned.get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((fcntl(owned.get(), F_GETFL) & O_NONBLOCK) == 0);

  auto dotted = open("ds/B/../B/./img1.jpeg");
  REQUIRE(dotted.ok());
  close(*dotted);

  CHECK(absl::IsPermissionDenied(open("../outside/secret.txt").status()));
  CHECK(absl::IsPermissionDenied(open("ds/../../outside/secret.txt").status()));
  CHECK(absl::IsPermissionDenied(open("out_file").status()));
  CHECK(absl::IsPermissionDenied(open("out_dir/secret.txt").status()));
  CHECK(absl::IsPermissionDenied(open(t.tmp / "root/top.txt").status()));
  CHECK(absl::IsNotFound(open("missing.jpg").status()));
  CHECK(absl::IsFailedPrecondition(open("ds").status()));
  CHECK(absl::IsFailedPrecondition(open("ds/fifo.jpg").status()));  // and did not block
  CHECK(
      std::string(open("../outside/secret.txt").status().message()).find("../outside/secret.txt") !=
      std::string::npos);

  // A relative symlink that stays inside: followed by openat2, refused by the
  // fallback (which follows no symlink at all).
  auto inside_link = open("alias/img1.jpeg");
  CHECK(inside_link.ok() == use_openat2);
  if (inside_link.ok()) close(*inside_link);
  if (!use_openat2) CHECK(absl::IsPermissionDenied(inside_link.status()));
}

TEST_CASE("OpenBeneath, the public entry point, uses the kernel's confinement",
          "[dataset][beneath]") {
  Tree t;
  auto fd = OpenBeneath(t.root->fd(), "ds/B/img1.jpeg");
  REQUIRE(fd.ok());
  close(*fd);
  CHECK(absl::IsPermissionDenied(OpenBeneath(t.root->fd(), "../outside/secret.txt").status()));
  CHECK(absl::IsPermissionDenied(OpenBeneath(t.root->fd(), "out_file").status()));
}

}  // namespace
}  // namespace stoker
