// Sample fields (proto/stoker/ring_layout.h, "field") between their two
// forms: the ring header's ring::FieldSpec and the wire's v1::FieldInfo,
// which Attach sends so that the client knows every bound before it reads
// the header. The one conversion the daemon and the client use.
//
// Pure functions: thread-safe.

#ifndef STOKER_PIPELINE_SAMPLE_FIELDS_H_
#define STOKER_PIPELINE_SAMPLE_FIELDS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::pipeline {

// A field named `name` (at most ring::kFieldNameBytes - 1 characters of
// [a-z0-9_]: a longer name is cut) of `dtype` values and rank
// max_shape.size() (<= ring::kMaxRank; more are dropped), each sample's room
// `stride` bytes; `fixed`: every sample has the shape max_shape. Its offset
// is set by ring::LayoutFields.
ring::FieldSpec MakeField(std::string_view name, uint32_t dtype,
                          const std::vector<uint32_t>& max_shape, uint64_t stride, bool fixed);

v1::FieldInfo FieldInfoOf(const ring::FieldSpec& f);

// The spec a FieldInfo names. DATA_LOSS (the daemon's answer is not one this
// client can read) for a name too long, a rank over ring::kMaxRank or a
// bound past it; ring::ValidateField checks the rest.
absl::StatusOr<ring::FieldSpec> FieldSpecOf(const v1::FieldInfo& info);

// "uint8", "float32", "float16", "uint16", "int16", "int32", "int64",
// "bfloat16" (numpy's and torch's names); "" for anything else.
std::string_view FieldDTypeName(uint32_t ring_dtype);

}  // namespace stoker::pipeline

#endif  // STOKER_PIPELINE_SAMPLE_FIELDS_H_
