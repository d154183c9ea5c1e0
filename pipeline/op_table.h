// The op table: every op stoker runs, one row each, and what every front end
// asks of it by name.
//
// An op is torchvision's transform of the same name (PIL backend). Its row
// is its line of server/image/op_list.h, the one place an op is listed
// (the workers' OpKind and OpKindName come from the same line), and says:
//   name         torchvision's class name: the Op oneof's JSON name in
//                stoker.proto and the key of Loader(ops=[{name: {...}}])
//   kind         image::OpKind, which is also the Op oneof's field number
//   moves        what it changes besides the image's pixels: a geometric op
//                moves the sample's masks and boxes with the image
//                (server/image/ops/labels.h, boxes.h); RandomErasing works on
//                the output tensor, after every other op
//   source       where a Python transform object of this name comes from:
//                torchvision.transforms (read from a Compose by
//                stoker/_transforms.py), torchvision's detection
//                reference (given by name in ops=, v2 has the same), or a
//                recipe's own class (read by what it does to an image:
//                ImageFilterGaussianBlur, from DINO's and MoCo's classes)
//   needs_boxes  its draw reads the sample's boxes (RandomIoUCrop)
//   holds_ops    a composition (RandomApply, RandomChoice, RandomOrder): its
//                `transforms` are ops, each of a row that moves pixels only
//                and holds none
//   on_clips     legal on a video clip (AttachRequest.clips): drawn once
//                per clip, every frame moved alike (server/video/clip_ops.h)
//   deterministic  draws nothing: a pipeline of only such ops (an
//                evaluation pipeline: Resize, CenterCrop) gives each image
//                the same output every epoch, kept in the prepared cache
//
// Tests hold every other place to this table: each Op oneof field of
// stoker.proto and each row are one op of the same number and name
// (op_table_test.cc, which also shows the check naming an op added to the
// proto only and to the table only); the workers' ValidateParams and
// DrawSteps switch over OpKind with -Werror=switch, so a line added to
// op_list.h without them does not compile; every row's op is filled with its
// defaults and checked (op_defaults.cc), lowered (lower_pipeline.cc), taken
// by ValidateParams and drawn into steps (op_table_test.cc fails on a row any
// of them lacks); Python's transform readers cover exactly the
// torchvision.transforms rows and _recipe_ops the recipe_class ones
// (tests/python/test_one_definition.py, through stoker._native.op_table()).
// The parameters' ranges are pipeline_params.h's constants, used by the
// front end's checks and the workers' alike.
//
// Thread safety: immutable; every function may be called from any thread.

#ifndef STOKER_PIPELINE_OP_TABLE_H_
#define STOKER_PIPELINE_OP_TABLE_H_

#include <string_view>
#include <vector>

#include "server/image/pipeline_params.h"

namespace stoker::pipeline {

enum class OpMoves { kPixels, kGeometry, kOutputTensor };
enum class OpSource { kTorchvisionTransforms, kDetectionReference, kRecipeClass };

struct OpRow {
  std::string_view name;
  image::OpKind kind = image::OpKind::kNone;
  OpMoves moves = OpMoves::kPixels;
  OpSource source = OpSource::kTorchvisionTransforms;
  bool needs_boxes = false;
  bool holds_ops = false;
  bool on_clips = false;
  bool deterministic = false;
};

// Every op, in OpKind (and Op field number) order.
const std::vector<OpRow>& OpTable();

// The row of `name` (torchvision's spelling) or `kind`; nullptr when none.
const OpRow* FindOp(std::string_view name);
const OpRow* FindOp(image::OpKind kind);

std::string_view OpMovesName(OpMoves m);    // "pixels", "geometry", "output_tensor"
// "torchvision.transforms", "detection_reference", "recipe_class"
std::string_view OpSourceName(OpSource s);

}  // namespace stoker::pipeline

#endif  // STOKER_PIPELINE_OP_TABLE_H_
