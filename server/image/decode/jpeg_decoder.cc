// setjmp/longjmp use (see jpeg_decoder.h and libjpeg_glue.h).
//
// Rule kept below: a Try* trampoline calls setjmp, then only libjpeg
// functions; it has no local with a destructor, and it reports failure as a
// plain int. ErrorManager::message holds libjpeg's text for the C++ side.

#include "server/image/decode/jpeg_decoder.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/decode/exif.h"
#include "server/image/decode/jpeg_markers.h"
#include "server/image/decode/jpeg_restart.h"
#include "server/image/decode/libjpeg_glue.h"

namespace stoker::image {
namespace {

using libjpeg::ErrorManager;
using libjpeg::ErrorStatus;
using libjpeg::ProgressManager;

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

int TryCalcOutputDimensions(j_decompress_ptr cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return 0;
  jpeg_calc_output_dimensions(cinfo);
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

// True when [p, p + n) holds an EOI marker (FF D9). Entropy-coded data
// never contains FF D9 (an FF there is followed by 00 or a restart marker),
// so this finds the real end of the image, searching from the back.
bool HasEoi(const uint8_t* p, size_t n) {
  for (size_t i = n; i >= 2; --i) {
    if (p[i - 1] == 0xD9 && p[i - 2] == 0xFF) return true;
  }
  return false;
}

// Whether each Huffman table (DC 0-3, AC 0-3) is defined, as its last DHT
// left it, and would pass the checks libjpeg makes when a scan first uses
// it (jdhuff.c jpeg_make_d_derived_tbl): a scan left out must not hide an
// error the whole file would raise.
struct HuffmanTables {
  bool usable[2][4] = {};

  // False when the segment is malformed (libjpeg refuses it too).
  bool Define(const uint8_t* seg, uint32_t n) {
    while (n > 0) {
      if (n < 17) return false;
      const int kind = seg[0] >> 4, index = seg[0] & 15;
      if (kind > 1 || index > 3) return false;
      uint32_t count = 0, code = 0;
      bool ok = true;
      bool started = false;
      for (int length = 1; length <= 16; ++length) {
        const uint32_t at_length = seg[length];
        count += at_length;
        started |= at_length > 0;
        // The codes of this length, then the next one must still fit.
        code += at_length;
        if (started && code >= (1u << length)) ok = false;
        code <<= 1;
      }
      if (count > 256 || count > n - 17) return false;
      if (kind == 0) {
        for (uint32_t i = 0; i < count; ++i) ok &= seg[17 + i] <= 15;
      }
      usable[kind][index] = ok && count > 0;
      seg += 17 + count;
      n -= 17 + count;
    }
    return true;
  }
};

// ListScans, plus where the EOI marker ends (*end).
bool ParseProgressive(const uint8_t* data, size_t size, uint32_t max_scans,
                      std::vector<JpegScan>* scans, size_t* end) {
  scans->clear();
  if (data == nullptr || size < 4 || data[0] != 0xFF || data[1] != 0xD8) return false;
  int frame_ids[4] = {0, 0, 0, 0};
  int frame_components = 0;  // 0 until the SOF2 marker
  // known[c][k]: the lowest bit known of coefficient k (zigzag order) of
  // component c, as libjpeg's coef_bits; -1 while none is.
  int known[4][64];
  std::memset(known, 0xFF, sizeof(known));
  int dc_table[4] = {0, 0, 0, 0}, ac_table[4] = {0, 0, 0, 0};  // of this scan's components
  HuffmanTables tables;
  size_t pos = 2;
  for (;;) {
    const size_t start = pos;
    const int code = ReadMarker(data, size, &pos);
    if (code < 0) return false;
    if (code == 0xD9) {  // EOI
      if (scans->empty()) return false;
      for (int c = 0; c < frame_components; ++c) {
        for (int k = 0; k < 64; ++k) {
          if (known[c][k] != 0) return false;  // incomplete: libjpeg may smooth
        }
      }
      *end = pos;
      return true;
    }
    const bool table = code == 0xC4 || code == 0xDB || code == 0xDD;  // DHT DQT DRI
    const bool app_or_com = (code >= 0xE0 && code <= 0xEF) || code == 0xFE;
    if (!table && !app_or_com && code != 0xC2 && code != 0xDA) return false;
    const uint8_t* seg = nullptr;
    uint32_t n = 0;
    if (!ReadSegment(data, size, &pos, &seg, &n)) return false;
    if (code == 0xC4 && !tables.Define(seg, n)) return false;
    if (table || app_or_com) continue;
    if (code == 0xC2) {  // SOF2: progressive, Huffman-coded
      if (frame_components != 0 || n < 6 || seg[0] != 8 || Be16(seg + 1) == 0) return false;
      const int nf = seg[5];
      if ((nf != 1 && nf != 3 && nf != 4) || n != 6u + 3u * nf) return false;
      for (int c = 0; c < nf; ++c) {
        frame_ids[c] = seg[6 + 3 * c];
        for (int d = 0; d < c; ++d) {
          if (frame_ids[d] == frame_ids[c]) return false;
        }
      }
      frame_components = nf;
      continue;
    }
    // SOS
    if (frame_components == 0 || n < 1) return false;
    JpegScan scan;
    scan.offset = start;
    scan.components = seg[0];
    if (scan.components < 1 || scan.components > frame_components ||
        n != 4u + 2u * scan.components) {
      return false;
    }
    for (int i = 0; i < scan.components; ++i) {
      int index = -1;
      for (int c = 0; c < frame_components; ++c) {
        if (frame_ids[c] == seg[1 + 2 * i]) index = c;
      }
      if (index < 0) return false;
      for (int j = 0; j < i; ++j) {
        if (scan.component[j] == index) return false;
      }
      scan.component[i] = index;
      dc_table[i] = seg[2 + 2 * i] >> 4;
      ac_table[i] = seg[2 + 2 * i] & 15;
    }
    const uint8_t* spectral = seg + 1 + 2 * scan.components;
    scan.ss = spectral[0];
    scan.se = spectral[1];
    scan.ah = spectral[2] >> 4;
    scan.al = spectral[2] & 15;
    if (scan.ss == 0 ? scan.se != 0 : (scan.components != 1 || scan.se < scan.ss || scan.se > 63)) {
      return false;
    }
    if (scan.al > 13 || (scan.ah != 0 && scan.al != scan.ah - 1)) return false;
    for (int i = 0; i < scan.components; ++i) {
      // The tables the scan decodes with (a DC refinement uses none).
      if (scan.ss > 0 ? ac_table[i] > 3 || !tables.usable[1][ac_table[i]]
                      : scan.ah == 0 && (dc_table[i] > 3 || !tables.usable[0][dc_table[i]])) {
        return false;
      }
      int* bits = known[scan.component[i]];
      if (scan.ss > 0 && bits[0] < 0) return false;  // AC before DC
      for (int k = scan.ss; k <= scan.se; ++k) {
        if (bits[k] != (scan.ah == 0 ? -1 : scan.ah)) return false;
        bits[k] = scan.al;
      }
    }
    if (scans->size() >= max_scans) return false;
    // The entropy-coded data: up to the first marker other than a stuffed
    // zero (FF00) or a restart marker; FF fill bytes may precede either.
    size_t end_at = 0, code_at = 0;
    for (;;) {
      if (!NextMarkerInData(data, size, pos, &end_at, &code_at)) return false;  // truncated
      if (!IsRestartMarker(data[code_at])) break;
      pos = code_at + 1;
    }
    scan.bytes = end_at - start;
    scans->push_back(scan);
    pos = end_at;
  }
}

void SetOutputParams(jpeg_decompress_struct& c, int channels, int scale_num, bool smoothing) {
  c.out_color_space = channels == 4 ? JCS_CMYK : JCS_RGB;
  c.scale_num = static_cast<unsigned int>(scale_num);
  c.scale_denom = 8;
  c.dct_method = JDCT_ISLOW;
  c.do_fancy_upsampling = TRUE;
  c.do_block_smoothing = smoothing ? TRUE : FALSE;
  c.quantize_colors = FALSE;
  c.buffered_image = FALSE;
  c.raw_data_out = FALSE;
}

}  // namespace

bool ListScans(const uint8_t* data, size_t size, uint32_t max_scans, std::vector<JpegScan>* scans) {
  size_t end = 0;
  return ParseProgressive(data, size, max_scans, scans, &end);
}

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  ProgressManager progress;
  bool created = false;
  bool used = false;    // cinfo has read a file since it was created
  bool active = false;  // an image is between ReadHeader and Finish/Stop/Abort
  int channels = 3;
  const uint8_t* data = nullptr;  // the current file
  size_t size = 0;
  std::vector<JpegScan> scans;  // ListScans of the current file
  size_t scans_end = 0;         // where its EOI ends
  std::vector<uint8_t> copy;    // the file without the scans or intervals not needed
  bool seek_restarts = true;    // JpegDecoderOptions::seek_restart_intervals
  int scale_num = 8;            // of the last Start
  uint32_t row_offset = 0;      // the copy's first row in the whole image's (Window)
  RestartLayout restarts;       // of the current file (Window)

  // ScanSelection::kNeeded at 1/8 (see Start). 1: started on the copy; 0:
  // not applicable or the copy failed, and the original file is back at
  // the state ReadHeader left it in; -1: the original could not be re-read
  // (err says why).
  int StartOnNeededScans();
  // Window on a cut copy of a file with restart markers: 1 started, cropped
  // and skipped on the copy; 0 not applicable or the copy failed, and the
  // original is started again at scale_num, as Start left it; -1 the
  // original could not be restarted (err says why).
  int WindowOnRestartIntervals(uint32_t* x, uint32_t* w, uint32_t y);
  // Re-reads the original file's header after an attempt on the copy.
  int Restore();
  // A fresh libjpeg object: no table of an earlier file (or of the copy).
  bool Recreate();
};

bool JpegDecoder::State::Recreate() {
  if (created) jpeg_destroy_decompress(&cinfo);
  created = TryCreate(&cinfo, &err) != 0;
  if (created) cinfo.progress = &progress.pub;
  return created;
}

int JpegDecoder::State::Restore() {
  if (!Recreate()) {
    std::snprintf(err.message, sizeof(err.message), "libjpeg could not create a decompressor");
    return -1;
  }
  libjpeg::ResetErrors(&err);
  int header_result = 0;
  if (!TryReadHeader(&cinfo, &err, data, size, 0, &header_result)) return -1;
  if (header_result != JPEG_HEADER_OK) {
    std::snprintf(err.message, sizeof(err.message), "JPEG holds tables only, no image");
    return -1;
  }
  return 0;
}

int JpegDecoder::State::StartOnNeededScans() {
  jpeg_decompress_struct& c = cinfo;
  if (!ParseProgressive(data, size, progress.max_scans, &scans, &scans_end)) return 0;
  SetOutputParams(c, channels, 1, false);
  if (!TryCalcOutputDimensions(&c, &err)) return Restore();
  if (c.num_components > 4) return 0;
  bool dc_only[4] = {false, false, false, false};
  for (int i = 0; i < c.num_components; ++i) dc_only[i] = c.comp_info[i].DCT_scaled_size == 1;
  // Copy everything up to the EOI but the AC scans of DC-only components.
  copy.resize(scans_end);
  size_t from = 0, out = 0;
  for (const JpegScan& scan : scans) {
    if (scan.ss == 0 || !dc_only[scan.component[0]]) continue;
    std::memcpy(copy.data() + out, data + from, scan.offset - from);
    out += scan.offset - from;
    from = scan.offset + scan.bytes;
  }
  if (from == 0) return 0;  // nothing to skip
  std::memcpy(copy.data() + out, data + from, scans_end - from);
  out += scans_end - from;
  copy.resize(out);

  jpeg_abort_decompress(&c);
  err.pub.num_warnings = 0;
  int header_result = 0;
  if (TryReadHeader(&c, &err, copy.data(), copy.size(), 0, &header_result) &&
      header_result == JPEG_HEADER_OK) {
    SetOutputParams(c, channels, 1, false);
    if (TryStart(&c, &err) && err.pub.num_warnings == 0) return 1;
  }
  return Restore();
}

int JpegDecoder::State::WindowOnRestartIntervals(uint32_t* x, uint32_t* w, uint32_t y) {
  jpeg_decompress_struct& c = cinfo;
  if (!IndexRestartIntervals(data, size, &restarts)) return 0;
  const RestartLayout& l = restarts;
  if (l.width != c.image_width || l.height != c.image_height) return 0;
  const auto num = static_cast<uint32_t>(scale_num);
  const uint32_t mw = l.mcu_width * num / 8, mh = l.mcu_height * num / 8;  // output pixels
  // One MCU of margin from every cut edge: fancy upsampling reads across it.
  uint32_t row0 = y / mh;
  row0 = row0 > 0 ? row0 - 1 : 0;
  const uint32_t aligned = l.interval / std::gcd(l.interval, l.mcus_per_row);
  row0 = row0 / aligned * aligned;  // an MCU row that starts an interval
  uint32_t col0 = 0, col1 = l.mcus_per_row;
  if (ColumnsSeekable(l)) {
    const uint32_t k = l.interval;
    col0 = *x / mw;
    col0 = (col0 > 0 ? col0 - 1 : 0) / k * k;
    const uint64_t end = ((uint64_t{*x} + *w + mw - 1) / mw + 1 + k - 1) / k * k;
    col1 = end >= l.mcus_per_row ? l.mcus_per_row : static_cast<uint32_t>(end);
  }
  if (row0 == 0 && col0 == 0 && col1 == l.mcus_per_row) return 0;  // nothing left out
  uint32_t cut_w = 0, cut_h = 0;
  if (!CutToRestartWindow(data, l, row0, col0, col1, &copy, &cut_w, &cut_h)) return 0;
  const uint32_t col_offset = col0 * mw, rows = y - row0 * mh;
  jpeg_abort_decompress(&c);
  err.pub.num_warnings = 0;
  int header_result = 0;
  if (TryReadHeader(&c, &err, copy.data(), copy.size(), 0, &header_result) &&
      header_result == JPEG_HEADER_OK) {
    SetOutputParams(c, channels, scale_num, true);
    if (TryStart(&c, &err) && c.output_components == channels &&
        c.output_width == (uint64_t{cut_w} * num + 7) / 8 &&
        c.output_height == (uint64_t{cut_h} * num + 7) / 8) {
      JDIMENSION jx = *x - col_offset, jw = *w, skipped = 0;
      bool ok = jx + jw <= c.output_width;
      if (ok && (jx > 0 || jw < c.output_width)) ok = TryCrop(&c, &err, &jx, &jw) != 0;
      if (ok && rows > 0) ok = TrySkip(&c, &err, rows, &skipped) != 0 && skipped == rows;
      if (ok && err.pub.num_warnings == 0) {
        *x = jx + col_offset;
        *w = jw;
        row_offset = row0 * mh;
        return 1;
      }
    }
  }
  if (Restore() < 0) return -1;
  SetOutputParams(c, channels, scale_num, true);
  return TryStart(&c, &err) ? 0 : -1;
}

JpegDecoder::JpegDecoder(const JpegDecoderOptions& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.seek_restarts = options.seek_restart_intervals;
  std::memset(&s.cinfo, 0, sizeof(s.cinfo));
  libjpeg::InstallHandlers(&s.err, &s.progress);
  s.cinfo.err = &s.err.pub;
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

uint32_t JpegDecoder::next_row() const {
  return state_->cinfo.output_scanline + state_->row_offset;
}

absl::Status JpegDecoder::ReadHeader(const uint8_t* data, size_t size, const DecodeLimits& limits,
                                     JpegHeader* header) {
  State& s = *state_;
  if (!s.created) return absl::InternalError("libjpeg could not create a decompressor");
  Abort();
  // libjpeg keeps the Huffman and quantization tables of the files it read
  // (abbreviated streams): a damaged file missing one would decode with the
  // previous file's. A fresh object per file (microseconds) makes every
  // file decode as it would first.
  if (s.used && !s.Recreate()) {
    return absl::InternalError("libjpeg could not create a decompressor");
  }
  s.used = true;
  if (data == nullptr || size == 0) return absl::InvalidArgumentError("empty file");
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    return absl::InvalidArgumentError("not a JPEG file (no SOI marker)");
  }
  libjpeg::ResetErrors(&s.err);
  s.progress.max_scans = limits.max_scans;
  s.data = data;
  s.size = size;
  s.active = true;
  s.row_offset = 0;
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
  if (absl::Status st = libjpeg::CheckHeader(c, limits); !st.ok()) {
    Abort();
    return st;
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
  s.channels = c.num_components == 4 ? 4 : 3;
  return absl::OkStatus();
}

absl::Status JpegDecoder::Start(int scale_num, DecodeInfo* info, ScanSelection scans) {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("Start without ReadHeader");
  if (scale_num < 1 || scale_num > 8) return absl::InvalidArgumentError("scale_num not in 1..8");
  jpeg_decompress_struct& c = s.cinfo;
  info->skipped_scans = false;
  s.scale_num = scale_num;
  s.row_offset = 0;
  if (scans == ScanSelection::kNeeded && scale_num == 1 && c.progressive_mode && !c.arith_code) {
    const int started = s.StartOnNeededScans();
    if (started < 0) {
      Abort();
      return ErrorStatus(s.err);
    }
    info->skipped_scans = started == 1;
  }
  if (!info->skipped_scans) {
    SetOutputParams(c, s.channels, scale_num, true);
    if (!TryStart(&c, &s.err)) {
      Abort();
      return ErrorStatus(s.err);
    }
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

absl::Status JpegDecoder::Window(uint32_t* x, uint32_t* w, uint32_t y, bool* seeked) {
  State& s = *state_;
  if (!s.active) return absl::FailedPreconditionError("Window without Start");
  *seeked = false;
  const jpeg_decompress_struct& c = s.cinfo;
  const bool crop = *x > 0 || *w < c.output_width;
  if (s.seek_restarts && (crop || y > 0) && c.restart_interval > 0 && !c.progressive_mode &&
      !c.arith_code && c.output_scanline == 0 && s.row_offset == 0) {
    const int r = s.WindowOnRestartIntervals(x, w, y);
    if (r < 0) {
      Abort();
      return ErrorStatus(s.err);
    }
    if (r == 1) {
      *seeked = true;
      return absl::OkStatus();
    }
  }
  if (crop) {
    if (absl::Status st = CropColumns(x, w); !st.ok()) return st;
  }
  return y > 0 ? SkipRows(y) : absl::OkStatus();
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
