// What ClipDecoder (clip_decoder.h) needs to know of one clip without its
// video's whole index: the clip's frames' timestamps and where decoding may
// start. What a daemon's task carries to a worker (worker_protocol.h's
// ClipTask); built from a video's sorted pts and keyframes. No FFmpeg here.
// Pure functions: thread-safe.

#ifndef STOKER_SERVER_VIDEO_CLIP_REQUEST_H_
#define STOKER_SERVER_VIDEO_CLIP_REQUEST_H_

#include <cstddef>
#include <cstdint>

namespace stoker::video {

// What ClipDecoder needs to know of a clip, without its video's whole
// index: what a daemon's task carries to a worker. MakeClipRequest builds
// one from an index.
struct ClipRequest {
  // The clip's frames' timestamps, non-descending (a repeated pts repeats
  // its frame, as a clip resampled to a higher frame rate does); not owned.
  const int64_t* pts = nullptr;
  size_t count = 0;
  // Positions in the video's sorted pts (VideoIndex::pts) of the clip's
  // first and last frames.
  uint64_t first_frame = 0;
  uint64_t last_frame = 0;
  // Where decoding may start: the last keyframe at or before pts[0] (its
  // pts and position), and the keyframe before it; none: from the start.
  bool has_keyframe = false;
  int64_t keyframe_pts = 0;
  uint64_t keyframe_frame = 0;
  bool has_earlier_keyframe = false;
  int64_t earlier_keyframe_pts = 0;
};

// The request for the clip pts[0..count) of a video whose sorted frame pts
// are video_pts[0..frames) and keyframe pts keys[0..key_count) (each of
// pts one of video_pts).
ClipRequest MakeClipRequest(const int64_t* video_pts, size_t frames, const int64_t* keys,
                            size_t key_count, const int64_t* pts, size_t count);

}  // namespace stoker::video

#endif  // STOKER_SERVER_VIDEO_CLIP_REQUEST_H_
