#include "server/image/ops/boxes.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/image/ops/ops.h"

namespace stoker::image {
namespace {

// Each box twice: as clamped by every step, and as the same steps move it
// with no clamping (the denominator of its visibility).
constexpr int kClamped = 0;
constexpr int kFree = 4;

void Clamp(double* b, double width, double height) {
  b[0] = std::clamp(b[0], 0.0, width);
  b[1] = std::clamp(b[1], 0.0, height);
  b[2] = std::clamp(b[2], 0.0, width);
  b[3] = std::clamp(b[3], 0.0, height);
}

// The box holding the four corners of `b` through the forward map of the
// PIL matrix `m` (output point -> input point): m's inverse.
void MapCorners(const double m[6], double* b) {
  const double det = m[0] * m[4] - m[1] * m[3];
  const double xs[4] = {b[0], b[2], b[2], b[0]};
  const double ys[4] = {b[1], b[1], b[3], b[3]};
  double lo_x = INFINITY, lo_y = INFINITY, hi_x = -INFINITY, hi_y = -INFINITY;
  for (int k = 0; k < 4; ++k) {
    const double dx = xs[k] - m[2], dy = ys[k] - m[5];
    const double x = (m[4] * dx - m[1] * dy) / det;
    const double y = (-m[3] * dx + m[0] * dy) / det;
    lo_x = std::min(lo_x, x);
    hi_x = std::max(hi_x, x);
    lo_y = std::min(lo_y, y);
    hi_y = std::max(hi_y, y);
  }
  b[0] = lo_x;
  b[1] = lo_y;
  b[2] = hi_x;
  b[3] = hi_y;
}

double Area(const double* b) { return std::max(0.0, b[2] - b[0]) * std::max(0.0, b[3] - b[1]); }

// Each box's slots in the work array: clamped, free, then alive (1 or 0).
constexpr size_t kStride = 9;
constexpr int kAlive = 8;

// Moves `n` boxes through `steps` in `work` (kStride doubles each, filled
// here from `in`). strict: a box that is not one fails (else it is dead).
absl::Status Move(const SampleSteps& steps, uint32_t height, uint32_t width, const float* in,
                  uint32_t n, bool strict, std::vector<double>* scratch) {
  scratch->resize(size_t{n} * kStride);
  double* work = scratch->data();
  for (uint32_t i = 0; i < n; ++i) {
    const float* b_in = in + size_t{i} * 4;
    const bool finite = std::all_of(b_in, b_in + 4, [](float v) { return std::isfinite(v); });
    double* b = work + size_t{i} * kStride;
    if (!finite || b_in[2] < b_in[0] || b_in[3] < b_in[1]) {
      if (strict) {
        return absl::InvalidArgumentError(absl::StrCat(
            "box ", i, " (", b_in[0], ", ", b_in[1], ", ", b_in[2], ", ", b_in[3],
            ") is not a box: XYXY in pixels needs finite values with x2 >= x1 and y2 >= y1"));
      }
      std::fill(b, b + kStride, 0.0);
      continue;
    }
    for (int k = 0; k < 4; ++k) b[k] = b_in[k];
    Clamp(b + kClamped, width, height);
    for (int k = 0; k < 4; ++k) b[kFree + k] = b[kClamped + k];
    b[kAlive] = 1;
  }
  double h = height, w = width;
  int mix_depth = 0;
  for (uint32_t si = 0; si < steps.count; ++si) {
    const Step& s = steps.steps[si];
    if (s.kind == StepKind::kMixBegin) ++mix_depth;
    if (s.kind == StepKind::kMixEnd) mix_depth = std::max(0, mix_depth - 1);
    if (mix_depth > 0) continue;
    switch (s.kind) {
      case StepKind::kCrop: {
        if (uint64_t{s.top} + s.height > h || uint64_t{s.left} + s.width > w) {
          return absl::InvalidArgumentError(absl::StrCat(
              "boxes: crop ", s.width, "x", s.height, " at (", s.left, ", ", s.top,
              ") is outside the ", w, "x", h, " image"));
        }
        const double right = static_cast<double>(s.left) + s.width;
        const double bottom = static_cast<double>(s.top) + s.height;
        for (uint32_t i = 0; i < n; ++i) {
          double* b = work + size_t{i} * kStride;
          if (s.box_centers != 0) {  // RandomIoUCrop: centers strictly inside, or dropped
            const double cx = 0.5 * (b[0] + b[2]), cy = 0.5 * (b[1] + b[3]);
            if (!(s.left < cx && cx < right && s.top < cy && cy < bottom)) b[kAlive] = 0;
          }
          for (int base : {kClamped, kFree}) {
            b[base + 0] -= s.left;
            b[base + 1] -= s.top;
            b[base + 2] -= s.left;
            b[base + 3] -= s.top;
          }
          Clamp(b + kClamped, s.width, s.height);
        }
        h = s.height;
        w = s.width;
        break;
      }
      case StepKind::kPad:
        for (uint32_t i = 0; i < n; ++i) {
          double* b = work + size_t{i} * kStride;
          for (int base : {kClamped, kFree}) {
            b[base + 0] += s.pad[0];
            b[base + 1] += s.pad[1];
            b[base + 2] += s.pad[0];
            b[base + 3] += s.pad[1];
          }
        }
        h += static_cast<double>(s.pad[1]) + s.pad[3];
        w += static_cast<double>(s.pad[0]) + s.pad[2];
        break;
      case StepKind::kResize: {
        const double sx = s.width / w, sy = s.height / h;
        for (uint32_t i = 0; i < n; ++i) {
          for (int base : {kClamped, kFree}) {
            double* b = work + size_t{i} * kStride + base;
            b[0] *= sx;
            b[1] *= sy;
            b[2] *= sx;
            b[3] *= sy;
          }
        }
        h = s.height;
        w = s.width;
        break;
      }
      case StepKind::kHorizontalFlip:
      case StepKind::kVerticalFlip: {
        const int a = s.kind == StepKind::kHorizontalFlip ? 0 : 1;
        const double extent = a == 0 ? w : h;
        for (uint32_t i = 0; i < n; ++i) {
          for (int base : {kClamped, kFree}) {
            double* b = work + size_t{i} * kStride + base;
            const double lo = b[a];
            b[a] = extent - b[a + 2];
            b[a + 2] = extent - lo;
          }
        }
        break;
      }
      case StepKind::kElastic:
        return absl::UnimplementedError(
            "boxes: ElasticTransform does not move boxes (not served for detection sets)");
      case StepKind::kPerspective:
        return absl::UnimplementedError(
            "boxes: RandomPerspective does not move boxes (not served for detection sets)");
      case StepKind::kAffine:
      case StepKind::kRotate: {
        double m[6];
        const auto ih = static_cast<uint32_t>(h), iw = static_cast<uint32_t>(w);
        if (s.kind == StepKind::kRotate) {
          RotateStepMatrix(ih, iw, s.angle, s.has_center ? s.center : nullptr, m);
        } else if (!AffineStepMatrix(s, ih, iw, m)) {
          return absl::InvalidArgumentError("boxes: an affine step's matrix is not finite");
        }
        if (!(std::isfinite(m[0] * m[4] - m[1] * m[3]) && m[0] * m[4] - m[1] * m[3] != 0)) {
          return absl::InvalidArgumentError("boxes: an affine step's matrix is not invertible");
        }
        for (uint32_t i = 0; i < n; ++i) {
          double* b = work + size_t{i} * kStride;
          MapCorners(m, b + kClamped);
          MapCorners(m, b + kFree);
          Clamp(b + kClamped, w, h);
        }
        break;
      }
      default:
        break;  // colour, point and erase steps keep the geometry
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyBoxSteps(const SampleSteps& steps, uint32_t height, uint32_t width,
                           const BoxRules& rules, BoxSet* boxes, std::vector<double>* scratch) {
  const uint32_t n = boxes->count;
  if (absl::Status st = Move(steps, height, width, boxes->xyxy, n, /*strict=*/true, scratch);
      !st.ok()) {
    return st;
  }
  const double* work = scratch->data();
  uint32_t kept = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const double* b = work + size_t{i} * kStride;
    if (b[kAlive] == 0) continue;
    const double bw = b[2] - b[0], bh = b[3] - b[1];
    if (!(bw > 0 && bh > 0 && bw >= rules.min_size && bh >= rules.min_size)) continue;
    if (rules.min_visibility > 0) {
      const double free_area = Area(b + kFree);
      if (!(free_area > 0) || Area(b) / free_area < rules.min_visibility) continue;
    }
    float* out = boxes->xyxy + size_t{kept} * 4;
    for (int k = 0; k < 4; ++k) out[k] = static_cast<float>(b[k]);
    boxes->labels[kept] = boxes->labels[i];
    boxes->flags[kept] = boxes->flags[i];
    ++kept;
  }
  boxes->count = kept;
  return absl::OkStatus();
}

void MoveBoxes(const SampleSteps& steps, uint32_t height, uint32_t width, const float* xyxy,
               uint32_t count, std::vector<double>* out) {
  out->clear();
  std::vector<double> work;
  if (!Move(steps, height, width, xyxy, count, /*strict=*/false, &work).ok()) return;
  for (uint32_t i = 0; i < count; ++i) {
    const double* b = work.data() + size_t{i} * kStride;
    if (b[kAlive] != 0) out->insert(out->end(), b, b + 4);
  }
}

}  // namespace stoker::image
