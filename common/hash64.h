// A stable 64-bit hash of bytes: the same in every process, run and build
// (unlike absl::Hash), for what is written to disk and checked later (the
// transcode cache's envelopes, the volume cache's entries). A multiply-xor
// mix of 8-byte words in four lanes, then a final avalanche. Not
// cryptographic: it detects corruption, not forgery.
//
// Little-endian hosts only (x86-64, aarch64). Thread-safe: a pure function.

#ifndef STOKER_COMMON_HASH64_H_
#define STOKER_COMMON_HASH64_H_

#include <cstddef>
#include <cstdint>

namespace stoker {

uint64_t Hash64(const void* data, size_t bytes, uint64_t seed);

}  // namespace stoker

#endif  // STOKER_COMMON_HASH64_H_
