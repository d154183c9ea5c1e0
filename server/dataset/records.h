// Record files as image datasets: an HDF5 dataset of image arrays
// (PatchCamelyon's x file: N x H x W x C uint8) or an LMDB whose values are
// encoded images (JPEG, PNG, ... bytes, one value a sample), with labels
// from an HDF5 dataset (PatchCamelyon's y file) or a text file.
//
// Indexing turns a record file into byte ranges, as a WebDataset shard's
// members are: where each sample's bytes lie in the file. The decode
// workers then read a sample with one pread of its range, through the same
// path (and caches) as a tar member; no HDF5 or LMDB call is made per
// sample, and nothing is opened per sample but the file itself. The file is
// parsed once, by IndexRecordFile, in a sandboxed worker process
// (worker_protocol.h's kProbe with kind kProbeHdf5 / kProbeLmdb): stokerd
// links neither libhdf5 nor liblmdb, so a hostile file can crash a worker,
// never the daemon.
//
// What can be indexed, and why the rest is refused (each refusal names the
// fix):
//  - HDF5: a dataset (named by its path in the file, "x" or "/train/x") of
//    unsigned 8-bit integers shaped N x H x W (grey) or N x H x W x C (C 1
//    or 3), or a 1-D dataset of variable-length byte strings (h5py's
//    vlen_dtype(np.uint8): an encoded image each, its bytes found in HDF5's
//    global heap; empty ones are left out with a warning), stored
//    contiguous or in uncompressed chunks of whole images (h5py's default,
//    and PatchCamelyon's). A compressed dataset (gzip, lzf, ...) has no byte
//    range per image: `h5repack -l CONTI` (Debian's hdf5-tools) rewrites
//    it. A raw image reaches the decoders as the PNM image of the same
//    pixels (PIL.Image.fromarray(x[i]) is what torchvision sees).
//  - LMDB: the main database's values, each an encoded image (or raw
//    pixels of the shape RecordTarget gives: a value of another size fails
//    as a sample). Keys that are
//    decimal integers ("17", "00000017") are samples in numeric order, the
//    others (metadata such as "__len__" or "__keys__") are left out with a
//    warning; with no decimal key at all, every key is a sample, in LMDB's
//    byte order. Empty values are left out (a warning counts them).
//
// Thread-safe: IndexRecordFile keeps its state on its stack.

#ifndef STOKER_SERVER_DATASET_RECORDS_H_
#define STOKER_SERVER_DATASET_RECORDS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker {

enum class RecordKind : uint32_t { kHdf5 = 1, kLmdb = 2 };

// What to index. Paths are relative to the data root (canonical, as
// Dataset::path gives them).
struct RecordTarget {
  RecordKind kind = RecordKind::kHdf5;
  // The HDF5 file, or the LMDB's data file (its folder's "data.mdb").
  std::string file;
  // HDF5: the images' dataset inside `file`. Default kDefaultRecordImages.
  std::string images_key;
  // Where the labels are: a file (HDF5 if its name ends in .h5, .hdf5 or
  // .he5, else text: one integer a line, a line a sample, in sample order),
  // or "" for `file` itself (HDF5 only: its `labels_key` dataset when it has
  // one; else, and for an LMDB, every label is -1).
  std::string labels_file;
  // The labels' dataset in an HDF5 labels file. Default
  // kDefaultRecordLabels. Any integer type; N values in any shape (PCam's y
  // is N x 1 x 1 x 1).
  std::string labels_key;
  // LMDB: its values are raw height x width x channels uint8 pixels (all 0:
  // encoded images). RecordIndex's shape is this.
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;
};

// PatchCamelyon's names.
inline constexpr char kDefaultRecordImages[] = "x";
inline constexpr char kDefaultRecordLabels[] = "y";

// What indexing gave: per sample, its byte range in the file and its label.
struct RecordIndex {
  // Raw image arrays (HDF5): every sample is height x width x channels
  // bytes, row-major. All 0: the values are encoded images (LMDB).
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 0;
  std::vector<uint64_t> offsets;  // absolute, in the file
  std::vector<uint64_t> lengths;  // > 0
  std::vector<int64_t> labels;    // -1: none
  // What names each sample to a person (display: "file:row"): its row in
  // the HDF5 dataset, or its LMDB key's number (its position in LMDB's
  // order for keys that are not numbers).
  std::vector<uint64_t> rows;
  std::string warning;            // what was left out, for the log ("" : nothing)
};

// At most this many samples in one record file (the index's memory).
inline constexpr uint64_t kMaxRecords = uint64_t{1} << 28;

// Indexes `target` beneath the directory `root_fd`. Runs the HDF5 or LMDB
// library on the file: call it in a sandboxed process (the daemon's go
// through worker_protocol.h's kProbe). Errors: OpenBeneath's for the files;
// NOT_FOUND for a missing images or labels dataset (the message lists what
// the file holds); INVALID_ARGUMENT for a file that is not HDF5 / LMDB, a
// dataset of another type or shape, labels whose count is not the images';
// FAILED_PRECONDITION for a layout without byte ranges (compressed, compact,
// chunks that split an image: the message names h5repack); OUT_OF_RANGE for
// more than kMaxRecords samples or ranges past the file's end.
absl::StatusOr<RecordIndex> IndexRecordFile(int root_fd, const RecordTarget& target);

// Whether `path` is named as an HDF5 file is (.h5, .hdf5, .he5, .H5): how
// AUTO picks kHdf5, and how a labels file is told from a text one.
bool NamedLikeHdf5(std::string_view path);

// The PNM header ("P5"/"P6") that makes `height` x `width` x `channels`
// (1 or 3) raw bytes a PNM image: what a worker puts before a raw record's
// pixels so that the decoders read it as the image it is.
std::string PnmHeader(uint32_t height, uint32_t width, uint32_t channels);

}  // namespace stoker

#endif  // STOKER_SERVER_DATASET_RECORDS_H_
