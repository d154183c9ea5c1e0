// The one EXIF field the pipeline needs: the orientation of IFD0.

#ifndef STOKER_SERVER_IMAGE_DECODE_EXIF_H_
#define STOKER_SERVER_IMAGE_DECODE_EXIF_H_

#include <cstddef>
#include <cstdint>

namespace stoker::image {

// `app1` is the payload of an APP1 marker (after the length field). Returns
// the Orientation tag (0x0112) of IFD0 when it is 1..8, else 1 (absent,
// not EXIF, malformed, out of range). Every read is bounds-checked.
int ParseExifOrientation(const uint8_t* app1, size_t size);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_EXIF_H_
