#include "server/video/video_test_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "catch2/catch.hpp"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
}

namespace stoker::video::testing {

bool WriteVideo(const std::string& path, const char* format, const char* codec_name, int frames,
                int gop, int b_frames) {
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  if (codec == nullptr) return false;
  AVFormatContext* oc = nullptr;
  REQUIRE(avformat_alloc_output_context2(&oc, nullptr, format, path.c_str()) >= 0);
  AVStream* st = avformat_new_stream(oc, nullptr);
  AVCodecContext* enc = avcodec_alloc_context3(codec);
  enc->width = kVideoWidth;
  enc->height = kVideoHeight;
  enc->time_base = AVRational{1, 24};
  enc->framerate = AVRational{24, 1};
  enc->pix_fmt = codec->id == AV_CODEC_ID_MJPEG ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P;
  enc->gop_size = gop;
  enc->max_b_frames = b_frames;
  enc->flags |= AV_CODEC_FLAG_QSCALE;
  enc->global_quality = FF_QP2LAMBDA * 2;
  av_opt_set_int(enc->priv_data, "sc_threshold", 1000000000, 0);  // keyframes every `gop` only
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  REQUIRE(avcodec_open2(enc, codec, nullptr) >= 0);
  REQUIRE(avcodec_parameters_from_context(st->codecpar, enc) >= 0);
  st->time_base = enc->time_base;
  REQUIRE(avio_open(&oc->pb, path.c_str(), AVIO_FLAG_WRITE) >= 0);
  REQUIRE(avformat_write_header(oc, nullptr) >= 0);
  AVFrame* frame = av_frame_alloc();
  frame->format = enc->pix_fmt;
  frame->width = kVideoWidth;
  frame->height = kVideoHeight;
  REQUIRE(av_frame_get_buffer(frame, 0) >= 0);
  AVPacket* pkt = av_packet_alloc();
  auto drain = [&] {
    while (avcodec_receive_packet(enc, pkt) >= 0) {
      av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      REQUIRE(av_interleaved_write_frame(oc, pkt) >= 0);
    }
  };
  for (int k = 0; k < frames; ++k) {
    REQUIRE(av_frame_make_writable(frame) >= 0);
    for (int y = 0; y < kVideoHeight; ++y) {
      for (int x = 0; x < kVideoWidth; ++x) {
        const bool in_square = y >= 40 && y < 40 + kSquare && x >= SquareX(k) &&
                               x < SquareX(k) + kSquare;
        frame->data[0][y * frame->linesize[0] + x] =
            static_cast<uint8_t>(in_square ? 235 : 30 + (x + y) / 4);
      }
    }
    for (int y = 0; y < kVideoHeight / 2; ++y) {
      std::memset(frame->data[1] + y * frame->linesize[1], 128, kVideoWidth / 2);
      std::memset(frame->data[2] + y * frame->linesize[2], 128, kVideoWidth / 2);
    }
    frame->pts = k;
    REQUIRE(avcodec_send_frame(enc, frame) >= 0);
    drain();
  }
  REQUIRE(avcodec_send_frame(enc, nullptr) >= 0);
  drain();
  REQUIRE(av_write_trailer(oc) >= 0);
  av_packet_free(&pkt);
  av_frame_free(&frame);
  avcodec_free_context(&enc);
  avio_closep(&oc->pb);
  avformat_free_context(oc);
  return true;
}

TempFile::TempFile(const char* suffix) {
  char name[] = "/tmp/stoker-video-XXXXXX";
  int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  close(fd);
  unlink(name);
  path = std::string(name) + suffix;
}

TempFile::~TempFile() { unlink(path.c_str()); }

UniqueFd TempFile::Open() const { return UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC)); }

uint64_t TempFile::Size() const {
  struct stat s {};
  stat(path.c_str(), &s);
  return static_cast<uint64_t>(s.st_size);
}

}  // namespace stoker::video::testing
