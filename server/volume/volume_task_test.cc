// A volume sample's patches (volume_task.h): MONAI's C-order layout, the
// drawn patches inside the volume, dtypes, determinism, and the failures
// that name the fix. In process; no daemon.

#include "server/volume/volume_task.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "stoker/ring_layout.h"

namespace stoker::volume {
namespace {

using Catch::Matchers::Contains;

// A 10 x 12 x 14 volume of `channels` (value = c * 10000 + i * 100 + j * 7 + k
// * 0.5) and a label with a foreground block.
PreparedVolume Sample(int64_t channels) {
  PreparedVolume v;
  v.image.shape = {10, 12, 14};
  v.image.channels = channels;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t k = 0; k < 14; ++k) {
      for (int64_t j = 0; j < 12; ++j) {
        for (int64_t i = 0; i < 10; ++i) v.image.values.push_back(c * 10000 + i * 100 + j * 7 + k * 0.5f);
      }
    }
  }
  v.has_label = true;
  v.label.assign(10 * 12 * 14, 0);
  for (int64_t k = 2; k < 5; ++k) {
    for (int64_t j = 3; j < 6; ++j) {
      for (int64_t i = 1; i < 4; ++i) v.label[(k * 12 + j) * 10 + i] = 2;
    }
  }
  REQUIRE(ForegroundBackground(v.image, v.label, -1e9, &v.foreground, &v.background).ok());
  return v;
}

VolumeTaskParams Params(PatchKind kind, int64_t x, int64_t y, int64_t z, uint32_t samples) {
  VolumeTaskParams p;
  p.patch_kind = static_cast<uint32_t>(kind);
  p.patch[0] = x;
  p.patch[1] = y;
  p.patch[2] = z;
  p.num_samples = samples;
  p.dtype = ring::kFloat32;
  p.label_dtype = ring::kUint8;
  return p;
}

TEST_CASE("a centred crop is the volume's block in C order [C, X, Y, Z]") {
  const PreparedVolume v = Sample(2);
  VolumeTaskParams p = Params(PatchKind::kSpatialCrop, 4, 6, 8, 1);
  p.random_center = 0;
  p.channels = 2;
  std::vector<float> img(PatchImageBytes(p) / 4);
  std::vector<uint8_t> lab(PatchLabelBytes(p));
  REQUIRE(CutPatches(p, ViewOf(v), 1, 0, 0, reinterpret_cast<uint8_t*>(img.data()), lab.data(), "v").ok());
  // The corner is (10 - 4) / 2, (12 - 6) / 2, (14 - 8) / 2 = (3, 3, 3).
  size_t n = 0;
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t j = 0; j < 6; ++j) {
        for (int64_t k = 0; k < 8; ++k, ++n) {
          CHECK(img[n] == v.image.values[v.image.At(c, i + 3, j + 3, k + 3)]);
          if (c == 0) CHECK(lab[n] == v.label[((k + 3) * 12 + j + 3) * 10 + i + 3]);
        }
      }
    }
  }
}

TEST_CASE("RandCropByPosNegLabel's patches lie in the volume, the same for the same key") {
  const PreparedVolume v = Sample(1);
  VolumeTaskParams p = Params(PatchKind::kPosNeg, 4, 4, 4, 6);
  p.dtype = ring::kFloat32;
  p.label_dtype = ring::kInt64;
  std::vector<float> img(PatchImageBytes(p) / 4), again(img.size());
  std::vector<int64_t> lab(PatchLabelBytes(p) / 8);
  REQUIRE(CutPatches(p, ViewOf(v), 7, 2, 11, reinterpret_cast<uint8_t*>(img.data()),
                     reinterpret_cast<uint8_t*>(lab.data()), "v").ok());
  REQUIRE(CutPatches(p, ViewOf(v), 7, 2, 11, reinterpret_cast<uint8_t*>(again.data()), nullptr, "v").ok());
  CHECK(img == again);
  for (uint32_t s = 0; s < 6; ++s) {
    // The corner from the first value (i * 100 + j * 7 + k / 2 is unique here).
    const float first = img[s * 64];
    bool found = false;
    for (int64_t i = 0; i + 4 <= 10 && !found; ++i) {
      for (int64_t j = 0; j + 4 <= 12 && !found; ++j) {
        for (int64_t k = 0; k + 4 <= 14 && !found; ++k) {
          if (v.image.values[v.image.At(0, i, j, k)] != first) continue;
          found = true;
          size_t n = s * 64;
          for (int64_t a = 0; a < 4; ++a) {
            for (int64_t b = 0; b < 4; ++b) {
              for (int64_t c = 0; c < 4; ++c, ++n) {
                CHECK(img[n] == v.image.values[v.image.At(0, i + a, j + b, k + c)]);
                CHECK(lab[n] == v.label[((k + c) * 12 + j + b) * 10 + i + a]);
              }
            }
          }
        }
      }
    }
    CHECK(found);
  }
  std::vector<float> other(img.size());
  REQUIRE(CutPatches(p, ViewOf(v), 7, 3, 11, reinterpret_cast<uint8_t*>(other.data()), nullptr, "v").ok());
  CHECK(other != img);  // another epoch, other draws
}

TEST_CASE("random ops run on the cut patch: RandFlip(prob=1) on axis 0 reverses X") {
  const PreparedVolume v = Sample(1);
  VolumeTaskParams p = Params(PatchKind::kSpatialCrop, 4, 6, 8, 1);
  p.random_center = 0;
  std::vector<float> plain(PatchImageBytes(p) / 4), flipped(plain.size());
  std::vector<uint8_t> plain_lab(PatchLabelBytes(p)), flipped_lab(plain_lab.size());
  REQUIRE(CutPatches(p, ViewOf(v), 1, 0, 0, reinterpret_cast<uint8_t*>(plain.data()),
                     plain_lab.data(), "v").ok());
  p.augment_count = 1;
  p.augment[0].kind = static_cast<uint32_t>(AugmentKind::kFlip);
  p.augment[0].prob = 1;
  p.augment[0].axes = 1;
  REQUIRE(CutPatches(p, ViewOf(v), 1, 0, 0, reinterpret_cast<uint8_t*>(flipped.data()),
                     flipped_lab.data(), "v").ok());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t jk = 0; jk < 6 * 8; ++jk) {
      CHECK(flipped[i * 48 + jk] == plain[(3 - i) * 48 + jk]);
      CHECK(flipped_lab[i * 48 + jk] == plain_lab[(3 - i) * 48 + jk]);
    }
  }
}

TEST_CASE("float16 and bfloat16 round to nearest even as torch does") {
  PreparedVolume v = Sample(1);
  v.image.values[0] = 1.0f + 0x1.0p-11f;  // a half's tie: rounds to even (1.0)
  v.image.values[1] = 1.0f + 0x1.8p-8f;   // bfloat16: 1 + 3/512 -> 1 + 1/128 (up, away from the tie)
  VolumeTaskParams p = Params(PatchKind::kSpatialCrop, 10, 12, 14, 1);
  p.dtype = ring::kFloat16;
  std::vector<uint16_t> h(PatchImageBytes(p) / 2);
  REQUIRE(CutPatches(p, ViewOf(v), 1, 0, 0, reinterpret_cast<uint8_t*>(h.data()), nullptr, "v").ok());
  CHECK(h[0] == 0x3c00);
  p.dtype = ring::kBFloat16;
  REQUIRE(CutPatches(p, ViewOf(v), 1, 0, 0, reinterpret_cast<uint8_t*>(h.data()), nullptr, "v").ok());
  CHECK(h[0] == 0x3f80);
  CHECK(h[14 * 12] == 0x3f81);  // voxel (1, 0, 0): C order puts i slowest
}

TEST_CASE("a volume that does not fit the session fails naming the fix") {
  const PreparedVolume v = Sample(2);
  VolumeTaskParams p = Params(PatchKind::kSpatialCrop, 4, 4, 4, 1);
  std::vector<uint8_t> out(PatchImageBytes(p) * 2);
  absl::Status st = CutPatches(p, ViewOf(v), 1, 0, 0, out.data(), nullptr, "x.nii.gz");
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(st.message()), Contains("x.nii.gz: the volume has 2 channel(s)") &&
                                            Contains("channels=2"));
  p.channels = 2;
  p.patch[2] = 15;
  st = CutPatches(p, ViewOf(v), 1, 0, 0, out.data(), nullptr, "x.nii.gz");
  CHECK_THAT(std::string(st.message()), Contains("smaller than the 4 x 4 x 15 patch"));
  PreparedVolume unlabelled = Sample(1);
  unlabelled.has_label = false;
  VolumeTaskParams q = Params(PatchKind::kPosNeg, 4, 4, 4, 1);
  st = CutPatches(q, ViewOf(unlabelled), 1, 0, 0, out.data(), nullptr, "x.nii.gz");
  CHECK_THAT(std::string(st.message()), Contains("needs a label volume"));
}

}  // namespace
}  // namespace stoker::volume
