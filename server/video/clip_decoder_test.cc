#include "server/video/clip_decoder.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/posix.h"
#include "server/video/video_probe.h"
#include "server/video/video_test_util.h"

namespace stoker::video {
namespace {

using testing::kSquare;
using testing::kVideoHeight;
using testing::kVideoWidth;
using testing::SquareX;
using testing::TempFile;
using testing::WriteVideo;
constexpr int kWidth = kVideoWidth;
constexpr int kHeight = kVideoHeight;

// The column where the square of a decoded RGB frame starts: the first
// bright pixel on the square's middle row.
int FoundSquareX(const uint8_t* rgb) {
  const uint8_t* row = rgb + size_t{48} * kWidth * 3;
  for (int x = 0; x < kWidth; ++x) {
    if (row[3 * x] > 200) return x;
  }
  return -1;
}

struct Clip {
  absl::Status status;
  std::vector<uint8_t> rgb;
  ClipShape shape;
  ClipDecodeStats stats;
};

// A video written for one test, opened and indexed.
struct TestVideo {
  TestVideo(const char* suffix, const char* format, const char* codec, int frames, int gop,
            int b_frames)
      : file(suffix) {
    REQUIRE(WriteVideo(file.path, format, codec, frames, gop, b_frames));
    fd = file.Open();
    absl::StatusOr<VideoIndex> probed = Probe(fd.get(), 0, file.Size(), file.path);
    REQUIRE(probed.ok());
    index = *std::move(probed);
  }
  std::unique_ptr<ClipDecoder> Decoder(const VideoLimits& limits = {}) {
    absl::StatusOr<std::unique_ptr<ClipDecoder>> d =
        ClipDecoder::Open(fd.get(), 0, file.Size(), file.path, limits);
    REQUIRE(d.ok());
    return *std::move(d);
  }
  TempFile file;
  UniqueFd fd;
  VideoIndex index;
};

Clip DecodeClip(ClipDecoder& d, const VideoIndex& index, std::vector<int64_t> pts,
                size_t capacity = 0) {
  Clip c;
  if (capacity == 0) capacity = pts.size() * kWidth * kHeight * 3;
  c.rgb.assign(capacity + 64, 0xAB);  // 64 guard bytes
  c.status = d.Decode(index, pts.data(), pts.size(), c.rgb.data(), capacity, &c.shape, &c.stats);
  return c;
}

TEST_CASE("probe lists every frame's pts and the keyframes without decoding") {
  TestVideo v(".mp4", "mp4", "mpeg4", 60, 12, 2);
  const VideoIndex* index = &v.index;
  CHECK(index->pts.size() == 60);
  // Keyframes every 12 frames (the encoder ends on one more: its last
  // frame, with no B-frame after it, is coded as an I-frame).
  std::vector<size_t> at;
  for (int64_t k : index->keyframes) {
    at.push_back(std::lower_bound(index->pts.begin(), index->pts.end(), k) - index->pts.begin());
  }
  CHECK(at == std::vector<size_t>{0, 12, 24, 36, 48, 59});
  // mp4's average rate counts the muxed duration (B-frames shift it): near
  // 24, exactly PyAV's (tests/test_video.py).
  CHECK(index->fps == Approx(24.0).epsilon(0.05));
  CHECK(index->width == kWidth);
  CHECK(index->height == kHeight);
  CHECK(index->codec == "mpeg4");
  CHECK(index->warning.empty());
  for (size_t k = 1; k < index->pts.size(); ++k) CHECK(index->pts[k] > index->pts[k - 1]);
}

TEST_CASE("a clip is exactly its frames, wherever in the GOP it starts") {
  TestVideo v(".mp4", "mp4", "mpeg4", 60, 12, 2);
  const VideoIndex* index = &v.index;
  std::unique_ptr<ClipDecoder> d = v.Decoder();
  // The whole video from its start: the reference the clips are cut from.
  Clip all = DecodeClip(*d, *index, index->pts);
  REQUIRE(all.status.ok());
  REQUIRE(all.shape.frames == 60);
  const size_t frame_bytes = size_t{kWidth} * kHeight * 3;
  for (int k = 0; k < 60; ++k) CHECK(FoundSquareX(all.rgb.data() + k * frame_bytes) == SquareX(k));
  // Clips starting on a keyframe, just after one, just before one, in any
  // order (the decoder seeks back and forth).
  for (int first : {17, 0, 36, 11, 23, 50, 13}) {
    std::vector<int64_t> pts(index->pts.begin() + first, index->pts.begin() + first + 8);
    Clip c = DecodeClip(*d, *index, pts);
    INFO("clip from frame " << first);
    REQUIRE(c.status.ok());
    CHECK(c.shape.frames == 8);
    CHECK(c.shape.height == kHeight);
    CHECK(c.shape.width == kWidth);
    CHECK(std::memcmp(c.rgb.data(), all.rgb.data() + first * frame_bytes, 8 * frame_bytes) == 0);
    // From the keyframe at or before the clip (or on from the clip before,
    // when that is closer), never more than a GOP and the clip.
    CHECK(c.stats.seeks <= 1);
    CHECK(c.stats.decoded_frames <= 12 + 8 + 2);
    CHECK(c.rgb[8 * frame_bytes] == 0xAB);  // nothing past the clip
  }
  // A video's clips in order: after the first, each goes on from where the
  // last ended, without a seek, and every frame is decoded once.
  {
    uint32_t seeks = 0, decoded = 0;
    for (int first = 0; first + 8 <= 60; first += 8) {
      std::vector<int64_t> pts(index->pts.begin() + first, index->pts.begin() + first + 8);
      Clip c = DecodeClip(*d, *index, pts);
      INFO("clip from frame " << first);
      REQUIRE(c.status.ok());
      CHECK(std::memcmp(c.rgb.data(), all.rgb.data() + first * frame_bytes, 8 * frame_bytes) == 0);
      if (first > 0) CHECK(c.stats.seeks == 0);
      seeks += c.stats.seeks;
      decoded += c.stats.decoded_frames;
    }
    CHECK(seeks == 1);
    CHECK(decoded <= 56 + 2);
    // The last clip ended at the stream's end: the next one seeks.
    std::vector<int64_t> last(index->pts.end() - 4, index->pts.end());
    Clip end = DecodeClip(*d, *index, last);
    REQUIRE(end.status.ok());
    std::vector<int64_t> again(index->pts.begin() + 40, index->pts.begin() + 44);
    Clip back = DecodeClip(*d, *index, again);
    REQUIRE(back.status.ok());
    CHECK(back.stats.seeks == 1);
    CHECK(std::memcmp(back.rgb.data(), all.rgb.data() + 40 * frame_bytes, 4 * frame_bytes) == 0);
  }
  // A clip of every third frame: the frames between are not wanted, and
  // those no frame references (the B-frames) are skipped, not decoded.
  {
    std::vector<int64_t> pts;
    for (int k = 13; k <= 46; k += 3) pts.push_back(index->pts[k]);
    Clip c = DecodeClip(*d, *index, pts);
    REQUIRE(c.status.ok());
    for (size_t j = 0; j < pts.size(); ++j) {
      CHECK(std::memcmp(c.rgb.data() + j * frame_bytes, all.rgb.data() + (13 + 3 * j) * frame_bytes,
                        frame_bytes) == 0);
    }
    CHECK(c.stats.decoded_frames < 46 - 12 + 1);  // from the keyframe at 12
  }
  // Resampled clips skip and repeat frames.
  std::vector<int64_t> pts = {index->pts[20], index->pts[20], index->pts[22], index->pts[25]};
  Clip c = DecodeClip(*d, *index, pts);
  REQUIRE(c.status.ok());
  CHECK(std::memcmp(c.rgb.data(), all.rgb.data() + 20 * frame_bytes, frame_bytes) == 0);
  CHECK(std::memcmp(c.rgb.data() + frame_bytes, all.rgb.data() + 20 * frame_bytes, frame_bytes) == 0);
  CHECK(std::memcmp(c.rgb.data() + 2 * frame_bytes, all.rgb.data() + 22 * frame_bytes, frame_bytes) == 0);
  CHECK(std::memcmp(c.rgb.data() + 3 * frame_bytes, all.rgb.data() + 25 * frame_bytes, frame_bytes) == 0);
}

TEST_CASE("a clip request carries what decoding needs, without the index") {
  TestVideo v(".mp4", "mp4", "mpeg4", 60, 12, 2);
  const VideoIndex& index = v.index;
  std::vector<int64_t> pts(index.pts.begin() + 30, index.pts.begin() + 34);
  ClipRequest r = MakeClipRequest(index, pts.data(), pts.size());
  CHECK(r.first_frame == 30);
  CHECK(r.last_frame == 33);
  CHECK(r.has_keyframe);
  CHECK(r.keyframe_pts == index.pts[24]);
  CHECK(r.keyframe_frame == 24);
  CHECK(r.has_earlier_keyframe);
  CHECK(r.earlier_keyframe_pts == index.pts[12]);
  // A request copied field by field (as a task crosses to a worker) decodes
  // what the index form decodes.
  std::vector<int64_t> carried = pts;
  ClipRequest copy = r;
  copy.pts = carried.data();
  std::unique_ptr<ClipDecoder> a = v.Decoder();
  std::unique_ptr<ClipDecoder> b = v.Decoder();
  const size_t bytes = pts.size() * kWidth * kHeight * 3;
  std::vector<uint8_t> x(bytes), y(bytes);
  ClipShape sx, sy;
  REQUIRE(a->Decode(index, pts.data(), pts.size(), x.data(), bytes, &sx).ok());
  REQUIRE(b->Decode(copy, y.data(), bytes, &sy).ok());
  CHECK(x == y);
  // The first GOP's clip has no earlier keyframe.
  ClipRequest early = MakeClipRequest(index, index.pts.data() + 3, 2);
  CHECK((early.has_keyframe && early.keyframe_frame == 0 && !early.has_earlier_keyframe));
}

TEST_CASE("a video inside a larger file is read from its byte range") {
  TempFile f(".mkv");
  REQUIRE(WriteVideo(f.path, "matroska", "mjpeg", 20, 1, 0));
  std::vector<uint8_t> video(f.Size());
  {
    UniqueFd fd = f.Open();
    REQUIRE(pread(fd.get(), video.data(), video.size(), 0) == static_cast<ssize_t>(video.size()));
  }
  TempFile shard(".tar");
  {
    UniqueFd out(open(shard.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    const std::string before(1536, 'x');  // what lies before the member
    const std::string after(4096, 'y');   // and after it
    REQUIRE(write(out.get(), before.data(), before.size()) == 1536);
    REQUIRE(write(out.get(), video.data(), video.size()) == static_cast<ssize_t>(video.size()));
    REQUIRE(write(out.get(), after.data(), after.size()) == 4096);
  }
  UniqueFd fd = shard.Open();
  absl::StatusOr<VideoIndex> index = Probe(fd.get(), 1536, video.size(), "shard.tar:v.mkv");
  REQUIRE(index.ok());
  CHECK(index->pts.size() == 20);
  CHECK(index->codec == "mjpeg");
  CHECK(index->keyframes.size() == 20);
  absl::StatusOr<std::unique_ptr<ClipDecoder>> d =
      ClipDecoder::Open(fd.get(), 1536, video.size(), "shard.tar:v.mkv");
  REQUIRE(d.ok());
  std::vector<int64_t> pts(index->pts.begin() + 12, index->pts.begin() + 16);
  Clip c = DecodeClip(**d, *index, pts);
  REQUIRE(c.status.ok());
  const size_t frame_bytes = size_t{kWidth} * kHeight * 3;
  for (int k = 0; k < 4; ++k) CHECK(FoundSquareX(c.rgb.data() + k * frame_bytes) == SquareX(12 + k));
}

TEST_CASE("a clip's bounds are kept: room, frame budget, frame size") {
  TestVideo v(".mp4", "mp4", "mpeg4", 60, 30, 2);
  const VideoIndex* index = &v.index;
  std::vector<int64_t> pts(index->pts.begin() + 25, index->pts.begin() + 29);
  const size_t frame_bytes = size_t{kWidth} * kHeight * 3;
  {
    std::unique_ptr<ClipDecoder> d = v.Decoder();
    Clip c = DecodeClip(*d, *index, pts, 3 * frame_bytes);
    CHECK(c.status.code() == absl::StatusCode::kResourceExhausted);
    CHECK(c.status.message().find("room") != std::string::npos);
    CHECK(c.rgb[3 * frame_bytes] == 0xAB);
    // The decoder goes on to the next clip.
    CHECK(DecodeClip(*d, *index, pts).status.ok());
  }
  {
    VideoLimits tight;
    tight.max_frames_per_clip = 10;  // the clip is 25 frames past its keyframe
    std::unique_ptr<ClipDecoder> d = v.Decoder(tight);
    Clip c = DecodeClip(*d, *index, pts);
    CHECK(c.status.code() == absl::StatusCode::kResourceExhausted);
    CHECK(c.status.message().find("frame budget") != std::string::npos);
  }
  {
    // Packets read are bounded too: a clip 25 packets past its keyframe,
    // most of them B-frames the clip skips, against a budget of 2 * 8 + 4.
    VideoLimits tight;
    tight.max_frames_per_clip = 8;
    std::unique_ptr<ClipDecoder> d = v.Decoder(tight);
    Clip c = DecodeClip(*d, *index, pts);
    CHECK(c.status.code() == absl::StatusCode::kResourceExhausted);
    CHECK(c.status.message().find("packets read") != std::string::npos);
    VideoLimits enough;
    enough.max_frames_per_clip = 40;
    std::unique_ptr<ClipDecoder> e = v.Decoder(enough);
    Clip ok = DecodeClip(*e, *index, pts);
    REQUIRE(ok.status.ok());
    CHECK(ok.stats.packets >= 29);
    CHECK(ok.stats.packets <= 2 * 40 + 4);
  }
  {
    // Frames over max_decode_pixels, their size stated only in the
    // bitstream (MPEG-4 in MP4): the bounded decoder refuses each, and the
    // clip fails by name; nothing of their size is allocated.
    VideoLimits small;
    small.max_decode_pixels = 100 * 100;
    absl::StatusOr<VideoIndex> unknown = Probe(v.fd.get(), 0, v.file.Size(), v.file.path, small);
    REQUIRE(unknown.ok());
    CHECK(unknown->width == 0);
    std::unique_ptr<ClipDecoder> d = v.Decoder(small);
    Clip c = DecodeClip(*d, *index, pts);
    CHECK(c.status.code() == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("a container stating frames over max_decode_pixels is refused before decoding") {
  TestVideo v(".mkv", "matroska", "mpeg4", 10, 5, 0);  // Matroska states 160x96
  VideoLimits small;
  small.max_decode_pixels = 100 * 100;
  absl::StatusOr<VideoIndex> refused = Probe(v.fd.get(), 0, v.file.Size(), v.file.path, small);
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.status().message().find("160x96") != std::string::npos);
  CHECK(ClipDecoder::Open(v.fd.get(), 0, v.file.Size(), v.file.path, small).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("a truncated video keeps the frames before its end, and clips past it fail by name") {
  TempFile f(".mkv");
  REQUIRE(WriteVideo(f.path, "matroska", "mpeg4", 48, 12, 2));
  const uint64_t half = f.Size() / 2;
  UniqueFd fd = f.Open();
  absl::StatusOr<VideoIndex> index = Probe(fd.get(), 0, half, f.path);
  REQUIRE(index.ok());
  CHECK(index->pts.size() > 5);
  CHECK(index->pts.size() < 48);
  // A clip named from the whole file's index runs past the truncated end.
  absl::StatusOr<VideoIndex> whole = Probe(fd.get(), 0, f.Size(), f.path);
  REQUIRE(whole.ok());
  absl::StatusOr<std::unique_ptr<ClipDecoder>> d = ClipDecoder::Open(fd.get(), 0, half, f.path);
  REQUIRE(d.ok());
  std::vector<int64_t> past(whole->pts.end() - 8, whole->pts.end());
  Clip c = DecodeClip(**d, *whole, past);
  CHECK(c.status.code() == absl::StatusCode::kDataLoss);
  CHECK(c.status.message().find("did not decode") != std::string::npos);
  // The frames that are there still decode.
  std::vector<int64_t> early(index->pts.begin(), index->pts.begin() + 4);
  CHECK(DecodeClip(**d, *index, early).status.ok());
}

TEST_CASE("bytes that are no video, and a file without a video stream, are named errors") {
  TempFile junk(".mp4");
  {
    UniqueFd out(open(junk.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    std::string bytes(5000, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7919) >> 3);
    REQUIRE(write(out.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  }
  UniqueFd fd = junk.Open();
  absl::StatusOr<VideoIndex> index = Probe(fd.get(), 0, junk.Size(), "junk.mp4");
  CHECK(index.status().code() == absl::StatusCode::kDataLoss);
  CHECK(index.status().message().find("junk.mp4") != std::string::npos);
  CHECK(Probe(fd.get(), 0, 0, "empty.mp4").status().code() == absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stoker::video
