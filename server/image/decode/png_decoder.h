// The PNG decoder behind ImageDecoder (image_decoder.h), over libspng 0.7.3
// (Debian 12's libspng-dev; link flags: pkg-config spng). Internal to
// stoker_image.
//
// Ownership and threads: one object per thread, reused across files; it owns
// one libspng context at a time (made afresh by every ReadHeader, so nothing
// of an earlier file is ever seen) and a row buffer it reuses. It reads the
// caller's bytes in place, never copies the file, allocates nothing big
// before the size cap is checked, does no I/O and prints nothing.
//
// Decoding. libspng decodes with SPNG_FMT_PNG: the raw samples, defiltered
// and deinterlaced but never converted, and this decoder converts them to
// RGB8 as PIL 9.4 does; none of libspng's conversions (16 -> 8 bit rounding,
// tRNS, gAMA, sBIT scaling) applies, and neither gAMA, cHRM, sRGB, iCCP nor
// sBIT is applied, as PIL applies none of them.
//
// Modes, as `Image.open(f).mode` gives them, and their convert("RGB"):
//   gray 1-bit               "1"     0 -> 0, 1 -> 255
//   gray 2-, 4-, 8-bit       "L"     v * 85, v * 17, v (scaled to 0..255)
//   gray 16-bit              "I"     min(v, 255) for each channel: PIL clips
//                                    the 32-bit value, so anything over 255 is
//                                    white (not v >> 8)
//   RGB 8-bit                "RGB"   as stored
//   RGB 16-bit               "RGB"   the high byte of each sample
//   palette 1, 2, 4, 8-bit   "P"     the PLTE entry; an index past the end of
//                                    PLTE is the gray (i, i, i), PIL's
//                                    default palette under the file's
//   gray+alpha 8-bit         "LA"    (L, L, L), alpha dropped
//   gray+alpha 16-bit        "RGBA"  (L >> 8) three times, alpha dropped
//   RGBA 8-bit, 16-bit       "RGBA"  R, G, B (16-bit: high bytes), alpha
//                                    dropped
// tRNS never changes a pixel (convert("RGB") drops transparency, a palette's
// and a colour key's alike). Interlaced (Adam7) files give the same pixels.
// APNG: the image Image.open gives is always the IDAT image, whether it is
// the animation's first frame (fcTL before IDAT) or a default image outside
// the animation; the other frames' chunks (fcTL, fdAT) are CRC-checked and
// skipped, never inflated.
//
// Two paths, the same pixels:
//   - The whole-buffer path, for non-interlaced files of 8 bits a sample or
//     fewer whose inflated image data is at most 64 MiB (nearly every photo,
//     mask and CIFAR-style file): libdeflate (Debian's libdeflate, already a
//     dependency of libtiff) inflates all the IDAT data in one call, about
//     twice zlib's speed, and png_unfilter.h restores the rows, up to the
//     region's last one only. It takes only a stream that inflates to
//     exactly the image's rows, ends at the end of the image data and has a
//     good Adler-32, with a valid filter type on every row, in a file whose
//     IDAT chunks form one run followed by IEND alone (libspng judges the
//     chunks after the image data only on a whole decode, and reads a row
//     ahead). Anything else, it hands the file to the row by row path,
//     which then decodes it and decides any error: this path never fails
//     a file itself, and both paths fail the same files. Memory: a copy
//     of the image data when it spans several IDAT chunks, and its
//     inflated rows (at most 64 MiB; buffers over 8 MiB are freed at the
//     next ReadHeader). A second Decode after one ReadHeader reuses the
//     inflated rows.
//   - The row by row path (libspng, all other files, and any file the first
//     path passes on): Decode stops reading the file after the last
//     scanline the region needs: for a non-interlaced file the rows below
//     the region are not inflated; for an interlaced one the first six
//     passes are decoded whole (a region's pixels are in all of them) and
//     the seventh stops after the region. No whole-image buffer.
// Pixels are those of the whole decode, for any region, on either path.
//
// What fails (all before any pixel allocation when the header says so):
//   INVALID_ARGUMENT    not a PNG; a chunk past the end of the file
//                       ("PNG: truncated in IDAT chunk"); no IEND chunk;
//                       a bad CRC in any chunk (ReadHeader checks them all,
//                       whatever region is decoded later); corrupt zlib data or
//                       filters; the image data ending before the last row;
//                       what libspng refuses as invalid (a critical chunk
//                       out of order or unknown, a palette image without
//                       PLTE, PLTE longer than the bit depth allows or not a
//                       multiple of 3); a broken APNG first frame (below).
//   RESOURCE_EXHAUSTED  width * height over limits.max_pixels (checked on the
//                       IHDR bytes, before libspng sees the file); ancillary
//                       chunks libspng keeps (text, iCCP, eXIf, sPLT) over
//                       16 MiB together, or one compressed text/profile
//                       inflating past 2 MiB; out of memory.
//   UNIMPLEMENTED       nothing: every PNG colour type and bit depth is read
//                       (only Path::kWholeBufferOnly, a test mode, uses it).
// Invalid ancillary chunks (a bad tIME, a tRNS of the wrong length...) are
// skipped, as libspng's non-strict mode does and as PIL mostly does.
//
// Where stoker deliberately differs from PIL (each a file PIL opens):
//   - CRCs. Every chunk's CRC is checked, IDAT's and those after the image
//     data included; PIL checks only the chunks before the first IDAT. A
//     file with a wrong CRC is corrupt: a sample failure beats silently
//     training on damaged pixels. ReadHeader checks them all (libdeflate's
//     CRC-32, about 1% of a decode), so a region decode that stops early
//     fails a damaged file as a whole decode does.
//   - IEND. The file must hold a well-formed IEND chunk (length 0, its CRC)
//     after a chain of whole chunks; PIL decodes a file cut anywhere after
//     its last image byte. This is what lets a region decode stop early and
//     still fail every truncated file, as a whole decode does. Bytes after
//     IEND are ignored, as PIL ignores them.
//   - Chunk types must be four of [A-Za-z0-9_] (PIL's test) everywhere; PIL
//     stops reading at a broken type after the image data and keeps the
//     image.
//   - An APNG whose fcTL before IDAT does not cover the whole image at (0, 0)
//     (the APNG spec forbids it; PIL pastes the IDAT data, read at the fcTL's
//     size, onto a black canvas) is INVALID_ARGUMENT, as are the fcTL/acTL
//     errors PIL raises (short chunks, sequence numbers not from 0, a frame
//     outside the image).
//   - The ancillary-chunk limits above (PIL keeps up to 64 MiB of text; it
//     also refuses a text chunk or ICC profile inflating past 1 MiB).
//   - libspng's stricter critical chunks: PLTE too long for the bit depth,
//     a palette image without PLTE, IDAT chunks not in one run.

#ifndef STOKER_SERVER_IMAGE_DECODE_PNG_DECODER_H_
#define STOKER_SERVER_IMAGE_DECODE_PNG_DECODER_H_

#include <memory>

#include "server/image/decode/image_decoder.h"

namespace stoker::image {

struct PngDecoderOptions {
  enum class Path {
    kAuto,             // the whole-buffer path where it takes the file, else
                       // the row by row path (above): what stoker runs
    kRowByRow,         // libspng's path for every file
    kWholeBufferOnly,  // a file (or a region's rows) that path does not take
                       // is UNIMPLEMENTED "PNG: not taken by the whole-buffer
                       // path": tests and the fuzzer see which path ran
  };
  Path path = Path::kAuto;
};

// A new PNG decoder (above). Decode may be called several times after one
// ReadHeader (each decodes the file again, from its start).
std::unique_ptr<ImageDecoder> MakePngDecoder(const PngDecoderOptions& options = {});

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_PNG_DECODER_H_
