// A video dataset's per-video index: each video's frame timestamps,
// keyframes, rate and size, as video::Probe reads them, for every entry of
// an indexed Dataset (a video folder, a manifest of videos, WebDataset
// video members).
//
// Who reads the videos is a VideoProber: the daemon's probes the files in
// sandboxed worker processes (server/engine/video_prober.h: FFmpeg's
// demuxers never run in stokerd); a test probes in its own process.
//
// Incremental, like the image index: with a cache folder, the table of the
// last build is kept in a file beside the dataset's index, each video under
// its file's identity (path, byte range, inode, size, mtime). A build reuses
// every video whose file still looks the same and probes only the others
// (new, changed): adding 10 videos to a set of 100,000 probes 10.
//
// A video that cannot be indexed (not a container, audio only, a header
// over the limits, a probe that crashed or timed out) is not an error: it
// keeps its entry, with no frame and its reason (failure()), so it yields no
// clip, and the build's warnings count such videos; a dataset stays
// servable. Immutable once built: thread-safe.

#ifndef STOKER_SERVER_DATASET_VIDEO_TABLE_H_
#define STOKER_SERVER_DATASET_VIDEO_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/dataset/dataset.h"
#include "server/dataset/records.h"

namespace stoker {

// What the clips need of one video besides its timestamps. Plain old data
// (it crosses the worker socket and goes into the cache file as bytes).
struct VideoInfo {
  int32_t time_base_num = 0;
  int32_t time_base_den = 1;
  int32_t rate_num = 0;  // average rate (0/1: unknown)
  int32_t rate_den = 1;
  double fps = 0;        // video::VideoIndex::fps
  int32_t width = 0;
  int32_t height = 0;
};
static_assert(sizeof(VideoInfo) == 32, "no padding: its bytes are its fields");

// One video to index: a file beneath the data root, whole or a byte range.
// Or a record file (records.h: record_kind != 0; `path` then packs the
// RecordTarget's four strings and "height,width,channels", each ended by a
// NUL).
struct ProbeTarget {
  uint32_t record_kind = 0;  // 0: a video; else RecordKind
  std::string path;  // relative to the root (Dataset::path)
  bool has_range = false;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string display;  // for messages
};

// What indexing one video gave.
struct ProbeOutcome {
  absl::Status status;  // not OK: the video yields no clip, for this reason
  VideoInfo info;
  std::vector<int64_t> pts;        // sorted
  std::vector<int64_t> keyframes;  // sorted
  std::string warning;             // its packets stopped early (it is still used)
  // A record file's: the raw images' shape (all 0: encoded values); `pts`
  // holds (offset, length, label, row) for each sample.
  uint32_t record_height = 0;
  uint32_t record_width = 0;
  uint32_t record_channels = 0;
};

// Thread-safe (the daemon's indexes several datasets at once).
class VideoProber {
 public:
  virtual ~VideoProber() = default;
  // One outcome per target, in order; `progress(done)` now and then.
  virtual std::vector<ProbeOutcome> ProbeAll(const std::vector<ProbeTarget>& targets,
                                             const std::function<void(uint64_t)>& progress) = 0;
  // Indexes a record file (records.h) as ProbeAll does a video: through
  // ProbeAll with one target of its kind, by default.
  virtual absl::StatusOr<RecordIndex> IndexRecords(const RecordTarget& target);
};

class VideoTable {
 public:
  // Indexes every entry of `dataset` (a video of each), reusing the cache
  // file under `cache_dir` ("" : none) where the files are unchanged, and
  // writes the new table there (a failed write is a warning).
  static std::shared_ptr<const VideoTable> Build(const DataRoot& root, const Dataset& dataset,
                                                 VideoProber& prober, const std::string& cache_dir,
                                                 const std::function<void(uint64_t)>& progress = {});

  uint64_t videos() const { return info_.size(); }
  const VideoInfo& info(uint64_t v) const { return info_[v]; }
  uint64_t frames(uint64_t v) const { return pts_offsets_[v + 1] - pts_offsets_[v]; }
  const int64_t* pts(uint64_t v) const { return pts_.data() + pts_offsets_[v]; }
  uint64_t keyframe_count(uint64_t v) const { return key_offsets_[v + 1] - key_offsets_[v]; }
  const int64_t* keyframes(uint64_t v) const { return keys_.data() + key_offsets_[v]; }
  // Why video v has no frame ("" when it was indexed).
  const std::string& failure(uint64_t v) const { return failure_[v]; }
  // Counts of this build: videos probed now, reused from the cache, failed.
  uint64_t probed() const { return probed_; }
  uint64_t reused() const { return reused_; }
  uint64_t failed() const { return failed_; }
  // For the log: the failed videos (the first few, by name) and others.
  const std::vector<std::string>& warnings() const { return warnings_; }
  uint64_t memory_bytes() const;

 private:
  VideoTable() = default;
  std::vector<VideoInfo> info_;
  std::vector<uint64_t> pts_offsets_{0};
  std::vector<int64_t> pts_;
  std::vector<uint64_t> key_offsets_{0};
  std::vector<int64_t> keys_;
  std::vector<std::string> failure_;
  uint64_t probed_ = 0, reused_ = 0, failed_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_VIDEO_TABLE_H_
