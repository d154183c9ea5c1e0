#include "server/volume/volume_task.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "server/image/ops/rng.h"
#include "server/volume/augment.h"
#include "server/volume/patch_sampler.h"
#include "stoker/ring_layout.h"

namespace stoker::volume {
namespace {

// Writes the block `box` (start, size) of `values` (channels x `shape`, i
// fastest) C-order [channels, X, Y, Z] (k fastest) at `out`, converted.
// Tiled along i: each k step reads one cache line of 16 i's and appends to
// 16 output rows, instead of a cache miss per value.
template <typename In, typename Convert>
void EmitTransposed(const In* values, const Shape3& shape, int64_t channels, const Shape3& start,
                    const Shape3& size, uint8_t* out, Convert convert) {
  using Out = decltype(convert(In{}));
  Out* o = reinterpret_cast<Out*>(out);
  constexpr int64_t kTile = 16;
  const int64_t per = shape[0] * shape[1] * shape[2];
  const int64_t X = size[0], Y = size[1], Z = size[2];
  for (int64_t c = 0; c < channels; ++c) {
    const In* v = values + c * per;
    Out* oc = o + c * X * Y * Z;
    for (int64_t i0 = 0; i0 < X; i0 += kTile) {
      const int64_t n = std::min(kTile, X - i0);
      for (int64_t j = 0; j < Y; ++j) {
        const In* row = v + ((start[2] * shape[1]) + j + start[1]) * shape[0] + start[0] + i0;
        Out* dst = oc + (i0 * Y + j) * Z;
        for (int64_t k = 0; k < Z; ++k) {
          const In* src = row + k * shape[1] * shape[0];
          for (int64_t i = 0; i < n; ++i) dst[i * Y * Z + k] = convert(src[i]);
        }
      }
    }
  }
}

void EmitImage(uint32_t dtype, const float* values, const Shape3& shape, int64_t channels,
               const Shape3& start, const Shape3& size, uint8_t* out) {
  if (dtype == ring::kFloat16) {
    EmitTransposed(values, shape, channels, start, size, out, [](float x) { return FloatToHalf(x); });
  } else if (dtype == ring::kBFloat16) {
    EmitTransposed(values, shape, channels, start, size, out, [](float x) { return FloatToBFloat16(x); });
  } else {
    EmitTransposed(values, shape, channels, start, size, out, [](float x) { return x; });
  }
}

void EmitLabel(uint32_t dtype, const uint8_t* values, const Shape3& shape, const Shape3& start,
               const Shape3& size, uint8_t* out) {
  if (dtype == ring::kInt64) {
    EmitTransposed(values, shape, 1, start, size, out, [](uint8_t x) { return static_cast<int64_t>(x); });
  } else {
    EmitTransposed(values, shape, 1, start, size, out, [](uint8_t x) { return x; });
  }
}

uint32_t DTypeBytesOf(uint32_t dtype) { return ring::DTypeBytes(static_cast<ring::DType>(dtype)); }

}  // namespace

std::vector<std::string> ArrayKeys(const char (&joined)[kMaxArrayKeysBytes]) {
  std::vector<std::string> keys;
  const std::string all(joined, strnlen(joined, kMaxArrayKeysBytes));
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\n', at);
    if (end == std::string::npos) end = all.size();
    keys.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  return keys;
}

PrefixOpParams ParamsOf(const PrefixOp& op) {
  PrefixOpParams p;
  p.kind = static_cast<uint32_t>(op.kind);
  std::strncpy(p.axcodes, op.axcodes.c_str(), sizeof(p.axcodes) - 1);
  for (int a = 0; a < 3; ++a) p.pixdim[a] = op.pixdim[a];
  p.a_min = op.scale.a_min;
  p.a_max = op.scale.a_max;
  p.has_b_min = op.scale.b_min.has_value();
  p.has_b_max = op.scale.b_max.has_value();
  p.b_min = op.scale.b_min.value_or(0);
  p.b_max = op.scale.b_max.value_or(0);
  p.clip = op.scale.clip;
  p.nonzero = op.normalize.nonzero;
  p.channel_wise = op.normalize.channel_wise;
  p.subtrahends = static_cast<uint32_t>(
      std::min<size_t>(op.normalize.subtrahend.size(), kMaxVolumeChannels));
  p.divisors =
      static_cast<uint32_t>(std::min<size_t>(op.normalize.divisor.size(), kMaxVolumeChannels));
  std::copy_n(op.normalize.subtrahend.begin(), p.subtrahends, p.subtrahend);
  std::copy_n(op.normalize.divisor.begin(), p.divisors, p.divisor);
  for (int a = 0; a < 3; ++a) {
    p.margin[a] = op.crop.margin[a];
    p.k_divisible[a] = op.crop.k_divisible[a];
  }
  p.allow_smaller = op.crop.allow_smaller;
  return p;
}

PrefixRecipe RecipeOf(const VolumeTaskParams& p) {
  PrefixRecipe r;
  r.image_threshold = p.image_threshold;
  for (uint32_t n = 0; n < std::min(p.prefix_count, kMaxPrefixOps); ++n) {
    const PrefixOpParams& q = p.prefix[n];
    PrefixOp op;
    op.kind = static_cast<PrefixOp::Kind>(q.kind);
    op.axcodes = std::string(q.axcodes, strnlen(q.axcodes, sizeof(q.axcodes)));
    for (int a = 0; a < 3; ++a) op.pixdim[a] = q.pixdim[a];
    op.scale.a_min = q.a_min;
    op.scale.a_max = q.a_max;
    if (q.has_b_min) op.scale.b_min = q.b_min;
    if (q.has_b_max) op.scale.b_max = q.b_max;
    op.scale.clip = q.clip != 0;
    op.normalize.nonzero = q.nonzero != 0;
    op.normalize.channel_wise = q.channel_wise != 0;
    op.normalize.subtrahend.assign(q.subtrahend, q.subtrahend + std::min(q.subtrahends, kMaxVolumeChannels));
    op.normalize.divisor.assign(q.divisor, q.divisor + std::min(q.divisors, kMaxVolumeChannels));
    for (int a = 0; a < 3; ++a) {
      op.crop.margin[a] = q.margin[a];
      op.crop.k_divisible[a] = q.k_divisible[a];
    }
    op.crop.allow_smaller = q.allow_smaller != 0;
    r.ops.push_back(std::move(op));
  }
  return r;
}

uint64_t PatchImageBytes(const VolumeTaskParams& p) {
  return uint64_t{p.num_samples} * p.channels * static_cast<uint64_t>(p.patch[0] * p.patch[1] * p.patch[2]) *
         DTypeBytesOf(p.dtype);
}

uint64_t PatchLabelBytes(const VolumeTaskParams& p) {
  return uint64_t{p.num_samples} * static_cast<uint64_t>(p.patch[0] * p.patch[1] * p.patch[2]) *
         DTypeBytesOf(p.label_dtype);
}

PreparedView ViewOf(const PreparedVolume& v) {
  PreparedView w;
  w.shape = v.image.shape;
  w.channels = v.image.channels;
  w.image = v.image.values.data();
  w.label = v.has_label ? v.label.data() : nullptr;
  w.foreground = v.foreground.data();
  w.foreground_count = v.foreground.size();
  w.background = v.background.data();
  w.background_count = v.background.size();
  return w;
}

absl::Status CutPatches(const VolumeTaskParams& p, const PreparedView& v, uint64_t seed,
                        uint32_t epoch, uint64_t index, uint8_t* image_out, uint8_t* label_out,
                        const std::string& name) {
  if (v.channels != static_cast<int64_t>(p.channels)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": the volume has ", v.channels, " channel(s) and the session ",
                     p.channels, " (attach with channels=", v.channels, ")"));
  }
  const Shape3 patch = {p.patch[0], p.patch[1], p.patch[2]};
  for (int a = 0; a < 3; ++a) {
    if (v.shape[a] < patch[a]) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, ": after the deterministic transforms the volume is ", v.shape[0], " x ",
          v.shape[1], " x ", v.shape[2], ", smaller than the ", patch[0], " x ", patch[1], " x ",
          patch[2], " patch (a smaller patch, or CropForeground's margin / k_divisible)"));
    }
  }
  const uint32_t samples = std::min(p.num_samples, kMaxPatches);
  KeyedRng rng(seed, epoch, index);
  std::vector<Patch> patches;
  if (p.patch_kind == static_cast<uint32_t>(PatchKind::kPosNeg)) {
    if (v.label == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, ": RandCropByPosNegLabel needs a label volume and this sample has none"));
    }
    PosNegParams q;
    q.spatial_size = patch;
    q.pos = p.pos;
    q.neg = p.neg;
    q.num_samples = static_cast<int>(samples);
    absl::StatusOr<std::vector<Patch>> drawn =
        PosNegPatches(q, v.shape, v.foreground, v.foreground_count, v.background,
                      v.background_count, rng, name);
    if (!drawn.ok()) return drawn.status();
    patches = *std::move(drawn);
  } else {
    // RandSpatialCrop(roi_size, random_center, random_size=False): a corner
    // uniform in [0, shape - roi], or the centred one.
    for (uint32_t s = 0; s < samples; ++s) {
      Patch q;
      q.size = patch;
      for (int a = 0; a < 3; ++a) {
        const int64_t room = v.shape[a] - patch[a];
        q.start[a] = p.random_center != 0 ? static_cast<int64_t>(rng.Below(static_cast<uint64_t>(room) + 1))
                                          : room / 2;
      }
      patches.push_back(q);
    }
  }
  const int64_t voxels = patch[0] * patch[1] * patch[2];
  std::vector<float> img(static_cast<size_t>(voxels * v.channels)), img2;
  std::vector<uint8_t> lab(static_cast<size_t>(voxels)), lab2;
  const uint64_t image_bytes = PatchImageBytes(p) / std::max<uint32_t>(samples, 1);
  const uint64_t label_bytes = PatchLabelBytes(p) / std::max<uint32_t>(samples, 1);
  bool spatial = false;  // an op that moves voxels: the patch is cut out first
  for (uint32_t n = 0; n < std::min(p.augment_count, kMaxAugmentOps); ++n) {
    spatial |= p.augment[n].kind == static_cast<uint32_t>(AugmentKind::kFlip) ||
               p.augment[n].kind == static_cast<uint32_t>(AugmentKind::kRotate90) ||
               p.augment[n].kind == static_cast<uint32_t>(AugmentKind::kAffine);
  }
  const Shape3 origin = {0, 0, 0};
  for (uint32_t s = 0; s < patches.size(); ++s) {
    const Patch& q = patches[s];
    uint8_t* image_at = image_out + s * image_bytes;
    uint8_t* label_at = label_out == nullptr ? nullptr : label_out + s * label_bytes;
    if (p.augment_count == 0) {  // straight from the volume to the ring
      EmitImage(p.dtype, v.image, v.shape, v.channels, q.start, patch, image_at);
      if (label_at != nullptr && v.label != nullptr) {
        EmitLabel(p.label_dtype, v.label, v.shape, q.start, patch, label_at);
      } else if (label_at != nullptr) {
        std::memset(label_at, 0, label_bytes);
      }
      continue;
    }
    CutPatch(v.image, v.shape, v.channels, q, img.data());
    if (v.label != nullptr && (spatial || label_at != nullptr)) CutPatch(v.label, v.shape, 1, q, lab.data());
    Shape3 shape = patch;
    KeyedRng aug(seed ^ kAugmentKey, epoch, index * kMaxPatches + s);
    for (uint32_t n = 0; n < std::min(p.augment_count, kMaxAugmentOps); ++n) {
      const AugmentOpParams& o = p.augment[n];
      switch (static_cast<AugmentKind>(o.kind)) {
        case AugmentKind::kFlip: {
          const FlipDraw d = DrawRandFlip(
              aug, o.prob, {(o.axes & 1) != 0, (o.axes & 2) != 0, (o.axes & 4) != 0});
          ApplyFlip(d, shape, v.channels, img.data());
          if (v.label != nullptr) ApplyFlip(d, shape, 1, lab.data());
          break;
        }
        case AugmentKind::kRotate90: {
          const Rot90Draw d = DrawRandRotate90(aug, o.prob, o.max_k, o.a, o.b);
          if (d.k == 0) break;
          img2.resize(img.size());
          ApplyRot90(d, shape, v.channels, img.data(), img2.data());
          img.swap(img2);
          if (v.label != nullptr) {
            lab2.resize(lab.size());
            ApplyRot90(d, shape, 1, lab.data(), lab2.data());
            lab.swap(lab2);
          }
          shape = Rot90Shape(d, shape);  // the planner keeps the plane square
          break;
        }
        case AugmentKind::kAffine: {
          const AffineDraw d = DrawRandAffine(aug, o.prob, o.rotate, static_cast<int>(o.rotate_count),
                                              o.scale, static_cast<int>(o.scale_count));
          if (!d.apply) break;
          const AffinePad pad = static_cast<AffinePad>(o.pad);
          img2.resize(img.size());
          ApplyAffine(d, shape, v.channels, pad, img.data(), img2.data());
          img.swap(img2);
          if (v.label != nullptr) {
            lab2.resize(lab.size());
            ApplyAffineNearest(d, shape, pad, lab.data(), lab2.data());
            lab.swap(lab2);
          }
          break;
        }
        case AugmentKind::kScaleIntensity: {
          const IntensityDraw d = DrawUniform(aug, o.prob, o.lo, o.hi);
          if (d.apply) ApplyScaleIntensity(d.value, img.data(), static_cast<int64_t>(img.size()));
          break;
        }
        case AugmentKind::kShiftIntensity: {
          const IntensityDraw d = DrawUniform(aug, o.prob, o.lo, o.hi);
          if (d.apply) ApplyShiftIntensity(d.value, img.data(), static_cast<int64_t>(img.size()));
          break;
        }
        case AugmentKind::kGaussianNoise: {
          const NoiseDraw d = DrawRandGaussianNoise(aug, o.prob, o.mean, o.std);
          if (d.apply) ApplyGaussianNoise(d, aug, img.data(), static_cast<int64_t>(img.size()));
          break;
        }
        case AugmentKind::kAdjustContrast: {
          const IntensityDraw d = DrawUniform(aug, o.prob, o.lo, o.hi);
          if (d.apply) ApplyAdjustContrast(d.value, img.data(), static_cast<int64_t>(img.size()));
          break;
        }
      }
    }
    EmitImage(p.dtype, img.data(), shape, v.channels, origin, shape, image_at);
    if (label_at != nullptr) {
      if (v.label == nullptr) {
        std::memset(label_at, 0, label_bytes);
      } else {
        EmitLabel(p.label_dtype, lab.data(), shape, origin, shape, label_at);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::volume
