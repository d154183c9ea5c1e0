// The JPEG marker syntax the byte-level walkers share (ListScans in
// jpeg_decoder.cc, IndexRestartIntervals in jpeg_restart.cc): markers with
// their fill bytes, length-prefixed segments, and the end of entropy-coded
// data, found without Huffman decoding. Internal to stoker_image; pure
// functions, any thread. They never read outside [d, d + n).

#ifndef STOKER_SERVER_IMAGE_DECODE_JPEG_MARKERS_H_
#define STOKER_SERVER_IMAGE_DECODE_JPEG_MARKERS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stoker::image {

// A big-endian 16-bit field (segment lengths, frame sizes).
inline uint32_t Be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }

// The marker at *pos: FF, any FF fill bytes, then its code. Returns the
// code and moves *pos past it; -1 (and *pos unchanged) when the byte at
// *pos is not FF or the data ends first.
inline int ReadMarker(const uint8_t* d, size_t n, size_t* pos) {
  size_t p = *pos;
  if (p >= n || d[p] != 0xFF) return -1;
  while (p < n && d[p] == 0xFF) ++p;
  if (p >= n) return -1;
  *pos = p + 1;
  return d[p];
}

// The segment at *pos, right after its marker: a 2-byte big-endian length
// that counts itself, then the body. Sets [*body, *body + *body_len) and
// moves *pos past the segment; false (nothing set) when the length is under
// 2 or runs past the end. *pos <= n.
inline bool ReadSegment(const uint8_t* d, size_t n, size_t* pos, const uint8_t** body,
                        uint32_t* body_len) {
  if (n - *pos < 2) return false;
  const uint32_t length = Be16(d + *pos);
  if (length < 2 || length > n - *pos) return false;
  *body = d + *pos + 2;
  *body_len = length - 2;
  *pos += length;
  return true;
}

// In entropy-coded data from `from`: the next marker, stuffed zeros (FF00)
// skipped. Sets *at to its first FF (fill bytes included) and *code_at to
// its code byte; false when the data ends first.
inline bool NextMarkerInData(const uint8_t* d, size_t n, size_t from, size_t* at, size_t* code_at) {
  for (size_t i = from;;) {
    const void* ff = i < n ? std::memchr(d + i, 0xFF, n - i) : nullptr;
    if (ff == nullptr) return false;
    const size_t first = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
    size_t k = first + 1;
    while (k < n && d[k] == 0xFF) ++k;
    if (k >= n) return false;
    if (d[k] != 0x00) {
      *at = first;
      *code_at = k;
      return true;
    }
    i = k + 1;
  }
}

// A restart marker's code (RST0..RST7).
inline bool IsRestartMarker(uint8_t code) { return code >= 0xD0 && code <= 0xD7; }

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_JPEG_MARKERS_H_
