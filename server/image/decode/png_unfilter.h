// Undoing PNG's row filters (PNG specification, section 9: None, Sub, Up,
// Average, Paeth), for the PNG decoder's whole-buffer path
// (png_decoder.cc): libdeflate inflates the image data in one call, and
// these functions restore each row in place. Pure functions of their
// arguments; any thread.

#ifndef STOKER_SERVER_IMAGE_DECODE_PNG_UNFILTER_H_
#define STOKER_SERVER_IMAGE_DECODE_PNG_UNFILTER_H_

#include <cstddef>
#include <cstdint>

namespace stoker::image {

// Restores one filtered row of `n` bytes in place. `filter` is the row's
// filter-type byte (0..4); `prev` is the previous row, already restored, or
// nullptr for the first row (where the spec's previous row is all zeros);
// `bpp` is the filter's bytes per complete pixel, rounded up to 1 (1, 2, 3,
// 4, 6 or 8). False, and the row untouched, for a filter type over 4 or
// another bpp.
bool UnfilterRow(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n, size_t bpp);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_PNG_UNFILTER_H_
