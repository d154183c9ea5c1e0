// Lossless re-coding of a progressive (or otherwise multi-scan) JPEG as a
// baseline one: the same quantized DCT coefficients, written as a single
// interleaved Huffman scan with optimized tables. No pixel work is done, and
// the copy decodes to the same pixels as the original at every DCT scale
// (tested: transcode_test.cc), because libjpeg's decode depends only on the
// coefficients, the quantization tables, the sampling factors and the color
// markers, all of which are kept, and, for a progressive file, on whether
// its scan script brought every coefficient to full precision (else libjpeg
// smooths the blocks: such files are refused). A baseline file decodes
// 2.4-3x faster than its progressive original (3000x2000 photos) and lets
// a crop skip the rows below it.
//
// Used by the workers' transcode cache (server/engine/transcode_cache.h). Like
// jpeg_decoder.cc, transcode.cc confines setjmp/longjmp to C-style
// trampolines; hostile input returns a status, never crashes.
//
// Thread safety: Transcoder is not thread-safe; use one per thread. It
// reuses its libjpeg objects and buffers between files.

#ifndef STOKER_SERVER_IMAGE_DECODE_TRANSCODE_H_
#define STOKER_SERVER_IMAGE_DECODE_TRANSCODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "server/image/decode/jpeg_decoder.h"

namespace stoker::image {

class Transcoder {
 public:
  Transcoder();
  ~Transcoder();
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;

  // Re-codes `data` (a whole JPEG file; not inside *out) as baseline into
  // *out (replaced; its capacity is reused; empty on error). The caps of
  // `limits` apply as in JpegDecoder (read_exif is ignored: every marker is
  // copied). The copy is one interleaved Huffman scan (SOF0, or SOF1 where
  // a quantization table needs 16 bits) with optimized tables and no
  // restart markers. Kept: the quantization tables, component ids,
  // sampling factors and color space, and every APPn and COM marker in
  // order (EXIF orientation, ICC, XMP...), except the JFIF APP0 / Adobe
  // APP14 that libjpeg writes itself (its Adobe marker carries the
  // source's transform: RGB stays RGB, CMYK CMYK, YCCK YCCK).
  // Progressive, multi-scan sequential and arithmetic-coded sources are
  // taken. Warnings libjpeg tolerates (corrupt entropy data...) are
  // tolerated as JpegDecoder does: the copy holds the coefficients libjpeg
  // decoded, and decodes as the damaged original does.
  // Errors: INVALID_ARGUMENT (not a JPEG, corrupt, truncated: a missing
  // EOI included), UNIMPLEMENTED (what JpegDecoder refuses: 12-bit,
  // lossless, hierarchical, odd component layouts), RESOURCE_EXHAUSTED
  // (over limits.max_pixels or limits.max_scans, out of memory),
  // FAILED_PRECONDITION (nothing to gain or no exact copy: already a
  // single-scan Huffman file; a progressive scan script that leaves some
  // coefficient short of full precision, which a progressive decode
  // smooths and a baseline one cannot; a layout one interleaved scan
  // cannot hold: over 10 blocks per MCU, or a quantization table redefined
  // between scans), INTERNAL (the copy's header failed the self-check: a
  // bug). Cost: about 1.6x a full decode of the source (entropy decoding
  // and two Huffman passes; no IDCT, no color conversion).
  [[nodiscard]] absl::Status ToBaseline(const uint8_t* data, size_t size,
                                        const DecodeLimits& limits, std::vector<uint8_t>* out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_TRANSCODE_H_
