// Internal to the worker: a task's input file, opened beneath the data
// root and checked (a regular file, the byte range inside it, under the
// size cap). Shared by image tasks (worker.cc) and video work
// (video_work.cc). Thread-compatible.

#ifndef STOKER_SERVER_WORKER_WORKER_INPUT_H_
#define STOKER_SERVER_WORKER_WORKER_INPUT_H_

#include <sys/stat.h>

#include <cstdint>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/posix.h"
#include "server/worker/worker_protocol.h"

namespace stoker::worker {

struct Input {
  UniqueFd fd;
  struct stat st;
  uint64_t begin = 0;
  uint64_t length = 0;
};

// Opens `path` beneath the data root: [offset, offset + length) of it with
// `has_range`, else the whole file; at most `max_file_bytes` (0: no cap).
// OUT_OF_RANGE for a range past the end (a truncated shard),
// INVALID_ARGUMENT for an empty file or not a regular one,
// RESOURCE_EXHAUSTED over the cap, OpenBeneath's errors.
absl::Status OpenChecked(int root_fd, std::string_view path, bool has_range, uint64_t offset,
                         uint64_t length, uint64_t max_file_bytes, Input* in);

// Where a read puts its bytes: `room(n)` returns n writable bytes (a
// vector's or a string's, resized to n).
using Room = absl::FunctionRef<uint8_t*(size_t n)>;

// Reads the opened range whole into room(in.length). DATA_LOSS when the
// file shrank while being read, the read's errno otherwise.
absl::Status ReadWhole(const Input& in, Room room);

// A task's input as the decoders take it: the opened range, or for a raw
// record (TaskMsg.raw_channels != 0) the PNM image of its pixels (header,
// then the pixels read after it). INVALID_ARGUMENT when the range is not
// raw_height x raw_width x raw_channels bytes; ReadWhole's errors. The
// worker's and stoker-relay's (which ships it to a decode node).
absl::Status ReadTaskInput(const TaskMsg& t, const Input& in, Room room);

}  // namespace stoker::worker

#endif  // STOKER_SERVER_WORKER_WORKER_INPUT_H_
