// The WebP decoder behind ImageDecoder (image_decoder.h), on libwebp 1.2.4
// (Debian 12's libwebp-dev): libwebpdemux parses the RIFF container,
// libwebp decodes the first frame's bitstream. Link: pkg-config libwebp
// libwebpdemux. Internal to stoker_image.
//
// What PIL 9.4 does, and so what this decoder gives: Pillow is built with
// WebPAnimDecoder (PIL.features.check("webp_anim")), so every WebP file,
// still or animated, opens through it: WebPAnimDecoderNew (a WebPDemux of
// the whole file; any container error fails the open), then the first frame
// decoded non-premultiplied RGBA (MODE_RGBA, fancy upsampling, no
// dithering, libwebp's defaults) onto a canvas cleared to (0, 0, 0, 0): the
// first frame is always a key frame, nothing is blended into it and the
// ANIM background colour is not used. convert("RGB") drops alpha.
//   - Lossy (VP8): libwebp's YUV 4:2:0 to RGB with fancy upsampling.
//   - Lossless (VP8L): the coded ARGB's R, G, B.
//   - With alpha (VP8X + ALPH + VP8, or VP8L with alpha): R, G, B as
//     decoded, alpha dropped, never premultiplied nor composited: where
//     alpha is 0 the colour is whatever the file holds (cwebp and PIL write
//     black there unless told -exact / exact=True).
//   - Animated (VP8X + ANIM + ANMF): the first frame only, at its offset on
//     the canvas; canvas pixels outside it are (0, 0, 0).
// ImageHeader.mode is PIL's: "RGBA" when WebPGetFeatures says the file has
// alpha (the VP8X alpha flag, an ALPH chunk, VP8L's alpha bit) or cannot
// say, else "RGB"; the size is the canvas's. ICC profiles, EXIF and XMP are ignored (PIL's convert
// ignores them too; ImageFolder does not rotate by EXIF).
//
// Regions: libwebp's cropping decodes only the macroblock rows (VP8) or
// rows (VP8L) down to the region's last row, and converts only the
// region's columns. For VP8L the crop is the region itself. For VP8 it is
// widened to start on an even row and column one pixel before the region
// (libwebp snaps crop offsets to even, and fancy upsampling treats a crop's
// first and last rows and columns as the image's edges), and to end on an
// odd row and column after it (or at the frame's edge); unless that is the
// region itself, the crop is decoded into a buffer of this object and the
// region copied out. The pixels are exactly those of the whole decode
// (tested on many windows). Decode may be called again, with any region,
// after one ReadHeader.
//
// Where stoker differs from PIL, deliberately:
//   - A canvas over limits.max_pixels is RESOURCE_EXHAUSTED at ReadHeader,
//     before anything is decoded (PIL allocates two canvases first).
//   - A region decode stops after the region's last row (and one that
//     misses an animation's first frame decodes nothing): a file whose
//     container is whole (its RIFF size and chunk sizes agree with its
//     length, checked at ReadHeader) but whose VP8/VP8L/ALPH data is cut
//     short or corrupt below the region decodes, where PIL fails. A
//     truncated file always fails.
// Nothing is refused: libwebp reads every valid WebP file. Its "unsupported
// feature" status (which no valid file reaches) is UNIMPLEMENTED.
//
// Errors: INVALID_ARGUMENT (not a RIFF/WEBP file; shorter than its RIFF
// size; a container libwebp's demuxer rejects: chunk sizes past the RIFF
// end, frames outside the canvas, bad flags, an image header that does not
// parse; a bitstream that is corrupt or ends early), UNIMPLEMENTED (above),
// RESOURCE_EXHAUSTED (the canvas is over the cap; libwebp or this decoder
// out of memory).
//
// Memory: the demuxer allocates a small record per ANMF chunk (so at most a
// small multiple of the file's size, whatever its frame count) and is freed
// at the end of ReadHeader; libwebp allocates about 4 bytes a pixel for
// VP8L, a few macroblock rows for VP8 (plus 1 byte a pixel for ALPH); the
// crop buffer is at most 3 bytes a pixel. Nothing is printed; libwebp
// starts no thread (use_threads 0).
//
// Thread safety: one object per thread; distinct objects are independent.

#ifndef STOKER_SERVER_IMAGE_DECODE_WEBP_DECODER_H_
#define STOKER_SERVER_IMAGE_DECODE_WEBP_DECODER_H_

#include <memory>

#include "server/image/decode/image_decoder.h"

namespace stoker::image {

std::unique_ptr<ImageDecoder> MakeWebpDecoder();

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_WEBP_DECODER_H_
