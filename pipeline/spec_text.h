// The pipeline contract's text: messages into JSON and people's text, JSON
// (a google.protobuf.Struct) into messages by reflection, and the error
// helpers every part of pipeline/ uses. Internal to pipeline/ (the public
// API is pipeline_spec.h); pure functions, thread-safe.

#ifndef STOKER_PIPELINE_SPEC_TEXT_H_
#define STOKER_PIPELINE_SPEC_TEXT_H_

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::pipeline::internal {

namespace pb = google::protobuf;

// The public API takes std::string_view; Debian's absl has its own.
inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view SV(absl::string_view s) { return std::string_view(s.data(), s.size()); }

template <typename... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}


// The shortest text that reads back as the same float (double); JSON's
// mapping of the non-finite ones ("NaN", "Infinity", "-Infinity").
std::string FloatText(float v);
std::string DoubleText(double v);

// "[1, 2.5]": a repeated field's values as FloatText/DoubleText/StrCat write them.
template <typename T>
std::string ListText(const pb::RepeatedField<T>& r) {
  std::vector<std::string> parts;
  for (T v : r) {
    if constexpr (std::is_same_v<T, float>) {
      parts.push_back(FloatText(v));
    } else if constexpr (std::is_same_v<T, double>) {
      parts.push_back(DoubleText(v));
    } else {
      parts.push_back(absl::StrCat(v));
    }
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// A JSON value as written in a request, for messages.
std::string ValueText(const pb::Value& v);
// `s` as a JSON string, quoted and escaped.
std::string JsonQuote(absl::string_view s);
// A message's field names, ", "-joined (their JSON names when json_names).
std::string FieldNames(const pb::Descriptor* d, bool json_names);
// The op's torchvision name ("RandomCrop"), its oneof field's JSON name;
// "(no op)" for an Op with none set.
std::string OpName(const v1::Op& op);
std::string OpName(v1::Op::OpCase c);

// JSON into messages, by reflection: the proto's JSON mapping, plus a bare
// value for a repeated field read as a 1-element list (torchvision's `32`
// for a size), and errors that name the op.
// `json` parsed as an object into `out`; `what` names it in errors.
absl::Status ParseObject(absl::string_view json, pb::Struct* out, absl::string_view what);
// The field of `d` named `key` (its name or its JSON name), or nullptr.
const pb::FieldDescriptor* FindField(const pb::Descriptor* d, absl::string_view key);
// Whether `d` is one op's parameters (a message of an Op oneof field).
bool IsOpParams(const pb::Descriptor* d);
// One value of field `f` (set, or appended to a repeated field).
absl::Status AddValue(pb::Message* m, const pb::FieldDescriptor* f, const pb::Value& v,
                      const std::string& label);
// Field `f` of `m` from a JSON value.
absl::Status SetField(pb::Message* m, const pb::FieldDescriptor* f, const pb::Value& v,
                      const std::string& label);
// Every key of `s` into `m`; `label` is the message's name in errors:
// "ops[2]" for an Op, "ops[2] ColorJitter" for an op's parameters,
// "output" for the output, "" for the spec.
absl::Status FillMessage(pb::Message* m, const pb::Struct& s, const std::string& label);

// The set fields of `m`, as "name=value, ..." (Describe) or a JSON object
// (ToJson; an Op's fields by their JSON names, torchvision's).
void AppendFields(const pb::Message& m, std::string* out, bool json);

}  // namespace stoker::pipeline::internal

#endif  // STOKER_PIPELINE_SPEC_TEXT_H_
