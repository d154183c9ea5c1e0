// What a worker does for a video dataset: index a video (kProbe) and decode
// one clip of it into the ring (a kTask whose clip.params.frames != 0).
// Internal to the worker (worker.cc's Serve calls it); a library so that
// its unit test runs it in process on real video files.
//
// A worker keeps the decoder of the last video it decoded a clip of (its
// container open, its decoder at the end of that clip): when its next task
// is a later clip of the same video (UniformClipSampler's clips in order,
// an unshuffled epoch), decoding goes on from there (clip_decoder.h) instead
// of seeking. Memory: that decoder plus one clip's decoded frames, whatever
// the number of clips.
//
// Two implementations: video_work.cc (FFmpeg) and video_work_absent.cc,
// for the images-only worker of scripts/gpu-bundle.sh (FFmpeg's libraries
// are too big to carry), where every probe and clip fails UNAVAILABLE,
// saying so. Not thread-safe (one per worker).

#ifndef STOKER_SERVER_WORKER_VIDEO_WORK_H_
#define STOKER_SERVER_WORKER_VIDEO_WORK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/worker/worker_protocol.h"

namespace stoker::worker {

// Indexes the video `m` names beneath `data_root`: fills `result` (its code
// and reason on failure) and `values` (the frames' pts, then the
// keyframes'), to be sent as worker_protocol.h says.
void ProbeVideo(const ProbeMsg& m, int data_root, ProbeResultMsg* result,
                std::vector<int64_t>* values);

class ClipWork {
 public:
  ClipWork();
  ~ClipWork();
  // Decodes task `t`'s clip of the file `path` beneath `data_root` into
  // `out` (t.out_capacity bytes of the ring) and fills `r` (height, width,
  // channels 3, bytes, read/decode/augment times); a failed clip is r's code
  // and reason (the caller sends r either way).
  void Run(const TaskMsg& t, std::string_view path, int data_root, uint8_t* out, ResultMsg* r);
  // Frees the decoded frames' buffer when it is over `keep` bytes.
  void Trim(size_t keep);

 private:
  // The open video and its decoder, the decoded frames' buffer: the
  // implementation's.
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stoker::worker

#endif  // STOKER_SERVER_WORKER_VIDEO_WORK_H_
