// The WebDataset indexer: tar shards whose members are grouped into samples
// by key ("dir/n0042.jpg" and "dir/n0042.cls" are one sample, key
// "dir/n0042"), as the webdataset library groups them.
//
// Only the 512-byte headers are read (pread at each member's offset), plus
// the small label members; the images are read later, by the workers, at the
// offsets recorded here. Header forms understood: POSIX ustar (name with
// prefix), GNU long names ('L') and pax extended headers ('x', its "path"
// record); numeric fields in octal or GNU base-256. Global pax headers,
// directories, links and other special members are skipped.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

constexpr uint64_t kBlock = 512;
// Label members ("cls", "json") larger than this are not read.
constexpr uint64_t kMaxLabelBytes = 1 << 16;
// A .json member with boxes may be longer (40 bytes a box), up to this.
constexpr uint64_t kMaxJsonBytes = 16 << 20;
// Long-name and pax records larger than this end the shard's index.
constexpr uint64_t kMaxMetaBytes = 1 << 20;
// A member size over this is a damaged header: it ends the shard's index.
// (GNU base-256 can encode sizes near 2^64, whose rounded end would wrap
// around and send the walk back to an earlier header, forever.)
constexpr uint64_t kMaxMemberBytes = uint64_t{1} << 48;

bool ReadAt(int fd, uint64_t offset, void* buf, size_t bytes) {
  absl::StatusOr<size_t> got = ReadFullyAt(fd, offset, buf, bytes, "a shard");
  return got.ok() && *got == bytes;
}

// A tar numeric field: octal digits (space or NUL terminated), or GNU's
// base-256 with the high bit of the first byte set.
bool ParseNumber(const unsigned char* field, size_t width, uint64_t* out) {
  if (field[0] & 0x80) {
    uint64_t v = field[0] & 0x3f;
    for (size_t i = 1; i < width; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | field[i];
    }
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < width && field[i] == ' ') ++i;
  bool any = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < width; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  *out = v;
  return any;
}

bool ChecksumOk(const unsigned char* h) {
  uint64_t stored;
  if (!ParseNumber(h + 148, 8, &stored)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == stored;
}

std::string_view CString(const unsigned char* p, size_t width) {
  const char* c = reinterpret_cast<const char*>(p);
  return std::string_view(c, strnlen(c, width));
}

// The "path" record of a pax extended header ("<len> path=<value>\n" ...).
std::string PaxPath(std::string_view records) {
  std::string path;
  while (!records.empty()) {
    const size_t space = records.find(' ');
    uint64_t len;
    if (space == std::string_view::npos ||
        !absl::SimpleAtoi(ToAbsl(records.substr(0, space)), &len) || len <= space + 1 ||
        len > records.size()) {
      break;
    }
    std::string_view rec = records.substr(space + 1, len - space - 1);
    if (!rec.empty() && rec.back() == '\n') rec.remove_suffix(1);
    if (absl::StartsWith(ToAbsl(rec), "path=")) path = std::string(rec.substr(5));
    records.remove_prefix(len);
  }
  return path;
}

// WebDataset's split of a member path: key = up to the first '.' of the
// file name, extension = the rest (lowercased).
void SplitKey(std::string_view path, std::string_view* key, std::string* ext) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.find('.', slash == std::string_view::npos ? 0 : slash + 1);
  if (dot == std::string_view::npos) {
    *key = path;
    ext->clear();
    return;
  }
  *key = path.substr(0, dot);
  *ext = absl::AsciiStrToLower(ToAbsl(path.substr(dot + 1)));
}

// The member keys holding an image (the workers decode it by its content),
// and which one is a sample's image when it has several: a jpg/jpeg member
// (rank 1) before any other (rank 2; a segmentation set's "png" is its
// mask beside a "jpg" image), else the first. 0: not an image key.
int ImageKeyRank(std::string_view ext) {
  if (ext == "jpg" || ext == "jpeg") return 1;
  for (std::string_view key : {"png", "webp", "tif", "tiff", "bmp", "ppm", "pgm"}) {
    if (ext == key) return 2;
  }
  return 0;
}

// The integer label in a .cls member, or in the "label" (else "cls") field
// of a .json member's top-level object.
bool ParseLabel(std::string_view text, bool json, int64_t* label) {
  if (!json) {
    absl::string_view t = absl::StripAsciiWhitespace(ToAbsl(text));
    return absl::SimpleAtoi(t, label);
  }
  for (const char* field : {"\"label\"", "\"cls\""}) {
    size_t at = 0;
    while ((at = text.find(field, at)) != std::string_view::npos) {
      size_t p = at + std::strlen(field);
      while (p < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[p]))) ++p;
      if (p < text.size() && text[p] == ':') {
        ++p;
        while (p < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[p]))) ++p;
        size_t e = p;
        if (e < text.size() && text[e] == '-') ++e;
        while (e < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[e]))) ++e;
        if (absl::SimpleAtoi(ToAbsl(text.substr(p, e - p)), label)) return true;
      }
      at = p;
    }
  }
  return false;
}

// A "json" member's "boxes" (XYXY; a box that is not 4 numbers becomes
// NaNs, which fail its sample), "labels" and "iscrowd". False when it has
// no "boxes" list.
bool ParseBoxes(const std::string& text, std::vector<float>* xyxy, std::vector<int64_t>* labels,
                std::vector<uint8_t>* flags) {
  google::protobuf::Value doc;
  if (!google::protobuf::util::JsonStringToMessage(QuoteNonFinite(text), &doc).ok() ||
      !doc.has_struct_value()) {
    return false;
  }
  const auto& f = doc.struct_value().fields();
  auto boxes = f.find("boxes");
  if (boxes == f.end() || !boxes->second.has_list_value()) return false;
  auto list = [&f](const char* name) -> const google::protobuf::ListValue* {
    auto it = f.find(name);
    return it != f.end() && it->second.has_list_value() ? &it->second.list_value() : nullptr;
  };
  const google::protobuf::ListValue* l = list("labels");
  const google::protobuf::ListValue* c = list("iscrowd");
  const auto& values = boxes->second.list_value().values();
  for (int i = 0; i < values.size(); ++i) {
    const google::protobuf::Value& b = values[i];
    const bool box = b.has_list_value() && b.list_value().values_size() == 4;
    for (int k = 0; k < 4; ++k) {
      // Not a number (NaN as Python writes it, a string, null): not a box.
      const google::protobuf::Value* v = box ? &b.list_value().values(k) : nullptr;
      xyxy->push_back(v != nullptr && v->has_number_value() ? static_cast<float>(v->number_value())
                                                            : NAN);
    }
    labels->push_back(l != nullptr && i < l->values_size()
                          ? static_cast<int64_t>(l->values(i).number_value())
                          : -1);
    flags->push_back(c != nullptr && i < c->values_size() && c->values(i).number_value() != 0);
  }
  return true;
}

struct Group {
  std::string key;
  bool has_image = false;
  int image_rank = 0;  // ImageKeyRank of the image member kept
  uint64_t image_offset = 0, image_length = 0;
  std::string image_name;
  bool has_label = false;
  int64_t label = -1;
  // Segmentation sets: the mask member (a "png" beside a "jpg", or
  // "mask.png" / "seg.png").
  bool has_mask = false;
  uint64_t mask_offset = 0, mask_length = 0;
  // Detection sets: the "json" member's boxes.
  bool has_boxes = false;
  std::vector<float> boxes;
  std::vector<int64_t> box_labels;
  std::vector<uint8_t> box_flags;
};

class ShardIndexer {
 public:
  ShardIndexer(const std::string& shard, uint32_t file, int fd, uint64_t size,
               const std::vector<std::string>& sample_keys, DatasetIndex* out)
      : shard_(shard), file_(file), fd_(fd), size_(size), sample_keys_(sample_keys), out_(out) {}

  void Run() {
    uint64_t at = 0;
    std::string long_name;
    unsigned char h[kBlock];
    while (at + kBlock <= size_) {
      if (!ReadAt(fd_, at, h, kBlock)) return Stop(at, "cannot read a header");
      bool zero = true;
      for (unsigned char c : h) zero = zero && c == 0;
      if (zero) break;  // end of archive
      if (!ChecksumOk(h)) return Stop(at, "a damaged header (bad checksum)");
      uint64_t size;
      if (!ParseNumber(h + 124, 12, &size)) return Stop(at, "a damaged header (size)");
      if (size > kMaxMemberBytes) return Stop(at, "a damaged header (a member size over 2^48 bytes)");
      const char type = static_cast<char>(h[156]);
      const uint64_t data = at + kBlock;
      const uint64_t next = data + ((size + kBlock - 1) / kBlock) * kBlock;
      if (type == 'L' || type == 'x') {
        if (size > kMaxMetaBytes || data + size > size_) return Stop(at, "a long-name record past the end");
        std::string meta(size, '\0');
        if (!ReadAt(fd_, data, meta.data(), size)) return Stop(at, "cannot read a record");
        long_name = type == 'L' ? std::string(CString(reinterpret_cast<const unsigned char*>(meta.data()), meta.size()))
                                : PaxPath(meta);
        at = next;
        continue;
      }
      std::string name;
      if (!long_name.empty()) {
        name.swap(long_name);
      } else {
        const std::string_view magic = CString(h + 257, 6);
        const std::string_view prefix = magic == "ustar" ? CString(h + 345, 155) : "";
        name = prefix.empty() ? std::string(CString(h, 100))
                              : Cat(prefix, "/", CString(h, 100));
      }
      if (type == '0' || type == '\0' || type == '7') Member(name, data, size);
      at = next;
    }
    Flush();
  }

 private:
  void Member(const std::string& name, uint64_t data, uint64_t size) {
    std::string_view key;
    std::string ext;
    SplitKey(name, &key, &ext);
    if (key != group_.key) {
      Flush();
      group_ = Group{};
      group_.key = std::string(key);
    }
    if (!sample_keys_.empty()) {  // a video set: the first member of those keys
      if (std::find(sample_keys_.begin(), sample_keys_.end(), ext) != sample_keys_.end()) {
        if (!group_.has_image) {
          group_.has_image = true;
          group_.image_rank = 1;
          group_.image_offset = data;
          group_.image_length = size;
          group_.image_name = name;
        }
        return;
      }
    } else if (ext == "mask.png" || ext == "seg.png") {
      group_.has_mask = true;
      group_.mask_offset = data;
      group_.mask_length = size;
      return;
    }
    if (const int rank = sample_keys_.empty() ? ImageKeyRank(ext) : 0; rank != 0) {
      if (group_.has_image && group_.image_rank <= rank) {
        // A "png" beside a "jpg" image: the sample's mask.
        if (ext == "png" && group_.image_rank == 1 && !group_.has_mask) {
          group_.has_mask = true;
          group_.mask_offset = data;
          group_.mask_length = size;
        }
        return;  // one image per sample
      }
      if (group_.has_image && rank == 1 && group_.image_rank == 2 && !group_.has_mask &&
          absl::EndsWith(group_.image_name, ".png")) {
        // The "png" taken first is the mask of the "jpg" found after it.
        group_.has_mask = true;
        group_.mask_offset = group_.image_offset;
        group_.mask_length = group_.image_length;
      }
      group_.has_image = true;
      group_.image_rank = rank;
      group_.image_offset = data;
      // A truncated shard: keep the member, it fails as a sample (the
      // worker reads past the end of the file and says so).
      group_.image_length = size;
      group_.image_name = name;
    } else if ((ext == "cls" || ext == "json") && !group_.has_label && size <= kMaxLabelBytes &&
               data + size <= size_) {
      std::string text(size, '\0');
      if (ReadAt(fd_, data, text.data(), size)) {
        group_.has_label = ParseLabel(text, ext == "json", &group_.label);
        if (ext == "json") ReadBoxes(text);
      }
    } else if (ext == "json" && !group_.has_boxes && size <= kMaxJsonBytes &&
               data + size <= size_) {
      std::string text(size, '\0');
      if (ReadAt(fd_, data, text.data(), size)) ReadBoxes(text);
    }
  }

  void ReadBoxes(const std::string& text) {
    if (group_.has_boxes || text.find("\"boxes\"") == std::string::npos) return;
    group_.has_boxes =
        ParseBoxes(text, &group_.boxes, &group_.box_labels, &group_.box_flags);
  }

  void Flush() {
    if (group_.key.empty() && !group_.has_image) return;
    if (!group_.has_image) {
      ++without_image_;
    } else {
      if (!group_.has_label) ++without_label_;
      out_->entry_file.push_back(file_);
      out_->ranges.push_back(group_.image_offset);
      out_->ranges.push_back(group_.image_length);
      out_->names.append(group_.image_name);
      out_->name_offsets.push_back(out_->names.size());
      if (group_.has_mask || !out_->mask_ranges.empty()) {
        out_->mask_ranges.resize(2 * out_->labels.size(), 0);  // the entries before: none
        out_->mask_ranges.push_back(group_.has_mask ? group_.mask_offset : 0);
        out_->mask_ranges.push_back(group_.has_mask ? group_.mask_length : 0);
      }
      for (size_t b = 0; b < group_.box_labels.size(); ++b) {
        out_->AddBox(group_.boxes.data() + 4 * b, group_.box_labels[b], group_.box_flags[b]);
      }
      out_->labels.push_back(group_.has_label ? group_.label : -1);
      if (!out_->box_offsets.empty()) out_->box_offsets.push_back(out_->box_labels.size());
      out_->Tick();
    }
    group_ = Group{};
  }

  void Stop(uint64_t at, std::string_view what) {
    Flush();
    out_->warnings.push_back(Cat("shard ", shard_, ": ", what, " at byte ", at,
                                 "; its later members are not indexed"));
  }

 public:
  uint64_t without_image_ = 0;
  uint64_t without_label_ = 0;

 private:
  const std::string& shard_;
  const uint32_t file_;
  const int fd_;
  const uint64_t size_;
  // A video set's member keys (lower case, no dot), any of which is a
  // sample; empty: the image keys (ImageKeyRank) and masks.
  const std::vector<std::string>& sample_keys_;
  DatasetIndex* out_;
  Group group_;
};

}  // namespace

absl::Status IndexWebDataset(const DataRoot& root, const std::vector<std::string>& shards,
                             const std::vector<std::string>& sample_keys, DatasetIndex* out) {
  std::vector<std::string> keys;
  for (const std::string& k : sample_keys) {
    keys.push_back(absl::AsciiStrToLower(ToAbsl(k.substr(k.rfind('.') + 1))));
  }
  if (shards.size() > UINT32_MAX) return absl::InvalidArgumentError("too many shards");
  uint64_t without_image = 0, without_label = 0;
  for (uint32_t f = 0; f < shards.size(); ++f) {
    absl::StatusOr<int> opened = OpenBeneathImpl(root.fd(), shards[f], OpenKind::kRegularFile,
                                                 /*use_openat2=*/true);
    if (!opened.ok()) return opened.status();
    UniqueFd fd(*opened);
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return PosixError(Cat("fstat '", shards[f], "'"), errno);
    out->Watch(shards[f], fd.get(), /*is_dir=*/false);
    out->paths.append(shards[f]);
    out->offsets.push_back(out->paths.size());
    ShardIndexer indexer(shards[f], f, fd.get(), static_cast<uint64_t>(st.st_size), keys, out);
    indexer.Run();
    without_image += indexer.without_image_;
    without_label += indexer.without_label_;
  }
  if (without_image > 0 && !keys.empty()) {
    out->warnings.push_back(Cat(without_image, " sample key(s) have no member keyed ",
                                absl::StrJoin(keys, ", "), "; skipped"));
  } else if (without_image > 0) {
    out->warnings.push_back(Cat(without_image,
                                " sample key(s) have no image member (jpg, jpeg, png, webp, tif, "
                                "tiff, bmp, ppm, pgm); skipped"));
  }
  if (without_label > 0) {
    out->warnings.push_back(
        Cat(without_label, " sample(s) have no .cls or .json label; their label is -1"));
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
