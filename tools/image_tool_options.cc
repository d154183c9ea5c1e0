#include "tools/image_tool_options.h"

#include <fstream>
#include <iostream>
#include <utility>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "pipeline/lower_pipeline.h"
#include "pipeline/pipeline_spec.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::image::tool {
namespace {

namespace pb = google::protobuf;

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

}  // namespace

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

}  // namespace stoker::image::tool
