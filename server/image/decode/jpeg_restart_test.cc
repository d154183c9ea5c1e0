#include "server/image/decode/jpeg_restart.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "server/image/decode/jpeg_decoder.h"
#include "testing/test_jpeg.h"

namespace stoker::image {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::EncodeJpeg;
using testing::EncodeOptions;
using testing::MakePhoto;

struct Rows {
  absl::Status status;
  uint32_t x = 0, w = 0;  // the columns Window gave
  bool seeked = false;
  Bytes pixels;  // rows [y, y1), columns [want_x, want_x + want_w)
};

// Window(want_x, want_w, y) at `scale`, then rows up to y1, then Stop.
Rows ReadWindow(JpegDecoder* d, const Bytes& jpeg, int scale, uint32_t want_x, uint32_t want_w,
                uint32_t y, uint32_t y1) {
  Rows r;
  JpegHeader h;
  DecodeInfo info;
  r.status = d->ReadHeader(jpeg.data(), jpeg.size(), DecodeLimits{}, &h);
  if (r.status.ok()) r.status = d->Start(scale, &info);
  if (!r.status.ok()) return r;
  r.x = want_x;
  r.w = want_w;
  r.status = d->Window(&r.x, &r.w, y, &r.seeked);
  if (!r.status.ok()) return r;
  REQUIRE(r.x <= want_x);
  REQUIRE(r.x + r.w >= want_x + want_w);
  REQUIRE(d->next_row() == y);
  Bytes row(size_t{r.w} * info.channels);
  for (uint32_t i = y; i < y1; ++i) {
    uint8_t* p = row.data();
    uint32_t got = 0;
    r.status = d->ReadRows(&p, 1, &got);
    if (!r.status.ok()) return r;
    REQUIRE(got == 1);
    const uint8_t* from = row.data() + size_t{want_x - r.x} * info.channels;
    r.pixels.insert(r.pixels.end(), from, from + size_t{want_w} * info.channels);
  }
  REQUIRE(d->next_row() == y1);
  r.status = y1 < info.height ? d->Stop() : d->Finish();
  return r;
}

struct Layout {
  int channels, subsampling;
  int restart_rows;
  unsigned restart_mcus;
};

TEST_CASE("restart windows: the rows and columns read are the whole file's, on every layout",
          "[restart]") {
  const Layout layouts[] = {
      {3, 420, 1, 0}, {3, 420, 0, 1}, {3, 420, 0, 3}, {3, 420, 2, 0}, {3, 444, 1, 0},
      {3, 444, 0, 2}, {3, 422, 0, 1}, {3, 422, 1, 0}, {3, 440, 1, 0}, {3, 440, 0, 5},
      {1, 444, 1, 0}, {1, 444, 0, 4}, {4, 444, 1, 0}, {4, 420, 0, 1}, {3, 420, 0, 7},
  };
  JpegDecoder seeking, plain(JpegDecoderOptions{false});
  std::mt19937 rng(11);
  int seeked = 0, windows = 0;
  for (const Layout& lay : layouts) {
    for (auto [h, w] : {std::pair<uint32_t, uint32_t>{157, 203}, {96, 128}, {301, 77}}) {
      EncodeOptions o;
      o.subsampling = lay.subsampling;
      o.restart_rows = lay.restart_rows;
      o.restart_mcus = lay.restart_mcus;
      const Bytes jpeg = EncodeJpeg(MakePhoto(h, w, lay.channels, rng()), h, w, lay.channels, o);
      RestartLayout index;
      REQUIRE(IndexRestartIntervals(jpeg.data(), jpeg.size(), &index));
      for (int scale : {1, 2, 4, 8}) {
        const uint32_t oh = (h * scale + 7) / 8, ow = (w * scale + 7) / 8;
        for (int t = 0; t < 12; ++t) {
          const uint32_t x = rng() % ow, y = rng() % oh;
          const uint32_t cw = 1 + rng() % (ow - x);
          const uint32_t y1 = y + 1 + rng() % (oh - y);
          CAPTURE(lay.channels, lay.subsampling, lay.restart_rows, lay.restart_mcus, h, w, scale, x,
                  cw, y, y1);
          const Rows a = ReadWindow(&seeking, jpeg, scale, x, cw, y, y1);
          const Rows b = ReadWindow(&plain, jpeg, scale, x, cw, y, y1);
          REQUIRE(a.status.ok());
          REQUIRE(b.status.ok());
          CHECK_FALSE(b.seeked);
          REQUIRE(a.pixels == b.pixels);
          ++windows;
          seeked += a.seeked ? 1 : 0;
          // A window starting below the first interval-aligned MCU row
          // under its one-MCU margin always leaves something out.
          const uint32_t mcu_rows_above = y / (index.mcu_height * scale / 8);
          const uint32_t aligned = index.interval / std::gcd(index.interval, index.mcus_per_row);
          if (mcu_rows_above >= 1 + aligned) CHECK(a.seeked);
        }
      }
    }
  }
  CHECK(seeked > windows / 2);
}

TEST_CASE("restart windows: what is indexed and what is refused", "[restart]") {
  const uint32_t h = 64, w = 96;
  const Bytes photo = MakePhoto(h, w, 3, 5);
  EncodeOptions o;
  o.restart_rows = 1;
  const Bytes jpeg = EncodeJpeg(photo, h, w, 3, o);
  RestartLayout l;
  REQUIRE(IndexRestartIntervals(jpeg.data(), jpeg.size(), &l));
  CHECK(l.width == w);
  CHECK(l.height == h);
  CHECK(l.mcu_width == 16);
  CHECK(l.mcu_height == 16);
  CHECK(l.mcus_per_row == 6);
  CHECK(l.mcu_rows == 4);
  CHECK(l.interval == 6);
  CHECK(l.starts.size() == 4);
  CHECK(l.end == jpeg.size());
  CHECK(ColumnsSeekable(l));

  // The RST markers the index found, in order.
  std::vector<size_t> markers;
  for (size_t i = 0; i + 1 < l.ends.size(); ++i) {
    size_t at = l.ends[i];
    while (jpeg[at] == 0xFF) ++at;
    REQUIRE(jpeg[at] == 0xD0 + i % 8);
    markers.push_back(at);
  }

  SECTION("files without restart markers, progressive, arithmetic: refused") {
    EncodeOptions none;
    CHECK_FALSE(IndexRestartIntervals(EncodeJpeg(photo, h, w, 3, none).data(),
                                      EncodeJpeg(photo, h, w, 3, none).size(), &l));
    EncodeOptions prog = o;
    prog.progressive = true;
    const Bytes p = EncodeJpeg(photo, h, w, 3, prog);
    CHECK_FALSE(IndexRestartIntervals(p.data(), p.size(), &l));
    EncodeOptions arith = o;
    arith.arithmetic = true;
    const Bytes a = EncodeJpeg(photo, h, w, 3, arith);
    CHECK_FALSE(IndexRestartIntervals(a.data(), a.size(), &l));
  }
  SECTION("markers out of sequence, missing, or no EOI: refused") {
    Bytes bad = jpeg;
    bad[markers[1]] = 0xD5;
    CHECK_FALSE(IndexRestartIntervals(bad.data(), bad.size(), &l));
    Bytes dropped(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(markers[1] - 1));
    dropped.insert(dropped.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(markers[1] + 1),
                   jpeg.end());
    CHECK_FALSE(IndexRestartIntervals(dropped.data(), dropped.size(), &l));
    for (size_t cut : {jpeg.size() - 1, jpeg.size() - 2, markers[2], size_t{300}, size_t{3}}) {
      CHECK_FALSE(IndexRestartIntervals(jpeg.data(), cut, &l));
    }
  }
  SECTION("cuts: the rules on rows and columns") {
    Bytes cut;
    uint32_t cw = 0, ch = 0;
    CHECK(CutToRestartWindow(jpeg.data(), l, 2, 0, 6, &cut, &cw, &ch));
    CHECK((cw == w && ch == h - 32));
    CHECK_FALSE(CutToRestartWindow(jpeg.data(), l, 4, 0, 6, &cut, &cw, &ch));  // no rows left
    CHECK_FALSE(CutToRestartWindow(jpeg.data(), l, 0, 1, 6, &cut, &cw, &ch));  // mid-interval
    CHECK_FALSE(CutToRestartWindow(jpeg.data(), l, 0, 3, 3, &cut, &cw, &ch));  // no columns
    EncodeOptions small = o;
    small.restart_rows = 0;
    small.restart_mcus = 2;
    const Bytes j2 = EncodeJpeg(photo, h, w, 3, small);
    RestartLayout l2;
    REQUIRE(IndexRestartIntervals(j2.data(), j2.size(), &l2));
    CHECK(CutToRestartWindow(j2.data(), l2, 1, 2, 4, &cut, &cw, &ch));
    CHECK((cw == 32 && ch == 48));
    CHECK_FALSE(CutToRestartWindow(j2.data(), l2, 1, 1, 4, &cut, &cw, &ch));
  }
}

TEST_CASE("restart windows: damage inside or outside the window", "[restart]") {
  const uint32_t h = 160, w = 160;
  EncodeOptions o;
  o.restart_mcus = 2;  // 5 intervals a row of 10 MCUs
  const Bytes jpeg = EncodeJpeg(MakePhoto(h, w, 3, 9), h, w, 3, o);
  RestartLayout l;
  REQUIRE(IndexRestartIntervals(jpeg.data(), jpeg.size(), &l));
  JpegDecoder seeking, plain(JpegDecoderOptions{false});
  // Window: columns 96..127, rows 96..159 (MCU rows 6..9, MCU columns 6..7).
  auto damage = [&](size_t interval) {
    Bytes bad = jpeg;
    const size_t at = (l.starts[interval] + l.ends[interval]) / 2;
    bad[at] = bad[at] == 0x55 ? 0x56 : 0x55;  // never FF: no marker made
    return bad;
  };
  // Both decoders on the window, which the seeking one reads from a cut copy:
  // the same pixels, returned.
  auto both = [&](const Bytes& file) {
    const Rows a = ReadWindow(&seeking, file, 8, 96, 32, 96, 160);
    const Rows b = ReadWindow(&plain, file, 8, 96, 32, 96, 160);
    REQUIRE(a.status.ok());
    REQUIRE(b.status.ok());
    CHECK(a.seeked);
    CHECK(a.pixels == b.pixels);
    return b.pixels;
  };
  SECTION("outside: the seeking decoder never reads it, the window is the same") {
    both(damage(1));  // MCU row 0, columns 2-3
  }
  SECTION("inside: both read the same damaged pixels") {
    CHECK(both(damage(7 * 5 + 3)) != both(jpeg));  // MCU row 7, columns 6-7
  }
  SECTION("a truncated file fails as the plain path fails it") {
    const Bytes cut(jpeg.begin(), jpeg.end() - 100);
    const Rows a = ReadWindow(&seeking, cut, 8, 96, 32, 96, 100);
    const Rows b = ReadWindow(&plain, cut, 8, 96, 32, 96, 100);
    CHECK_FALSE(a.seeked);
    CHECK(a.status == b.status);
  }
}

}  // namespace
}  // namespace stoker::image
