// video_work.h for a worker built without FFmpeg (stoker-worker-images, the
// worker scripts/gpu-bundle.sh carries): every probe and clip fails
// UNAVAILABLE, which the daemon neither caches nor takes for the video's
// fault.
#include <algorithm>
#include <cstring>

#include "server/worker/video_work.h"

namespace stoker::worker {
namespace {

constexpr char kNoVideo[] =
    "this stoker-worker was built without video (stoker-worker-images, the GPU bundle's): "
    "run the full stoker-worker for video datasets";

template <size_t N>
void SayNoVideo(char (&out)[N]) {
  const size_t n = std::min(sizeof(kNoVideo) - 1, N - 1);
  std::memcpy(out, kNoVideo, n);
  out[n] = '\0';
}

}  // namespace

void ProbeVideo(const ProbeMsg&, int, ProbeResultMsg* result, std::vector<int64_t>* values) {
  values->clear();
  result->warning[0] = '\0';
  result->code = static_cast<uint32_t>(absl::StatusCode::kUnavailable);
  SayNoVideo(result->reason);
}

struct ClipWork::State {};

ClipWork::ClipWork() = default;
ClipWork::~ClipWork() = default;

void ClipWork::Trim(size_t) {}

void ClipWork::Run(const TaskMsg&, std::string_view, int, uint8_t*, ResultMsg* r) {
  r->code = static_cast<uint32_t>(absl::StatusCode::kUnavailable);
  SayNoVideo(r->reason);
}

}  // namespace stoker::worker
