// Helpers of the pipeline contract's tests (pipeline_spec_test.cc,
// op_defaults_test.cc): a spec from keywords, its effective form, the
// error it gives. Catch2 assertions inside: call from a test case only.

#ifndef STOKER_PIPELINE_SPEC_TEST_UTIL_H_
#define STOKER_PIPELINE_SPEC_TEST_UTIL_H_

#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "pipeline/pipeline_spec.h"

namespace stoker::pipeline::spec_test {

using v1::PipelineSpec;

// The request form of `keywords` (SpecFromKeywordsJson must take them).
inline PipelineSpec Request(const std::string& keywords) {
  auto s = SpecFromKeywordsJson(keywords);
  INFO(keywords << ": " << s.status().ToString());
  REQUIRE(s.ok());
  return *s;
}

// The effective form of `keywords` (Effective must take them).
inline PipelineSpec Eff(const std::string& keywords) {
  auto e = Effective(Request(keywords));
  INFO(keywords << ": " << e.status().ToString());
  REQUIRE(e.ok());
  return *e;
}

// The message of the error the keywords give, from SpecFromKeywordsJson or
// else from Effective (which must then fail).
inline std::string Error(const std::string& keywords) {
  absl::StatusOr<PipelineSpec> s = SpecFromKeywordsJson(keywords);
  if (s.ok()) s = Effective(*s);
  INFO(keywords);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

inline std::vector<uint32_t> U(const google::protobuf::RepeatedField<uint32_t>& r) {
  return {r.begin(), r.end()};
}
inline std::vector<float> F(const google::protobuf::RepeatedField<float>& r) {
  return {r.begin(), r.end()};
}

inline bool Same(const PipelineSpec& a, const PipelineSpec& b) {
  INFO(ToJson(a) << "\n" << ToJson(b));
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace stoker::pipeline::spec_test

#endif  // STOKER_PIPELINE_SPEC_TEST_UTIL_H_
