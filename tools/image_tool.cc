// stoker-image-tool: the image pipeline without a daemon.
//
//   render  one sample of one file (any format stoker reads) to a raw file (fidelity tests,
//           debugging); its line names the format, decode path and DCT scale;
//           --steps-out writes the steps it drew, --steps runs given ones
//   bench   N threads, each with its own SampleProcessor, decoding and
//           augmenting files held in memory (or read from disk) for S
//           seconds: the single-process limit the daemon should approach.
//   draw    the steps drawn for dataset indices 0..N-1 of an image size, one
//           JSON line each (statistical tests of the sampling rules)
//   scans   the scans of a progressive file (jpeg_decoder.h ListScans) and
//           how many bytes of AC scans a reduced M x M IDCT would let a
//           decoder skip (M = 1, 2, 4: the coefficients each reads)
//   labels  a mask (a single-channel PNG: palette indices or gray values)
//           through given steps (--steps JSON, as render --steps-out writes
//           them) as labels.h moves a mask with its image, to a raw file of
//           its values (1 or 2 bytes each, host order); prints its shape
//   opcost  each op's cost in microseconds per --size x --size image (224):
//           for each op, ProcessSteps of [resize to size x size, antialias]
//           (the baseline) and of the baseline + that op's steps with
//           fixed typical parameters (built-in step JSON, kOpCases), run
//           alternately; one line {"op", "us", "iterations", ...} each, us =
//           median over iterations of (augment_ns with the op) - (median
//           augment_ns of the baseline): decode is excluded (augment_ns has
//           none). Output uint8 NHWC, float32 NCHW for the erase rows (as
//           the recipes' RandomErasing), then a summary line. --seconds per
//           op (1.5) or --iterations pairs per op.
//
// The pipeline comes from keywords, as every front end gives it
// (pipeline/pipeline_spec.h: SpecFromKeywordsJson -> Effective, then
// pipeline/lower_pipeline.h): --keywords JSON and --ops JSON, and the flags
// --pipeline --size --resize --interp --dtype --layout --exact --apply-exif
// --scale --ratio --flip-prob, each the keyword of its name. No default
// lives here. --decode-path whole (render, bench; for tests and
// measurements) decodes every file whole, never skipping the scans a DCT
// scale does not read (pipeline.h DecodePath); auto, the default, is what
// the daemon does. render's line and bench's "paths" say which path ran.
//
// Steps as JSON: tools/image_tool_steps.h.
//
// Each prints JSON on stdout; errors go to stderr with exit code 1.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/image/decode/decode_memory.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/decode/jpeg_decoder.h"
#include "server/image/ops/labels.h"
#include "server/image/ops/ops.h"
#include "server/image/pipeline.h"
#include "server/image/ops/policy.h"
#include "pipeline/lower_pipeline.h"
#include "tools/image_tool_steps.h"
#include "pipeline/pipeline_spec.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::image {
namespace {

namespace fs = std::filesystem;
namespace pb = google::protobuf;

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
  std::string pipeline;
  std::vector<uint32_t> size;
  uint32_t resize = 0;
  std::string interp;
  std::string dtype;
  std::string layout;
  bool exact = false;
  bool apply_exif = false;
  std::vector<float> scale;
  std::vector<float> ratio;
  float flip_prob = 0;
  std::string keywords;
  std::string ops;
  std::string decode_path = "auto";  // not a keyword: auto | whole
  // Which of the flags were given: only those become keywords.
  std::map<std::string, CLI::Option*> given;
};

void AddCommon(CLI::App* app, CommonOptions* o) {
  auto& g = o->given;
  g["pipeline"] =
      app->add_option("--pipeline", o->pipeline, "keyword pipeline: train | eval | decode");
  g["size"] = app->add_option("--size", o->size, "keyword size: output H W (decode: 0 0 = any)")
                  ->expected(2);
  g["resize_size"] = app->add_option("--resize", o->resize, "keyword resize_size (eval)");
  g["antialias"] =
      app->add_option("--interp", o->interp, "antialias | bilinear: keyword antialias true | false")
          ->check(CLI::IsMember({"antialias", "bilinear"}));
  g["dtype"] = app->add_option("--dtype", o->dtype, "keyword dtype: uint8 | float32 | float16");
  g["layout"] = app->add_option("--layout", o->layout, "keyword layout: nhwc | nchw");
  g["exact_decode"] = app->add_flag("--exact", o->exact, "keyword exact_decode: never DCT-scale");
  g["apply_exif_orientation"] =
      app->add_flag("--apply-exif", o->apply_exif,
                    "keyword apply_exif_orientation: turn the image as its EXIF orientation says");
  g["scale"] = app->add_option("--scale", o->scale, "keyword scale (train): MIN MAX")->expected(2);
  g["ratio"] = app->add_option("--ratio", o->ratio, "keyword ratio (train): MIN MAX")->expected(2);
  g["flip_prob"] = app->add_option("--flip-prob", o->flip_prob, "keyword flip_prob (train)");
  app->add_option("--keywords", o->keywords, "a JSON object of pipeline keywords");
  app->add_option("--ops", o->ops, "keyword ops: a JSON op list");
  app->add_option("--decode-path", o->decode_path,
                  "auto | whole: whole never skips the scans a DCT scale does not read")
      ->check(CLI::IsMember({"auto", "whole"}));
}

pb::Value Number(double v) {
  pb::Value x;
  x.set_number_value(v);
  return x;
}

template <typename T>
pb::Value List(const std::vector<T>& v) {
  pb::Value x;
  for (T e : v) *x.mutable_list_value()->add_values() = Number(static_cast<double>(e));
  return x;
}

// The keyword object of the flags (and --keywords, --ops), as JSON.
bool KeywordsJson(const CommonOptions& o, std::string* json) {
  pb::Struct kw;
  if (!o.keywords.empty()) {
    const auto st = pb::util::JsonStringToMessage(o.keywords, &kw);
    if (!st.ok()) {
      std::cerr << "--keywords is not a JSON object: " << st.ToString() << "\n";
      return false;
    }
  }
  auto set = [&](const std::string& name, pb::Value v) {
    if (kw.fields().count(name) != 0) {
      std::cerr << "keyword " << name << " given twice (a flag and --keywords)\n";
      return false;
    }
    (*kw.mutable_fields())[name] = std::move(v);
    return true;
  };
  auto given = [&](const std::string& name) { return o.given.at(name)->count() > 0; };
  pb::Value v;
  bool ok = true;
  if (given("pipeline")) v.set_string_value(o.pipeline), ok &= set("pipeline", v);
  if (given("size") && !(o.size[0] == 0 && o.size[1] == 0)) ok &= set("size", List(o.size));
  if (given("resize_size")) ok &= set("resize_size", Number(o.resize));
  if (given("antialias")) v.set_bool_value(o.interp == "antialias"), ok &= set("antialias", v);
  if (given("dtype")) v.set_string_value(o.dtype), ok &= set("dtype", v);
  if (given("layout")) v.set_string_value(o.layout), ok &= set("layout", v);
  if (o.exact) v.set_bool_value(true), ok &= set("exact_decode", v);
  if (o.apply_exif) v.set_bool_value(true), ok &= set("apply_exif_orientation", v);
  if (given("scale")) ok &= set("scale", List(o.scale));
  if (given("ratio")) ok &= set("ratio", List(o.ratio));
  if (given("flip_prob")) ok &= set("flip_prob", Number(o.flip_prob));
  if (!o.ops.empty()) {
    pb::Value ops;
    const auto st = pb::util::JsonStringToMessage(o.ops, &ops);
    if (!st.ok() || !ops.has_list_value()) {
      std::cerr << "--ops is not a JSON list\n";
      return false;
    }
    ok &= set("ops", ops);
  }
  if (!ok) return false;
  const auto st = pb::util::MessageToJsonString(kw, json);
  return st.ok();
}

// The params the workers would run for these options, and the effective
// spec described in one line.
bool ResolvePipeline(const CommonOptions& o, PipelineParams* p, std::string* described) {
  std::string json;
  if (!KeywordsJson(o, &json)) return false;
  absl::StatusOr<v1::PipelineSpec> spec = pipeline::SpecFromKeywordsJson(json);
  if (spec.ok()) spec = pipeline::Effective(*spec);
  if (!spec.ok()) {
    std::cerr << "invalid pipeline: " << spec.status().message() << "\n";
    return false;
  }
  absl::StatusOr<PipelineParams> lowered = LowerPipeline(*spec);
  if (!lowered.ok()) {
    std::cerr << "invalid pipeline: " << lowered.status().message() << "\n";
    return false;
  }
  *p = *lowered;
  *described = pipeline::Describe(*spec);
  return true;
}


struct LabelsOptions {
  std::string input;
  std::string out;
  std::string steps;
  uint32_t fill = 255;
};

int Labels(const LabelsOptions& o) {
  std::vector<uint8_t> file;
  if (!ReadFile(o.input, &file)) {
    std::cerr << "cannot read " << o.input << "\n";
    return 1;
  }
  SampleSteps steps;
  if (!o.steps.empty() && !ParseSteps(o.steps, &steps)) return 1;
  std::unique_ptr<ImageDecoder> decoder = MakeDecoder(SniffFormat(file.data(), file.size()));
  if (decoder == nullptr) {
    std::cerr << "labels: not a PNG (or other non-JPEG) file\n";
    return 1;
  }
  ImageHeader header;
  DecodeLimits limits;
  absl::Status s = decoder->ReadHeader(file.data(), file.size(), limits, &header);
  LabelMap m;
  m.height = header.height;
  m.width = header.width;
  if (s.ok()) {
    m.data.resize(size_t{m.height} * m.width * 2);
    s = decoder->DecodeLabels(m.data.data(), &m.bpp);
    m.data.resize(m.bytes());
    m.binary = std::string_view(header.mode) == "1";
  }
  std::vector<uint8_t> scratch;
  if (s.ok()) s = ApplyLabelSteps(steps, o.fill, &m, &scratch);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  std::ofstream f(o.out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(m.data.data()), static_cast<std::streamsize>(m.bytes()));
  if (!f) {
    std::cerr << "cannot write " << o.out << "\n";
    return 1;
  }
  std::cout << "{\"height\":" << m.height << ",\"width\":" << m.width << ",\"bpp\":" << m.bpp
            << ",\"mode\":\"" << header.mode << "\"}\n";
  return 0;
}

struct RenderOptions {
  std::string input;
  std::string out;
  std::vector<uint32_t> crop;
  int flip = 0;
  uint64_t seed = 0;
  uint32_t epoch = 0;
  uint64_t index = 0;
  uint32_t output = 0;  // a multi-view sample's output (key.output)
  std::string field_out;  // the last elastic step's displacement, float32 [H, W, 2]
  std::string steps_out;
  std::string steps;
  std::string boxes;  // JSON [[x1, y1, x2, y2], ...]: the sample's boxes (RandomIoUCrop's draw)
};

int Render(const CommonOptions& common, const RenderOptions& o) {
  PipelineParams p;
  std::string described;
  if (!ResolvePipeline(common, &p, &described)) return 1;
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
  processor.set_skip_unneeded_scans(common.decode_path != "whole");
  SampleResult result;
  SampleSteps steps;
  absl::Status s;
  if (!o.crop.empty() || !o.steps.empty()) {
    if (!o.steps.empty()) {
      if (!o.crop.empty()) {
        std::cerr << "give --crop or --steps, not both\n";
        return 1;
      }
      if (!ParseSteps(o.steps, &steps)) return 1;
    } else {
      // A RandomResizedCrop with its box given: the first op's resize.
      if (p.op_count == 0 || p.ops[0].kind != OpKind::kRandomResizedCrop) {
        std::cerr << "--crop needs a pipeline that starts with RandomResizedCrop (train)\n";
        return 1;
      }
      steps.count = 2;
      steps.steps[0].kind = StepKind::kCrop;
      steps.steps[0].top = o.crop[0];
      steps.steps[0].left = o.crop[1];
      steps.steps[0].height = o.crop[2];
      steps.steps[0].width = o.crop[3];
      steps.steps[1].kind = StepKind::kResize;
      steps.steps[1].height = p.ops[0].height;
      steps.steps[1].width = p.ops[0].width;
      steps.steps[1].interpolation = p.ops[0].interpolation;
      if (o.flip != 0) {
        steps.steps[2] = Step();
        steps.steps[2].kind = StepKind::kHorizontalFlip;
        steps.steps[2].op = 1;
        steps.count = 3;
      }
    }
    s = processor.ProcessSteps(jpeg.data(), jpeg.size(), p, steps, out.get(), capacity, &result);
  } else {
    SampleKey key;
    key.seed = o.seed;
    key.epoch = o.epoch;
    key.dataset_index = o.index;
    key.output = o.output;
    std::vector<float> boxes;
    if (!o.boxes.empty()) {
      pb::Value list;
      if (!pb::util::JsonStringToMessage(o.boxes, &list).ok() || !list.has_list_value()) {
        std::cerr << "--boxes is not a JSON list of [x1, y1, x2, y2]\n";
        return 1;
      }
      for (const pb::Value& b : list.list_value().values()) {
        if (!b.has_list_value() || b.list_value().values_size() != 4) {
          std::cerr << "--boxes: each box is [x1, y1, x2, y2]\n";
          return 1;
        }
        for (const pb::Value& v : b.list_value().values()) {
          boxes.push_back(static_cast<float>(v.number_value()));
        }
      }
      processor.set_boxes(boxes.data(), static_cast<uint32_t>(boxes.size() / 4));
    }
    s = processor.Process(jpeg.data(), jpeg.size(), p, key, out.get(), capacity, &result, &steps);
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
  if (!o.field_out.empty()) {
    const Step* elastic = nullptr;
    for (uint32_t i = 0; i < steps.count; ++i) {
      if (steps.steps[i].kind == StepKind::kElastic) elastic = &steps.steps[i];
    }
    if (elastic == nullptr) {
      std::cerr << "--field-out: no elastic step was run\n";
      return 1;
    }
    const float sigma[2] = {elastic->elastic[2], elastic->elastic[3]};
    std::vector<float> field(size_t{result.height} * result.width * 2);
    std::vector<float> scratch(ElasticScratch(result.height, result.width, sigma));
    ElasticDisplacement(result.height, result.width, elastic->elastic, sigma, elastic->noise_seed,
                        field.data(), scratch.data());
    std::ofstream ff(o.field_out, std::ios::binary | std::ios::trunc);
    ff.write(reinterpret_cast<const char*>(field.data()),
             static_cast<std::streamsize>(field.size() * sizeof(float)));
    if (!ff.good()) {
      std::cerr << "cannot write " << o.field_out << "\n";
      return 1;
    }
  }
  if (!o.steps_out.empty()) {
    std::ofstream sf(o.steps_out, std::ios::trunc);
    sf << StepsJson(steps) << "\n";
    if (!sf.good()) {
      std::cerr << "cannot write " << o.steps_out << "\n";
      return 1;
    }
  }
  std::printf(
      "{\"height\":%u,\"width\":%u,\"channels\":%u,\"bytes\":%llu,\"format\":\"%s\","
      "\"decode_path\":\"%s\",\"dct_scale\":%u,\"progressive\":%s}\n",
      result.height, result.width, result.channels, static_cast<unsigned long long>(result.bytes),
      ImageFormatName(result.format), DecodePathName(result.decode_path), result.dct_scale,
      result.progressive ? "true" : "false");
  return 0;
}

struct DrawOptions {
  std::vector<uint32_t> image_size;
  uint64_t count = 1;
  uint64_t seed = 0;
  uint32_t epoch = 0;
};

int Draw(const CommonOptions& common, const DrawOptions& o) {
  PipelineParams p;
  std::string described;
  if (!ResolvePipeline(common, &p, &described)) return 1;
  SampleSteps steps;
  std::string line;
  for (uint64_t i = 0; i < o.count; ++i) {
    const absl::Status s =
        DrawSteps(p, o.image_size[0], o.image_size[1], SampleKey{o.seed, o.epoch, i}, &steps);
    line = absl::StrCat("{\"index\":", i, ",");
    if (s.ok()) {
      absl::StrAppend(&line, "\"steps\":", StepsJson(steps), "}\n");
    } else {
      absl::StrAppend(&line, "\"error\":", JsonString(s.ToString()), "}\n");
    }
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return 0;
}

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
      "{\"images_per_s\":%.1f,\"threads\":%d,\"seconds\":%.3f,\"images\":%llu,\"errors\":%llu,"
      "\"files\":%zu,\"mean_file_bytes\":%.0f,\"decode_ms\":%.3f,\"augment_ms\":%.3f,"
      "\"progressive_images\":%llu,\"paths\":%s,\"pipeline\":%s,\"from_disk\":%s}\n",
      static_cast<double>(sum.images) / elapsed, threads, elapsed,
      static_cast<unsigned long long>(sum.images), static_cast<unsigned long long>(sum.errors),
      paths.size(), o.from_disk ? 0.0 : static_cast<double>(total_bytes) / paths.size(),
      static_cast<double>(sum.decode_ns) * per, static_cast<double>(sum.augment_ns) * per,
      static_cast<unsigned long long>(sum.progressive), by_path.c_str(),
      JsonString(described).c_str(), o.from_disk ? "true" : "false");
  return 0;
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

struct OpCostOptions {
  std::string input;
  uint32_t size = 224;
  uint64_t iterations = 0;  // 0: run for `seconds` per op
  double seconds = 1.5;
};

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

}  // namespace
}  // namespace stoker::image

int main(int argc, char** argv) {
  using stoker::image::BenchOptions;
  using stoker::image::CommonOptions;
  using stoker::image::DrawOptions;
  using stoker::image::OpCostOptions;
  using stoker::image::RenderOptions;
  // As the daemon's workers do: the bench loop is compared with them.
  stoker::image::KeepDecoderMemory();
  CLI::App app{"stoker-image-tool: the stoker image pipeline without the daemon"};
  app.require_subcommand(1);

  CommonOptions render_common;
  RenderOptions render;
  CLI::App* r = app.add_subcommand("render", "render one sample to a raw file");
  r->add_option("--input", render.input, "JPEG file")->required();
  r->add_option("--out", render.out, "raw output file")->required();
  AddCommon(r, &render_common);
  r->add_option("--crop", render.crop, "forced RandomResizedCrop box TOP LEFT H W")->expected(4);
  r->add_option("--flip", render.flip, "with --crop: flip 0|1")->check(CLI::Range(0, 1));
  r->add_option("--steps", render.steps, "run these steps (JSON) instead of drawing them");
  r->add_option("--steps-out", render.steps_out, "write the steps run (JSON) to this file");
  r->add_option("--boxes", render.boxes,
                "the sample's boxes, JSON [[x1, y1, x2, y2], ...] (RandomIoUCrop draws with them)");
  r->add_option("--seed", render.seed, "sample key: seed");
  r->add_option("--epoch", render.epoch, "sample key: epoch");
  r->add_option("--index", render.index, "sample key: dataset index");
  r->add_option("--field-out", render.field_out,
                "write the last elastic step's displacement (float32 [H, W, 2], at the output's "
                "size: for op lists whose elastic op sees an image of that size) to this file");
  r->add_option("--output", render.output,
                "sample key: the output's index (view k of a multi-view sample, whose view's "
                "ops --ops gives)");

  CommonOptions bench_common;
  BenchOptions bench;
  CLI::App* b = app.add_subcommand("bench", "single-process decode+augment throughput");
  b->add_option("--files", bench.files, "a folder of images or a list file")->required();
  AddCommon(b, &bench_common);
  b->add_option("--threads", bench.threads, "worker threads")->check(CLI::Range(1, 1024));
  b->add_option("--seconds", bench.seconds, "duration (after one pass over the files)")->check(CLI::Range(0.01, 86400.0));
  b->add_flag("--from-disk", bench.from_disk, "read each file from disk every time");
  b->add_option("--max-files", bench.max_files, "use at most this many files");
  b->add_option("--ring-mb", bench.ring_mb,
                "write outputs round a shared mapping of this many MiB per thread, as into a "
                "daemon's ring (0: one buffer that stays in cache)");

  CommonOptions draw_common;
  DrawOptions draw;
  CLI::App* d = app.add_subcommand("draw", "print the steps drawn for dataset indices 0..N-1");
  AddCommon(d, &draw_common);
  d->add_option("--image-size", draw.image_size, "the image's H W")->expected(2)->required();
  d->add_option("--count", draw.count, "dataset indices 0..N-1");
  d->add_option("--seed", draw.seed, "sample key: seed");
  d->add_option("--epoch", draw.epoch, "sample key: epoch");

  std::string scans_input;
  CLI::App* sc = app.add_subcommand(
      "scans",
      "a progressive file's scans and the AC bytes reduced IDCTs would let a decoder skip");
  sc->add_option("--input", scans_input, "JPEG file")->required();

  stoker::image::LabelsOptions labels;
  CLI::App* lb = app.add_subcommand("labels", "a mask through given steps, to a raw file");
  lb->add_option("--input", labels.input, "mask file (single-channel PNG)")->required();
  lb->add_option("--out", labels.out, "raw output file")->required();
  lb->add_option("--steps", labels.steps, "the steps (JSON; none: the mask as decoded)");
  lb->add_option("--fill", labels.fill, "the value outside the image (default 255)");

  OpCostOptions opcost;
  CLI::App* oc =
      app.add_subcommand("opcost", "each op's augment cost in microseconds per size x size image");
  oc->add_option("--input", opcost.input, "JPEG file")->required();
  oc->add_option("--size", opcost.size, "output side (default 224)")->check(CLI::Range(16, 4096));
  oc->add_option("--iterations", opcost.iterations,
                 "pairs (baseline, op) per op (default: run --seconds per op)");
  oc->add_option("--seconds", opcost.seconds, "per op when no --iterations (default 1.5)")
      ->check(CLI::Range(0.01, 3600.0));

  CLI11_PARSE(app, argc, argv);
  if (oc->parsed()) return stoker::image::OpCost(opcost);
  if (lb->parsed()) return stoker::image::Labels(labels);
  if (sc->parsed()) return stoker::image::Scans(scans_input);
  if (r->parsed()) return stoker::image::Render(render_common, render);
  if (d->parsed()) return stoker::image::Draw(draw_common, draw);
  return stoker::image::Bench(bench_common, bench);
}
