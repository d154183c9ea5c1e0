// libFuzzer target: the client's checks of a ring it maps from shared memory,
// ring::ValidateHeader and ring::ValidateRecord (proto/stoker/ring_layout.h),
// on arbitrary bytes.
//
// The invariant a reader relies on: whenever validation passes, every byte the
// header and the records imply (descriptors, records, slot data, a sample at
// offset..offset+bytes, and height * width * channels elements of the dtype
// from the offset) lies inside the mapping. The mapping is a buffer whose
// bytes past `mapped_bytes` are poisoned, and the ends of every implied range
// are read, so ASan checks it too.
//
// Input:
//   [0]      mode: even: the header is raw input bytes; odd: a valid header
//            for the geometry, then patched by (offset, byte) pairs
//   [1]      slot count - 1 (mod 8); [2] batch size - 1 (mod 64)
//   [3..4]   slot data bytes - 1 (mod 64 KiB)
//   [5]      mapped_bytes: the geometry's total, minus/plus [5] % 16 - 8 pages
//            and bytes (a mapping that is too small must be refused)
//   [6..7]   number of header patch pairs (mode odd) / ignored
//   then     the header (raw: sizeof(RingHeader) bytes) or the patch pairs,
//            then SampleRecords, as many as the bytes hold.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sanitizer/asan_interface.h"
#include "stoker/ring_layout.h"

namespace {

namespace ring = stoker::ring;
using u128 = unsigned __int128;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "ring_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

volatile uint8_t sink;

// The largest geometry the input can ask for, plus slack for mapped_bytes.
constexpr size_t kMaxMapBytes = 2u << 20;

// A "mapping" of `bytes`: a static buffer whose tail past `bytes` is poisoned
// (allocating one per input would make the target a hundred times slower).
struct Mapping {
  uint8_t* base;
  size_t size;
};

Mapping Map(size_t bytes) {
  static std::vector<uint8_t>* buf = new std::vector<uint8_t>(kMaxMapBytes);
  if (bytes > kMaxMapBytes) Fail("geometry larger than the fuzzer's buffer");
  ASAN_UNPOISON_MEMORY_REGION(buf->data(), kMaxMapBytes);
  ASAN_POISON_MEMORY_REGION(buf->data() + bytes, kMaxMapBytes - bytes);
  return {buf->data(), bytes};
}

void Touch(const Mapping& map, u128 offset, u128 bytes) {
  if (bytes == 0) return;
  if (offset + bytes > map.size) Fail("validated bytes lie outside the mapping");
  sink = map.base[static_cast<size_t>(offset)];
  sink = map.base[static_cast<size_t>(offset + bytes - 1)];
}

struct Reader {
  const uint8_t* p;
  size_t n;
  bool Take(void* out, size_t bytes) {
    if (n < bytes) return false;
    std::memcpy(out, p, bytes);
    p += bytes;
    n -= bytes;
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint32_t slots = 1 + data[1] % 8;
  const uint32_t batch = 1 + data[2] % 64;
  const uint64_t slot_data = 1 + ((data[3] | (data[4] << 8)) % 65536);
  ring::Geometry g;
  if (!ring::ComputeGeometry(slots, batch, slot_data, &g)) Fail("ComputeGeometry refused sane sizes");
  const int delta = data[5] % 16 - 8;
  int64_t mapped = static_cast<int64_t>(g.total_bytes) + delta * int64_t{ring::kPageBytes} + delta;
  if (mapped < 0) mapped = 0;
  const bool patched = data[0] % 2 == 1;
  const uint32_t patches = data[6] | (data[7] << 8);
  Reader in{data + 8, size - 8};

  // The header as it sits in shared memory (atomics are plain words there).
  alignas(ring::RingHeader) uint8_t raw[sizeof(ring::RingHeader)] = {};
  if (patched) {
    ring::RingHeader h{};
    h.magic = ring::kMagic;
    h.version = ring::kLayoutVersion;
    h.header_bytes = ring::kHeaderBytes;
    h.total_bytes = g.total_bytes;
    h.descriptor_offset = g.descriptor_offset;
    h.descriptor_stride = g.descriptor_stride;
    h.data_offset = g.data_offset;
    h.slot_bytes = g.slot_bytes;
    h.slot_count = slots;
    h.batch_size = batch;
    h.channels = 3;
    h.dtype = ring::kUint8;
    h.layout = ring::kNHWC;
    std::memcpy(raw, static_cast<const void*>(&h), sizeof(h));
    for (uint32_t i = 0; i < patches % 64; ++i) {
      uint8_t pair[3];
      if (!in.Take(pair, sizeof(pair))) break;
      raw[(pair[0] | (pair[1] << 8)) % sizeof(raw)] = pair[2];
    }
  } else if (!in.Take(raw, sizeof(raw))) {
    return 0;
  }
  ring::RingHeader h;
  std::memcpy(static_cast<void*>(&h), raw, sizeof(h));

  const char* why = ring::ValidateHeader(h, static_cast<uint64_t>(mapped), g, slots, batch);
  if (why != nullptr) {
    if (why[0] == '\0') Fail("a refusal without a reason");
    return 0;
  }
  // Valid: what the header implies must lie in the mapping.
  if (static_cast<uint64_t>(mapped) < g.total_bytes || h.total_bytes > static_cast<uint64_t>(mapped)) {
    Fail("a header larger than its mapping passed");
  }
  if (h.sample_bytes != 0 && u128{h.sample_bytes} * h.batch_size > h.slot_bytes) {
    Fail("samples that overflow their slot passed");
  }
  const u128 box_entries = u128{h.batch_size} * h.box_stride;
  if (h.box_stride != 0 && (u128{h.box_offset} + 16 * box_entries > h.slot_bytes ||
                            u128{h.box_label_offset} + 8 * box_entries > h.slot_bytes ||
                            u128{h.box_flag_offset} + box_entries > h.slot_bytes)) {
    Fail("box arrays that overflow their slot passed");
  }
  const Mapping map = Map(static_cast<size_t>(mapped));
  std::memcpy(map.base, raw, std::min(sizeof(raw), map.size));
  Touch(map, 0, ring::kHeaderBytes);
  const u128 descriptors_end = u128{h.descriptor_offset} + u128{h.descriptor_stride} * h.slot_count;
  if (descriptors_end > h.data_offset) Fail("descriptors overlap the data area");
  for (uint32_t s = 0; s < h.slot_count; ++s) {
    Touch(map, u128{h.descriptor_offset} + u128{h.descriptor_stride} * s,
          sizeof(ring::SlotDescriptor) + u128{h.batch_size} * sizeof(ring::SampleRecord));
    Touch(map, u128{h.data_offset} + u128{h.slot_bytes} * s, h.slot_bytes);
  }

  // Records, copied out of shared memory as the client does, each checked
  // against the slot; the last slot is the one at the end of the mapping.
  const u128 last_slot = u128{h.data_offset} + u128{h.slot_bytes} * (h.slot_count - 1);
  ring::SampleRecord r;
  while (in.Take(&r, sizeof(r))) {
    if (ring::ValidateRecord(r, h.slot_bytes, h.dtype) != nullptr) continue;
    if (u128{r.offset} + r.bytes > h.slot_bytes) Fail("a record outside its slot passed");
    if (r.status > ring::kSampleFailed || r.channels > ring::kMaxChannels) {
      Fail("a record with a bad status or channel count passed");
    }
    const u128 shape_bytes =
        u128{r.height} * r.width * r.channels * ring::DTypeBytes(h.dtype);
    // Whatever its status: a reader sizes a failed sample's view from its
    // shape too.
    if (shape_bytes != r.bytes) {
      Fail("a record whose shape needs more (or fewer) bytes than it names passed");
    }
    Touch(map, last_slot + r.offset, r.bytes);
    Touch(map, last_slot + r.offset, shape_bytes);
    // The sample's mask, as the client checks it (the header's mask dtype).
    if (ring::ValidateMask(r, h.slot_bytes, h.mask_dtype) != nullptr) continue;
    if (h.mask_dtype == 0 ? r.mask_bytes != 0 : u128{r.mask_offset} + r.mask_bytes > h.slot_bytes) {
      Fail("a mask outside its slot passed");
    }
    if (h.mask_dtype != 0 &&
        u128{r.height} * r.width * ring::MaskDTypeBytes(h.mask_dtype) != r.mask_bytes) {
      Fail("a mask whose shape needs more (or fewer) bytes than it names passed");
    }
    if (r.mask_bytes != 0) Touch(map, last_slot + r.mask_offset, r.mask_bytes);
    // Its boxes, as the client reads them: the first box_count entries of
    // its place in each box array (the index any sample of the batch).
    if (ring::ValidateBoxes(r, h.box_stride) != nullptr) continue;
    if (r.box_count > h.box_stride) Fail("more boxes than a sample's room passed");
    if (r.box_count != 0) {
      const u128 first = u128{h.batch_size - 1} * h.box_stride;
      Touch(map, last_slot + h.box_offset + 16 * first, 16 * u128{r.box_count});
      Touch(map, last_slot + h.box_label_offset + 8 * first, 8 * u128{r.box_count});
      Touch(map, last_slot + h.box_flag_offset + first, r.box_count);
    }
  }
  return 0;
}
