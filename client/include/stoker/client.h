// The stoker client: attach a trainer to a running stokerd and take batches
// out of its shared-memory ring.
//
//   auto client = stoker::Client::Connect("/run/stoker/stoker.sock");
//   if (!client.ok()) ...
//   stoker::AttachOptions o;
//   o.dataset = "imagenet/train";     // relative to the daemon's --data-root
//   o.batch_size = 256;
//   auto session = (*client)->Attach(o);
//   for (;;) {
//     absl::StatusOr<stoker::Batch> b = (*session)->Next();
//     if (absl::IsOutOfRange(b.status())) break;   // all epochs served
//     if (!b.ok()) ...                              // daemon gone, bad batch
//     Train(b->data(), b->labels(), b->size());
//   }                                               // ~Batch returns the slot
//
// Errors are absl::Status values; no exception crosses this API. Types of
// gRPC, protobuf and CUDA stay out of it.

#ifndef STOKER_CLIENT_INCLUDE_STOKER_CLIENT_H_
#define STOKER_CLIENT_INCLUDE_STOKER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// --- Device copy (declared here, documented in stoker/cuda.h) ---
struct CUstream_st;  // a cudaStream_t is a CUstream_st*: no CUDA header needed

namespace stoker {

struct DeviceCopyOptions;     // stoker/cuda.h
struct DeviceTransferStatus;  // stoker/cuda.h
// --- end device copy ---

namespace internal {
class SessionCore;
class RpcChannel;
// Where a session's still-image fields are among its fields (-1: none),
// which Batch's own accessors view.
struct FieldRoles {
  int image = -1, label = -1, mask = -1, boxes = -1, box_labels = -1, box_flags = -1;
  // A video session's "clip" ([T, 3, H, W] or [3, T, H, W]); `image` is it
  // too there (the sample's tensor: data(), sample_data(), height(), width()).
  int clip = -1;
  // A volume session's "volume" ([S, C, X, Y, Z]; `image` is it too there)
  // and "volume_label" ([S, 1, X, Y, Z], when the dataset has labels).
  int volume = -1, volume_label = -1;
};
}  // namespace internal

// The types of a sample field's values (proto/stoker/ring_layout.h's DType).
enum class DType {
  kUint8 = 1,
  kFloat32 = 2,
  kFloat16 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBFloat16 = 8,
};
// Bytes per value of a DType.
uint32_t DTypeBytes(DType d);
enum class Layout { kNHWC = 1, kNCHW = 2 };
enum class DatasetFormat {
  kAuto = 0,
  kImageFolder = 1,
  kManifest = 2,
  kWebDataset = 3,
  kCoco = 4,
  kPairedFolders = 5,
  kDecathlon = 6,  // a Medical Segmentation Decathlon dataset.json (volumes)
  kHdf5 = 7,       // an HDF5 file's image array (AttachOptions::record_*)
  kLmdb = 8,       // an LMDB of encoded images
  kVolumeFolder = 9,  // a folder of volumes (and masks: their labels' folder)
};
enum class FailurePolicy { kSkip = 1, kError = 2 };

// What happened to one sample of a batch.
enum class SampleStatus {
  kOk = 0,
  kReplaced = 1,  // the planned file failed; another sample of the shard stands in
  kFailed = 2,    // it failed and was not replaced; its pixels are zero
};

struct AttachOptions {
  // The dataset, relative to the daemon's --data-root (or absolute inside
  // it): an ImageFolder directory, a manifest file, WebDataset shards, or a
  // COCO set's images folder (with `annotations`).
  std::string dataset;
  DatasetFormat format = DatasetFormat::kAuto;
  // A COCO instances JSON (relative to the data root): the samples are its
  // images, in `dataset`, each with its boxes (Batch::boxes). Setting it
  // makes kAuto COCO.
  std::string annotations;
  // Paired folders (VOC's, Cityscapes'): the masks folder, `dataset` being
  // the images folder; an image <key><image_suffix>.<ext> pairs with the
  // mask <key><mask_suffix>.png. Setting `masks` makes kAuto paired folders.
  std::string masks;
  std::string image_suffix;
  std::string mask_suffix;
  // Record files (kHdf5, kLmdb; AttachRequest.record_images and the rest):
  // the HDF5 images' dataset ("" : "x"), the labels' file (an HDF5 file or
  // a text file of one integer a line; "" : the HDF5 file's own "y", if
  // any) and its dataset ("" : "y").
  std::string record_images;
  std::string record_labels;
  std::string record_labels_key;
  // An LMDB of raw H x W [x C] uint8 pixels: {H, W} or {H, W, C}
  // (AttachRequest.record_shape). Empty: encoded images.
  std::vector<uint32_t> record_shape;
  // The decode/augment pipeline as data: a JSON object of pipeline keywords,
  // the same ones Python's Loader and `stokerctl consume` take; their names,
  // defaults and checks are in pipeline/pipeline_spec.h. Empty: "{}",
  // the train preset at 224x224, uint8 NHWC. For example
  //   {"pipeline": "eval", "size": 160, "dtype": "float32"}
  //   {"ops": [{"RandomCrop": {"size": [32], "padding": [4]}},
  //            {"RandomHorizontalFlip": {}}], "dtype": "float32"}
  // A bad pipeline fails Attach with INVALID_ARGUMENT naming the keyword or
  // op (before any RPC, and again in the daemon).
  std::string pipeline;
  // Samples per batch; 0: the contract's default (64, stoker.proto's
  // AttachDefaults; SessionInfo::batch_size says which).
  uint32_t batch_size = 0;
  // The order of each epoch is a permutation from (seed, epoch); a sample's
  // augmentation is keyed by (seed, epoch, dataset index).
  uint64_t seed = 0;
  bool shuffle = true;
  // Epochs to serve; 0 means without end.
  uint32_t epochs = 1;
  // DistributedSampler's rank and world size.
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // Drop the last, partial batch of each epoch.
  bool drop_last = false;
  // Ring depth in batches (the prefetch depth); 0: the daemon's default, a
  // ring of 4 that it deepens (up to 16) for a trainer that consumes in bursts.
  uint32_t ring_slots = 0;
  FailurePolicy failure_policy = FailurePolicy::kSkip;
  // Resume: the first epoch, and the batch within it, to serve.
  uint32_t start_epoch = 0;
  uint64_t start_batch = 0;
  // Shown in the daemon's status and logs.
  std::string client_name;
  // ImageFolder: allow class folders with no readable file (else Attach
  // fails naming them, as torchvision does).
  bool allow_empty = false;
  // Accepted and ignored (AttachRequest.skip_unsupported_formats): every
  // format of torchvision's IMG_EXTENSIONS is read.
  bool skip_unsupported_formats = false;
  // ImageFolder: the file names a walk lists (AttachRequest.extensions);
  // empty: the images', or a video session's video extensions.
  std::vector<std::string> extensions;
  // A video session (AttachRequest.clips) when frames_per_clip != 0: each
  // sample is a clip of that many frames (torchvision's VideoClips), served
  // as the field "clip". sampler: "all" (every clip; ""), "random"
  // (RandomClipSampler) or "uniform" (UniformClipSampler), with
  // clips_per_video; layout "TCHW" ("") or "CTHW".
  struct Clips {
    uint32_t frames_per_clip = 0;
    uint32_t step_between_clips = 1;
    uint32_t frame_rate = 0;  // 0: each video's own
    std::string sampler;
    uint32_t clips_per_video = 0;
    std::string layout;
  } clips;
  // A volume session (AttachRequest.volumes) when not empty: its
  // VolumeSpec as the proto's JSON mapping ({"ops": [{"Spacing": {"pixdim":
  // [1.5, 1.5, 2]}}, {"RandCropByPosNegLabel": {...}}], "dtype": ...}); each
  // sample is a volume, served as the fields "volume" and "volume_label".
  // INVALID_ARGUMENT from Attach when it does not parse.
  std::string volumes_json;
  // Device copies (stoker/cuda.h): pin the mapped ring with cudaHostRegister
  // at the first Batch::CopyToDevice, so copies DMA from the slots. false:
  // always go through pinned staging buffers (one extra host copy).
  bool register_ring_with_cuda = true;
};

// One field of every sample of a session (proto/stoker/ring_layout.h,
// "field"): a name, a dtype and a shape bounded at attach.
struct FieldInfo {
  std::string name;
  DType dtype = DType::kUint8;
  // Each dimension's bound (the rank is the count); 0: unbounded (any size
  // whose bytes fit room_bytes, as an any-size image's height and width).
  std::vector<uint32_t> max_shape;
  uint64_t room_bytes = 0;   // the most one sample's value takes
  bool fixed_shape = false;  // every sample has the shape max_shape
};

// One field of a batch's samples: views of the slot, valid while the Batch
// that gave it holds its lease (and at the same address for that long).
// Not thread-safe to mutate; its const members may be read from any thread.
class BatchField {
 public:
  const FieldInfo& info() const { return *info_; }
  const std::string& name() const { return info_->name; }
  DType dtype() const { return info_->dtype; }
  uint32_t rank() const { return static_cast<uint32_t>(info_->max_shape.size()); }
  // Sample i's shape (rank() values, each within its bound, checked against
  // the bounds learned at attach) and its value's bytes.
  const uint32_t* shape(uint32_t i) const { return shapes_.data() + size_t{i} * kMaxRank; }
  uint64_t bytes(uint32_t i) const { return bytes_[i]; }
  // Sample i's value, row-major in its shape. Writable, as Batch::data().
  void* data(uint32_t i) const { return base_ + stride_ * i; }
  // From one sample's value to the next's (its room). For a fixed-shape
  // field it is exactly the value's bytes, so data(0) is the whole batch's
  // [size, max_shape...] array.
  uint64_t stride() const { return stride_; }
  bool fixed_shape() const { return info_->fixed_shape; }

  static constexpr uint32_t kMaxRank = 5;

 private:
  friend class Session;
  const FieldInfo* info_ = nullptr;  // the session's, kept alive by the Batch
  uint8_t* base_ = nullptr;
  uint64_t stride_ = 0;
  std::vector<uint32_t> shapes_;  // kMaxRank per sample
  std::vector<uint64_t> bytes_;
};

// What the daemon said at Attach, after defaults.
struct SessionInfo {
  std::string session_id;
  // The ring's label ("memfd:stoker-<session>", as /proc/PID/maps shows it);
  // the ring is named in no file system.
  std::string ring_name;
  uint64_t dataset_size = 0;
  uint64_t shard_size = 0;         // this rank's samples per epoch
  uint64_t batches_per_epoch = 0;
  uint64_t total_batches = 0;      // 0: without end
  uint32_t start_epoch = 0;
  uint64_t start_batch = 0;
  uint32_t batch_size = 0;
  uint32_t height = 0;             // 0 for variable-size decode; view0's for views
  uint32_t width = 0;
  uint32_t channels = 3;
  DType dtype = DType::kUint8;
  Layout layout = Layout::kNHWC;
  // Segmentation sets: the masks' ring DType (1 uint8, 4 uint16; 0: the
  // dataset has none).
  uint32_t mask_dtype = 0;
  // Detection sets: the room for boxes a sample has in a batch (the most
  // any sample of the dataset has); 0: the dataset has no boxes.
  uint32_t box_stride = 0;
  uint32_t ring_slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t sample_bytes = 0;       // 0 for variable-size decode
  // Every sample's fields, in the ring's order: "image", "label", then
  // "mask" or "boxes", "box_labels", "box_flags" as the dataset has them
  // (proto/stoker/ring_layout.h, "field").
  std::vector<FieldInfo> fields;
  std::vector<std::string> class_names;
  // The pipeline the daemon runs, every default filled in: the effective
  // stoker.v1.PipelineSpec as JSON (pipeline/pipeline_spec.h's ToJson:
  // snake_case fields, torchvision's op names), e.g.
  //   {"preset":"train","ops":[{"RandomResizedCrop":{"size":[224,224],...}},
  //    ...],"size":[224,224],"output":{"dtype":"uint8","layout":"nhwc",...},...}
  std::string effective_pipeline_json;
  // A volume session's transforms after defaults (VolumeSpec's JSON); ""
  // for other sessions.
  std::string effective_volumes_json;
};

// One page of a session's dataset, in dataset index order
// (Session::ListSamples). paths[k] and labels[k] are entry offset + k.
struct SampleList {
  // Each entry relative to the dataset's own folder, as its format lists it:
  // ImageFolder "class/sub/x.jpg", exactly as torchvision's
  // ImageFolder(root).samples names it relative to root (a symlink by its
  // own name, not its target's); manifest: the entry as written, relative
  // to the manifest's folder (normalized: "a/./b" is "a/b", an absolute
  // entry is made relative); WebDataset "shard.tar:member.jpg", the shard
  // relative to the pattern's folder.
  std::vector<std::string> paths;
  std::vector<int64_t> labels;  // -1: no label
  uint64_t dataset_size = 0;    // entries in the whole dataset
};

// A lease on one ready batch in the ring. Move-only. The pixels stay valid
// and unchanged until the lease ends: when the Batch is destroyed or
// Release() is called; then the slot goes back to the daemon. Labels,
// indices and per-sample shapes are copies, valid for the Batch's life.
// A Batch may outlive its Session and Client (the mapping stays until the
// last lease ends). Not thread-safe; distinct Batches may be used and
// released on different threads.
class Batch {
 public:
  Batch();
  ~Batch();
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  bool valid() const { return core_ != nullptr; }
  // The batch's number in the session (0, 1, 2, ...), its epoch and its
  // position within the epoch.
  uint64_t sequence() const { return sequence_; }
  uint32_t epoch() const { return epoch_; }
  uint64_t batch_in_epoch() const { return batch_in_epoch_; }
  // The ring slot it holds until its lease ends (Session::SlotOf).
  uint32_t slot() const { return slot_; }
  // Samples in this batch (the last of an epoch may be short).
  uint32_t size() const { return static_cast<uint32_t>(labels_.size()); }

  // The samples' field `name` (SessionInfo::fields), or nullptr when the
  // session's samples have none. The accessors below are views of the
  // "image", "label", "mask" and box fields. A multi-view session
  // (PipelineSpec.views) has no "image": its views are "view0", "view1", ...
  // (each fixed, of its own size), and view0 stands for the image in the
  // accessors below, CopyToDevice included (copy the others from field()).
  const BatchField* field(std::string_view name) const;
  const std::vector<BatchField>& fields() const { return fields_; }

  // Sample i's pixels: height x width x channels (NHWC) or channels x height
  // x width (NCHW) elements of the session's dtype. For fixed-shape
  // pipelines the samples are contiguous, so data() is the whole
  // [size, ...] tensor of data_bytes() bytes. Writable: the slot is the
  // lease holder's until released.
  void* data() const;
  uint64_t data_bytes() const;
  void* sample_data(uint32_t i) const;
  uint64_t sample_bytes(uint32_t i) const { return fields_[roles_.image].bytes(i); }
  uint32_t height(uint32_t i) const;
  uint32_t width(uint32_t i) const;
  uint32_t channels() const { return 3; }

  // Segmentation sets: sample i's mask, height(i) x width(i) values of
  // mask_dtype() (kUint8 or kUint16), moved with its image (a failed
  // sample's is all mask_fill); for fixed-shape pipelines the masks are
  // contiguous from mask_data(0). nullptr, 0 and 0 when the session's
  // dataset has no masks.
  void* mask_data(uint32_t i) const;
  uint64_t mask_bytes(uint32_t i) const { return roles_.mask < 0 ? 0 : fields_[roles_.mask].bytes(i); }
  // 0 (not a DType) when the session's dataset has no masks.
  DType mask_dtype() const {
    return roles_.mask < 0 ? static_cast<DType>(0) : fields_[roles_.mask].dtype();
  }

  // Detection sets: sample i's box_count(i) boxes, moved with its image and
  // kept by the pipeline's box rules (server/image/ops/boxes.h): XYXY float32 in
  // pixels of its output, 4 a box (boxes), their labels (COCO's category
  // ids) and flags (1: a crowd box). A failed sample has none. The arrays
  // of the whole batch are box_stride() entries a sample apart, from
  // boxes(0), box_labels(0) and box_flags(0). nullptr and 0 when the
  // session's dataset has no boxes.
  uint32_t box_stride() const { return roles_.boxes < 0 ? 0 : fields_[roles_.boxes].info().max_shape[0]; }
  uint32_t box_count(uint32_t i) const { return roles_.boxes < 0 ? 0 : fields_[roles_.boxes].shape(i)[0]; }
  const float* boxes(uint32_t i) const;
  const int64_t* box_labels(uint32_t i) const;
  const uint8_t* box_flags(uint32_t i) const;

  const std::vector<int64_t>& labels() const { return labels_; }
  // The dataset index whose pixels were delivered (a replacement's, for a
  // replaced sample) and the one the sampler planned.
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::vector<int64_t>& planned_indices() const { return planned_; }
  SampleStatus status(uint32_t i) const { return static_cast<SampleStatus>(statuses_[i]); }

  // Ends the lease now. Idempotent. After a CopyToDevice the slot goes back
  // to the daemon once that copy has completed on the GPU, not before.
  void Release();

  // Enqueues a copy of this batch onto `stream` (nullptr: the legacy default
  // stream) into `dst`, caller-owned device memory of `dst_bytes` bytes on
  // the stream's device, normalizing on the GPU if `options` asks; records an
  // event after it. Returns without waiting for the GPU: work enqueued on
  // `stream` afterwards sees the data. The batch stays valid on the host; its
  // slot is reused only after the copy completed (see stoker/cuda.h).
  // Thread-safe with respect to other Batches of the session. Errors:
  //   FAILED_PRECONDITION  built without CUDA, or no driver / no GPU;
  //   INVALID_ARGUMENT     dst too small or not device memory of the
  //                        stream's device; normalize of a non-uint8-NHWC
  //                        session or of variable-size samples;
  //   RESOURCE_EXHAUSTED   out of pinned or device memory;
  //   INTERNAL             another CUDA error (the message has its name).
  absl::Status CopyToDevice(CUstream_st* stream, void* dst, uint64_t dst_bytes,
                            const DeviceCopyOptions& options);
  // The same for sample i alone (height(i) x width(i), normalized on the
  // GPU if `options` asks): how a batch of any-size images goes to the
  // device, one copy a sample (a trainer then lists or pads them). The slot
  // is reused only after every copy made from it completed. Errors as
  // CopyToDevice's; INVALID_ARGUMENT for i >= size() or an empty sample.
  absl::Status CopySampleToDevice(uint32_t i, CUstream_st* stream, void* dst, uint64_t dst_bytes,
                                  const DeviceCopyOptions& options);

 private:
  friend class Session;
  std::shared_ptr<internal::SessionCore> core_;
  uint32_t slot_ = 0;
  uint64_t sequence_ = 0;
  uint32_t epoch_ = 0;
  uint64_t batch_in_epoch_ = 0;
  uint8_t* slot_data_ = nullptr;
  std::vector<int64_t> labels_, indices_, planned_;
  std::vector<uint32_t> statuses_;
  std::vector<BatchField> fields_;
  internal::FieldRoles roles_;  // the session's
  bool nchw_ = false;
};

// One attached session. Next() hands batches out in order. Thread-safe:
// Next may be called from one thread while leases end on others.
class Session {
 public:
  ~Session();  // detaches (best effort) and stops the KeepAlive stream
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const SessionInfo& info() const { return info_; }

  // Waits for the next batch and leases it. Errors:
  //   OUT_OF_RANGE         every batch of every epoch was delivered;
  //   UNAVAILABLE          the daemon went away, is shutting down, or ended
  //                        the session (the message says which);
  //   ABORTED              a sample failed under FailurePolicy::kError (the
  //                        message names the file and the reason); the
  //                        session goes on with the next batch;
  //   DEADLINE_EXCEEDED    nothing ready within timeout_ms (< 0: no limit;
  //                        a dead daemon is still noticed within seconds);
  //   FAILED_PRECONDITION  every slot is held by unreleased batches;
  //   DATA_LOSS            the ring's contents are inconsistent.
  absl::StatusOr<Batch> Next(int64_t timeout_ms = -1);

  // Batches handed out so far.
  uint64_t delivered() const;

  // The ring slot batch `seq` will occupy (seq >= delivered()): seq modulo
  // the ring's depth, which a ring attached without ring_slots deepens
  // while its trainer consumes in bursts. A Batch still held in that slot
  // (Batch::slot) makes Next for `seq` fail: release it first. info().
  // ring_slots when the ring is corrupt. Thread-safe.
  uint32_t SlotOf(uint64_t seq) const;

  // Entries [offset, offset + limit) of the session's dataset, with their
  // labels: limit 0 means 4096, at most 65536. Fewer at the end (none at or
  // past it), or when their paths pass 2 MiB (at least one while any is
  // left): page on from offset + paths.size() up to dataset_size. One RPC
  // (ClientOptions::rpc_timeout_ms). Thread-safe. Errors:
  //   INVALID_ARGUMENT     limit over 65536;
  //   NOT_FOUND            the session has ended;
  //   FAILED_PRECONDITION  called in a forked child of the attaching process;
  //   UNAVAILABLE          the daemon cannot be reached.
  absl::StatusOr<SampleList> ListSamples(uint64_t offset, uint32_t limit = 0) const;

  // Ends the session on the daemon. Outstanding Batches stay readable.
  absl::Status Detach();

  // The device-copy path of this session: registered ring or staging
  // buffers, counters (stoker/cuda.h). Thread-safe.
  DeviceTransferStatus DeviceStatus() const;

 private:
  friend class Client;
  Session() = default;
  SessionInfo info_;
  std::shared_ptr<internal::SessionCore> core_;
};

struct ClientOptions {
  // Deadline of each control RPC but Attach.
  int64_t rpc_timeout_ms = 30000;
  // Deadline of Attach, which indexes a dataset the daemon has not seen yet
  // (a million files on network storage can take minutes; stokerd logs its
  // progress). At least rpc_timeout_ms.
  int64_t attach_timeout_ms = 600000;
};

// A connection to one daemon. Thread-safe.
class Client {
 public:
  // `address`: a Unix socket path, "unix:PATH", or "HOST:PORT" (status and
  // health only). Connects lazily; fails only on a malformed address.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         const ClientOptions& options = {});
  ~Client();

  absl::StatusOr<std::unique_ptr<Session>> Attach(const AttachOptions& options);

  // The daemon's status (stoker.v1.StatusResponse) as JSON; with
  // include_failures, each session's failed samples and the daemon's memory
  // of failures per dataset (dataset_failures), ended sessions' included.
  absl::StatusOr<std::string> StatusJson(bool include_failures = false);

  // OK when the standard health service reports SERVING for `service`. The
  // default asks for stokerd's own service, SERVING once its engine and
  // workers are up: gRPC's health service reports the server as a whole
  // ("") SERVING for an instant at start-up, before stokerd can say
  // otherwise.
  absl::Status Health(const std::string& service = "stoker.v1.Stoker");

 private:
  Client() = default;
  std::shared_ptr<internal::RpcChannel> rpc_;
  ClientOptions options_;
  std::string socket_path_;  // the daemon's Unix socket; the ring socket is beside it
};

}  // namespace stoker

#endif  // STOKER_CLIENT_INCLUDE_STOKER_CLIENT_H_
