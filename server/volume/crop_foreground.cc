#include "server/volume/crop_foreground.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stoker::volume {

absl::StatusOr<Box> ForegroundBox(const FloatVolume& v, const CropForegroundParams& p,
                                  const std::string& name) {
  for (int a = 0; a < 3; ++a) {
    if (p.margin[a] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CropForeground: margin ", p.margin[a], " is negative"));
    }
  }
  std::vector<int64_t> channels = p.channel_indices;
  if (channels.empty()) {
    for (int64_t c = 0; c < v.channels; ++c) channels.push_back(c);
  }
  for (int64_t c : channels) {
    if (c < 0 || c >= v.channels) {
      return absl::InvalidArgumentError(absl::StrCat("CropForeground: channel ", c, " of a ",
                                                     v.channels, "-channel volume"));
    }
  }
  std::array<int64_t, 3> lo = {v.shape[0], v.shape[1], v.shape[2]}, hi = {-1, -1, -1};
  for (int64_t c : channels) {
    for (int64_t k = 0; k < v.shape[2]; ++k) {
      for (int64_t j = 0; j < v.shape[1]; ++j) {
        const float* row = v.values.data() + v.At(c, 0, j, k);
        for (int64_t i = 0; i < v.shape[0]; ++i) {
          if (!(row[i] > 0.0f)) continue;
          lo[0] = std::min(lo[0], i);
          hi[0] = std::max(hi[0], i);
          lo[1] = std::min(lo[1], j);
          hi[1] = std::max(hi[1], j);
          lo[2] = std::min(lo[2], k);
          hi[2] = std::max(hi[2], k);
        }
      }
    }
  }
  if (hi[0] < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, ": CropForeground found no foreground (no voxel > 0) to crop to"));
  }
  Box b;
  for (int a = 0; a < 3; ++a) {
    int64_t start = lo[a] - p.margin[a];
    int64_t end = hi[a] + p.margin[a] + 1;
    if (p.allow_smaller) {
      start = std::max<int64_t>(start, 0);
      end = std::min(end, v.shape[a]);
    }
    const int64_t size = end - start;
    const int64_t k = p.k_divisible[a];
    const int64_t grown = k > 0 ? (size + k - 1) / k * k : size;
    // numpy's floor_divide of a non-negative difference.
    start -= (grown - size) / 2;
    b.start[a] = start;
    b.end[a] = start + grown;
  }
  return b;
}

void CropToBox(const Box& b, FloatVolume* v) {
  FloatVolume out;
  out.channels = v->channels;
  for (int a = 0; a < 3; ++a) out.shape[a] = b.end[a] - b.start[a];
  out.values.assign(static_cast<size_t>(out.Voxels()), 0.0f);
  for (int64_t c = 0; c < v->channels; ++c) {
    for (int64_t k = 0; k < out.shape[2]; ++k) {
      const int64_t sk = k + b.start[2];
      if (sk < 0 || sk >= v->shape[2]) continue;
      for (int64_t j = 0; j < out.shape[1]; ++j) {
        const int64_t sj = j + b.start[1];
        if (sj < 0 || sj >= v->shape[1]) continue;
        const int64_t i0 = std::max<int64_t>(0, -b.start[0]);
        const int64_t i1 = std::min(out.shape[0], v->shape[0] - b.start[0]);
        if (i1 <= i0) continue;
        std::copy(v->values.begin() + static_cast<ptrdiff_t>(v->At(c, i0 + b.start[0], sj, sk)),
                  v->values.begin() + static_cast<ptrdiff_t>(v->At(c, i1 - 1 + b.start[0], sj, sk)) + 1,
                  out.values.begin() + static_cast<ptrdiff_t>(out.At(c, i0, j, k)));
      }
    }
  }
  // The box's first voxel becomes voxel 0: the affine's translation moves
  // by the linear part times the start.
  out.affine = v->affine;
  for (int r = 0; r < 3; ++r) {
    double t = v->affine[r * 4 + 3];
    for (int a = 0; a < 3; ++a) t += v->affine[r * 4 + a] * static_cast<double>(b.start[a]);
    out.affine[r * 4 + 3] = t;
  }
  *v = std::move(out);
}

}  // namespace stoker::volume
