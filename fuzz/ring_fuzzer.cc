// libFuzzer target: the client's checks of a ring it maps from shared memory,
// ring::ValidateHeader, ring::ValidateRecord and ring::ValidateFieldRecord
// (proto/stoker/ring_layout.h), on arbitrary bytes.
//
// The invariant a reader relies on: whenever validation passes, every byte the
// header and the records imply (descriptors, records with their field
// records, slot data, every field's rooms, and a sample's value of the shape
// its field record gives, in the last room of the last slot) lies inside the
// mapping. The mapping is a buffer whose bytes past `mapped_bytes` are
// poisoned, and the ends of every implied range are read, so ASan checks it
// too.
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
//            then (field index byte, FieldRecord) pairs, as many as the
//            bytes hold.
// The valid header has three fields: a fixed uint8 image of the slot's
// bytes' share, an int64 label, and boxes (float32, up to 3 x 4).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
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
  const uint64_t image = 1 + ((data[3] | (data[4] << 8)) % 65536) / batch;
  ring::FieldSpec fields[3] = {};
  auto field = [&fields](int k, const char* name, uint32_t dtype, uint32_t rank,
                         std::initializer_list<uint32_t> bound, uint64_t stride, bool fixed) {
    ring::FieldSpec& f = fields[k];
    std::memcpy(f.name, name, std::strlen(name));
    f.dtype = dtype;
    f.rank = rank;
    std::copy(bound.begin(), bound.end(), f.max_shape);
    f.stride = stride;
    f.flags = fixed ? ring::kFieldFixedShape : 0;
  };
  field(0, ring::kImageField, ring::kUint8, 3, {1, static_cast<uint32_t>(image), 1}, image, true);
  field(1, ring::kLabelField, ring::kInt64, 0, {}, 8, true);
  field(2, ring::kBoxesField, ring::kFloat32, 2, {3, 4}, 48, false);
  uint64_t slot_data = 0;
  if (!ring::LayoutFields(fields, 3, batch, &slot_data)) Fail("LayoutFields refused sane sizes");
  ring::Geometry g;
  if (!ring::ComputeGeometry(slots, batch, 3, slot_data, &g)) {
    Fail("ComputeGeometry refused sane sizes");
  }
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
    h.field_count = 3;
    h.layout = ring::kNHWC;
    std::copy(fields, fields + 3, h.fields);
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
  for (uint32_t k = 0; k < h.field_count; ++k) {
    if (u128{h.fields[k].offset} + u128{h.fields[k].stride} * h.batch_size > h.slot_bytes) {
      Fail("a field whose rooms overflow their slot passed");
    }
  }
  const Mapping map = Map(static_cast<size_t>(mapped));
  std::memcpy(map.base, raw, std::min(sizeof(raw), map.size));
  Touch(map, 0, ring::kHeaderBytes);
  const u128 descriptors_end = u128{h.descriptor_offset} + u128{h.descriptor_stride} * h.slot_count;
  if (descriptors_end > h.data_offset) Fail("descriptors overlap the data area");
  for (uint32_t s = 0; s < h.slot_count; ++s) {
    Touch(map, u128{h.descriptor_offset} + u128{h.descriptor_stride} * s,
          sizeof(ring::SlotDescriptor) + u128{h.batch_size} * ring::RecordBytes(h.field_count));
    Touch(map, u128{h.data_offset} + u128{h.slot_bytes} * s, h.slot_bytes);
  }
  if (ring::RecordBytes(h.field_count) * u128{h.batch_size} + sizeof(ring::SlotDescriptor) >
      h.descriptor_stride) {
    Fail("records that overflow their descriptor passed");
  }

  // Field records, copied out of shared memory as the client does, each
  // checked against its field; the value lies in the last sample's room of
  // the last slot, at the end of the mapping.
  const u128 last_slot = u128{h.data_offset} + u128{h.slot_bytes} * (h.slot_count - 1);
  uint8_t k = 0;
  ring::FieldRecord r;
  while (in.Take(&k, 1) && in.Take(&r, sizeof(r))) {
    const ring::FieldSpec& f = h.fields[k % h.field_count];
    uint64_t bytes = 0;
    if (ring::ValidateFieldRecord(r, f, &bytes) != nullptr) continue;
    if (bytes > f.stride) Fail("a value larger than its room passed");
    u128 shape_bytes = ring::DTypeBytes(f.dtype);
    for (uint32_t d = 0; d < f.rank; ++d) shape_bytes *= r.shape[d];
    for (uint32_t d = f.rank; d < ring::kMaxRank; ++d) {
      if (r.shape[d] != 0) Fail("a dimension past the rank passed");
    }
    // A reader sizes its view from the shape: it must be the bytes named.
    if (shape_bytes != bytes) Fail("a shape whose bytes are not the value's passed");
    Touch(map, last_slot + f.offset + u128{f.stride} * (h.batch_size - 1), bytes);
  }
  return 0;
}
