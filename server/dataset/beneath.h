// Internal to server/dataset: path arithmetic and symlink resolution confined
// to the data root. DataRoot, OpenBeneath and the dataset indexers build on
// these; nothing outside server/dataset should include this header.
//
// Vocabulary: a "relative path" is relative to the data root and uses '/'
// separators; a "canonical" one has no "", "." or ".." components and no
// symlinks (at the time it was resolved); "" names the root itself.

#ifndef STOKER_SERVER_DATASET_BENEATH_H_
#define STOKER_SERVER_DATASET_BENEATH_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker {

class DataRoot;

namespace dataset_internal {

// Components of `path` without the empty and "." ones; ".." is kept.
// "/a//./b/" -> {"a", "b"}.
std::vector<std::string_view> SplitPath(std::string_view path);

// "a" + "b" -> "a/b"; either side may be "" (the root).
std::string JoinPath(std::string_view a, std::string_view b);

// Appends the lexical canonical form of `base`/`path` to `*out`, where `base`
// is canonical and `path` is relative (its "." and ".." are applied without
// looking at the file system). PERMISSION_DENIED, with `*out` unchanged, when
// a ".." climbs above the root.
absl::Status AppendNormalized(std::string_view base, std::string_view path, std::string* out);

// When the absolute `path` names something beneath `root_path` (a canonical
// absolute directory) lexically, the rest of it after the root, which may
// still hold ".." components and symlinks; nullopt otherwise.
std::optional<std::string> StripRootPrefix(std::string_view root_path, std::string_view path);

struct ResolvedPath {
  std::string path;     // canonical, relative to the root
  bool exists = false;  // false only with allow_missing
  bool is_dir = false;
};

// Resolves `path` (relative; interpreted from the canonical directory `base`)
// as realpath(3) would, following symlinks, but confined to `root`: a ".."
// above the root or a symlink whose target leaves it gives PERMISSION_DENIED
// naming `display` (what the caller calls this path). An absolute symlink
// target is accepted when it lies beneath the root, also when it reaches it
// through a symlink outside (an alias of the root's path).
// Missing components: NOT_FOUND, or with `allow_missing` the rest of the path
// is applied lexically and the result has exists = false (what a dangling
// symlink would name). More than 40 symlinks: FAILED_PRECONDITION.
// PERMISSION_DENIED from here means an escape, or EACCES on the way.
absl::StatusOr<ResolvedPath> ResolveBeneath(const DataRoot& root, std::string_view base,
                                            std::string_view path, std::string_view display,
                                            bool allow_missing);

// Resolves a path named by a client: relative to the root, or absolute and
// beneath it. See DataRoot::Resolve.
absl::StatusOr<ResolvedPath> ResolveUserPath(const DataRoot& root, std::string_view user_path);

enum class OpenKind { kRegularFile, kDirectory };

// OpenBeneath's implementation: opens `relative_path` beneath `root_fd`
// read-only, close-on-exec, checking that it is of `kind`. With `use_openat2`
// false it takes the fallback path (no openat2): components are opened one
// by one with O_NOFOLLOW, so any symlink is refused (PERMISSION_DENIED).
absl::StatusOr<int> OpenBeneathImpl(int root_fd, std::string_view relative_path, OpenKind kind,
                                    bool use_openat2);

}  // namespace dataset_internal
}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_BENEATH_H_
