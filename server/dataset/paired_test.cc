// The paired-folders indexer: VOC's and Cityscapes' images and masks
// matched by path and suffix, what is left out and why, the identity.

#include <catch2/catch.hpp>
#include <string>

#include "server/dataset/dataset.h"
#include "testing/dataset_test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

TEST_CASE("paired folders: VOC's and Cityscapes' layouts, by path", "[dataset][paired][cache]") {
  TempDir tmp;
  // VOC: JPEGImages/<id>.jpg with SegmentationClass/<id>.png, not every one.
  tmp.Write("root/voc/JPEGImages/2007_000032.jpg");
  tmp.Write("root/voc/JPEGImages/2007_000039.jpg");
  tmp.Write("root/voc/JPEGImages/2008_000001.JPG");
  tmp.Write("root/voc/JPEGImages/notes.txt");
  tmp.Write("root/voc/SegmentationClass/2007_000032.png");
  tmp.Write("root/voc/SegmentationClass/2008_000001.png");
  // Cityscapes: city folders, suffixes that differ.
  tmp.Write("root/cs/leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png");
  tmp.Write("root/cs/leftImg8bit/train/bochum/bochum_000000_000313_leftImg8bit.png");
  tmp.Write("root/cs/gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png");
  tmp.Write("root/cs/gtFine/train/aachen/aachen_000000_000019_gtFine_color.png");
  tmp.Write("root/cs/gtFine/train/bochum/bochum_000000_000313_gtFine_labelIds.png");
  auto root = DataRoot::Open(tmp / "root");
  REQUIRE(root.ok());
  IndexOptions voc;
  voc.masks = "voc/SegmentationClass";
  voc.cache_dir = tmp / "cache";
  auto v = Dataset::Open(**root, "voc/JPEGImages", DatasetFormat::kAuto, voc);
  REQUIRE(v.ok());
  CHECK((*v)->format() == DatasetFormat::kPairedFolders);
  REQUIRE((*v)->size() == 2);
  CHECK((*v)->path(0) == "voc/JPEGImages/2007_000032.jpg");
  CHECK((*v)->mask_path(0) == "voc/SegmentationClass/2007_000032.png");
  CHECK((*v)->path(1) == "voc/JPEGImages/2008_000001.JPG");
  CHECK((*v)->mask_path(1) == "voc/SegmentationClass/2008_000001.png");
  CHECK((*v)->label(0) == -1);
  bool warned = false;
  for (const auto& w : (*v)->warnings()) {
    warned |= w.find("1 image(s)") != std::string::npos &&
              w.find("SegmentationClass/2007_000039.png") == std::string::npos &&
              w.find("2007_000039.png") != std::string::npos;
  }
  CHECK(warned);

  IndexOptions cs;
  cs.masks = "cs/gtFine/train";
  cs.image_suffix = "_leftImg8bit";
  cs.mask_suffix = "_gtFine_labelIds";
  auto c = Dataset::Open(**root, "cs/leftImg8bit/train", DatasetFormat::kPairedFolders, cs);
  REQUIRE(c.ok());
  REQUIRE((*c)->size() == 2);
  CHECK((*c)->path(1) == "cs/leftImg8bit/train/bochum/bochum_000000_000313_leftImg8bit.png");
  CHECK((*c)->mask_path(0) == "cs/gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png");

  // Other suffixes are another dataset; none paired says how pairs are made.
  cs.mask_suffix = "_gtFine_instanceIds";
  auto none = Dataset::Open(**root, "cs/leftImg8bit/train", DatasetFormat::kPairedFolders, cs);
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(none.status().message()).find("_gtFine_instanceIds.png") != std::string::npos);
  IndexOptions no_masks;
  CHECK(Dataset::Open(**root, "voc/JPEGImages", DatasetFormat::kPairedFolders, no_masks)
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
  IndexOptions escape;
  escape.masks = "../..";
  CHECK(Dataset::Open(**root, "voc/JPEGImages", DatasetFormat::kAuto, escape).status().code() ==
        absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace stoker
