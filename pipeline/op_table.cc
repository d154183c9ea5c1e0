#include "pipeline/op_table.h"

namespace stoker::pipeline {
namespace {

using image::OpKind;

// op_list.h's names for OpMoves and OpSource values.
constexpr OpMoves kPixels = OpMoves::kPixels, kGeometry = OpMoves::kGeometry,
                  kOutputTensor = OpMoves::kOutputTensor;
constexpr OpSource kTorchvision = OpSource::kTorchvisionTransforms,
                   kDetection = OpSource::kDetectionReference,
                   kRecipeClass = OpSource::kRecipeClass;
using image::kOpHoldsOps;
using image::kOpNeedsBoxes;
using image::kOpDeterministic;
using image::kOpOnClips;

std::vector<OpRow> Rows() {
  std::vector<OpRow> rows;
#define STOKER_OP_ROW(k, number, name, moves, source, flags)                               \
  rows.push_back(OpRow{name, OpKind::k, moves, source, ((flags) & kOpNeedsBoxes) != 0, \
                       ((flags) & kOpHoldsOps) != 0, ((flags) & kOpOnClips) != 0,          \
                       ((flags) & kOpDeterministic) != 0});
  STOKER_OP_LIST(STOKER_OP_ROW)
#undef STOKER_OP_ROW
  return rows;
}

}  // namespace

const std::vector<OpRow>& OpTable() {
  static const std::vector<OpRow>* table = new std::vector<OpRow>(Rows());
  return *table;
}

const OpRow* FindOp(std::string_view name) {
  for (const OpRow& r : OpTable()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const OpRow* FindOp(image::OpKind kind) {
  for (const OpRow& r : OpTable()) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

std::string_view OpMovesName(OpMoves m) {
  switch (m) {
    case OpMoves::kPixels: return "pixels";
    case OpMoves::kGeometry: return "geometry";
    case OpMoves::kOutputTensor: return "output_tensor";
  }
  return "";
}

std::string_view OpSourceName(OpSource s) {
  switch (s) {
    case OpSource::kTorchvisionTransforms: return "torchvision.transforms";
    case OpSource::kDetectionReference: return "detection_reference";
    case OpSource::kRecipeClass: return "recipe_class";
  }
  return "";
}

}  // namespace stoker::pipeline
