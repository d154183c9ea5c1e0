#include "server/video/clip_request.h"

#include <algorithm>

namespace stoker::video {

ClipRequest MakeClipRequest(const int64_t* video_pts, size_t frames, const int64_t* keys,
                            size_t key_count, const int64_t* pts, size_t count) {
  ClipRequest r;
  r.pts = pts;
  r.count = count;
  if (count == 0) return r;
  auto position = [&](int64_t p) {
    return static_cast<uint64_t>(std::lower_bound(video_pts, video_pts + frames, p) - video_pts);
  };
  r.first_frame = position(pts[0]);
  r.last_frame = position(pts[count - 1]);
  const int64_t* kf = std::upper_bound(keys, keys + key_count, pts[0]);
  if (kf != keys) {
    r.has_keyframe = true;
    r.keyframe_pts = kf[-1];
    r.keyframe_frame = position(r.keyframe_pts);
    if (kf - 1 != keys) {
      r.has_earlier_keyframe = true;
      r.earlier_keyframe_pts = kf[-2];
    }
  }
  return r;
}

}  // namespace stoker::video
