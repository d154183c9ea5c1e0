#include "pipeline/op_table.h"

namespace stoker::pipeline {
namespace {

using image::OpKind;

// One row per OpKind. The switch has no default: an OpKind added without a
// row is a compile error (-Werror=switch, on in every build).
// The name, torchvision's, is the image library's (image::OpKindName), the
// one the workers' messages use.
std::string_view Name(OpKind k) { return image::OpKindName(k); }

OpRow RowOf(OpKind k) {
  constexpr OpMoves kPix = OpMoves::kPixels, kGeo = OpMoves::kGeometry;
  constexpr OpSource kDet = OpSource::kDetectionReference;
  constexpr OpSource kTv = OpSource::kTorchvisionTransforms;
  switch (k) {
    case OpKind::kNone: return {};
    case OpKind::kRandomResizedCrop: return {Name(k), k, kGeo};
    case OpKind::kResize: return {Name(k), k, kGeo};
    case OpKind::kCenterCrop: return {Name(k), k, kGeo};
    case OpKind::kRandomCrop: return {Name(k), k, kGeo};
    case OpKind::kHorizontalFlip: return {Name(k), k, kGeo};
    case OpKind::kVerticalFlip: return {Name(k), k, kGeo};
    case OpKind::kColorJitter: return {Name(k), k, kPix};
    case OpKind::kGrayscale: return {Name(k), k, kPix};
    case OpKind::kRandomGrayscale: return {Name(k), k, kPix};
    case OpKind::kGaussianBlur: return {Name(k), k, kPix};
    case OpKind::kRandomRotation: return {Name(k), k, kGeo};
    case OpKind::kRandomAffine: return {Name(k), k, kGeo};
    case OpKind::kRandomPosterize: return {Name(k), k, kPix};
    case OpKind::kRandomSolarize: return {Name(k), k, kPix};
    case OpKind::kRandomAdjustSharpness: return {Name(k), k, kPix};
    case OpKind::kRandomAutocontrast: return {Name(k), k, kPix};
    case OpKind::kRandomEqualize: return {Name(k), k, kPix};
    case OpKind::kRandomInvert: return {Name(k), k, kPix};
    // The policies' shears, translations and rotations move masks and boxes;
    // AugMix's chains blend images, which labels do not follow.
    case OpKind::kAutoAugment: return {Name(k), k, kGeo};
    case OpKind::kRandAugment: return {Name(k), k, kGeo};
    case OpKind::kTrivialAugmentWide: return {Name(k), k, kGeo};
    case OpKind::kAugMix: return {Name(k), k, kPix};
    case OpKind::kRandomErasing: return {Name(k), k, OpMoves::kOutputTensor};
    case OpKind::kRandomResize: return {Name(k), k, kGeo, kDet};
    case OpKind::kRandomZoomOut: return {Name(k), k, kGeo, kDet};
    case OpKind::kRandomIoUCrop: return {Name(k), k, kGeo, kDet, /*needs_boxes=*/true};
    case OpKind::kRandomPhotometricDistort: return {Name(k), k, kPix, kDet};
    case OpKind::kRandomShortestSize: return {Name(k), k, kGeo, kDet};
    case OpKind::kPad: return {Name(k), k, kGeo};
    case OpKind::kRandomPerspective: return {Name(k), k, kGeo};
    case OpKind::kElasticTransform: return {Name(k), k, kGeo};
    case OpKind::kImageFilterGaussianBlur: return {Name(k), k, kPix, OpSource::kRecipeClass};
    // Compositions of pixel ops.
    case OpKind::kRandomApply: return {Name(k), k, kPix, kTv, false, /*holds_ops=*/true};
    case OpKind::kRandomChoice: return {Name(k), k, kPix, kTv, false, /*holds_ops=*/true};
    case OpKind::kRandomOrder: return {Name(k), k, kPix, kTv, false, /*holds_ops=*/true};
  }
  return {};
}

}  // namespace

const std::vector<OpRow>& OpTable() {
  static const std::vector<OpRow>* table = [] {
    auto* t = new std::vector<OpRow>;
    // OpKinds are numbered from 1 without gaps (the Op oneof's field numbers).
    for (uint32_t k = 1;; ++k) {
      OpRow r = RowOf(static_cast<OpKind>(k));
      if (r.name.empty()) break;
      t->push_back(r);
    }
    return t;
  }();
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
