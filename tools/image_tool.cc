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


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/image/decode/decode_memory.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/ops/labels.h"
#include "server/image/ops/ops.h"
#include "server/image/pipeline.h"
#include "pipeline/lower_pipeline.h"
#include "tools/image_tool_measure.h"
#include "tools/image_tool_options.h"
#include "tools/image_tool_steps.h"
#include "pipeline/pipeline_spec.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::image {
namespace {

namespace fs = std::filesystem;
namespace pb = google::protobuf;
using tool::CommonOptions;
using tool::ReadFile;
using tool::ResolvePipeline;

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

}  // namespace
}  // namespace stoker::image

int main(int argc, char** argv) {
  using stoker::image::DrawOptions;
  using stoker::image::RenderOptions;
  using stoker::image::tool::AddCommon;
  using stoker::image::tool::BenchOptions;
  using stoker::image::tool::CommonOptions;
  using stoker::image::tool::OpCostOptions;
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
  if (oc->parsed()) return stoker::image::tool::OpCost(opcost);
  if (lb->parsed()) return stoker::image::Labels(labels);
  if (sc->parsed()) return stoker::image::tool::Scans(scans_input);
  if (r->parsed()) return stoker::image::Render(render_common, render);
  if (d->parsed()) return stoker::image::Draw(draw_common, draw);
  return stoker::image::tool::Bench(bench_common, bench);
}
