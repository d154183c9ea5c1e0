// stoker-image-tool: the image pipeline without a daemon.
//
//   render  one sample of one file to a raw file (fidelity tests, debugging)
//   bench   N threads, each with its own SampleProcessor, decoding and
//           augmenting files held in memory (or read from disk) for S
//           seconds: the single-process limit the daemon should approach.
//
// Both print one JSON line on stdout; errors go to stderr with exit code 1.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "server/image/pipeline.h"
#include "stoker/ring_layout.h"

namespace stoker::image {
namespace {

namespace fs = std::filesystem;

bool ReadFile(const std::string& path, std::vector<uint8_t>* data) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return false;
  in.seekg(0, std::ios::beg);
  data->resize(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(data->data()), size)) return false;
  return true;
}

struct CommonOptions {
  std::string pipeline = "train";
  std::vector<uint32_t> size;
  uint32_t resize = 256;
  std::string interp = "antialias";
  std::string dtype = "uint8";
  std::string layout = "nhwc";
  bool exact = false;
  bool apply_exif = false;
  std::vector<float> scale;
  std::vector<float> ratio;
  float flip_prob = 0.5f;
};

void AddCommon(CLI::App* app, CommonOptions* o, bool with_decode) {
  app->add_option("--pipeline", o->pipeline,
                  "train | eval" + std::string(with_decode ? " | decode" : ""))
      ->check(with_decode ? CLI::IsMember({"train", "eval", "decode"})
                          : CLI::IsMember({"train", "eval"}));
  app->add_option("--size", o->size, "output H W (decode: 0 0 = any)")->expected(2);
  app->add_option("--resize", o->resize, "eval: shorter side before the center crop");
  app->add_option("--interp", o->interp, "antialias | bilinear")
      ->check(CLI::IsMember({"antialias", "bilinear"}));
  app->add_option("--dtype", o->dtype, "uint8 | float32 | float16")
      ->check(CLI::IsMember({"uint8", "float32", "float16"}));
  app->add_option("--layout", o->layout, "nhwc | nchw")->check(CLI::IsMember({"nhwc", "nchw"}));
  app->add_flag("--exact", o->exact, "never use DCT scaling");
  app->add_flag("--apply-exif", o->apply_exif,
                "turn the image as its EXIF orientation says (default: as coded, as "
                "torchvision's ImageFolder)");
  app->add_option("--scale", o->scale, "train: RandomResizedCrop scale MIN MAX")->expected(2);
  app->add_option("--ratio", o->ratio, "train: RandomResizedCrop ratio MIN MAX")->expected(2);
  app->add_option("--flip-prob", o->flip_prob, "train: horizontal flip probability");
}

PipelineParams ToParams(const CommonOptions& o) {
  PipelineParams p;
  p.kind = o.pipeline == "eval"     ? PipelineKind::kEval
           : o.pipeline == "decode" ? PipelineKind::kDecode
                                    : PipelineKind::kTrain;
  if (p.kind == PipelineKind::kDecode) p.out_height = p.out_width = 0;
  if (o.size.size() == 2) {
    p.out_height = o.size[0];
    p.out_width = o.size[1];
  }
  p.resize_size = o.resize;
  p.interpolation = o.interp == "bilinear" ? Interpolation::kBilinear : Interpolation::kAntialias;
  p.dtype = o.dtype == "float32"   ? ring::kFloat32
            : o.dtype == "float16" ? ring::kFloat16
                                   : ring::kUint8;
  p.layout = o.layout == "nchw" ? ring::kNCHW : ring::kNHWC;
  p.exact_decode = o.exact ? 1 : 0;
  p.apply_exif = o.apply_exif ? 1 : 0;
  if (o.scale.size() == 2) {
    p.scale_min = o.scale[0];
    p.scale_max = o.scale[1];
  }
  if (o.ratio.size() == 2) {
    p.ratio_min = o.ratio[0];
    p.ratio_max = o.ratio[1];
  }
  p.flip_prob = o.flip_prob;
  return p;
}

struct RenderOptions {
  std::string input;
  std::string out;
  std::vector<uint32_t> crop;
  int flip = 0;
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint64_t index = 0;
};

int Render(const CommonOptions& common, const RenderOptions& o) {
  const PipelineParams p = ToParams(common);
  if (absl::Status s = ValidateParams(p); !s.ok()) {
    std::cerr << "invalid parameters: " << s.message() << "\n";
    return 1;
  }
  std::vector<uint8_t> jpeg;
  if (!ReadFile(o.input, &jpeg)) {
    std::cerr << "cannot read " << o.input << "\n";
    return 1;
  }
  const uint64_t capacity = MaxSampleBytes(p);
  // Not value-initialized: untouched pages of a large decode buffer stay free.
  std::unique_ptr<uint8_t[]> out(new (std::nothrow) uint8_t[capacity]);
  if (!out) {
    std::cerr << "cannot allocate " << capacity << " bytes\n";
    return 1;
  }
  SampleProcessor processor;
  SampleResult result;
  absl::Status s;
  if (!o.crop.empty()) {
    if (p.kind != PipelineKind::kTrain) {
      std::cerr << "--crop needs --pipeline train\n";
      return 1;
    }
    CropBox box;
    box.top = o.crop[0];
    box.left = o.crop[1];
    box.height = o.crop[2];
    box.width = o.crop[3];
    s = processor.ProcessRegion(jpeg.data(), jpeg.size(), p, box, o.flip != 0, out.get(), capacity,
                                &result);
  } else {
    SampleKey key;
    key.seed = o.seed;
    key.epoch = o.epoch;
    key.dataset_index = o.index;
    s = processor.Process(jpeg.data(), jpeg.size(), p, key, out.get(), capacity, &result);
  }
  if (!s.ok()) {
    std::cerr << o.input << ": " << s.ToString() << "\n";
    return 1;
  }
  std::ofstream file(o.out, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(out.get()), static_cast<std::streamsize>(result.bytes));
  if (!file.good()) {
    std::cerr << "cannot write " << o.out << "\n";
    return 1;
  }
  std::printf("{\"height\":%u,\"width\":%u,\"channels\":%u,\"bytes\":%llu}\n", result.height,
              result.width, result.channels, static_cast<unsigned long long>(result.bytes));
  return 0;
}

bool IsJpegName(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg";
}

// A directory (searched recursively for .jpg/.jpeg) or a text file with one
// path per line (first whitespace-separated field; relative to the list's
// folder when not found as given).
bool ListFiles(const std::string& where, std::vector<std::string>* files) {
  std::error_code ec;
  if (fs::is_directory(where, ec)) {
    for (auto it = fs::recursive_directory_iterator(where, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && IsJpegName(it->path())) files->push_back(it->path());
    }
    std::sort(files->begin(), files->end());
    return !ec;
  }
  std::ifstream list(where);
  if (!list) return false;
  const fs::path dir = fs::path(where).parent_path();
  std::string line;
  while (std::getline(list, line)) {
    std::istringstream fields(line);
    std::string path;
    if (!(fields >> path) || path[0] == '#') continue;
    if (fs::path(path).is_relative() && !fs::exists(path, ec) && fs::exists(dir / path, ec)) {
      path = (dir / path).string();
    }
    files->push_back(path);
  }
  return true;
}

struct BenchOptions {
  std::string files;
  int threads = 1;
  double seconds = 5;
  bool from_disk = false;
  size_t max_files = 100000;
  // Write each output at the next place of a shared mapping this large (per
  // thread), as the daemon's workers write into a ring; 0: one buffer.
  uint64_t ring_mb = 0;
};

int Bench(const CommonOptions& common, const BenchOptions& o) {
  const PipelineParams p = ToParams(common);
  if (absl::Status s = ValidateParams(p); !s.ok()) {
    std::cerr << "invalid parameters: " << s.message() << "\n";
    return 1;
  }
  std::vector<std::string> paths;
  if (!ListFiles(o.files, &paths) || paths.empty()) {
    std::cerr << "no files in " << o.files << "\n";
    return 1;
  }
  if (paths.size() > o.max_files) paths.resize(o.max_files);
  std::vector<std::vector<uint8_t>> data;
  uint64_t total_bytes = 0;
  if (!o.from_disk) {
    data.resize(paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      if (!ReadFile(paths[i], &data[i])) {
        std::cerr << "cannot read " << paths[i] << "\n";
        return 1;
      }
      total_bytes += data[i].size();
    }
  }
  const int threads = std::max(1, o.threads);
  struct Counters {
    uint64_t images = 0, errors = 0, decode_ns = 0, augment_ns = 0;
  };
  std::vector<Counters> counters(threads);
  std::atomic<bool> stop{false};
  const uint64_t capacity = MaxSampleBytes(p);
  auto worker = [&](int t) {
    SampleProcessor processor;
    std::vector<uint8_t> out(capacity);
    uint8_t* ring = nullptr;
    uint64_t ring_samples = 0;
    if (o.ring_mb > 0) {
      ring_samples = std::max<uint64_t>(1, (o.ring_mb << 20) / capacity);
      void* m = ::mmap(nullptr, ring_samples * capacity, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (m != MAP_FAILED) ring = static_cast<uint8_t*>(m);
    }
    std::vector<uint8_t> file;
    Counters& c = counters[t];
    SampleResult result;
    for (uint64_t n = t; !stop.load(std::memory_order_relaxed); n += threads) {
      const size_t i = n % paths.size();
      const std::vector<uint8_t>* bytes = &file;
      if (o.from_disk) {
        if (!ReadFile(paths[i], &file)) file.clear();
      } else {
        bytes = &data[i];
      }
      SampleKey key;
      key.seed = 1;
      key.epoch = static_cast<uint32_t>(n / paths.size());
      key.dataset_index = i;
      uint8_t* dst = ring != nullptr ? ring + (c.images % ring_samples) * capacity : out.data();
      const absl::Status s =
          processor.Process(bytes->data(), bytes->size(), p, key, dst, capacity, &result);
      ++c.images;
      if (!s.ok()) ++c.errors;
      c.decode_ns += result.decode_ns;
      c.augment_ns += result.augment_ns;
    }
    if (ring != nullptr) ::munmap(ring, ring_samples * capacity);
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Counters sum;
  for (const Counters& c : counters) {
    sum.images += c.images;
    sum.errors += c.errors;
    sum.decode_ns += c.decode_ns;
    sum.augment_ns += c.augment_ns;
  }
  const double per = sum.images > 0 ? 1e-6 / static_cast<double>(sum.images) : 0;
  std::printf(
      "{\"images_per_s\":%.1f,\"threads\":%d,\"seconds\":%.3f,\"images\":%llu,\"errors\":%llu,"
      "\"files\":%zu,\"mean_file_bytes\":%.0f,\"decode_ms\":%.3f,\"augment_ms\":%.3f,"
      "\"pipeline\":\"%s\",\"from_disk\":%s}\n",
      static_cast<double>(sum.images) / elapsed, threads, elapsed,
      static_cast<unsigned long long>(sum.images), static_cast<unsigned long long>(sum.errors),
      paths.size(), o.from_disk ? 0.0 : static_cast<double>(total_bytes) / paths.size(),
      static_cast<double>(sum.decode_ns) * per, static_cast<double>(sum.augment_ns) * per,
      common.pipeline.c_str(), o.from_disk ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace stoker::image

int main(int argc, char** argv) {
  using stoker::image::BenchOptions;
  using stoker::image::CommonOptions;
  using stoker::image::RenderOptions;
  CLI::App app{"stoker-image-tool: the stoker image pipeline without the daemon"};
  app.require_subcommand(1);

  CommonOptions render_common;
  RenderOptions render;
  CLI::App* r = app.add_subcommand("render", "render one sample to a raw file");
  r->add_option("--input", render.input, "JPEG file")->required();
  r->add_option("--out", render.out, "raw output file")->required();
  AddCommon(r, &render_common, /*with_decode=*/true);
  r->add_option("--crop", render.crop, "train: forced crop TOP LEFT H W")->expected(4);
  r->add_option("--flip", render.flip, "with --crop: flip 0|1")->check(CLI::Range(0, 1));
  r->add_option("--seed", render.seed, "sample key: seed");
  r->add_option("--epoch", render.epoch, "sample key: epoch");
  r->add_option("--index", render.index, "sample key: dataset index");

  CommonOptions bench_common;
  BenchOptions bench;
  CLI::App* b = app.add_subcommand("bench", "single-process decode+augment throughput");
  b->add_option("--files", bench.files, "a folder of JPEGs or a list file")->required();
  AddCommon(b, &bench_common, /*with_decode=*/false);
  b->add_option("--threads", bench.threads, "worker threads")->check(CLI::Range(1, 1024));
  b->add_option("--seconds", bench.seconds, "duration")->check(CLI::Range(0.01, 86400.0));
  b->add_flag("--from-disk", bench.from_disk, "read each file from disk every time");
  b->add_option("--max-files", bench.max_files, "use at most this many files");
  b->add_option("--ring-mb", bench.ring_mb,
                "write outputs round a shared mapping of this many MiB per thread, as into a "
                "daemon's ring (0: one buffer that stays in cache)");

  CLI11_PARSE(app, argc, argv);
  if (r->parsed()) return stoker::image::Render(render_common, render);
  return stoker::image::Bench(bench_common, bench);
}
