// The manifest parser: `path<TAB>label` lines, or the columns a first
// "#columns:" line declares (image, label, mask), paths relative to the
// manifest's folder. Entries are checked lexically against the root, never
// stat'ed: a manifest may list millions of files, and a missing one fails
// later, as a sample.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

constexpr size_t kReadChunkBytes = size_t{1} << 20;
// A line longer than this is not a path and a label.
constexpr size_t kMaxLineBytes = size_t{1} << 16;

class ManifestParser {
 public:
  ManifestParser(const DataRoot& root, std::string_view file, bool label_files, DatasetIndex* out)
      : root_(root), file_(file), label_files_(label_files), out_(out) {
    size_t slash = file.rfind('/');
    dir_ = slash == std::string_view::npos ? std::string_view() : file.substr(0, slash);
  }

  absl::Status Line(std::string_view line) {
    ++line_number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxLineBytes) {
      return absl::InvalidArgumentError(Where("longer than ", kMaxLineBytes, " bytes"));
    }
    absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(ToAbsl(line));
    if (line_number_ == 1 && absl::StartsWith(trimmed, "#columns:")) {
      return Columns(trimmed.substr(9));
    }
    if (trimmed.empty() || trimmed.front() == '#') return absl::OkStatus();
    std::string_view path, label_text, mask;
    if (columns_.empty()) {
      const size_t tab = line.rfind('\t');
      if (tab == std::string_view::npos) {
        return absl::InvalidArgumentError(Where("expected 'path<TAB>label', found no tab"));
      }
      path = line.substr(0, tab);
      label_text = line.substr(tab + 1);
    } else {
      std::vector<std::string_view> fields;
      for (size_t at = 0;;) {
        const size_t tab = line.find('\t', at);
        fields.push_back(line.substr(at, tab == std::string_view::npos ? tab : tab - at));
        if (tab == std::string_view::npos) break;
        at = tab + 1;
      }
      if (fields.size() != columns_.size()) {
        return absl::InvalidArgumentError(Where("expected ", columns_.size(),
                                                " tab-separated fields (#columns:), found ",
                                                fields.size()));
      }
      for (size_t c = 0; c < columns_.size(); ++c) {
        (columns_[c] == kImage ? path : columns_[c] == kLabel ? label_text : mask) = fields[c];
      }
    }
    int64_t label = -1;
    if (label_files_ && has_label_) {  // a volume set's label volume: the entry's mask
      if (has_mask_) return absl::InvalidArgumentError(Where("a volume set's label column is its label file: no mask column too"));
      mask = label_text;
    } else if ((columns_.empty() || has_label_) && !absl::SimpleAtoi(ToAbsl(label_text), &label)) {
      return absl::InvalidArgumentError(
          Where("label '", label_text, "' is not a signed 64-bit integer"));
    }
    if (absl::Status s = AppendPath(path, &out_->paths); !s.ok()) return s;
    if (has_mask_ || (label_files_ && has_label_)) {
      if (mask.empty()) return absl::InvalidArgumentError(Where("empty mask path"));
      std::string m;
      if (absl::Status s = AppendPath(mask, &m); !s.ok()) return s;
      out_->SetMask(m);
    }
    out_->EndEntry(label);
    return absl::OkStatus();
  }

  // Reserves room for the whole file, extrapolated from its first
  // `parsed_bytes`, so that millions of entries are not copied at every
  // doubling of the buffers (page faults dominate otherwise).
  void ReserveFor(uint64_t file_bytes, uint64_t parsed_bytes) {
    if (parsed_bytes == 0 || file_bytes <= parsed_bytes || out_->size() == 0) return;
    const double scale = 1.05 * static_cast<double>(file_bytes) / parsed_bytes;
    out_->paths.reserve(static_cast<size_t>(scale * out_->paths.size()) + 4096);
    const size_t entries = static_cast<size_t>(scale * out_->size()) + 64;
    out_->offsets.reserve(entries + 1);
    out_->labels.reserve(entries);
  }

  // The path of a manifest entry (image or mask), normalized beneath the
  // root, appended to `out`.
  absl::Status AppendPath(std::string_view path, std::string* out) const {
    if (path.empty()) return absl::InvalidArgumentError(Where("empty path"));
    if (path.find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(Where("path contains a NUL byte"));
    }
    if (path.front() == '/') {
      std::optional<std::string> rest = StripRootPrefix(root_.path(), path);
      if (!rest.has_value() || !AppendNormalized("", *rest, out).ok()) {
        return absl::PermissionDeniedError(Where("'", path, "' is outside the data root"));
      }
    } else if (!AppendNormalized(dir_, path, out).ok()) {
      return absl::PermissionDeniedError(Where("'", path, "' leaves the data root"));
    }
    return absl::OkStatus();
  }

  // "#columns: image label mask" (tabs or spaces between the names).
  absl::Status Columns(absl::string_view names) {
    for (absl::string_view name :
         absl::StrSplit(names, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      const Column c = name == "image" ? kImage : name == "label" ? kLabel
                       : name == "mask"  ? kMask
                                         : kUnknown;
      if (c == kUnknown || std::find(columns_.begin(), columns_.end(), c) != columns_.end()) {
        return absl::InvalidArgumentError(
            Where("#columns: '", std::string_view(name.data(), name.size()),
                  "' is not one of image, label, mask or is given twice"));
      }
      columns_.push_back(c);
    }
    if (std::find(columns_.begin(), columns_.end(), kImage) == columns_.end()) {
      return absl::InvalidArgumentError(Where("#columns: needs an image column"));
    }
    has_label_ = std::find(columns_.begin(), columns_.end(), kLabel) != columns_.end();
    has_mask_ = std::find(columns_.begin(), columns_.end(), kMask) != columns_.end();
    return absl::OkStatus();
  }

  absl::Status LineTooLong() const {
    return absl::InvalidArgumentError(Cat("manifest ", file_, " line ", line_number_ + 1,
                                          ": longer than ", kMaxLineBytes, " bytes"));
  }

 private:
  template <typename... Args>
  std::string Where(const Args&... args) const {
    return Cat("manifest ", file_, " line ", line_number_, ": ", args...);
  }

  const DataRoot& root_;
  std::string_view file_;
  std::string_view dir_;  // the manifest's folder, canonical
  bool label_files_;      // IndexOptions::label_files
  DatasetIndex* out_;
  uint64_t line_number_ = 0;
  // Declared by "#columns:" (empty: path<TAB>label).
  enum Column { kImage, kLabel, kMask, kUnknown };
  std::vector<Column> columns_;
  bool has_label_ = false;
  bool has_mask_ = false;
};

}  // namespace

absl::Status IndexManifest(const DataRoot& root, const std::string& file, bool label_files,
                           DatasetIndex* out) {
  absl::StatusOr<int> opened =
      OpenBeneathImpl(root.fd(), file, OpenKind::kRegularFile, /*use_openat2=*/true);
  if (!opened.ok()) return opened.status();
  UniqueFd fd(*opened);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(Cat("fstat manifest '", file, "'"), errno);
  out->Watch(file, fd.get(), /*is_dir=*/false);
  ManifestParser parser(root, file, label_files, out);
  std::vector<char> chunk(kReadChunkBytes);
  std::string partial;  // a line split across reads
  uint64_t bytes_read = 0;
  while (true) {
    ssize_t n = read(fd.get(), chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(Cat("read manifest '", file, "'"), errno);
    }
    if (n == 0) break;
    std::string_view data(chunk.data(), static_cast<size_t>(n));
    size_t newline;
    while ((newline = data.find('\n')) != std::string_view::npos) {
      absl::Status status;
      if (partial.empty()) {
        status = parser.Line(data.substr(0, newline));
      } else {
        partial.append(data.substr(0, newline));
        status = parser.Line(partial);
        partial.clear();
      }
      if (!status.ok()) return status;
      data.remove_prefix(newline + 1);
    }
    partial.append(data);
    if (partial.size() > kMaxLineBytes + 1) return parser.LineTooLong();
    if (bytes_read == 0) parser.ReserveFor(st.st_size, n - partial.size());
    bytes_read += n;
  }
  if (!partial.empty()) return parser.Line(partial);
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
