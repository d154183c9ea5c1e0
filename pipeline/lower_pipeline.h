// From the contract to what the workers run: an effective
// stoker.v1.PipelineSpec (pipeline::Effective's result: every default filled
// in and checked, pipeline/pipeline_spec.h) lowered to the plain-old-data
// image::PipelineParams that crosses the daemon -> worker socket. Used by
// the daemon at Attach and by stoker-image-tool; no defaults live here.

#ifndef STOKER_PIPELINE_LOWER_PIPELINE_H_
#define STOKER_PIPELINE_LOWER_PIPELINE_H_

#include "absl/status/statusor.h"
#include "server/image/pipeline_params.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

// INVALID_ARGUMENT if `effective` is not an effective spec (a parameter
// missing, more than image::kMaxOps ops) or the lowered params fail
// image::ValidateParams. Pure; thread-safe.
absl::StatusOr<image::PipelineParams> LowerPipeline(const v1::PipelineSpec& effective);

}  // namespace stoker

#endif  // STOKER_PIPELINE_LOWER_PIPELINE_H_
