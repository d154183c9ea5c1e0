// Messages between stokerd and its worker processes, over one private
// SOCK_SEQPACKET socketpair per worker (fd 3 in the worker). Internal to the
// daemon: both ends are built from the same source, so the structs cross
// verbatim. A ring's fd crosses with kMapRing as SCM_RIGHTS ancillary data.
//
// fd 5, when the daemon runs with --transcode-cache, is the cache's
// directory (server/engine/transcode_cache.h); absent otherwise. fd 6, with
// --prepared-cache, is that folder (server/volume/volume_cache.h: the worker
// that prepares a volume writes its entry; later tasks map it).
//
//   daemon -> worker: kMapRing, kUnmapRing, kTask, kShutdown, kProbe
//   worker -> daemon: kHello (once, at start), kResult (one per kTask, in
//                     the order the tasks were sent), kProbeResult then its
//                     kProbePts (per kProbe: a video's index, for a video
//                     dataset's indexing; server/engine/video_prober.h)
//
// A worker handles its messages strictly in order, so the oldest task the
// daemon has not yet seen a result for is the one a dead worker was on.

#ifndef STOKER_SERVER_WORKER_WORKER_PROTOCOL_H_
#define STOKER_SERVER_WORKER_WORKER_PROTOCOL_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "server/dataset/video_table.h"
#include "server/image/pipeline.h"
#include "server/video/clip_params.h"
#include "server/volume/volume_task.h"

namespace stoker::worker {

inline constexpr int kChannelFd = 3;   // the worker's end of its socketpair
inline constexpr int kDataRootFd = 4;  // the daemon's --data-root, O_DIRECTORY
inline constexpr int kTranscodeCacheFd = 5;  // --transcode-cache DIR, O_DIRECTORY (if set)
inline constexpr int kPreparedCacheFd = 6;     // --prepared-cache DIR, O_DIRECTORY (if set)
inline constexpr int kShippedFilesFd = 7;  // a decode node's shipped files, O_DIRECTORY (nodes only)
inline constexpr uint32_t kMaxPathBytes = 4096;
inline constexpr uint32_t kReasonBytes = 480;

enum MsgType : uint32_t {
  kMapRing = 1,
  kUnmapRing = 2,
  kTask = 3,
  kShutdown = 4,
  kProbe = 5,
  kHello = 100,
  kResult = 101,
  kProbeResult = 102,
  kProbePts = 103,
};

struct MapRingMsg {
  uint32_t type = kMapRing;
  uint32_t reserved = 0;
  uint64_t ring_id = 0;
  uint64_t data_offset = 0;  // page aligned: the worker maps only the data area
  uint64_t data_bytes = 0;
  // The first bytes of it the ring has reserved (its depth's slots): mapped
  // populated; the rest is faulted in when first written (a ring deepens
  // into it later).
  uint64_t populate_bytes = 0;
};

struct ShutdownMsg {
  uint32_t type = kShutdown;
  uint32_t reserved = 0;
};

struct UnmapRingMsg {
  uint32_t type = kUnmapRing;
  uint32_t reserved = 0;
  uint64_t ring_id = 0;
};

// A video session's sample: one clip of the file the task names (the
// whole file, or its byte range), to decode and transform into out_offset
// (ClipOutputBytes(params) bytes). Its frames' pts and where decoding may
// start are the daemon's, from the dataset's video index (video::
// ClipRequest's fields); its draws are keyed by key.seed, key.epoch and
// key.dataset_index (the clip number).
struct ClipTask {
  video::ClipParams params;  // params.frames == 0: not a clip (an image task)
  uint32_t has_keyframe = 0;
  uint32_t has_earlier_keyframe = 0;
  uint64_t first_frame = 0;
  uint64_t last_frame = 0;
  int64_t keyframe_pts = 0;
  uint64_t keyframe_frame = 0;
  int64_t earlier_keyframe_pts = 0;
  int64_t pts[video::kMaxClipFrames];  // params.frames of them
};

struct TaskMsg {
  uint32_t type = kTask;
  uint32_t path_bytes = 0;    // bytes of `path` used (no NUL)
  uint64_t task_id = 0;
  uint64_t ring_id = 0;
  uint64_t out_offset = 0;    // from the start of the ring's data area
  uint64_t out_capacity = 0;
  uint64_t file_offset = 0;   // with has_range: read [file_offset, file_offset + file_length)
  uint64_t file_length = 0;
  uint32_t has_range = 0;     // 0: read the whole file
  // A raw record (an HDF5 image array's row, server/dataset/records.h): the
  // input is raw_height x raw_width x raw_channels bytes of pixels, decoded
  // as the PNM image of them. All 0: an encoded image.
  uint32_t raw_height = 0;
  uint32_t raw_width = 0;
  uint32_t raw_channels = 0;
  uint64_t max_file_bytes = 0;
  image::SampleKey key;
  image::PipelineParams params;
  uint32_t fault = 0;         // tests only, see FaultKind (0: none)
  uint32_t simulate_latency_us = 0;  // benchmarks and tests: a cold read first sleeps
  uint32_t cache = 0;                // TaskCache: the transcode cache for this task
  // Segmentation sets: the sample's mask file, `mask_path_bytes` of `path`
  // right after the image's (0: no mask), and where its label map goes
  // (params.mask_bpp bytes a value; labels.h moves it with the image).
  uint32_t mask_path_bytes = 0;
  uint64_t mask_out_offset = 0;      // from the start of the ring's data area
  uint64_t mask_out_capacity = 0;
  // With mask_has_range: the mask is [mask_file_offset, + mask_file_length)
  // of its file (a WebDataset shard's member).
  uint32_t mask_has_range = 0;
  uint64_t mask_file_offset = 0;
  uint64_t mask_file_length = 0;
  // Detection sets: the sample's `box_count` input boxes, which the daemon
  // wrote at these offsets from the start of the ring's data area (XYXY
  // float32 x 4, labels int64, flags uint8) before sending the task; the
  // worker moves them with the image and keeps those the rules keep, in
  // place (boxes.h); ResultMsg.boxes_kept says how many.
  uint32_t has_boxes = 0;
  uint32_t box_count = 0;
  uint64_t box_out_offset = 0;
  uint64_t box_label_out_offset = 0;
  uint64_t box_flag_out_offset = 0;
  // Multi-view pipelines (params.view_count > 0): output k's room (k <
  // image::OutputCount(params)), from the start of the ring's data area;
  // output 0's is out_offset / out_capacity too.
  uint64_t view_out_offset[image::kMaxViews];
  uint64_t view_out_capacity[image::kMaxViews];
  ClipTask clip;
  // A volume session's sample (has_volume): the volume at `path` (and its
  // label volume, the mask path) through the session's transforms
  // (server/volume/volume_task.h) into out_offset (the "volume" field's
  // room) and mask_out_offset (the "volume_label" field's, when
  // mask_out_capacity != 0); ResultMsg.bytes and mask_bytes are their
  // bytes.
  uint32_t has_volume = 0;
  volume::VolumeTaskParams volume;
  // An evaluation pipeline's image (AttachPlan::prepared_recipe, 0: not
  // one): its output is read from, or written to, the prepared cache
  // (server/worker/image_entry.h), keyed by this and the file's identity.
  uint64_t prepared_recipe = 0;
  // Inputs held in the ring instead of read from files (a decode node's
  // tasks, server/remote/decode_node.h): the image's encoded bytes are
  // [input_offset, + input_length) of the ring's data area, the mask's
  // [mask_input_offset, + mask_input_length); the paths then only name the
  // sample in reasons. No cache is used. 0: the paths are read.
  uint32_t inline_input = 0;
  // A clip's or a volume's files were shipped to a decode node
  // (server/remote/file_store.h): the paths are store keys, read beneath
  // kShippedFilesFd, not the data root.
  uint32_t shipped_files = 0;
  uint64_t input_offset = 0;
  uint64_t input_length = 0;
  uint64_t mask_input_offset = 0;
  uint64_t mask_input_length = 0;
  // The image's path then the mask's, relative to the data root; sent
  // truncated to path_bytes + mask_path_bytes.
  char path[kMaxPathBytes];
};

// Faults a worker injects on itself when the daemon runs with
// --enable-fault-injection (tests); never set otherwise.
// TaskMsg::cache.
enum TaskCache : uint32_t {
  kTaskCacheOff = 0,
  kTaskCacheRead = 1,       // use an entry; do not write one (the budget is full)
  kTaskCacheReadWrite = 2,  // and write the copy of a multi-scan original that has none
};

// Indexes one file beneath the data root. kProbeVideo: one video
// (video::Probe) at `path` (its byte range with has_range), answered by one
// ProbeResultMsg and, when it succeeded, ceil((frames + keyframes) /
// kProbePtsPerMsg) ProbePtsMsgs: the frames' pts then the keyframes', in
// order. kProbeHdf5 / kProbeLmdb: a record file (server/dataset/records.h);
// `path` is the RecordTarget's file, images_key, labels_file, labels_key and
// "height,width,channels", each ended by a NUL; the answer's `frames` values are (offset, length,
// label, row) for each sample, its record_* fields the raw images' shape.
enum ProbeKind : uint32_t { kProbeVideo = 0, kProbeHdf5 = 1, kProbeLmdb = 2 };
struct ProbeMsg {
  uint32_t type = kProbe;
  uint32_t path_bytes = 0;
  uint64_t probe_id = 0;
  uint32_t has_range = 0;
  uint32_t kind = kProbeVideo;  // ProbeKind
  uint64_t file_offset = 0;
  uint64_t file_length = 0;
  uint64_t max_file_bytes = 0;  // 0: no cap
  uint64_t max_decode_pixels = 0;
  uint64_t max_frames = 0;
  char path[kMaxPathBytes];  // sent truncated to path_bytes
};

struct ProbeResultMsg {
  uint32_t type = kProbeResult;
  uint32_t code = 0;  // absl::StatusCode
  uint64_t probe_id = 0;
  uint64_t frames = 0;
  uint64_t keyframes = 0;
  VideoInfo info;
  uint32_t record_height = 0;  // RecordIndex's (kProbeHdf5 / kProbeLmdb)
  uint32_t record_width = 0;
  uint32_t record_channels = 0;
  uint32_t reserved = 0;
  char warning[kReasonBytes];  // NUL-terminated
  char reason[kReasonBytes];   // NUL-terminated when code != 0
};

inline constexpr uint32_t kProbePtsPerMsg = 2048;
struct ProbePtsMsg {
  uint32_t type = kProbePts;
  uint32_t count = 0;  // values used
  int64_t values[kProbePtsPerMsg];
};

// Exit statuses of a remote pool's worker (stoker-relay,
// server/remote/relay.h) that are its decode node's doing, not its sample's:
// the node was lost (unreachable, its stream ended, silent too long), or it
// answered something malformed. The pool redoes the tasks without counting
// a crash against them.
inline constexpr int kExitNodeLost = 75;
inline constexpr int kExitNodeBad = 76;

enum FaultKind : uint32_t { kFaultNone = 0, kFaultCrash = 1, kFaultHang = 2 };

struct HelloMsg {
  uint32_t type = kHello;
  int32_t pid = 0;
};

struct ResultMsg {
  uint32_t type = kResult;
  uint32_t code = 0;          // absl::StatusCode
  uint64_t task_id = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;
  // image::ImageFormat by the file's content, whatever `code` is, once the
  // file was read; image::kImageFormatCount before (an open or read error).
  uint32_t format = image::kImageFormatCount;
  uint64_t bytes = 0;
  uint64_t mask_bytes = 0;  // the mask written (height x width values), 0: none
  uint32_t boxes_kept = 0;  // detection sets: the boxes left in place
  uint32_t reserved_boxes = 0;
  uint64_t read_ns = 0;
  uint64_t decode_ns = 0;
  uint64_t augment_ns = 0;
  // From image::SampleResult (when code == 0).
  uint32_t decode_path = 0;  // image::DecodePath
  uint32_t dct_scale = 8;
  uint32_t progressive = 0;
  // The transcode cache (server/engine/transcode_cache.h's CacheReport, field by
  // field; set whatever `code` is: a copy written before a failure exists).
  uint32_t cache_event = 0;  // CacheEvent
  uint64_t cache_key_hi = 0;
  uint64_t cache_key_lo = 0;
  uint64_t cache_entry_bytes = 0;
  uint64_t cache_bytes_written = 0;
  uint32_t cache_write_errno = 0;  // writing the copy failed: its errno (0: it did not)
  uint32_t cache_temp_left = 0;
  uint64_t transcode_ns = 0;  // re-coding the file and writing its entry
  // A task that wrote a prepared cache entry: its id (the name's hex
  // digits), kind and bytes (0: none written), for the daemon's budget
  // (server/engine/prepared_cache_budget.h).
  uint64_t prepared_entry_id = 0;
  uint64_t prepared_entry_bytes = 0;
  uint32_t prepared_entry_kind = 0;  // PreparedEntryKind
  uint32_t prepared_hit = 0;         // the output came from an entry (image tasks)
  uint64_t input_bytes = 0;   // of the file, member or cache copy read
  char reason[kReasonBytes];  // NUL-terminated when code != 0
};

enum PreparedEntryKind : uint32_t {
  kPreparedVolume = 1,  // "<id>.stkv", server/volume/volume_cache.h
  kPreparedImage = 2,   // "<id>.stki", server/worker/image_entry.h
};

inline constexpr uint64_t TaskHeaderBytes() { return offsetof(TaskMsg, path); }
// Copies `text` into a message's NUL-terminated text field, cut to fit.
inline void CopyText(std::string_view text, char (&out)[kReasonBytes]) {
  const size_t n = std::min(text.size(), sizeof(out) - 1);
  if (n != 0) std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

inline constexpr uint64_t ProbeHeaderBytes() { return offsetof(ProbeMsg, path); }

// The files a task path names: a volume's channels are NUL-separated (a
// Decathlon entry's list), anything else is one file. Every part is kept,
// empty ones included (a file that cannot be opened: the sample's failure).
inline std::vector<std::string_view> SplitPathFiles(std::string_view path) {
  std::vector<std::string_view> files;
  for (size_t at = 0;;) {
    const size_t end = path.find('\0', at);
    files.push_back(path.substr(at, end == std::string_view::npos ? end : end - at));
    if (end == std::string_view::npos) return files;
    at = end + 1;
  }
}

// Whether a received task of `n` bytes is whole: its header, and paths whose
// lengths add up to the rest. Read by whoever takes tasks off a channel or
// the network (the worker, stoker-relay, a decode node).
inline bool TaskBytesAddUp(const TaskMsg& t, size_t n) {
  return n >= TaskHeaderBytes() && t.path_bytes <= kMaxPathBytes &&
         t.mask_path_bytes <= kMaxPathBytes - t.path_bytes &&
         n == TaskHeaderBytes() + t.path_bytes + t.mask_path_bytes;
}

// Whether every room task `t` names (its output or views, its mask or
// label, its boxes, its inline inputs) lies inside a ring of `ring_bytes`
// bytes, and the rooms go together (views have no mask or boxes). A task
// that fails it is answered "task names memory outside its ring".
inline bool TaskFitsRing(const TaskMsg& t, uint64_t ring_bytes) {
  const auto fits = [ring_bytes](uint64_t offset, uint64_t length) {
    return offset <= ring_bytes && length <= ring_bytes - offset;
  };
  if (!fits(t.out_offset, t.out_capacity)) return false;
  if ((t.mask_path_bytes != 0 || t.has_volume != 0) &&
      !fits(t.mask_out_offset, t.mask_out_capacity)) {
    return false;
  }
  if (t.has_boxes != 0) {
    const uint64_t n = t.box_count;  // < 2^32: the products below do not wrap
    if (!fits(t.box_out_offset, 16 * n) || !fits(t.box_label_out_offset, 8 * n) ||
        !fits(t.box_flag_out_offset, n) || t.box_out_offset % alignof(float) != 0 ||
        t.box_label_out_offset % alignof(int64_t) != 0) {
      return false;
    }
  }
  if (t.params.view_count != 0) {
    if (t.mask_path_bytes != 0 || t.has_boxes != 0 || t.params.view_count > image::kMaxViews) {
      return false;
    }
    const uint32_t views = image::OutputCount(t.params);
    if (views > image::kMaxViews) return false;
    for (uint32_t k = 0; k < views; ++k) {
      if (!fits(t.view_out_offset[k], t.view_out_capacity[k])) return false;
    }
  }
  if (t.inline_input != 0 &&
      (t.input_length == 0 || !fits(t.input_offset, t.input_length) ||
       (t.mask_path_bytes != 0 &&
        (t.mask_input_length == 0 || !fits(t.mask_input_offset, t.mask_input_length))))) {
    return false;
  }
  return true;
}

// Sends one message on a worker channel, waiting while its buffer is full
// (retrying EINTR); false when the peer is gone.
inline bool SendMessage(int channel, const void* msg, size_t bytes) {
  for (;;) {
    const ssize_t n = ::send(channel, msg, bytes, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// The structs cross as bytes. A task (the op list is most of its header)
// must stay one small datagram: far under the socket's send buffer, so that
// a send never fails with EMSGSIZE.
static_assert(std::is_trivially_copyable_v<TaskMsg> && std::is_trivially_copyable_v<ResultMsg> &&
              std::is_trivially_copyable_v<ProbeMsg> &&
              std::is_trivially_copyable_v<ProbeResultMsg> &&
              std::is_trivially_copyable_v<ProbePtsMsg>);
static_assert(sizeof(ProbeMsg) <= sizeof(TaskMsg), "the worker receives into a TaskMsg");
static_assert(sizeof(ProbePtsMsg) <= 32768, "one datagram");
// (A volume session's transforms, volume::VolumeTaskParams, took it past five.)
static_assert(TaskHeaderBytes() <= 24576, "the task header is meant to fit in six pages");
static_assert(sizeof(TaskMsg) <= 32768, "a task is one SOCK_SEQPACKET datagram");
static_assert(sizeof(ResultMsg) <= 1024, "a result is one small datagram");

}  // namespace stoker::worker

#endif  // STOKER_SERVER_WORKER_WORKER_PROTOCOL_H_
