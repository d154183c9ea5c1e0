// Every op's defaults and checks, and the most steps each makes: the part of
// pipeline::Effective that is op by op. Internal to pipeline/ (the public API
// is pipeline_spec.h); pure functions, thread-safe. Errors are
// INVALID_ARGUMENT, their messages starting with `at` ("ops[2] ColorJitter: ").

#ifndef STOKER_PIPELINE_OP_DEFAULTS_H_
#define STOKER_PIPELINE_OP_DEFAULTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::pipeline::internal {

// `op` with every parameter filled in (torchvision's defaults) and checked;
// a composition's ops too. `at` names the op: "ops[i] Name: ".
absl::Status FillOp(v1::Op* op, const std::string& at);

// The most steps `op` makes for one sample (image's DrawSteps; kMaxSteps).
uint32_t MostSteps(const v1::Op& op);

// A resize's interpolation: "bilinear" or "bicubic" (kResizeInterpolations); `what` names it.
absl::Status CheckInterpolation(absl::string_view value, absl::string_view what);

// An output size: [s] -> [s, s], [h, w] within the output's limits; empty is
// an error only when `required`.
absl::Status OutputSize(google::protobuf::RepeatedField<uint32_t>* size, absl::string_view what,
                        bool required);

// The policies' and RandomErasing's part of FillOp (policy_defaults.cc).
absl::Status FillPolicyOp(v1::Op* op, const std::string& at);

// Checks FillOp's parts share:
// [min, max] with 0 < min <= max, both finite; empty -> `def`.
absl::Status PositiveRange(google::protobuf::RepeatedField<float>* r, const float (&def)[2],
                           absl::string_view what);
// A constant fill: [v] -> [v, v, v]; 3 values, each 0..255; empty -> 0.
absl::Status FillValues(google::protobuf::RepeatedField<uint32_t>* fill, absl::string_view at);
// The affine ops' and the policies' resampling: empty -> `def`; nearest or
// bilinear (kAffineInterpolations).
absl::Status AffineInterpolation(std::string* v, absl::string_view def, absl::string_view at);

// RandomErasing's values against the output's ring dtype (uint8: whole
// values, no "random").
absl::Status CheckEraseForOutput(const v1::RandomErasing& o, uint32_t dtype,
                                 const std::string& at);

}  // namespace stoker::pipeline::internal

#endif  // STOKER_PIPELINE_OP_DEFAULTS_H_
