// Test helpers: synthetic photo-like images, a JPEG encoder over the libjpeg
// compression API (so tests need no files) and a plain reference decoder.
// For valid inputs only: libjpeg's default error handler exits the process.

#ifndef STOKER_TESTING_TEST_JPEG_H_
#define STOKER_TESTING_TEST_JPEG_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::image::testing {

// Smooth gradients, a few shapes and noise: `channels` (1, 3 or 4) per pixel.
std::vector<uint8_t> MakePhoto(uint32_t height, uint32_t width, int channels, uint64_t seed);

// One scan of a progressive scan script (libjpeg's jpeg_scan_info):
// components are indexes into the frame, Ss..Se the spectral band (zigzag),
// Ah/Al the successive approximation bits.
struct ScanSpec {
  std::vector<int> components;
  int ss = 0, se = 0, ah = 0, al = 0;
};

struct EncodeOptions {
  int quality = 90;
  // Luma sampling factors (chroma are 1x1): 444 = 1x1, 422 = 2x1, 420 = 2x2, 440 = 1x2.
  int subsampling = 420;
  bool progressive = false;     // jpeg_simple_progression's script
  std::vector<ScanSpec> scans;  // when not empty: this script (progressive)
  bool optimize = false;        // optimized Huffman tables
  bool arithmetic = false;
  int restart_rows = 0;          // restart interval in MCU rows, 0 = none
  unsigned restart_mcus = 0;     // restart interval in MCUs (over restart_rows), 0 = none
  bool cmyk_as_ycck = false;     // 4 channels: store as YCCK instead of CMYK
  std::vector<uint8_t> app1;     // written as an APP1 marker when not empty
  bool store_rgb = false;        // 3 channels stored as RGB (Adobe transform 0), not YCbCr
  int every_h = 0, every_v = 0;  // when set: every component sampled h x v
};

// `channels`: 1 gray, 3 RGB, 4 CMYK (stored as given, Adobe marker written).
std::vector<uint8_t> EncodeJpeg(const std::vector<uint8_t>& pixels, uint32_t height, uint32_t width,
                                int channels, const EncodeOptions& options);

// APP1 payload "Exif\0\0" + a TIFF header whose IFD0 holds Orientation.
std::vector<uint8_t> ExifApp1(int orientation, bool big_endian);

// Full decode with libjpeg defaults: RGB for gray/color files (3 channels),
// the raw stored CMYK for 4-component files (4 channels).
std::vector<uint8_t> ReferenceDecode(const std::vector<uint8_t>& jpeg, uint32_t* height,
                                     uint32_t* width, int* channels);

// A straightforward double-precision resample of an RGB image, for checking
// the integer kernels: output i of an axis is centered at source coordinate
// lo + (i + offset + 0.5) * scale and reads source pixels [lo, lo + len).
// Antialias: triangle filter widened by max(scale, 1), normalized, one 2-D
// sum (no rounding in between). Else: 2-tap bilinear, half-pixel centers.
struct RefAxis {
  uint32_t lo = 0, len = 0;
  double scale = 1;
  int32_t offset = 0;
  uint32_t out = 0;
};
std::vector<uint8_t> ReferenceResample(const std::vector<uint8_t>& rgb, uint32_t width,
                                       const RefAxis& y, const RefAxis& x, bool antialias);
RefAxis RefCrop(uint32_t pos, uint32_t len, uint32_t out);

// Mean and max absolute difference of two byte arrays of the same size.
double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n, int* max_diff = nullptr);

}  // namespace stoker::image::testing

#endif  // STOKER_TESTING_TEST_JPEG_H_
