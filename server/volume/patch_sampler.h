// Random patches of a prepared volume (volume_cache.h) with MONAI's
// RandCropByPosNegLabel semantics (generate_pos_neg_label_crop_centers,
// correct_crop_centers, SpatialCrop): each of num_samples patches is
// centred on a foreground voxel with probability pos / (pos + neg), else on
// a background voxel, drawn uniformly from the voxel lists; the centre is
// then moved the least that keeps the patch inside the volume. With no
// foreground (or no background) every patch draws from the other list, as
// MONAI does (it warns); with neither, FAILED_PRECONDITION.
//
// The draws come from the caller's KeyedRng (server/image/ops/rng.h), keyed
// by (seed, epoch, volume): the same patches whatever the worker, not
// MONAI's random stream (the same distribution, other draws).
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_PATCH_SAMPLER_H_
#define STOKER_SERVER_VOLUME_PATCH_SAMPLER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/image/ops/rng.h"

namespace stoker::volume {

struct PosNegParams {
  std::array<int64_t, 3> spatial_size = {96, 96, 96};
  double pos = 1, neg = 1;
  int num_samples = 1;
  // A volume smaller than spatial_size along an axis: its whole extent
  // there (the patch is smaller; MONAI's allow_smaller), else the sample
  // fails (MONAI raises).
  bool allow_smaller = false;
};

struct Patch {
  std::array<int64_t, 3> start{};  // the first voxel, inside the volume
  std::array<int64_t, 3> size{};   // spatial_size, or less with allow_smaller
  uint32_t drawn = 0;              // the voxel drawn (before the centre moved)
  bool foreground = false;         // drawn from the foreground list
};

absl::StatusOr<std::vector<Patch>> PosNegPatches(const PosNegParams& p,
                                                 const std::array<int64_t, 3>& shape,
                                                 const uint32_t* foreground, uint64_t fg_count,
                                                 const uint32_t* background, uint64_t bg_count,
                                                 KeyedRng& rng, const std::string& name);

// Copies patch `p` of every channel of `values` (a volume of `shape` and
// `channels`, voxel order) into `out` (channels x size voxels, voxel
// order).
template <typename T>
void CutPatch(const T* values, const std::array<int64_t, 3>& shape, int64_t channels,
              const Patch& p, T* out) {
  const int64_t per = shape[0] * shape[1] * shape[2];
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t k = 0; k < p.size[2]; ++k) {
      for (int64_t j = 0; j < p.size[1]; ++j) {
        const T* row = values + c * per + ((k + p.start[2]) * shape[1] + (j + p.start[1])) * shape[0] +
                       p.start[0];
        for (int64_t i = 0; i < p.size[0]; ++i) *out++ = row[i];
      }
    }
  }
}

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_PATCH_SAMPLER_H_
