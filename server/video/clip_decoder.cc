#include "server/video/clip_decoder.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/video/av_input.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

namespace stoker::video {
namespace {

// DecodeFrom's target that means: no seek, go on from where the last clip
// ended.
constexpr int64_t kContinue = std::numeric_limits<int64_t>::max();

}  // namespace

absl::StatusOr<std::unique_ptr<ClipDecoder>> ClipDecoder::Open(int fd, uint64_t offset,
                                                               uint64_t length,
                                                               const std::string& name,
                                                               const VideoLimits& limits,
                                                               int threads) {
  absl::StatusOr<std::unique_ptr<AvInput>> in =
      AvInput::Open(fd, offset, length, name, limits.max_decode_pixels);
  if (!in.ok()) return in.status();
  AVStream* stream = (*in)->video_stream();
  const AVCodecParameters* par = stream->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  std::unique_ptr<ClipDecoder> d(new ClipDecoder());
  d->limits_ = limits;
  d->codec_ = avcodec_alloc_context3(codec);
  d->frame_ = av_frame_alloc();
  d->packet_ = av_packet_alloc();
  if (d->codec_ == nullptr || d->frame_ == nullptr || d->packet_ == nullptr) {
    return absl::ResourceExhaustedError(name + ": out of memory");
  }
  int err = avcodec_parameters_to_context(d->codec_, par);
  if (err < 0) return AvError(name + ": the stream's codec parameters", err);
  d->codec_->pkt_timebase = stream->time_base;
  d->codec_->thread_count = std::max(threads, 1);
  d->codec_->thread_type = FF_THREAD_SLICE;
  if (limits.max_decode_pixels != 0) {
    d->codec_->max_pixels = static_cast<int64_t>(
        std::min<uint64_t>(limits.max_decode_pixels, std::numeric_limits<int>::max()));
  }
  err = avcodec_open2(d->codec_, codec, nullptr);
  if (err < 0) return AvError(name + ": opening the " + codec->name + " decoder", err);
  d->input_ = std::move(*in);
  return d;
}

ClipDecoder::~ClipDecoder() {
  if (rgb_[0] != nullptr) av_freep(&rgb_[0]);
  sws_freeContext(sws_);
  av_packet_free(&packet_);
  av_frame_free(&frame_);
  avcodec_free_context(&codec_);
}

absl::Status ClipDecoder::Keep(const AVFrame* frame, size_t k, uint8_t* out, size_t capacity,
                               ClipShape* shape) {
  const std::string& name = input_->name();
  if (frame->width <= 0 || frame->height <= 0) {
    return absl::DataLossError(absl::StrCat(name, ": a frame without a size"));
  }
  if (shape->width == 0) {
    shape->width = static_cast<uint32_t>(frame->width);
    shape->height = static_cast<uint32_t>(frame->height);
    const uint64_t bytes = uint64_t{shape->frames} * shape->height * shape->width * 3;
    if (bytes > capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name, ": a clip of ", shape->frames, " frames of ", shape->width, "x", shape->height,
          " is ", bytes, " bytes, over the ", capacity, " its sample has room for"));
    }
  } else if (static_cast<uint32_t>(frame->width) != shape->width ||
             static_cast<uint32_t>(frame->height) != shape->height) {
    return absl::DataLossError(absl::StrCat(name, ": the frame size changes within the clip (",
                                            shape->width, "x", shape->height, " to ",
                                            frame->width, "x", frame->height, ")"));
  }
  if (frame->width != rgb_width_ || frame->height != rgb_height_) {
    if (rgb_[0] != nullptr) av_freep(&rgb_[0]);
    const int err = av_image_alloc(rgb_, rgb_linesize_, frame->width, frame->height,
                                   AV_PIX_FMT_RGB24, 16);
    if (err < 0) return AvError(name + ": allocating an RGB frame", err);
    rgb_width_ = frame->width;
    rgb_height_ = frame->height;
  }
  sws_ = sws_getCachedContext(sws_, frame->width, frame->height,
                              static_cast<AVPixelFormat>(frame->format), frame->width,
                              frame->height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr,
                              nullptr);
  if (sws_ == nullptr) {
    return absl::DataLossError(absl::StrCat(
        name, ": no conversion to RGB from its pixel format (",
        av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format)) != nullptr
            ? av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format))
            : "unknown",
        ")"));
  }
  sws_scale(sws_, frame->data, frame->linesize, 0, frame->height, rgb_, rgb_linesize_);
  const size_t row = size_t{shape->width} * 3;
  uint8_t* dst = out + k * row * shape->height;
  for (uint32_t y = 0; y < shape->height; ++y) {
    std::memcpy(dst + y * row, rgb_[0] + static_cast<size_t>(y) * rgb_linesize_[0], row);
  }
  return absl::OkStatus();
}

absl::Status ClipDecoder::DecodeFrom(int64_t seek_pts, const int64_t* pts, size_t count,
                                     uint8_t* out, size_t capacity, ClipShape* shape,
                                     ClipDecodeStats* stats, bool* got_all, bool* late,
                                     int64_t* first_missing) {
  const std::string& name = input_->name();
  AVFormatContext* format = input_->format();
  AVStream* stream = input_->video_stream();
  *got_all = false;
  *late = false;
  std::fill(have_.begin(), have_.end(), 0);
  size_t have = 0;
  bool first_frame = true;
  int err;
  if (seek_pts != kContinue) {
    ++stats->seeks;
    if (seek_pts == std::numeric_limits<int64_t>::min()) {
      err = avformat_seek_file(format, stream->index, std::numeric_limits<int64_t>::min(), 0, 0,
                               AVSEEK_FLAG_BACKWARD);
      if (err < 0) err = av_seek_frame(format, stream->index, 0, AVSEEK_FLAG_BYTE);
    } else {
      err = av_seek_frame(format, stream->index, seek_pts, AVSEEK_FLAG_BACKWARD);
    }
    if (err < 0) return AvError(absl::StrCat(name, ": seeking to pts ", seek_pts), err);
    avcodec_flush_buffers(codec_);
  }

  // Takes the decoder's frames until it wants input; false when the clip is
  // complete or the pass must stop.
  auto drain = [&]() -> absl::StatusOr<bool> {
    for (;;) {
      const int r = avcodec_receive_frame(codec_, frame_);
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return true;
      if (r < 0) return true;  // a damaged frame: the next may decode
      if (++stats->decoded_frames > limits_.max_frames_per_clip) {
        av_frame_unref(frame_);
        return absl::ResourceExhaustedError(absl::StrCat(
            name, ": more than ", limits_.max_frames_per_clip,
            " frames decoded for one clip (the daemon's per-clip frame budget)"));
      }
      const int64_t p = frame_->pts != AV_NOPTS_VALUE ? frame_->pts : frame_->best_effort_timestamp;
      if (first_frame) {
        first_frame = false;
        if (p != AV_NOPTS_VALUE && p > pts[0]) {
          *late = true;
          av_frame_unref(frame_);
          return false;
        }
      }
      // Every position that wants this frame (a clip resampled to a higher
      // frame rate repeats frames): converted into the first, copied into
      // the others.
      const uint8_t* converted = nullptr;
      for (const int64_t* at = std::lower_bound(pts, pts + count, p);
           at != pts + count && *at == p; ++at) {
        const size_t k = static_cast<size_t>(at - pts);
        if (have_[k] != 0) continue;
        if (converted != nullptr) {
          const size_t frame_bytes = size_t{shape->height} * shape->width * 3;
          std::memcpy(out + k * frame_bytes, converted, frame_bytes);
        } else {
          absl::Status kept = Keep(frame_, k, out, capacity, shape);
          if (!kept.ok()) {
            av_frame_unref(frame_);
            return kept;
          }
          converted = out + k * size_t{shape->height} * shape->width * 3;
        }
        have_[k] = 1;
        ++have;
      }
      av_frame_unref(frame_);
      if (have == count) {
        *got_all = true;
        resume_after_ = p;
        return false;
      }
    }
  };

  bool flushed = false;
  while (!flushed) {
    err = av_read_frame(format, packet_);
    if (err < 0) {
      // The end (or damage past which nothing more can be read): flush the
      // decoder's delayed frames.
      avcodec_send_packet(codec_, nullptr);
      flushed = true;
      drained_ = true;  // nothing more comes out without a seek
    } else {
      if (packet_->stream_index != stream->index) {
        av_packet_unref(packet_);
        continue;
      }
      if (++stats->packets > 2 * uint64_t{limits_.max_frames_per_clip} + count) {
        av_packet_unref(packet_);
        return absl::ResourceExhaustedError(absl::StrCat(
            name, ": more than ", 2 * uint64_t{limits_.max_frames_per_clip} + count,
            " packets read for one clip (twice the daemon's per-clip frame budget, and the "
            "clip's frames)"));
      }
      // A frame the clip does not want and no other frame references (a
      // non-reference B-frame before the clip, or between a resampled clip's
      // frames) need not be decoded: skipping it changes no other frame.
      // The decision is made packet by packet, which slice threading (the
      // only threading used) allows.
      const int64_t p = packet_->pts;
      codec_->skip_frame = p != AV_NOPTS_VALUE && !std::binary_search(pts, pts + count, p)
                               ? AVDISCARD_NONREF
                               : AVDISCARD_DEFAULT;
      const int sent = avcodec_send_packet(codec_, packet_);
      av_packet_unref(packet_);
      if (sent < 0 && sent != AVERROR(EAGAIN)) continue;  // a damaged packet
    }
    absl::StatusOr<bool> go_on = drain();
    if (!go_on.ok()) return go_on.status();
    if (!*go_on) break;
  }
  if (!*got_all && !*late) {
    for (size_t k = 0; k < count; ++k) {
      if (have_[k] == 0) {
        *first_missing = pts[k];
        break;
      }
    }
  }
  return absl::OkStatus();
}

ClipRequest MakeClipRequest(const VideoIndex& index, const int64_t* pts, size_t count) {
  return MakeClipRequest(index.pts.data(), index.pts.size(), index.keyframes.data(),
                         index.keyframes.size(), pts, count);
}

absl::Status ClipDecoder::Decode(const ClipRequest& clip, uint8_t* out, size_t capacity,
                                 ClipShape* shape, ClipDecodeStats* stats) {
  const std::string& name = input_->name();
  const int64_t* pts = clip.pts;
  const size_t count = clip.count;
  ClipDecodeStats local;
  if (stats == nullptr) stats = &local;
  *stats = {};
  if (count == 0) return absl::InvalidArgumentError(name + ": a clip of no frames");
  for (size_t k = 1; k < count; ++k) {
    if (pts[k] < pts[k - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": a clip's timestamps must not descend (", pts[k - 1], " then ",
                       pts[k], ")"));
    }
  }
  if (count > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(name + ": too many frames in one clip");
  }
  have_.assign(count, 0);
  // Where decoding starts, cheapest first: on from the last clip, when it
  // ended before this one and fewer frames lie between than between the
  // keyframe and this clip; the last keyframe at or before the clip; the
  // one before it (a demuxer whose seek lands a keyframe late); the start.
  int64_t targets[4];
  int n_targets = 0;
  if (resumable_ && resume_after_ < pts[0] && resume_frame_ < clip.first_frame) {
    const uint64_t between = clip.first_frame - resume_frame_ - 1;
    const uint64_t from_keyframe =
        clip.has_keyframe && clip.keyframe_frame <= clip.first_frame
            ? clip.first_frame - clip.keyframe_frame
            : clip.first_frame;
    if (between <= from_keyframe) targets[n_targets++] = kContinue;
  }
  resumable_ = false;
  drained_ = false;
  if (clip.has_keyframe) {
    targets[n_targets++] = clip.keyframe_pts;
    if (clip.has_earlier_keyframe) targets[n_targets++] = clip.earlier_keyframe_pts;
  }
  targets[n_targets++] = std::numeric_limits<int64_t>::min();
  int64_t first_missing = pts[0];
  for (int t = 0; t < n_targets; ++t) {
    *shape = ClipShape{static_cast<uint32_t>(count), 0, 0};
    bool got_all = false;
    bool late = false;
    absl::Status s = DecodeFrom(targets[t], pts, count, out, capacity, shape, stats, &got_all,
                                &late, &first_missing);
    if (!s.ok()) return s;
    if (got_all) {
      resumable_ = !drained_;  // the decoder holds the frames after this clip
      resume_frame_ = clip.last_frame;
      return absl::OkStatus();
    }
    if (!late && targets[t] != kContinue) break;  // from early enough: the frames are not there
    first_missing = pts[0];
  }
  return absl::DataLossError(absl::StrCat(name, ": the frame at pts ", first_missing,
                                          " did not decode (damaged, or past the real end)"));
}

}  // namespace stoker::video
