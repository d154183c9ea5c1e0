// OpKindName: each op's name, torchvision's, defined once for the workers'
// messages and the op table (pipeline/op_table.cc). Its own library,
// stoker_op_names, so that the op table (linked by the client) needs no
// image code.

#include "server/image/pipeline_params.h"

namespace stoker::image {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kRandomResizedCrop:
      return "RandomResizedCrop";
    case OpKind::kResize:
      return "Resize";
    case OpKind::kRandomResize:
      return "RandomResize";
    case OpKind::kRandomShortestSize:
      return "RandomShortestSize";
    case OpKind::kRandomZoomOut:
      return "RandomZoomOut";
    case OpKind::kRandomIoUCrop:
      return "RandomIoUCrop";
    case OpKind::kRandomPhotometricDistort:
      return "RandomPhotometricDistort";
    case OpKind::kCenterCrop:
      return "CenterCrop";
    case OpKind::kRandomCrop:
      return "RandomCrop";
    case OpKind::kHorizontalFlip:
      return "RandomHorizontalFlip";
    case OpKind::kVerticalFlip:
      return "RandomVerticalFlip";
    case OpKind::kColorJitter:
      return "ColorJitter";
    case OpKind::kGrayscale:
      return "Grayscale";
    case OpKind::kRandomGrayscale:
      return "RandomGrayscale";
    case OpKind::kGaussianBlur:
      return "GaussianBlur";
    case OpKind::kRandomPerspective:
      return "RandomPerspective";
    case OpKind::kElasticTransform:
      return "ElasticTransform";
    case OpKind::kImageFilterGaussianBlur:
      return "ImageFilterGaussianBlur";
    case OpKind::kRandomRotation:
      return "RandomRotation";
    case OpKind::kRandomAffine:
      return "RandomAffine";
    case OpKind::kRandomPosterize:
      return "RandomPosterize";
    case OpKind::kRandomSolarize:
      return "RandomSolarize";
    case OpKind::kRandomAdjustSharpness:
      return "RandomAdjustSharpness";
    case OpKind::kRandomAutocontrast:
      return "RandomAutocontrast";
    case OpKind::kRandomEqualize:
      return "RandomEqualize";
    case OpKind::kRandomInvert:
      return "RandomInvert";
    case OpKind::kAutoAugment:
      return "AutoAugment";
    case OpKind::kRandAugment:
      return "RandAugment";
    case OpKind::kTrivialAugmentWide:
      return "TrivialAugmentWide";
    case OpKind::kAugMix:
      return "AugMix";
    case OpKind::kRandomErasing:
      return "RandomErasing";
    case OpKind::kPad:
      return "Pad";
    case OpKind::kRandomApply:
      return "RandomApply";
    case OpKind::kRandomChoice:
      return "RandomChoice";
    case OpKind::kRandomOrder:
      return "RandomOrder";
    case OpKind::kNone:
      break;
  }
  return "unknown";
}

}  // namespace stoker::image
