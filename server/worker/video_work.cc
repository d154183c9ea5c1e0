#include "server/worker/video_work.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/dataset/dataset.h"
#include "server/video/clip_decoder.h"
#include "server/video/clip_ops.h"
#include "server/video/video_probe.h"
#include "server/worker/worker_input.h"

namespace stoker::worker {
namespace {

// The most a clip's decoded frames may take (64 frames of 4K).
constexpr uint64_t kMaxClipBufferBytes = uint64_t{64} * 3840 * 2160 * 3;

}  // namespace

void ProbeVideo(const ProbeMsg& m, int data_root, ProbeResultMsg* result,
                std::vector<int64_t>* values) {
  values->clear();
  result->warning[0] = '\0';
  result->reason[0] = '\0';
  const std::string path(m.path, m.path_bytes);
  Input in;
  const absl::Status opened =
      OpenChecked(data_root, path, m.has_range != 0, m.file_offset, m.file_length, 0, &in);
  absl::StatusOr<video::VideoIndex> index = absl::UnknownError("not probed");
  if (opened.ok()) {
    video::VideoLimits limits;
    limits.max_decode_pixels = m.max_decode_pixels;
    if (m.max_frames != 0) limits.max_frames = m.max_frames;
    index = video::Probe(in.fd.get(), in.begin, in.length, path, limits);
  } else {
    index = opened;
  }
  if (!index.ok()) {
    result->code = static_cast<uint32_t>(index.status().code());
    CopyText(std::string(index.status().message()), result->reason);
    return;
  }
  result->code = 0;
  result->frames = index->pts.size();
  result->keyframes = index->keyframes.size();
  VideoInfo& i = result->info;
  i.time_base_num = index->time_base_num;
  i.time_base_den = index->time_base_den;
  i.rate_num = index->rate_num;
  i.rate_den = index->rate_den;
  i.fps = index->fps;
  i.width = index->width;
  i.height = index->height;
  CopyText(index->warning, result->warning);
  values->reserve(index->pts.size() + index->keyframes.size());
  values->insert(values->end(), index->pts.begin(), index->pts.end());
  values->insert(values->end(), index->keyframes.begin(), index->keyframes.end());
}

struct ClipWork::State {
  // The open video (path, range) and its decoder.
  std::string open_path;
  uint64_t open_offset = 0, open_length = 0;
  UniqueFd fd;
  std::unique_ptr<video::ClipDecoder> decoder;
  std::vector<uint8_t> frames;

  absl::Status Decode(const TaskMsg& t, std::string_view path, int data_root, uint8_t* out,
                      ResultMsg* r);
};

ClipWork::ClipWork() : state_(std::make_unique<State>()) {}
ClipWork::~ClipWork() = default;

void ClipWork::Trim(size_t keep) {
  if (state_->frames.capacity() > keep) std::vector<uint8_t>().swap(state_->frames);
}

void ClipWork::Run(const TaskMsg& t, std::string_view path, int data_root, uint8_t* out,
                   ResultMsg* r) {
  const absl::Status st = state_->Decode(t, path, data_root, out, r);
  if (st.ok()) return;
  r->code = static_cast<uint32_t>(st.code());
  CopyText(std::string(st.message()), r->reason);
}

absl::Status ClipWork::State::Decode(const TaskMsg& t, std::string_view path, int data_root,
                                     uint8_t* out, ResultMsg* r) {
  const ClipTask& c = t.clip;
  const video::ClipParams& p = c.params;
  if (p.frames == 0 || p.frames > video::kMaxClipFrames) {
    return absl::InternalError("a clip task without its frames");
  }
  if (video::ClipOutputBytes(p) > t.out_capacity) {
    return absl::InternalError("the clip's room is smaller than its output");
  }
  int64_t t0 = MonotonicNs();
  const uint64_t offset = t.has_range != 0 ? t.file_offset : 0;
  const uint64_t length = t.has_range != 0 ? t.file_length : 0;
  if (decoder == nullptr || path != open_path || offset != open_offset ||
      length != open_length) {
    decoder.reset();
    fd.Reset();
    Input in;
    absl::Status opened = OpenChecked(data_root, path, t.has_range != 0, offset, length, 0, &in);
    if (!opened.ok()) return opened;
    video::VideoLimits limits;
    limits.max_decode_pixels = p.max_decode_pixels;
    if (p.max_frames_per_clip != 0) limits.max_frames_per_clip = p.max_frames_per_clip;
    auto opened_decoder = video::ClipDecoder::Open(in.fd.get(), in.begin, in.length,
                                                   std::string(path), limits);
    if (!opened_decoder.ok()) return opened_decoder.status();
    fd = std::move(in.fd);
    decoder = *std::move(opened_decoder);
    open_path = std::string(path);
    open_offset = offset;
    open_length = length;
  }
  r->read_ns = static_cast<uint64_t>(MonotonicNs() - t0);
  t0 = MonotonicNs();
  video::ClipRequest req;
  req.pts = c.pts;
  req.count = p.frames;
  req.first_frame = c.first_frame;
  req.last_frame = c.last_frame;
  req.has_keyframe = c.has_keyframe != 0;
  req.keyframe_pts = c.keyframe_pts;
  req.keyframe_frame = c.keyframe_frame;
  req.has_earlier_keyframe = c.has_earlier_keyframe != 0;
  req.earlier_keyframe_pts = c.earlier_keyframe_pts;
  // Room for the clip at the largest frame the limits allow is far too
  // much; grow as the frames need (the decoder says how big they are when
  // the room is short, and nothing is written past it).
  video::ClipShape shape;
  absl::Status st = decoder->Decode(req, frames.data(), frames.size(), &shape);
  const uint64_t need = uint64_t{p.frames} * shape.height * shape.width * 3;
  if (st.code() == absl::StatusCode::kResourceExhausted && need > frames.size()) {
    if (need > kMaxClipBufferBytes) return st;
    frames.resize(need);
    st = decoder->Decode(req, frames.data(), frames.size(), &shape);
  }
  if (!st.ok()) return st;
  r->decode_ns = static_cast<uint64_t>(MonotonicNs() - t0);
  t0 = MonotonicNs();
  absl::StatusOr<video::ClipTransform> tr = video::DrawClipTransform(
      p, shape.height, shape.width, t.key.seed, t.key.epoch, t.key.dataset_index);
  if (!tr.ok()) return tr.status();
  st = p.normalize != 0
           ? video::ApplyClipTransform(frames.data(), shape.frames, shape.height, shape.width, *tr,
                                       reinterpret_cast<float*>(out))
           : video::ApplyClipTransform(frames.data(), shape.frames, shape.height, shape.width, *tr,
                                       out);
  if (!st.ok()) return st;
  r->augment_ns = static_cast<uint64_t>(MonotonicNs() - t0);
  r->height = p.out_height;
  r->width = p.out_width;
  r->channels = 3;
  r->bytes = video::ClipOutputBytes(p);
  return absl::OkStatus();
}

}  // namespace stoker::worker
