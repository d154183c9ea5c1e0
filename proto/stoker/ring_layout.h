// The binary layout of a session's shared-memory ring: the one contract for
// pixels between stokerd, its workers and the client. Included by all three;
// nothing else defines where bytes lie in the ring.
//
// Glossary
//   ring        One anonymous shared-memory file per session (memfd_create,
//               sealed against shrinking), named in no file system: it
//               lives while a process holds it or maps it, so no death
//               leaves it behind, no other user can predict, squat or open
//               it, and /dev/shm's size does not limit it. The client gets
//               its fd over the daemon's ring socket (the handover below).
//   slot        Room for one batch: a SlotDescriptor in the descriptor area
//               and `slot_bytes` of page-aligned data in the data area.
//   sequence    The session's batch counter, 0, 1, 2, ... Batch n lives in
//               slot n % depth (SlotOf), so the client reads batches in order
//               and the depth is the prefetch depth.
//   depth       How many of the ring's slot_count slots batches cycle
//               through: slot_count, or fewer when the daemon may deepen the
//               ring later (see "Depth" below). The slots beyond the depth
//               hold no pages of memory until the ring deepens into them.
//   field       A sample is an ordered set of named fields (ring layout 5):
//               each a dtype and a shape of up to kMaxRank dimensions,
//               bounded at attach. The header's field table (FieldSpec)
//               gives each field its rooms in a slot's data: sample i's
//               value of field f lies at f.offset + i * f.stride, at most
//               f.stride bytes; the sample's record says its actual shape
//               (FieldRecord), never where it lies. A still-image session
//               has, in this order:
//                 "image"      uint8/float16/float32 [H, W, 3] (NHWC) or
//                              [3, H, W] (NCHW, the header's `layout`);
//                              fixed shape unless the pipeline makes any
//                              size (then its dims are unbounded and its
//                              room is the most its ops can make);
//                 "label"      int64 [] (the class index);
//                 "mask"       segmentation sets: uint8/uint16 [H, W],
//                              moved with the image;
//                 "boxes"      detection sets: float32 [N, 4], XYXY pixels
//                              of the output, N <= the most boxes any
//                              sample of the dataset has;
//                 "box_labels" int64 [N] and "box_flags" uint8 [N] (COCO's
//                              iscrowd) beside them.
//               The daemon writes a sample's input boxes into their rooms
//               before its worker runs; the worker moves them with the
//               image and keeps those the rules keep, in place. A fixed-
//               shape field (kFieldFixedShape) has every sample at its
//               bound and a stride of exactly its bytes, so the batch's
//               values are one contiguous [batch, ...] array.
//
// A slot's life (each arrow is one atomic store to `state`; the writer of a
// state is the only writer of the slot's other fields while it holds it):
//   1. kFree -> kFilling   The daemon picks the next sequence n whose slot is
//                          free, writes sequence/epoch/sample_count and hands
//                          each sample to a worker process.
//   2. (filling)           Workers decode straight into the slot's data area
//                          (their mapping covers only the data area) and
//                          report back over their private socket. A worker
//                          that dies has its samples redone by another.
//   3. kFilling -> kReady  When every sample is written the daemon fills the
//                          per-sample records (dataset index, status, each
//                          field's shape), the labels and the batch status, then stores kReady
//                          (release order) and wakes the slot's futex.
//   4. kReady -> kLeased   The client waits (futex, with a deadline) until
//                          slot n % slot_count holds sequence n in kReady,
//                          and takes it by compare-and-swap. It validates
//                          every record against the sizes it learned at
//                          attach before it exposes a byte.
//   5. kLeased -> kFree    When the lease ends (its Batch is destroyed, or
//                          the device copy reading it has completed) the
//                          client stores kFree, bumps `release_count` and
//                          wakes that futex, on which a daemon thread waits.
//
// Depth (the `depth` word; a ring that never deepens keeps its first value):
//   a. The word says: batches from sequence `from` on live in slot n % count,
//      those before it in slot n % prev (PackDepth). At creation it is
//      (0, depth, depth).
//   b. The daemon changes it (one atomic store) only when the client has
//      released at least `from` batches (so no batch the client may still
//      ask for maps by an older word), before it starts batch `from`, with
//      `from` a multiple of both prev and count: batch `from` is in slot 0
//      by either rule, so a client that read the old word while waiting for
//      it waits on the right slot.
//   c. The daemon starts a batch only in a free slot, whichever batch held
//      it last; a depth only grows from the first one (never below it), so a
//      client that holds fewer batches than the first depth never holds the
//      slot of the batch it asks for.
//   d. The client reads the word (acquire) for every batch it asks for, and
//      trusts it only after SlotOf checks it against slot_count.
//
// Liveness, both ways, never by spinning:
//   - The daemon bumps `daemon_heartbeat` every kHeartbeatPeriodMs. A client
//     whose futex wait times out checks it; one that stood still for
//     `heartbeat_timeout_ms` (from Attach) means the daemon is gone.
//   - `daemon_state` turns kDraining at shutdown (wakes every slot futex).
//   - The client's liveness is its gRPC KeepAlive stream, not the ring.
//   - The client adds the time each Next waited to `client_wait_ns` and
//     `client_wait_hist`, which the daemon reports as the data stall.
//
// The handover (how the client gets the ring's fd):
//   i.   Attach answers with the ring's geometry and a `ring_token`: 32 hex
//        characters from getrandom, known to the attaching client alone.
//   ii.  The client connects a SOCK_SEQPACKET socket to the ring socket: its
//        own path to the daemon's gRPC socket plus kRingSocketSuffix
//        (created beside it, with the same permission bits).
//   iii. It sends one message: the token. The daemon answers one message:
//        kHandoverOk with the ring's fd as SCM_RIGHTS ancillary data, or
//        kHandoverRefused followed by the reason (an unknown or ended
//        session), without an fd. The client maps the fd, closes it, and
//        validates the header (below) before trusting a byte.
//   iv.  A client that gets no answer within kHandoverTimeoutMs gives up
//        with an error naming the ring socket.
//
// Every multi-byte field is little-endian host order; the daemon and the
// client share a host. All sizes and offsets are in bytes.

#ifndef STOKER_PROTO_RING_LAYOUT_H_
#define STOKER_PROTO_RING_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace stoker::ring {

inline constexpr uint64_t kMagic = 0x314e49524b4f5453ULL;  // "STOKRIN1"
inline constexpr uint32_t kLayoutVersion = 6;  // 5: samples as typed fields; 6: 16 of them
inline constexpr uint64_t kPageBytes = 4096;
inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint32_t kMaxSlots = 256;
inline constexpr uint32_t kMaxBatchSize = 65536;
inline constexpr uint32_t kErrorBytes = 512;
inline constexpr uint32_t kHeartbeatPeriodMs = 100;
inline constexpr uint32_t kWaitBuckets = 32;
inline constexpr uint32_t kMaxBoxesPerSample = 1u << 20;
// Sample fields (FieldSpec).
inline constexpr uint32_t kMaxFields = 16;
inline constexpr uint32_t kMaxRank = 5;
inline constexpr uint32_t kFieldNameBytes = 24;  // NUL-padded, so at most 23 characters
inline constexpr uint64_t kFieldAlign = 64;      // each field's first room
inline constexpr uint64_t kMaxRoomBytes = uint64_t{1} << 40;
// The handover (see above).
inline constexpr char kRingSocketSuffix[] = ".ring";
inline constexpr uint32_t kRingTokenChars = 32;
inline constexpr char kHandoverOk = 'K';
inline constexpr char kHandoverRefused = 'R';
inline constexpr uint32_t kHandoverTimeoutMs = 5000;

// Bucket of a latency in the ring's wait histogram: 0 for under 2 us, b for
// [2^b, 2^(b+1)) us, the last bucket open-ended.
inline constexpr uint32_t WaitBucket(uint64_t ns) {
  uint64_t us = ns / 1000;
  uint32_t b = 0;
  while (us > 1 && b < kWaitBuckets - 1) {
    us >>= 1;
    ++b;
  }
  return b;
}

enum SlotState : uint32_t {
  kFree = 0,
  kFilling = 1,
  kReady = 2,
  kLeased = 3,
};

enum DaemonState : uint32_t {
  kRunning = 0,
  kDraining = 1,  // no new batches; the client reports an error when it runs dry
  kStopped = 2,
};

enum SampleStatus : uint32_t {
  kSampleOk = 0,
  // The planned sample failed; the pixels are those of the replacement whose
  // dataset index the record names (policy `skip`).
  kSampleReplaced = 1,
  // The sample failed and was not replaced; its pixels are zero.
  kSampleFailed = 2,
};

enum BatchStatus : uint32_t {
  kBatchOk = 0,
  // A sample failed under policy `error`; `error` says which and why.
  kBatchFailed = 1,
};

enum DType : uint32_t {
  kUint8 = 1,
  kFloat32 = 2,
  kFloat16 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBFloat16 = 8,
};

enum Layout : uint32_t {
  kNHWC = 1,
  kNCHW = 2,
};

// Bytes per value of a DType; 0 for anything else.
inline constexpr uint32_t DTypeBytes(uint32_t dtype) {
  switch (dtype) {
    case kUint8: return 1;
    case kUint16: case kInt16: case kFloat16: case kBFloat16: return 2;
    case kFloat32: case kInt32: return 4;
    case kInt64: return 8;
    default: return 0;
  }
}

enum FieldFlags : uint32_t {
  // Every sample's shape is max_shape, and stride is exactly its bytes.
  kFieldFixedShape = 1,
};

// One field of every sample (glossary: "field"), in the header's table.
// max_shape[d] == 0 leaves dimension d unbounded: any size whose bytes fit
// the room (an any-size image); dimensions past `rank` are 0.
struct FieldSpec {
  char name[kFieldNameBytes];  // NUL-padded
  uint32_t dtype;              // DType
  uint32_t rank;               // 0 (a scalar) .. kMaxRank
  uint32_t max_shape[kMaxRank];
  uint32_t flags;              // FieldFlags
  uint64_t offset;             // sample 0's room, from the slot's data start
  uint64_t stride;             // bytes from one sample's room to the next's
};

// The still-image fields' names (glossary: "field"), in their ring order.
inline constexpr char kImageField[] = "image";
inline constexpr char kLabelField[] = "label";
inline constexpr char kMaskField[] = "mask";
inline constexpr char kBoxesField[] = "boxes";
inline constexpr char kBoxLabelsField[] = "box_labels";
inline constexpr char kBoxFlagsField[] = "box_flags";
// A video session's sample: one clip, [T, 3, H, W] or [3, T, H, W]
// (AttachRequest.clips' layout), beside its "label".
inline constexpr char kClipField[] = "clip";
// A volume session's patches ([S, C, X, Y, Z]) and their label volumes
// ([S, 1, X, Y, Z]), MONAI's axis order (AttachRequest.volumes).
inline constexpr char kVolumeField[] = "volume";
inline constexpr char kVolumeLabelField[] = "volume_label";
// A multi-view sample's views (PipelineSpec.views): "view0", "view1", ...,
// each laid out as the image field would be.
inline constexpr char kViewFieldPrefix[] = "view";

// A field's name, up to its NUL (never past kFieldNameBytes).
inline std::string_view FieldName(const FieldSpec& f) {
  size_t n = 0;
  while (n < kFieldNameBytes && f.name[n] != '\0') ++n;
  return std::string_view(f.name, n);
}

// Whether two field specs say the same (every byte that has a meaning).
inline bool SameField(const FieldSpec& a, const FieldSpec& b) {
  for (uint32_t k = 0; k < kFieldNameBytes; ++k) {
    if (a.name[k] != b.name[k]) return false;
  }
  for (uint32_t d = 0; d < kMaxRank; ++d) {
    if (a.max_shape[d] != b.max_shape[d]) return false;
  }
  return a.dtype == b.dtype && a.rank == b.rank && a.flags == b.flags && a.offset == b.offset &&
         a.stride == b.stride;
}

// A sample's actual shape of one field: within its bound, its bytes within
// the field's stride. Dimensions past the rank are 0.
struct FieldRecord {
  uint32_t shape[kMaxRank];
  uint32_t reserved;
};

// At offset 0 of the ring, padded to kHeaderBytes. Written once by the daemon
// before the ring's name is given to anyone, except the "live" fields.
struct RingHeader {
  // -- Constant after creation --------------------------------------------
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;        // == kHeaderBytes
  uint64_t total_bytes;         // size of the ring's memory
  uint64_t descriptor_offset;   // page aligned
  uint64_t descriptor_stride;   // bytes per SlotDescriptor incl. its records
  uint64_t data_offset;         // page aligned
  uint64_t slot_bytes;          // data bytes per slot, page aligned
  uint32_t slot_count;
  uint32_t batch_size;          // sample records per slot
  uint32_t field_count;         // entries of `fields` in use, 1..kMaxFields
  uint32_t layout;              // Layout: the order of the "image" field's dims
  uint64_t session_number;      // the daemon's session counter
  uint64_t batches_per_epoch;
  uint64_t total_batches;       // 0: without end
  FieldSpec fields[kMaxFields];

  // -- Live fields ----------------------------------------------------------
  alignas(64) std::atomic<uint32_t> daemon_state;  // DaemonState; futex word
  uint32_t reserved2;
  std::atomic<uint64_t> daemon_heartbeat;          // bumped by the daemon
  alignas(64) std::atomic<uint32_t> release_count; // bumped by the client; futex word
  uint32_t reserved3;
  std::atomic<uint64_t> batches_consumed;          // bumped by the client
  // The client's time waiting for batches in Next (the data stall): total
  // and a histogram per batch (WaitBucket). Written by the client only; the
  // daemon reads them for Status and trusts nothing in them.
  alignas(64) std::atomic<uint64_t> client_wait_ns;
  std::atomic<uint64_t> client_wait_hist[kWaitBuckets];
  // PackDepth(from, count, prev); written by the daemon only ("Depth").
  alignas(64) std::atomic<uint64_t> depth;
};

// Per sample in a slot, followed by the header's field_count FieldRecords
// (RecordBytes apart). Written by the daemon before kReady.
struct SampleRecord {
  uint64_t dataset_index;  // index into the dataset of the values delivered
  uint64_t planned_index;  // the dataset index the sampler planned here
  uint32_t status;         // SampleStatus
  uint32_t reserved;
};

struct SlotDescriptor {
  std::atomic<uint32_t> state;  // SlotState; futex word
  uint32_t batch_status;        // BatchStatus
  uint64_t sequence;
  uint64_t batch_in_epoch;
  uint32_t epoch;
  uint32_t sample_count;        // <= batch_size (the last batch may be short)
  char error[kErrorBytes];      // NUL-terminated when batch_status != kBatchOk
  // Followed by batch_size SampleRecords, each with its FieldRecords.
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(std::is_standard_layout_v<SlotDescriptor>);
static_assert(sizeof(RingHeader) <= kHeaderBytes);
static_assert(sizeof(SlotDescriptor) % 8 == 0);
static_assert(sizeof(SampleRecord) % 8 == 0);
static_assert(sizeof(FieldRecord) % 8 == 0);
static_assert(sizeof(FieldSpec) % 8 == 0);

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Bytes of one sample's record with its `field_count` FieldRecords.
inline constexpr uint64_t RecordBytes(uint32_t field_count) {
  return sizeof(SampleRecord) + uint64_t{field_count} * sizeof(FieldRecord);
}

// The bytes of a value of `shape` (the first `rank` entries) of `dtype`, if
// they are at most `room`; else false (overflow included).
inline bool ValueBytes(uint32_t dtype, uint32_t rank, const uint32_t* shape, uint64_t room,
                       uint64_t* bytes) {
  uint64_t b = DTypeBytes(dtype);
  if (b == 0 || rank > kMaxRank || b > room) return false;
  for (uint32_t d = 0; d < rank; ++d) {
    if (shape[d] != 0 && b > room / shape[d]) return false;
    b *= shape[d];
  }
  *bytes = b;
  return true;
}

// Lays out `n` fields in a slot's data for `batch_size` samples, in order,
// each from the next kFieldAlign boundary; sets their offsets and the slot's
// data bytes. The caller sets everything else (the stride too). False when
// a stride is over kMaxRoomBytes or n over kMaxFields.
inline bool LayoutFields(FieldSpec* fields, uint32_t n, uint32_t batch_size,
                         uint64_t* slot_data_bytes) {
  if (n > kMaxFields) return false;
  uint64_t end = 0;
  for (uint32_t f = 0; f < n; ++f) {
    if (fields[f].stride > kMaxRoomBytes) return false;
    fields[f].offset = AlignUp(end, kFieldAlign);
    end = fields[f].offset + fields[f].stride * batch_size;  // < 2^57 each: no overflow
  }
  *slot_data_bytes = end;
  return true;
}

// The depth word: `from` in the high 48 bits, count - 1 and prev - 1 in a
// byte each (both 1..kMaxSlots).
inline constexpr uint64_t PackDepth(uint64_t from, uint32_t count, uint32_t prev) {
  return (from << 16) | (uint64_t{(count - 1) & 0xff} << 8) | uint64_t{(prev - 1) & 0xff};
}
inline constexpr uint64_t DepthFrom(uint64_t word) { return word >> 16; }
inline constexpr uint32_t DepthCount(uint64_t word) { return ((word >> 8) & 0xff) + 1; }
inline constexpr uint32_t DepthPrev(uint64_t word) { return (word & 0xff) + 1; }

// The first sequence a change from depth `prev` to `count` may take effect
// at, given the next batch to start: a multiple of both (rule b).
inline constexpr uint64_t DepthChangeFrom(uint64_t next_seq, uint32_t prev, uint32_t count) {
  uint64_t a = prev, b = count;
  while (b != 0) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return AlignUp(next_seq, uint64_t{prev} / a * count);
}

// The slot of batch `seq` under depth word `word`, or slot_count when the
// word names a depth over slot_count (a corrupt ring: the reader must stop).
inline constexpr uint32_t SlotOf(uint64_t word, uint64_t seq, uint32_t slot_count) {
  const uint32_t depth = seq >= DepthFrom(word) ? DepthCount(word) : DepthPrev(word);
  if (depth > slot_count) return slot_count;
  return static_cast<uint32_t>(seq % depth);
}

// The geometry of a ring, computed the same way by daemon and client.
struct Geometry {
  uint64_t descriptor_offset = 0;
  uint64_t descriptor_stride = 0;
  uint64_t record_bytes = 0;  // RecordBytes(field_count)
  uint64_t data_offset = 0;
  uint64_t slot_bytes = 0;
  uint64_t total_bytes = 0;
};

// Returns false when the sizes are out of range or overflow.
inline bool ComputeGeometry(uint32_t slot_count, uint32_t batch_size, uint32_t field_count,
                            uint64_t slot_data_bytes, Geometry* g) {
  if (slot_count == 0 || slot_count > kMaxSlots) return false;
  if (batch_size == 0 || batch_size > kMaxBatchSize) return false;
  if (field_count == 0 || field_count > kMaxFields) return false;
  if (slot_data_bytes == 0 || slot_data_bytes > (uint64_t{1} << 40)) return false;
  g->descriptor_offset = kHeaderBytes;
  g->record_bytes = RecordBytes(field_count);
  g->descriptor_stride = sizeof(SlotDescriptor) + uint64_t{batch_size} * g->record_bytes;
  g->data_offset =
      AlignUp(g->descriptor_offset + g->descriptor_stride * slot_count, kPageBytes);
  g->slot_bytes = AlignUp(slot_data_bytes, kPageBytes);
  g->total_bytes = g->data_offset + g->slot_bytes * slot_count;
  return true;
}

inline SlotDescriptor* Descriptor(void* base, const Geometry& g, uint32_t slot) {
  return reinterpret_cast<SlotDescriptor*>(static_cast<char*>(base) + g.descriptor_offset +
                                           g.descriptor_stride * slot);
}

// Sample i's record in a slot, and its field records.
inline SampleRecord* Record(SlotDescriptor* d, const Geometry& g, uint32_t i) {
  return reinterpret_cast<SampleRecord*>(reinterpret_cast<char*>(d) + sizeof(SlotDescriptor) +
                                         g.record_bytes * i);
}
inline FieldRecord* FieldRecords(SampleRecord* r) {
  return reinterpret_cast<FieldRecord*>(reinterpret_cast<char*>(r) + sizeof(SampleRecord));
}

// Checks one field's spec (copied out of shared memory, or from Attach)
// against a slot of `slot_bytes` holding `batch_size` samples. Returns
// nullptr when every room it names is inside the slot.
inline const char* ValidateField(const FieldSpec& f, uint32_t batch_size, uint64_t slot_bytes) {
  bool named = f.name[0] != '\0';
  for (uint32_t k = 0; k < kFieldNameBytes && named; ++k) {
    const char c = f.name[k];
    if (c == '\0') break;
    named = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  }
  if (!named || f.name[kFieldNameBytes - 1] != '\0') return "bad field name";
  if (DTypeBytes(f.dtype) == 0) return "bad field dtype";
  if (f.rank > kMaxRank) return "bad field rank";
  for (uint32_t d = f.rank; d < kMaxRank; ++d) {
    if (f.max_shape[d] != 0) return "field bound past its rank";
  }
  if (f.offset % kFieldAlign != 0 || f.stride > kMaxRoomBytes || f.offset > slot_bytes ||
      f.stride * batch_size > slot_bytes - f.offset)  // < 2^57: no overflow
    return "field rooms outside the slot";
  bool bounded = true;
  for (uint32_t d = 0; d < f.rank; ++d) bounded = bounded && f.max_shape[d] != 0;
  uint64_t bytes = 0;
  if ((f.flags & kFieldFixedShape) != 0 &&
      (!bounded || !ValueBytes(f.dtype, f.rank, f.max_shape, f.stride, &bytes) ||
       bytes != f.stride))
    return "fixed-shape field whose stride is not its bytes";
  if ((f.flags & ~uint32_t{kFieldFixedShape}) != 0) return "unknown field flags";
  return nullptr;
}

// Checks a sample's actual shape of field `f` (copied out of shared memory
// first): within the bounds, at the bound for a fixed-shape field, and its
// bytes within the room. Returns nullptr when it is, and sets `bytes`.
inline const char* ValidateFieldRecord(const FieldRecord& r, const FieldSpec& f,
                                       uint64_t* bytes) {
  for (uint32_t d = 0; d < kMaxRank; ++d) {
    if (d >= f.rank ? r.shape[d] != 0
                    : (f.max_shape[d] != 0 && r.shape[d] > f.max_shape[d]) ||
                          ((f.flags & kFieldFixedShape) != 0 && r.shape[d] != f.max_shape[d]))
      return "field shape outside its bounds";
  }
  if (!ValueBytes(f.dtype, f.rank, r.shape, f.stride, bytes)) return "field larger than its room";
  return nullptr;
}

// Checks that a header read from shared memory describes a ring that fits in
// `mapped_bytes` and matches the geometry the caller expects, each of its
// fields' rooms inside a slot. Every size the reader later uses must come
// from `expected` and the fields Attach named (which the reader compares
// with the header's, SameField), not from the shared header.
// Returns nullptr when it is valid, else a static description of the fault.
inline const char* ValidateHeader(const RingHeader& h, uint64_t mapped_bytes,
                                  const Geometry& expected, uint32_t expected_slots,
                                  uint32_t expected_batch) {
  if (mapped_bytes < kHeaderBytes) return "mapping smaller than the header";
  if (h.magic != kMagic) return "bad magic";
  if (h.version != kLayoutVersion) return "unsupported layout version";
  if (h.header_bytes != kHeaderBytes) return "bad header size";
  if (h.slot_count != expected_slots || h.batch_size != expected_batch)
    return "slot count or batch size differ from Attach";
  if (h.total_bytes != expected.total_bytes || h.total_bytes > mapped_bytes)
    return "ring size differs from Attach or exceeds the mapping";
  if (h.field_count == 0 || h.field_count > kMaxFields ||
      RecordBytes(h.field_count) != expected.record_bytes)
    return "field count differs from Attach";
  if (h.descriptor_offset != expected.descriptor_offset ||
      h.descriptor_stride != expected.descriptor_stride || h.data_offset != expected.data_offset ||
      h.slot_bytes != expected.slot_bytes)
    return "ring geometry differs from Attach";
  if (h.layout != kNHWC && h.layout != kNCHW) return "bad layout";
  for (uint32_t f = 0; f < h.field_count; ++f) {
    if (const char* why = ValidateField(h.fields[f], h.batch_size, h.slot_bytes)) return why;
  }
  return nullptr;
}

// Checks one record's status (copied out of shared memory first).
inline const char* ValidateRecord(const SampleRecord& r) {
  return r.status > kSampleFailed ? "bad sample status" : nullptr;
}

}  // namespace stoker::ring

#endif  // STOKER_PROTO_RING_LAYOUT_H_
