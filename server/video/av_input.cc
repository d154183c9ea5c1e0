#include "server/video/av_input.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
}

namespace stoker::video {

absl::Status AvError(const std::string& context, int averror) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(averror, text, sizeof(text));
  std::string message = context + ": " + text;
  if (averror == AVERROR(ENOMEM)) return absl::ResourceExhaustedError(message);
  if (averror == AVERROR_INVALIDDATA || averror == AVERROR_EOF || averror == AVERROR_EXTERNAL ||
      averror == AVERROR_BUG || averror == AVERROR_DECODER_NOT_FOUND ||
      averror == AVERROR_DEMUXER_NOT_FOUND || averror == AVERROR_PATCHWELCOME) {
    return absl::DataLossError(message);
  }
  if (averror == AVERROR(ENOENT)) return absl::NotFoundError(message);
  if (averror == AVERROR(EACCES) || averror == AVERROR(EPERM)) {
    return absl::PermissionDeniedError(message);
  }
  // Most other codes are demuxers' and decoders' ways of saying the bytes
  // are wrong (EIO from a short read past a truncated end, ERANGE, ...).
  return absl::DataLossError(message);
}

void QuietAvLog() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* keep = std::getenv("STOKER_AV_LOG");
    av_log_set_level(keep != nullptr && keep[0] == '1' ? AV_LOG_WARNING : AV_LOG_QUIET);
  });
}

// The byte range the AVIOContext reads, and where in it the demuxer is.
struct AvInput::Range {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t position = 0;
  AVIOContext* io = nullptr;

  static int Read(void* opaque, uint8_t* buf, int size) {
    auto* r = static_cast<Range*>(opaque);
    if (r->position >= r->length) return AVERROR_EOF;
    const uint64_t want = std::min<uint64_t>(static_cast<uint64_t>(size), r->length - r->position);
    ssize_t n;
    do {
      n = pread(r->fd, buf, want, static_cast<off_t>(r->offset + r->position));
    } while (n < 0 && errno == EINTR);
    if (n < 0) return AVERROR(errno);
    if (n == 0) return AVERROR_EOF;  // the file is shorter than its range
    r->position += static_cast<uint64_t>(n);
    return static_cast<int>(n);
  }

  static int64_t Seek(void* opaque, int64_t pos, int whence) {
    auto* r = static_cast<Range*>(opaque);
    whence &= ~AVSEEK_FORCE;
    int64_t target;
    switch (whence) {
      case AVSEEK_SIZE:
        return static_cast<int64_t>(r->length);
      case SEEK_SET:
        target = pos;
        break;
      case SEEK_CUR:
        target = static_cast<int64_t>(r->position) + pos;
        break;
      case SEEK_END:
        target = static_cast<int64_t>(r->length) + pos;
        break;
      default:
        return AVERROR(EINVAL);
    }
    if (target < 0) return AVERROR(EINVAL);
    r->position = static_cast<uint64_t>(target);  // past the end reads EOF
    return target;
  }
};

absl::StatusOr<std::unique_ptr<AvInput>> AvInput::Open(int fd, uint64_t offset, uint64_t length,
                                                       const std::string& name,
                                                       uint64_t max_decode_pixels) {
  QuietAvLog();
  std::unique_ptr<AvInput> in(new AvInput());
  in->name_ = name;
  in->range_ = std::make_unique<Range>();
  Range& r = *in->range_;
  r.fd = fd;
  r.offset = offset;
  r.length = length;
  constexpr int kBufferBytes = 64 * 1024;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferBytes));
  if (buffer == nullptr) return absl::ResourceExhaustedError(name + ": out of memory");
  r.io = avio_alloc_context(buffer, kBufferBytes, /*write_flag=*/0, &r, &Range::Read, nullptr,
                            &Range::Seek);
  if (r.io == nullptr) {
    av_free(buffer);
    return absl::ResourceExhaustedError(name + ": out of memory");
  }
  in->format_ = avformat_alloc_context();
  if (in->format_ == nullptr) return absl::ResourceExhaustedError(name + ": out of memory");
  in->format_->pb = r.io;
  // GENPTS as PyAV's av.open sets it: packets without a pts (AVI's B-frame
  // streams) get one from their dts, so the index lists the frames PyAV does.
  in->format_->flags |= AVFMT_FLAG_CUSTOM_IO | AVFMT_FLAG_GENPTS;
  // avformat_open_input frees the context on failure.
  int err = avformat_open_input(&in->format_, nullptr, nullptr, nullptr);
  if (err < 0) {
    in->format_ = nullptr;
    return AvError(name + ": not a video container FFmpeg reads", err);
  }
  // The frames find_stream_info decodes are bounded as ClipDecoder's are.
  // The sizes the container declares are kept: where the bounded decoder
  // refused every frame, they are the sizes PickVideo checks.
  std::vector<std::pair<int, int>> declared;
  for (unsigned i = 0; i < in->format_->nb_streams; ++i) {
    const AVCodecParameters* par = in->format_->streams[i]->codecpar;
    declared.emplace_back(par->width, par->height);
  }
  std::vector<AVDictionary*> options(in->format_->nb_streams, nullptr);
  if (max_decode_pixels != 0) {
    for (AVDictionary*& o : options) {
      av_dict_set_int(&o, "max_pixels",
                      static_cast<int64_t>(std::min<uint64_t>(max_decode_pixels, INT_MAX)), 0);
    }
  }
  err = avformat_find_stream_info(in->format_, options.empty() ? nullptr : options.data());
  for (AVDictionary*& o : options) av_dict_free(&o);
  // The end of the file before a frame (a video stream without packets) is
  // a video of no frames, which yields no clip, as in torchvision; other
  // failures are the file's.
  if (err < 0 && err != AVERROR_EOF) {
    return AvError(name + ": reading the streams' parameters", err);
  }
  for (unsigned i = 0; i < declared.size() && i < in->format_->nb_streams; ++i) {
    AVCodecParameters* par = in->format_->streams[i]->codecpar;
    if (par->width <= 0 || par->height <= 0) {
      par->width = declared[i].first;
      par->height = declared[i].second;
    }
  }
  if (absl::Status s = in->PickVideo(max_decode_pixels); !s.ok()) return s;
  return in;
}

absl::Status AvInput::PickVideo(uint64_t max_decode_pixels) {
  for (unsigned i = 0; i < format_->nb_streams; ++i) {
    if (format_->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
      video_ = format_->streams[i];
      break;
    }
  }
  if (video_ == nullptr) {
    return absl::FailedPreconditionError(name_ +
                                         ": no video stream (audio only, or no stream at all)");
  }
  const AVCodecParameters* par = video_->codecpar;
  if (avcodec_find_decoder(par->codec_id) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": no decoder for its codec (", avcodec_get_name(par->codec_id),
        ") in this FFmpeg"));
  }
  if (max_decode_pixels != 0 && par->width > 0 && par->height > 0 &&
      static_cast<uint64_t>(par->width) * static_cast<uint64_t>(par->height) > max_decode_pixels) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": frames of ", par->width, "x", par->height, " are over ",
                     max_decode_pixels, " pixels (the daemon's max_decode_pixels)"));
  }
  for (unsigned i = 0; i < format_->nb_streams; ++i) {
    if (format_->streams[i] != video_) format_->streams[i]->discard = AVDISCARD_ALL;
  }
  return absl::OkStatus();
}

AvInput::~AvInput() {
  if (format_ != nullptr) avformat_close_input(&format_);
  if (range_ != nullptr && range_->io != nullptr) {
    av_freep(&range_->io->buffer);
    avio_context_free(&range_->io);
  }
}

}  // namespace stoker::video
