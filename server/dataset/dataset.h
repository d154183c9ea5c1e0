// Datasets the daemon serves: where the files are, their labels, and the
// confinement of every path to the daemon's --data-root.

#ifndef STOKER_SERVER_DATASET_DATASET_H_
#define STOKER_SERVER_DATASET_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/dataset/records.h"

namespace stoker {

// The daemon's data root: a directory, held open. Every dataset and every
// file the daemon or a worker opens must lie beneath it, after symlinks.
// Thread-safe after construction (const).
class DataRoot {
 public:
  // INVALID_ARGUMENT / NOT_FOUND when `dir` is not an existing directory.
  static absl::StatusOr<std::unique_ptr<DataRoot>> Open(const std::string& dir);
  ~DataRoot();  // closes fd()
  DataRoot(const DataRoot&) = delete;
  DataRoot& operator=(const DataRoot&) = delete;

  // The canonical absolute path of the root.
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  // Resolves a path named by a client (relative to the root, or absolute and
  // inside it) to a canonical path relative to the root ("" for the root
  // itself). PERMISSION_DENIED when it escapes the root (through "..", an
  // absolute path elsewhere, or a symlink; the message names the fix:
  // stokerd --data-root, or stoker.Loader(data_root=...) for the daemon a
  // Loader starts), NOT_FOUND when it does not exist.
  // Canonical: symlinks resolved, no "." or ".." components. A symlink whose
  // absolute target lies beneath the root is followed. INVALID_ARGUMENT for
  // an empty path (use "." for the root).
  absl::StatusOr<std::string> Resolve(std::string_view user_path) const;

 private:
  DataRoot(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Opens `relative_path` for reading beneath the directory `root_fd`, refusing
// any path that leaves it (openat2 RESOLVE_BENEATH, with a checked fallback
// where the kernel lacks openat2). Returns the fd or a status naming the
// path and the errno.
//  - PERMISSION_DENIED when the path leaves the root: "..", an absolute path,
//    a symlink outside (and, under openat2, any absolute symlink: give it
//    canonical paths such as Dataset::path() and DataRoot::Resolve() return).
//    Without openat2 (ENOSYS, or EPERM from an old seccomp filter) every
//    component is opened with O_NOFOLLOW: any symlink is refused.
//  - FAILED_PRECONDITION when it is not a regular file (a FIFO named like a
//    sample must not block a worker); NOT_FOUND when missing (the message
//    says "a dangling symlink" when the path's last component is one).
// The fd is read-only, close-on-exec and blocking; the caller closes it.
absl::StatusOr<int> OpenBeneath(int root_fd, std::string_view relative_path);

enum class DatasetFormat {
  kAuto = 0,
  kImageFolder = 1,
  kManifest = 2,
  kWebDataset = 3,
  kCoco = 4,
  kPairedFolders = 5,
  kDecathlon = 6,
  kHdf5 = 7,
  kLmdb = 8,
  kVolumeFolder = 9,
};

// How Dataset::Open indexes, and where it may keep what it indexed.
struct IndexOptions {
  // A folder for index files (created 0700 if missing). Empty: no cache.
  // A cached index is used when nothing it was made from changed: every
  // directory of an ImageFolder tree (their mtimes: adding, removing or
  // renaming a file changes its folder's), the manifest file, or each shard
  // (inode, size, mtime). Otherwise the dataset is indexed again and the
  // cache file replaced. A cached index is memory-mapped, not copied.
  std::string cache_dir;
  // Called during indexing with the entries (files or members) found so far,
  // at most every ~100,000 entries or 2 s; and once at the end.
  std::function<void(uint64_t entries)> progress;
  // ImageFolder (see Dataset::Open): a class folder with no image file is a
  // class without samples instead of an error (torchvision's
  // ImageFolder(allow_empty=True)).
  bool allow_empty = false;
  // ImageFolder: the file names a class folder's walk lists, as
  // torchvision's DatasetFolder(extensions=...) lists them: a file whose
  // name, lowercased, ends with one of these ("avi" matches "x.AVI", and
  // "xavi" too, as in torchvision). Empty: IMG_EXTENSIONS. A video folder
  // passes its own (torchvision's Kinetics: "avi", "mp4"). Part of the
  // dataset's identity. WebDataset: when given, a sample is its group's
  // first member of one of these keys ("mp4", "avi", "webm": a video set)
  // instead of its image.
  std::vector<std::string> extensions;
  // Accepted and ignored: stoker 0.1 read only .jpg/.jpeg and this left the
  // other IMG_EXTENSIONS out; every one of them is read now.
  bool skip_unsupported_formats = false;
  // COCO (kCoco, or kAuto when set): the instances JSON file (relative to
  // the root, or absolute beneath it); the dataset path is then the folder
  // its images' file_name values are relative to (torchvision's
  // CocoDetection(root, annFile)). Part of the dataset's identity.
  std::string annotations;
  // Paired folders (kPairedFolders, or kAuto when set): the masks folder
  // (relative to the root); the dataset path is then the images folder.
  // An image <key><image_suffix>.<ext> pairs with the mask
  // <key><mask_suffix>.png (Cityscapes: "_leftImg8bit" and
  // "_gtFine_labelIds"; VOC: both empty). Part of the dataset's identity.
  std::string masks;
  std::string image_suffix;
  std::string mask_suffix;
  // Manifest: the "label" column of "#columns:" names each entry's label
  // file (a volume set's segmentation: the entry's mask), not an integer.
  // A volume session sets it.
  bool label_files = false;
  // Record files (kHdf5, kLmdb; records.h's RecordTarget): the images'
  // dataset in the HDF5 file, the labels' file (relative to the root, or
  // absolute beneath it) and its dataset. Part of the dataset's identity.
  std::string record_images;
  std::string record_labels;
  std::string record_labels_key;
  // An LMDB of raw pixels: {H, W} or {H, W, C} (records.h); empty: encoded.
  std::vector<uint32_t> record_shape;
  // Who parses a record file (the daemon's: a sandboxed worker, through its
  // VideoProber). Unset: record files cannot be opened (FAILED_PRECONDITION).
  std::function<absl::StatusOr<RecordIndex>(const RecordTarget&)> index_records;

  // The options above that change what an index holds, as bits: part of
  // every key an index is kept under (the daemon's table of open datasets,
  // the cache file), so that indexes made with different options never mix.
  uint32_t flags() const { return (allow_empty ? 1u : 0u) | (label_files ? 2u : 0u); }
  // The files beyond the dataset path that are part of its identity, as
  // text to append to the path in those keys: paired folders' masks folder
  // and suffixes, else COCO's annotations, else "" (one images folder may
  // have several of either); then the extensions a walk lists, if given.
  std::string identity() const {
    std::string id;
    if (!masks.empty()) {
      id = "\n" + masks + "\n" + image_suffix + "\n" + mask_suffix;
    } else if (!annotations.empty()) {
      id = "\n" + annotations;
    }
    if (!extensions.empty()) {
      id += "\nextensions:";
      for (const std::string& e : extensions) id += e + "\t";
    }
    if (!record_images.empty() || !record_labels.empty() || !record_labels_key.empty() ||
        !record_shape.empty()) {
      id += "\nrecords:" + record_images + "\t" + record_labels + "\t" + record_labels_key;
      for (uint32_t d : record_shape) id += "\t" + std::to_string(d);
    }
    return id;
  }
};

// An indexed dataset: immutable, shared between sessions (shared_ptr<const>).
// Paths are stored in one buffer (no per-entry allocation) so that millions
// of entries stay small: 16 bytes per entry plus the path bytes (WebDataset:
// 28 bytes per entry plus each member's name; shard paths once; an
// ImageFolder reached through symlinks: 8 more per entry plus the listed
// paths of those entries).
class Dataset {
 public:
  // Indexes the dataset at `user_path` (resolved through `root`).
  //  - kImageFolder: torchvision's ImageFolder(root), entry for entry.
  //    Classes: every directory entry of the folder that is a directory
  //    (symlinks followed; hidden ones such as ".ipynb_checkpoints"
  //    included), sorted by name bytes, give labels 0..K-1. Samples: files
  //    found recursively under each class folder, in torchvision's order:
  //    directories sorted by their whole path string (so "a/x y" < "a/x/z" <
  //    "a/x0"), files by name within each. Non-directories only: a directory
  //    "x.jpg" is walked, not listed. Extensions are matched in any case.
  //    Files are those named with one of torchvision's IMG_EXTENSIONS (.jpg
  //    .jpeg .png .ppm .bmp .pgm .tif .tiff .webp); the workers decode each
  //    by its content, not its name (a file in no format stoker reads fails
  //    as a sample). A class with no such file fails the request
  //    (FAILED_PRECONDITION naming the classes, as torchvision raises
  //    FileNotFoundError) unless options.allow_empty: then it keeps its label
  //    and has no samples. No class folder at all: FAILED_PRECONDITION.
  //    Symlinks are followed. A class folder or a directory below it that
  //    leads outside the root fails the whole request (PERMISSION_DENIED,
  //    naming the link and how to widen the data root). An image file
  //    that is a dangling symlink, or one leading outside the root, is listed
  //    as torchvision lists it and fails as a sample: its path(i) is the link
  //    itself, which OpenBeneath refuses ("leaves the data root") or does not
  //    find ("dangling symlink"); it is never followed outside (a warning
  //    counts those leaving the root; when every sample does, the request
  //    fails: PERMISSION_DENIED with the hint below). A directory met again
  //    below itself (a loop) is skipped.
  //    path(i) is the canonical path: a symlinked file's target (within the
  //    root); listed_path(i) the path torchvision lists.
  //  - kManifest: `path<TAB>label` per line, paths relative to the
  //    manifest's folder; blank lines and '#' comments skipped.
  //    The label is a signed 64-bit integer after the last tab; CRLF line
  //    ends are accepted; an absolute path must lie beneath the root. Entries
  //    are normalized lexically ("." and ".."), not stat'ed: a missing file
  //    fails later, as a sample. A first line "#columns:" followed by the
  //    names image, label and mask (separated by tabs or spaces; image
  //    required, each at most once, in the columns' order) declares other
  //    columns: lines then split at every tab into exactly those fields (no
  //    tab in a path); without a label column every label is -1; a mask
  //    column gives each entry its mask file (relative like the image).
  //    With options.label_files (a volume session) the label column names
  //    the entry's label volume instead (its mask; label -1).
  //  - kWebDataset: tar shards, named by a brace pattern
  //    ("train-{0000..0099}.tar", "{a,b}.tar") or one .tar file. Members are
  //    grouped into samples by key (the member path up to the first '.' of
  //    its file name), in shard order then member order; a sample is the
  //    group's "jpg"/"jpeg" member, else its first member keyed "png",
  //    "webp", "tif", "tiff", "bmp", "ppm" or "pgm" (decoded by its content;
  //    a "png" beside a "jpg" is a mask, not the image), its label the
  //    integer in the group's "cls" member or the "label" (or "cls") field
  //    of its "json" member, -1 without either. Groups without an image are
  //    skipped. A group's "png" beside a "jpg"/"jpeg" image, or its
  //    "mask.png" or "seg.png" member, is the sample's mask (a segmentation
  //    set: an entry without one then fails as a sample). A "json" member
  //    with a "boxes" list ([[x1, y1, x2, y2], ...], pixels) makes it a
  //    detection set: "labels" (integers, one a box; -1 without) and
  //    "iscrowd" (0 or 1) follow them; a box that is not 4 numbers fails its
  //    sample. A member that
  //    runs past the end of a truncated shard is kept (it fails as a sample);
  //    a damaged header ends that shard's index (see warnings()).
  //  - kCoco: a COCO instances JSON (options.annotations) over an images
  //    folder (user_path), torchvision's CocoDetection entry for entry: one
  //    entry per image, by ascending image id; its file is the folder joined
  //    with the image's file_name (confined like a manifest's paths: not
  //    stat'ed, a missing file fails as a sample); its label the image's
  //    id (what COCO's evaluation matches detections by); its boxes the
  //    annotations with its image_id, in file order: bbox [x, y, w, h]
  //    becomes XYXY [x, y, x + w, y + h], category_id the box's label,
  //    iscrowd its flag. A bbox that is not 4 numbers, or NaN, or a negative
  //    width, is kept as it is and fails its sample when read (boxes.h), so
  //    a bad annotation costs one counted sample, not the dataset. An
  //    annotation naming no image is skipped with a warning. class_names()
  //    is indexed by category id ("" where no category has that id). The
  //    JSON may hold NaN and Infinity as Python's json module writes them.
  //    INVALID_ARGUMENT (with the parser's words) for a file that is not
  //    JSON or not shaped like COCO's.
  //  - kPairedFolders: an images folder (user_path) and a masks folder
  //    (options.masks), as VOC's JPEGImages and SegmentationClass or
  //    Cityscapes' leftImg8bit and gtFine trees: every file beneath the
  //    images folder named with one of IMG_EXTENSIONS and ending (before its
  //    extension) in options.image_suffix, by path, that has its mask: the
  //    file beneath the masks folder at the same relative path with the
  //    image's suffix and extension replaced by options.mask_suffix + ".png".
  //    Images without a mask are left out (a warning counts them); none
  //    paired is FAILED_PRECONDITION naming both folders and the rule. Label
  //    -1. Symlinked folders are not walked; symlinked files are listed.
  //  - kDecathlon: the Medical Segmentation Decathlon's dataset.json (what
  //    MONAI's load_decathlon_datalist reads): one entry per element of its
  //    "training" list, in order, its "image" file the entry's path and its
  //    "label" file (optional) the entry's mask (the label volume), both
  //    relative to the json's folder ("./imagesTr/x.nii.gz") and confined
  //    like a manifest's (not stat'ed); label -1; class_names() from its
  //    "labels" map ({"0": "background", "1": "spleen"}, by number). An
  //    image given as a list of files (BraTS' modalities, one a channel, as
  //    MONAI's LoadImaged stacks them) has them all in path(i), in order,
  //    each ended by a NUL but the last (display(i) joins them with ", ").
  //    Other keys are ignored.
  //  - kHdf5 / kLmdb: a record file (records.h): an HDF5 file's image
  //    array or encoded images (options.record_images, default "x") or an
  //    LMDB's encoded images (the dataset path is the LMDB's folder, or its data.mdb), one
  //    entry a row or value, each a byte range of the file (display(i) is
  //    "file:row", the HDF5 row or the LMDB key's number), labels from options.record_labels (an HDF5 file's
  //    record_labels_key dataset, default "y", or a text file), or the HDF5
  //    file's own "y", else -1. The file is parsed by options.index_records
  //    (a sandboxed worker's); raw arrays' shape is raw_height() etc. Never
  //    cached in cache_dir (indexing reads only the file's headers and
  //    keys); re-indexed when the file or the labels file changes.
  //  - kVolumeFolder: a folder of volumes (a volume session's folder:
  //    kAuto picks this for a directory, or with options.masks, when
  //    options.label_files is set): every file beneath it (sub-folders
  //    walked) named .nii, .nii.gz, .npy, .npz, .h5 or .hdf5 (any case), by
  //    path; with options.masks (the Decathlon's labelsTr beside imagesTr),
  //    each with the label volume of the same relative path there (its
  //    mask), volumes without one left out with a warning. Label -1.
  //  - kAuto: options.annotations set is COCO, options.masks paired
  //    folders; a brace pattern or a .tar
  //    file is WebDataset; a .h5/.hdf5/.he5 file HDF5; a folder holding a
  //    data.mdb, or a .mdb/.lmdb file, LMDB; another directory an
  //    ImageFolder, a .json file a Decathlon dataset.json, another file a
  //    manifest.
  // Every entry is confined to the root (PERMISSION_DENIED naming the entry;
  // ImageFolder files: see above). A dataset path outside the root is
  // PERMISSION_DENIED too, with the same hint (stokerd --data-root, or
  // stoker.Loader(data_root=...) for the daemon the Loader starts).
  // NOT_FOUND for a missing path, FAILED_PRECONDITION for an empty dataset,
  // INVALID_ARGUMENT for a malformed manifest line (with its line number),
  // or for a format that does not match the path (a directory as manifest).
  // Blocking: reads the whole tree, manifest or every shard's headers.
  static absl::StatusOr<std::shared_ptr<const Dataset>> Open(const DataRoot& root,
                                                             std::string_view user_path,
                                                             DatasetFormat format,
                                                             const IndexOptions& options = {});

  ~Dataset();
  uint64_t size() const { return a_.labels.size; }
  // The file to open for entry i, relative to the data root (for
  // OpenBeneath): the image, or the shard holding it.
  std::string_view path(uint64_t i) const {
    const uint64_t f = a_.entry_file.size != 0 ? a_.entry_file[i] : i;
    return std::string_view(a_.paths.data, a_.paths.size)
        .substr(a_.offsets[f], a_.offsets[f + 1] - a_.offsets[f]);
  }
  // Whether entry i is a byte range of its file (a tar member) and which.
  bool has_range(uint64_t) const { return a_.ranges.size != 0; }
  uint64_t range_offset(uint64_t i) const { return a_.ranges.size != 0 ? a_.ranges[2 * i] : 0; }
  uint64_t range_length(uint64_t i) const { return a_.ranges.size != 0 ? a_.ranges[2 * i + 1] : 0; }
  // How to name entry i to a person: path(i), or "shard.tar:member.jpg".
  std::string display(uint64_t i) const;
  // Entry i as the dataset lists it. ImageFolder: the path torchvision's
  // ImageFolder(root).samples[i] gives, relative to the dataset folder
  // ("cls/sub/x.jpg"; through symlinks, not to their targets), so that
  // os.path.join(root, listed_path(i)) is that sample's path for the root
  // the user gave. Other formats: display(i), relative to the data root.
  std::string listed_path(uint64_t i) const;
  int64_t label(uint64_t i) const { return a_.labels[i]; }
  // Record files of raw image arrays (HDF5): each entry's range is
  // raw_height() x raw_width() x raw_channels() bytes of pixels (records.h);
  // all 0 for every other dataset (entries are encoded images).
  uint32_t raw_height() const { return raw_height_; }
  uint32_t raw_width() const { return raw_width_; }
  uint32_t raw_channels() const { return raw_channels_; }
  // Whether entries have masks (a segmentation set), and entry i's mask
  // file relative to the root ("" for an entry without one).
  // WebDataset: the mask is a member of the entry's shard (mask_path(i) is
  // path(i), the range mask_range_offset/length; length 0: no mask).
  bool has_masks() const { return a_.mask_offsets.size != 0 || a_.mask_ranges.size != 0; }
  std::string_view mask_path(uint64_t i) const {
    if (a_.mask_ranges.size != 0) return a_.mask_ranges[2 * i + 1] != 0 ? path(i) : "";
    if (a_.mask_offsets.size == 0) return {};
    return {a_.masks.data + a_.mask_offsets[i], a_.mask_offsets[i + 1] - a_.mask_offsets[i]};
  }
  bool has_mask_range(uint64_t) const { return a_.mask_ranges.size != 0; }
  uint64_t mask_range_offset(uint64_t i) const {
    return a_.mask_ranges.size != 0 ? a_.mask_ranges[2 * i] : 0;
  }
  uint64_t mask_range_length(uint64_t i) const {
    return a_.mask_ranges.size != 0 ? a_.mask_ranges[2 * i + 1] : 0;
  }
  // Whether entries have boxes (a detection set: COCO), entry i's box count
  // and its boxes (XYXY float32, 4 a box), box labels and flags (iscrowd);
  // the most any entry has.
  bool has_boxes() const { return a_.box_offsets.size != 0; }
  uint32_t box_count(uint64_t i) const {
    return a_.box_offsets.size == 0
               ? 0
               : static_cast<uint32_t>(a_.box_offsets[i + 1] - a_.box_offsets[i]);
  }
  const float* box_xyxy(uint64_t i) const { return a_.boxes.data + 4 * a_.box_offsets[i]; }
  const int64_t* box_labels(uint64_t i) const { return a_.box_labels.data + a_.box_offsets[i]; }
  const uint8_t* box_flags(uint64_t i) const { return a_.box_flags.data + a_.box_offsets[i]; }
  uint32_t max_boxes() const { return max_boxes_; }
  // ImageFolder: the class names in label order; COCO: by category id;
  // manifest: empty.
  const std::vector<std::string>& class_names() const { return class_names_; }
  // Canonical path relative to the root (a pattern: as given, normalized):
  // the dataset's identity.
  const std::string& name() const { return name_; }
  DatasetFormat format() const { return format_; }
  // True when this index was loaded from the cache (memory-mapped).
  bool from_cache() const { return from_cache_; }
  // What indexing noticed and worked around (a damaged shard, samples
  // without a label, a cache that could not be written), for the log.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Heap bytes the index holds (buffer capacities; 0 for the mapped arrays
  // of a cached index, which live in the page cache), for the status page
  // and for tests.
  uint64_t memory_bytes() const;

  // Whether every file and folder the index was made from looks as it did
  // then (see IndexOptions::cache_dir); `why` names the first change.
  bool Unchanged(const DataRoot& root, std::string* why) const;

  // The canonical identity of what `user_path` names, without indexing:
  // what name() will be. For the daemon's table of open datasets.
  static absl::StatusOr<std::string> CanonicalName(const DataRoot& root,
                                                   std::string_view user_path);

  // Expands "a{00..02}b{x,y}" into a00bx a00by a01bx ... (at most 100,000
  // results; numeric ranges keep the first bound's zero padding).
  // INVALID_ARGUMENT for an unbalanced or empty brace, or too many results.
  static absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern);

  template <typename T>
  struct Span {
    const T* data = nullptr;
    uint64_t size = 0;
    const T& operator[](uint64_t i) const { return data[i]; }
  };
  // The index's arrays, wherever they live (Storage: built on the heap, or
  // mapped from the cache). The WebDataset ones are empty for other formats.
  struct Arrays {
    Span<char> paths;             // every file path, concatenated
    Span<uint64_t> offsets;       // files + 1 entries into paths
    Span<uint32_t> entry_file;    // WebDataset: the file (shard) of each entry
    Span<uint64_t> ranges;        // WebDataset: (offset, length) per entry
    Span<char> names;             // WebDataset: member names, concatenated
    Span<uint64_t> name_offsets;  // WebDataset: entries + 1 entries into names
    Span<int64_t> labels;
    // ImageFolder: listed_path(i) where it is not path(i) less the dataset
    // folder (a symlink on the way), else ""; both empty when no entry's is.
    Span<char> listed;
    Span<uint64_t> listed_offsets;  // empty, or entries + 1 entries into listed
    // Segmentation sets: each entry's mask file, relative to the root ("":
    // none); both empty when no entry has one.
    Span<char> masks;
    Span<uint64_t> mask_offsets;  // empty, or entries + 1 entries into masks
    // WebDataset segmentation sets: (offset, length) of each entry's mask
    // member in its shard (0, 0: none); empty when no entry has one.
    Span<uint64_t> mask_ranges;
    // Detection sets: entries + 1 offsets (in boxes) into the boxes (4
    // floats each), their labels and flags; all empty without boxes.
    Span<uint64_t> box_offsets;
    Span<float> boxes;
    Span<int64_t> box_labels;
    Span<uint8_t> box_flags;
  };
  struct Storage;  // owns what Arrays points into

 private:
  Dataset() = default;
  friend struct DatasetAccess;
  std::string name_;
  DatasetFormat format_ = DatasetFormat::kImageFolder;
  Arrays a_;
  std::vector<std::string> class_names_;
  std::vector<std::string> warnings_;
  bool from_cache_ = false;
  uint32_t max_boxes_ = 0;
  uint32_t raw_height_ = 0;
  uint32_t raw_width_ = 0;
  uint32_t raw_channels_ = 0;
  std::unique_ptr<Storage> storage_;
};

}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_DATASET_H_
