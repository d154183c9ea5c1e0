#include "server/image/decode/decode_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace stoker::image {

bool KeepDecoderMemory() {
#if defined(__GLIBC__)
  // Setting either turns off glibc's own sliding thresholds, so both are set.
  const bool heap = ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockBytes)) == 1;
  const bool keep = ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeepFreeBytes)) == 1;
  return heap && keep;
#else
  return false;
#endif
}

}  // namespace stoker::image
