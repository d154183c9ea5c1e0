// The op list: every op stoker runs, one line each, defined once here. The
// workers' OpKind enum and OpKindName (pipeline_params.h), and the op table
// every front end reads (pipeline/op_table.h), are expanded from it; the
// stoker.proto Op oneof is held to it by pipeline/op_table_test.cc.
//
// STOKER_OP_LIST(X) calls X(kind, number, name, moves, source, flags) per op:
//   kind    the OpKind enumerator
//   number  its value, which is also its Op oneof field number in
//           stoker.proto (numbered from 1 without gaps)
//   name    torchvision's class name (the Op field's JSON name)
//   moves   kPixels, kGeometry (masks and boxes move with the image:
//           ops/labels.h, ops/boxes.h) or kOutputTensor (after every other
//           op, on the output tensor)
//   source  kTorchvision (torchvision.transforms, read from a Compose),
//           kDetection (the detection reference's, given by name) or
//           kRecipeClass (a recipe's own class, read by what it does)
//   flags   0, or any of kOpNeedsBoxes (its draw reads the sample's boxes),
//           kOpHoldsOps (a composition: the `children` ops after it are its
//           own, each a pixel op that holds none), kOpOnClips (legal on a
//           video clip: drawn once per clip, applied to every frame by
//           server/video/clip_ops.h), kOpDeterministic (draws nothing: the
//           same output for the same input, so a pipeline of such ops only
//           is computed once and kept in the prepared cache)
// moves and source are bare names, resolved where X expands them
// (pipeline/op_table.cc).
//
// Adding an op: a line here and an Op field of the same number and name in
// stoker.proto; the compiler and op_table_test then name every other place
// it needs (its defaults, lowering, validation and draw, its kernel).

#ifndef STOKER_SERVER_IMAGE_OP_LIST_H_
#define STOKER_SERVER_IMAGE_OP_LIST_H_

#include <cstdint>

namespace stoker::image {
inline constexpr uint32_t kOpNeedsBoxes = 1;
inline constexpr uint32_t kOpHoldsOps = 2;
inline constexpr uint32_t kOpOnClips = 4;
inline constexpr uint32_t kOpDeterministic = 8;
}  // namespace stoker::image

// clang-format off
#define STOKER_OP_LIST(X)                                                                 \
  X(kRandomResizedCrop,        1, "RandomResizedCrop",        kGeometry, kTorchvision, 0)   \
  X(kResize,                   2, "Resize",                   kGeometry, kTorchvision, kOpOnClips | kOpDeterministic) \
  X(kCenterCrop,               3, "CenterCrop",               kGeometry, kTorchvision, kOpOnClips | kOpDeterministic) \
  X(kRandomCrop,               4, "RandomCrop",               kGeometry, kTorchvision, kOpOnClips) \
  X(kHorizontalFlip,           5, "RandomHorizontalFlip",     kGeometry, kTorchvision, kOpOnClips) \
  X(kVerticalFlip,             6, "RandomVerticalFlip",       kGeometry, kTorchvision, 0)   \
  X(kColorJitter,              7, "ColorJitter",              kPixels,   kTorchvision, 0)   \
  X(kGrayscale,                8, "Grayscale",                kPixels,   kTorchvision, kOpDeterministic)   \
  X(kRandomGrayscale,          9, "RandomGrayscale",          kPixels,   kTorchvision, 0)   \
  X(kGaussianBlur,            10, "GaussianBlur",             kPixels,   kTorchvision, 0)   \
  X(kRandomRotation,          11, "RandomRotation",           kGeometry, kTorchvision, 0)   \
  X(kRandomAffine,            12, "RandomAffine",             kGeometry, kTorchvision, 0)   \
  X(kRandomPosterize,         13, "RandomPosterize",          kPixels,   kTorchvision, 0)   \
  X(kRandomSolarize,          14, "RandomSolarize",           kPixels,   kTorchvision, 0)   \
  X(kRandomAdjustSharpness,   15, "RandomAdjustSharpness",    kPixels,   kTorchvision, 0)   \
  X(kRandomAutocontrast,      16, "RandomAutocontrast",       kPixels,   kTorchvision, 0)   \
  X(kRandomEqualize,          17, "RandomEqualize",           kPixels,   kTorchvision, 0)   \
  X(kRandomInvert,            18, "RandomInvert",             kPixels,   kTorchvision, 0)   \
  /* The policies' shears, translations and rotations move masks and boxes; */            \
  /* AugMix's chains blend images, which labels do not follow. */                         \
  X(kAutoAugment,             19, "AutoAugment",              kGeometry, kTorchvision, 0)   \
  X(kRandAugment,             20, "RandAugment",              kGeometry, kTorchvision, 0)   \
  X(kTrivialAugmentWide,      21, "TrivialAugmentWide",       kGeometry, kTorchvision, 0)   \
  X(kAugMix,                  22, "AugMix",                   kPixels,   kTorchvision, 0)   \
  X(kRandomErasing,           23, "RandomErasing",            kOutputTensor, kTorchvision, 0) \
  /* torchvision's detection reference (references/detection/transforms.py; */            \
  /* v2 has the same), for SSD-style recipes. */                                          \
  X(kRandomResize,            24, "RandomResize",             kGeometry, kDetection, 0)     \
  X(kRandomZoomOut,           25, "RandomZoomOut",            kGeometry, kDetection, 0)     \
  X(kRandomIoUCrop,           26, "RandomIoUCrop",            kGeometry, kDetection, kOpNeedsBoxes) \
  X(kRandomPhotometricDistort, 27, "RandomPhotometricDistort", kPixels,  kDetection, 0)     \
  X(kRandomShortestSize,      28, "RandomShortestSize",       kGeometry, kDetection, 0)     \
  X(kRandomApply,             29, "RandomApply",              kPixels,   kTorchvision, kOpHoldsOps) \
  X(kRandomChoice,            30, "RandomChoice",             kPixels,   kTorchvision, kOpHoldsOps) \
  X(kRandomOrder,             31, "RandomOrder",              kPixels,   kTorchvision, kOpHoldsOps) \
  X(kPad,                     32, "Pad",                      kGeometry, kTorchvision, kOpDeterministic)   \
  X(kRandomPerspective,       33, "RandomPerspective",        kGeometry, kTorchvision, 0)   \
  X(kElasticTransform,        34, "ElasticTransform",         kGeometry, kTorchvision, 0)   \
  X(kImageFilterGaussianBlur, 35, "ImageFilterGaussianBlur",  kPixels,   kRecipeClass, 0)
// clang-format on

#endif  // STOKER_SERVER_IMAGE_OP_LIST_H_
