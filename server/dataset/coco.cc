// The COCO indexer: an instances JSON over an images folder, entry for entry
// as torchvision's CocoDetection lists it (see Dataset::Open, kCoco).

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "server/dataset/beneath.h"
#include "server/dataset/coco.pb.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

// class_names() is indexed by category id: ids above this leave it empty.
constexpr int64_t kMaxCategoryId = 1 << 20;

}  // namespace

std::string QuoteNonFinite(std::string text) {
  static constexpr std::string_view kWords[] = {"NaN", "Infinity", "-Infinity"};
  std::string out;
  bool in_string = false;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != 'N' && c != 'I' && c != '-') continue;
    for (std::string_view w : kWords) {
      if (std::string_view(text).substr(i, w.size()) == w) {
        out.append(text, copied, i - copied);
        out.push_back('"');
        out.append(w);
        out.push_back('"');
        i += w.size() - 1;
        copied = i + 1;
        break;
      }
    }
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

absl::StatusOr<std::string> ReadJsonFile(const DataRoot& root, const std::string& file,
                                         std::string_view what, DatasetIndex* out) {
  absl::StatusOr<int> opened =
      OpenBeneathImpl(root.fd(), file, OpenKind::kRegularFile, /*use_openat2=*/true);
  if (!opened.ok()) return opened.status();
  UniqueFd fd(*opened);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(Cat("fstat ", what, " '", file, "'"), errno);
  if (static_cast<uint64_t>(st.st_size) > kMaxJsonFileBytes) {
    return absl::InvalidArgumentError(Cat(what, " '", file, "' are ", st.st_size,
                                          " bytes, over the ", kMaxJsonFileBytes, " read"));
  }
  out->Watch(file, fd.get(), /*is_dir=*/false);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  absl::StatusOr<size_t> have =
      ReadFullyAt(fd.get(), 0, text.data(), text.size(), Cat("read ", what, " '", file, "'"));
  if (!have.ok()) return have.status();
  text.resize(*have);
  return text;
}

absl::Status IndexCoco(const DataRoot& root, const std::string& images,
                       const std::string& annotations, DatasetIndex* out) {
  absl::StatusOr<std::string> text = ReadJsonFile(root, annotations, "annotations", out);
  if (!text.ok()) return text.status();
  coco::Instances doc;
  {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;
    const std::string json = QuoteNonFinite(*std::move(text));
    const auto st = google::protobuf::util::JsonStringToMessage(json, &doc, options);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          Cat("annotations '", annotations, "' are not a COCO instances file: ",
              std::string(st.message().data(), st.message().size())));
    }
  }
  // Images by ascending id (CocoDetection: sorted(coco.imgs.keys())); a
  // repeated id keeps its last file_name, as pycocotools' dict does.
  std::map<int64_t, int> by_id;  // image id -> index in doc.images()
  for (int i = 0; i < doc.images_size(); ++i) by_id[doc.images(i).id()] = i;
  // Each image's annotations in file order.
  std::map<int64_t, std::vector<int>> anns;
  uint64_t orphans = 0;
  for (int a = 0; a < doc.annotations_size(); ++a) {
    const int64_t image = doc.annotations(a).image_id();
    if (by_id.count(image) == 0) {
      ++orphans;
      continue;
    }
    anns[image].push_back(a);
  }
  if (orphans != 0) {
    out->warnings.push_back(Cat(orphans, " annotation(s) in '", annotations,
                                "' name no image of the file; skipped"));
  }
  out->EnableBoxes();
  out->labels.reserve(by_id.size());
  for (const auto& [id, index] : by_id) {
    const std::string& file_name = doc.images(index).file_name();
    if (file_name.empty() || file_name.find('\0') != std::string::npos ||
        file_name.front() == '/' || !AppendNormalized(images, file_name, &out->paths).ok()) {
      return absl::PermissionDeniedError(
          Cat("annotations '", annotations, "': image ", id, "'s file_name '", file_name,
              "' is empty, absolute or leaves the images folder"));
    }
    auto it = anns.find(id);
    if (it != anns.end()) {
      for (int a : it->second) {
        const coco::Annotation& ann = doc.annotations(a);
        float xyxy[4] = {NAN, NAN, NAN, NAN};  // not 4 numbers: fails its sample
        if (ann.bbox_size() == 4) {
          xyxy[0] = static_cast<float>(ann.bbox(0));
          xyxy[1] = static_cast<float>(ann.bbox(1));
          xyxy[2] = static_cast<float>(ann.bbox(0) + ann.bbox(2));
          xyxy[3] = static_cast<float>(ann.bbox(1) + ann.bbox(3));
        }
        out->AddBox(xyxy, ann.category_id(), ann.iscrowd() != 0 ? 1 : 0);
      }
    }
    out->EndEntry(id);  // the label: the image's id (the reference's target["image_id"])
  }
  int64_t most = -1;
  for (const coco::Category& c : doc.categories()) most = std::max(most, c.id());
  if (most > kMaxCategoryId) {
    out->warnings.push_back(Cat("a category id of ", most, " in '", annotations,
                                "' is over ", kMaxCategoryId, ": no class names"));
  } else if (most >= 0) {
    out->class_names.assign(static_cast<size_t>(most) + 1, "");
    for (const coco::Category& c : doc.categories()) {
      if (c.id() >= 0) out->class_names[static_cast<size_t>(c.id())] = c.name();
    }
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
