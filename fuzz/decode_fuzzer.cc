// libFuzzer target: the worker's decode path, SampleProcessor::Process (and
// ProcessSteps), on arbitrary bytes, with the train, eval and decode
// presets and with op lists of every kind.
//
// Input: 8 bytes of parameters, then the file.
//   [0] mode: 0 train, 1 eval, 2 decode at a fixed size, 3 decode at the
//       image's own size (variable), 4 train with a given crop box and flip,
//       5 an op list made from [4..7] (any size unless flag 128)
//   [1] [2] output height, width - 1 (mod 64)
//   [3] flags: 1 exact_decode, 2 apply_exif, 4 bilinear, 8|16 dtype
//       (uint8, uint8, float32, float16), 32 NCHW, 64 flip (mode 4),
//       128 (mode 5) the fixed output shape [1] x [2]
//   [4..7] eval: resize_size; train: scale and ratio; mode 4: the crop box;
//       mode 5: one op each (low 4 bits the kind, high 4 its parameters);
//       all: the sample key
// The output goes to a buffer of exactly the capacity the daemon would give
// (so that ASan sees any write past it); a success must describe a sample
// that fits it. Caps are small (4 Mpx) so that each input stays fast.
// And JpegDecoder::Window with restart-interval seeking against without it,
// on a window and scale made from [1..7]: when the plain crop and skip read
// the rows, seeking reads them too, the same bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "server/image/decode/jpeg_decoder.h"
#include "server/image/pipeline.h"
#include "stoker/ring_layout.h"

namespace {

constexpr size_t kParamBytes = 8;
constexpr uint64_t kMaxDecodePixels = 4ull << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "decode_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

// One buffer per capacity, reused: exactly `bytes` long.
uint8_t* Buffer(size_t bytes) {
  static std::map<size_t, std::vector<uint8_t>> buffers;
  auto& b = buffers[bytes];
  if (b.size() != bytes) b.assign(bytes, 0);
  return b.data();
}

// One op from a byte: the kind from the low 4 bits, its parameters from the
// high 4 (small sizes, every padding mode, odd kernels).
void AddOp(uint8_t b, stoker::image::PipelineParams* p, stoker::image::Interpolation interp) {
  using stoker::image::OpKind;
  using stoker::image::Interpolation;
  using stoker::image::PadMode;
  const uint32_t k = b & 15, v = b >> 4;
  stoker::image::OpParams& op = p->ops[p->op_count];
  const Interpolation affine_interp =
      (v & 8) != 0 ? Interpolation::kBilinear : Interpolation::kNearest;
  switch (k) {
    case 0:  // the detection reference's ops (RandomIoUCrop without boxes: no crop)
      if (v == 0) return;  // 0: no op
      if (v % 3 == 0) {
        op.kind = OpKind::kRandomZoomOut;
        op.p = v / 15.0f;
        op.side_range[0] = 1.0f, op.side_range[1] = 1.0f + (v & 3);
        op.fill[0] = static_cast<uint8_t>(b), op.fill[1] = 1, op.fill[2] = 254;
      } else if (v % 3 == 1) {
        op.kind = OpKind::kRandomIoUCrop;
        op.iou_scale[0] = 0.3f, op.iou_scale[1] = 1.0f;
        op.iou_aspect[0] = 0.5f, op.iou_aspect[1] = 2.0f;
        op.iou_option_count = 2;
        op.iou_options[0] = 0.0f, op.iou_options[1] = 1.0f;
        op.iou_trials = 1 + v;
      } else {
        op.kind = OpKind::kRandomPhotometricDistort;
        op.p = v / 15.0f;
        op.jitter_set = 0xf;
        for (int j = 0; j < 3; ++j) op.jitter[j][0] = 0.5f, op.jitter[j][1] = 1.5f;
        op.jitter[3][0] = -0.05f, op.jitter[3][1] = 0.05f;
      }
      break;
    case 1:
      op.kind = OpKind::kRandomResizedCrop;
      op.height = 1 + v * 3, op.width = 1 + v * 5;
      op.scale[0] = 0.08f, op.scale[1] = 1.0f;
      op.ratio[0] = 0.75f, op.ratio[1] = 4.0f / 3.0f;
      op.interpolation = interp;
      break;
    case 2:
      op.kind = OpKind::kResize;
      op.height = 1 + v * 7;
      op.width = (v & 1) != 0 ? 1 + v * 3 : 0;
      op.max_size = (v & 2) != 0 && op.width == 0 ? op.height + 9 : 0;
      op.interpolation = interp;
      break;
    case 3:
      op.kind = OpKind::kCenterCrop;
      op.height = 1 + v * 9, op.width = 1 + v * 4;
      break;
    case 4:
      op.kind = OpKind::kRandomCrop;
      op.height = 1 + v * 6, op.width = 1 + v * 3;
      op.padding[0] = v & 3, op.padding[1] = v >> 2, op.padding[2] = v, op.padding[3] = 1;
      op.pad_if_needed = v & 1;
      op.padding_mode = static_cast<PadMode>(v & 3);
      op.fill[0] = static_cast<uint8_t>(b), op.fill[1] = 7, op.fill[2] = 200;
      break;
    case 5:
    case 6:
      op.kind = k == 5 ? OpKind::kHorizontalFlip : OpKind::kVerticalFlip;
      op.p = v / 15.0f;
      break;
    case 7:
      op.kind = OpKind::kColorJitter;
      op.jitter_set = v;
      for (int j = 0; j < 3; ++j) op.jitter[j][0] = 0.2f, op.jitter[j][1] = 1.0f + v * 0.3f;
      op.jitter[3][0] = -0.5f, op.jitter[3][1] = 0.5f;
      break;
    case 8:
      op.kind = OpKind::kGrayscale;
      break;
    case 9:
      op.kind = OpKind::kRandomGrayscale;
      op.p = v / 15.0f;
      break;
    case 10:
      op.kind = OpKind::kGaussianBlur;
      op.kernel_x = 1 + 2 * (v & 3), op.kernel_y = 1 + 2 * (v >> 2);
      op.sigma[0] = 0.1f, op.sigma[1] = 0.1f + v;
      break;
    case 11:
      op.kind = OpKind::kRandomAffine;
      op.degrees[0] = -12.0f * v, op.degrees[1] = 12.0f * v;
      op.has_translate = v & 1, op.translate[0] = 0.2f, op.translate[1] = 0.3f;
      op.has_scale = (v >> 1) & 1, op.affine_scale[0] = 0.5f, op.affine_scale[1] = 1.5f;
      op.shear_count = (v & 4) != 0 ? 4 : 0;
      op.shear[0] = -20, op.shear[1] = 20, op.shear[2] = -10, op.shear[3] = 10;
      op.interpolation = affine_interp;
      op.fill[0] = static_cast<uint8_t>(b), op.fill[1] = 9, op.fill[2] = 99;
      break;
    case 12:  // RandomRotation, the point ops, RandomPerspective, ElasticTransform, PIL's
              // blur: always
      op.p = 1.0f;
      switch (v % 10) {
        case 0:
          op.kind = OpKind::kRandomRotation;
          op.degrees[0] = -30.0f * v, op.degrees[1] = 30.0f * v;
          op.has_center = v >> 3, op.center[0] = 3.5f, op.center[1] = -2.0f;
          op.interpolation = affine_interp;
          break;
        case 1:
          op.kind = OpKind::kRandomPosterize, op.bits = v % 9;
          break;
        case 2:
          op.kind = OpKind::kRandomSolarize, op.threshold = 17.0f * v;
          break;
        case 3:
          op.kind = OpKind::kRandomAdjustSharpness, op.sharpness_factor = 0.3f * v;
          break;
        case 4:
          op.kind = OpKind::kRandomAutocontrast;
          break;
        case 5:
          op.kind = OpKind::kRandomEqualize;
          break;
        case 6:
          op.kind = OpKind::kRandomPerspective, op.distortion = v / 15.0f;
          op.interpolation = affine_interp;
          break;
        case 7:
          op.kind = OpKind::kElasticTransform;
          op.elastic_alpha[0] = 5.0f * v, op.elastic_alpha[1] = 3.0f;
          op.elastic_sigma[0] = op.elastic_sigma[1] = (v & 1) != 0 ? 1.0f : 0.0f;
          op.interpolation = affine_interp;
          break;
        case 8:
          op.kind = OpKind::kImageFilterGaussianBlur;
          op.sigma[0] = 0.0f, op.sigma[1] = 1.5f * static_cast<float>(v) * static_cast<float>(v);
          break;
        default:
          op.kind = OpKind::kRandomInvert;
          break;
      }
      break;
    case 13:
      if ((v & 4) != 0) {
        op.kind = OpKind::kTrivialAugmentWide;
        op.num_magnitude_bins = 2 + v;
      } else {
        op.kind = OpKind::kAutoAugment;
        op.policy = static_cast<stoker::image::AutoAugmentPolicy>(1 + v % 3);
      }
      op.interpolation = affine_interp;
      break;
    case 14:
      if ((v & 4) != 0) {
        op.kind = OpKind::kAugMix;
        op.severity = 1 + v % 10;
        op.mixture_width = 1 + (v & 3);
        op.chain_depth = (v & 1) != 0 ? -1 : 1 + (v & 3);
        op.alpha = 1.0f;
        op.all_ops = v & 1;
      } else {
        op.kind = OpKind::kRandAugment;
        op.num_ops = v & 3;
        op.num_magnitude_bins = 31;
        op.magnitude = 3 * v;
      }
      op.interpolation = affine_interp;
      break;
    case 15:  // valid only last, and "random" only for float outputs
      op.kind = OpKind::kRandomErasing;
      op.p = v / 15.0f;
      op.erase_scale[0] = 0.02f, op.erase_scale[1] = 0.33f;
      op.erase_ratio[0] = 0.3f, op.erase_ratio[1] = 3.3f;
      op.erase_random = v & 1;
      op.erase_value[0] = 0, op.erase_value[1] = 128, op.erase_value[2] = 255;
      break;
    default:
      return;
  }
  ++p->op_count;
}

}  // namespace

// Window (x, w, y) at a scale, then up to 64 rows: their bytes in the
// window's columns, or an error.
absl::Status ReadWindow(stoker::image::JpegDecoder* d, const uint8_t* data, size_t size,
                        const uint8_t* q, std::vector<uint8_t>* px) {
  stoker::image::DecodeLimits limits;
  limits.max_pixels = kMaxDecodePixels;
  limits.read_exif = false;
  stoker::image::JpegHeader h;
  stoker::image::DecodeInfo info;
  absl::Status s = d->ReadHeader(data, size, limits, &h);
  if (s.ok()) s = d->Start(1 << (q[1] % 4), &info);
  if (!s.ok()) return s;
  const uint32_t x = q[2] * info.width / 256, y = q[4] * info.height / 256;
  const uint32_t w = 1 + q[5] * (info.width - x - 1) / 255;
  const uint32_t y1 = std::min(info.height, y + 1 + q[6] % 64);
  uint32_t wx = x, ww = w;
  bool seeked = false;
  s = d->Window(&wx, &ww, y, &seeked);
  if (!s.ok()) return s;
  if (wx > x || wx + ww < x + w || d->next_row() != y) Fail("Window lost the window");
  std::vector<uint8_t> row(size_t{ww} * info.channels);
  for (uint32_t i = y; i < y1; ++i) {
    uint8_t* p = row.data();
    uint32_t got = 0;
    s = d->ReadRows(&p, 1, &got);
    if (!s.ok()) return s;
    if (got != 1) Fail("ReadRows gave no row");
    const uint8_t* from = row.data() + size_t{x - wx} * info.channels;
    px->insert(px->end(), from, from + size_t{w} * info.channels);
  }
  return y1 < info.height ? d->Stop() : d->Finish();
}

void CheckRestartWindows(const uint8_t* data, size_t size, const uint8_t* q) {
  static stoker::image::JpegDecoder seeking;
  static stoker::image::JpegDecoder plain(stoker::image::JpegDecoderOptions{false});
  std::vector<uint8_t> a, b;
  const absl::Status sb = ReadWindow(&plain, data, size, q, &b);
  const absl::Status sa = ReadWindow(&seeking, data, size, q, &a);
  if (sb.ok() && (!sa.ok() || a != b)) Fail("restart seeking read a window otherwise");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stoker::image::Interpolation;
  using stoker::image::OpKind;
  if (size < kParamBytes) return 0;
  const uint8_t* q = data;
  data += kParamBytes;
  size -= kParamBytes;

  CheckRestartWindows(data, size, q);

  stoker::image::PipelineParams p;
  const int mode = q[0] % 6;
  const uint32_t out_h = 1 + q[1] % 64, out_w = 1 + q[2] % 64;
  // Bicubic when the byte that picks bilinear also has its top bit set.
  const Interpolation interp = (q[3] & 4) == 0    ? Interpolation::kAntialias
                               : (q[4] & 128) != 0 ? Interpolation::kBicubic
                                                   : Interpolation::kBilinear;
  if (mode == 0 || mode == 4) {
    p.op_count = 2;
    stoker::image::OpParams& rrc = p.ops[0];
    rrc.kind = OpKind::kRandomResizedCrop;
    rrc.height = out_h, rrc.width = out_w;
    rrc.interpolation = interp;
    rrc.scale[0] = (1 + q[4] % 100) / 100.0f;
    rrc.scale[1] = std::max(rrc.scale[0], (1 + q[5] % 100) / 100.0f);
    rrc.ratio[0] = 0.25f + (q[6] % 8) * 0.1f;
    rrc.ratio[1] = rrc.ratio[0] + (q[7] % 8) * 0.25f;
    p.ops[1].kind = OpKind::kHorizontalFlip;
    p.ops[1].p = (q[3] & 64) != 0 ? 1.0f : 0.0f;
    p.out_height = out_h, p.out_width = out_w;
  } else if (mode == 1) {
    p.op_count = 2;
    p.ops[0].kind = OpKind::kResize;
    p.ops[0].height = std::max(out_h, out_w) + q[4] % 200;
    p.ops[0].interpolation = interp;
    p.ops[1].kind = OpKind::kCenterCrop;
    p.ops[1].height = out_h, p.ops[1].width = out_w;
    p.out_height = out_h, p.out_width = out_w;
  } else if (mode == 2) {
    p.out_height = out_h, p.out_width = out_w;
  } else if (mode == 5) {
    for (int i = 4; i < 8; ++i) AddOp(q[i], &p, interp);
    if ((q[3] & 128) != 0) p.out_height = out_h, p.out_width = out_w;
  }
  p.exact_decode = (q[3] & 1) != 0;
  p.apply_exif = (q[3] & 2) != 0;
  const int dt = (q[3] >> 3) & 3;
  p.dtype = dt == 2   ? stoker::ring::kFloat32
            : dt == 3 ? stoker::ring::kFloat16
                      : stoker::ring::kUint8;
  p.layout = (q[3] & 32) != 0 ? stoker::ring::kNCHW : stoker::ring::kNHWC;
  p.max_decode_pixels = kMaxDecodePixels;
  if (!stoker::image::ValidateParams(p).ok()) return 0;

  const uint64_t capacity = stoker::image::MaxSampleBytes(p);
  if (capacity == 0) Fail("MaxSampleBytes is 0 for valid params");
  uint8_t* out = Buffer(capacity);
  stoker::image::SampleKey key;
  key.seed = q[4] | (q[5] << 8);
  key.epoch = q[6];
  key.dataset_index = q[7];

  static stoker::image::SampleProcessor processor;  // reused, as in a worker
  stoker::image::SampleResult r;
  absl::Status st;
  if (mode == 4) {
    stoker::image::SampleSteps steps;
    steps.count = 2;
    steps.steps[0].kind = stoker::image::StepKind::kCrop;
    steps.steps[0].top = q[4] * 4u;
    steps.steps[0].left = q[5] * 4u;
    steps.steps[0].height = 1 + q[6] * 4u;
    steps.steps[0].width = 1 + q[7] * 4u;
    steps.steps[1].kind = stoker::image::StepKind::kResize;
    steps.steps[1].height = out_h;
    steps.steps[1].width = out_w;
    steps.steps[1].interpolation = interp;
    if ((q[3] & 64) != 0)
      steps.steps[steps.count++].kind = stoker::image::StepKind::kHorizontalFlip;
    st = processor.ProcessSteps(data, size, p, steps, out, capacity, &r);
  } else {
    st = processor.Process(data, size, p, key, out, capacity, &r);
  }
  if (!st.ok()) {
    if (st.message().empty()) Fail("a failure without a reason");
    return 0;
  }
  if (r.bytes > capacity) Fail("result larger than the capacity");
  if (r.channels != 3) Fail("result is not 3 channels");
  const unsigned __int128 need = static_cast<unsigned __int128>(r.height) * r.width * r.channels *
                                 stoker::ring::DTypeBytes(p.dtype);
  if (need != r.bytes) Fail("result bytes disagree with its shape");
  if (p.out_height != 0 && (r.height != p.out_height || r.width != p.out_width)) {
    Fail("fixed-shape result of another shape");
  }
  if (r.height == 0 || r.width == 0) Fail("empty result");
  if (p.out_height == 0 && uint64_t{r.height} * r.width > p.max_decode_pixels) {
    Fail("decoded more pixels than the cap");
  }
  return 0;
}
