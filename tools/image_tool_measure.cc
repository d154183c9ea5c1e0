#include "tools/image_tool_measure.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/decode/jpeg_decoder.h"
#include "server/image/pipeline.h"
#include "tools/image_tool_steps.h"
#include "stoker/ring_layout.h"

namespace stoker::image::tool {
namespace {

namespace fs = std::filesystem;

// A directory (searched recursively for the names ImageFolder lists:
// image_decoder.h's kImageFolderExtensions) or a text file with one
// path per line (first whitespace-separated field; relative to the list's
// folder when not found as given).
bool ListFiles(const std::string& where, std::vector<std::string>* files) {
  std::error_code ec;
  if (fs::is_directory(where, ec)) {
    for (auto it = fs::recursive_directory_iterator(where, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && HasImageFolderExtension(it->path().filename().string())) files->push_back(it->path());
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



// The natural-order (row, column) frequencies libjpeg-turbo's reduced M x M
// IDCTs read (jidctred.c; its SIMD versions read the same): 1x1 the DC only,
// 2x2 rows and columns 0 1 3 5 7, 4x4 all but row and column 4.
bool IdctReads(int m, int row, int col) {
  auto used = [m](int i) { return m == 1 ? i == 0 : m == 2 ? i <= 1 || i % 2 == 1 : i != 4; };
  return used(row) && used(col);
}

// Zigzag index -> natural-order index of an 8x8 block.
constexpr int kZigzag[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                             12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                             35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                             58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};



// One op's steps, appended to the baseline resize: step JSON as render
// --steps reads it (ParseSteps: the one definition of the format). $S is
// the output's side, $B a third of the image's area as a square's side
// ($T its offset).
struct OpCase {
  const char* name;
  const char* steps;
  bool float_nchw;  // the output erase runs on in the real recipe
};

const OpCase kOpCases[] = {
    {"grayscale", R"([{"kind":"grayscale"}])", false},
    {"brightness", R"([{"kind":"color_jitter","order":["brightness"],"brightness":1.3}])", false},
    {"contrast", R"([{"kind":"color_jitter","order":["contrast"],"contrast":1.3}])", false},
    {"saturation", R"([{"kind":"color_jitter","order":["saturation"],"saturation":1.3}])", false},
    {"hue", R"([{"kind":"color_jitter","order":["hue"],"hue":0.1}])", false},
    {"gaussian_blur_5x5", R"([{"kind":"gaussian_blur","kernel_size":[5,5],"sigma":1.0}])", false},
    {"pil_gaussian_blur_r1", R"([{"kind":"box_blur","radius":1.0}])", false},
    {"posterize", R"([{"kind":"posterize","bits":4}])", false},
    {"solarize", R"([{"kind":"solarize","threshold":128}])", false},
    {"invert", R"([{"kind":"invert"}])", false},
    {"autocontrast", R"([{"kind":"autocontrast"}])", false},
    {"equalize", R"([{"kind":"equalize"}])", false},
    {"sharpness", R"([{"kind":"sharpness","factor":1.5}])", false},
    {"affine_nearest",
     R"([{"kind":"affine","angle":17,"translate":[0,0],"scale":1,"shear":[10,0],)"
     R"("interpolation":"nearest","fill":[0,0,0]}])",
     false},
    {"affine_bilinear",
     R"([{"kind":"affine","angle":17,"translate":[0,0],"scale":1,"shear":[10,0],)"
     R"("interpolation":"bilinear","fill":[0,0,0]}])",
     false},
    {"rotate_nearest", R"([{"kind":"rotate","angle":17,"interpolation":"nearest","fill":[0,0,0]}])",
     false},
    {"rotate_bilinear",
     R"([{"kind":"rotate","angle":17,"interpolation":"bilinear","fill":[0,0,0]}])", false},
    {"affine_bilinear_tensor",
     R"([{"kind":"affine","angle":17,"translate":[0,0],"scale":1,"shear":[10,0],)"
     R"("interpolation":"bilinear","fill":[0,0,0],"tensor":true}])",
     false},
    {"erase_constant",
     R"([{"kind":"erase","top":$T,"left":$T,"height":$B,"width":$B,"value":[0,0,0]}])", true},
    {"erase_random",
     R"([{"kind":"erase","top":$T,"left":$T,"height":$B,"width":$B,"random":true,)"
     R"("noise_seed":"12345"}])",
     true},
    // AugMix (severity 3, width 3): the original and 3 chains of 1-3 ops
    // each, as AugMix draws them, in its tensor kernels.
    {"augmix_3_chains",
     R"([{"kind":"mix_begin","weight":0.4},)"
     R"({"kind":"mix_chain","weight":0.25},)"
     R"({"kind":"affine","angle":0,"translate":[0,0],"scale":1,"shear":[-16.7,0],)"
     R"("interpolation":"bilinear","fill":[0,0,0],"tensor":true},)"
     R"({"kind":"solarize","threshold":170,"tensor":true},)"
     R"({"kind":"mix_chain","weight":0.2},)"
     R"({"kind":"rotate","angle":-12,"interpolation":"bilinear","fill":[0,0,0],"tensor":true},)"
     R"({"kind":"posterize","bits":5,"tensor":true},)"
     R"({"kind":"equalize","tensor":true},)"
     R"({"kind":"mix_chain","weight":0.15},)"
     R"({"kind":"color_jitter","order":["contrast"],"contrast":1.4,"tensor":true},)"
     R"({"kind":"mix_end"}])",
     false},
};

std::string Substitute(std::string text, const std::string& key, uint32_t value) {
  const std::string v = std::to_string(value);
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + v.size())) {
    text.replace(at, key.size(), v);
  }
  return text;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 != 0) return hi;
  return (*std::max_element(v.begin(), v.begin() + mid) + hi) / 2;
}

// The output params: size x size, uint8 NHWC or float32 NCHW (p's ops are
// not run: ProcessSteps runs the steps given).
bool OpCostParams(uint32_t size, bool float_nchw, PipelineParams* p) {
  CommonOptions o;
  CLI::App app;  // for the `given` flags AddCommon records
  AddCommon(&app, &o);
  o.keywords = absl::StrCat(R"({"pipeline":"eval","size":[)", size, ",", size, R"(],"dtype":")",
                            float_nchw ? "float32" : "uint8", R"(","layout":")",
                            float_nchw ? "nchw" : "nhwc", "\"}");
  std::string described;
  return ResolvePipeline(o, p, &described);
}

}  // namespace

int Bench(const CommonOptions& common, const BenchOptions& o) {
  PipelineParams p;
  std::string described;
  if (!ResolvePipeline(common, &p, &described)) return 1;
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
    uint64_t path_images[kDecodePathCount] = {}, path_decode_ns[kDecodePathCount] = {};
    uint64_t progressive = 0;
  };
  std::vector<Counters> counters(threads);
  std::atomic<bool> stop{false};
  const uint64_t capacity = MaxSampleBytes(p);
  auto worker = [&](int t) {
    SampleProcessor processor;
    processor.set_skip_unneeded_scans(common.decode_path != "whole");
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
    // Every file once at least (its paths counted however loaded the
    // machine), then until --seconds.
    for (uint64_t n = t; n < paths.size() || !stop.load(std::memory_order_relaxed);
         n += threads) {
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
      c.decode_ns += result.decode_ns;
      c.augment_ns += result.augment_ns;
      if (!s.ok()) {
        ++c.errors;
        continue;
      }
      const auto path = static_cast<uint32_t>(result.decode_path);
      if (path < kDecodePathCount) {
        ++c.path_images[path];
        c.path_decode_ns[path] += result.decode_ns;
      }
      c.progressive += result.progressive ? 1 : 0;
    }
    if (ring != nullptr) ::munmap(ring, ring_samples * capacity);
  };
  // The process's CPU time over the loop (the files' loading left out).
  auto cpu_seconds = [] {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  };
  const double cpu_start = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double loop_cpu = cpu_seconds() - cpu_start;
  Counters sum;
  for (const Counters& c : counters) {
    sum.images += c.images;
    sum.errors += c.errors;
    sum.decode_ns += c.decode_ns;
    sum.augment_ns += c.augment_ns;
    sum.progressive += c.progressive;
    for (uint32_t k = 0; k < kDecodePathCount; ++k) {
      sum.path_images[k] += c.path_images[k];
      sum.path_decode_ns[k] += c.path_decode_ns[k];
    }
  }
  // Per decode path (pipeline.h DecodePath): samples and mean decode time.
  std::string by_path = "{";
  for (uint32_t k = 0; k < kDecodePathCount; ++k) {
    const uint64_t n = sum.path_images[k];
    absl::StrAppend(&by_path, k > 0 ? "," : "", "\"", DecodePathName(static_cast<DecodePath>(k)),
                    "\":{\"images\":", n, ",\"decode_ms\":",
                    n > 0 ? static_cast<double>(sum.path_decode_ns[k]) * 1e-6 / n : 0.0, "}");
  }
  by_path += "}";
  const double per = sum.images > 0 ? 1e-6 / static_cast<double>(sum.images) : 0;
  std::printf(
      "{\"images_per_s\":%.1f,\"threads\":%d,\"seconds\":%.3f,\"cpu_s\":%.3f,\"images\":%llu,"
      "\"errors\":%llu,"
      "\"files\":%zu,\"mean_file_bytes\":%.0f,\"decode_ms\":%.3f,\"augment_ms\":%.3f,"
      "\"progressive_images\":%llu,\"paths\":%s,\"pipeline\":%s,\"from_disk\":%s}\n",
      static_cast<double>(sum.images) / elapsed, threads, elapsed, loop_cpu,
      static_cast<unsigned long long>(sum.images), static_cast<unsigned long long>(sum.errors),
      paths.size(), o.from_disk ? 0.0 : static_cast<double>(total_bytes) / paths.size(),
      static_cast<double>(sum.decode_ns) * per, static_cast<double>(sum.augment_ns) * per,
      static_cast<unsigned long long>(sum.progressive), by_path.c_str(),
      JsonString(described).c_str(), o.from_disk ? "true" : "false");
  return 0;
}

int Scans(const std::string& input) {
  std::vector<uint8_t> jpeg;
  if (!ReadFile(input, &jpeg)) {
    std::cerr << "cannot read " << input << "\n";
    return 1;
  }
  std::vector<JpegScan> scans;
  if (!ListScans(jpeg.data(), jpeg.size(), 100000, &scans)) {
    std::cerr << input << ": not a progressive file the scan filter takes (jpeg_decoder.h)\n";
    return 1;
  }
  uint64_t scan_bytes = 0, skippable[3] = {0, 0, 0};
  for (const JpegScan& scan : scans) {
    std::string comps;
    for (int i = 0; i < scan.components; ++i)
      absl::StrAppend(&comps, i > 0 ? "," : "", scan.component[i]);
    std::printf(
        "{\"offset\":%zu,\"bytes\":%zu,\"components\":[%s],\"ss\":%d,\"se\":%d,\"ah\":%d,"
        "\"al\":%d}\n",
        scan.offset, scan.bytes, comps.c_str(), scan.ss, scan.se, scan.ah, scan.al);
    scan_bytes += scan.bytes;
    if (scan.ss == 0) continue;
    for (int k = 0, m = 1; k < 3; ++k, m *= 2) {
      bool read = false;
      for (int z = scan.ss; z <= scan.se; ++z) {
        read |= IdctReads(m, kZigzag[z] / 8, kZigzag[z] % 8);
      }
      if (!read) skippable[k] += scan.bytes;
    }
  }
  // Upper bounds: as if every component used that IDCT (libjpeg gives a
  // subsampled chroma a larger one).
  std::printf(
      "{\"file_bytes\":%zu,\"scans\":%zu,\"scan_bytes\":%llu,\"skippable_bytes_idct1x1\":%llu,"
      "\"skippable_bytes_idct2x2\":%llu,\"skippable_bytes_idct4x4\":%llu}\n",
      jpeg.size(), scans.size(), static_cast<unsigned long long>(scan_bytes),
      static_cast<unsigned long long>(skippable[0]), static_cast<unsigned long long>(skippable[1]),
      static_cast<unsigned long long>(skippable[2]));
  return 0;
}

int OpCost(const OpCostOptions& o) {
  std::vector<uint8_t> jpeg;
  if (!ReadFile(o.input, &jpeg)) {
    std::cerr << "cannot read " << o.input << "\n";
    return 1;
  }
  const uint32_t side =
      std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(o.size / std::sqrt(3.0))));
  const uint32_t offset = (o.size - side) / 2;
  const std::string baseline_json = absl::StrCat(R"([{"kind":"resize","height":)", o.size,
                                                 R"(,"width":)", o.size, R"(,"antialias":true}])");
  SampleSteps baseline;
  if (!ParseSteps(baseline_json, &baseline)) return 1;
  PipelineParams params[2];
  if (!OpCostParams(o.size, false, &params[0]) || !OpCostParams(o.size, true, &params[1])) return 1;
  const uint64_t capacity = std::max(MaxSampleBytes(params[0]), MaxSampleBytes(params[1]));
  std::vector<uint8_t> out(capacity);
  SampleProcessor processor;
  SampleResult result;
  auto run = [&](const PipelineParams& p, const SampleSteps& steps, double* ns) {
    const absl::Status s =
        processor.ProcessSteps(jpeg.data(), jpeg.size(), p, steps, out.data(), capacity, &result);
    if (!s.ok()) {
      std::cerr << o.input << ": " << s.ToString() << "\n";
      return false;
    }
    *ns = static_cast<double>(result.augment_ns);
    return true;
  };
  double total_us = 0;
  size_t ops = 0;
  for (const OpCase& c : kOpCases) {
    SampleSteps steps = baseline;
    SampleSteps extra;
    const std::string json = Substitute(Substitute(c.steps, "$B", side), "$T", offset);
    if (!ParseSteps(json, &extra)) {
      std::cerr << c.name << ": bad built-in steps\n";
      return 1;
    }
    for (uint32_t i = 0; i < extra.count; ++i) {
      extra.steps[i].op = 1;
      steps.steps[steps.count++] = extra.steps[i];
    }
    const PipelineParams& p = params[c.float_nchw ? 1 : 0];
    double ns = 0;
    // Warm-up: the buffers each list needs, the caches.
    for (int w = 0; w < 3; ++w) {
      if (!run(p, baseline, &ns) || !run(p, steps, &ns)) return 1;
    }
    std::vector<double> base_ns, op_ns;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t n = 0;; ++n) {
      if (o.iterations > 0
              ? n >= o.iterations
              : n >= 5 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                                  .count() >= o.seconds) {
        break;
      }
      // Alternate which runs first, so neither always follows the other.
      if (n % 2 == 0) {
        if (!run(p, baseline, &ns)) return 1;
        base_ns.push_back(ns);
        if (!run(p, steps, &ns)) return 1;
        op_ns.push_back(ns);
      } else {
        if (!run(p, steps, &ns)) return 1;
        op_ns.push_back(ns);
        if (!run(p, baseline, &ns)) return 1;
        base_ns.push_back(ns);
      }
    }
    const double base = Median(base_ns);
    for (double& v : op_ns) v -= base;
    const double us = Median(op_ns) / 1000;
    total_us += us;
    ++ops;
    std::printf("{\"op\":%s,\"us\":%.2f,\"iterations\":%zu,\"baseline_us\":%.2f,\"output\":%s}\n",
                JsonString(c.name).c_str(), us, op_ns.size(), base / 1000,
                c.float_nchw ? "\"float32 nchw\"" : "\"uint8 nhwc\"");
    std::fflush(stdout);
  }
  std::printf("{\"summary\":true,\"ops\":%zu,\"size\":%u,\"input\":%s,\"total_us\":%.2f}\n", ops,
              o.size, JsonString(o.input).c_str(), total_us);
  return 0;
}

}  // namespace stoker::image::tool
