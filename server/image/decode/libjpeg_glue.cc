#include "server/image/decode/libjpeg_glue.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/image/decode/image_decoder.h"

namespace stoker::image::libjpeg {
namespace {

ErrorManager* ErrorOf(j_common_ptr cinfo) { return reinterpret_cast<ErrorManager*>(cinfo->err); }

[[noreturn]] void LongJumpOut(j_common_ptr cinfo) { std::longjmp(ErrorOf(cinfo)->jump, 1); }

[[noreturn]] void OnErrorExit(j_common_ptr cinfo) {
  ErrorManager* err = ErrorOf(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  err->code = cinfo->err->msg_code;
  LongJumpOut(cinfo);
}

void OnEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
    ErrorManager* err = ErrorOf(cinfo);
    std::snprintf(err->message, sizeof(err->message), "Premature end of JPEG file (truncated)");
    err->code = kTruncatedCode;
    LongJumpOut(cinfo);
  }
  cinfo->err->num_warnings++;
}

void OnOutputMessage(j_common_ptr) {}

void OnProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  auto* progress = reinterpret_cast<ProgressManager*>(cinfo->progress);
  if (dinfo->input_scan_number > 0 &&
      static_cast<uint32_t>(dinfo->input_scan_number) > progress->max_scans) {
    ErrorManager* err = ErrorOf(cinfo);
    std::snprintf(err->message, sizeof(err->message), "JPEG has more than %u scans",
                  progress->max_scans);
    err->code = kScanLimitCode;
    LongJumpOut(cinfo);
  }
}

bool SupportedLayout(const jpeg_decompress_struct& c) {
  switch (c.num_components) {
    case 1:
      return c.jpeg_color_space == JCS_GRAYSCALE;
    case 3:
      return c.jpeg_color_space == JCS_YCbCr || c.jpeg_color_space == JCS_RGB;
    case 4:
      return c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
    default:
      return false;
  }
}

}  // namespace

void InstallHandlers(ErrorManager* err, ProgressManager* progress) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = OnErrorExit;
  err->pub.emit_message = OnEmitMessage;
  err->pub.output_message = OnOutputMessage;
  std::memset(&progress->pub, 0, sizeof(progress->pub));
  progress->pub.progress_monitor = OnProgress;
}

void ResetErrors(ErrorManager* err) {
  err->code = 0;
  err->message[0] = '\0';
  err->pub.num_warnings = 0;
}

absl::Status ErrorStatus(const ErrorManager& err) {
  const std::string text(err.message);
  switch (err.code) {
    case kScanLimitCode:
      return absl::ResourceExhaustedError(text);
    case kTruncatedCode:
      return absl::InvalidArgumentError(text);
    case JERR_BAD_PRECISION:
      return absl::UnimplementedError(
          absl::StrCat("only 8-bit JPEG is supported (12-bit and others are not): ", text));
    case JERR_SOF_UNSUPPORTED:
      return absl::UnimplementedError(
          absl::StrCat("lossless and hierarchical JPEG are not supported: ", text));
    case JERR_ARITH_NOTIMPL:
    case JERR_NOTIMPL:
    case JERR_NOT_COMPILED:
    case JERR_CONVERSION_NOTIMPL:
      return absl::UnimplementedError(absl::StrCat("unsupported JPEG: ", text));
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW:
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
      return absl::ResourceExhaustedError(absl::StrCat("JPEG too large: ", text));
    default:
      return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", text));
  }
}

absl::Status CheckHeader(const jpeg_decompress_struct& c, const DecodeLimits& limits) {
  absl::Status s = CheckPixelCap("JPEG", c.image_width, c.image_height, limits.max_pixels);
  if (!s.ok()) return s;
  if (c.data_precision != 8) {
    return absl::UnimplementedError(
        absl::StrCat(c.data_precision, "-bit JPEG is not supported (8-bit only)"));
  }
  if (!SupportedLayout(c)) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported JPEG color layout: ", c.num_components,
                     " components, color space ", static_cast<int>(c.jpeg_color_space)));
  }
  return absl::OkStatus();
}

}  // namespace stoker::image::libjpeg
