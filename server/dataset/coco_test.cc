// The COCO indexer: CocoDetection's entries (images by id), each image's
// boxes from its annotations (XYXY, category ids, crowd flags), bad boxes
// kept for their samples to fail, Python's bare NaN, the cache, and what
// refuses the file.

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "server/dataset/dataset.h"
#include "testing/dataset_test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

constexpr char kInstances[] = R"({
  "info": {"description": "test"},
  "images": [
    {"id": 42, "file_name": "b.jpg", "width": 64, "height": 48},
    {"id": 7, "file_name": "a.jpg", "width": 64, "height": 48},
    {"id": 9, "file_name": "sub/none.jpg", "width": 64, "height": 48}
  ],
  "annotations": [
    {"id": 1, "image_id": 42, "category_id": 18, "bbox": [1.5, 2, 10, 20], "iscrowd": 0,
     "segmentation": [[1, 2, 3, 4, 5, 6]], "area": 200.0},
    {"id": 2, "image_id": 7, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 1,
     "segmentation": {"counts": [1, 2], "size": [48, 64]}},
    {"id": 3, "image_id": 42, "category_id": 3, "bbox": [4, 4, -2, 3]},
    {"id": 4, "image_id": 42, "category_id": 3, "bbox": [NaN, 4, 2, 3]},
    {"id": 5, "image_id": 42, "category_id": 3, "bbox": [1, 2, 3]},
    {"id": 6, "image_id": 1000, "category_id": 3, "bbox": [1, 2, 3, 4]}
  ],
  "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"},
                 {"id": 18, "name": "dog"}]
})";

std::vector<float> Boxes(const Dataset& d, uint64_t i) {
  return std::vector<float>(d.box_xyxy(i), d.box_xyxy(i) + 4 * d.box_count(i));
}

TEST_CASE("COCO: images by id, boxes XYXY with category ids and crowd flags",
          "[dataset][coco][cache]") {
  TempDir tmp;
  tmp.Write("root/coco/annotations/instances.json", kInstances);
  tmp.Write("root/coco/images/a.jpg");
  for (const char* dir : {"root/coco/annotations", "root/coco/images", "root/coco", "root"}) {
    std::filesystem::last_write_time(
        tmp / dir, std::filesystem::file_time_type::clock::now() - std::chrono::seconds(10));
  }
  std::filesystem::last_write_time(
      tmp / "root/coco/annotations/instances.json",
      std::filesystem::file_time_type::clock::now() - std::chrono::seconds(10));
  auto root = DataRoot::Open(tmp / "root");
  REQUIRE(root.ok());
  IndexOptions io;
  io.annotations = "coco/annotations/instances.json";
  io.cache_dir = tmp / "cache";
  for (int pass = 0; pass < 2; ++pass) {
    // kAuto with annotations is COCO.
    auto opened = Dataset::Open(**root, "coco/images", DatasetFormat::kAuto, io);
    REQUIRE(opened.ok());
    const Dataset& d = **opened;
    CHECK(d.from_cache() == (pass == 1));
    CHECK(d.format() == DatasetFormat::kCoco);
    REQUIRE(d.size() == 3);
    CHECK(d.path(0) == "coco/images/a.jpg");         // id 7
    CHECK(d.path(1) == "coco/images/sub/none.jpg");  // id 9
    CHECK(d.path(2) == "coco/images/b.jpg");         // id 42, first in the file
    CHECK(d.label(0) == 7);  // the image id
    CHECK(d.label(2) == 42);
    REQUIRE(d.has_boxes());
    CHECK(d.max_boxes() == 4);
    CHECK(d.box_count(0) == 1);
    CHECK(Boxes(d, 0) == std::vector<float>{0, 0, 5, 5});
    CHECK(d.box_labels(0)[0] == 1);
    CHECK(d.box_flags(0)[0] == 1);
    CHECK(d.box_count(1) == 0);  // sub/none.jpg: no annotation, a missing file (a sample failure)
    REQUIRE(d.box_count(2) == 4);
    const std::vector<float> b = Boxes(d, 2);
    CHECK(std::vector<float>(b.begin(), b.begin() + 8) ==
          std::vector<float>{1.5f, 2, 11.5f, 22, 4, 4, 2, 7});  // the second: negative width
    CHECK(std::isnan(b[8]));   // NaN x: kept, fails its sample when read
    CHECK(std::isnan(b[12]));  // 3 numbers: kept as NaN
    CHECK(d.box_labels(2)[0] == 18);
    CHECK(d.box_flags(2)[0] == 0);
    REQUIRE(d.class_names().size() == 19);
    CHECK(d.class_names()[1] == "person");
    CHECK(d.class_names()[18] == "dog");
    CHECK(d.class_names()[2].empty());
    if (pass == 0) {
      bool warned = false;
      for (const auto& w : d.warnings()) warned |= w.find("1 annotation(s)") != std::string::npos;
      CHECK(warned);
    }
  }
  // Another annotations file over the same folder is another dataset.
  tmp.Write("root/coco/annotations/small.json",
            R"({"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": []})");
  io.annotations = "coco/annotations/small.json";
  auto small = Dataset::Open(**root, "coco/images", DatasetFormat::kCoco, io);
  REQUIRE(small.ok());
  CHECK((*small)->size() == 1);
  CHECK((*small)->has_boxes());
  CHECK((*small)->max_boxes() == 0);
}

TEST_CASE("COCO: what refuses the file says why", "[dataset][coco]") {
  TempDir tmp;
  tmp.Write("root/images/a.jpg");
  auto root = DataRoot::Open(tmp / "root");
  REQUIRE(root.ok());
  struct Case {
    std::string json;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"{", absl::StatusCode::kInvalidArgument, "not a COCO instances file"},
      {R"({"images": 3})", absl::StatusCode::kInvalidArgument, "not a COCO instances file"},
      {R"({"images": [{"id": 1, "file_name": "../../etc/passwd"}]})",
       absl::StatusCode::kPermissionDenied, "leaves the images folder"},
      {R"({"images": [{"id": 1, "file_name": "/etc/passwd"}]})",
       absl::StatusCode::kPermissionDenied, "absolute"},
      {R"({"images": []})", absl::StatusCode::kFailedPrecondition, "list no image"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "bad" + std::to_string(i) + ".json";
    tmp.Write("root/" + name, cases[i].json);
    IndexOptions io;
    io.annotations = name;
    auto st = Dataset::Open(**root, "images", DatasetFormat::kCoco, io).status();
    INFO("case " << i << ": " << st.ToString());
    CHECK(st.code() == cases[i].code);
    CHECK(std::string(st.message()).find(cases[i].says) != std::string::npos);
  }
  IndexOptions none;
  CHECK(Dataset::Open(**root, "images", DatasetFormat::kCoco, none).status().code() ==
        absl::StatusCode::kInvalidArgument);
  IndexOptions io;
  io.annotations = "bad0.json";
  CHECK(Dataset::Open(**root, "bad0.json", DatasetFormat::kCoco, io).status().code() ==
        absl::StatusCode::kInvalidArgument);  // the images "folder" is a file
}

}  // namespace
}  // namespace stoker
