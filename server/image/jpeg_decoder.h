// A thin, Status-returning wrapper over the libjpeg decompression API, with
// the caps a server needs against hostile files. Internal to stoker_image.
//
// libjpeg reports fatal errors by calling error_exit(), which must not
// return; the only portable way out is longjmp. All setjmp/longjmp use is
// confined to jpeg_decoder.cc: every call into libjpeg goes through a small
// C-style trampoline that owns the setjmp and has no C++ objects with
// destructors in scope, and the message is formatted into a char buffer
// that the C++ side turns into an absl::Status afterwards.
//
// Usage per image (the object is reused across images):
//   1. ReadHeader(data, size, limits, &header)   caps checked here
//   2. Start(scale_num, &info)                    DCT scaling scale_num/8
//   3. optional CropColumns(&x, &w)               widened to an iMCU boundary
//   4. optional SkipRows(n)
//   5. ReadRows(...) until done
//   6. Finish() (reads up to EOI) or Stop() (stops early; checks the file
//      is not truncated)
// Any error leaves the object ready for the next ReadHeader.

#ifndef STOKER_SERVER_IMAGE_JPEG_DECODER_H_
#define STOKER_SERVER_IMAGE_JPEG_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"

namespace stoker::image {

struct DecodeLimits {
  uint64_t max_pixels = 64ull << 20;  // width * height as coded
  uint32_t max_scans = 1000;          // progressive / multi-scan files
  bool read_exif = true;              // parse the EXIF orientation
};

struct JpegHeader {
  uint32_t width = 0;  // as coded (before EXIF orientation)
  uint32_t height = 0;
  int components = 0;  // 1 (gray), 3 (YCbCr/RGB) or 4 (CMYK/YCCK)
  bool progressive = false;
  bool arithmetic = false;
  int orientation = 1;  // EXIF orientation 1..8; 1 when absent or not read
};

struct DecodeInfo {
  uint32_t width = 0;  // output size at the chosen scale (before cropping)
  uint32_t height = 0;
  int channels = 0;  // 3 (RGB) or 4 (Adobe CMYK, inverted as stored)
};

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Parses markers up to the first scan. `data` must stay valid until the
  // image is finished. Errors: INVALID_ARGUMENT (not a JPEG, corrupt),
  // UNIMPLEMENTED (12-bit, lossless, hierarchical, odd component counts),
  // RESOURCE_EXHAUSTED (more than limits.max_pixels pixels).
  [[nodiscard]] absl::Status ReadHeader(const uint8_t* data, size_t size,
                                        const DecodeLimits& limits, JpegHeader* header);

  // Starts decompression with DCT scaling scale_num/8 (1..8), ISLOW IDCT
  // and fancy upsampling (what PIL uses). Multi-scan files are fully
  // consumed here (the scan cap applies).
  [[nodiscard]] absl::Status Start(int scale_num, DecodeInfo* info);

  // Restricts the columns decoded to [*x, *x + *w); libjpeg widens the
  // range to an iMCU boundary and the actual range is written back.
  [[nodiscard]] absl::Status CropColumns(uint32_t* x, uint32_t* w);

  [[nodiscard]] absl::Status SkipRows(uint32_t rows);

  // Reads up to `max_rows` rows, each `channels * width` bytes, into rows[].
  // *got is at least 1 on success unless all rows were read.
  [[nodiscard]] absl::Status ReadRows(uint8_t* const* rows, uint32_t max_rows, uint32_t* got);

  uint32_t next_row() const;

  // All rows were read: reads up to the end of the image (a missing EOI is
  // a truncated file) and resets.
  [[nodiscard]] absl::Status Finish();

  // Stops before the last row: checks that the data after the current
  // position holds an EOI marker (else the file is truncated) and resets.
  [[nodiscard]] absl::Status Stop();

  // Drops the current image (after an error, or to give up); idempotent.
  void Abort();

  // Warnings libjpeg reported for the current/last image (tolerated ones:
  // extraneous bytes, bad restart markers...).
  int warnings() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_JPEG_DECODER_H_
