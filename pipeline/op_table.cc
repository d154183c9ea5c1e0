#include "pipeline/op_table.h"

namespace stoker::pipeline {
namespace {

using image::OpKind;

// One row per OpKind. The switch has no default: an OpKind added without a
// row is a compile error (-Werror=switch, on in every build).
OpRow RowOf(OpKind k) {
  constexpr OpMoves kPix = OpMoves::kPixels, kGeo = OpMoves::kGeometry;
  constexpr OpSource kDet = OpSource::kDetectionReference;
  constexpr OpSource kTv = OpSource::kTorchvisionTransforms;
  switch (k) {
    case OpKind::kNone: return {};
    case OpKind::kRandomResizedCrop: return {"RandomResizedCrop", k, kGeo};
    case OpKind::kResize: return {"Resize", k, kGeo};
    case OpKind::kCenterCrop: return {"CenterCrop", k, kGeo};
    case OpKind::kRandomCrop: return {"RandomCrop", k, kGeo};
    case OpKind::kHorizontalFlip: return {"RandomHorizontalFlip", k, kGeo};
    case OpKind::kVerticalFlip: return {"RandomVerticalFlip", k, kGeo};
    case OpKind::kColorJitter: return {"ColorJitter", k, kPix};
    case OpKind::kGrayscale: return {"Grayscale", k, kPix};
    case OpKind::kRandomGrayscale: return {"RandomGrayscale", k, kPix};
    case OpKind::kGaussianBlur: return {"GaussianBlur", k, kPix};
    case OpKind::kRandomRotation: return {"RandomRotation", k, kGeo};
    case OpKind::kRandomAffine: return {"RandomAffine", k, kGeo};
    case OpKind::kRandomPosterize: return {"RandomPosterize", k, kPix};
    case OpKind::kRandomSolarize: return {"RandomSolarize", k, kPix};
    case OpKind::kRandomAdjustSharpness: return {"RandomAdjustSharpness", k, kPix};
    case OpKind::kRandomAutocontrast: return {"RandomAutocontrast", k, kPix};
    case OpKind::kRandomEqualize: return {"RandomEqualize", k, kPix};
    case OpKind::kRandomInvert: return {"RandomInvert", k, kPix};
    // The policies' shears, translations and rotations move masks and boxes;
    // AugMix's chains blend images, which labels do not follow.
    case OpKind::kAutoAugment: return {"AutoAugment", k, kGeo};
    case OpKind::kRandAugment: return {"RandAugment", k, kGeo};
    case OpKind::kTrivialAugmentWide: return {"TrivialAugmentWide", k, kGeo};
    case OpKind::kAugMix: return {"AugMix", k, kPix};
    case OpKind::kRandomErasing: return {"RandomErasing", k, OpMoves::kOutputTensor};
    case OpKind::kRandomResize: return {"RandomResize", k, kGeo, kDet};
    case OpKind::kRandomZoomOut: return {"RandomZoomOut", k, kGeo, kDet};
    case OpKind::kRandomIoUCrop: return {"RandomIoUCrop", k, kGeo, kDet, /*needs_boxes=*/true};
    case OpKind::kRandomPhotometricDistort: return {"RandomPhotometricDistort", k, kPix, kDet};
    case OpKind::kRandomShortestSize: return {"RandomShortestSize", k, kGeo, kDet};
    case OpKind::kPad: return {"Pad", k, kGeo};
    // Compositions of pixel ops.
    case OpKind::kRandomApply: return {"RandomApply", k, kPix, kTv, false, /*holds_ops=*/true};
    case OpKind::kRandomChoice: return {"RandomChoice", k, kPix, kTv, false, /*holds_ops=*/true};
    case OpKind::kRandomOrder: return {"RandomOrder", k, kPix, kTv, false, /*holds_ops=*/true};
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
  }
  return "";
}

}  // namespace stoker::pipeline
