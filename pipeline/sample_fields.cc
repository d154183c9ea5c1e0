#include "pipeline/sample_fields.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoker::pipeline {

ring::FieldSpec MakeField(std::string_view name, uint32_t dtype,
                          const std::vector<uint32_t>& max_shape, uint64_t stride, bool fixed) {
  ring::FieldSpec f{};
  std::memcpy(f.name, name.data(), std::min<size_t>(name.size(), ring::kFieldNameBytes - 1));
  f.dtype = dtype;
  f.rank = static_cast<uint32_t>(std::min<size_t>(max_shape.size(), ring::kMaxRank));
  for (uint32_t d = 0; d < f.rank; ++d) f.max_shape[d] = max_shape[d];
  f.flags = fixed ? uint32_t{ring::kFieldFixedShape} : 0u;
  f.stride = stride;
  return f;
}

v1::FieldInfo FieldInfoOf(const ring::FieldSpec& f) {
  v1::FieldInfo info;
  info.set_name(std::string(ring::FieldName(f)));
  info.set_dtype(f.dtype);
  for (uint32_t d = 0; d < f.rank && d < ring::kMaxRank; ++d) info.add_max_shape(f.max_shape[d]);
  info.set_offset(f.offset);
  info.set_stride(f.stride);
  info.set_fixed_shape((f.flags & ring::kFieldFixedShape) != 0);
  return info;
}

absl::StatusOr<ring::FieldSpec> FieldSpecOf(const v1::FieldInfo& info) {
  if (info.name().size() >= ring::kFieldNameBytes || info.max_shape_size() > int{ring::kMaxRank}) {
    return absl::DataLossError(absl::StrCat("the daemon's field '", info.name().substr(0, 64),
                                            "' has a name or rank this client cannot read"));
  }
  ring::FieldSpec f =
      MakeField(info.name(), info.dtype(),
                std::vector<uint32_t>(info.max_shape().begin(), info.max_shape().end()),
                info.stride(), info.fixed_shape());
  f.offset = info.offset();
  return f;
}

std::string_view FieldDTypeName(uint32_t ring_dtype) {
  switch (ring_dtype) {
    case ring::kUint8: return "uint8";
    case ring::kFloat32: return "float32";
    case ring::kFloat16: return "float16";
    case ring::kUint16: return "uint16";
    case ring::kInt16: return "int16";
    case ring::kInt32: return "int32";
    case ring::kInt64: return "int64";
    case ring::kBFloat16: return "bfloat16";
    default: return "";
  }
}

}  // namespace stoker::pipeline
