#include "session_core.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "stoker/ring_layout.h"

namespace stoker::internal {

// The handover (ring_layout.h): the ring's fd for its token, from the ring
// socket beside the daemon's socket.
absl::StatusOr<UniqueFd> ReceiveRing(const std::string& daemon_socket, const std::string& token) {
  const std::string path = daemon_socket + ring::kRingSocketSuffix;
  auto fail = [&](const std::string& what, int err) {
    return absl::UnavailableError(absl::StrCat(
        "cannot get the ring from stokerd's ring socket ", path, ": ", what,
        err != 0 ? absl::StrCat(": ", std::strerror(err)) : std::string(),
        " (the trainer must reach the daemon's socket folder, as a user its socket mode lets "
        "in)"));
  };
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return fail("the path is too long", 0);
  if (token.size() != ring::kRingTokenChars) {
    return absl::DataLossError("the daemon's ring token is not 32 characters");
  }
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid()) return fail("socket", errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return fail("connect", errno);
  }
  if (::send(s.get(), token.data(), token.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(token.size())) {
    return fail("send", errno);
  }
  pollfd p = {s.get(), POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, static_cast<int>(ring::kHandoverTimeoutMs))) < 0 && errno == EINTR) {
  }
  if (ready == 0) return fail(absl::StrCat("no answer within ", ring::kHandoverTimeoutMs, " ms"), 0);
  char reply[512];
  UniqueFd fd;
  const ssize_t n = ReceiveWithFd(s.get(), reply, sizeof(reply), &fd);
  if (n <= 0) return fail("no answer", n < 0 ? errno : 0);
  if (reply[0] == ring::kHandoverOk && fd.valid()) return fd;
  if (reply[0] == ring::kHandoverRefused) {
    return absl::UnavailableError(absl::StrCat("stokerd's ring socket refused the ring: ",
                                               std::string(reply + 1, static_cast<size_t>(n) - 1)));
  }
  return absl::DataLossError("stokerd's ring socket answered out of protocol");
}

v1::DatasetFormat ToProto(DatasetFormat f) {
  switch (f) {
    case DatasetFormat::kAuto:
      return v1::DATASET_FORMAT_AUTO;
    case DatasetFormat::kImageFolder:
      return v1::DATASET_FORMAT_IMAGE_FOLDER;
    case DatasetFormat::kManifest:
      return v1::DATASET_FORMAT_MANIFEST;
    case DatasetFormat::kWebDataset:
      return v1::DATASET_FORMAT_WEBDATASET;
    case DatasetFormat::kCoco:
      return v1::DATASET_FORMAT_COCO;
    case DatasetFormat::kPairedFolders:
      return v1::DATASET_FORMAT_PAIRED_FOLDERS;
    case DatasetFormat::kDecathlon:
      return v1::DATASET_FORMAT_DECATHLON;
    case DatasetFormat::kHdf5:
      return v1::DATASET_FORMAT_HDF5;
    case DatasetFormat::kLmdb:
      return v1::DATASET_FORMAT_LMDB;
    case DatasetFormat::kVolumeFolder:
      return v1::DATASET_FORMAT_VOLUME_FOLDER;
  }
  return static_cast<v1::DatasetFormat>(f);  // out of the enum: the daemon refuses it
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    msg = absl::StrCat("cannot reach stokerd (", msg, ")");
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", msg));
}

std::chrono::system_clock::time_point Deadline(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

}  // namespace stoker::internal
