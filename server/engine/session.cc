#include "server/engine/session.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/dataset/sampler.h"
#include "common/display_name.h"
#include "server/engine/liveness.h"
#include "spdlog/spdlog.h"
#include "stoker/ring_futex.h"

namespace stoker {

DaemonSession::DaemonSession() = default;
DaemonSession::~DaemonSession() = default;

void InitSession(DaemonSession& s, int64_t now_ns) {
  s.slot_busy.assign(s.plan.slots(), 0);
  s.depth_word = s.ring->header()->depth.load(std::memory_order_relaxed);
  s.created_ns = now_ns;
  s.keepalive_closed_ns = now_ns;
  s.current_epoch = s.plan.start_epoch;
}

const std::vector<uint64_t>& ShardFor(DaemonSession& s, uint32_t epoch) {
  auto it = s.shards.find(epoch);
  if (it != s.shards.end()) return it->second;
  while (s.shards.size() >= 4) s.shards.erase(s.shards.begin());
  return s.shards[epoch] = s.clips != nullptr ? s.clips->Shard(s.plan.sampler, epoch)
                                              : ShardIndices(s.dataset->size(), s.plan.sampler, epoch);
}

void StartBatches(DaemonSession& s, BatchContext& ctx) {
  const AttachPlan& p = s.plan;
  bool blocked = false;  // by a slot the client has not given back
  while ((p.total_batches == 0 || s.next_fill_seq < p.total_batches) &&
         s.filling.size() < p.slots()) {
    const uint64_t seq = s.next_fill_seq;
    const uint32_t slot = ring::SlotOf(s.depth_word, seq, p.slots());
    ring::SlotDescriptor* d = s.ring->descriptor(slot);
    if (s.slot_busy[slot]) {
      if (d->state.load(std::memory_order_acquire) != ring::kFree) {
        blocked = true;
        break;
      }
      s.slot_busy[slot] = 0;
      ++s.batches_consumed;
    }
    const uint64_t global = p.start_global + seq;
    const uint32_t epoch = static_cast<uint32_t>(global / p.batches_per_epoch);
    const uint64_t b = global % p.batches_per_epoch;
    const std::vector<uint64_t>& shard = ShardFor(s, epoch);
    const uint64_t first = b * p.sampler.batch_size;
    const uint32_t count =
        static_cast<uint32_t>(std::min<uint64_t>(p.sampler.batch_size, p.shard_size - first));
    BatchFill& f = s.filling[seq];
    f.seq = seq;
    f.slot = slot;
    f.epoch = epoch;
    f.batch_in_epoch = b;
    f.remaining = count;
    f.outcomes.assign(count, SampleOutcome{});
    f.tasks.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      auto owned = std::make_unique<SampleTask>();
      SampleTask& t = *owned;
      t.session = s.number;
      t.seq = seq;
      t.pos = i;
      t.epoch = epoch;
      t.shard_pos = first + i;
      t.planned_index = shard[first + i];
      t.index = t.planned_index;
      s.queue.push_back(&t);
      // (A clip reads a part of its video, where its decoder seeks: no
      // whole-file readahead.)
      // (A volume's cache entry, once made, is what its worker reads.)
      if (ctx.prefetch != nullptr && s.clips == nullptr && s.plan.volume_field < 0) {
        t.prefetch_key = ctx.next_prefetch_key++;
        const Dataset& ds = *s.dataset;
        ctx.prefetch->Enqueue(t.prefetch_key, std::string(ds.path(t.index)), ds.has_range(t.index),
                              ds.range_offset(t.index), ds.range_length(t.index));
      }
      f.tasks.push_back(std::move(owned));
    }
    d->sequence = seq;
    d->batch_in_epoch = b;
    d->epoch = epoch;
    d->sample_count = count;
    d->batch_status = ring::kBatchOk;
    d->error[0] = '\0';
    d->state.store(ring::kFilling, std::memory_order_release);
    s.slot_busy[slot] = 1;
    s.current_epoch = epoch;
    ++s.next_fill_seq;
  }
  // Full: every slot holds a batch for the client and none is filling (the
  // ring-depth policy's measure; server/engine/ring_depth.h).
  if (ctx.clock != nullptr) {
    const bool full = blocked && s.filling.empty();
    if (full && s.full_since_ns == 0) {
      s.full_since_ns = ctx.clock->NowNs();
    } else if (!full && s.full_since_ns != 0) {
      s.full_ns += static_cast<uint64_t>(ctx.clock->NowNs() - s.full_since_ns);
      s.full_since_ns = 0;
    }
  }
}

uint64_t FullNs(const DaemonSession& s, int64_t now_ns) {
  return s.full_ns +
         (s.full_since_ns != 0 ? static_cast<uint64_t>(now_ns - s.full_since_ns) : 0);
}

bool SetDepth(DaemonSession& s, uint32_t depth) {
  ring::RingHeader* h = s.ring->header();
  const uint32_t now = ring::DepthCount(s.depth_word);
  if (depth == now) return true;
  // Rule b: the client asks for no batch before the last change point.
  if (h->batches_consumed.load(std::memory_order_acquire) < ring::DepthFrom(s.depth_word)) {
    return false;
  }
  const uint64_t from = ring::DepthChangeFrom(s.next_fill_seq, now, depth);
  s.depth_word = ring::PackDepth(from, depth, now);
  h->depth.store(s.depth_word, std::memory_order_release);
  return true;
}

void ReleaseReadahead(SampleTask& t, BatchContext& ctx) {
  if (t.prefetch_key != 0 && ctx.prefetch != nullptr) {
    ctx.prefetch->Done(t.prefetch_key);
    t.prefetch_key = 0;
  }
}

std::string DisplayOf(const DaemonSession& s, uint64_t index) {
  return s.clips != nullptr ? s.clips->Display(*s.dataset, index) : s.dataset->display(index);
}

size_t BuildTaskMsg(const DaemonSession& s, const SampleTask& t, const TaskOptions& o,
                    worker::TaskMsg* msg) {
  const Dataset& ds = *s.dataset;
  const uint64_t entry = EntryOf(s, t.index);
  const std::string_view path = ds.path(entry);
  const bool volume = s.plan.volume_field >= 0;
  const std::string_view mask = s.plan.mask_dtype() != 0 || s.plan.volume_label_field >= 0
                                    ? ds.mask_path(t.index)
                                    : std::string_view();
  if (path.size() + mask.size() > worker::kMaxPathBytes) return 0;
  const BatchFill& f = s.filling.at(t.seq);
  msg->path_bytes = static_cast<uint32_t>(path.size());
  msg->mask_path_bytes = static_cast<uint32_t>(mask.size());
  msg->ring_id = s.number;
  const uint64_t slot_base = s.ring->geometry().slot_bytes * f.slot;
  // Any-size samples too have sample_bytes each: the most their ops can make.
  const int out_field = s.clips != nullptr ? s.plan.clip_field
                        : volume          ? s.plan.volume_field
                                          : s.plan.image_field;
  msg->out_offset = slot_base + s.plan.room_offset(out_field, t.pos);
  msg->out_capacity = s.plan.room_bytes(out_field);
  if (s.clips != nullptr) s.clips->FillTask(t.index, &msg->clip);
  for (size_t k = 0; k < s.plan.view_fields.size(); ++k) {
    msg->view_out_offset[k] = slot_base + s.plan.room_offset(s.plan.view_fields[k], t.pos);
    msg->view_out_capacity[k] = s.plan.room_bytes(s.plan.view_fields[k]);
  }
  if (volume) {
    msg->volume = s.plan.request.volume->params;
    msg->has_volume = 1;
    if (s.plan.volume_label_field >= 0) {  // zeros there when the entry has no label
      msg->mask_out_offset = slot_base + s.plan.room_offset(s.plan.volume_label_field, t.pos);
      msg->mask_out_capacity = s.plan.room_bytes(s.plan.volume_label_field);
    }
  } else if (!mask.empty()) {
    msg->mask_out_offset = slot_base + s.plan.room_offset(s.plan.mask_field, t.pos);
    msg->mask_out_capacity = s.plan.room_bytes(s.plan.mask_field);
    if (ds.has_mask_range(t.index)) {
      msg->mask_has_range = 1;
      msg->mask_file_offset = ds.mask_range_offset(t.index);
      msg->mask_file_length = ds.mask_range_length(t.index);
    }
  }
  if (s.plan.box_stride() != 0) {
    const uint32_t n = std::min(ds.box_count(t.index), s.plan.box_stride());
    msg->has_boxes = 1;
    msg->box_count = n;
    msg->box_out_offset = slot_base + s.plan.room_offset(s.plan.boxes_field, t.pos);
    msg->box_label_out_offset = slot_base + s.plan.room_offset(s.plan.box_labels_field, t.pos);
    msg->box_flag_out_offset = slot_base + s.plan.room_offset(s.plan.box_flags_field, t.pos);
    uint8_t* data = s.ring->slot_data(0);  // the data area's start
    if (n != 0) {
      std::memcpy(data + msg->box_out_offset, ds.box_xyxy(t.index), size_t{n} * 16);
      std::memcpy(data + msg->box_label_out_offset, ds.box_labels(t.index), size_t{n} * 8);
      std::memcpy(data + msg->box_flag_out_offset, ds.box_flags(t.index), n);
    }
  }
  msg->max_file_bytes = o.max_file_bytes;
  if (o.prepared_cache) msg->prepared_recipe = s.plan.prepared_recipe;
  if (ds.has_range(entry)) {
    msg->has_range = 1;
    msg->file_offset = ds.range_offset(entry);
    msg->file_length = ds.range_length(entry);
  }
  msg->raw_height = ds.raw_height();
  msg->raw_width = ds.raw_width();
  msg->raw_channels = ds.raw_channels();
  msg->key.seed = s.plan.sampler.seed;
  msg->key.epoch = t.epoch;
  msg->key.dataset_index = t.index;
  msg->params = s.plan.params();
  msg->simulate_latency_us = o.simulate_latency_us;
  if (!o.fault_crash_substring.empty() &&
      path.find(o.fault_crash_substring) != std::string_view::npos) {
    msg->fault = worker::kFaultCrash;
  } else if (!o.fault_hang_substring.empty() &&
             path.find(o.fault_hang_substring) != std::string_view::npos) {
    msg->fault = worker::kFaultHang;
  }
  std::memcpy(msg->path, path.data(), path.size());
  if (!mask.empty()) std::memcpy(msg->path + path.size(), mask.data(), mask.size());
  return worker::TaskHeaderBytes() + path.size() + mask.size();
}

bool CompleteSample(DaemonSession& s, SampleTask& t, const worker::ResultMsg& r,
                    BatchContext& ctx) {
  auto fit = s.filling.find(t.seq);
  if (fit == s.filling.end()) return false;
  BatchFill& f = fit->second;
  s.transcode_ns += r.transcode_ns;
  s.bytes_read += r.input_bytes;
  FormatTally* format = r.format < image::kImageFormatCount ? &s.formats[r.format] : nullptr;
  if (r.code != 0) {
    if (format != nullptr) ++format->failed;
    std::string reason(r.reason, strnlen(r.reason, sizeof(r.reason)));
    FailSample(s, t, reason.empty() ? "decode failed" : reason, ctx,
               absl::AsciiStrToLower(absl::StatusCodeToString(static_cast<absl::StatusCode>(r.code))));
    return true;
  }
  s.read_latency.Add(r.read_ns);
  s.decode_latency.Add(r.decode_ns);
  s.augment_latency.Add(r.augment_ns);
  if (s.plan.volume_field >= 0) {
    const uint64_t label_bytes =
        s.plan.volume_label_field >= 0 ? s.plan.room_bytes(s.plan.volume_label_field) : 0;
    if (r.bytes != s.plan.room_bytes(s.plan.volume_field) || r.mask_bytes != label_bytes) {
      FailSample(s, t,
                 absl::StrCat("worker reported patches (", r.bytes, " bytes, labels ",
                              r.mask_bytes, " bytes) that do not fit their slot"),
                 ctx, "bad_result");
      return true;
    }
  } else if (s.clips != nullptr) {
    const video::ClipParams& c = s.plan.request.clip->params;
    if (r.bytes != s.plan.room_bytes(s.plan.clip_field) || r.height != c.out_height ||
        r.width != c.out_width || r.channels != 3) {
      FailSample(s, t,
                 absl::StrCat("worker reported a clip (", r.bytes, " bytes, ", r.width, "x",
                              r.height, ") that does not fit its slot"),
                 ctx, "bad_result");
      return true;
    }
  }
  // A multi-view sample's bytes are all its views' (each of a fixed size).
  uint64_t want =
      uint64_t{r.height} * r.width * r.channels * ring::DTypeBytes(s.plan.params().dtype);
  uint64_t room = s.plan.sample_bytes();
  if (!s.plan.view_fields.empty()) {
    room = 0;
    for (int field : s.plan.view_fields) room += s.plan.room_bytes(field);
    if (r.height == s.plan.params().out_height && r.width == s.plan.params().out_width) {
      want = room;
    }
  }
  const bool mask_ok =
      s.plan.mask_dtype() == 0
          ? r.mask_bytes == 0
          : r.mask_bytes == uint64_t{r.height} * r.width * ring::DTypeBytes(s.plan.mask_dtype()) &&
                r.mask_bytes <= s.plan.room_bytes(s.plan.mask_field);
  const bool boxes_ok =
      s.plan.box_stride() == 0 ? r.boxes_kept == 0
                             : r.boxes_kept <= std::min(s.dataset->box_count(t.index),
                                                        s.plan.box_stride());
  if (s.clips == nullptr && s.plan.volume_field < 0 && (r.bytes != want || r.bytes > room || !mask_ok || !boxes_ok ||
                             (!s.plan.variable_size && r.bytes != room))) {
    if (format != nullptr) ++format->failed;
    FailSample(s, t,
               absl::StrCat("worker reported a sample (", r.bytes, " bytes, ", r.width, "x",
                            r.height, ", mask ", r.mask_bytes, " bytes, ", r.boxes_kept,
                            " boxes) that does not fit its slot"),
               ctx, "bad_result");
    return true;
  }
  if (format != nullptr) {
    ++format->samples;
    format->decode_latency.Add(r.decode_ns);
  }
  if (r.decode_path < image::kDecodePathCount) {
    DecodePathTally& dp = s.decode_paths[r.decode_path];
    ++dp.samples;
    dp.decode_ns += r.decode_ns;
  }
  SampleOutcome& o = f.outcomes[t.pos];
  o.status = t.index == t.planned_index ? ring::kSampleOk : ring::kSampleReplaced;
  o.height = r.height;
  o.width = r.width;
  o.channels = r.channels;
  o.box_count = r.boxes_kept;
  o.index = t.index;
  if (o.status == ring::kSampleReplaced) ++s.samples_replaced;
  ++s.samples_produced;
  ++ctx.samples_total;
  if (--f.remaining == 0) FinishBatch(s, t.seq);
  return true;
}

void FailSample(DaemonSession& s, SampleTask& t, const std::string& reason, BatchContext& ctx,
                const std::string& kind) {
  BatchFill& f = s.filling[t.seq];
  const std::string path = DisplayOf(s, t.index);
  // Counted once where the trainer sees it (the planned sample, replaced or
  // failed); a replacement that fails too is a replacement failure, and its
  // file is known bad from then on (listed, never chosen again).
  const bool planned = t.replacements == 0;
  FailureRecord& rec = s.failures[t.index];
  if (rec.path.empty()) {
    rec.path = path;
    rec.reason = reason;
    spdlog::warn("session {}: sample {} ({}) failed: {}", s.id, t.index, path, reason);
  }
  if (planned) {
    ++rec.count;
    ++s.failed_by_kind[kind];
    ++s.samples_failed;
    ++ctx.samples_failed_total;
    ctx.failure_memory->Remember(s.dataset->name(), t.index, path, reason);
  } else {
    ++s.replacement_failures;
  }
  const uint64_t shard_size = s.plan.shard_size;
  if (!s.plan.request.policy_error && t.replacements < kMaxReplacements) {
    // Replace it by the next sample of the shard not known to be bad: the
    // choice depends only on the shard order and on which files are bad.
    const std::vector<uint64_t>& shard = ShardFor(s, t.epoch);
    for (uint64_t k = 1; k <= shard_size && t.replacements < kMaxReplacements; ++k) {
      uint64_t cand = shard[(t.shard_pos + k) % shard_size];
      if (cand == t.index || s.failures.count(cand) != 0) continue;
      t.index = cand;
      ++t.replacements;
      t.crashes = CrashTally{};
      s.queue.push_front(&t);
      return;
    }
  }
  SampleOutcome& o = f.outcomes[t.pos];
  o.status = ring::kSampleFailed;
  o.index = t.index;
  if (s.plan.request.policy_error && !f.failed) {
    f.failed = true;
    f.error = absl::StrCat("sample ", t.index, " (", path, ") failed: ", reason);
    v1::SessionEvent e;
    e.set_kind(v1::SessionEvent::KIND_SAMPLE_FAILED);
    e.set_message(DisplayName(f.error));
    e.set_path(DisplayName(path));
    if (e.path() != path) e.set_path_bytes(path);
    e.set_dataset_index(t.index);
    s.events.push_back(std::move(e));
    if (ctx.on_event) ctx.on_event();
  }
  if (--f.remaining == 0) FinishBatch(s, t.seq);
}

namespace {

// `bytes` of mask values `fill` (ring DType `dtype`) at `out`.
void FillMask(uint8_t* out, uint64_t bytes, uint32_t dtype, uint32_t fill) {
  if (dtype == ring::kUint16) {
    const uint16_t v = static_cast<uint16_t>(fill);
    for (uint64_t i = 0; i + 2 <= bytes; i += 2) std::memcpy(out + i, &v, 2);
  } else if (bytes != 0) {
    std::memset(out, static_cast<int>(fill), bytes);
  }
}

}  // namespace

void FinishBatch(DaemonSession& s, uint64_t seq) {
  auto it = s.filling.find(seq);
  BatchFill& f = it->second;
  const AttachPlan& p = s.plan;
  ring::SlotDescriptor* d = s.ring->descriptor(f.slot);
  uint8_t* data = s.ring->slot_data(f.slot);
  const ring::Geometry& g = s.ring->geometry();
  const auto set_shape = [](ring::FieldRecord* fr, std::initializer_list<uint32_t> shape) {
    *fr = ring::FieldRecord{};
    std::copy(shape.begin(), shape.end(), fr->shape);
  };
  const image::PipelineParams& params = p.params();
  const bool nchw = params.layout == ring::kNCHW;
  for (uint32_t i = 0; i < f.outcomes.size(); ++i) {
    const SampleOutcome& o = f.outcomes[i];
    ring::SampleRecord& r = *ring::Record(d, g, i);
    ring::FieldRecord* fr = ring::FieldRecords(&r);
    r.planned_index = f.tasks[i]->planned_index;
    r.dataset_index = o.index;
    r.status = o.status;
    const int64_t label = s.dataset->label(EntryOf(s, o.index));
    std::memcpy(data + p.room_offset(p.label_field, i), &label, sizeof(label));
    set_shape(&fr[p.label_field], {});
    uint32_t h = o.height, w = o.width, c = o.channels, boxes = o.box_count;
    if (p.clip_field >= 0 || p.volume_field >= 0) {
      // Fixed: as their fields say; a failed clip's or volume's all zeros.
      for (int field : {p.clip_field, p.volume_field, p.volume_label_field}) {
        if (field < 0) continue;
        if (o.status == ring::kSampleFailed) {
          std::memset(data + p.room_offset(field, i), 0, p.room_bytes(field));
        }
        fr[field] = ring::FieldRecord{};
        std::copy_n(p.fields[field].max_shape, ring::kMaxRank, fr[field].shape);
      }
      continue;
    }
    if (o.status == ring::kSampleFailed) {
      // Zeros of the output shape, so that a fixed-shape batch keeps it,
      // and a mask all fill ("ignore": the sample adds nothing to a loss);
      // an any-size sample is empty.
      h = p.variable_size ? 0 : params.out_height;
      w = p.variable_size ? 0 : params.out_width;
      c = 3;
      boxes = 0;
      const uint64_t bytes = p.variable_size ? 0 : p.room_bytes(p.image_field);
      if (bytes != 0) std::memset(data + p.room_offset(p.image_field, i), 0, bytes);
      for (int field : p.view_fields) {
        std::memset(data + p.room_offset(field, i), 0, p.room_bytes(field));
      }
      if (p.mask_field >= 0) {
        FillMask(data + p.room_offset(p.mask_field, i),
                 p.variable_size ? 0 : p.room_bytes(p.mask_field), p.mask_dtype(), params.mask_fill);
      }
    }
    set_shape(&fr[p.image_field], nchw ? std::initializer_list<uint32_t>{c, h, w}
                                       : std::initializer_list<uint32_t>{h, w, c});
    for (int field : p.view_fields) {  // fixed: each as its field says
      fr[field] = ring::FieldRecord{};
      std::copy_n(p.fields[field].max_shape, ring::kMaxRank, fr[field].shape);
    }
    if (p.mask_field >= 0) set_shape(&fr[p.mask_field], {h, w});
    if (p.boxes_field >= 0) {
      set_shape(&fr[p.boxes_field], {boxes, 4});
      set_shape(&fr[p.box_labels_field], {boxes});
      set_shape(&fr[p.box_flags_field], {boxes});
    }
  }
  if (f.failed) {
    d->batch_status = ring::kBatchFailed;
    size_t n = std::min<size_t>(f.error.size(), ring::kErrorBytes - 1);
    std::memcpy(d->error, f.error.data(), n);
    d->error[n] = '\0';
  }
  d->state.store(ring::kReady, std::memory_order_release);
  ring::FutexWakeAll(&d->state);
  ++s.batches_produced;
  s.filling.erase(it);
}

void EndSession(DaemonSession& s, const std::string& why, BatchContext& ctx,
                std::unordered_map<uint64_t, SampleTask*>* in_flight) {
  s.ended = true;
  s.end_reason = why;
  for (auto& [seq, fill] : s.filling) {
    for (auto& t : fill.tasks) {
      if (t->in_flight) in_flight->erase(t->id);
      ReleaseReadahead(*t, ctx);
      t->prefetch_key = 0;
    }
  }
  s.queue.clear();
  auto* h = s.ring->header();
  h->daemon_state.store(ring::kStopped, std::memory_order_release);
  ring::FutexWakeAll(&h->daemon_state);
  for (uint32_t slot = 0; slot < s.plan.slots(); ++slot) {
    ring::FutexWakeAll(&s.ring->descriptor(slot)->state);
  }
  spdlog::info("session {} ended: {} ({} batches produced, {} samples failed)", s.id, why,
               s.batches_produced, s.samples_failed);
}

}  // namespace stoker
