// The TIFF decoder behind ImageDecoder (image_decoder.h), over libtiff 4.5
// (Debian's libtiff-dev; link flags: pkg-config libtiff-4).
//
// libtiff reads the file from memory (TIFFClientOpenExt with read/seek/size
// procs over [data, size), never mmap) and decodes every compression it is
// built with that PIL knows: none, LZW, deflate (Adobe and old), PackBits,
// JPEG, CCITT RLE/G3/G4, ThunderScan, ZSTD, WebP (not LZMA: liblzma
// allocates whatever dictionary a stream declares, up to 4 GiB, outside
// libtiff's allocation cap; UNIMPLEMENTED); predictor 2 (its
// work too). Strips and tiles, contiguous and planar (separate) samples.
// Only the first page (IFD) of a multi-page file is read, as Image.open.
// stoker reads the raw samples (TIFFReadEncodedStrip / TIFFReadEncodedTile)
// and converts them itself with PIL's rules; libtiff's own RGBA conversions
// (TIFFReadRGBA*) are not PIL's and are never used.
//
// Modes, as PIL 9.4's TiffImagePlugin.OPEN_INFO names them, and what
// convert("RGB") gives (v a sample, R G B the three channels):
//   "1"     1-bit min-is-black: 0 -> 0, 1 -> 255; min-is-white: inverted.
//   "L"     2/4/8-bit gray: v * 255 / (2^bits - 1) (v * 85, v * 17, v);
//           min-is-white: 255 minus that. R = G = B.
//   "I;16"  16-bit gray, little-endian file, min-is-black or min-is-white
//   "I;16B" (never inverted: PIL ignores min-is-white here); big-endian,
//           min-is-black only: min(v, 255), i.e. clipped, not scaled.
//   "LA"    8-bit gray + unassociated alpha: the gray, alpha dropped.
//   "P"     1/2/4/8-bit palette; "PA" 8-bit palette + alpha: the 16-bit
//           ColorMap entry's high byte (entry / 256), alpha dropped.
//   "RGB"   8-bit: as stored; 16-bit: each sample's high byte (v >> 8).
//   "RGBA"  RGB + unassociated alpha (ExtraSamples 2, or none given), or
//   "RGBX"  + unspecified extra samples (0): alpha/extras dropped.
//           8-bit with up to 3 extra samples, 16-bit with one.
//   "RGBA"  from associated (premultiplied) alpha, ExtraSamples 1: PIL
//           un-premultiplies: alpha 0 -> 0, 255 -> v, else
//           min(255, v * 255 / alpha) (integer division); 16-bit: the same
//           on the high bytes.
//   "CMYK"  8-bit (up to 2 unspecified extras) or 16-bit little-endian
//           (high bytes): with nk = 255 - K, each of R, G, B is
//           nk - MULDIV255(C|M|Y, nk), MULDIV255(a, b) being
//           ((a * b + 128) + ((a * b + 128) >> 8)) >> 8: PIL's cmyk2rgb,
//           not libtiff's (255 - C) * (255 - K) / 255.
//   "RGB"   YCbCr with JPEG compression, contiguous: as PIL, libjpeg turns
//           it into RGB (TIFFTAG_JPEGCOLORMODE = RGB); JPEG-in-TIFF of
//           gray or RGB photometrics decodes as those.
// FillOrder 2 (LSB first) is read where PIL's table has it (bilevel, 2/4/8
// bit gray and palette, 8-bit RGB, 16-bit little-endian gray): libtiff
// reverses the bits. The Orientation tag is ignored, as Image.open does.
//
// Refused (UNIMPLEMENTED, the message names it), as PIL refuses or for
// rarity: floating-point and signed samples, 12- and 32-bit integers, other
// bit depths, CIE L*a*b*, YCbCr not JPEG-compressed or JPEG in separate
// planes (PIL reads those through TIFFReadRGBA), old-style JPEG
// (compression 6), LogLuv and other photometrics, big-endian 16-bit CMYK,
// sample layouts OPEN_INFO lacks (gray + unspecified extra, CMYK + alpha,
// more than 6 samples...), compressions PIL or libtiff do not know.
//
// Where stoker deliberately differs from PIL (PIL decodes uncompressed
// files with its own raw decoder, the others through libtiff; stoker reads
// them all through libtiff, so the two agree):
//   - Uncompressed files that PIL's raw decoder fails on (planar LA, PA,
//     premultiplied RGBA, 5 or 6 samples; LSB-first 8-bit min-is-white
//     gray and some LSB-first palettes) or garbles (planar 16-bit samples;
//     planar tiles of 4 RGB samples without ExtraSamples) decode as their
//     compressed twins do in PIL.
//   - Compressed planar strips of 5 or 6 samples (PIL: "broken data
//     stream") decode.
//   - Headers with swapped version bytes ("MM" 2A 00, "II" 00 2A), which
//     PIL's raw decoder alone reads, fail in libtiff (INVALID_ARGUMENT).
//   - A file whose StripOffsets count is short, or whose Photometric tag is
//     missing, is read as libtiff repairs it (PIL reads the tags as stored).
// One quirk of PIL's libtiff path is kept: 4 samples of RGB without
// ExtraSamples in compressed planar files are un-premultiplied (libtiff
// reports the alpha as "unspecified", which PIL's planar fix-up treats as
// associated); contiguous or uncompressed ones are not.
//
// Region decodes read only the strips / tiles (of the planes PIL reads) that
// the region touches. ReadHeader checks that every strip / tile lies inside
// the file with a non-zero byte count, so a truncated file fails whatever
// the region, as it fails PIL.
//
// Hostile input: every allocation libtiff makes itself is capped at
// 16 * max_pixels + 1 MiB (TIFFOpenOptionsSetMaxSingleMemAlloc), which is
// reported as RESOURCE_EXHAUSTED (the codecs' own libraries: zlib's and
// libjpeg's are bounded by the strip, zstd's window by its default 128 MiB
// limit; LZMA's is not, hence refused); the declared size is checked against
// limits.max_pixels before any pixel buffer, and a tile of more than
// max_pixels pixels is refused the same way. stoker's own buffers hold one
// strip or tile (all its planes). Decompression cannot run past a strip's
// expected size. libtiff's errors and warnings go to handlers of the
// decoder object (never to stderr); its error text ends the Status message.
//
// Thread safety: one decoder object per thread; objects are independent.

#ifndef STOKER_SERVER_IMAGE_DECODE_TIFF_DECODER_H_
#define STOKER_SERVER_IMAGE_DECODE_TIFF_DECODER_H_

#include <memory>

#include "server/image/decode/image_decoder.h"

namespace stoker::image {

// A new TIFF decoder; reusable across files (image_decoder.h).
std::unique_ptr<ImageDecoder> MakeTiffDecoder();

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_TIFF_DECODER_H_
