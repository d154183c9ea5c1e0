// Test-only: videos written in process with FFmpeg's encoders, and
// temporary files, for the tests of server/video/ and of the worker's
// sandbox. Uses Catch2's REQUIRE (call from a test case).

#ifndef STOKER_SERVER_VIDEO_VIDEO_TEST_UTIL_H_
#define STOKER_SERVER_VIDEO_VIDEO_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "common/posix.h"

namespace stoker::video::testing {

inline constexpr int kVideoWidth = 160;
inline constexpr int kVideoHeight = 96;
inline constexpr int kSquare = 16;

// The column where frame k's bright square starts.
inline int SquareX(int k) { return (k * 5) % (kVideoWidth - kSquare); }

// Encodes `frames` frames of kVideoWidth x kVideoHeight with `codec_name`
// into a `format` container at `path`: a gradient with a bright square
// (kSquare px, rows 40..55) that moves 5 px a frame, GOPs of `gop` frames
// (no scene-cut keyframes), B-frames where the codec has them, 24 fps.
// Returns false (and the caller skips) only when this FFmpeg lacks the
// encoder.
bool WriteVideo(const std::string& path, const char* format, const char* codec_name, int frames,
                int gop, int b_frames);

// A temporary file path (nothing created), removed at the end of the test.
struct TempFile {
  explicit TempFile(const char* suffix);
  ~TempFile();
  UniqueFd Open() const;
  uint64_t Size() const;
  std::string path;
};

}  // namespace stoker::video::testing

#endif  // STOKER_SERVER_VIDEO_VIDEO_TEST_UTIL_H_
