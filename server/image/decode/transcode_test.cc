#include "server/image/decode/transcode.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include "server/image/decode/jpeg_decoder.h"
#include "server/image/pipeline.h"
#include "server/image/ops/rng.h"
#include "testing/test_jpeg.h"
#include "testing/test_params.h"

namespace stoker::image {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::MakePhoto;

// ---- Encoders with scan scripts of our own (valid inputs only: libjpeg's
// default error handler exits the process). ----

jpeg_scan_info Scan(std::vector<int> comps, int ss, int se, int ah, int al) {
  jpeg_scan_info s = {};
  s.comps_in_scan = static_cast<int>(comps.size());
  for (size_t i = 0; i < comps.size(); ++i) s.component_index[i] = comps[i];
  s.Ss = ss, s.Se = se, s.Ah = ah, s.Al = al;
  return s;
}

std::vector<int> AllComponents(int n) {
  std::vector<int> c;
  for (int i = 0; i < n; ++i) c.push_back(i);
  return c;
}

// Successive approximation everywhere: DC in three steps (the last one at
// the very end, as jpegtran sends it), AC of component 0 split in two bands
// and refined over the whole band, the other components' AC in four steps.
std::vector<jpeg_scan_info> DeepApproximationScript(int n) {
  std::vector<jpeg_scan_info> s = {Scan(AllComponents(n), 0, 0, 0, 2), Scan({0}, 1, 5, 0, 2),
                                   Scan({0}, 6, 63, 0, 2)};
  for (int c = 1; c < n; ++c) s.push_back(Scan({c}, 1, 63, 0, 3));
  s.push_back(Scan(AllComponents(n), 0, 0, 2, 1));
  s.push_back(Scan({0}, 1, 63, 2, 1));
  for (int c = 1; c < n; ++c) s.push_back(Scan({c}, 1, 63, 3, 2));
  for (int c = 1; c < n; ++c) s.push_back(Scan({c}, 1, 63, 2, 1));
  for (int c = n - 1; c >= 1; --c) s.push_back(Scan({c}, 1, 63, 1, 0));
  s.push_back(Scan({0}, 1, 63, 1, 0));
  s.push_back(Scan(AllComponents(n), 0, 0, 1, 0));
  return s;
}

// Spectral selection only, DC not interleaved.
std::vector<jpeg_scan_info> SpectralScript(int n) {
  std::vector<jpeg_scan_info> s;
  for (int c = 0; c < n; ++c) s.push_back(Scan({c}, 0, 0, 0, 0));
  s.push_back(Scan({0}, 1, 2, 0, 0));
  s.push_back(Scan({0}, 3, 9, 0, 0));
  for (int c = 1; c < n; ++c) s.push_back(Scan({c}, 1, 63, 0, 0));
  s.push_back(Scan({0}, 10, 63, 0, 0));
  return s;
}

// Sequential, one scan per component: not progressive, still multi-scan.
std::vector<jpeg_scan_info> SequentialScript(int n) {
  std::vector<jpeg_scan_info> s;
  for (int c = n - 1; c >= 0; --c) s.push_back(Scan({c}, 0, 63, 0, 0));
  return s;
}

void SetScript(jpeg_compress_struct* cinfo, const std::vector<jpeg_scan_info>& script) {
  cinfo->scan_info = script.data();
  cinfo->num_scans = static_cast<int>(script.size());
}

// Re-codes `jpeg`'s coefficients with `script` (what jpegtran -scans does).
std::vector<uint8_t> Recode(const std::vector<uint8_t>& jpeg,
                            const std::vector<jpeg_scan_info>& script,
                            unsigned int restart_interval = 0) {
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  jpeg_error_mgr jerr_src, jerr_dst;
  src.err = jpeg_std_error(&jerr_src);
  dst.err = jpeg_std_error(&jerr_dst);
  jpeg_create_decompress(&src);
  jpeg_create_compress(&dst);
  jpeg_mem_src(&src, jpeg.data(), jpeg.size());
  jpeg_read_header(&src, TRUE);
  jvirt_barray_ptr* coefs = jpeg_read_coefficients(&src);
  jpeg_copy_critical_parameters(&src, &dst);
  SetScript(&dst, script);
  dst.restart_interval = restart_interval;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&dst, &buffer, &size);
  jpeg_write_coefficients(&dst, coefs);
  jpeg_finish_compress(&dst);
  jpeg_finish_decompress(&src);
  jpeg_destroy_compress(&dst);
  jpeg_destroy_decompress(&src);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// Every component sampled h x v (1 or 3 channels), coded with `script`
// (empty: jpeg_simple_progression); `rgb`: stored as RGB, no color
// transform (an Adobe marker with transform 0).
std::vector<uint8_t> EncodeScripted(uint32_t height, uint32_t width, int channels, int h, int v,
                                    const std::vector<jpeg_scan_info>& script, bool rgb = false) {
  EncodeOptions o;
  o.every_h = h, o.every_v = v;
  o.store_rgb = rgb;
  o.progressive = script.empty();
  for (const jpeg_scan_info& scan : script) {
    testing::ScanSpec spec;
    spec.components.assign(scan.component_index, scan.component_index + scan.comps_in_scan);
    spec.ss = scan.Ss, spec.se = scan.Se, spec.ah = scan.Ah, spec.al = scan.Al;
    o.scans.push_back(spec);
  }
  return EncodeJpeg(MakePhoto(height, width, channels, 5), height, width, channels, o);
}

// ---- Reading files back. ----

struct Segment {
  uint8_t marker = 0;
  std::vector<uint8_t> payload;  // without the length field; empty for SOI/EOI/RSTn
};

// The marker segments of a file in order, walked by their lengths; a scan's
// entropy-coded data is skipped up to the next marker that is not FF00 or
// RSTn. Fails the test on a malformed file.
std::vector<Segment> Segments(const std::vector<uint8_t>& j) {
  std::vector<Segment> out;
  REQUIRE(j.size() >= 4);
  REQUIRE((j[0] == 0xFF && j[1] == 0xD8));
  out.push_back({0xD8, {}});
  size_t i = 2;
  while (true) {
    REQUIRE(i + 1 < j.size());
    REQUIRE(j[i] == 0xFF);
    const uint8_t m = j[i + 1];
    if (m == 0xD9) {
      out.push_back({m, {}});
      CHECK(i + 2 == j.size());
      return out;
    }
    REQUIRE(i + 3 < j.size());
    const size_t len = size_t{j[i + 2]} << 8 | j[i + 3];
    REQUIRE(len >= 2);
    REQUIRE(i + 2 + len <= j.size());
    out.push_back({m, std::vector<uint8_t>(j.begin() + i + 4, j.begin() + i + 2 + len)});
    i += 2 + len;
    if (m == 0xDA) {  // entropy-coded data up to the next real marker
      while (i + 1 < j.size() &&
             !(j[i] == 0xFF && j[i + 1] != 0 && !(j[i + 1] >= 0xD0 && j[i + 1] <= 0xD7))) {
        ++i;
      }
    }
  }
}

int CountMarker(const std::vector<Segment>& segments, uint8_t marker) {
  int n = 0;
  for (const Segment& s : segments) n += s.marker == marker ? 1 : 0;
  return n;
}

// The APPn and COM segments, minus the JFIF APP0 libjpeg writes itself.
std::vector<Segment> Metadata(const std::vector<uint8_t>& j) {
  std::vector<Segment> out;
  for (Segment& s : Segments(j)) {
    const bool app_or_com = (s.marker >= 0xE0 && s.marker <= 0xEF) || s.marker == 0xFE;
    const bool jfif = s.marker == 0xE0 && s.payload.size() >= 5 &&
                      std::memcmp(s.payload.data(), "JFIF\0", 5) == 0;
    if (app_or_com && !jfif) out.push_back(std::move(s));
  }
  return out;
}

// A whole decode through JpegDecoder at scale/8.
absl::Status Decode(JpegDecoder& d, const std::vector<uint8_t>& j, int scale,
                    std::vector<uint8_t>* pixels, JpegHeader* header = nullptr) {
  JpegHeader h;
  absl::Status s = d.ReadHeader(j.data(), j.size(), {}, &h);
  if (!s.ok()) return s;
  if (header != nullptr) *header = h;
  DecodeInfo info;
  s = d.Start(scale, &info);
  if (!s.ok()) return s;
  const size_t stride = size_t{info.width} * info.channels;
  pixels->assign(stride * info.height, 0);
  while (d.next_row() < info.height) {
    uint8_t* row = pixels->data() + stride * d.next_row();
    uint32_t got = 0;
    s = d.ReadRows(&row, 1, &got);
    if (!s.ok()) return s;
  }
  return d.Finish();
}

// Transcodes `original` and checks what every copy must be: one
// interleaved Huffman scan, the same frame, the same metadata, the same
// pixels at every DCT scale.
void CheckCopy(Transcoder& t, const std::vector<uint8_t>& original) {
  std::vector<uint8_t> copy;
  const absl::Status s = t.ToBaseline(original.data(), original.size(), {}, &copy);
  REQUIRE(s.ok());
  const std::vector<Segment> segments = Segments(copy);
  CHECK(CountMarker(segments, 0xDA) == 1);
  CHECK(CountMarker(segments, 0xC0) + CountMarker(segments, 0xC1) == 1);
  int frame_components = -1, scan_components = -2;
  for (const Segment& seg : segments) {
    if ((seg.marker == 0xC0 || seg.marker == 0xC1) && seg.payload.size() > 5) {
      frame_components = seg.payload[5];
    }
    if (seg.marker == 0xDA && !seg.payload.empty()) scan_components = seg.payload[0];
  }
  CHECK(scan_components == frame_components);  // interleaved
  const std::vector<Segment> meta_in = Metadata(original), meta_out = Metadata(copy);
  REQUIRE(meta_in.size() == meta_out.size());
  for (size_t i = 0; i < meta_in.size(); ++i) {
    CHECK(int{meta_in[i].marker} == int{meta_out[i].marker});
    CHECK(meta_in[i].payload == meta_out[i].payload);
  }
  JpegDecoder d;
  for (int scale = 1; scale <= 8; ++scale) {
    INFO("scale " << scale << "/8");
    std::vector<uint8_t> a, b;
    JpegHeader ha, hb;
    REQUIRE(Decode(d, original, scale, &a, &ha).ok());
    REQUIRE(Decode(d, copy, scale, &b, &hb).ok());
    CHECK(hb.width == ha.width);
    CHECK(hb.height == ha.height);
    CHECK(hb.components == ha.components);
    CHECK(hb.orientation == ha.orientation);
    CHECK_FALSE(hb.progressive);
    CHECK_FALSE(hb.arithmetic);
    REQUIRE(a.size() == b.size());
    CHECK(a == b);
  }
}

struct Layout {
  const char* name;
  int channels;
  int subsampling;
  bool ycck;
};

constexpr Layout kGray = {"gray", 1, 444, false};
constexpr Layout k444 = {"4:4:4", 3, 444, false};
constexpr Layout k422 = {"4:2:2", 3, 422, false};
constexpr Layout k420 = {"4:2:0", 3, 420, false};
constexpr Layout k440 = {"4:4:0", 3, 440, false};
constexpr Layout kCmyk = {"CMYK 4:2:0", 4, 420, false};
constexpr Layout kYcck = {"YCCK 4:4:4", 4, 444, true};
constexpr Layout kLayouts[] = {kGray, k444, k422, k420, k440, kCmyk, kYcck};

std::vector<uint8_t> Baseline(const Layout& l, uint32_t h, uint32_t w, int restart_rows = 0) {
  EncodeOptions o;
  o.subsampling = l.subsampling;
  o.cmyk_as_ycck = l.ycck;
  o.restart_rows = restart_rows;
  return EncodeJpeg(MakePhoto(h, w, l.channels, 7), h, w, l.channels, o);
}

std::vector<uint8_t> SimpleProgressive(const Layout& l, uint32_t h, uint32_t w,
                                       int restart_rows = 0) {
  EncodeOptions o;
  o.subsampling = l.subsampling;
  o.cmyk_as_ycck = l.ycck;
  o.restart_rows = restart_rows;
  o.progressive = true;
  return EncodeJpeg(MakePhoto(h, w, l.channels, 7), h, w, l.channels, o);
}

// Inserts a marker segment right after SOI.
std::vector<uint8_t> WithSegment(std::vector<uint8_t> j, uint8_t marker,
                                 const std::vector<uint8_t>& payload) {
  const size_t len = payload.size() + 2;
  std::vector<uint8_t> seg = {0xFF, marker, static_cast<uint8_t>(len >> 8),
                              static_cast<uint8_t>(len & 0xFF)};
  seg.insert(seg.end(), payload.begin(), payload.end());
  j.insert(j.begin() + 2, seg.begin(), seg.end());
  return j;
}

size_t FindMarker(const std::vector<uint8_t>& j, uint8_t code) {
  for (size_t i = 0; i + 1 < j.size(); ++i) {
    if (j[i] == 0xFF && j[i + 1] == code) return i;
  }
  return std::string::npos;
}

TEST_CASE("Transcode: Progressive copies decode to the same pixels at every scale", "[transcode]") {
  Transcoder t;
  for (const Layout& l : kLayouts) {
    for (auto [h, w] : {std::pair<uint32_t, uint32_t>{53, 75}, {9, 17}, {1, 1}, {64, 48}}) {
      INFO(l.name << " " << w << "x" << h);
      const std::vector<uint8_t> base = Baseline(l, h, w);
      const int n = l.channels == 1 ? 1 : l.channels;
      {
        INFO("jpeg_simple_progression");
        CheckCopy(t, SimpleProgressive(l, h, w));
      }
      {
        INFO("deep successive approximation");
        CheckCopy(t, Recode(base, DeepApproximationScript(n)));
      }
      {
        INFO("spectral selection, restart every 3 MCUs");
        CheckCopy(t, Recode(base, SpectralScript(n), 3));
      }
      {
        INFO("sequential, one scan per component");
        if (n > 1) CheckCopy(t, Recode(base, SequentialScript(n)));
      }
    }
  }
}

TEST_CASE("Transcode: Restart intervals and arithmetic coding", "[transcode]") {
  Transcoder t;
  CheckCopy(t, SimpleProgressive(k420, 53, 75, 1));
  CheckCopy(t, SimpleProgressive(kGray, 53, 75, 2));
  for (bool progressive : {true, false}) {
    INFO("arithmetic, progressive " << progressive);
    EncodeOptions o;
    o.arithmetic = true;
    o.progressive = progressive;
    CheckCopy(t, EncodeJpeg(MakePhoto(53, 75, 3, 3), 53, 75, 3, o));
  }
}

TEST_CASE("Transcode: Metadata survives: EXIF orientation, ICC, COM, Adobe", "[transcode]") {
  Transcoder t;
  EncodeOptions o;
  o.progressive = true;
  o.app1 = testing::ExifApp1(6, true);
  std::vector<uint8_t> j = EncodeJpeg(MakePhoto(40, 56, 3, 2), 40, 56, 3, o);
  std::vector<uint8_t> icc(3000);
  std::memcpy(icc.data(), "ICC_PROFILE\0\1\1", 14);
  for (size_t i = 14; i < icc.size(); ++i) icc[i] = static_cast<uint8_t>(i * 7);
  icc[100] = 0xFF, icc[101] = 0xD9;  // an EOI-looking pair inside a payload
  j = WithSegment(j, 0xFE, {'h', 'e', 'l', 'l', 'o'});
  j = WithSegment(j, 0xE2, icc);
  CheckCopy(t, j);  // metadata equal, in order
  std::vector<uint8_t> copy;
  REQUIRE(t.ToBaseline(j.data(), j.size(), {}, &copy).ok());
  JpegDecoder d;
  JpegHeader h;
  REQUIRE(d.ReadHeader(copy.data(), copy.size(), {}, &h).ok());
  CHECK(h.orientation == 6);
  d.Abort();
  const std::vector<Segment> segments = Segments(copy);
  CHECK(CountMarker(segments, 0xE0) == 1);  // libjpeg's JFIF, once
  CHECK(CountMarker(segments, 0xEE) == 0);

  // Adobe files: one APP14, libjpeg's, with the source's transform code
  // (0 CMYK, 2 YCCK), so the copy decodes to the same stored CMYK.
  for (const Layout& l : {kCmyk, kYcck}) {
    INFO(l.name);
    const std::vector<uint8_t> p = SimpleProgressive(l, 40, 56);
    REQUIRE(t.ToBaseline(p.data(), p.size(), {}, &copy).ok());
    int adobe_in = 0, adobe_out = 0;
    uint8_t transform_in = 99, transform_out = 98;
    for (const Segment& s : Segments(p)) {
      if (s.marker == 0xEE && s.payload.size() >= 12) ++adobe_in, transform_in = s.payload[11];
    }
    for (const Segment& s : Segments(copy)) {
      if (s.marker == 0xEE && s.payload.size() >= 12) ++adobe_out, transform_out = s.payload[11];
    }
    CHECK(adobe_in == 1);
    CHECK(adobe_out == 1);
    CHECK(int{transform_out} == int{transform_in});
    CHECK(int{transform_in} == (l.ycck ? 2 : 0));
  }
}

TEST_CASE("Transcode: The color transform survives: RGB, YCbCr by an Adobe marker alone",
          "[transcode]") {
  Transcoder t;
  std::vector<uint8_t> copy;
  // RGB: decoded without a color conversion, the copy too (Adobe 0 again).
  const std::vector<uint8_t> rgb = EncodeScripted(40, 56, 3, 1, 1, {}, true);
  CheckCopy(t, rgb);
  REQUIRE(t.ToBaseline(rgb.data(), rgb.size(), {}, &copy).ok());
  int adobe = 0;
  for (const Segment& s : Segments(copy)) {
    if (s.marker == 0xEE && s.payload.size() >= 12) {
      ++adobe;
      CHECK(int{s.payload[11]} == 0);
    }
    CHECK(s.marker != 0xE0);  // a JFIF marker would mean YCbCr
  }
  CHECK(adobe == 1);
  // YCbCr told by an Adobe marker with transform 1 and no JFIF marker (as
  // Photoshop writes): the copy gains libjpeg's JFIF and keeps the Adobe.
  std::vector<uint8_t> p = SimpleProgressive(k420, 40, 56);
  const std::vector<Segment> segments = Segments(p);
  REQUIRE(segments[1].marker == 0xE0);
  p.erase(p.begin() + 2, p.begin() + 6 + segments[1].payload.size());  // the JFIF APP0
  p = WithSegment(p, 0xEE, {'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 1});
  CheckCopy(t, p);
}

TEST_CASE("Transcode: Baseline and unfinished scan scripts are FAILED_PRECONDITION",
          "[transcode]") {
  Transcoder t;
  std::vector<uint8_t> copy = {1, 2, 3};
  for (const Layout& l : kLayouts) {
    INFO(l.name);
    for (int restart : {0, 1}) {
      const std::vector<uint8_t> b = Baseline(l, 33, 47, restart);
      CHECK(t.ToBaseline(b.data(), b.size(), {}, &copy).code() ==
            absl::StatusCode::kFailedPrecondition);
      CHECK(copy.empty());
    }
  }
  // Scripts that leave coefficients short of full precision: a progressive
  // decode smooths such blocks, a baseline copy could not.
  const std::vector<uint8_t> base = Baseline(k420, 53, 75);
  std::vector<jpeg_scan_info> dc_only = {Scan({0, 1, 2}, 0, 0, 0, 0)};
  std::vector<jpeg_scan_info> no_last_bit = DeepApproximationScript(3);
  no_last_bit.erase(no_last_bit.end() - 2);  // the final AC refinement of component 0
  std::vector<jpeg_scan_info> no_high_band = SpectralScript(3);
  no_high_band.pop_back();  // component 0's coefficients 10..63 never sent
  // libjpeg 2.1 smooths when one of the coefficients 1..9 is unfinished; the
  // rule here is stricter (any coefficient), which no_high_band shows.
  const std::pair<const std::vector<jpeg_scan_info>*, bool> scripts[] = {
      {&dc_only, true}, {&no_last_bit, true}, {&no_high_band, false}};
  for (const auto& [script, smooths] : scripts) {
    INFO("scan script of " << script->size() << " scans");
    const std::vector<uint8_t> p = Recode(base, *script);
    const absl::Status s = t.ToBaseline(p.data(), p.size(), {}, &copy);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains("unfinished"));
    // Why: the same coefficients in one sequential scan decode differently.
    JpegDecoder d;
    std::vector<uint8_t> smoothed, plain;
    REQUIRE(Decode(d, p, 8, &smoothed).ok());
    REQUIRE(Decode(d, Recode(p, SequentialScript(3)), 8, &plain).ok());
    CHECK((smoothed != plain) == smooths);
  }
  // Every component sampled 2x2: 12 blocks in an interleaved MCU, over
  // libjpeg's 10; only separate scans can code it.
  const std::vector<uint8_t> wide = EncodeScripted(40, 56, 3, 2, 2, SequentialScript(3));
  const absl::Status s = t.ToBaseline(wide.data(), wide.size(), {}, &copy);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(copy.empty());
  CheckCopy(t, SimpleProgressive(k444, 40, 56));  // still usable after the errors
}

TEST_CASE("Transcode: Caps: pixels and scans", "[transcode][hostile]") {
  Transcoder t;
  const std::vector<uint8_t> p = SimpleProgressive(k420, 48, 64);
  const int scans = CountMarker(Segments(p), 0xDA);
  REQUIRE(scans == 10);
  std::vector<uint8_t> copy;
  DecodeLimits limits;
  limits.max_pixels = 48 * 64 - 1;
  CHECK(t.ToBaseline(p.data(), p.size(), limits, &copy).code() ==
        absl::StatusCode::kResourceExhausted);
  limits.max_pixels = 48 * 64;
  CHECK(t.ToBaseline(p.data(), p.size(), limits, &copy).ok());
  limits.max_scans = scans - 1;
  const absl::Status s = t.ToBaseline(p.data(), p.size(), limits, &copy);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(copy.empty());
  limits.max_scans = scans;
  CHECK(t.ToBaseline(p.data(), p.size(), limits, &copy).ok());
}

TEST_CASE("Transcode: 12-bit and lossless files are UNIMPLEMENTED", "[transcode][hostile]") {
  Transcoder t;
  const std::vector<uint8_t> p = SimpleProgressive(k420, 48, 64);
  const size_t sof = FindMarker(p, 0xC2);
  REQUIRE(sof != std::string::npos);
  std::vector<uint8_t> copy;
  std::vector<uint8_t> twelve = p;
  twelve[sof + 4] = 12;
  CHECK(t.ToBaseline(twelve.data(), twelve.size(), {}, &copy).code() ==
        absl::StatusCode::kUnimplemented);
  std::vector<uint8_t> lossless = p;
  lossless[sof + 1] = 0xC3;
  CHECK(t.ToBaseline(lossless.data(), lossless.size(), {}, &copy).code() ==
        absl::StatusCode::kUnimplemented);
}

TEST_CASE("Transcode: Through the pipeline, the copy gives the original's pixels on train crops",
          "[transcode]") {
  // Crops of 200-800 px to 12 px: decoded at 1/8, 2/8, 4/8 and 8/8, with
  // the crop's columns and rows skipped (single-scan and multi-scan files
  // take different paths through jpeg_skip_scanlines).
  Transcoder t;
  SampleProcessor processor;
  const PipelineParams p = testing::TrainParams(12, 12);
  std::vector<uint8_t> a(MaxSampleBytes(p)), b(a.size());
  for (const Layout& l : {k420, k422, k444, kGray, kCmyk}) {
    INFO(l.name);
    const std::vector<uint8_t> original = SimpleProgressive(l, 700, 900);
    std::vector<uint8_t> copy;
    REQUIRE(t.ToBaseline(original.data(), original.size(), {}, &copy).ok());
    std::set<uint32_t> scales;
    for (uint64_t i = 0; i < 24; ++i) {
      INFO("sample " << i);
      const SampleKey key{7, 0, i};
      SampleResult ra, rb;
      REQUIRE(processor.Process(original.data(), original.size(), p, key, a.data(), a.size(), &ra)
                  .ok());
      REQUIRE(processor.Process(copy.data(), copy.size(), p, key, b.data(), b.size(), &rb).ok());
      REQUIRE(ra.bytes == rb.bytes);
      CHECK(ra.dct_scale == rb.dct_scale);
      CHECK(std::memcmp(a.data(), b.data(), ra.bytes) == 0);
      scales.insert(ra.dct_scale);
    }
    CHECK(scales.size() >= 3);
  }
}

TEST_CASE("Transcode: A reused transcoder forgets the previous file's tables",
          "[transcode][hostile]") {
  const std::vector<uint8_t> good = Recode(Baseline(k420, 53, 75), DeepApproximationScript(3));
  std::vector<uint8_t> no_dqt = good;  // every DQT segment cut out
  for (size_t at = 2; at + 4 <= no_dqt.size();) {
    if (no_dqt[at] != 0xFF) break;
    const uint8_t marker = no_dqt[at + 1];
    if (marker == 0xDA) break;  // the first scan: no DQT after it here
    const size_t len = (size_t{no_dqt[at + 2]} << 8) | no_dqt[at + 3];
    if (marker == 0xDB) {
      no_dqt.erase(no_dqt.begin() + static_cast<std::ptrdiff_t>(at),
                   no_dqt.begin() + static_cast<std::ptrdiff_t>(at + 2 + len));
    } else {
      at += 2 + len;
    }
  }
  REQUIRE(no_dqt.size() < good.size());
  Transcoder fresh, reused;
  std::vector<uint8_t> copy;
  const absl::Status alone = fresh.ToBaseline(no_dqt.data(), no_dqt.size(), {}, &copy);
  REQUIRE_FALSE(alone.ok());
  REQUIRE(reused.ToBaseline(good.data(), good.size(), {}, &copy).ok());
  CHECK(reused.ToBaseline(no_dqt.data(), no_dqt.size(), {}, &copy) == alone);
  CHECK(copy.empty());
}

TEST_CASE("Transcode: Garbage, truncated and corrupted files return a status",
          "[transcode][hostile]") {
  Transcoder t;
  std::vector<uint8_t> copy;
  const std::vector<uint8_t> empty;
  CHECK(t.ToBaseline(empty.data(), 0, {}, &copy).code() == absl::StatusCode::kInvalidArgument);
  CHECK(t.ToBaseline(nullptr, 0, {}, &copy).code() == absl::StatusCode::kInvalidArgument);
  KeyedRng rng(11);
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> junk(1 + rng.Below(2000));
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng.Below(256));
    if (i % 2 == 0 && junk.size() >= 2) junk[0] = 0xFF, junk[1] = 0xD8;
    CHECK_FALSE(t.ToBaseline(junk.data(), junk.size(), {}, &copy).ok());
    CHECK(copy.empty());
  }

  const std::vector<uint8_t> p = Recode(Baseline(k420, 53, 75), DeepApproximationScript(3));
  // Every cut is refused, including the one that drops only the EOI.
  for (size_t cut = 0; cut < p.size(); cut += 1 + cut % 37) {
    INFO("cut at " << cut << " of " << p.size());
    CHECK_FALSE(t.ToBaseline(p.data(), cut, {}, &copy).ok());
    CHECK(copy.empty());
  }
  for (size_t cut : {p.size() - 1, p.size() - 2}) {
    CHECK(t.ToBaseline(p.data(), cut, {}, &copy).code() == absl::StatusCode::kInvalidArgument);
  }

  // A damaged file either fails, or its copy decodes like the damaged file
  // itself (libjpeg's tolerated warnings): never a copy that differs.
  JpegDecoder d;
  int copied = 0, failed = 0;
  for (int i = 0; i < 60; ++i) {
    std::vector<uint8_t> bad = p;
    const size_t at = 2 + rng.Below(static_cast<uint32_t>(bad.size() - 2));
    bad[at] ^= static_cast<uint8_t>(1 + rng.Below(255));
    if (!t.ToBaseline(bad.data(), bad.size(), {}, &copy).ok()) {
      ++failed;
      CHECK(copy.empty());
      continue;
    }
    ++copied;
    INFO("byte " << at << " damaged");
    for (int scale : {1, 8}) {
      std::vector<uint8_t> a, b;
      REQUIRE(Decode(d, bad, scale, &a).ok());
      REQUIRE(Decode(d, copy, scale, &b).ok());
      CHECK(a == b);
    }
  }
  CHECK(copied > 0);
  CHECK(failed > 0);
  CheckCopy(t, p);  // the object is still usable
}

}  // namespace
}  // namespace stoker::image
