#include "server/volume/patch_sampler.h"

#include <cmath>
#include <set>
#include <vector>

#include "catch2/catch.hpp"

namespace stoker::volume {
namespace {

constexpr std::array<int64_t, 3> kShape = {40, 30, 20};

// A blob of foreground (label > 0) and the rest background.
void Lists(std::vector<uint32_t>* fg, std::vector<uint32_t>* bg) {
  for (int64_t k = 0; k < kShape[2]; ++k)
    for (int64_t j = 0; j < kShape[1]; ++j)
      for (int64_t i = 0; i < kShape[0]; ++i) {
        const uint32_t v = static_cast<uint32_t>((k * kShape[1] + j) * kShape[0] + i);
        const bool in = i >= 30 && i < 35 && j >= 2 && j < 7 && k >= 15 && k < 17;
        (in ? fg : bg)->push_back(v);
      }
}

TEST_CASE("RandCropByPosNegLabel: the pos/neg ratio, uniform draws, patches inside") {
  std::vector<uint32_t> fg, bg;
  Lists(&fg, &bg);
  REQUIRE(fg.size() == 50);
  PosNegParams p;
  p.spatial_size = {16, 16, 8};
  p.pos = 1;
  p.neg = 2;
  p.num_samples = 6000;
  KeyedRng rng(7, 1, 3);
  absl::StatusOr<std::vector<Patch>> patches =
      PosNegPatches(p, kShape, fg.data(), fg.size(), bg.data(), bg.size(), rng, "v");
  REQUIRE(patches.ok());
  const std::set<uint32_t> fg_set(fg.begin(), fg.end());
  int from_fg = 0;
  std::vector<int> hits(50, 0);
  for (const Patch& x : *patches) {
    CHECK(fg_set.count(x.drawn) == (x.foreground ? 1u : 0u));
    const int64_t at[3] = {x.drawn % 40, x.drawn / 40 % 30, x.drawn / 1200};
    for (int a = 0; a < 3; ++a) {
      CHECK(x.start[a] >= 0);
      CHECK(x.start[a] + x.size[a] <= kShape[a]);
      CHECK(x.size[a] == p.spatial_size[a]);
      CHECK(at[a] >= x.start[a]);  // the drawn voxel is in its patch
      CHECK(at[a] < x.start[a] + x.size[a]);
    }
    if (x.foreground) {
      ++from_fg;
      ++hits[static_cast<size_t>(std::lower_bound(fg.begin(), fg.end(), x.drawn) - fg.begin())];
    }
  }
  // Binomial(6000, 1/3): mean 2000, sd 36.5; 4 sd either way.
  CHECK(std::abs(from_fg - 2000) < 146);
  // Uniform over the 50 foreground voxels: chi-square, 49 degrees of
  // freedom, under its 0.9999 quantile (94.5).
  double chi2 = 0;
  const double expect = from_fg / 50.0;
  for (int h : hits) chi2 += (h - expect) * (h - expect) / expect;
  CHECK(chi2 < 94.5);
}

TEST_CASE("RandCropByPosNegLabel: the same key draws the same patches, another epoch others") {
  std::vector<uint32_t> fg, bg;
  Lists(&fg, &bg);
  PosNegParams p;
  p.spatial_size = {8, 8, 8};
  p.num_samples = 4;
  auto draw = [&](uint64_t epoch) {
    KeyedRng rng(1, epoch, 9);
    return *PosNegPatches(p, kShape, fg.data(), fg.size(), bg.data(), bg.size(), rng, "v");
  };
  const std::vector<Patch> a = draw(0), b = draw(0), c = draw(1);
  auto same = [](const std::vector<Patch>& x, const std::vector<Patch>& y) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].drawn != y[i].drawn || x[i].start != y[i].start) return false;
    }
    return true;
  };
  CHECK(same(a, b));
  CHECK_FALSE(same(a, c));
}

TEST_CASE("RandCropByPosNegLabel: one list empty, both, too small a volume") {
  std::vector<uint32_t> fg, bg;
  Lists(&fg, &bg);
  PosNegParams p;
  p.spatial_size = {8, 8, 8};
  p.num_samples = 50;
  KeyedRng rng(3);
  absl::StatusOr<std::vector<Patch>> r =
      PosNegPatches(p, kShape, nullptr, 0, bg.data(), bg.size(), rng, "v");
  REQUIRE(r.ok());
  for (const Patch& x : *r) CHECK_FALSE(x.foreground);
  r = PosNegPatches(p, kShape, fg.data(), fg.size(), nullptr, 0, rng, "v");
  REQUIRE(r.ok());
  for (const Patch& x : *r) CHECK(x.foreground);
  CHECK(PosNegPatches(p, kShape, nullptr, 0, nullptr, 0, rng, "v").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  p.spatial_size = {64, 16, 16};
  r = PosNegPatches(p, kShape, fg.data(), fg.size(), bg.data(), bg.size(), rng, "v");
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(r.status().message()).find("allow_smaller") != std::string::npos);
  p.allow_smaller = true;
  r = PosNegPatches(p, kShape, fg.data(), fg.size(), bg.data(), bg.size(), rng, "v");
  REQUIRE(r.ok());
  CHECK((*r)[0].size == std::array<int64_t, 3>{40, 16, 16});
  CHECK((*r)[0].start[0] == 0);
  const uint32_t wild = 40 * 30 * 20;
  CHECK(PosNegPatches(p, kShape, &wild, 1, nullptr, 0, rng, "v").status().code() ==
        absl::StatusCode::kDataLoss);
}

TEST_CASE("CutPatch copies the patch of every channel") {
  std::vector<float> values(static_cast<size_t>(2 * 40 * 30 * 20));
  for (size_t n = 0; n < values.size(); ++n) values[n] = static_cast<float>(n);
  Patch p;
  p.start = {3, 4, 5};
  p.size = {2, 3, 4};
  std::vector<float> out(2 * 2 * 3 * 4);
  CutPatch(values.data(), kShape, 2, p, out.data());
  size_t n = 0;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t i = 0; i < 2; ++i) {
          const int64_t src = c * 24000 + ((k + 5) * 30 + (j + 4)) * 40 + (i + 3);
          CHECK(out[n++] == static_cast<float>(src));
        }
}

}  // namespace
}  // namespace stoker::volume
