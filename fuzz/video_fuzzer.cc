// libFuzzer target: the video demuxer and decoder wrapper (server/video/:
// AvInput over a byte range, Probe, ClipDecoder) on arbitrary bytes: an
// index or an error, a clip or an error, never a crash, a hang, a write
// past the clip's room or an unbounded allocation.
//
// The first byte picks where the clip starts (in eighths of the video), the
// rest is the file, held in a memfd. FFmpeg itself is Debian's build
// (not instrumented): coverage guides the search through stoker's wrapper,
// and ASan still sees what FFmpeg does to memory stoker owns.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "server/video/clip_decoder.h"
#include "server/video/video_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t where = data[0];
  ++data;
  --size;
  const int fd = memfd_create("stoker_fuzz_video", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  stoker::video::VideoLimits limits;
  limits.max_decode_pixels = 1024 * 1024;
  limits.max_frames = 4096;
  limits.max_frames_per_clip = 64;
  absl::StatusOr<stoker::video::VideoIndex> index = stoker::video::Probe(fd, 0, size, "x", limits);
  if (index.ok() && !index->pts.empty()) {
    if (!std::is_sorted(index->pts.begin(), index->pts.end())) std::abort();
    auto decoder = stoker::video::ClipDecoder::Open(fd, 0, size, "x", limits);
    if (decoder.ok()) {
      const size_t n = index->pts.size();
      const size_t first = std::min(n - 1, (where % 8) * n / 8);
      const size_t count = std::min<size_t>(4, n - first);
      // Room for the clip at the size the index states; frames that turn
      // out larger must fail, not write past it.
      const uint64_t frame = uint64_t(std::max(index->width, 1)) * std::max(index->height, 1) * 3;
      std::vector<uint8_t> out(std::min<uint64_t>(count * frame, 64u << 20));
      stoker::video::ClipShape shape;
      absl::Status s = (*decoder)->Decode(*index, index->pts.data() + first, count, out.data(),
                                          out.size(), &shape);
      if (s.ok() && uint64_t{shape.frames} * shape.height * shape.width * 3 > out.size()) {
        std::abort();
      }
    }
  }
  close(fd);
  return 0;
}
