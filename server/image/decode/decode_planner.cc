#include "server/image/decode/decode_planner.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/image/decode/jpeg_decoder.h"
#include "server/image/decode/libjpeg_glue.h"

namespace stoker::image {

namespace {

constexpr int kScales[] = {1, 2, 4, 8};
constexpr uint32_t kWidth = 768;
constexpr uint32_t kHeight = 512;
constexpr uint32_t kRowsPerRead = 16;

// splitmix64: a fixed sequence, so every daemon times the same bytes.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint8_t Clamp8(double v) { return static_cast<uint8_t>(std::clamp(v, 0.0, 255.0) + 0.5); }

// Smooth colour gradients with soft blobs, under fine grain and a woven
// texture: most 8x8 blocks keep many nonzero AC coefficients at q90, as in
// photos of foliage, fabric or gravel, so the entropy decode weighs as it
// does there (a smooth synthetic image would flatter the reduced scales).
std::vector<uint8_t> MakeTexturedImage() {
  std::vector<uint8_t> rgb(size_t{kWidth} * kHeight * 3);
  uint64_t state = 0x5107e4ca1b4a7e11ull;
  for (uint32_t y = 0; y < kHeight; ++y) {
    for (uint32_t x = 0; x < kWidth; ++x) {
      const double fx = static_cast<double>(x) / kWidth;
      const double fy = static_cast<double>(y) / kHeight;
      const double blob = 60.0 * std::exp(-((fx - 0.3) * (fx - 0.3) + (fy - 0.6) * (fy - 0.6)) * 8);
      const double weave = 18.0 * std::sin(x * 0.9 + std::sin(y * 0.23) * 3) *
                           std::cos(y * 0.7 + std::cos(x * 0.11) * 2);
      const uint64_t r = NextRandom(&state);
      const double grain = static_cast<double>(r & 0xff) / 255.0 * 36.0 - 18.0;
      const double chroma = static_cast<double>((r >> 8) & 0xff) / 255.0 * 12.0 - 6.0;
      uint8_t* px = &rgb[(size_t{y} * kWidth + x) * 3];
      px[0] = Clamp8(70 + 120 * fx + blob + weave + grain + chroma);
      px[1] = Clamp8(90 + 80 * fy + 0.5 * blob + weave + grain);
      px[2] = Clamp8(150 - 90 * fx * fy + weave * 0.6 + grain - chroma);
    }
  }
  return rgb;
}

// In memory, 4:2:0 q90 with optimized tables; progressive: libjpeg's
// jpeg_simple_progression script. The compressor keeps libjpeg's default
// error handler (it exits the process): on this fixed, valid image nothing
// but an allocation failure can stop it, and no setjmp leaves
// jpeg_decoder.cc / transcode.cc.
std::vector<uint8_t> Encode(const std::vector<uint8_t>& rgb, bool progressive) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): libjpeg's type
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = kWidth;
  cinfo.image_height = kHeight;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  cinfo.comp_info[0].h_samp_factor = 2;
  cinfo.comp_info[0].v_samp_factor = 2;
  cinfo.optimize_coding = TRUE;
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&rgb[size_t{cinfo.next_scanline} * kWidth * 3]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// A whole decode at scale m/8, as a sample's would be (rows read in blocks
// into one buffer; at 1/8 a progressive file's needed scans only, as
// pipeline.cc decodes it). False on an error (not expected on our own file).
bool DecodeWhole(JpegDecoder& decoder, const std::vector<uint8_t>& jpeg, int m,
                 std::vector<uint8_t>& pixels, std::vector<uint8_t*>& rows) {
  JpegHeader header;
  if (!decoder.ReadHeader(jpeg.data(), jpeg.size(), DecodeLimits(), &header).ok()) return false;
  DecodeInfo info;
  if (!decoder.Start(m, &info, m == 1 ? ScanSelection::kNeeded : ScanSelection::kAll).ok()) {
    decoder.Abort();
    return false;
  }
  const size_t stride = size_t{info.width} * info.channels;
  pixels.resize(stride * kRowsPerRead);
  rows.resize(kRowsPerRead);
  for (uint32_t i = 0; i < kRowsPerRead; ++i) rows[i] = &pixels[stride * i];
  while (decoder.next_row() < info.height) {
    uint32_t got = 0;
    if (!decoder.ReadRows(rows.data(), kRowsPerRead, &got).ok() || got == 0) {
      decoder.Abort();
      return false;
    }
  }
  return decoder.Finish().ok();
}

}  // namespace

uint64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t DisabledScales(const std::vector<ScaleCost>& costs, double tolerance) {
  uint32_t disabled = 0;
  // From the largest scale down, so that each scale is compared only with
  // larger ones already found allowed.
  std::vector<const ScaleCost*> allowed;  // larger scales kept, measured
  std::vector<const ScaleCost*> sorted;
  for (const ScaleCost& c : costs) sorted.push_back(&c);
  std::sort(sorted.begin(), sorted.end(),
            [](const ScaleCost* a, const ScaleCost* b) { return a->scale > b->scale; });
  for (const ScaleCost* c : sorted) {
    const bool measured = c->baseline_ms > 0 && c->progressive_ms > 0;
    if (!measured) continue;
    bool slower = false;
    if (c->scale == 1 || c->scale == 2 || c->scale == 4) {
      for (const ScaleCost* larger : allowed) {
        if (larger->scale <= c->scale) continue;
        const double slowdown =
            (c->baseline_ms / larger->baseline_ms + c->progressive_ms / larger->progressive_ms) / 2;
        if (slowdown > 1 + tolerance) {
          slower = true;
          break;
        }
      }
    }
    if (slower) {
      disabled |= DctScaleBit(c->scale);
    } else {
      allowed.push_back(c);
    }
  }
  return disabled;
}

DecodeCalibration Calibrate(const NanoClock& clock, int reps) {
  const uint64_t start = clock();
  const std::vector<uint8_t> rgb = MakeTexturedImage();
  const std::vector<uint8_t> files[2] = {Encode(rgb, false), Encode(rgb, true)};

  constexpr size_t kCount = std::size(kScales);
  double best_ns[2][kCount];
  bool failed[2][kCount] = {};
  for (auto& image : best_ns)
    std::fill(std::begin(image), std::end(image), std::numeric_limits<double>::infinity());
  JpegDecoder decoder;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t*> rows;
  // Round-robin (every scale once per repetition) so that a burst of load
  // from elsewhere hurts one run of each scale rather than all runs of one.
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    for (int f = 0; f < 2; ++f) {
      for (size_t i = 0; i < kCount; ++i) {
        const uint64_t t0 = clock();
        const bool ok = DecodeWhole(decoder, files[f], kScales[i], pixels, rows);
        const uint64_t t1 = clock();
        if (!ok) failed[f][i] = true;
        best_ns[f][i] = std::min(best_ns[f][i], static_cast<double>(t1 - t0));
      }
    }
  }

  DecodeCalibration cal;
  for (size_t i = 0; i < kCount; ++i) {
    ScaleCost c;
    c.scale = kScales[i];
    // A failed decode leaves the scale unmeasured (0): never disabled,
    // never a reference.
    if (!failed[0][i] && !failed[1][i]) {
      c.baseline_ms = best_ns[0][i] / 1e6;
      c.progressive_ms = best_ns[1][i] / 1e6;
    }
    cal.costs.push_back(c);
  }
  cal.disabled_dct_scales = DisabledScales(cal.costs);
  cal.seconds = static_cast<double>(clock() - start) / 1e9;
  return cal;
}

namespace {
constexpr char kCalibrationMagic[] = "stoker decode calibration 1";
}  // namespace

std::string SerializeCalibration(const DecodeCalibration& c, const std::string& machine) {
  std::string out = absl::StrCat(kCalibrationMagic, "\nmachine ", machine, "\n");
  for (const ScaleCost& sc : c.costs) {
    absl::StrAppendFormat(&out, "scale %d %.17g %.17g\n", sc.scale, sc.baseline_ms,
                          sc.progressive_ms);
  }
  absl::StrAppend(&out, "disabled ", c.disabled_dct_scales, "\n");
  return out;
}

bool ParseCalibration(const std::string& text, const std::string& machine, DecodeCalibration* c) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kCalibrationMagic) return false;
  if (!std::getline(in, line) || line != "machine " + machine) return false;
  DecodeCalibration parsed;
  for (int want : {1, 2, 4, 8}) {
    if (!std::getline(in, line)) return false;
    std::istringstream f(line);
    std::string word;
    ScaleCost sc;
    if (!(f >> word >> sc.scale >> sc.baseline_ms >> sc.progressive_ms) || word != "scale" ||
        sc.scale != want || !(f >> std::ws).eof()) {
      return false;
    }
    for (double v : {sc.baseline_ms, sc.progressive_ms}) {
      if (!std::isfinite(v) || v < 0) return false;
    }
    parsed.costs.push_back(sc);
  }
  if (!std::getline(in, line)) return false;
  std::istringstream f(line);
  std::string word;
  uint32_t mask = 0;
  if (!(f >> word >> mask) || word != "disabled" || !(f >> std::ws).eof()) return false;
  if (mask != DisabledScales(parsed.costs)) return false;
  if (std::getline(in, line) && !line.empty()) return false;
  parsed.disabled_dct_scales = mask;
  *c = parsed;
  return true;
}

std::string CalibrationMachine() {
  std::string model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      model = line.substr(colon + 1);
      model.erase(0, model.find_first_not_of(" \t"));
    }
    break;
  }
  return absl::StrCat(model, "; libjpeg-turbo ", LIBJPEG_TURBO_VERSION_NUMBER);
}

}  // namespace stoker::image
