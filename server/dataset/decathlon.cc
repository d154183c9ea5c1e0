// The Decathlon indexer: a Medical Segmentation Decathlon dataset.json's
// "training" list (see Dataset::Open, kDecathlon).

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"

namespace stoker {
namespace dataset_internal {
namespace {

// The most files an image's channels may be given as (BraTS: 4).
constexpr int kMaxChannelFiles = 16;

// A file the json names (relative to its folder `dir`, "./" or not),
// normalized beneath the root and appended to `out`; an image's list of
// files (its channels) appended each after a NUL (Dataset::Open, kDecathlon).
absl::Status AppendFile(std::string_view json, std::string_view dir, size_t entry,
                        std::string_view key, const google::protobuf::Value& v, std::string* out) {
  if (v.kind_case() == google::protobuf::Value::kListValue) {
    const auto& files = v.list_value().values();
    if (key != "image" || files.empty() || files.size() > kMaxChannelFiles) {
      return absl::InvalidArgumentError(Cat(
          "dataset.json '", json, "': training[", entry, "].", key, " is a list of ", files.size(),
          " files: ", key != "image" ? "a label is one file"
                                     : Cat("an image's channels are 1 to ", kMaxChannelFiles,
                                           " files")));
    }
    for (int k = 0; k < files.size(); ++k) {
      if (k != 0) out->push_back('\0');
      if (files[k].kind_case() == google::protobuf::Value::kListValue) {
        return absl::InvalidArgumentError(Cat("dataset.json '", json, "': training[", entry, "].",
                                              key, "[", k, "] is a list, not a file name"));
      }
      if (absl::Status s = AppendFile(json, dir, entry, key, files[k], out); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (v.kind_case() != google::protobuf::Value::kStringValue || v.string_value().empty() ||
      v.string_value().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        Cat("dataset.json '", json, "': training[", entry, "].", key, " is not a file name"));
  }
  const std::string& file = v.string_value();
  if (file.front() == '/' || !AppendNormalized(dir, file, out).ok()) {
    return absl::PermissionDeniedError(Cat("dataset.json '", json, "': training[", entry, "].",
                                           key, " '", file, "' is absolute or leaves the data root"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IndexDecathlon(const DataRoot& root, const std::string& file, DatasetIndex* out) {
  absl::StatusOr<std::string> text = ReadJsonFile(root, file, "dataset.json", out);
  if (!text.ok()) return text.status();
  google::protobuf::Struct doc;
  const auto parsed = google::protobuf::util::JsonStringToMessage(QuoteNonFinite(*std::move(text)), &doc);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(Cat("dataset.json '", file, "' is not a JSON object: ",
                                          std::string(parsed.message().data(), parsed.message().size())));
  }
  const auto training = doc.fields().find("training");
  if (training == doc.fields().end() ||
      training->second.kind_case() != google::protobuf::Value::kListValue) {
    return absl::InvalidArgumentError(
        Cat("dataset.json '", file, "' has no \"training\" list (the Decathlon's layout: "
            "\"training\": [{\"image\": ..., \"label\": ...}])"));
  }
  const size_t slash = file.rfind('/');
  const std::string_view dir =
      slash == std::string::npos ? std::string_view() : std::string_view(file).substr(0, slash);
  const auto& entries = training->second.list_value().values();
  for (int i = 0; i < entries.size(); ++i) {
    const google::protobuf::Value& e = entries.Get(i);
    const auto image = e.struct_value().fields().find("image");
    if (e.kind_case() != google::protobuf::Value::kStructValue ||
        image == e.struct_value().fields().end()) {
      return absl::InvalidArgumentError(
          Cat("dataset.json '", file, "': training[", i, "] has no \"image\""));
    }
    if (absl::Status s = AppendFile(file, dir, i, "image", image->second, &out->paths); !s.ok()) {
      return s;
    }
    const auto label = e.struct_value().fields().find("label");
    if (label != e.struct_value().fields().end()) {
      std::string mask;
      if (absl::Status s = AppendFile(file, dir, i, "label", label->second, &mask); !s.ok()) {
        return s;
      }
      out->SetMask(mask);
    } else if (!out->mask_offsets.empty()) {
      out->SetMask("");  // an entry without a label among labelled ones fails as a sample
    }
    out->EndEntry(-1);
  }
  const auto labels = doc.fields().find("labels");
  if (labels != doc.fields().end() &&
      labels->second.kind_case() == google::protobuf::Value::kStructValue) {
    for (const auto& [key, name] : labels->second.struct_value().fields()) {
      uint32_t k = 0;
      if (!absl::SimpleAtoi(key, &k) || k > 255 ||
          name.kind_case() != google::protobuf::Value::kStringValue) {
        continue;  // a label volume's classes are uint8
      }
      if (out->class_names.size() <= k) out->class_names.resize(k + 1);
      out->class_names[k] = name.string_value();
    }
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
