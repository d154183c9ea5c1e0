#include "common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/posix.h"

namespace stoker {

bool ReadPrivateFile(const std::string& path, std::string* text) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return false;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 022) != 0 || st.st_size > (1 << 20)) {
    return false;
  }
  text->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < text->size()) {
    const ssize_t n = ::read(fd.get(), text->data() + done, text->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

absl::Status WritePrivateFile(const std::string& path, const std::string& text) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return PosixError("mkdir " + dir, errno);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return PosixError("create " + tmp, errno);
  bool ok = WriteAll(fd.get(), text.data(), text.size());
  ok = ::close(fd.Release()) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return PosixError("write " + path, err);
  }
  return absl::OkStatus();
}

}  // namespace stoker
