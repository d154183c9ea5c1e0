// What jpeg_decoder.cc and transcode.cc share around libjpeg: the error and
// progress managers, the mapping of libjpeg's errors to absl::Status, and the
// header checks (caps, supported layouts). Internal to stoker_image; the only
// header that includes jpeglib.h.
//
// The handlers leave libjpeg through std::longjmp to ErrorManager::jump, so
// every libjpeg call must run inside a trampoline that called setjmp on it
// first (the rule at the top of jpeg_decoder.h). The message is formatted
// into ErrorManager::message, for ErrorStatus afterwards.

#ifndef STOKER_SERVER_IMAGE_DECODE_LIBJPEG_GLUE_H_
#define STOKER_SERVER_IMAGE_DECODE_LIBJPEG_GLUE_H_

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "absl/status/status.h"
#include "server/image/decode/jpeg_decoder.h"

namespace stoker::image::libjpeg {

// Codes of our own, beside libjpeg's J_MESSAGE_CODE values (all >= 0).
inline constexpr int kScanLimitCode = -1000;
inline constexpr int kTruncatedCode = -1001;

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees this struct as a jpeg_error_mgr
  std::jmp_buf jump;
  int code = 0;
  char message[JMSG_LENGTH_MAX] = {};
};

struct ProgressManager {
  jpeg_progress_mgr pub;  // first: libjpeg sees a jpeg_progress_mgr
  uint32_t max_scans = 1000;
};

// Fills err->pub (jpeg_std_error, then our error_exit / emit_message /
// output_message) and progress->pub (a monitor that fails a decompressor
// past progress->max_scans scans). Warnings are counted in
// err->pub.num_warnings and tolerated, as PIL tolerates them, except the end
// of the data inside the image (JWRN_JPEG_EOF): a truncated file, an error.
void InstallHandlers(ErrorManager* err, ProgressManager* progress);

// Clears the code, the message and the warning count before a new file.
void ResetErrors(ErrorManager* err);

// The status for the error held in `err`: INVALID_ARGUMENT (corrupt,
// truncated), UNIMPLEMENTED (12-bit, lossless, hierarchical, unsupported
// conversions), RESOURCE_EXHAUSTED (too large, over max_scans).
absl::Status ErrorStatus(const ErrorManager& err);

// After jpeg_read_header: the caps of `limits` (max_pixels) and what stoker
// decodes (8-bit; gray, YCbCr/RGB, CMYK/YCCK). OK, RESOURCE_EXHAUSTED or
// UNIMPLEMENTED.
absl::Status CheckHeader(const jpeg_decompress_struct& c, const DecodeLimits& limits);

}  // namespace stoker::image::libjpeg

#endif  // STOKER_SERVER_IMAGE_DECODE_LIBJPEG_GLUE_H_
