// The only file of stoker_image that uses setjmp/longjmp (see jpeg_decoder.h).
//
// Rule kept below: a Try* trampoline calls setjmp, then only libjpeg
// functions; it has no local with a destructor, and it reports failure as a
// plain int. ErrorManager::message holds libjpeg's text for the C++ side.

#include "server/image/jpeg_decoder.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/exif.h"

namespace stoker::image {
namespace {

// Codes of our own, beside libjpeg's J_MESSAGE_CODE values (all >= 0).
constexpr int kScanLimitCode = -1000;
constexpr int kTruncatedCode = -1001;

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

ErrorManager* ErrorOf(j_common_ptr cinfo) { return reinterpret_cast<ErrorManager*>(cinfo->err); }

[[noreturn]] void LongJumpOut(j_common_ptr cinfo) {
  ErrorManager* err = ErrorOf(cinfo);
  std::longjmp(err->jump, 1);
}

// error_exit: format libjpeg's message, then leave through longjmp.
[[noreturn]] void OnErrorExit(j_common_ptr cinfo) {
  ErrorManager* err = ErrorOf(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  err->code = cinfo->err->msg_code;
  LongJumpOut(cinfo);
}

// emit_message: warnings (level -1) are tolerated like PIL tolerates them,
// except the end of data inside the image, which PIL refuses too.
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

// ---- Trampolines: setjmp + libjpeg calls only. ----

int TryCreate(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return 0;
  jpeg_create_decompress(cinfo);
  return 1;
}

int TryReadHeader(j_decompress_ptr cinfo, ErrorManager* err, const uint8_t* data, size_t size,
                  int save_app1, int* header_result) {
  if (setjmp(err->jump)) return 0;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, save_app1 ? 0xFFFF : 0);
  *header_result = jpeg_read_header(cinfo, TRUE);
  return 1;
}

int TryStart(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return 0;
  jpeg_start_decompress(cinfo);
  return 1;
}

int TryCrop(j_decompress_ptr cinfo, ErrorManager* err, JDIMENSION* x, JDIMENSION* w) {
  if (setjmp(err->jump)) return 0;
  jpeg_crop_scanline(cinfo, x, w);
  return 1;
}

int TrySkip(j_decompress_ptr cinfo, ErrorManager* err, JDIMENSION rows, JDIMENSION* skipped) {
  if (setjmp(err->jump)) return 0;
  *skipped = jpeg_skip_scanlines(cinfo, rows);
  return 1;
}

int TryRead(j_decompress_ptr cinfo, ErrorManager* err, JSAMPARRAY rows, JDIMENSION max_rows,
            JDIMENSION* got) {
  if (setjmp(err->jump)) return 0;
  *got = jpeg_read_scanlines(cinfo, rows, max_rows);
  return 1;
}

int TryFinish(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return 0;
  jpeg_finish_decompress(cinfo);
  return 1;
}

int TryInputComplete(j_decompress_ptr cinfo, ErrorManager* err, int* complete) {
  if (setjmp(err->jump)) return 0;
  *complete = jpeg_input_complete(cinfo);
  return 1;
}

// ---- Back in C++. ----

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

// True when [p, p + n) holds an EOI marker (FF D9). Entropy-coded data
// never contains FF D9 (an FF there is followed by 00 or a restart marker),
// so this finds the real end of the image, searching from the back.
bool HasEoi(const uint8_t* p, size_t n) {
  for (size_t i = n; i >= 2; --i) {
    if (p[i - 1] == 0xD9 && p[i - 2] == 0xFF) return true;
  }
  return false;
}

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  ProgressManager progress;
  bool created = false;
  bool active = false;  // an image is between ReadHeader and Finish/Stop/Abort
  int channels = 3;
};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {
  State& s = *state_;
  std::memset(&s.cinfo, 0, sizeof(s.cinfo));
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = OnErrorExit;
  s.err.pub.emit_message = OnEmitMessage;
  s.err.pub.output_message = OnOutputMessage;
  std::memset(&s.progress.pub, 0, sizeof(s.progress.pub));
  s.progress.pub.progress_monitor = OnProgress;
  s.created = TryCreate(&s.cinfo, &s.err) != 0;
  if (s.created) s.cinfo.progress = &s.progress.pub;
}

JpegDecoder::~JpegDecoder() {
  if (state_->created) jpeg_destroy_decompress(&state_->cinfo);
}

void JpegDecoder::Abort() {
  if (state_->created && state_->active) jpeg_abort_decompress(&state_->cinfo);
  state_->active = false;
}

int JpegDecoder::warnings() const { return static_cast<int>(state_->err.pub.num_warnings); }

uint32_t JpegDecoder::next_row() const { return state_->cinfo.output_scanline; }

absl::Status JpegDecoder::ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                                     JpegHeader* header) {
  State& s = *state_;
  if (!s.created) return absl::InternalError("libjpeg could not create a decompressor");
  Abort();
  if (data == nullptr || size == 0) return absl::InvalidArgumentError("empty file");
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    return absl::InvalidArgumentError("not a JPEG file (no SOI marker)");
  }
  s.err.code = 0;
  s.err.message[0] = '\0';
  s.err.pub.num_warnings = 0;
  s.progress.max_scans = limits.max_scans;
  s.active = true;
  int header_result = 0;
  if (!TryReadHeader(&s.cinfo, &s.err, data, size, limits.read_exif ? 1 : 0, &header_result)) {
    Abort();
    return ErrorStatus(s.err);
  }
  if (header_result != JPEG_HEADER_OK) {
    Abort();
    return absl::InvalidArgumentError("JPEG holds tables only, no image");
  }
  const jpeg_decompress_struct& c = s.cinfo;
  const uint64_t pixels = uint64_t{c.image_width} * c.image_height;
  if (pixels > limits.max_pixels) {
    Abort();
    return absl::ResourceExhaustedError(absl::StrCat("image is ", c.image_width, "x",
                                                     c.image_height, ", over the cap of ",
                                                     limits.max_pixels, " pixels"));
  }
  if (c.data_precision != 8) {
    Abort();
    return absl::UnimplementedError(
        absl::StrCat(c.data_precision, "-bit JPEG is not supported (8-bit only)"));
  }
  const bool cmyk =
      c.num_components == 4 && (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK);
  const bool rgb =
      c.num_components == 3 && (c.jpeg_color_space == JCS_YCbCr || c.jpeg_color_space == JCS_RGB);
  const bool gray = c.num_components == 1 && c.jpeg_color_space == JCS_GRAYSCALE;
  if (!cmyk && !rgb && !gray) {
    Abort();
    return absl::UnimplementedError(
        absl::StrCat("unsupported JPEG color layout: ", c.num_components,
                     " components, color space ", static_cast<int>(c.jpeg_color_space)));
  }
  header->width = c.image_width;
  header->height = c.image_height;
  header->components = c.num_components;
  header->progressive = c.progressive_mode != 0;
  header->arithmetic = c.arith_code != 0;
  header->orientation = 1;
  if (limits.read_exif) {
    for (jpeg_saved_marker_ptr m = c.marker_list; m != nullptr; m = m->next) {
      if (m->marker != JPEG_APP0 + 1) continue;
      const int orientation = ParseExifOrientation(m->data, m->data_length);
      if (m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
        header->orientation = orientation;
        break;  // the first EXIF block rules, as in PIL
      }
    }
  }
  s.channels = cmyk ? 4 : 3;
  return absl::OkStatus();
}

absl::Status JpegDecoder::Start(int scale_num, DecodeInfo* info) {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("Start without ReadHeader");
  if (scale_num < 1 || scale_num > 8) return absl::InvalidArgumentError("scale_num not in 1..8");
  jpeg_decompress_struct& c = s.cinfo;
  c.out_color_space = s.channels == 4 ? JCS_CMYK : JCS_RGB;
  c.scale_num = static_cast<unsigned int>(scale_num);
  c.scale_denom = 8;
  c.dct_method = JDCT_ISLOW;
  c.do_fancy_upsampling = TRUE;
  c.do_block_smoothing = TRUE;
  c.quantize_colors = FALSE;
  c.buffered_image = FALSE;
  c.raw_data_out = FALSE;
  if (!TryStart(&c, &s.err)) {
    Abort();
    return ErrorStatus(s.err);
  }
  if (c.output_components != s.channels) {
    Abort();
    return absl::InternalError("libjpeg produced an unexpected channel count");
  }
  info->width = c.output_width;
  info->height = c.output_height;
  info->channels = s.channels;
  return absl::OkStatus();
}

absl::Status JpegDecoder::CropColumns(uint32_t* x, uint32_t* w) {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("CropColumns without Start");
  JDIMENSION jx = *x, jw = *w;
  if (!TryCrop(&s.cinfo, &s.err, &jx, &jw)) {
    Abort();
    return ErrorStatus(s.err);
  }
  *x = jx;
  *w = jw;
  return absl::OkStatus();
}

absl::Status JpegDecoder::SkipRows(uint32_t rows) {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("SkipRows without Start");
  JDIMENSION skipped = 0;
  if (!TrySkip(&s.cinfo, &s.err, rows, &skipped)) {
    Abort();
    return ErrorStatus(s.err);
  }
  if (skipped != rows) {
    Abort();
    return absl::InternalError("libjpeg skipped fewer rows than asked");
  }
  return absl::OkStatus();
}

absl::Status JpegDecoder::ReadRows(uint8_t* const* rows, uint32_t max_rows, uint32_t* got) {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("ReadRows without Start");
  JDIMENSION n = 0;
  if (!TryRead(&s.cinfo, &s.err, const_cast<JSAMPARRAY>(rows), max_rows, &n)) {
    Abort();
    return ErrorStatus(s.err);
  }
  *got = n;
  return absl::OkStatus();
}

absl::Status JpegDecoder::Finish() {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("Finish without Start");
  if (!TryFinish(&s.cinfo, &s.err)) {
    Abort();
    return ErrorStatus(s.err);
  }
  s.active = false;  // jpeg_finish_decompress resets the object
  return absl::OkStatus();
}

absl::Status JpegDecoder::Stop() {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("Stop without Start");
  int complete = 0;
  if (!TryInputComplete(&s.cinfo, &s.err, &complete)) {
    Abort();
    return ErrorStatus(s.err);
  }
  if (!complete && s.cinfo.unread_marker == 0xD9) complete = 1;  // EOI already read
  if (!complete && s.cinfo.src != nullptr) {
    complete = HasEoi(s.cinfo.src->next_input_byte, s.cinfo.src->bytes_in_buffer) ? 1 : 0;
  }
  Abort();
  if (!complete) return absl::InvalidArgumentError("Premature end of JPEG file (truncated)");
  return absl::OkStatus();
}

}  // namespace stoker::image
