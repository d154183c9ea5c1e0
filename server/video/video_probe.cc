#include "server/video/video_probe.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/video/av_input.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

namespace stoker::video {
namespace {

struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};

}  // namespace

absl::StatusOr<VideoIndex> Probe(int fd, uint64_t offset, uint64_t length, const std::string& name,
                                 const VideoLimits& limits) {
  absl::StatusOr<std::unique_ptr<AvInput>> in =
      AvInput::Open(fd, offset, length, name, limits.max_decode_pixels);
  if (!in.ok()) return in.status();
  AVStream* stream = (*in)->video_stream();
  const AVCodecParameters* par = stream->codecpar;
  VideoIndex index;
  index.time_base_num = stream->time_base.num;
  index.time_base_den = stream->time_base.den;
  // torchvision's fps is average_rate; where the container gives none (Ogg)
  // torchvision fails on the file, and stoker takes the stream's base rate.
  AVRational rate = stream->avg_frame_rate;
  if (rate.num <= 0 || rate.den <= 0) rate = stream->r_frame_rate;
  if (rate.num > 0 && rate.den > 0) {
    index.rate_num = rate.num;
    index.rate_den = rate.den;
    index.fps = static_cast<double>(rate.num) / rate.den;
  }
  index.width = par->width;
  index.height = par->height;
  index.codec = avcodec_get_name(par->codec_id);
  index.container = (*in)->format()->iformat->name;

  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  if (packet == nullptr) return absl::ResourceExhaustedError(name + ": out of memory");
  AVFormatContext* format = (*in)->format();
  uint64_t packets = 0;
  for (;;) {
    const int err = av_read_frame(format, packet.get());
    if (err == AVERROR_EOF) break;
    if (err < 0) {
      index.warning = std::string(
          AvError(absl::StrCat(name, ": the packets stop after ", packets, " frames"), err)
              .message());
      break;
    }
    if (packet->stream_index == stream->index) {
      if (++packets > limits.max_frames) {
        return absl::ResourceExhaustedError(absl::StrCat(
            name, ": more than ", limits.max_frames, " frames (the daemon's video frame limit)"));
      }
      if (packet->pts != AV_NOPTS_VALUE) {
        index.pts.push_back(packet->pts);
        if ((packet->flags & AV_PKT_FLAG_KEY) != 0) index.keyframes.push_back(packet->pts);
      }
    }
    av_packet_unref(packet.get());
  }
  std::sort(index.pts.begin(), index.pts.end());
  std::sort(index.keyframes.begin(), index.keyframes.end());
  return index;
}

}  // namespace stoker::video
