// libFuzzer target: the WebDataset indexer (server/dataset/webdataset.cc),
// which runs in stokerd itself, not in a sandboxed worker: a shard of
// arbitrary bytes must give an index or an error, never a crash, a hang or
// an out-of-bounds read.
//
// Each input is written as data/x.tar under a private temporary data root
// and opened as a WebDataset. The invariants checked for every entry: its
// shard is x.tar, and its member's data starts inside the file (a truncated
// shard may end a member past the end of the file, never start one there).

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/dataset/dataset.h"

namespace {

// The data root: a plain array, so that the exit handler that removes it
// does not depend on the order in which statics are destroyed.
char g_dir[64];
char g_file[80];

void RemoveDir() {
  unlink(g_file);
  rmdir(g_dir);
}

const char* Dir() {
  if (g_dir[0] == '\0') {
    std::snprintf(g_dir, sizeof(g_dir), "/tmp/stoker_fuzz_tar.XXXXXX");
    if (mkdtemp(g_dir) == nullptr) std::abort();
    std::snprintf(g_file, sizeof(g_file), "%s/x.tar", g_dir);
    std::atexit(RemoveDir);
  }
  return g_dir;
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tar_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = Dir();
  FILE* f = std::fopen(g_file, "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  auto root = stoker::DataRoot::Open(dir);
  if (!root.ok()) std::abort();
  auto ds = stoker::Dataset::Open(**root, "x.tar", stoker::DatasetFormat::kWebDataset);
  if (!ds.ok()) return 0;
  const stoker::Dataset& d = **ds;
  for (uint64_t i = 0; i < d.size(); ++i) {
    if (d.path(i) != "x.tar") Fail("an entry names another file");
    if (!d.has_range(i)) Fail("a shard entry without a byte range");
    if (d.range_offset(i) > size) Fail("a member starting past the end of the shard");
    if (d.display(i).empty()) Fail("an entry without a name");
    (void)d.label(i);
  }
  return 0;
}
