// The deterministic prefix as one recipe: the ops a sample's volumes go
// through once (before its random patches), applied to its image and its
// label together, as MONAI's dictionary transforms apply them to both keys:
//
//   Orientation          both
//   Spacing              the image trilinear, the label nearest
//   ScaleIntensityRange  the image
//   NormalizeIntensity   the image
//   CropForeground       the box from the image (source_key="image"), both cropped
//
// then the label's foreground and background voxel lists (volume_cache.h,
// with the recipe's image_threshold). Prepare's output is what a cache
// entry holds; RecipeHash is the part of its key that names the recipe.
//
// A sample's image may come as several files (BraTS' four modalities as
// four volumes): they become its channels, and must agree in shape and
// affine; a label must agree with its image (shape, and affine within
// MONAI's AFFINE_TOL, 1e-3): else DATA_LOSS naming both.
//
// Thread-safe: pure functions.

#ifndef STOKER_SERVER_VOLUME_PREFIX_H_
#define STOKER_SERVER_VOLUME_PREFIX_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/volume/crop_foreground.h"
#include "server/volume/intensity.h"
#include "server/volume/volume.h"
#include "server/volume/volume_cache.h"

namespace stoker::volume {

struct PrefixOp {
  enum class Kind { kOrientation, kSpacing, kScaleIntensityRange, kNormalizeIntensity,
                    kCropForeground };
  Kind kind = Kind::kOrientation;
  std::string axcodes = "RAS";                       // Orientation
  std::array<double, 3> pixdim = {1, 1, 1};          // Spacing
  ScaleIntensityRangeParams scale;                   // ScaleIntensityRange
  NormalizeIntensityParams normalize;                // NormalizeIntensity
  CropForegroundParams crop;                         // CropForeground
};

struct PrefixRecipe {
  std::vector<PrefixOp> ops;
  double image_threshold = 0;  // the background list's (RandCropByPosNegLabel's)
};

// One op from the tools' text, "Name[:args]" (stoker-volume-tool's --op):
// Orientation:RAS, Spacing:1.5,1.5,2, ScaleIntensityRange:-57,164,0,1,clip,
// NormalizeIntensity:nonzero,channel_wise, CropForeground:MARGIN,allow_smaller,k=K.
// INVALID_ARGUMENT naming the op and what it takes.
absl::StatusOr<PrefixOp> ParsePrefixOp(const std::string& text);

// A stable hash of everything in the recipe that changes Prepare's output.
uint64_t RecipeHash(const PrefixRecipe& r);

// The sample through the recipe. `image` holds one or more volumes (its
// channels, in order), `label` none or one.
absl::StatusOr<PreparedVolume> Prepare(const std::vector<Volume>& image,
                                       const std::optional<Volume>& label,
                                       const PrefixRecipe& recipe, const std::string& name);

}  // namespace stoker::volume

#endif  // STOKER_SERVER_VOLUME_PREFIX_H_
