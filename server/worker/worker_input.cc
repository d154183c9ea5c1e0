#include "server/worker/worker_input.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/dataset/dataset.h"
#include "server/dataset/records.h"

namespace stoker::worker {

absl::Status OpenChecked(int root_fd, std::string_view path, bool has_range, uint64_t offset,
                         uint64_t length, uint64_t max_file_bytes, Input* in) {
  absl::StatusOr<int> fd_or = OpenBeneath(root_fd, path);
  if (!fd_or.ok()) return fd_or.status();
  in->fd = UniqueFd(*fd_or);
  struct stat& st = in->st;
  if (::fstat(in->fd.get(), &st) != 0) return PosixError("fstat", errno);
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError("is a directory");
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError("not a regular file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  in->begin = has_range ? offset : 0;
  in->length = has_range ? length : size;
  if (in->begin > size || in->length > size - in->begin) {
    return absl::OutOfRangeError(absl::StrCat("member [", in->begin, ", +", in->length,
                                              ") lies beyond the end of the file (", size,
                                              " bytes): a truncated shard?"));
  }
  if (in->length == 0) return absl::InvalidArgumentError("empty file");
  if (max_file_bytes != 0 && in->length > max_file_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("file is ", in->length, " bytes, over the cap of ", max_file_bytes));
  }
  return absl::OkStatus();
}

absl::Status ReadWhole(const Input& in, Room room) {
  absl::StatusOr<size_t> got = ReadFullyAt(in.fd.get(), in.begin, room(in.length), in.length,
                                           "the file");
  if (!got.ok()) return got.status();
  if (*got != in.length) return absl::DataLossError("file shrank while being read");
  return absl::OkStatus();
}

absl::Status ReadTaskInput(const TaskMsg& t, const Input& in, Room room) {
  if (t.raw_channels == 0) return ReadWhole(in, room);
  const uint64_t pixels = uint64_t{t.raw_height} * t.raw_width * t.raw_channels;
  if ((t.raw_channels != 1 && t.raw_channels != 3) || in.length != pixels) {
    return absl::InvalidArgumentError(absl::StrCat("a raw record of ", in.length, " bytes is not ",
                                                   t.raw_height, "x", t.raw_width, "x",
                                                   t.raw_channels, " pixels"));
  }
  const std::string header = PnmHeader(t.raw_height, t.raw_width, t.raw_channels);
  uint8_t* out = room(header.size() + pixels);
  std::memcpy(out, header.data(), header.size());
  return ReadWhole(in, [out, &header](size_t) { return out + header.size(); });
}

}  // namespace stoker::worker
