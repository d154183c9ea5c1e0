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
//   sample      One image's place in a slot's data: `sample_bytes` from
//               `index * sample_bytes` (fixed shape); for any-size outputs
//               (height 0) the record's offset/bytes say (the daemon puts
//               sample i at i times the most its ops can make, the header's
//               sample_bytes then being 0).
//   mask        Segmentation sets: a sample's label map (height x width
//               values of `mask_dtype`), after the slot's images from
//               `mask_offset` (MaskOffset), `mask_sample_bytes` apart; the
//               record's mask_offset/mask_bytes say where.
//   boxes       Detection sets: each sample's boxes (float32 XYXY pixels of
//               its output), their labels (int64) and flags (uint8, COCO's
//               iscrowd), each kind in its own array after the masks
//               (PlaceBoxes), `box_stride` entries a sample (the most boxes
//               any sample of the dataset has): sample i's from entry
//               i * box_stride, the record's box_count of them. The daemon
//               writes a sample's input boxes there before its worker runs;
//               the worker moves them with the image and keeps those the
//               rules keep, in place.
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
//                          per-sample records (label, dataset index, status,
//                          shape) and the batch status, then stores kReady
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
#include <type_traits>

namespace stoker::ring {

inline constexpr uint64_t kMagic = 0x314e49524b4f5453ULL;  // "STOKRIN1"
inline constexpr uint32_t kLayoutVersion = 4;  // 4: memfd rings, handed over
inline constexpr uint64_t kPageBytes = 4096;
inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint32_t kMaxSlots = 256;
inline constexpr uint32_t kMaxBatchSize = 65536;
inline constexpr uint32_t kMaxChannels = 4;
inline constexpr uint32_t kErrorBytes = 512;
inline constexpr uint32_t kHeartbeatPeriodMs = 100;
inline constexpr uint32_t kWaitBuckets = 32;
inline constexpr uint32_t kMaxBoxesPerSample = 1u << 20;
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
  kUint16 = 4,  // masks only
};

enum Layout : uint32_t {
  kNHWC = 1,
  kNCHW = 2,
};

inline constexpr uint32_t DTypeBytes(uint32_t dtype) {
  return dtype == kUint8 ? 1 : dtype == kFloat32 ? 4 : dtype == kFloat16 ? 2 : 0;
}
// A mask's bytes per value: 1 (kUint8), 2 (kUint16), 0 for anything else.
inline constexpr uint32_t MaskDTypeBytes(uint32_t dtype) {
  return dtype == kUint8 ? 1 : dtype == kUint16 ? 2 : 0;
}

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
  uint32_t height;              // output shape; 0 for variable-size decode
  uint32_t width;
  uint32_t channels;
  uint32_t dtype;               // DType
  uint32_t layout;              // Layout
  uint32_t reserved0;
  uint64_t sample_bytes;        // stride per sample; 0 for variable size
  uint64_t session_number;      // the daemon's session counter
  uint64_t batches_per_epoch;
  uint64_t total_batches;       // 0: without end
  // Segmentation sets: each sample's mask (a label map of the sample's
  // height x width, mask_dtype values) in the same slot, after the images.
  uint32_t mask_dtype;          // 0: no masks; kUint8 or kUint16
  uint32_t reserved4;
  uint64_t mask_offset;         // from the slot's data start
  uint64_t mask_sample_bytes;   // stride per sample (variable size: the most a mask takes)
  // Detection sets (PlaceBoxes): entries per sample, 0 without boxes.
  uint32_t box_stride;
  uint32_t reserved5;
  uint64_t box_offset;          // float32 [batch_size * box_stride][4]
  uint64_t box_label_offset;    // int64 [batch_size * box_stride]
  uint64_t box_flag_offset;     // uint8 [batch_size * box_stride]
  uint64_t reserved1[1];

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

// Per sample in a slot. Written by the daemon before kReady.
struct SampleRecord {
  int64_t label;
  uint64_t dataset_index;  // index into the dataset of the pixels delivered
  uint64_t offset;         // from the slot's data start
  uint64_t bytes;
  uint32_t status;         // SampleStatus
  uint32_t height;
  uint32_t width;
  uint32_t channels;
  uint64_t planned_index;  // the dataset index the sampler planned here
  // The sample's mask when the ring has masks (height x width values of
  // the header's mask_dtype; a failed sample's is all fill), else 0, 0.
  uint64_t mask_offset;    // from the slot's data start
  uint64_t mask_bytes;
  // The sample's boxes when the ring has them (<= box_stride, from entry
  // index * box_stride of each box array; a failed sample has none).
  uint32_t box_count;
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
  // Followed by batch_size SampleRecords.
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(std::is_standard_layout_v<SlotDescriptor>);
static_assert(sizeof(RingHeader) <= kHeaderBytes);
static_assert(sizeof(SlotDescriptor) % 8 == 0);
static_assert(sizeof(SampleRecord) % 8 == 0);

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Where a slot's masks start, after `image_bytes` of images (the batch's
// samples, each at most the output's bytes).
inline constexpr uint64_t MaskOffset(uint64_t image_bytes) { return AlignUp(image_bytes, 64); }

// Where a slot's box arrays lie, from `after` (the end of its images and
// masks): xyxy, labels, flags, each 64-byte aligned; `end` past the flags.
struct BoxPlacement {
  uint64_t xyxy = 0;
  uint64_t labels = 0;
  uint64_t flags = 0;
  uint64_t end = 0;
};
inline constexpr BoxPlacement PlaceBoxes(uint64_t after, uint32_t batch_size, uint32_t stride) {
  const uint64_t n = uint64_t{batch_size} * stride;
  BoxPlacement p;
  p.xyxy = AlignUp(after, 64);
  p.labels = AlignUp(p.xyxy + 16 * n, 64);
  p.flags = p.labels + 8 * n;
  p.end = p.flags + n;
  return p;
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
  uint64_t data_offset = 0;
  uint64_t slot_bytes = 0;
  uint64_t total_bytes = 0;
};

// Returns false when the sizes are out of range or overflow.
inline bool ComputeGeometry(uint32_t slot_count, uint32_t batch_size,
                            uint64_t slot_data_bytes, Geometry* g) {
  if (slot_count == 0 || slot_count > kMaxSlots) return false;
  if (batch_size == 0 || batch_size > kMaxBatchSize) return false;
  if (slot_data_bytes == 0 || slot_data_bytes > (uint64_t{1} << 40)) return false;
  g->descriptor_offset = kHeaderBytes;
  g->descriptor_stride = sizeof(SlotDescriptor) + uint64_t{batch_size} * sizeof(SampleRecord);
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

inline SampleRecord* Records(SlotDescriptor* d) {
  return reinterpret_cast<SampleRecord*>(reinterpret_cast<char*>(d) + sizeof(SlotDescriptor));
}

// Checks that a header read from shared memory describes a ring that fits in
// `mapped_bytes` and matches the geometry the caller expects. Every size the
// reader later uses must come from `expected`, not from the shared header.
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
  if (h.descriptor_offset != expected.descriptor_offset ||
      h.descriptor_stride != expected.descriptor_stride || h.data_offset != expected.data_offset ||
      h.slot_bytes != expected.slot_bytes)
    return "ring geometry differs from Attach";
  if (h.channels > kMaxChannels || DTypeBytes(h.dtype) == 0) return "bad pixel format";
  if (h.layout != kNHWC && h.layout != kNCHW) return "bad layout";
  if (h.sample_bytes != 0 &&
      (h.sample_bytes > h.slot_bytes || h.sample_bytes * h.batch_size > h.slot_bytes))
    return "samples do not fit in a slot";
  if (h.mask_dtype != 0) {
    if (MaskDTypeBytes(h.mask_dtype) == 0) return "bad mask dtype";
    if (h.mask_offset > h.slot_bytes || h.mask_sample_bytes > h.slot_bytes ||
        h.mask_sample_bytes * h.batch_size > h.slot_bytes - h.mask_offset)
      return "masks do not fit in a slot";
  }
  if (h.box_stride != 0) {
    if (h.box_stride > kMaxBoxesPerSample) return "bad box stride";
    const uint64_t n = uint64_t{h.batch_size} * h.box_stride;  // < 2^37: no overflow below
    if (h.box_offset > h.slot_bytes || 16 * n > h.slot_bytes - h.box_offset ||
        h.box_label_offset > h.slot_bytes || 8 * n > h.slot_bytes - h.box_label_offset ||
        h.box_flag_offset > h.slot_bytes || n > h.slot_bytes - h.box_flag_offset)
      return "boxes do not fit in a slot";
  }
  return nullptr;
}

// Checks one record (copied out of shared memory first) against the slot it
// claims to be in. Returns nullptr when every byte it names is inside the slot.
inline const char* ValidateRecord(const SampleRecord& r, uint64_t slot_bytes, uint32_t dtype) {
  if (r.offset > slot_bytes || r.bytes > slot_bytes - r.offset) return "sample outside its slot";
  if (r.channels > kMaxChannels) return "bad channel count";
  // height * width < 2^64; times channels * dtype bytes (<= 16) it may wrap,
  // so compare by division: a wrapped product must not pass for small bytes.
  const uint64_t pixels = uint64_t{r.height} * r.width;
  const uint64_t pixel_bytes = uint64_t{r.channels} * DTypeBytes(dtype);
  const bool shape_fits = pixel_bytes == 0 ? r.bytes == 0
                                           : r.bytes % pixel_bytes == 0 &&
                                                 pixels == r.bytes / pixel_bytes;
  // Failed samples too: the daemon writes zeros of the output shape (or an
  // empty 0x0 sample), and a reader sizes its view from the shape.
  if (!shape_fits) return "sample size disagrees with its shape";
  if (r.status > kSampleFailed) return "bad sample status";
  return nullptr;
}

// Checks one record's mask against its slot and its shape (mask_dtype from
// the header the reader validated; 0: the ring has no masks, and the record
// must name none).
inline const char* ValidateMask(const SampleRecord& r, uint64_t slot_bytes, uint32_t mask_dtype) {
  if (mask_dtype == 0) return r.mask_bytes == 0 ? nullptr : "a mask in a ring without masks";
  if (r.mask_offset > slot_bytes || r.mask_bytes > slot_bytes - r.mask_offset)
    return "mask outside its slot";
  if (r.mask_bytes != uint64_t{r.height} * r.width * MaskDTypeBytes(mask_dtype))
    return "mask size disagrees with its sample's shape";
  return nullptr;
}

// Checks one record's box count against the header's stride (0: the ring
// has no boxes, and the record must have none).
inline const char* ValidateBoxes(const SampleRecord& r, uint32_t box_stride) {
  return r.box_count <= box_stride ? nullptr : "more boxes than a sample's room";
}

}  // namespace stoker::ring

#endif  // STOKER_PROTO_RING_LAYOUT_H_
