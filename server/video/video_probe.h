// What stoker keeps of one video to cut clips from it without decoding:
// its frames' timestamps and where decoding may start.
//
// Probe reads every packet header of the first video stream (no frame is
// decoded beyond what avformat_find_stream_info decodes to learn the
// streams' parameters) and gives:
//   - pts: the presentation timestamps of the packets that have one, sorted:
//     torchvision.io.read_video_timestamps(path)[0] for the same file (it
//     reads packets too when the stream's extradata names Lavc, and decodes
//     them otherwise; a decoder outputs one frame per packet with the
//     packet's pts, so both give this list for files that decode);
//   - fps: float(stream.average_rate), read_video_timestamps(path)[1]; where
//     the container states none (Ogg: torchvision raises TypeError on such
//     a file) the stream's base rate (r_frame_rate); 0 when neither is known;
//   - keyframes: the pts of the packets flagged as keyframes, ascending: the
//     places ClipDecoder may seek to and start decoding from.
// The container over-reporting its frames (a header's nb_frames) changes
// nothing: only packets that are there are counted. A container whose
// packets stop early (truncated, a damaged packet) gives the frames before
// the damage and says so in `warning`.
//
// Pure function of the bytes; thread-compatible.

#ifndef STOKER_SERVER_VIDEO_VIDEO_PROBE_H_
#define STOKER_SERVER_VIDEO_VIDEO_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::video {

struct VideoLimits {
  // Frames larger than this (width x height) are refused: a header claiming
  // 16K x 16K costs one sample, never the worker's memory. 0: no limit.
  // Default: 8192 x 8192 (8K video and every real camera fit).
  uint64_t max_decode_pixels = uint64_t{8192} * 8192;
  // The most packets one video may hold (the index keeps 16 bytes a frame):
  // a ten-hour 60 fps video has ~2.2 million.
  uint64_t max_frames = uint64_t{4} << 20;
  // The most frames ClipDecoder decodes for one clip, those before the clip
  // (from the keyframe it starts at) included: a clip behind a GOP of
  // thousands of frames fails as a sample instead of stalling its worker.
  // The packets it reads for one clip (skipped or undecodable ones too) are
  // bounded at twice this plus the clip's frames.
  uint32_t max_frames_per_clip = 1200;
};

struct VideoIndex {
  std::vector<int64_t> pts;        // sorted; see above
  std::vector<int64_t> keyframes;  // sorted; pts of keyframe packets
  // The stream's time base (pts units, seconds = pts * num / den).
  int32_t time_base_num = 0;
  int32_t time_base_den = 1;
  // stream.average_rate as a fraction (0/1 when unknown) and as a double.
  int32_t rate_num = 0;
  int32_t rate_den = 1;
  double fps = 0;
  int32_t width = 0;   // 0: unknown (see Probe)
  int32_t height = 0;
  std::string codec;      // FFmpeg's codec name: "h264", "vp9", ...
  std::string container;  // FFmpeg's demuxer name: "mov,mp4,m4a,3gp,3g2,mj2", ...
  std::string warning;    // non-empty when the packets stopped early
};

// Indexes the video in bytes [offset, offset + length) of `fd`; `name`
// names it in messages.
//  - DATA_LOSS: not a container FFmpeg reads, or truncated before its
//    headers end;
//  - FAILED_PRECONDITION: no video stream (an audio-only file), or no
//    decoder for its codec in this FFmpeg;
//  - RESOURCE_EXHAUSTED: frames over limits.max_decode_pixels, where the
//    container states their size or its first frames decode within the
//    bound (a size stated only in frames over it stays unknown, width and
//    height 0, and ClipDecoder refuses those frames), or more packets than
//    limits.max_frames.
// A video with no frame at all is not an error: its pts are empty (it
// yields no clip, as in torchvision).
absl::StatusOr<VideoIndex> Probe(int fd, uint64_t offset, uint64_t length, const std::string& name,
                                 const VideoLimits& limits = {});

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_VIDEO_PROBE_H_
