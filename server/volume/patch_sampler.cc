#include "server/volume/patch_sampler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stoker::volume {

absl::StatusOr<std::vector<Patch>> PosNegPatches(const PosNegParams& p,
                                                 const std::array<int64_t, 3>& shape,
                                                 const uint32_t* fg, uint64_t fg_count,
                                                 const uint32_t* bg, uint64_t bg_count,
                                                 KeyedRng& rng, const std::string& name) {
  if (!(p.pos >= 0) || !(p.neg >= 0) || p.pos + p.neg <= 0) {
    return absl::InvalidArgumentError("RandCropByPosNegLabel: pos and neg must be >= 0, not both 0");
  }
  if (p.num_samples < 1) {
    return absl::InvalidArgumentError("RandCropByPosNegLabel: num_samples must be >= 1");
  }
  if (fg_count == 0 && bg_count == 0) {
    return absl::FailedPreconditionError(
        name + ": RandCropByPosNegLabel has no voxel to centre a patch on (no foreground label "
               "and no image voxel above image_threshold)");
  }
  std::array<int64_t, 3> size = p.spatial_size;
  for (int a = 0; a < 3; ++a) {
    if (size[a] < 1) return absl::InvalidArgumentError("RandCropByPosNegLabel: a spatial_size < 1");
    if (size[a] > shape[a]) {
      if (!p.allow_smaller) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, ": the volume is ", shape[0], " x ", shape[1], " x ", shape[2],
            " after its prefix, smaller than the patch (", size[0], " x ", size[1], " x ",
            size[2], "): give allow_smaller=True, or a smaller spatial_size"));
      }
      size[a] = shape[a];
    }
  }
  double pos_ratio = p.pos / (p.pos + p.neg);
  if (fg_count == 0) pos_ratio = 0;
  if (bg_count == 0) pos_ratio = 1;
  // correct_crop_centers: centres in [size / 2, shape + 1 - size / 2) (the
  // upper end truncated as MONAI's uint16 cast truncates), widened by one
  // when empty.
  std::array<int64_t, 3> lo{}, hi{};
  for (int a = 0; a < 3; ++a) {
    lo[a] = size[a] / 2;
    hi[a] = static_cast<int64_t>(static_cast<double>(shape[a] + 1) - static_cast<double>(size[a]) / 2.0);
    if (lo[a] == hi[a]) ++hi[a];
  }
  std::vector<Patch> out;
  out.reserve(static_cast<size_t>(p.num_samples));
  for (int s = 0; s < p.num_samples; ++s) {
    Patch patch;
    patch.foreground = rng.Uniform() < pos_ratio;
    const uint32_t* list = patch.foreground ? fg : bg;
    const uint64_t n = patch.foreground ? fg_count : bg_count;
    patch.drawn = list[rng.Below(n)];
    const int64_t voxels = shape[0] * shape[1] * shape[2];
    if (static_cast<int64_t>(patch.drawn) >= voxels) {
      return absl::DataLossError(absl::StrCat(name, ": a voxel list names voxel ", patch.drawn,
                                              " of a volume of ", voxels));
    }
    const int64_t at[3] = {patch.drawn % shape[0], patch.drawn / shape[0] % shape[1],
                           patch.drawn / (shape[0] * shape[1])};
    for (int a = 0; a < 3; ++a) {
      const int64_t centre = std::min(std::max(at[a], lo[a]), hi[a] - 1);
      // SpatialCrop: start = max(centre - size / 2, 0).
      patch.start[a] = std::max<int64_t>(centre - size[a] / 2, 0);
      patch.size[a] = size[a];
    }
    out.push_back(patch);
  }
  return out;
}

}  // namespace stoker::volume
