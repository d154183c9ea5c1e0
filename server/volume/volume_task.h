// What a volume session's worker does for one sample: the session's MONAI
// transforms as plain data (VolumeTaskParams, which crosses to the worker
// verbatim inside its task message), and the per-sample job after the
// deterministic prefix: the patch op's patches, each through the random
// ops, written to the ring in MONAI's layout.
//
//   pipeline/volume_pipeline.h   v1::VolumeSpec -> VolumeTaskParams (defaults, checks)
//   RecipeOf(params)             the prefix (prefix.h), run once per volume
//   CutPatches(params, prepared) num_samples patches -> [S, C, X, Y, Z] + [S, 1, X, Y, Z]
//
// Output layout: a prepared volume's voxels are stored i fastest (NIfTI's
// order); a patch reaches the trainer as a C-order tensor [C, X, Y, Z] (the
// last axis fastest), as MONAI's channel-first MetaTensor of the same
// volume is laid out. Values are converted to the output dtype at the end
// (float16 and bfloat16 round to nearest even, as torch's .to() does).
//
// Draws: the patch op's from KeyedRng(seed, epoch, index); patch s's
// random ops from KeyedRng(seed ^ kAugmentKey, epoch, index * kMaxPatches + s):
// the same patches whatever the worker, and a patch's augmentations do not
// depend on how many patches came before it.
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_VOLUME_TASK_H_
#define STOKER_SERVER_VOLUME_VOLUME_TASK_H_

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "server/volume/prefix.h"

namespace stoker::volume {

inline constexpr uint32_t kMaxPrefixOps = 8;
inline constexpr uint32_t kMaxAugmentOps = 12;
inline constexpr uint32_t kMaxVolumeChannels = 8;
inline constexpr uint32_t kMaxPatches = 64;  // num_samples' bound
inline constexpr uint64_t kAugmentKey = 0x766f6c2d61756701ULL;

// One prefix op (prefix.h's PrefixOp without its heap members).
struct PrefixOpParams {
  uint32_t kind = 0;      // PrefixOp::Kind
  char axcodes[4] = {};   // Orientation, NUL-terminated
  double pixdim[3] = {};  // Spacing
  double a_min = 0, a_max = 0, b_min = 0, b_max = 0;  // ScaleIntensityRange
  uint32_t has_b_min = 0, has_b_max = 0, clip = 0;
  uint32_t nonzero = 0, channel_wise = 0;  // NormalizeIntensity
  uint32_t subtrahends = 0, divisors = 0;
  double subtrahend[kMaxVolumeChannels] = {}, divisor[kMaxVolumeChannels] = {};
  int64_t margin[3] = {}, k_divisible[3] = {1, 1, 1};  // CropForeground
  uint32_t allow_smaller = 0;
};

enum class AugmentKind : uint32_t {
  kFlip = 1,           // RandFlip(prob, spatial_axis: axes)
  kRotate90 = 2,       // RandRotate90(prob, max_k, spatial_axes: a, b)
  kScaleIntensity = 3, // RandScaleIntensity(factors: lo, hi, prob)
  kShiftIntensity = 4, // RandShiftIntensity(offsets: lo, hi, prob)
  kGaussianNoise = 5,  // RandGaussianNoise(prob, mean, std)
  kAdjustContrast = 6, // RandAdjustContrast(prob, gamma: lo, hi)
  kAffine = 7,         // RandAffine(prob, rotate_range, scale_range, padding_mode)
};

struct AugmentOpParams {
  uint32_t kind = 0;  // AugmentKind
  uint32_t axes = 0;  // kFlip: bit a flips spatial axis a
  double prob = 0;
  double lo = 0, hi = 0;     // the uniform draw's range
  double mean = 0, std = 0;  // kGaussianNoise
  int32_t max_k = 3, a = 0, b = 1;  // kRotate90
  uint32_t rotate_count = 0, scale_count = 0;  // kAffine: ranges given, axis by axis
  double rotate[3] = {}, scale[3] = {};
  uint32_t pad = 0;                            // kAffine: AffinePad
};

enum class PatchKind : uint32_t {
  kPosNeg = 1,        // RandCropByPosNegLabel
  kSpatialCrop = 2,   // RandSpatialCrop (random_size=False)
};

inline constexpr size_t kMaxArrayKeysBytes = 256;

struct VolumeTaskParams {
  uint32_t prefix_count = 0;
  PrefixOpParams prefix[kMaxPrefixOps];
  double image_threshold = 0;
  uint32_t patch_kind = 0;  // PatchKind
  int64_t patch[3] = {};    // spatial_size / roi_size
  double pos = 1, neg = 1;
  uint32_t num_samples = 1;
  uint32_t random_center = 1;
  uint32_t augment_count = 0;
  AugmentOpParams augment[kMaxAugmentOps];
  uint32_t channels = 1;
  double spacing[3] = {0, 0, 0};  // for files without one (.npy); zeros: 1 mm
  uint32_t dtype = 0;        // ring::DType: kFloat32, kFloat16 or kBFloat16
  uint32_t label_dtype = 0;  // ring::DType: kUint8 or kInt64
  uint32_t reserved = 0;
  // The arrays to read (VolumeSpec.array_keys, label_array_keys), joined by
  // '\n', NUL-terminated; "": all. ArrayKeys() splits them.
  char array_keys[kMaxArrayKeysBytes] = {};
  char label_array_keys[kMaxArrayKeysBytes] = {};
  uint64_t recipe_hash = 0;  // RecipeHash(RecipeOf(*this)): the cache entries' key part
};
static_assert(std::is_trivially_copyable_v<VolumeTaskParams>);

// The keys of VolumeTaskParams::array_keys or label_array_keys.
std::vector<std::string> ArrayKeys(const char (&joined)[kMaxArrayKeysBytes]);

PrefixOpParams ParamsOf(const PrefixOp& op);
PrefixRecipe RecipeOf(const VolumeTaskParams& p);

// Bytes of a sample's "volume" field (num_samples x channels x patch, of
// dtype) and "volume_label" field (num_samples x patch, of label_dtype).
uint64_t PatchImageBytes(const VolumeTaskParams& p);
uint64_t PatchLabelBytes(const VolumeTaskParams& p);

// A prepared volume (a MappedEntry's or a PreparedVolume's arrays).
struct PreparedView {
  std::array<int64_t, 3> shape{};
  int64_t channels = 0;
  const float* image = nullptr;
  const uint8_t* label = nullptr;  // nullptr without a label
  const uint32_t* foreground = nullptr;
  uint64_t foreground_count = 0;
  const uint32_t* background = nullptr;
  uint64_t background_count = 0;
};
PreparedView ViewOf(const PreparedVolume& v);

// The sample's patches into `image_out` (PatchImageBytes) and, when
// `label_out` is not null, `label_out` (PatchLabelBytes; zeros where the
// volume has no label). Errors name `name`: FAILED_PRECONDITION for a
// volume of another channel count than params.channels, smaller than the
// patch, or (RandCropByPosNegLabel) without a label or with neither
// foreground nor background.
absl::Status CutPatches(const VolumeTaskParams& p, const PreparedView& v, uint64_t seed,
                        uint32_t epoch, uint64_t index, uint8_t* image_out, uint8_t* label_out,
                        const std::string& name);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_VOLUME_TASK_H_
