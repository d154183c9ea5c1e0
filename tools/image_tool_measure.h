// stoker-image-tool's measurements: `bench` (the single-process
// decode+augment limit), `scans` (a progressive file's scans and what a
// reduced IDCT lets a decoder skip) and `opcost` (each op's augment cost).
// Internal to the tool; tools/image_tool.cc's header says what each prints.

#ifndef STOKER_TOOLS_IMAGE_TOOL_MEASURE_H_
#define STOKER_TOOLS_IMAGE_TOOL_MEASURE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/image_tool_options.h"

namespace stoker::image::tool {

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

int Bench(const CommonOptions& common, const BenchOptions& o);

int Scans(const std::string& input);

struct OpCostOptions {
  std::string input;
  uint32_t size = 224;
  uint64_t iterations = 0;  // 0: run for `seconds` per op
  double seconds = 1.5;
};

int OpCost(const OpCostOptions& o);

}  // namespace stoker::image::tool

#endif  // STOKER_TOOLS_IMAGE_TOOL_MEASURE_H_
