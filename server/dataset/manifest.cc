// The manifest parser: `path<TAB>label` lines, paths relative to the
// manifest's folder. Entries are checked lexically against the root, never
// stat'ed: a manifest may list millions of files, and a missing one fails
// later, as a sample.

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "server/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

constexpr size_t kReadChunkBytes = size_t{1} << 20;
// A line longer than this is not a path and a label.
constexpr size_t kMaxLineBytes = size_t{1} << 16;

class ManifestParser {
 public:
  ManifestParser(const DataRoot& root, std::string_view file, DatasetIndex* out)
      : root_(root), file_(file), out_(out) {
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
    if (trimmed.empty() || trimmed.front() == '#') return absl::OkStatus();
    const size_t tab = line.rfind('\t');
    if (tab == std::string_view::npos) {
      return absl::InvalidArgumentError(Where("expected 'path<TAB>label', found no tab"));
    }
    const std::string_view path = line.substr(0, tab);
    const std::string_view label_text = line.substr(tab + 1);
    int64_t label;
    if (!absl::SimpleAtoi(ToAbsl(label_text), &label)) {
      return absl::InvalidArgumentError(
          Where("label '", label_text, "' is not a signed 64-bit integer"));
    }
    if (path.empty()) return absl::InvalidArgumentError(Where("empty path"));
    if (path.find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(Where("path contains a NUL byte"));
    }
    if (path.front() == '/') {
      std::optional<std::string> rest = StripRootPrefix(root_.path(), path);
      if (!rest.has_value() || !AppendNormalized("", *rest, &out_->paths).ok()) {
        return absl::PermissionDeniedError(Where("'", path, "' is outside the data root"));
      }
    } else if (!AppendNormalized(dir_, path, &out_->paths).ok()) {
      return absl::PermissionDeniedError(Where("'", path, "' leaves the data root"));
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
  DatasetIndex* out_;
  uint64_t line_number_ = 0;
};

}  // namespace

absl::Status IndexManifest(const DataRoot& root, const std::string& file, DatasetIndex* out) {
  absl::StatusOr<int> opened =
      OpenBeneathImpl(root.fd(), file, OpenKind::kRegularFile, /*use_openat2=*/true);
  if (!opened.ok()) return opened.status();
  UniqueFd fd(*opened);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(Cat("fstat manifest '", file, "'"), errno);
  out->Watch(file, fd.get(), /*is_dir=*/false);
  ManifestParser parser(root, file, out);
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
