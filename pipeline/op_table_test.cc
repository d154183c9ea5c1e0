#include "pipeline/op_table.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <catch2/catch.hpp>

#include "pipeline/lower_pipeline.h"
#include "pipeline/pipeline_spec.h"
#include "server/image/pipeline_params.h"
#include "server/image/steps.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::pipeline {
namespace {

// Where the op table and an Op message's oneof (stoker.proto's, or a test's
// copy of it) disagree: one line per op found in one only, or numbered or
// named differently.
std::vector<std::string> Mismatches(const std::vector<OpRow>& table,
                                    const google::protobuf::Descriptor* op_message) {
  std::vector<std::string> out;
  const google::protobuf::OneofDescriptor* oneof = op_message->FindOneofByName("op");
  if (oneof == nullptr) return {"the Op message has no oneof op"};
  std::set<int> rows;
  for (const OpRow& r : table) {
    const int number = static_cast<int>(r.kind);
    rows.insert(number);
    const google::protobuf::FieldDescriptor* f = op_message->FindFieldByNumber(number);
    if (f == nullptr || f->containing_oneof() != oneof) {
      out.push_back(std::string(r.name) + " (" + std::to_string(number) +
                    ") is in the op table only");
    } else if (f->json_name() != r.name) {
      out.push_back(std::string(r.name) + " is named " + f->json_name() + " in stoker.proto");
    }
  }
  for (int i = 0; i < oneof->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = oneof->field(i);
    if (rows.count(f->number()) == 0) {
      out.push_back(f->json_name() + " (" + std::to_string(f->number()) +
                    ") is in stoker.proto only");
    }
  }
  return out;
}

TEST_CASE("the op table has one row per Op field of stoker.proto, numbered as its OpKind") {
  CHECK(Mismatches(OpTable(), v1::Op::descriptor()) == std::vector<std::string>{});
  std::set<std::string> names;
  uint32_t number = 0;
  for (const OpRow& r : OpTable()) {
    CAPTURE(r.name);
    CHECK(static_cast<uint32_t>(r.kind) == ++number);  // from 1, without gaps
    CHECK(r.name == image::OpKindName(r.kind));
    CHECK(names.insert(std::string(r.name)).second);
    CHECK(FindOp(r.name) == &r);
    CHECK(FindOp(r.kind) == &r);
    CHECK(r.holds_ops == image::IsComposition(r.kind));
  }
  CHECK(FindOp("ToTensor") == nullptr);
  CHECK(FindOp(image::OpKind::kNone) == nullptr);
  CHECK(FindOp("RandomIoUCrop")->needs_boxes);
  CHECK(FindOp("RandomApply")->holds_ops);
  CHECK(FindOp("RandomErasing")->moves == OpMoves::kOutputTensor);
  CHECK(FindOp("RandomZoomOut")->source == OpSource::kDetectionReference);
  CHECK(FindOp("ImageFilterGaussianBlur")->source == OpSource::kRecipeClass);
  CHECK(OpSourceName(OpSource::kRecipeClass) == "recipe_class");
}

TEST_CASE("an op added to the op table only is named by the check") {
  std::vector<OpRow> table = OpTable();
  table.push_back(OpRow{"RandomFoo", static_cast<image::OpKind>(table.size() + 1)});
  CHECK(Mismatches(table, v1::Op::descriptor()) ==
        std::vector<std::string>{"RandomFoo (36) is in the op table only"});
  table.pop_back();
  table[6].name = "ColourJitter";
  CHECK(Mismatches(table, v1::Op::descriptor()) ==
        std::vector<std::string>{"ColourJitter is named ColorJitter in stoker.proto"});
}

TEST_CASE("an op added to stoker.proto only is named by the check") {
  // stoker.proto's Op with one more oneof member, built beside the real one.
  namespace pb = google::protobuf;
  pb::FileDescriptorProto file;
  file.set_name("op_table_test/op.proto");
  file.set_package("stoker.op_table_test");
  file.set_syntax("proto3");
  file.add_dependency(v1::Op::descriptor()->file()->name());
  pb::FileDescriptorProto stoker_proto;
  v1::Op::descriptor()->file()->CopyTo(&stoker_proto);
  v1::Op::descriptor()->file()->CopyJsonNameTo(&stoker_proto);
  pb::DescriptorProto* op = file.add_message_type();
  for (const pb::DescriptorProto& m : stoker_proto.message_type()) {
    if (m.name() == "Op") *op = m;
  }
  REQUIRE(op->name() == "Op");
  pb::FieldDescriptorProto* added = op->add_field();
  added->set_name("random_foo");
  added->set_number(static_cast<int>(OpTable().size()) + 1);
  added->set_label(pb::FieldDescriptorProto::LABEL_OPTIONAL);
  added->set_type(pb::FieldDescriptorProto::TYPE_MESSAGE);
  added->set_type_name(".stoker.v1.RandomInvert");
  added->set_json_name("RandomFoo");
  added->set_oneof_index(v1::Op::descriptor()->FindOneofByName("op")->index());
  pb::DescriptorPool pool(pb::DescriptorPool::generated_pool());
  const pb::FileDescriptor* built = pool.BuildFile(file);
  REQUIRE(built != nullptr);
  CHECK(Mismatches(OpTable(), built->FindMessageTypeByName("Op")) ==
        std::vector<std::string>{"RandomFoo (36) is in stoker.proto only"});
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
