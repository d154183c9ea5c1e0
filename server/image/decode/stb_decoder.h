// The BMP and PNM (PGM, PPM) decoders: stb_image 2.27 (Debian's libstb,
// pkg-config stb) behind ImageDecoder (image_decoder.h). One class reads
// both; each factory's object accepts only its own format (a file of the
// other fails as INVALID_ARGUMENT).
//
// The file's header is parsed here, exactly as PIL 9.4's BmpImagePlugin /
// PpmImagePlugin parse it, and stb is only given a header written here
// (40-byte BITMAPINFOHEADER with an explicit palette or masks; "P5/P6 W H
// maxval\n") followed by the file's own pixel bytes, read in place through
// stbi_load_from_callbacks: stb's own header parsers disagree with PIL
// (palette size taken from the gap before the pixel data, OS/2 palettes
// read 4 entries short, palette entries past the file's count left
// uninitialized, no PNM maxval scaling, 16-bit PNM samples left byte
// swapped) and stb never notices truncation (it reads zeros). So every cap,
// offset and size check is done here before stb allocates anything; stb
// unpacks the rows (palette lookup, bit fields, BGR order, row padding,
// bottom-up order) and the samples are fixed up to PIL's values while the
// region is copied out. stb decodes the whole image: Decode(region) decodes
// all of it into stb's buffer (width * height * 3 bytes; PNM: channels *
// 1 or 2 bytes per pixel), copies the window and frees the buffer (nothing
// big is held between calls); Decode may be called again for another
// region, it decodes again.
//
// BMP, as PIL's Image.open(f).convert("RGB"):
//   - headers of 12 (OS/2 1.x: 16-bit sizes, 3-byte palette entries), 40,
//     64 (OS/2 2.x, read as a 40-byte one, as PIL does), 108 and 124 bytes;
//     a height whose top byte is 0xFF is top-down (rows = 2^32 - height),
//     any other height is bottom-up (so a "negative" -2^31 is 2^31 rows:
//     over the cap); planes is not checked.
//   - 1, 4, 8-bit palette (mode "P"): entries BGR(X) read from right after
//     the header, biClrUsed of them (0: 2^bits); an index past them is the
//     grey (i, i, i), as PIL's palette is filled. Mode "1" (1-bit, black
//     then white) and "L" (8-bit, palette entry i = grey i for all its
//     entries) give the same pixels through the palette.
//   - 16-bit BI_RGB and BI_BITFIELDS 555 ("BGR;15") and 565 ("BGR;16"),
//     any alpha mask ignored (mode "RGB"): a k-bit channel value v is
//     v * 255 / (2^k - 1), rounded down (PIL's unpackers; stb replicates
//     the high bits instead, 4 -> 33 where PIL gives 32: stb's value is
//     turned back into v and rescaled).
//   - 24-bit BI_RGB and BI_BITFIELDS FF0000/FF00/FF ("BGR").
//   - 32-bit BI_RGB ("BGRX", mode "RGB": the 4th byte is ignored, whatever
//     the V4/V5 alpha mask) and the BI_BITFIELDS masks PIL knows (R, G, B,
//     A): FF0000 FF00 FF 0 ("BGRX"), FF000000 FF0000 FF00 0 ("XBGR"), and,
//     mode "RGBA" (alpha dropped by convert): FF000000 FF0000 FF00 FF,
//     FF FF00 FF0000 FF000000, FF0000 FF00 FF FF000000, 0 0 0 0 ("BGRA").
//     A 40-byte header's three masks follow it; the longer ones hold four.
//   - the pixel data starts at the file header's offset; as in PIL, offset
//     0 means right after the header, masks and palette, and an offset right
//     after the header (no room left for a palette) of a 1/4/8-bit file is
//     moved past 4 * colours bytes. The last row's padding may be missing
//     (PIL does not read it); anything else missing is INVALID_ARGUMENT.
// Refused (UNIMPLEMENTED unless said; PIL reads the first three):
//   - RLE8 and RLE4 compression (stb has no RLE decoder);
//   - a 1/4-bit file whose palette is all grey (i, i, i), or a 4/8-bit one
//     with a 2-entry black and white palette: PIL then reads the pixel bytes
//     as 8-bit grey or 1-bit, not through the palette (garbage), stoker
//     would give the palette's colours, so neither;
//   - a side over 2^24 pixels (stb's STBI_MAX_DIMENSIONS):
//     RESOURCE_EXHAUSTED, as the cap;
//   - a palette of more than 256 entries (INVALID_ARGUMENT; PIL fails on
//     them too, unless all grey) or one that runs past the end of the file
//     (INVALID_ARGUMENT);
//   - and, as PIL: 56-byte headers, other bit depths, JPEG/PNG/alpha
//     bitfields compressions, other bit field masks (a 1/4/8-bit file with
//     bitfields included). Unknown header sizes, zero sizes, pixel data
//     offsets past the end: INVALID_ARGUMENT.
//
// PNM (magic, then width, height and maxval as whitespace-separated
// decimal tokens; a '#' comment runs to CR or LF anywhere in the header,
// even inside a token, as PIL reads it; one whitespace byte after maxval):
//   - P5 maxval 1..255 (mode "L") and P6 maxval 1..65535 (mode "RGB",
//     2-byte big-endian samples over 255): each sample v becomes
//     min(255, round(v / maxval * 255)), Python's round (half to even) on
//     doubles, as PIL's PpmDecoder computes it (maxval 255: v itself).
//   - P5 maxval 256..65535 (mode "I"): PIL scales to 0..65535,
//     min(65535, round(v / maxval * 65535)), and convert("RGB") of mode I
//     then clips to 255: every sample over about maxval / 257 is white.
//     stoker gives the same clipped values, not a rescaled image (the
//     contract is PIL's pixels: what torchvision's ImageFolder gives).
// Refused: P1, P4 (PBM bitmaps) and P2, P3 (plain ASCII): UNIMPLEMENTED,
// stb reads none of them. Header tokens must be plain digits (PIL's
// Python int() also takes "+12" or "1_2": INVALID_ARGUMENT here), width
// and height > 0, maxval 1..65535 (INVALID_ARGUMENT otherwise); a side
// over 2^24 is RESOURCE_EXHAUSTED. Bytes after the pixels are ignored.
//
// Caps: width * height over limits.max_pixels is RESOURCE_EXHAUSTED in
// ReadHeader; stb's buffer is at most 6 bytes per pixel (16-bit RGB PNM)
// and is allocated only once the file is known to hold every pixel byte
// (neither format is compressed: no bombs). Errors read stb's
// stbi_failure_reason right after the failing call (thread-local in this
// build). The process-wide stbi_set_flip_vertically_on_load must stay off
// (stoker never sets it).
//
// Thread safety: an object is used by one thread at a time; objects on
// different threads are independent.

#ifndef STOKER_SERVER_IMAGE_DECODE_STB_DECODER_H_
#define STOKER_SERVER_IMAGE_DECODE_STB_DECODER_H_

#include <memory>

#include "server/image/decode/image_decoder.h"

namespace stoker::image {

// A decoder of BMP files ('BM'), ImageHeader::format kBmp.
std::unique_ptr<ImageDecoder> MakeBmpDecoder();

// A decoder of PNM files ('P1'..'P6'; P5 and P6 decoded), format kPnm.
std::unique_ptr<ImageDecoder> MakePnmDecoder();

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_STB_DECODER_H_
