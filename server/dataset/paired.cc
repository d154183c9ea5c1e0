// The paired-folders indexer: an images folder and a masks folder, an image
// and its mask matched by their paths (see Dataset::Open, kPairedFolders).

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "server/dataset/beneath.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_builder.h"
#include "server/dataset/str_cat.h"
#include "server/image/decode/image_decoder.h"
#include "common/posix.h"

namespace stoker {
namespace dataset_internal {
namespace {

constexpr size_t kMaxFiles = size_t{1} << 26;

// Every regular file beneath the canonical folder `dir` (relative to the
// root), as paths relative to `dir`. Subfolders are walked; a symlink is
// listed when it leads to a file (the worker's open then keeps it beneath
// the root) and not walked when it leads to a folder.
absl::Status ListFiles(const DataRoot& root, const std::string& dir, DatasetIndex* out,
                       std::vector<std::string>* files) {
  std::vector<std::string> pending = {""};
  while (!pending.empty()) {
    const std::string rel = std::move(pending.back());
    pending.pop_back();
    const std::string path = rel.empty() ? dir : JoinPath(dir, rel);
    absl::StatusOr<int> opened =
        OpenBeneathImpl(root.fd(), path, OpenKind::kDirectory, /*use_openat2=*/true);
    if (!opened.ok()) return opened.status();
    UniqueFd fd(*opened);
    out->Watch(path, fd.get(), /*is_dir=*/true);
    absl::Status listed = ForEachEntry(
        std::move(fd), path,
        [&](std::string_view name, unsigned char type, int dir_fd) -> absl::Status {
          const std::string child = rel.empty() ? std::string(name) : JoinPath(rel, name);
          if (type == DT_UNKNOWN || type == DT_LNK) {
            struct stat st;
            if (fstatat(dir_fd, std::string(name).c_str(), &st,
                        type == DT_LNK ? 0 : AT_SYMLINK_NOFOLLOW) != 0) {
              return absl::OkStatus();  // a dangling link: nothing to pair
            }
            if (S_ISDIR(st.st_mode) && type == DT_LNK) {
              return absl::OkStatus();  // linked folders are not walked
            }
            type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
          }
          if (type == DT_DIR) {
            pending.push_back(child);
          } else if (type == DT_REG) {
            if (files->size() >= kMaxFiles) {
              return absl::ResourceExhaustedError(
                  Cat("'", dir, "' holds more than ", kMaxFiles, " files"));
            }
            files->push_back(child);
          }
          return absl::OkStatus();
        });
    if (!listed.ok()) return listed;
  }
  std::sort(files->begin(), files->end());
  return absl::OkStatus();
}

// `path` less its extension (the part from the last '.' of its last name).
std::string_view Stem(std::string_view path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return path;
  }
  return path.substr(0, dot);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

absl::Status IndexPairedFolders(const DataRoot& root, const std::string& images,
                                const std::string& masks, const std::string& image_suffix,
                                const std::string& mask_suffix, DatasetIndex* out) {
  std::vector<std::string> image_files, mask_files;
  if (absl::Status st = ListFiles(root, images, out, &image_files); !st.ok()) return st;
  if (absl::Status st = ListFiles(root, masks, out, &mask_files); !st.ok()) return st;
  const std::unordered_set<std::string> mask_set(mask_files.begin(), mask_files.end());
  uint64_t unpaired = 0;
  std::string first_unpaired, first_missing;
  for (const std::string& file : image_files) {
    if (!image::HasImageFolderExtension(file)) continue;
    std::string_view key = Stem(file);
    if (!EndsWith(key, image_suffix)) continue;
    key.remove_suffix(image_suffix.size());
    const std::string mask = Cat(key, mask_suffix, ".png");
    if (mask_set.count(mask) == 0) {
      if (unpaired++ == 0) first_unpaired = file, first_missing = mask;
      continue;
    }
    out->paths.append(JoinPath(images, file));
    out->SetMask(JoinPath(masks, mask));
    out->EndEntry(-1);
  }
  if (unpaired != 0) {
    out->warnings.push_back(Cat(unpaired, " image(s) in '", images, "' have no mask in '", masks,
                                "' (the first: '", first_unpaired, "', whose mask would be '",
                                first_missing, "'); they are left out"));
  }
  if (out->size() == 0) {
    return absl::FailedPreconditionError(
        Cat("no image in '", images, "' has a mask in '", masks, "' (an image <path><",
            image_suffix.empty() ? "" : image_suffix, ">.<ext> pairs with the mask <path>",
            mask_suffix, ".png; ", image_files.size(), " file(s) and ", mask_files.size(),
            " mask file(s) seen)"));
  }
  return absl::OkStatus();
}

bool HasVolumeExtension(std::string_view file) {
  std::string lower(file);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* e : {".nii", ".nii.gz", ".npy", ".npz", ".h5", ".hdf5"}) {
    if (EndsWith(lower, e)) return true;
  }
  return false;
}

absl::Status IndexVolumeFolder(const DataRoot& root, const std::string& images,
                               const std::string& masks, DatasetIndex* out) {
  std::vector<std::string> files, label_files;
  if (absl::Status st = ListFiles(root, images, out, &files); !st.ok()) return st;
  if (!masks.empty()) {
    if (absl::Status st = ListFiles(root, masks, out, &label_files); !st.ok()) return st;
  }
  const std::unordered_set<std::string> labels(label_files.begin(), label_files.end());
  uint64_t unpaired = 0, seen = 0;
  std::string first_unpaired;
  for (const std::string& file : files) {
    if (!HasVolumeExtension(file)) continue;
    ++seen;
    if (!masks.empty() && labels.count(file) == 0) {
      if (unpaired++ == 0) first_unpaired = file;
      continue;
    }
    out->paths.append(JoinPath(images, file));
    if (!masks.empty()) out->SetMask(JoinPath(masks, file));
    out->EndEntry(-1);
  }
  if (unpaired != 0) {
    out->warnings.push_back(Cat(unpaired, " volume(s) in '", images, "' have no label of the same "
                                "name in '", masks, "' (the first: '", first_unpaired,
                                "'); they are left out"));
  }
  if (out->size() == 0) {
    return absl::FailedPreconditionError(
        masks.empty()
            ? Cat("'", images, "' holds no volume file (.nii, .nii.gz, .npy, .npz, .h5)")
            : Cat("no volume in '", images, "' has a label of the same name in '", masks, "' (",
                  seen, " volume file(s) and ", label_files.size(), " label file(s) seen)"));
  }
  return absl::OkStatus();
}

}  // namespace dataset_internal
}  // namespace stoker
