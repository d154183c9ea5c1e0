#include "testing/test_jpeg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

// clang-format off
#include <jpeglib.h>
// clang-format on

#include "server/image/ops/rng.h"

namespace stoker::image::testing {

std::vector<uint8_t> MakePhoto(uint32_t height, uint32_t width, int channels, uint64_t seed) {
  std::vector<uint8_t> px(size_t{height} * width * channels);
  KeyedRng rng(seed, 77);
  const double cx = width * (0.3 + 0.4 * rng.Uniform()), cy = height * (0.3 + 0.4 * rng.Uniform());
  const double radius = 0.25 * std::min(width, height);
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      const double u = static_cast<double>(x) / width, v = static_cast<double>(y) / height;
      const bool disk = (x - cx) * (x - cx) + (y - cy) * (y - cy) < radius * radius;
      const bool bar = (x / 16 + y / 24) % 7 == 0;
      for (int c = 0; c < channels; ++c) {
        double value = 40 + 150 * (c % 2 ? u : v) + 40 * std::sin(6.0 * u + 4.0 * v + c);
        if (disk) value = 0.6 * value + 90 + 30 * c;
        if (bar) value = 255 - value;
        value += 24.0 * (rng.Uniform() - 0.5);
        px[(size_t{y} * width + x) * channels + c] =
            static_cast<uint8_t>(std::lround(std::clamp(value, 0.0, 255.0)));
      }
    }
  }
  return px;
}

std::vector<uint8_t> EncodeJpeg(const std::vector<uint8_t>& pixels, uint32_t height, uint32_t width,
                                int channels, const EncodeOptions& options) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  if (channels == 4 && options.cmyk_as_ycck) jpeg_set_colorspace(&cinfo, JCS_YCCK);
  jpeg_set_quality(&cinfo, options.quality, TRUE);
  if (channels >= 3) {
    const int h = options.subsampling == 422 || options.subsampling == 420 ? 2 : 1;
    const int v = options.subsampling == 420 || options.subsampling == 440 ? 2 : 1;
    cinfo.comp_info[0].h_samp_factor = h;
    cinfo.comp_info[0].v_samp_factor = v;
    for (int c = 1; c < cinfo.num_components; ++c) {
      cinfo.comp_info[c].h_samp_factor = 1;
      cinfo.comp_info[c].v_samp_factor = 1;
    }
    if (channels == 4 && !options.cmyk_as_ycck) {
      cinfo.comp_info[3].h_samp_factor = h;
      cinfo.comp_info[3].v_samp_factor = v;
    }
    if (channels == 4 && options.cmyk_as_ycck) {
      cinfo.comp_info[3].h_samp_factor = h;
      cinfo.comp_info[3].v_samp_factor = v;
    }
  }
  if (options.store_rgb) jpeg_set_colorspace(&cinfo, JCS_RGB);  // resets the sampling
  if (options.every_h != 0) {
    for (int c = 0; c < cinfo.num_components; ++c) {
      cinfo.comp_info[c].h_samp_factor = options.every_h;
      cinfo.comp_info[c].v_samp_factor = options.every_v;
    }
  }
  if (options.progressive) jpeg_simple_progression(&cinfo);
  std::vector<jpeg_scan_info> script(options.scans.size());
  if (!options.scans.empty()) {
    for (size_t i = 0; i < script.size(); ++i) {
      const ScanSpec& spec = options.scans[i];
      jpeg_scan_info& scan = script[i];
      scan.comps_in_scan = static_cast<int>(spec.components.size());
      for (size_t c = 0; c < spec.components.size(); ++c) {
        scan.component_index[c] = spec.components[c];
      }
      scan.Ss = spec.ss, scan.Se = spec.se, scan.Ah = spec.ah, scan.Al = spec.al;
    }
    cinfo.scan_info = script.data();
    cinfo.num_scans = static_cast<int>(script.size());
  }
  cinfo.optimize_coding = options.optimize ? TRUE : FALSE;
  cinfo.arith_code = options.arithmetic ? TRUE : FALSE;
  cinfo.restart_in_rows = options.restart_rows;
  if (options.restart_mcus != 0) cinfo.restart_interval = options.restart_mcus;
  jpeg_start_compress(&cinfo, TRUE);
  if (!options.app1.empty()) {
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, options.app1.data(),
                      static_cast<unsigned int>(options.app1.size()));
  }
  const size_t stride = size_t{width} * channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&pixels[cinfo.next_scanline * stride]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

std::vector<uint8_t> ExifApp1(int orientation, bool big_endian) {
  std::vector<uint8_t> d = {'E', 'x', 'i', 'f', 0, 0};
  auto u16 = [&](uint16_t v) {
    if (big_endian) {
      d.push_back(v >> 8), d.push_back(v & 0xff);
    } else {
      d.push_back(v & 0xff), d.push_back(v >> 8);
    }
  };
  auto u32 = [&](uint32_t v) {
    if (big_endian) {
      u16(v >> 16), u16(v & 0xffff);
    } else {
      u16(v & 0xffff), u16(v >> 16);
    }
  };
  d.push_back(big_endian ? 'M' : 'I');
  d.push_back(big_endian ? 'M' : 'I');
  u16(42);
  u32(8);                                        // IFD0 right after the header
  u16(2);                                        // two entries: a harmless one, then Orientation
  u16(0x010f), u16(2), u32(4), u32(0x00414141);  // Make "AAA"
  u16(0x0112), u16(3), u32(1), u16(static_cast<uint16_t>(orientation)), u16(0);
  u32(0);  // no next IFD
  return d;
}

std::vector<uint8_t> ReferenceDecode(const std::vector<uint8_t>& jpeg, uint32_t* height,
                                     uint32_t* width, int* channels) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), jpeg.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = cinfo.num_components == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  *height = cinfo.output_height;
  *width = cinfo.output_width;
  *channels = cinfo.output_components;
  std::vector<uint8_t> out(size_t{*height} * *width * *channels);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = &out[size_t{cinfo.output_scanline} * *width * *channels];
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

namespace {

// Weights of every source pixel for each output pixel of an axis.
std::vector<std::vector<std::pair<uint32_t, double>>> RefWeights(const RefAxis& a, bool antialias) {
  std::vector<std::vector<std::pair<uint32_t, double>>> all(a.out);
  for (uint32_t i = 0; i < a.out; ++i) {
    const double center = (i + a.offset + 0.5) * a.scale;  // relative to lo
    auto& w = all[i];
    if (antialias) {
      const double widen = std::max(a.scale, 1.0);
      double sum = 0;
      for (uint32_t x = 0; x < a.len; ++x) {
        const double d = std::abs(x + 0.5 - center) / widen;
        if (d < 1.0) {
          w.emplace_back(a.lo + x, 1.0 - d);
          sum += 1.0 - d;
        }
      }
      for (auto& [_, v] : w) v /= sum;
    } else {
      const double src = std::max(center - 0.5, 0.0);
      const uint32_t x0 = std::min<uint32_t>(static_cast<uint32_t>(src), a.len - 1);
      const uint32_t x1 = std::min<uint32_t>(x0 + 1, a.len - 1);
      const double lambda = std::min(src - x0, 1.0);
      w.emplace_back(a.lo + x0, 1.0 - lambda);
      w.emplace_back(a.lo + x1, lambda);
    }
  }
  return all;
}

}  // namespace

RefAxis RefCrop(uint32_t pos, uint32_t len, uint32_t out) {
  RefAxis a;
  a.lo = pos;
  a.len = len;
  a.scale = static_cast<double>(len) / out;
  a.out = out;
  return a;
}

std::vector<uint8_t> ReferenceResample(const std::vector<uint8_t>& rgb, uint32_t width,
                                       const RefAxis& y, const RefAxis& x, bool antialias) {
  const auto wy = RefWeights(y, antialias);
  const auto wx = RefWeights(x, antialias);
  std::vector<uint8_t> out(size_t{y.out} * x.out * 3);
  for (uint32_t i = 0; i < y.out; ++i) {
    for (uint32_t j = 0; j < x.out; ++j) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (const auto& [sy, vy] : wy[i]) {
          for (const auto& [sx, vx] : wx[j])
            sum += vy * vx * rgb[(size_t{sy} * width + sx) * 3 + c];
        }
        out[(size_t{i} * x.out + j) * 3 + c] =
            static_cast<uint8_t>(std::lround(std::clamp(sum, 0.0, 255.0)));
      }
    }
  }
  return out;
}

double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n, int* max_diff) {
  double sum = 0;
  int worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const int d = std::abs(int{a[i]} - int{b[i]});
    sum += d;
    worst = std::max(worst, d);
  }
  if (max_diff != nullptr) *max_diff = worst;
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace stoker::image::testing
