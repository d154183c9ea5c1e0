// Helpers of SampleProcessor's tests (pipeline_test.cc,
// pipeline_ops_test.cc). Catch2 assertions inside: call from a test case.

#ifndef STOKER_SERVER_IMAGE_PIPELINE_TEST_UTIL_H_
#define STOKER_SERVER_IMAGE_PIPELINE_TEST_UTIL_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "server/image/pipeline.h"
#include "testing/test_params.h"

namespace stoker::image::testing {

// The decode pipeline's output (must succeed).
inline std::vector<uint8_t> DecodeRgb(SampleProcessor& proc, const std::vector<uint8_t>& jpeg, uint32_t* h,
                               uint32_t* w, bool apply_exif = false) {
  PipelineParams p = testing::DecodeParams();
  p.apply_exif = apply_exif;
  std::vector<uint8_t> out(MaxSampleBytes(p));
  SampleResult r;
  const absl::Status s = proc.Process(jpeg.data(), jpeg.size(), p, {}, out.data(), out.size(), &r);
  REQUIRE(s.ok());
  *h = r.height;
  *w = r.width;
  out.resize(r.bytes);
  return out;
}

}  // namespace stoker::image::testing

#endif  // STOKER_SERVER_IMAGE_PIPELINE_TEST_UTIL_H_
