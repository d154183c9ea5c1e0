// Small files only this user may have written: the daemon's decode
// calibration in its index cache folder, which it trusts on the next start.
// Thread-safe (no shared state); errors are POSIX errors as Status.

#ifndef STOKER_COMMON_PRIVATE_FILE_H_
#define STOKER_COMMON_PRIVATE_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace stoker {

// The whole of `path` (at most 1 MiB) into `text`: false if it is absent, a
// symlink, not a regular file, someone else's, group- or other-writable, or
// larger.
bool ReadPrivateFile(const std::string& path, std::string* text);

// Writes `text` to a fresh temporary (O_EXCL, O_NOFOLLOW, 0600) in the
// folder of `path`, made 0700 if absent, then renames it into place: a
// reader sees the old file or the new one, never a part.
absl::Status WritePrivateFile(const std::string& path, const std::string& text);

}  // namespace stoker

#endif  // STOKER_COMMON_PRIVATE_FILE_H_
