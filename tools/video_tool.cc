// stoker-video-tool: videos without a daemon, for tests, the bench and
// looking at a file.
//
//   probe   FILE...  each file's index (server/video/video_probe.h): one
//           JSON line {"path", "pts", "keyframes", "fps", "rate",
//           "time_base", "width", "height", "codec", "container",
//           "warning"}, or {"path", "error"}
//   clips   FILE...  the clips of the files taken together as one dataset
//           (server/video/clips.h) under --frames-per-clip, --step,
//           --frame-rate: one JSON line {"videos": [[clip pts...] per clip]
//           per file, "order": the clip numbers --sampler (all, random,
//           uniform) visits in --epoch with --clips-per-video and --seed}
//   decode  FILE     one clip to a raw file (--out; [T, H, W, 3] uint8): the
//           frames with timestamps --pts (comma-separated), or clips --clip
//           (comma-separated: one decoder decodes them in that order, the
//           file holds one after another) of the file under the clip
//           flags; prints {"frames", "height", "width", "decoded_frames",
//           "seeks": one count a clip}. --repeat N decodes each N
//           times in one decoder, transforms included (and reports
//           "seconds", "max_rss_kb").
//           With --resize H,W and/or --crop H,W the clip goes through the
//           video preset's transforms (server/video/clip_ops.h) with the
//           given draw (--crop-at TOP,LEFT, else the center; --flip) and
//           the output is float32 in --layout (TCHW or CTHW), normalized
//           with the reference's Kinetics mean/std unless --no-normalize;
//           --uint8: uint8, not normalized (for Normalize on the device).
//   sweep   FILE     every clip of the file under the clip flags, in a
//           shuffled order (--seed), through one decoder (and the transforms
//           with --resize/--crop, as decode): {"clips", "failed",
//           "decoded_frames", "seconds", "rss_kb": [resident memory after
//           clip 1, 10, 100, 1000, ... and the last]}: memory that grows
//           with the clips decoded shows here.
//
// Errors go to stderr with exit code 1 (decode: a clip that fails prints
// {"error", "code"} on stdout and exits 2).

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json_text.h"
#include "common/posix.h"
#include "server/video/clip_decoder.h"
#include "server/video/clip_ops.h"
#include "server/video/clips.h"
#include "server/video/video_probe.h"
#include "server/image/ops/rng.h"

namespace stoker::video {
namespace {

struct Opened {
  UniqueFd fd;
  uint64_t size = 0;
};

absl::StatusOr<Opened> OpenFile(const std::string& path) {
  Opened o;
  o.fd = UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!o.fd.valid()) return PosixError(path, errno);
  struct stat st {};
  if (fstat(o.fd.get(), &st) != 0) return PosixError(path, errno);
  o.size = static_cast<uint64_t>(st.st_size);
  return o;
}

absl::StatusOr<VideoIndex> ProbeFile(const std::string& path) {
  absl::StatusOr<Opened> f = OpenFile(path);
  if (!f.ok()) return f.status();
  return Probe(f->fd.get(), 0, f->size, path);
}

std::string Ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? "," : "", v[i]);
  return out + "]";
}

int RunProbe(const std::vector<std::string>& files) {
  for (const std::string& path : files) {
    absl::StatusOr<VideoIndex> index = ProbeFile(path);
    if (!index.ok()) {
      std::printf("{\"path\":%s,\"error\":%s}\n", JsonString(path).c_str(),
                  JsonString(index.status().ToString()).c_str());
      continue;
    }
    std::printf(
        "{\"path\":%s,\"pts\":%s,\"keyframes\":%s,\"fps\":%s,\"rate\":[%d,%d],"
        "\"time_base\":[%d,%d],\"width\":%d,\"height\":%d,\"codec\":%s,\"container\":%s,"
        "\"warning\":%s}\n",
        JsonString(path).c_str(), Ints(index->pts).c_str(), Ints(index->keyframes).c_str(),
        DoubleJson(index->fps).c_str(), index->rate_num, index->rate_den, index->time_base_num,
        index->time_base_den, index->width, index->height, JsonString(index->codec).c_str(),
        JsonString(index->container).c_str(), JsonString(index->warning).c_str());
  }
  return 0;
}

struct ClipFlags {
  ClipOptions options;
  std::string sampler = "all";
  uint32_t clips_per_video = 0;
  uint64_t seed = 0;
  uint32_t epoch = 0;
};

void AddClipFlags(CLI::App* app, ClipFlags* f) {
  app->add_option("--frames-per-clip", f->options.frames_per_clip, "frames in a clip")
      ->capture_default_str();
  app->add_option("--step", f->options.step_between_clips, "frames between clip starts")
      ->capture_default_str();
  app->add_option("--frame-rate", f->options.frame_rate, "resample to this rate (0: none)")
      ->capture_default_str();
}

std::vector<int64_t> ClipPts(const VideoIndex& index, const VideoClipPlan& plan, uint64_t clip,
                             uint32_t frames) {
  std::vector<int64_t> pts;
  for (uint32_t j = 0; j < frames; ++j) pts.push_back(index.pts[plan.ClipFrame(clip, j)]);
  return pts;
}

struct TransformFlags {
  std::vector<uint32_t> resize;   // H, W
  std::vector<uint32_t> crop;     // H, W
  std::vector<uint32_t> crop_at;  // TOP, LEFT
  bool flip = false;
  bool no_normalize = false;
  bool uint8 = false;  // uint8 out, Normalize left to the device
  std::string layout = "CTHW";
  bool any() const { return !resize.empty() || !crop.empty(); }
};

int RunClips(const std::vector<std::string>& files, const ClipFlags& f) {
  if (absl::Status s = ValidateClipOptions(f.options); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 1;
  }
  std::vector<VideoIndex> indexes;
  std::vector<uint64_t> frames;
  std::vector<double> fps;
  for (const std::string& path : files) {
    absl::StatusOr<VideoIndex> index = ProbeFile(path);
    // A file that cannot be indexed has no clip (torchvision: empty pts).
    indexes.push_back(index.ok() ? *std::move(index) : VideoIndex{});
    frames.push_back(indexes.back().pts.size());
    fps.push_back(indexes.back().fps);
  }
  ClipIndex clips(frames, fps, f.options);
  std::string out = "{\"videos\":[";
  for (size_t v = 0; v < files.size(); ++v) {
    absl::StrAppend(&out, v ? "," : "", "[");
    for (uint64_t c = 0; c < clips.clips_of(v); ++c) {
      absl::StrAppend(&out, c ? "," : "",
                      Ints(ClipPts(indexes[v], clips.plan(v), c, f.options.frames_per_clip)));
    }
    absl::StrAppend(&out, "]");
  }
  ClipSampling sampling = ClipSampling::kAll;
  if (f.sampler == "random") sampling = ClipSampling::kRandom;
  if (f.sampler == "uniform") sampling = ClipSampling::kUniform;
  std::vector<uint64_t> order = SampleClips(clips, sampling, f.clips_per_video, f.seed, f.epoch);
  absl::StrAppend(&out, "],\"order\":[");
  for (size_t i = 0; i < order.size(); ++i) absl::StrAppend(&out, i ? "," : "", order[i]);
  absl::StrAppend(&out, "]}\n");
  std::fputs(out.c_str(), stdout);
  return 0;
}

// A clip that could not be decoded: {"error", "code"} on stdout, exit 2.
int PrintFailure(const absl::Status& s) {
  std::printf("{\"error\":%s,\"code\":%s}\n", JsonString(std::string(s.message())).c_str(),
              JsonString(absl::StatusCodeToString(s.code())).c_str());
  return 2;
}

// Opens and indexes `path`: 0, or the exit code after saying why.
int OpenIndexed(const std::string& path, Opened* file, VideoIndex* index) {
  absl::StatusOr<Opened> opened = OpenFile(path);
  if (!opened.ok()) {
    std::cerr << opened.status() << "\n";
    return 1;
  }
  *file = *std::move(opened);
  absl::StatusOr<VideoIndex> probed = Probe(file->fd.get(), 0, file->size, path);
  if (!probed.ok()) return PrintFailure(probed.status());
  *index = *std::move(probed);
  return 0;
}

// The clip through the preset's transforms: float32 in the layout asked.
// The clip through the preset: its bytes (float32, or uint8 with --uint8).
absl::StatusOr<std::string> Transform(const std::vector<uint8_t>& rgb, const ClipShape& shape,
                                      const TransformFlags& tf) {
  ClipTransform t;
  if (tf.resize.size() == 2) {
    t.resize_height = tf.resize[0];
    t.resize_width = tf.resize[1];
  }
  const uint32_t rh = t.resize_height != 0 ? t.resize_height : shape.height;
  const uint32_t rw = t.resize_width != 0 ? t.resize_width : shape.width;
  if (tf.crop.size() == 2) {
    t.crop_height = tf.crop[0];
    t.crop_width = tf.crop[1];
    t.crop_top = tf.crop_at.size() == 2 ? tf.crop_at[0] : CenterCropOffset(rh, t.crop_height);
    t.crop_left = tf.crop_at.size() == 2 ? tf.crop_at[1] : CenterCropOffset(rw, t.crop_width);
  }
  t.flip = tf.flip;
  t.normalize = !tf.no_normalize && !tf.uint8;
  t.layout = tf.layout == "TCHW" ? ClipLayout::kTCHW : ClipLayout::kCTHW;
  const size_t elements = ClipOutputElements(shape.frames, t, shape.height, shape.width);
  std::string out(elements * (tf.uint8 ? 1 : sizeof(float)), '\0');
  absl::Status s =
      tf.uint8 ? ApplyClipTransform(rgb.data(), shape.frames, shape.height, shape.width, t,
                                    reinterpret_cast<uint8_t*>(out.data()))
               : ApplyClipTransform(rgb.data(), shape.frames, shape.height, shape.width, t,
                                    reinterpret_cast<float*>(out.data()));
  if (!s.ok()) return s;
  return out;
}

int RunDecode(const std::string& path, const std::string& pts_text,
              const std::vector<int64_t>& clips, const ClipFlags& f, const TransformFlags& tf,
              const std::string& out_path, int repeat, int threads) {
  Opened file;
  VideoIndex index;
  if (int rc = OpenIndexed(path, &file, &index); rc != 0) return rc;
  // Each clip's timestamps, in the order given.
  std::vector<std::vector<int64_t>> wanted;
  if (!pts_text.empty()) {
    wanted.emplace_back();
    for (absl::string_view part : absl::StrSplit(pts_text, ',')) {
      int64_t p;
      if (!absl::SimpleAtoi(part, &p)) {
        std::cerr << "--pts: not an integer: " << std::string(part) << "\n";
        return 1;
      }
      wanted.back().push_back(p);
    }
  } else {
    VideoClipPlan plan(index.pts.size(), index.fps, f.options);
    for (int64_t clip : clips) {
      if (clip < 0 || static_cast<uint64_t>(clip) >= plan.clips()) {
        std::cerr << "--clip " << clip << ": the file has " << plan.clips() << " clips\n";
        return 1;
      }
      wanted.push_back(ClipPts(index, plan, static_cast<uint64_t>(clip), f.options.frames_per_clip));
    }
  }
  absl::StatusOr<std::unique_ptr<ClipDecoder>> decoder =
      ClipDecoder::Open(file.fd.get(), 0, file.size, path, VideoLimits{}, threads);
  if (!decoder.ok()) return PrintFailure(decoder.status());
  std::ofstream out;
  if (!out_path.empty()) out.open(out_path, std::ios::binary);
  ClipShape shape;
  uint64_t decoded = 0;
  std::string seeks = "[";
  double seconds = 0;
  for (size_t c = 0; c < wanted.size(); ++c) {
    const std::vector<int64_t>& pts = wanted[c];
    std::vector<uint8_t> rgb(pts.size() * static_cast<size_t>(std::max(index.width, 1)) *
                             std::max(index.height, 1) * 3);
    ClipDecodeStats stats;
    absl::Status s;
    std::string transformed;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < std::max(repeat, 1) && s.ok(); ++r) {
      s = (*decoder)->Decode(index, pts.data(), pts.size(), rgb.data(), rgb.size(), &shape,
                             &stats);
      if (s.ok() && tf.any()) {
        absl::StatusOr<std::string> t = Transform(rgb, shape, tf);
        if (!t.ok()) {
          std::cerr << t.status().message() << "\n";
          return 1;
        }
        transformed = *std::move(t);
      }
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) return PrintFailure(s);
    decoded += stats.decoded_frames;
    absl::StrAppend(&seeks, c ? "," : "", stats.seeks);
    if (out.is_open()) {
      if (tf.any()) {
        out.write(transformed.data(), static_cast<std::streamsize>(transformed.size()));
      } else {
        out.write(reinterpret_cast<const char*>(rgb.data()),
                  static_cast<std::streamsize>(size_t{shape.frames} * shape.height * shape.width * 3));
      }
    }
  }
  if (out.is_open() && !out.flush()) {
    std::cerr << out_path << ": cannot write\n";
    return 1;
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "{\"frames\":%u,\"height\":%u,\"width\":%u,\"decoded_frames\":%lu,\"seeks\":%s],"
      "\"seconds\":%s,\"max_rss_kb\":%ld}\n",
      shape.frames, shape.height, shape.width, static_cast<unsigned long>(decoded), seeks.c_str(),
      DoubleJson(seconds).c_str(), usage.ru_maxrss);
  return 0;
}

// Resident memory now, in KB (/proc/self/statm).
long ResidentKb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

int RunSweep(const std::string& path, const ClipFlags& f, const TransformFlags& tf,
             uint64_t seed) {
  Opened file;
  VideoIndex index;
  if (int rc = OpenIndexed(path, &file, &index); rc != 0) return rc;
  absl::StatusOr<std::unique_ptr<ClipDecoder>> decoder =
      ClipDecoder::Open(file.fd.get(), 0, file.size, path);
  if (!decoder.ok()) return PrintFailure(decoder.status());
  VideoClipPlan plan(index.pts.size(), index.fps, f.options);
  std::vector<uint64_t> order(plan.clips());
  std::iota(order.begin(), order.end(), uint64_t{0});
  KeyedRng rng(seed, 0, 0);
  Shuffle(order.data(), order.size(), rng);
  std::vector<uint8_t> rgb(size_t{f.options.frames_per_clip} * std::max(index.width, 1) *
                           std::max(index.height, 1) * 3);
  uint64_t failed = 0, decoded = 0;
  std::string rss = "[";
  uint64_t next_report = 1;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t k = 0; k < order.size(); ++k) {
    std::vector<int64_t> pts = ClipPts(index, plan, order[k], f.options.frames_per_clip);
    ClipShape shape;
    ClipDecodeStats stats;
    absl::Status s = (*decoder)->Decode(index, pts.data(), pts.size(), rgb.data(), rgb.size(),
                                        &shape, &stats);
    decoded += stats.decoded_frames;
    if (!s.ok()) {
      ++failed;
    } else if (tf.any() && !Transform(rgb, shape, tf).ok()) {
      ++failed;
    }
    if (k + 1 == next_report || k + 1 == order.size()) {
      absl::StrAppend(&rss, rss.size() > 1 ? "," : "", "[", k + 1, ",", ResidentKb(), "]");
      next_report *= 10;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"clips\":%zu,\"failed\":%lu,\"decoded_frames\":%lu,\"seconds\":%s,"
              "\"rss_kb\":%s]}\n",
              order.size(), static_cast<unsigned long>(failed),
              static_cast<unsigned long>(decoded), DoubleJson(seconds).c_str(), rss.c_str());
  return 0;
}

}  // namespace
}  // namespace stoker::video

int main(int argc, char** argv) {
  using namespace stoker::video;
  CLI::App app{"stoker-video-tool: videos without a daemon"};
  app.require_subcommand(1);

  std::vector<std::string> probe_files;
  CLI::App* probe = app.add_subcommand("probe", "each file's index, one JSON line each");
  probe->add_option("files", probe_files)->required();

  std::vector<std::string> clip_files;
  ClipFlags clip_flags;
  CLI::App* clips = app.add_subcommand("clips", "the clips of the files as one dataset");
  clips->add_option("files", clip_files)->required();
  AddClipFlags(clips, &clip_flags);
  clips->add_option("--sampler", clip_flags.sampler, "all, random or uniform")
      ->check(CLI::IsMember({"all", "random", "uniform"}));
  clips->add_option("--clips-per-video", clip_flags.clips_per_video, "the sampler's k");
  clips->add_option("--seed", clip_flags.seed, "random's seed");
  clips->add_option("--epoch", clip_flags.epoch, "random's epoch");

  std::string decode_file;
  std::string pts_text;
  std::vector<int64_t> clip;
  std::string out_path;
  int repeat = 1;
  int threads = 1;
  ClipFlags decode_flags;
  CLI::App* decode = app.add_subcommand("decode", "one clip to a raw [T, H, W, 3] file");
  decode->add_option("file", decode_file)->required();
  decode->add_option("--pts", pts_text, "the frames' timestamps, comma-separated");
  decode->add_option("--clip", clip, "the clip numbers under the clip flags (comma-separated: "
                     "decoded in that order by one decoder, written one after another)")
      ->delimiter(',');
  AddClipFlags(decode, &decode_flags);
  decode->add_option("--out", out_path, "the raw file to write");
  decode->add_option("--repeat", repeat, "decode the clip this many times");
  decode->add_option("--threads", threads, "the decoder's slice threads");
  TransformFlags transform_flags;
  decode->add_option("--resize", transform_flags.resize, "Resize to H,W (antialias=False)")
      ->delimiter(',')->expected(2);
  decode->add_option("--crop", transform_flags.crop, "crop H,W")->delimiter(',')->expected(2);
  decode->add_option("--crop-at", transform_flags.crop_at, "the crop's TOP,LEFT (else centered)")
      ->delimiter(',')->expected(2);
  decode->add_flag("--flip", transform_flags.flip, "flip every frame horizontally");
  decode->add_flag("--no-normalize", transform_flags.no_normalize, "leave values in [0, 1]");
  decode->add_flag("--uint8", transform_flags.uint8,
                   "uint8 out (nearest of value * 255), Normalize left to the device");
  decode->add_option("--layout", transform_flags.layout, "TCHW or CTHW")
      ->check(CLI::IsMember({"TCHW", "CTHW"}));

  std::string sweep_file;
  ClipFlags sweep_flags;
  TransformFlags sweep_transform;
  uint64_t sweep_seed = 0;
  CLI::App* sweep = app.add_subcommand("sweep", "every clip of a file through one decoder");
  sweep->add_option("file", sweep_file)->required();
  AddClipFlags(sweep, &sweep_flags);
  sweep->add_option("--seed", sweep_seed, "the clips' shuffled order");
  sweep->add_option("--resize", sweep_transform.resize, "Resize to H,W")->delimiter(',')->expected(2);
  sweep->add_option("--crop", sweep_transform.crop, "crop H,W")->delimiter(',')->expected(2);

  CLI11_PARSE(app, argc, argv);
  if (sweep->parsed()) return RunSweep(sweep_file, sweep_flags, sweep_transform, sweep_seed);
  if (probe->parsed()) return RunProbe(probe_files);
  if (clips->parsed()) return RunClips(clip_files, clip_flags);
  if (pts_text.empty() == clip.empty()) {
    std::cerr << "decode: give --pts or --clip (one of them)\n";
    return 1;
  }
  return RunDecode(decode_file, pts_text, clip, decode_flags, transform_flags, out_path, repeat,
                   threads);
}
