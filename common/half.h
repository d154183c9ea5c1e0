// float32 to the 16-bit floats a sample may be served in, and back: IEEE
// half (float16) and bfloat16, each rounded to nearest even as torch's
// .to(dtype) rounds (a NaN stays a NaN, overflow gives infinity). The one
// conversion the image ops' and the volume patches' outputs use.
// Pure functions: thread-safe.

#ifndef STOKER_COMMON_HALF_H_
#define STOKER_COMMON_HALF_H_

#include <cstdint>

namespace stoker {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);

}  // namespace stoker

#endif  // STOKER_COMMON_HALF_H_
