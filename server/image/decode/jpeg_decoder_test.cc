#include "server/image/decode/jpeg_decoder.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "server/image/ops/rng.h"
#include "testing/test_jpeg.h"

namespace stoker::image {
namespace {

using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::MakePhoto;
using testing::ScanSpec;

std::vector<uint8_t> SmallJpeg(const EncodeOptions& o = {}, uint32_t h = 48, uint32_t w = 64) {
  return EncodeJpeg(MakePhoto(h, w, 3, 1), h, w, 3, o);
}

// Offset of the marker FF `code`, or npos.
size_t FindMarker(const std::vector<uint8_t>& j, uint8_t code) {
  for (size_t i = 0; i + 1 < j.size(); ++i) {
    if (j[i] == 0xFF && j[i + 1] == code) return i;
  }
  return std::string::npos;
}

// Decodes every row; returns the first error.
absl::Status DecodeAll(JpegDecoder& d, const std::vector<uint8_t>& jpeg,
                       const DecodeLimits& limits = {}) {
  JpegHeader header;
  absl::Status s = d.ReadHeader(jpeg.data(), jpeg.size(), limits, &header);
  if (!s.ok()) return s;
  DecodeInfo info;
  s = d.Start(8, &info);
  if (!s.ok()) return s;
  std::vector<uint8_t> row(size_t{info.width} * info.channels);
  uint8_t* rows[1] = {row.data()};
  while (d.next_row() < info.height) {
    uint32_t got = 0;
    s = d.ReadRows(rows, 1, &got);
    if (!s.ok()) return s;
  }
  return d.Finish();
}

TEST_CASE("Header of ordinary files", "[jpeg]") {
  JpegDecoder d;
  JpegHeader h;
  std::vector<uint8_t> j = SmallJpeg();
  REQUIRE(d.ReadHeader(j.data(), j.size(), {}, &h).ok());
  CHECK(h.width == 64);
  CHECK(h.height == 48);
  CHECK(h.components == 3);
  CHECK(h.orientation == 1);
  CHECK_FALSE(h.progressive);
  d.Abort();

  EncodeOptions o;
  o.progressive = true;
  o.app1 = testing::ExifApp1(6, false);
  j = SmallJpeg(o);
  REQUIRE(d.ReadHeader(j.data(), j.size(), {}, &h).ok());
  CHECK(h.progressive);
  CHECK(h.orientation == 6);
  DecodeLimits no_exif;
  no_exif.read_exif = false;
  REQUIRE(d.ReadHeader(j.data(), j.size(), no_exif, &h).ok());
  CHECK(h.orientation == 1);
  d.Abort();
}

TEST_CASE("Every coding decodes", "[jpeg]") {
  JpegDecoder d;
  for (int sub : {444, 422, 420, 440}) {
    for (bool prog : {false, true}) {
      for (bool arith : {false, true}) {
        EncodeOptions o;
        o.subsampling = sub;
        o.progressive = prog;
        o.arithmetic = arith;
        o.restart_rows = arith ? 0 : 1;
        CAPTURE(sub, prog, arith);
        CHECK(DecodeAll(d, SmallJpeg(o, 37, 53)).ok());
      }
    }
  }
}

TEST_CASE("Hostile inputs return a status", "[jpeg][hostile]") {
  JpegDecoder d;
  JpegHeader h;
  auto header = [&](const std::vector<uint8_t>& bytes) {
    return d.ReadHeader(bytes.data(), bytes.size(), {}, &h);
  };
  CHECK(header({}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(d.ReadHeader(nullptr, 0, {}, &h).code() == absl::StatusCode::kInvalidArgument);
  CHECK(header({0xFF}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(header({0xFF, 0xD8}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(header({0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13}).code() ==
        absl::StatusCode::kInvalidArgument);
  const std::string text = "hello, this is not an image\n";
  CHECK(header(std::vector<uint8_t>(text.begin(), text.end())).code() ==
        absl::StatusCode::kInvalidArgument);

  KeyedRng rng(99);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> junk(1 + rng.Below(4000));
    for (auto& b : junk) b = rng.Next() & 0xff;
    if (i % 2 == 0) junk[0] = 0xFF, junk[1 % junk.size()] = 0xD8;
    CHECK_FALSE(DecodeAll(d, junk).ok());
  }
}

TEST_CASE("Corrupted real files never crash", "[jpeg][hostile]") {
  JpegDecoder d;
  EncodeOptions prog;
  prog.progressive = true;
  for (const auto& good : {SmallJpeg(), SmallJpeg(prog)}) {
    KeyedRng rng(7);
    for (int i = 0; i < 400; ++i) {
      std::vector<uint8_t> bad = good;
      const int flips = 1 + static_cast<int>(rng.Below(8));
      for (int k = 0; k < flips; ++k) bad[rng.Below(bad.size())] = rng.Next() & 0xff;
      (void)DecodeAll(d, bad);  // any status; must not crash
    }
    CHECK(DecodeAll(d, good).ok());  // and the decoder is still usable
  }
}

TEST_CASE("Truncated files fail", "[jpeg][hostile]") {
  JpegDecoder d;
  EncodeOptions prog;
  prog.progressive = true;
  for (const auto& good : {SmallJpeg(), SmallJpeg(prog)}) {
    REQUIRE(DecodeAll(d, good).ok());
    for (size_t n = 0; n + 2 <= good.size(); n += 1 + n / 16) {
      const std::vector<uint8_t> cut(good.begin(), good.begin() + n);
      CAPTURE(n, good.size());
      CHECK_FALSE(DecodeAll(d, cut).ok());
    }
  }
}

TEST_CASE("A header claiming 65500x65500 is refused before decoding", "[jpeg][hostile]") {
  std::vector<uint8_t> j = SmallJpeg();
  const size_t sof = FindMarker(j, 0xC0);
  REQUIRE(sof != std::string::npos);
  // FF C0, length(2), precision(1), height(2), width(2)
  j[sof + 5] = 0xFF, j[sof + 6] = 0xDC;
  j[sof + 7] = 0xFF, j[sof + 8] = 0xDC;
  JpegDecoder d;
  JpegHeader h;
  const absl::Status s = d.ReadHeader(j.data(), j.size(), {}, &h);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(s.message()), Catch::Contains("65500x65500"));
}

TEST_CASE("12-bit and lossless files are UNIMPLEMENTED", "[jpeg][hostile]") {
  JpegDecoder d;
  JpegHeader h;
  std::vector<uint8_t> j = SmallJpeg();
  const size_t sof = FindMarker(j, 0xC0);
  REQUIRE(sof != std::string::npos);
  std::vector<uint8_t> twelve = j;
  twelve[sof + 4] = 12;
  absl::Status s = d.ReadHeader(twelve.data(), twelve.size(), {}, &h);
  CHECK(s.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(s.message()), Catch::Contains("12"));
  std::vector<uint8_t> lossless = j;
  lossless[sof + 1] = 0xC3;
  s = d.ReadHeader(lossless.data(), lossless.size(), {}, &h);
  CHECK(s.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(s.message()), Catch::Contains("lossless"));
}

TEST_CASE("The scan cap stops many-scan files", "[jpeg][hostile]") {
  EncodeOptions o;
  o.progressive = true;
  const std::vector<uint8_t> j = SmallJpeg(o);  // simple progression: 10 scans
  JpegDecoder d;
  DecodeLimits limits;
  limits.max_scans = 3;
  const absl::Status s = DecodeAll(d, j, limits);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(DecodeAll(d, j).ok());
}

TEST_CASE("A reused decoder forgets the previous file's tables", "[jpeg][hostile]") {
  const std::vector<uint8_t> good = SmallJpeg();
  std::vector<uint8_t> no_dqt = good;  // every DQT segment cut out
  for (size_t at = FindMarker(no_dqt, 0xDB); at != std::string::npos;
       at = FindMarker(no_dqt, 0xDB)) {
    const size_t len = (size_t{no_dqt[at + 2]} << 8) | no_dqt[at + 3];
    no_dqt.erase(no_dqt.begin() + static_cast<std::ptrdiff_t>(at),
                 no_dqt.begin() + static_cast<std::ptrdiff_t>(at + 2 + len));
  }
  JpegDecoder fresh, reused;
  const absl::Status first = DecodeAll(fresh, no_dqt);
  CHECK_THAT(std::string(first.message()), Catch::Contains("Quantization table"));
  REQUIRE(DecodeAll(reused, good).ok());
  CHECK(DecodeAll(reused, no_dqt) == first);
}

TEST_CASE("Pixel cap", "[jpeg][hostile]") {
  const std::vector<uint8_t> j = SmallJpeg();
  JpegDecoder d;
  JpegHeader h;
  DecodeLimits limits;
  limits.max_pixels = 64 * 48 - 1;
  CHECK(d.ReadHeader(j.data(), j.size(), limits, &h).code() ==
        absl::StatusCode::kResourceExhausted);
  limits.max_pixels = 64 * 48;
  CHECK(d.ReadHeader(j.data(), j.size(), limits, &h).ok());
  d.Abort();
}

// Decodes all rows at scale 1/8 with the given scan selection.
std::vector<uint8_t> DecodeEighth(JpegDecoder& d, const std::vector<uint8_t>& jpeg,
                                  ScanSelection scans, absl::Status* status,
                                  bool* skipped = nullptr) {
  JpegHeader header;
  *status = d.ReadHeader(jpeg.data(), jpeg.size(), {}, &header);
  if (!status->ok()) return {};
  DecodeInfo info;
  *status = d.Start(1, &info, scans);
  if (!status->ok()) return {};
  if (skipped != nullptr) *skipped = info.skipped_scans;
  std::vector<uint8_t> px(size_t{info.width} * info.height * info.channels);
  while (d.next_row() < info.height) {
    uint8_t* rows[1] = {px.data() + size_t{d.next_row()} * info.width * info.channels};
    uint32_t got = 0;
    *status = d.ReadRows(rows, 1, &got);
    if (!status->ok()) return {};
  }
  *status = d.Finish();
  return px;
}

std::vector<int> AllComponents(int n) {
  std::vector<int> all(n);
  for (int c = 0; c < n; ++c) all[c] = c;
  return all;
}

// Scan scripts of the kinds encoders write, for `n` components.
std::vector<std::vector<ScanSpec>> Scripts(int n) {
  std::vector<std::vector<ScanSpec>> scripts;
  // DC first with Al=1, its last bit at the very end (jpegtran-like).
  std::vector<ScanSpec> late_dc = {{AllComponents(n), 0, 0, 0, 1}};
  for (int c = 0; c < n; ++c) late_dc.push_back({{c}, 1, 63, 0, 0});
  late_dc.push_back({AllComponents(n), 0, 0, 1, 0});
  scripts.push_back(late_dc);
  // One DC scan per component, the AC bands split.
  std::vector<ScanSpec> split;
  for (int c = 0; c < n; ++c) split.push_back({{c}, 0, 0, 0, 0});
  for (int c = n - 1; c >= 0; --c) {
    split.push_back({{c}, 1, 5, 0, 0});
    split.push_back({{c}, 6, 63, 0, 0});
  }
  scripts.push_back(split);
  // AC with successive approximation, refinements last.
  std::vector<ScanSpec> approx = {{AllComponents(n), 0, 0, 0, 0}};
  for (int c = 0; c < n; ++c) {
    approx.push_back({{c}, 1, 9, 0, 2});
    approx.push_back({{c}, 10, 63, 0, 1});
  }
  for (int c = 0; c < n; ++c) {
    approx.push_back({{c}, 1, 9, 2, 1});
    approx.push_back({{c}, 1, 63, 1, 0});
  }
  scripts.push_back(approx);
  return scripts;
}

struct Layout {
  int channels;
  int subsampling;
};

TEST_CASE("At 1/8 the needed scans decode to the whole file's pixels", "[jpeg][scans]") {
  JpegDecoder d;
  int cases = 0;
  for (const Layout layout : {Layout{3, 444}, Layout{3, 422}, Layout{3, 420}, Layout{3, 440},
                              Layout{1, 444}, Layout{4, 444}, Layout{4, 420}}) {
    const int n = layout.channels;
    std::vector<std::vector<ScanSpec>> scripts = Scripts(n);
    scripts.push_back({});  // jpeg_simple_progression
    for (size_t script = 0; script < scripts.size(); ++script) {
      for (const auto& [h, w] : {std::pair<uint32_t, uint32_t>{37, 53}, {91, 130}}) {
        for (int restart_rows : {0, 1}) {
          EncodeOptions o;
          o.subsampling = layout.subsampling;
          o.scans = scripts[script];
          o.progressive = o.scans.empty();
          o.optimize = script % 2 == 0;
          o.restart_rows = restart_rows;
          o.quality = 85 + static_cast<int>(script);
          const std::vector<uint8_t> j = EncodeJpeg(MakePhoto(h, w, n, script + h), h, w, n, o);
          CAPTURE(n, layout.subsampling, script, h, w, restart_rows);
          absl::Status whole_status, needed_status;
          bool skipped = false;
          const std::vector<uint8_t> whole = DecodeEighth(d, j, ScanSelection::kAll, &whole_status);
          const std::vector<uint8_t> needed =
              DecodeEighth(d, j, ScanSelection::kNeeded, &needed_status, &skipped);
          REQUIRE(whole_status.ok());
          REQUIRE(needed_status.ok());
          CHECK(skipped);  // the luma's AC scans at least
          CHECK(whole.size() == size_t{(h + 7) / 8} * ((w + 7) / 8) * (n == 4 ? 4 : 3));
          CHECK(whole == needed);
          ++cases;
        }
      }
    }
  }
  CHECK(cases == 7 * 4 * 2 * 2);
}

TEST_CASE("Files the scan filter does not take decode whole", "[jpeg][scans]") {
  JpegDecoder d;
  absl::Status status;
  bool skipped = true;
  // Baseline; arithmetic-coded progressive.
  for (bool arithmetic : {false, true}) {
    EncodeOptions o;
    o.progressive = arithmetic;
    o.arithmetic = arithmetic;
    const std::vector<uint8_t> j = SmallJpeg(o, 40, 56);
    const std::vector<uint8_t> needed =
        DecodeEighth(d, j, ScanSelection::kNeeded, &status, &skipped);
    REQUIRE(status.ok());
    CHECK_FALSE(skipped);
    CHECK(needed == DecodeEighth(d, j, ScanSelection::kAll, &status));
  }
  // A script that leaves the DC at Al=1: libjpeg may smooth the whole file.
  EncodeOptions o;
  o.scans = {{{0, 1, 2}, 0, 0, 0, 1}, {{0}, 1, 63, 0, 0}, {{1}, 1, 63, 0, 0}, {{2}, 1, 63, 0, 0}};
  const std::vector<uint8_t> partial = SmallJpeg(o, 40, 56);
  std::vector<JpegScan> scans;
  CHECK_FALSE(ListScans(partial.data(), partial.size(), 1000, &scans));
  const std::vector<uint8_t> needed =
      DecodeEighth(d, partial, ScanSelection::kNeeded, &status, &skipped);
  REQUIRE(status.ok());
  CHECK_FALSE(skipped);
  CHECK(needed == DecodeEighth(d, partial, ScanSelection::kAll, &status));
  // Other scales never skip.
  o = {};
  o.progressive = true;
  const std::vector<uint8_t> j = SmallJpeg(o, 40, 56);
  JpegHeader header;
  DecodeInfo info;
  REQUIRE(d.ReadHeader(j.data(), j.size(), {}, &header).ok());
  REQUIRE(d.Start(2, &info, ScanSelection::kNeeded).ok());
  CHECK_FALSE(info.skipped_scans);
  d.Abort();
}

TEST_CASE("ListScans walks a progressive file by its markers", "[jpeg][scans]") {
  EncodeOptions o;
  o.progressive = true;
  o.restart_rows = 1;
  const std::vector<uint8_t> j = SmallJpeg(o, 61, 83);
  std::vector<JpegScan> scans;
  REQUIRE(ListScans(j.data(), j.size(), 1000, &scans));
  REQUIRE(scans.size() == 10);  // jpeg_simple_progression for YCbCr
  CHECK(scans[0].components == 3);
  CHECK(scans[0].al == 1);
  CHECK(scans[1].components == 1);
  CHECK(scans[1].ss == 1);
  CHECK(scans[1].se == 5);
  for (size_t i = 0; i + 1 < scans.size(); ++i) {
    CHECK(j[scans[i].offset] == 0xFF);
    CHECK(j[scans[i].offset + 1] == 0xDA);
    CHECK(scans[i].offset + scans[i].bytes <= scans[i + 1].offset);
  }
  CHECK(scans.back().offset + scans.back().bytes + 2 == j.size());  // then EOI
  CHECK_FALSE(ListScans(j.data(), j.size(), 9, &scans));            // over the cap
  CHECK_FALSE(ListScans(j.data(), j.size() - 2, 1000, &scans));     // no EOI
  CHECK_FALSE(ListScans(nullptr, 0, 1000, &scans));
  const std::vector<uint8_t> baseline = SmallJpeg();
  CHECK_FALSE(ListScans(baseline.data(), baseline.size(), 1000, &scans));
}

// Truncated and corrupted progressive files: the same status as the whole
// file (the filter falls back to it), and the same pixels when one decodes.
TEST_CASE("Damaged progressive files fail as the whole file does", "[jpeg][scans][hostile]") {
  JpegDecoder d;
  std::vector<std::vector<uint8_t>> files;
  EncodeOptions o;
  o.progressive = true;
  o.restart_rows = 1;
  files.push_back(SmallJpeg(o, 40, 56));
  o = {};
  o.subsampling = 422;
  o.scans = Scripts(3)[0];
  files.push_back(SmallJpeg(o, 33, 47));
  auto same = [&](const std::vector<uint8_t>& bad) {
    absl::Status whole_status, needed_status;
    JpegDecoder fresh;  // and d, used for every file before
    const std::vector<uint8_t> whole = DecodeEighth(fresh, bad, ScanSelection::kAll, &whole_status);
    const std::vector<uint8_t> needed =
        DecodeEighth(d, bad, ScanSelection::kNeeded, &needed_status);
    CHECK(whole_status == needed_status);
    CHECK(whole == needed);
    return whole_status.ok();
  };
  for (const auto& good : files) {
    REQUIRE(same(good));
    for (size_t n = 0; n + 1 < good.size(); n += 1 + n / 32) {
      CAPTURE(n, good.size());
      CHECK_FALSE(same(std::vector<uint8_t>(good.begin(), good.begin() + n)));
    }
    KeyedRng rng(11);
    int decoded = 0;
    for (int i = 0; i < 500; ++i) {
      std::vector<uint8_t> bad = good;
      const int flips = 1 + static_cast<int>(rng.Below(3));
      for (int k = 0; k < flips; ++k) bad[rng.Below(bad.size())] = rng.Next() & 0xff;
      CAPTURE(i);
      decoded += same(bad) ? 1 : 0;
    }
    CHECK(decoded > 0);  // some corruptions are only warnings
  }
}

}  // namespace
}  // namespace stoker::image
