// Progressive -> baseline re-coding (see transcode.h).
//
// setjmp rule as in jpeg_decoder.cc: a Try* trampoline calls setjmp, then
// only libjpeg functions and the plain helpers of this file; it has no local
// with a destructor, and it reports failure as a plain int. Both libjpeg
// objects share one ErrorManager: an error in either lands in whichever
// trampoline is running.

#include "server/image/decode/transcode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/decode/libjpeg_glue.h"

namespace stoker::image {
namespace {

using libjpeg::ErrorManager;
using libjpeg::ErrorStatus;
using libjpeg::ProgressManager;

// Writes into a std::vector that grows by doubling. The vector is sized by
// the C++ side before the write starts; only a growth happens inside
// libjpeg, and a failed one leaves through error_exit, not an exception.
struct VectorDestination {
  jpeg_destination_mgr pub;  // first: libjpeg sees a jpeg_destination_mgr
  std::vector<uint8_t>* out = nullptr;
};

VectorDestination* DestinationOf(j_compress_ptr cinfo) {
  return reinterpret_cast<VectorDestination*>(cinfo->dest);
}

void OnInitDestination(j_compress_ptr cinfo) {
  VectorDestination* dest = DestinationOf(cinfo);
  dest->pub.next_output_byte = dest->out->data();
  dest->pub.free_in_buffer = dest->out->size();
}

// Called when the whole buffer is full (libjpeg's contract).
boolean OnEmptyOutputBuffer(j_compress_ptr cinfo) {
  VectorDestination* dest = DestinationOf(cinfo);
  const size_t used = dest->out->size();
  bool grown = true;
  try {
    dest->out->resize(used * 2);
  } catch (...) {  // std::bad_alloc, std::length_error
    grown = false;
  }
  if (!grown) ERREXIT(cinfo, JERR_OUT_OF_MEMORY);
  dest->pub.next_output_byte = dest->out->data() + used;
  dest->pub.free_in_buffer = dest->out->size() - used;
  return TRUE;
}

void OnTermDestination(j_compress_ptr) {}  // the C++ side trims the vector

bool HasPrefix(jpeg_saved_marker_ptr m, const char* tag, size_t n) {
  return m->data_length >= n && std::memcmp(m->data, tag, n) == 0;
}

// libjpeg writes its own JFIF APP0 or Adobe APP14 (with the transform code
// of the copied color space) right after SOI; a second one from the source
// would be a duplicate. Every other marker is copied as it was.
bool KeepMarker(j_compress_ptr dst, jpeg_saved_marker_ptr m) {
  if (m->marker == JPEG_APP0 && dst->write_JFIF_header && HasPrefix(m, "JFIF\0", 5)) return false;
  if (m->marker == JPEG_APP0 + 14 && dst->write_Adobe_marker && HasPrefix(m, "Adobe", 5)) {
    return false;
  }
  return true;
}

// What jpeg_copy_critical_parameters leaves at jpeg_set_defaults' values,
// set again so that nothing else can turn a progression or restarts on.
void SetBaselineParameters(j_compress_ptr dst) {
  dst->optimize_coding = TRUE;
  dst->arith_code = FALSE;
  dst->scan_info = nullptr;
  dst->num_scans = 0;
  dst->restart_interval = 0;
  dst->restart_in_rows = 0;
}

// ---- Trampolines: setjmp + libjpeg calls only. ----

int TryCreateDecompress(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return 0;
  jpeg_create_decompress(cinfo);
  return 1;
}

int TryCreateCompress(j_compress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return 0;
  jpeg_create_compress(cinfo);
  return 1;
}

// save_markers: keep every APPn and COM marker (the source), or none (the
// check of the copy's header).
int TryReadHeader(j_decompress_ptr cinfo, ErrorManager* err, const uint8_t* data, size_t size,
                  int save_markers, int* header_result) {
  if (setjmp(err->jump)) return 0;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  const unsigned int limit = save_markers ? 0xFFFF : 0;
  jpeg_save_markers(cinfo, JPEG_COM, limit);
  for (int n = 0; n < 16; ++n) jpeg_save_markers(cinfo, JPEG_APP0 + n, limit);
  *header_result = jpeg_read_header(cinfo, TRUE);
  return 1;
}

int TryReadCoefficients(j_decompress_ptr cinfo, ErrorManager* err, jvirt_barray_ptr** coefs) {
  if (setjmp(err->jump)) return 0;
  *coefs = jpeg_read_coefficients(cinfo);
  return 1;
}

int TryWrite(j_decompress_ptr src, j_compress_ptr dst, ErrorManager* err, jvirt_barray_ptr* coefs) {
  if (setjmp(err->jump)) return 0;
  jpeg_copy_critical_parameters(src, dst);
  SetBaselineParameters(dst);
  jpeg_write_coefficients(dst, coefs);
  for (jpeg_saved_marker_ptr m = src->marker_list; m != nullptr; m = m->next) {
    if (KeepMarker(dst, m)) jpeg_write_marker(dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(dst);
  return 1;
}

// ---- Back in C++. ----

// Errors of the writing half: a source libjpeg read whole but cannot
// re-code as one interleaved scan.
absl::Status WriteErrorStatus(const ErrorManager& err) {
  switch (err.code) {
    case JERR_BAD_MCU_SIZE:            // more than 10 blocks per MCU
    case JERR_MISMATCHED_QUANT_TABLE:  // a table slot redefined between scans
    case JERR_NO_QUANT_TABLE:
    case JERR_BAD_DCTSIZE:
      return absl::FailedPreconditionError(
          absl::StrCat("cannot be re-coded as a baseline JPEG: ", err.message));
    default:
      return ErrorStatus(err);
  }
}

// What decides the pixels besides the coefficients and quantization tables.
struct FrameLayout {
  uint32_t width = 0, height = 0;
  int components = 0;
  int color_space = 0;
  int sampling[MAX_COMPONENTS] = {};  // h * 16 + v per component

  static FrameLayout Of(const jpeg_decompress_struct& c) {
    FrameLayout f;
    f.width = c.image_width;
    f.height = c.image_height;
    f.components = c.num_components;
    f.color_space = static_cast<int>(c.jpeg_color_space);
    for (int i = 0; i < c.num_components && i < MAX_COMPONENTS; ++i) {
      f.sampling[i] = c.comp_info[i].h_samp_factor * 16 + c.comp_info[i].v_samp_factor;
    }
    return f;
  }
  bool operator==(const FrameLayout&) const = default;
};

}  // namespace

struct Transcoder::State {
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  ErrorManager err;
  ProgressManager progress;
  VectorDestination dest;
  bool src_created = false;
  bool dst_created = false;
  bool src_used = false;
};

Transcoder::Transcoder() : state_(std::make_unique<State>()) {
  State& s = *state_;
  std::memset(&s.src, 0, sizeof(s.src));
  std::memset(&s.dst, 0, sizeof(s.dst));
  libjpeg::InstallHandlers(&s.err, &s.progress);
  std::memset(&s.dest.pub, 0, sizeof(s.dest.pub));
  s.dest.pub.init_destination = OnInitDestination;
  s.dest.pub.empty_output_buffer = OnEmptyOutputBuffer;
  s.dest.pub.term_destination = OnTermDestination;
  s.src.err = &s.err.pub;
  s.dst.err = &s.err.pub;
  s.src_created = TryCreateDecompress(&s.src, &s.err) != 0;
  s.dst_created = TryCreateCompress(&s.dst, &s.err) != 0;
  if (s.src_created) s.src.progress = &s.progress.pub;
}

Transcoder::~Transcoder() {
  if (state_->dst_created) jpeg_destroy_compress(&state_->dst);
  if (state_->src_created) jpeg_destroy_decompress(&state_->src);
}

absl::Status Transcoder::ToBaseline(const uint8_t* data, size_t size, const DecodeLimits& limits,
                                    std::vector<uint8_t>* out) {
  State& s = *state_;
  out->clear();
  if (!s.src_created || !s.dst_created) {
    return absl::InternalError("libjpeg could not create its objects");
  }
  if (data == nullptr || size == 0) return absl::InvalidArgumentError("empty file");
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    return absl::InvalidArgumentError("not a JPEG file (no SOI marker)");
  }
  // libjpeg keeps the tables of the files an object read: a damaged file
  // missing one would be re-coded with an earlier file's (and cached). A
  // fresh decompressor per file, as JpegDecoder::ReadHeader does.
  if (s.src_used) {
    jpeg_destroy_decompress(&s.src);
    std::memset(&s.src, 0, sizeof(s.src));
    s.src.err = &s.err.pub;
    s.src_created = TryCreateDecompress(&s.src, &s.err) != 0;
    if (!s.src_created) return absl::InternalError("libjpeg could not create a decompressor");
    s.src.progress = &s.progress.pub;
  }
  s.src_used = true;
  // Every exit below goes through `fail` or the end: both objects are left
  // reset for the next file (and reset here, should an exception have left
  // one mid-file).
  jpeg_abort_compress(&s.dst);
  jpeg_abort_decompress(&s.src);
  auto fail = [&](absl::Status status) {
    jpeg_abort_compress(&s.dst);
    jpeg_abort_decompress(&s.src);
    out->clear();
    return status;
  };
  libjpeg::ResetErrors(&s.err);
  s.progress.max_scans = limits.max_scans;

  int header_result = 0;
  if (!TryReadHeader(&s.src, &s.err, data, size, 1, &header_result)) {
    return fail(ErrorStatus(s.err));
  }
  if (header_result != JPEG_HEADER_OK) {
    return fail(absl::InvalidArgumentError("JPEG holds tables only, no image"));
  }
  const jpeg_decompress_struct& c = s.src;
  if (absl::Status st = libjpeg::CheckHeader(c, limits); !st.ok()) return fail(st);
  // jpeg_read_header stops at the first scan: a sequential file whose first
  // scan holds every component has no other scan.
  if (!c.progressive_mode && !c.arith_code && c.comps_in_scan == c.num_components) {
    return fail(absl::FailedPreconditionError("already a single-scan baseline JPEG"));
  }
  const FrameLayout layout = FrameLayout::Of(c);

  jvirt_barray_ptr* coefs = nullptr;
  if (!TryReadCoefficients(&s.src, &s.err, &coefs)) return fail(ErrorStatus(s.err));
  if (coefs == nullptr) return fail(absl::InternalError("libjpeg suspended on a memory source"));
  // A progressive decode smooths the blocks (estimates low AC terms from
  // the neighbours' DC) when the scan script left some coefficient short of
  // full precision; a baseline copy would decode without it. Real encoders
  // always finish the script; the rest is refused.
  if (c.progressive_mode && c.coef_bits != nullptr) {
    for (int ci = 0; ci < c.num_components; ++ci) {
      for (int k = 0; k < DCTSIZE2; ++k) {
        if (c.coef_bits[ci][k] != 0) {
          return fail(absl::FailedPreconditionError(absl::StrCat(
              "the scan script leaves coefficient ", k, " of component ", ci,
              " unfinished: a progressive decode smooths it, a baseline copy could not")));
        }
      }
    }
  }

  // A baseline copy with optimized tables is rarely more than a few percent
  // larger than its progressive original.
  out->resize(size + size / 4 + 4096);
  s.dest.out = out;
  s.dst.dest = &s.dest.pub;
  if (!TryWrite(&s.src, &s.dst, &s.err, coefs)) return fail(WriteErrorStatus(s.err));
  out->resize(out->size() - s.dest.pub.free_in_buffer);
  jpeg_abort_decompress(&s.src);  // frees the coefficients and saved markers

  // The copy's header must give libjpeg the same frame and color transform.
  if (!TryReadHeader(&s.src, &s.err, out->data(), out->size(), 0, &header_result) ||
      header_result != JPEG_HEADER_OK) {
    return fail(
        absl::InternalError(absl::StrCat("the baseline copy does not parse: ", s.err.message)));
  }
  const bool same = FrameLayout::Of(s.src) == layout && !s.src.progressive_mode &&
                    !s.src.arith_code && s.src.comps_in_scan == s.src.num_components;
  jpeg_abort_decompress(&s.src);
  if (!same) {
    out->clear();
    return absl::InternalError("the baseline copy's header differs from the original's");
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
