// stoker-image-tool's pipeline flags (the keywords every subcommand takes)
// and what they resolve to. Internal to the tool (tools/image_tool.cc).

#ifndef STOKER_TOOLS_IMAGE_TOOL_OPTIONS_H_
#define STOKER_TOOLS_IMAGE_TOOL_OPTIONS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "server/image/pipeline_params.h"

namespace stoker::image::tool {

// The flags; each becomes the pipeline keyword of its name when given.
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

// Adds the flags to a subcommand.
void AddCommon(CLI::App* app, CommonOptions* o);

// The params the workers would run for these options (keywords -> Effective
// -> LowerPipeline, as every front end), and the effective spec described
// in one line; false with the reason on stderr.
bool ResolvePipeline(const CommonOptions& o, PipelineParams* p, std::string* described);

// A whole file; false when it cannot be read.
bool ReadFile(const std::string& path, std::vector<uint8_t>* data);

}  // namespace stoker::image::tool

#endif  // STOKER_TOOLS_IMAGE_TOOL_OPTIONS_H_
