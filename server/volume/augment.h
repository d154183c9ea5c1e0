// The per-patch random augmentations, with MONAI's semantics: RandFlip,
// RandRotate90, RandScaleIntensity, RandShiftIntensity, RandGaussianNoise,
// RandAdjustContrast. Each is a Draw (whether it applies, with prob, and
// its parameters, from the caller's KeyedRng: keyed by (seed, epoch,
// volume, patch), so the same whatever the worker) and an Apply (pure). A
// sample's image and label share the spatial draws (MONAI's dictionary
// transforms draw once for all keys); the intensity ops touch the image
// only.
//
// Arithmetic: float32 as torch runs MONAI's formulas on a float32 tensor
// (scalars rounded to float32, no fused multiply-add), so RandScaleIntensity
// and RandShiftIntensity equal MONAI's for the same parameters; AdjustContrast's
// pow is libm's powf (torch's vectorized pow may differ in the last bit).
// The noise is stoker's normal draws (Box-Muller), not numpy's stream.
//
// Thread-safe: pure functions (a KeyedRng is the caller's).

#ifndef STOKER_SERVER_VOLUME_AUGMENT_H_
#define STOKER_SERVER_VOLUME_AUGMENT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "server/image/ops/rng.h"

namespace stoker::volume {

using Shape3 = std::array<int64_t, 3>;

// RandFlip(prob, spatial_axis): one draw; when it applies, every axis in
// `axes` flips.
struct FlipDraw {
  std::array<bool, 3> flip = {false, false, false};
};
FlipDraw DrawRandFlip(KeyedRng& rng, double prob, const std::array<bool, 3>& axes);
template <typename T>
void ApplyFlip(const FlipDraw& d, const Shape3& shape, int64_t channels, T* values);

// RandRotate90(prob, max_k, spatial_axes): when it applies, k uniform in
// 1..max_k quarter turns in the plane (a, b), as torch.rot90(x, k, (a, b)):
// axes a and b swap sizes for odd k.
struct Rot90Draw {
  int k = 0;  // 0: not applied
  int a = 0, b = 1;
};
Rot90Draw DrawRandRotate90(KeyedRng& rng, double prob, int max_k, int a, int b);
// The shape after the rotation.
Shape3 Rot90Shape(const Rot90Draw& d, const Shape3& shape);
template <typename T>
void ApplyRot90(const Rot90Draw& d, const Shape3& shape, int64_t channels, const T* in, T* out);

// RandAffine(prob, rotate_range, scale_range, padding_mode), MONAI's
// geometry: when it applies, an angle uniform in [-r_a, r_a) about each axis
// a given a range (create_rotate: R = R0 R1 R2, as many as given) and a
// factor 1 + uniform[-s_a, s_a) along each (create_scale), then A = R S maps
// each output voxel's coordinates, centred on the patch ((n - 1) / 2), to
// the input's: the image sampled trilinearly, the label by its nearest
// voxel (round half to even, as torch's grid_sample), outside the patch as
// `pad` says (torch's grid_sample with align_corners=False: reflection about
// -0.5 and n - 0.5, border, or zeros). The output has the patch's shape.
enum class AffinePad : uint32_t { kReflection = 0, kBorder = 1, kZeros = 2 };
struct AffineDraw {
  bool apply = false;
  std::array<double, 9> m = {1, 0, 0, 0, 1, 0, 0, 0, 1};  // row-major, output -> input
};
// `rotate` and `scale`: up to 3 ranges each (count given), axis by axis.
AffineDraw DrawRandAffine(KeyedRng& rng, double prob, const double* rotate, int rotate_count,
                          const double* scale, int scale_count);
void ApplyAffine(const AffineDraw& d, const Shape3& shape, int64_t channels, AffinePad pad,
                 const float* in, float* out);
void ApplyAffineNearest(const AffineDraw& d, const Shape3& shape, AffinePad pad,
                        const uint8_t* in, uint8_t* out);

// RandScaleIntensity(factors=(lo, hi)): x * (1 + factor), factor uniform in
// [lo, hi). RandShiftIntensity(offsets=(lo, hi)): x + offset.
struct IntensityDraw {
  bool apply = false;
  double value = 0;  // the factor or the offset
};
IntensityDraw DrawUniform(KeyedRng& rng, double prob, double lo, double hi);
void ApplyScaleIntensity(double factor, float* values, int64_t n);
void ApplyShiftIntensity(double offset, float* values, int64_t n);

// RandGaussianNoise(prob, mean, std, sample_std=True): std' uniform in
// [0, std), then x + N(mean, std') per voxel, the noise from `rng`.
struct NoiseDraw {
  bool apply = false;
  double mean = 0, std = 0;
};
NoiseDraw DrawRandGaussianNoise(KeyedRng& rng, double prob, double mean, double std);
void ApplyGaussianNoise(const NoiseDraw& d, KeyedRng& rng, float* values, int64_t n);

// RandAdjustContrast(prob, gamma=(lo, hi)): gamma uniform in [lo, hi),
// then ((x - min) / (range + 1e-7)) ^ gamma * range + min over the patch.
void ApplyAdjustContrast(double gamma, float* values, int64_t n);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_AUGMENT_H_
