// A volume session's pipeline (volume_pipeline.h): MONAI's defaults, the
// order rules, the checks that name the fix, and the effective spec. Pure.

#include "pipeline/volume_pipeline.h"

#include <catch2/catch.hpp>
#include <string>

#include "stoker/ring_layout.h"

namespace stoker {
namespace {

using Catch::Matchers::Contains;

VolumePlan Plan(const std::string& json) {
  auto spec = VolumeSpecFromJson(json);
  INFO(json << ": " << spec.status().ToString());
  REQUIRE(spec.ok());
  auto plan = PlanVolumePipeline(*spec);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  return *plan;
}

std::string Error(const std::string& json) {
  auto spec = VolumeSpecFromJson(json);
  if (!spec.ok()) return std::string(spec.status().message());
  auto plan = PlanVolumePipeline(*spec);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

constexpr char kSpleen[] = R"({"ops": [
  {"Orientation": {"axcodes": "RAS"}},
  {"Spacing": {"pixdim": [1.5, 1.5, 2.0]}},
  {"ScaleIntensityRange": {"a_min": -57, "a_max": 164, "b_min": 0, "b_max": 1, "clip": true}},
  {"CropForeground": {}},
  {"RandCropByPosNegLabel": {"spatial_size": [96, 96, 96], "pos": 1, "neg": 1, "num_samples": 4}},
  {"RandFlip": {"prob": 0.5, "spatial_axis": [0]}},
  {"RandRotate90": {"prob": 0.1, "max_k": 3}},
  {"RandShiftIntensity": {"offsets": 0.1, "prob": 0.5}}]})";

TEST_CASE("the spleen recipe plans with MONAI's defaults filled in") {
  const VolumePlan p = Plan(kSpleen);
  CHECK(p.params.prefix_count == 4);
  CHECK(p.params.prefix[1].pixdim[2] == 2.0);
  CHECK(p.params.prefix[2].clip == 1);
  CHECK(p.params.patch_kind == static_cast<uint32_t>(volume::PatchKind::kPosNeg));
  CHECK(p.params.num_samples == 4);
  CHECK(p.params.patch[0] == 96);
  CHECK(p.params.augment_count == 3);
  CHECK(p.params.augment[0].axes == 1u);
  CHECK(p.params.augment[1].a == 0);
  CHECK(p.params.augment[1].b == 1);
  CHECK(p.params.augment[2].lo == -0.1);
  CHECK(p.params.augment[2].hi == 0.1);
  CHECK(p.params.dtype == ring::kFloat32);
  CHECK(p.params.label_dtype == ring::kUint8);
  CHECK(p.params.channels == 1);
  CHECK(p.params.recipe_hash == volume::RecipeHash(volume::RecipeOf(p.params)));
  CHECK(volume::PatchImageBytes(p.params) == 4ull * 96 * 96 * 96 * 4);
  CHECK(volume::PatchLabelBytes(p.params) == 4ull * 96 * 96 * 96);
  // The effective spec holds every default, and plans to the same params.
  CHECK(p.effective.ops(3).crop_foreground().margin_size() == 3);
  CHECK(p.effective.ops(3).crop_foreground().k_divisible(2) == 1);
  CHECK(p.effective.dtype() == "float32");
  const VolumePlan again = Plan(VolumeSpecToJson(p.effective));
  CHECK(again.params.recipe_hash == p.params.recipe_hash);
  CHECK(VolumeSpecToJson(again.effective) == VolumeSpecToJson(p.effective));
}

TEST_CASE("MONAI's defaults for the random ops") {
  const VolumePlan p = Plan(R"({"ops": [{"RandSpatialCrop": {"roi_size": 32}},
      {"RandFlip": {}}, {"RandGaussianNoise": {}}, {"RandAdjustContrast": {}},
      {"RandScaleIntensity": {"factors": [-0.2, 0.3]}}]})");
  CHECK(p.params.patch[2] == 32);
  CHECK(p.params.random_center == 1);
  CHECK(p.params.augment[0].prob == 0.1);
  CHECK(p.params.augment[0].axes == 7u);
  CHECK(p.params.augment[1].std == 0.1);
  CHECK(p.params.augment[2].lo == 0.5);
  CHECK(p.params.augment[2].hi == 4.5);
  CHECK(p.params.augment[3].lo == -0.2);
  CHECK(p.params.augment[3].hi == 0.3);
  // A recipe's hash is its prefix's: the random ops do not change entries.
  CHECK(p.params.recipe_hash == Plan(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}]})").params.recipe_hash);
  CHECK(p.params.recipe_hash != Plan(R"({"ops": [{"Orientation": {}},
      {"RandSpatialCrop": {"roi_size": 8}}]})").params.recipe_hash);
  // The .npy spacing changes what Spacing makes of a file: another key.
  const VolumePlan npy = Plan(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}], "spacing": [1, 1, 2.5]})");
  CHECK(npy.params.spacing[2] == 2.5);
  CHECK(npy.params.recipe_hash != p.params.recipe_hash);
}

TEST_CASE("order rules and bad values name the fix") {
  CHECK_THAT(Error(R"({"ops": [{"Orientation": {}}]})"), Contains("no patch op"));
  CHECK_THAT(Error(R"({"ops": [{"RandFlip": {}}, {"RandSpatialCrop": {"roi_size": 8}}]})"),
             Contains("ops[0] RandFlip: a random transform before the patch op"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}, {"Spacing": {"pixdim": 1}}]})"),
             Contains("ops[1] Spacing: a deterministic transform after the patch op"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}},
      {"RandCropByPosNegLabel": {"spatial_size": 8}}]})"), Contains("a second patch op"));
  CHECK_THAT(Error(R"({"ops": [{"Spacing": {"pixdim": [1, 2]}}, {"RandSpatialCrop": {"roi_size": 8}}]})"),
             Contains("pixdim takes 1 or 3 values"));
  CHECK_THAT(Error(R"({"ops": [{"Spacing": {"pixdim": [1, 0, 2]}}, {"RandSpatialCrop": {"roi_size": 8}}]})"),
             Contains("pixdim 0"));
  CHECK_THAT(Error(R"({"ops": [{"Orientation": {"axcodes": "RRS"}}, {"RandSpatialCrop": {"roi_size": 8}}]})"),
             Contains("axcodes 'RRS'"));
  CHECK_THAT(Error(R"({"ops": [{"RandCropByPosNegLabel": {"spatial_size": 8, "pos": 0, "neg": 0}}]})"),
             Contains("not both 0"));
  CHECK_THAT(Error(R"({"ops": [{"RandCropByPosNegLabel": {"spatial_size": 8, "num_samples": 65}}]})"),
             Contains("at most 64"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": [8, 16, 8]}},
      {"RandRotate90": {"spatial_axes": [0, 1]}}]})"), Contains("a quarter turn would change its shape"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}, {"RandFlip": {"prob": 1.5}}]})"),
             Contains("prob 1.5 must be in [0, 1]"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}, {"RandFlip": {"spatial_axis": [3]}}]})"),
             Contains("spatial_axis 3"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}], "dtype": "float64"})"),
             Contains("dtype 'float64'"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}], "channels": 9})"),
             Contains("channels 9"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 4096}}]})"), Contains("over the"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}], "spacing": [1, 2]})"),
             Contains("spacing: 3 values"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}}], "spacing": [1, 0, 2]})"),
             Contains("spacing: each > 0"));
  CHECK_THAT(Error(R"({"ops": [{"Resize": {}}]})"), Contains("not a VolumeSpec"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}},
      {"RandAffine": {"padding_mode": "wrap"}}]})"), Contains("ops[1] RandAffine: padding_mode 'wrap'"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}},
      {"RandAffine": {"scale_range": [1.5]}}]})"), Contains("scale_range: each below 1"));
  CHECK_THAT(Error(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}},
      {"RandAffine": {"rotate_range": [1, 2, 3, 4]}}]})"), Contains("at most 3"));
}

TEST_CASE("RandAffine: MONAI's defaults, ranges axis by axis") {
  const VolumePlan p = Plan(R"({"ops": [{"RandSpatialCrop": {"roi_size": 8}},
      {"RandAffine": {"prob": 0.5, "rotate_range": [0, 0, 0.26], "scale_range": [0.1, -0.1]}},
      {"RandAffine": {}}]})");
  const volume::AugmentOpParams& a = p.params.augment[0];
  CHECK(a.kind == static_cast<uint32_t>(volume::AugmentKind::kAffine));
  CHECK(a.prob == 0.5);
  CHECK(a.rotate_count == 3);
  CHECK(a.rotate[2] == 0.26);
  CHECK(a.scale_count == 2);
  CHECK(a.scale[1] == 0.1);
  CHECK(a.pad == 0);  // reflection
  CHECK(p.params.augment[1].prob == 0.1);
  CHECK(p.params.augment[1].rotate_count == 0);
  CHECK(p.effective.ops(2).rand_affine().padding_mode() == "reflection");
}

}  // namespace
}  // namespace stoker
