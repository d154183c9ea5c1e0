// A video container opened with libavformat over a byte range of a file
// descriptor: a whole file beneath the data root, or a WebDataset member
// inside its shard. The one place stoker hands bytes to FFmpeg.
//
// Reads go through pread on the caller's fd (never past the range), so one fd
// may serve several inputs in turn, and a member of a tar shard looks to the
// demuxer like a file of its own. The container and codec are found by
// content (libavformat's probe), never by the file's name.
//
// Not thread-safe: one input per thread. The fd must outlive the input.

#ifndef STOKER_SERVER_VIDEO_AV_INPUT_H_
#define STOKER_SERVER_VIDEO_AV_INPUT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct AVFormatContext;
struct AVStream;

namespace stoker::video {

// An FFmpeg error code as a Status: "<context>: <av_strerror>".
// AVERROR_INVALIDDATA and other parse failures are DATA_LOSS, ENOMEM
// RESOURCE_EXHAUSTED, everything else INTERNAL or the errno's code.
absl::Status AvError(const std::string& context, int averror);

// Silences FFmpeg's own logging (it would write to the daemon's stderr for
// every damaged packet); failures reach callers as Status instead. Called
// by AvInput::Open; STOKER_AV_LOG=1 in the environment keeps FFmpeg's
// warnings and errors (for debugging a file).
void QuietAvLog();

class AvInput {
 public:
  // Opens the container in bytes [offset, offset + length) of `fd`, reads
  // its streams' parameters as PyAV's av.open does
  // (avformat_find_stream_info, which may decode a few frames: the frame
  // rate it settles, avg_frame_rate, is the fps torchvision's clips are
  // computed from), and picks the first video stream (torchvision reads
  // container.streams.video[0]); every other stream's packets are dropped
  // by the demuxer (not copied). The frames find_stream_info decodes are
  // bounded by max_decode_pixels too. `name` is only for messages.
  //  - DATA_LOSS: the bytes are no container FFmpeg reads, or truncated
  //    before their headers end;
  //  - FAILED_PRECONDITION: no video stream (an audio-only file), or no
  //    decoder for its codec in this FFmpeg;
  //  - RESOURCE_EXHAUSTED: frames over max_decode_pixels (0: no limit).
  static absl::StatusOr<std::unique_ptr<AvInput>> Open(int fd, uint64_t offset, uint64_t length,
                                                       const std::string& name,
                                                       uint64_t max_decode_pixels);
  ~AvInput();
  AvInput(const AvInput&) = delete;
  AvInput& operator=(const AvInput&) = delete;

  AVFormatContext* format() const { return format_; }
  // The video stream Open picked (never null).
  AVStream* video_stream() const { return video_; }
  const std::string& name() const { return name_; }

 private:
  struct Range;
  AvInput() = default;
  absl::Status PickVideo(uint64_t max_decode_pixels);
  std::unique_ptr<Range> range_;
  AVFormatContext* format_ = nullptr;
  AVStream* video_ = nullptr;
  std::string name_;
};

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_AV_INPUT_H_
