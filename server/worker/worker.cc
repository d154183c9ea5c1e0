#include "server/worker/worker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/dataset/dataset.h"
#include "server/dataset/records.h"
#include "server/image/ops/boxes.h"
#include "server/image/decode/decode_memory.h"
#include "server/image/decode/image_decoder.h"
#include "server/image/ops/labels.h"
#include "server/image/pipeline.h"
#include "server/image/decode/transcode.h"
#include "common/posix.h"
#include "server/engine/transcode_cache.h"
#include "server/worker/image_entry.h"
#include "server/worker/video_work.h"
#include "server/worker/volume_work.h"
#include "server/worker/worker_input.h"
#include "server/worker/worker_protocol.h"

namespace stoker::worker {
namespace {

struct RingMap {
  Mapping map;
  uint64_t bytes = 0;
};

void SetReason(ResultMsg* r, absl::StatusCode code, std::string_view reason) {
  r->code = static_cast<uint32_t>(code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown
                                                                 : code);
  size_t n = std::min(reason.size(), sizeof(r->reason) - 1);
  std::memcpy(r->reason, reason.data(), n);
  r->reason[n] = '\0';
}

absl::Status OpenInput(int root_fd, const TaskMsg& t, std::string_view path, Input* in) {
  return OpenChecked(root_fd, path, t.has_range != 0, t.file_offset, t.file_length,
                     t.max_file_bytes, in);
}

// Reads [begin, begin + length) of `fd` into `buf`.
absl::Status ReadRange(int fd, uint64_t begin, uint64_t length, std::vector<uint8_t>* buf) {
  buf->resize(length);
  absl::StatusOr<size_t> got = ReadFullyAt(fd, begin, buf->data(), length, "the file");
  if (!got.ok()) return got.status();
  if (*got != length) return absl::DataLossError("file shrank while being read");
  return absl::OkStatus();
}

// Reads the task's input into `buf`: the file's bytes, or a raw record's
// pixels after the PNM header that makes them an image.
absl::Status ReadInput(const TaskMsg& t, const Input& in, std::vector<uint8_t>* buf) {
  if (t.simulate_latency_us != 0 && !Cached(in.fd.get(), in.begin)) {
    ::usleep(t.simulate_latency_us);
  }
  return ReadTaskInput(t, in, [buf](size_t n) {
    buf->resize(n);
    return buf->data();
  });
}

// Indexes a record file (kProbeHdf5 / kProbeLmdb): `values` gets (offset,
// length, label, row) for each sample.
void ProbeRecords(const ProbeMsg& m, int data_root, ProbeResultMsg* r,
                  std::vector<int64_t>* values) {
  values->clear();
  std::string_view packed(m.path, m.path_bytes);
  std::string parts[5];
  for (std::string& part : parts) {
    const size_t end = packed.find('\0');
    if (end == std::string_view::npos) {
      r->code = static_cast<uint32_t>(absl::StatusCode::kInvalidArgument);
      CopyText("malformed record probe", r->reason);
      return;
    }
    part = std::string(packed.substr(0, end));
    packed.remove_prefix(end + 1);
  }
  RecordTarget target;
  target.kind = m.kind == kProbeLmdb ? RecordKind::kLmdb : RecordKind::kHdf5;
  target.file = parts[0];
  target.images_key = parts[1];
  target.labels_file = parts[2];
  target.labels_key = parts[3];
  if (std::sscanf(parts[4].c_str(), "%u,%u,%u", &target.height, &target.width,
                  &target.channels) != 3) {
    r->code = static_cast<uint32_t>(absl::StatusCode::kInvalidArgument);
    CopyText("malformed record probe", r->reason);
    return;
  }
  absl::StatusOr<RecordIndex> index = IndexRecordFile(data_root, target);
  if (!index.ok()) {
    r->code = static_cast<uint32_t>(index.status().code());
    CopyText(std::string(index.status().message()), r->reason);
    return;
  }
  r->code = 0;
  r->record_height = index->height;
  r->record_width = index->width;
  r->record_channels = index->channels;
  CopyText(index->warning, r->warning);
  const size_t n = index->offsets.size();
  if (index->lengths.size() != n || index->labels.size() != n || index->rows.size() != n) {
    r->code = static_cast<uint32_t>(absl::StatusCode::kInternal);
    CopyText("the record index's arrays differ in length", r->reason);
    return;
  }
  values->resize(4 * n);
  for (size_t i = 0; i < n; ++i) {
    (*values)[4 * i] = static_cast<int64_t>(index->offsets[i]);
    (*values)[4 * i + 1] = static_cast<int64_t>(index->lengths[i]);
    (*values)[4 * i + 2] = index->labels[i];
    (*values)[4 * i + 3] = static_cast<int64_t>(index->rows[i]);
  }
  r->frames = values->size();
}




// A sample's mask (TaskMsg.mask_*): its label map, moved by the image's
// steps, written into the ring as the session's mask dtype. The reasons
// name the mask, so a failure is told from its image's.
class MaskWriter {
 public:
  explicit MaskWriter(int root_fd) : root_fd_(root_fd) {}

  // `inline_bytes`: the mask's encoded bytes (TaskMsg.inline_input), else
  // null and it is read from `path`.
  absl::Status Write(const TaskMsg& t, std::string_view path, const uint8_t* inline_bytes,
                     const image::SampleSteps& steps, const image::SampleResult& res,
                     uint8_t* out, ResultMsg* r) {
    absl::Status st = Run(t, path, inline_bytes, steps, res, out, r);
    if (st.ok()) return st;
    return absl::Status(st.code(), absl::StrCat("mask ", std::string(path), ": ", st.message()));
  }

 private:
  absl::Status Run(const TaskMsg& t, std::string_view path, const uint8_t* inline_bytes,
                   const image::SampleSteps& steps, const image::SampleResult& res, uint8_t* out,
                   ResultMsg* r) {
    if (inline_bytes != nullptr) {
      file_.assign(inline_bytes, inline_bytes + t.mask_input_length);
    } else {
      Input in;
      if (absl::Status s = OpenChecked(root_fd_, path, t.mask_has_range != 0, t.mask_file_offset,
                                       t.mask_file_length, t.max_file_bytes, &in);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = ReadRange(in.fd.get(), in.begin, in.length, &file_); !s.ok()) return s;
    }
    r->input_bytes += file_.size();
    const image::ImageFormat format = image::SniffFormat(file_.data(), file_.size());
    if (decoders_.count(format) == 0) decoders_[format] = image::MakeDecoder(format);
    image::ImageDecoder* dec = decoders_[format].get();
    if (dec == nullptr) {
      return absl::UnimplementedError("label maps (masks) are read from PNG files only");
    }
    image::DecodeLimits limits;
    limits.max_pixels = t.params.max_decode_pixels;
    image::ImageHeader header;
    if (absl::Status s = dec->ReadHeader(file_.data(), file_.size(), limits, &header); !s.ok()) {
      return s;
    }
    if (header.height != res.drawn_height || header.width != res.drawn_width) {
      return absl::InvalidArgumentError(absl::StrCat("is ", header.width, "x", header.height,
                                                     ", its image ", res.drawn_width, "x",
                                                     res.drawn_height, ": they must match"));
    }
    map_.height = header.height;
    map_.width = header.width;
    map_.binary = std::string_view(header.mode) == "1";
    map_.data.resize(size_t{header.height} * header.width * 2);
    if (absl::Status s = dec->DecodeLabels(map_.data.data(), &map_.bpp); !s.ok()) return s;
    map_.data.resize(map_.bytes());
    if (absl::Status s = image::ApplyLabelSteps(steps, t.params.mask_fill, &map_, &scratch_);
        !s.ok()) {
      return s;
    }
    if (map_.height != res.height || map_.width != res.width) {
      return absl::InternalError(absl::StrCat("came out ", map_.width, "x", map_.height,
                                              ", its image ", res.width, "x", res.height));
    }
    const size_t n = size_t{map_.height} * map_.width;
    const uint32_t bpp = t.params.mask_bpp;
    if (n * bpp > t.mask_out_capacity) {
      return absl::InternalError("the mask does not fit its place in the slot");
    }
    if (map_.bpp == bpp) {
      std::memcpy(out, map_.data.data(), n * bpp);
    } else if (bpp == 2) {  // 8-bit values into uint16
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = map_.data[i];
        std::memcpy(out + 2 * i, &v, 2);
      }
    } else {  // 16-bit values into uint8: each must fit
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, map_.data.data() + 2 * i, 2);
        if (v > 255) {
          return absl::InvalidArgumentError(
              absl::StrCat("holds the value ", v, ", over 255: set mask_dtype='uint16'"));
        }
        out[i] = static_cast<uint8_t>(v);
      }
    }
    r->mask_bytes = n * bpp;
    if (file_.capacity() > (16u << 20)) std::vector<uint8_t>().swap(file_);
    return absl::OkStatus();
  }

  std::vector<uint8_t> file_;
  std::unordered_map<image::ImageFormat, std::unique_ptr<image::ImageDecoder>> decoders_;
  image::LabelMap map_;
  std::vector<uint8_t> scratch_;
  const int root_fd_;
};

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// The transcode cache's side of one task (server/engine/transcode_cache.h, "Who
// does what", step 2). Nothing here fails the sample.
class CacheClient {
 public:
  // `dir_fd`: the transcode cache's directory (-1: none; then every task
  // says kTaskCacheOff).
  explicit CacheClient(int dir_fd) : dir_fd_(dir_fd) {}

  // Looks the input up: true with the entry's payload in *entry (at
  // *payload_offset, *payload_bytes) on a hit; else false, r->cache_event
  // saying kCacheBad when the entry failed its check.
  bool Lookup(const TaskMsg& t, std::string_view path, const Input& in, std::vector<uint8_t>* entry,
              size_t* payload_offset, size_t* payload_bytes, ResultMsg* r) {
    key_ = CacheKeyFor(IdentityOf(path, in.st, t.has_range != 0, t.file_offset, t.file_length));
    r->cache_key_hi = key_.hi;
    r->cache_key_lo = key_.lo;
    const std::string name = CacheEntryName(key_);
    UniqueFd fd(
        ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd.valid()) return false;  // ENOENT: a miss; anything else costs only the cache
    struct stat st;
    bool ok = ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
              static_cast<uint64_t>(st.st_size) >= kEnvelopeBytes &&
              static_cast<uint64_t>(st.st_size) - kEnvelopeBytes <= MaxPayloadBytes(in.length) &&
              ReadRange(fd.get(), 0, static_cast<uint64_t>(st.st_size), entry).ok() &&
              OpenEnvelope(entry->data(), entry->size(), in.length, MtimeNs(in.st), payload_offset,
                           payload_bytes)
                  .ok();
    if (!ok) {
      r->cache_event = kCacheBad;
      return false;
    }
    r->cache_event = kCacheHit;
    r->cache_entry_bytes = entry->size();
    return true;
  }

  // A miss on `original`: when it is multi-scan, re-codes it into *copy
  // (true: decode the copy) and, when the task allows, writes the entry.
  bool Fill(const TaskMsg& t, const Input& in, const std::vector<uint8_t>& original,
            std::vector<uint8_t>* copy, ResultMsg* r) {
    if (CountScans(original.data(), original.size()) <= 1) {
      r->cache_event = kCacheNotNeeded;
      return false;
    }
    // A file the transcoder refused (truncated, corrupt, an unfinished
    // script) is not tried again by this worker: each try costs about 1.6
    // decodes.
    if (refused_.count(key_.hi ^ key_.lo) != 0) {
      r->cache_event = kCacheNotNeeded;
      return false;
    }
    r->cache_event = kCacheMiss;
    if (t.cache != kTaskCacheReadWrite) return false;
    image::DecodeLimits limits;
    limits.max_pixels = t.params.max_decode_pixels;
    const int64_t t0 = MonotonicNs();
    const absl::Status st = transcoder_.ToBaseline(original.data(), original.size(), limits, copy);
    r->transcode_ns = static_cast<uint64_t>(MonotonicNs() - t0);
    if (!st.ok()) {
      // Not cacheable (corrupt, truncated, a kind the transcoder refuses):
      // decode the original, which fails the same way if it is corrupt.
      if (refused_.size() >= (1u << 20)) refused_.clear();
      refused_.insert(key_.hi ^ key_.lo);
      r->cache_event = kCacheNotNeeded;
      return false;
    }
    if (copy->size() > MaxPayloadBytes(in.length)) return true;  // decoded, never cached
    WriteEnvelope(in.length, MtimeNs(in.st), copy->data(), copy->size(), &envelope_);
    const std::string temp = CacheTempName(key_);
    UniqueFd fd(::openat(dir_fd_, temp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.valid()) {
      // EEXIST: another worker is writing this entry (or a crashed one left
      // its temporary, removed at the next start-up).
      r->cache_write_errno = errno != EEXIST ? static_cast<uint32_t>(errno) : 0;
      return true;
    }
    int err = 0;
    if (!stoker::WriteAll(fd.get(), envelope_.data(), envelope_.size())) err = errno;
    if (::close(fd.Release()) != 0 && err == 0) err = errno;
    if (err == 0 && ::renameat(dir_fd_, temp.c_str(), dir_fd_,
                               CacheEntryName(key_).c_str()) != 0) {
      err = errno;
    }
    if (err == 0) {
      r->cache_bytes_written = envelope_.size();
    } else {
      r->cache_write_errno = static_cast<uint32_t>(err != 0 ? err : EIO);
      r->cache_temp_left = 1;
    }
    r->transcode_ns = static_cast<uint64_t>(MonotonicNs() - t0);  // and the write
    if (envelope_.capacity() > (64u << 20)) std::vector<uint8_t>().swap(envelope_);
    return true;
  }

 private:
  CacheKey key_;
  std::unordered_set<uint64_t> refused_;  // keys (hi ^ lo) ToBaseline refused
  image::Transcoder transcoder_;
  std::vector<uint8_t> envelope_;
  const int dir_fd_;
};


}  // namespace

int Serve(const WorkerFds& fds) {
  std::unordered_map<uint64_t, RingMap> rings;
  image::SampleProcessor processor;
  std::vector<uint8_t> input;
  input.reserve(1 << 20);
  std::vector<uint8_t> entry;  // a transcode cache entry read
  std::vector<uint8_t> copy;   // a baseline copy just made
  CacheClient cache(fds.transcode_cache);
  MaskWriter masks(fds.data_root);
  std::vector<double> box_scratch;
  image::SampleSteps steps;
  ClipWork clips;
  VolumeWork volumes;
  std::vector<int64_t> probe_values;
  auto msg_buf = std::make_unique<TaskMsg>();
  char* raw = reinterpret_cast<char*>(msg_buf.get());

  HelloMsg hello;
  hello.pid = ::getpid();
  if (!SendMessage(fds.channel, &hello, sizeof(hello))) return 1;

  for (;;) {
    UniqueFd owned_fd;
    const ssize_t n = ReceiveWithFd(fds.channel, raw, sizeof(TaskMsg), &owned_fd);
    if (n <= 0) return 0;  // the daemon is gone
    if (static_cast<size_t>(n) < sizeof(uint32_t)) return 2;
    uint32_t type;
    std::memcpy(&type, raw, sizeof(type));
    switch (type) {
      case kMapRing: {
        if (static_cast<size_t>(n) != sizeof(MapRingMsg) || !owned_fd.valid()) return 2;
        MapRingMsg m;
        std::memcpy(&m, raw, sizeof(m));
        RingMap rm;
        // MAP_POPULATE: map every page of the reserved slots now. Otherwise
        // each worker takes a page fault on the first write to each 4 KiB of
        // every slot (float32 batches: ~150 per sample). Slots the ring has
        // not reserved are holes: populating them would allocate them.
        if (!MapShared(owned_fd.get(), m.data_offset, m.data_bytes, &rm.map, /*populate=*/true,
                       std::max<uint64_t>(m.populate_bytes, 1))
                 .ok()) {
          return 3;
        }
        rm.bytes = m.data_bytes;
        rings[m.ring_id] = std::move(rm);
        break;
      }
      case kUnmapRing: {
        if (static_cast<size_t>(n) != sizeof(UnmapRingMsg)) return 2;
        UnmapRingMsg m;
        std::memcpy(&m, raw, sizeof(m));
        rings.erase(m.ring_id);
        break;
      }
      case kShutdown:
        return 0;
      case kProbe: {
        ProbeMsg m;
        if (static_cast<size_t>(n) < ProbeHeaderBytes() ||
            static_cast<size_t>(n) > sizeof(ProbeMsg)) {
          return 2;
        }
        std::memcpy(&m, raw, static_cast<size_t>(n));
        if (m.path_bytes > kMaxPathBytes || static_cast<size_t>(n) != ProbeHeaderBytes() + m.path_bytes) {
          return 2;
        }
        ProbeResultMsg r{};
        r.type = kProbeResult;
        r.probe_id = m.probe_id;
        if (m.kind == kProbeVideo) {
          ProbeVideo(m, fds.data_root, &r, &probe_values);
        } else {
          ProbeRecords(m, fds.data_root, &r, &probe_values);
        }
        if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
        ProbePtsMsg chunk;
        for (size_t at = 0; at < probe_values.size(); at += kProbePtsPerMsg) {
          chunk.count = static_cast<uint32_t>(
              std::min<size_t>(kProbePtsPerMsg, probe_values.size() - at));
          std::memcpy(chunk.values, probe_values.data() + at, chunk.count * sizeof(int64_t));
          if (!SendMessage(fds.channel, &chunk,
                       offsetof(ProbePtsMsg, values) + chunk.count * sizeof(int64_t))) {
            return 1;
          }
        }
        if (probe_values.capacity() > (8u << 20)) std::vector<int64_t>().swap(probe_values);
        break;
      }
      case kTask: {
        const TaskMsg& t = *msg_buf;
        if (!TaskBytesAddUp(t, static_cast<size_t>(n))) return 2;
        std::string_view path(t.path, t.path_bytes);
        std::string_view mask_path(t.path + t.path_bytes, t.mask_path_bytes);
        ResultMsg r{};
        r.task_id = t.task_id;
        r.reason[0] = '\0';
        auto it = rings.find(t.ring_id);
        if (it == rings.end() || !TaskFitsRing(t, it->second.bytes)) {
          SetReason(&r, absl::StatusCode::kInternal, "task names memory outside its ring");
          if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
          break;
        }
        if (t.fault == kFaultCrash) ::abort();
        if (t.fault == kFaultHang) ::pause();
        // A decode node's clip or volume whose files were shipped to it.
        const int files_root = t.shipped_files != 0 ? fds.shipped_files : fds.data_root;
        if (t.shipped_files != 0 && files_root < 0) {
          SetReason(&r, absl::StatusCode::kInternal, "shipped files, but no store to read them from");
          if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
          break;
        }
        if (t.has_volume != 0) {  // a volume session's sample
          uint8_t* base = static_cast<uint8_t*>(it->second.map.addr());
          volumes.Run(t, path, mask_path, files_root, fds.prepared_cache, base + t.out_offset,
                      t.mask_out_capacity != 0 ? base + t.mask_out_offset : nullptr, &r);
          if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
          break;
        }
        if (t.clip.params.frames != 0) {  // a video session's clip
          clips.Run(t, path, files_root,
                    static_cast<uint8_t*>(it->second.map.addr()) + t.out_offset, &r);
          if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
          clips.Trim(size_t{256} << 20);
          break;
        }
        int64_t t0 = MonotonicNs();
        Input in;
        const uint8_t* ring_base = static_cast<const uint8_t*>(it->second.map.addr());
        absl::Status st = t.inline_input != 0 ? absl::OkStatus()
                                              : OpenInput(fds.data_root, t, path, &in);
        // An evaluation pipeline's image: its output from the prepared
        // cache, or computed below and kept there.
        std::string prepared_name;
        uint64_t prepared_id = 0, prepared_key = 0;
        if (st.ok() && t.prepared_recipe != 0 && fds.prepared_cache >= 0 && t.inline_input == 0) {
          ImageEntryIds(t.prepared_recipe,
                        IdentityOf(path, in.st, t.has_range != 0, t.file_offset, t.file_length),
                        &prepared_id, &prepared_key);
          prepared_name = ImageEntryName(prepared_id);
          ImageEntryInfo info;
          uint8_t* out = static_cast<uint8_t*>(it->second.map.addr()) + t.out_offset;
          if (ReadImageEntry(fds.prepared_cache, prepared_name, prepared_key, out, t.out_capacity,
                             &info)) {
            r.height = info.height;
            r.width = info.width;
            r.channels = info.channels;
            r.bytes = info.bytes;
            r.format = info.format;
            r.input_bytes = ImageEntryBytes(info);
            r.decode_path = static_cast<uint32_t>(image::kDecodePathCount);  // none
            r.prepared_hit = 1;
            r.prepared_entry_kind = kPreparedImage;
            r.read_ns = static_cast<uint64_t>(MonotonicNs() - t0);
            if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
            break;
          }
        }
        // What is decoded: `input` (the original, or a copy re-coded from
        // it) or the payload of a cache entry in `entry`.
        const uint8_t* jpeg = nullptr;
        size_t jpeg_bytes = 0;
        bool baseline_copy = false;
        if (t.inline_input != 0) {
          jpeg = ring_base + t.input_offset;
          jpeg_bytes = t.input_length;
        } else if (st.ok() && t.cache != kTaskCacheOff && fds.transcode_cache >= 0) {
          size_t offset = 0;
          if (cache.Lookup(t, path, in, &entry, &offset, &jpeg_bytes, &r)) {
            jpeg = entry.data() + offset;
            baseline_copy = true;
          }
        }
        if (st.ok() && jpeg == nullptr) {
          st = ReadInput(t, in, &input);
          jpeg = input.data();
          jpeg_bytes = input.size();
          if (st.ok() && t.cache != kTaskCacheOff && fds.transcode_cache >= 0 &&
              r.cache_event != kCacheBad &&
              cache.Fill(t, in, input, &copy, &r)) {
            jpeg = copy.data();
            jpeg_bytes = copy.size();
            baseline_copy = true;
          }
        }
        r.read_ns = static_cast<uint64_t>(MonotonicNs() - t0) - r.transcode_ns;
        if (st.ok()) {
          r.input_bytes = jpeg_bytes;
          r.format = static_cast<uint32_t>(image::SniffFormat(jpeg, jpeg_bytes));
          image::SampleResult res;
          uint8_t* out = static_cast<uint8_t*>(it->second.map.addr()) + t.out_offset;
          processor.set_inputs_are_baseline_copies(baseline_copy);
          // RandomIoUCrop draws with the sample's boxes (the daemon's input,
          // in place until the steps move them below).
          processor.set_boxes(
              t.has_boxes != 0 ? reinterpret_cast<const float*>(
                                     static_cast<uint8_t*>(it->second.map.addr()) + t.box_out_offset)
                               : nullptr,
              t.box_count);
          // One sample's outputs from `data`: its image, or its views.
          void* view_outs[image::kMaxViews] = {};
          size_t view_capacities[image::kMaxViews] = {};
          for (uint32_t k = 0; t.params.view_count != 0 && k < image::OutputCount(t.params);
               ++k) {
            view_outs[k] = static_cast<uint8_t*>(it->second.map.addr()) + t.view_out_offset[k];
            view_capacities[k] = t.view_out_capacity[k];
          }
          const auto process = [&](const uint8_t* data, size_t bytes) {
            return t.params.view_count != 0
                       ? processor.ProcessViews(data, bytes, t.params, t.key, view_outs,
                                                view_capacities, &res)
                       : processor.Process(data, bytes, t.params, t.key, out, t.out_capacity,
                                           &res, &steps);
          };
          st = process(jpeg, jpeg_bytes);
          processor.set_inputs_are_baseline_copies(false);
          if (!st.ok() && baseline_copy) {
            // ABORTED: at DCT scale 1/8 the original's DC scans decode
            // faster. Any other error: a copy that does not decode must not
            // cost the sample. Either way, decode the original. When that
            // works after a failed copy, the copy was wrong (the
            // transcoder's bug, or an entry that passed its checksums):
            // have it deleted. When the original fails too, the sample is
            // at fault (e.g. not the pipeline's fixed size), not the copy.
            const bool copy_failed = st.code() != absl::StatusCode::kAborted;
            baseline_copy = false;
            st = r.cache_event == kCacheHit ? ReadInput(t, in, &input) : absl::OkStatus();
            if (st.ok()) {
              st = process(input.data(), input.size());
                }
            if (copy_failed && st.ok() &&
                (r.cache_event == kCacheHit || r.cache_bytes_written != 0)) {
              r.cache_event = kCacheBad;
            }
          }
          r.height = res.height;
          r.width = res.width;
          r.channels = res.channels;
          r.bytes = res.bytes;
          r.decode_ns = res.decode_ns;
          r.augment_ns = res.augment_ns;
          r.decode_path =
              static_cast<uint32_t>(baseline_copy ? image::DecodePath::kBaseline : res.decode_path);
          r.dct_scale = res.dct_scale;
          // A copy exists only for a progressive (multi-scan) original.
          r.progressive = res.progressive || baseline_copy ? 1 : 0;
          if (st.ok() && t.mask_path_bytes != 0) {
            const int64_t m0 = MonotonicNs();
            uint8_t* mask_out = static_cast<uint8_t*>(it->second.map.addr()) + t.mask_out_offset;
            st = masks.Write(t, mask_path,
                             t.inline_input != 0 ? ring_base + t.mask_input_offset : nullptr,
                             steps, res, mask_out, &r);
            r.augment_ns += static_cast<uint64_t>(MonotonicNs() - m0);
          }
          if (st.ok() && t.has_boxes != 0) {
            uint8_t* base = static_cast<uint8_t*>(it->second.map.addr());
            image::BoxSet set;
            set.xyxy = reinterpret_cast<float*>(base + t.box_out_offset);
            set.labels = reinterpret_cast<int64_t*>(base + t.box_label_out_offset);
            set.flags = base + t.box_flag_out_offset;
            set.count = t.box_count;
            image::BoxRules rules;
            rules.min_size = t.params.box_min_size;
            rules.min_visibility = t.params.box_min_visibility;
            st = image::ApplyBoxSteps(steps, res.drawn_height, res.drawn_width, rules, &set,
                                      &box_scratch);
            r.boxes_kept = st.ok() ? set.count : 0;
          }
        }
        if (st.ok() && !prepared_name.empty()) {
          // A failure costs a later epoch a decode, not this sample.
          ImageEntryInfo info{r.height, r.width, r.channels, r.format, r.bytes};
          if (WriteImageEntry(fds.prepared_cache, prepared_name, prepared_key,
                              static_cast<uint8_t*>(it->second.map.addr()) + t.out_offset, info)
                  .ok()) {
            r.prepared_entry_id = prepared_id;
            r.prepared_entry_bytes = ImageEntryBytes(info);
            r.prepared_entry_kind = kPreparedImage;
          }
        }
        if (!st.ok()) SetReason(&r, st.code(), std::string(st.message()));
        if (!SendMessage(fds.channel, &r, sizeof(r))) return 1;
        // Keep the read buffers from pinning a huge file's memory forever,
        // nor the working buffers a huge image's.
        for (auto* b : {&input, &entry, &copy}) {
          if (b->capacity() > (64u << 20)) std::vector<uint8_t>().swap(*b);
        }
        processor.TrimBuffers(image::kKeepFreeBytes);
        break;
      }
      default:
        return 2;
    }
  }
}

}  // namespace stoker::worker
