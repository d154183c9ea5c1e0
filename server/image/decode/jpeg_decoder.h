// A thin, Status-returning wrapper over the libjpeg decompression API, with
// the caps a server needs against hostile files. Internal to stoker_image.
//
// libjpeg reports fatal errors by calling error_exit(), which must not
// return; the only portable way out is longjmp. All setjmp/longjmp use is
// confined to jpeg_decoder.cc and transcode.cc (the handlers that jump are
// in libjpeg_glue.cc): every call into libjpeg goes through a small
// C-style trampoline that owns the setjmp and has no C++ objects with
// destructors in scope, and the message is formatted into a char buffer
// that the C++ side turns into an absl::Status afterwards.
//
// Usage per image (the object is reused across images):
//   1. ReadHeader(data, size, limits, &header)   caps checked here
//   2. Start(scale_num, &info[, scans])           DCT scaling scale_num/8
//   3. optional Window(&x, &w, y, &seeked)        columns and first row; or
//      optional CropColumns(&x, &w)               widened to an iMCU boundary
//      optional SkipRows(n)
//   5. ReadRows(...) until done
//   6. Finish() (reads up to EOI) or Stop() (stops early; checks the file
//      is not truncated)
// Any error leaves the object ready for the next ReadHeader.

#ifndef STOKER_SERVER_IMAGE_DECODE_JPEG_DECODER_H_
#define STOKER_SERVER_IMAGE_DECODE_JPEG_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
  // Start decoded a filtered copy of the file without the AC scans the
  // scale never reads (ScanSelection::kNeeded took effect).
  bool skipped_scans = false;
};

// Which scans of a progressive file Start decodes.
enum class ScanSelection {
  kAll,     // every scan, as read
  kNeeded,  // at scale 1/8: only the scans the reduced IDCTs read (below)
};

// One scan of a JPEG file as laid out in its bytes (ListScans).
struct JpegScan {
  size_t offset = 0;  // of its SOS marker
  size_t bytes = 0;   // SOS segment and entropy-coded data, up to the next marker
  int components = 0;
  int component[4] = {0, 0, 0, 0};     // indexes into the frame's components
  int ss = 0, se = 0, ah = 0, al = 0;  // spectral band, successive approximation
};

// Lists the scans of a progressive Huffman-coded file (SOF2) from its
// markers alone, no entropy decoding: segments are walked by their lengths
// and a scan's data ends at the first marker that is not FF00 or RSTn.
// Returns false (and leaves *scans unspecified) for anything else, or
// anything it does not fully expect: another frame type, a marker other than
// SOS/DHT/DQT/DRI/APPn/COM/EOI after the frame, no EOI, a progression
// libjpeg would refuse or warn about, a scan whose Huffman table is missing
// or would not build, a script that does not bring every
// coefficient of every component to full precision, more than max_scans
// scans. Never reads outside [data, data + size).
[[nodiscard]] bool ListScans(const uint8_t* data, size_t size, uint32_t max_scans,
                             std::vector<JpegScan>* scans);

struct JpegDecoderOptions {
  // Window may leave out the restart intervals a window does not need
  // (below). Off: it always crops and skips (tests compare the two).
  bool seek_restart_intervals = true;
};

class JpegDecoder {
 public:
  explicit JpegDecoder(const JpegDecoderOptions& options = {});
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Parses markers up to the first scan. `data` must stay valid until the
  // image is finished. Every file starts from a fresh libjpeg object: no
  // Huffman or quantization table of an earlier file is ever used (a file
  // missing one fails as it would alone). Errors: INVALID_ARGUMENT (not a
  // JPEG, corrupt), UNIMPLEMENTED (12-bit, lossless, hierarchical, odd
  // component counts), RESOURCE_EXHAUSTED (more than limits.max_pixels
  // pixels).
  [[nodiscard]] absl::Status ReadHeader(const uint8_t* data, size_t size,
                                        const DecodeLimits& limits, JpegHeader* header);

  // Starts decompression with DCT scaling scale_num/8 (1..8), ISLOW IDCT
  // and fancy upsampling (what PIL uses). Multi-scan files are fully
  // consumed here (the scan cap applies).
  //
  // ScanSelection::kNeeded at scale_num 1 on a progressive file decodes a
  // copy of it without the AC scans of the components whose reduced IDCT is
  // 1x1 (it reads only the DC coefficient), as libjpeg-turbo's
  // jpeg_calc_output_dimensions gives them: the luma, and the chroma unless
  // it is subsampled on both axes (4:2:0: libjpeg-turbo scales that chroma
  // up with a 2x2 IDCT, which reads AC coefficients, so its AC scans stay).
  // Block smoothing is off for the copy (it would estimate the missing AC
  // terms); the whole file does not smooth either, ListScans accepting only
  // scripts that bring every coefficient to full precision. The pixels are
  // those of kAll, bit for bit. The copy is made only when ListScans accepts
  // the file and the copy is smaller; on any error or warning while decoding
  // it, the whole file is decoded instead, so errors and pixels are always
  // those of kAll (only warnings() may count fewer: those of skipped scans
  // are not seen). info->skipped_scans says which happened. The copy lives
  // in a buffer of this object, reused between images.
  [[nodiscard]] absl::Status Start(int scale_num, DecodeInfo* info,
                                   ScanSelection scans = ScanSelection::kAll);

  // Restricts the columns decoded to [*x, *x + *w); libjpeg widens the
  // range to an iMCU boundary and the actual range is written back.
  [[nodiscard]] absl::Status CropColumns(uint32_t* x, uint32_t* w);

  // Restricts decoding to columns [*x, *x + *w) (widened as CropColumns
  // widens them, the actual range written back) and rows from y on (the
  // next row read is y): CropColumns when the columns are not all of them,
  // then SkipRows(y). Right after Start, in output pixels at its scale.
  //
  // On a baseline file with restart markers (jpeg_restart.h), it instead
  // decodes a cut copy of the file holding only the restart intervals from
  // one MCU above the window down, and, when the interval divides an MCU
  // row, only those from one MCU beside it: libjpeg would entropy-decode
  // every MCU above and beside the window. *seeked says so. The rows and
  // columns read are the whole file's, bit for bit, and next_row() counts
  // in the whole image. When the file is not one jpeg_restart.h indexes, or
  // nothing would be left out, or libjpeg refuses the copy (error or
  // warning) at its start, crop or skip, the original is decoded as above:
  // errors are then the original's. Once reading, damage inside an interval
  // the copy leaves out is not seen (as rows below a window are never read
  // on either path); warnings() counts those of the copy. The copy lives in
  // a buffer of this object, reused between images.
  [[nodiscard]] absl::Status Window(uint32_t* x, uint32_t* w, uint32_t y, bool* seeked);

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

#endif  // STOKER_SERVER_IMAGE_DECODE_JPEG_DECODER_H_
