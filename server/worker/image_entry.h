// An evaluation pipeline's image in the prepared cache (--prepared-cache):
// a session whose ops all draw nothing (Resize + CenterCrop, the eval
// preset; pipeline/op_table.h's `deterministic`) gives each file the same
// output every epoch, so the worker that computes it keeps the output bytes
// as one small file, and later epochs (and later daemons) copy them into
// the ring instead of decoding again. The same pixels: the entry holds the
// bytes the pipeline wrote.
//
// An entry is named by what it is (the file's path and the session's
// prepared_recipe: its effective pipeline and the decode scales the
// daemon's calibration allows) and keyed by the file's identity too (inode,
// size, mtime, ctime, the member's range: the transcode cache's key): a changed file's entry is stale, never
// served, and is rewritten. Layout (little-endian):
//      0  magic "STKIv1\0\0"       32  format, bytes read (u32, u32)
//      8  key (u64)                40  payload bytes (u64)
//     16  height, width (u32 x 2)  48  payload hash (u64)
//     24  channels, reserved       56  header hash (u64, of bytes 0..55)
//     64  the output's bytes
// Written through ".tmp-NAME" and a rename, as every prepared entry; a torn
// or flipped entry fails its hashes and is recomputed. The daemon's budget
// (server/engine/prepared_cache_budget.h) counts and removes entries.
//
// Thread-safe: pure functions over the folder's fd.

#ifndef STOKER_SERVER_WORKER_IMAGE_ENTRY_H_
#define STOKER_SERVER_WORKER_IMAGE_ENTRY_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/engine/transcode_cache.h"  // SourceIdentity

namespace stoker::worker {

// "<16 hex digits of id>.stki".
std::string ImageEntryName(uint64_t id);

struct ImageEntryInfo {
  uint32_t height = 0, width = 0, channels = 0;
  uint32_t format = 0;  // image::ImageFormat of the file
  uint64_t bytes = 0;   // of the output
};

// The entry's id (its name: the file's path and `recipe`) and key (its
// identity too: transcode_cache.h's IdentityOf, the transcode cache's).
void ImageEntryIds(uint64_t recipe, const SourceIdentity& file, uint64_t* id, uint64_t* key);

// Copies entry `name`'s output into `out` (at most `capacity` bytes) and
// fills `info`; false when there is none, it is not whole, its key is not
// `key`, or it does not fit.
bool ReadImageEntry(int dir_fd, const std::string& name, uint64_t key, uint8_t* out,
                    uint64_t capacity, ImageEntryInfo* info);

// Writes `info.bytes` of `data` as entry `name`. ALREADY_EXISTS when
// another worker is writing it; the errno's status otherwise.
absl::Status WriteImageEntry(int dir_fd, const std::string& name, uint64_t key,
                             const uint8_t* data, const ImageEntryInfo& info);

// The bytes an entry of `info.bytes` takes.
inline uint64_t ImageEntryBytes(const ImageEntryInfo& info) { return 64 + info.bytes; }

}  // namespace stoker::worker

#endif  // STOKER_SERVER_WORKER_IMAGE_ENTRY_H_
