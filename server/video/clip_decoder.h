// Frame-exact clip decoding: the frames of one video with the timestamps a
// clip names, as RGB, byte for byte what torchvision.io.read_video gives
// for them (PyAV's frame.to_rgb().to_ndarray()).
//
// Call sequence (one video, one thread):
//   1. ClipDecoder::Open(fd, offset, length, name, limits): opens the
//      container (AvInput) and the first video stream's decoder.
//   2. Decode(request, out, capacity, &shape), once per clip, any number of
//      clips (a ClipRequest: the clip's pts and where decoding may start,
//      what a worker's task carries; MakeClipRequest builds it from the
//      video's index, and Decode(index, pts, count, ...) does both): seeks
//      to the last keyframe at or before pts[0], decodes forward and keeps
//      exactly the frames whose
//      pts are in pts[0..count) -- by timestamp, never the frame an
//      approximate seek lands on. When the last clip decoded ended before
//      this one, closer to it than the keyframe is, decoding goes on from
//      there without a seek (a video's clips in order: each frame decoded
//      once). Frames the clip does not want that no
//      other frame references (non-reference B-frames) are skipped, not
//      decoded (AVDISCARD_NONREF). When the demuxer's seek lands past pts[0]
//      (an index that lies), it seeks again from an earlier keyframe, then
//      from the start.
//   3. Destroy: frees the decoder and closes the container.
//
// Conversion: libswscale, as PyAV 10's VideoReformatter does it
// (sws_getCachedContext(w, h, frame format, w, h, RGB24, SWS_BILINEAR), the
// default colorspace details, into a 16-byte-aligned av_image_alloc buffer),
// so the bytes are PyAV's for the same FFmpeg build; then copied row by row
// into `out` (tightly packed, [T, H, W, 3]).
// Decoding threads: slice threads only (thread_type SLICE; output equal
// to single-threaded decoding), `threads` of them (1: none).
//
// Bounds: every frame is at most limits.max_decode_pixels (the decoder's
// max_pixels: a frame header that lies about its size is refused before its
// buffer is allocated); at most limits.max_frames_per_clip frames are
// decoded per clip; memory is the decoder's reference frames plus one RGB
// frame, whatever the number of clips or the video's length.
//
// Not thread-safe. The fd must outlive the decoder.

#ifndef STOKER_SERVER_VIDEO_CLIP_DECODER_H_
#define STOKER_SERVER_VIDEO_CLIP_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/video/clip_request.h"
#include "server/video/video_probe.h"

struct AVCodecContext;
struct AVFrame;
struct AVPacket;
struct SwsContext;

namespace stoker::video {

class AvInput;

struct ClipShape {
  uint32_t frames = 0;
  uint32_t height = 0;
  uint32_t width = 0;  // channels: 3
};

// What one Decode did: frames decoded (those before the clip included),
// seeks made (0 going on from the last clip; 1, or more when a seek landed
// late) and packets read.
struct ClipDecodeStats {
  uint32_t decoded_frames = 0;
  uint32_t seeks = 0;
  uint32_t packets = 0;  // of the video stream, read (decoded or skipped)
};

// The request for the clip pts[0..count) of the video `index` describes
// (each pts one of index.pts): clip_request.h's MakeClipRequest over it.
ClipRequest MakeClipRequest(const VideoIndex& index, const int64_t* pts, size_t count);

class ClipDecoder {
 public:
  // DATA_LOSS / FAILED_PRECONDITION / RESOURCE_EXHAUSTED as Probe; INTERNAL
  // when FFmpeg cannot open the decoder.
  static absl::StatusOr<std::unique_ptr<ClipDecoder>> Open(int fd, uint64_t offset,
                                                           uint64_t length,
                                                           const std::string& name,
                                                           const VideoLimits& limits = {},
                                                           int threads = 1);
  ~ClipDecoder();
  ClipDecoder(const ClipDecoder&) = delete;
  ClipDecoder& operator=(const ClipDecoder&) = delete;

  // Decodes the frames of `clip` (ClipRequest) into `out`, frame k at
  // out + k * H * W * 3. On success `shape` holds (count, H, W).
  //  - INVALID_ARGUMENT: count 0, or pts descending somewhere;
  //  - DATA_LOSS: a wanted frame did not decode (damaged packets, or the
  //    clip runs past the frames that are really there), or frames change
  //    size within the clip; the message names the first missing pts;
  //  - RESOURCE_EXHAUSTED: more than limits.max_frames_per_clip frames
  //    decoded (or 2 * max_frames_per_clip + count packets read: a stream
  //    of packets that never make frames ends too), a frame over
  //    max_decode_pixels, or count * H * W * 3 over
  //    `capacity` (nothing is written past capacity).
  // After an error the decoder may be used for the next clip.
  absl::Status Decode(const ClipRequest& clip, uint8_t* out, size_t capacity, ClipShape* shape,
                      ClipDecodeStats* stats = nullptr);
  // The same for pts[0..count) of the video `index` describes (its Probe).
  absl::Status Decode(const VideoIndex& index, const int64_t* pts, size_t count, uint8_t* out,
                      size_t capacity, ClipShape* shape, ClipDecodeStats* stats = nullptr) {
    return Decode(MakeClipRequest(index, pts, count), out, capacity, shape, stats);
  }

 private:
  ClipDecoder() = default;
  // One pass: seek to `seek_pts` (INT64_MIN: the start), decode forward.
  // Sets *late when the first frame out is already past pts[0].
  absl::Status DecodeFrom(int64_t seek_pts, const int64_t* pts, size_t count, uint8_t* out,
                          size_t capacity, ClipShape* shape, ClipDecodeStats* stats,
                          bool* got_all, bool* late, int64_t* first_missing);
  absl::Status Keep(const AVFrame* frame, size_t k, uint8_t* out, size_t capacity,
                    ClipShape* shape);

  std::unique_ptr<AvInput> input_;
  VideoLimits limits_;
  AVCodecContext* codec_ = nullptr;
  AVFrame* frame_ = nullptr;
  AVPacket* packet_ = nullptr;
  SwsContext* sws_ = nullptr;
  // The aligned RGB frame sws_scale writes (PyAV's allocation).
  uint8_t* rgb_[4] = {};
  int rgb_linesize_[4] = {};
  int rgb_width_ = 0;
  int rgb_height_ = 0;
  std::vector<uint8_t> have_;  // per wanted frame, during one Decode
  // After a clip that decoded (and did not reach the end of the stream):
  // the decoder and demuxer stand just after it, its last frame's pts.
  bool resumable_ = false;
  int64_t resume_after_ = 0;
  uint64_t resume_frame_ = 0;  // its position in the video's pts
  bool drained_ = false;  // this Decode reached the end of the stream
};

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_CLIP_DECODER_H_
