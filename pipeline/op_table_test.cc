#include "pipeline/op_table.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "pipeline/lower_pipeline.h"
#include "pipeline/pipeline_spec.h"
#include "server/image/pipeline_params.h"
#include "server/image/steps.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::pipeline {
namespace {

TEST_CASE("the op table has one row per Op field of stoker.proto, numbered as its OpKind") {
  const google::protobuf::OneofDescriptor* oneof = v1::Op::descriptor()->FindOneofByName("op");
  REQUIRE(oneof != nullptr);
  REQUIRE(OpTable().size() == static_cast<size_t>(oneof->field_count()));
  std::set<std::string> names;
  for (const OpRow& r : OpTable()) {
    CAPTURE(r.name);
    const google::protobuf::FieldDescriptor* f =
        v1::Op::descriptor()->FindFieldByNumber(static_cast<int>(r.kind));
    REQUIRE(f != nullptr);
    CHECK(f->containing_oneof() == oneof);
    CHECK(f->json_name() == std::string(r.name));
    CHECK(names.insert(std::string(r.name)).second);
    CHECK(FindOp(r.name) == &r);
    CHECK(FindOp(r.kind) == &r);
  }
  CHECK(FindOp("ToTensor") == nullptr);
  CHECK(FindOp(image::OpKind::kNone) == nullptr);
  CHECK(FindOp("RandomIoUCrop")->needs_boxes);
  CHECK(FindOp("RandomErasing")->moves == OpMoves::kOutputTensor);
  CHECK(FindOp("RandomZoomOut")->source == OpSource::kDetectionReference);
  CHECK(FindOp("ImageFilterGaussianBlur")->source == OpSource::kRecipeClass);
  CHECK(OpSourceName(OpSource::kRecipeClass) == "recipe_class");
}

// Parameters an op must be given (torchvision's required arguments, and
// ColorJitter's one adjustment: by default it makes none); the others take
// their defaults. Sizes differ from the 48 x 40 test image's.
const std::map<std::string, std::string>& Required() {
  static const auto* m = new std::map<std::string, std::string>{
      {"RandomResizedCrop", R"({"size": [32]})"},
      {"Resize", R"({"size": [24]})"},
      {"ColorJitter", R"({"brightness": 0.5})"},
      {"CenterCrop", R"({"size": [32]})"},
      {"RandomCrop", R"({"size": [32]})"},
      {"GaussianBlur", R"({"kernel_size": [3]})"},
      {"Grayscale", R"({"num_output_channels": 3})"},
      {"RandomRotation", R"({"degrees": [10]})"},
      {"RandomAffine", R"({"degrees": [10]})"},
      {"RandomPosterize", R"({"bits": 4})"},
      {"RandomSolarize", R"({"threshold": 128})"},
      {"RandomAdjustSharpness", R"({"sharpness_factor": 2})"},
      {"RandomResize", R"({"min_size": 32, "max_size": 48})"},
      {"RandomShortestSize", R"({"min_size": [32], "max_size": 64})"},
      {"Pad", R"({"padding": [2]})"},
      {"RandomApply", R"({"transforms": [{"RandomInvert": {}}]})"},
      {"RandomChoice", R"({"transforms": [{"RandomInvert": {}}, {"RandomEqualize": {}}]})"},
      {"RandomOrder", R"({"transforms": [{"RandomInvert": {}}, {"RandomEqualize": {}}]})"},
  };
  return *m;
}

TEST_CASE("every row is an op the keywords take and the lowering runs as its kind") {
  for (const OpRow& r : OpTable()) {
    const std::string name(r.name);
    CAPTURE(name);
    auto it = Required().find(name);
    const std::string params = it != Required().end() ? it->second : "{}";
    const std::string json = R"({"ops": [{")" + name + R"(": )" + params + R"(}], "size": [32]})";
    auto spec = SpecFromKeywordsJson(json);
    INFO(spec.status().ToString());
    CHECK(spec.ok());
    if (!spec.ok()) continue;
    auto effective = Effective(*spec);
    INFO(effective.status().ToString());
    CHECK(effective.ok());
    if (!effective.ok()) continue;
    auto lowered = LowerPipeline(*effective);
    INFO(lowered.status().ToString());
    CHECK(lowered.ok());
    if (!lowered.ok()) continue;
    bool found = false;
    for (uint32_t i = 0; i < lowered->op_count; ++i) found |= lowered->ops[i].kind == r.kind;
    CHECK(found);
    // The workers take it (ValidateParams) and draw its steps (DrawSteps):
    // over 64 keys, an op that acts with its default probability makes a step
    // at least once. RandomIoUCrop draws from boxes; the others need none.
    const absl::Status valid = image::ValidateParams(*lowered);
    INFO(valid.ToString());
    CHECK(valid.ok());
    if (!valid.ok() || r.needs_boxes) continue;
    uint32_t most = 0;
    for (uint64_t index = 0; index < 64; ++index) {
      image::SampleSteps steps;
      const absl::Status drawn =
          image::DrawSteps(*lowered, 48, 40, image::SampleKey{7, 0, index, 0}, &steps);
      INFO(drawn.ToString());
      REQUIRE(drawn.ok());
      most = std::max(most, steps.count);
    }
    CHECK(most >= 1);
  }
}

}  // namespace
}  // namespace stoker::pipeline
