// A video dataset's indexing in worker processes: the daemon's VideoProber
// (server/dataset/video_table.h). FFmpeg's demuxers and the decoding that
// avformat_find_stream_info does never run in stokerd: each video is probed
// by a stoker-worker (sandboxed as the decode workers are) over
// worker_protocol.h's kProbe, several at once.
//
// Per ProbeAll: up to `parallelism` workers are started through the
// launcher (not the decode pool's: indexing never takes a session's
// workers), each given one video at a time. A worker that dies on a video
// (a crash in a demuxer) or holds one past timeout_ms (killed) costs that
// video only (ABORTED / DEADLINE_EXCEEDED: it yields no clip; not cached,
// so the next build tries it again) and is replaced for the next. A
// launch that fails leaves the videos to the others (UNAVAILABLE for all of
// them when none starts). The workers are asked to exit at the end.
//
// Thread-safe: ProbeAll keeps its state on its stack; launcher calls are
// serialized by the prober's own lock.

#ifndef STOKER_SERVER_ENGINE_VIDEO_PROBER_H_
#define STOKER_SERVER_ENGINE_VIDEO_PROBER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset/video_table.h"
#include "server/engine/worker_launcher.h"

namespace stoker {

struct VideoProberOptions {
  uint32_t parallelism = 4;
  uint32_t timeout_ms = 60'000;        // one video's indexing
  uint64_t max_decode_pixels = 0;      // video::VideoLimits' (0: none)
  uint64_t max_frames = 0;             // 0: VideoLimits' default
};

class WorkerVideoProber : public VideoProber {
 public:
  // `launcher` is borrowed and must outlive the prober.
  WorkerVideoProber(WorkerLauncher* launcher, VideoProberOptions options)
      : launcher_(launcher), options_(options) {}
  std::vector<ProbeOutcome> ProbeAll(const std::vector<ProbeTarget>& targets,
                                     const std::function<void(uint64_t)>& progress) override;

 private:
  struct Proc;
  bool Start(Proc& p, uint32_t id, std::string* why);
  void Stop(Proc& p, bool kill);

  WorkerLauncher* const launcher_;
  const VideoProberOptions options_;
  absl::Mutex launcher_mu_;  // the launcher is not thread-safe
};

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_VIDEO_PROBER_H_
