#include "server/image/ops/labels.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/image/ops/ops.h"
#include "server/image/ops/perspective.h"

namespace stoker::image {
namespace {

void FlipLabels(LabelMap* m, bool horizontal) {
  const size_t row = size_t{m->width} * m->bpp;
  uint8_t* d = m->data.data();
  if (!horizontal) {
    for (uint32_t a = 0, b = m->height - 1; m->height > 0 && a < b; ++a, --b) {
      std::swap_ranges(d + a * row, d + (a + 1) * row, d + b * row);
    }
    return;
  }
  for (uint32_t y = 0; y < m->height; ++y) {
    uint8_t* r = d + y * row;
    for (uint32_t a = 0, b = m->width - 1; m->width > 0 && a < b; ++a, --b) {
      std::swap_ranges(r + size_t{a} * m->bpp, r + size_t{a + 1} * m->bpp, r + size_t{b} * m->bpp);
    }
  }
}

}  // namespace

absl::Status ApplyLabelSteps(const SampleSteps& steps, uint32_t fill, LabelMap* m,
                             std::vector<uint8_t>* scratch) {
  uint8_t fill_bytes[4];
  if (m->binary) fill = fill != 0 ? 1 : 0;
  if (m->bpp == 1) {
    fill_bytes[0] = static_cast<uint8_t>(fill);
  } else {
    const uint16_t v = static_cast<uint16_t>(fill);
    std::memcpy(fill_bytes, &v, 2);
  }
  int mix_depth = 0;
  for (uint32_t i = 0; i < steps.count; ++i) {
    const Step& s = steps.steps[i];
    if (s.kind == StepKind::kMixBegin) ++mix_depth;
    if (s.kind == StepKind::kMixEnd) mix_depth = std::max(0, mix_depth - 1);
    if (mix_depth > 0) continue;
    switch (s.kind) {
      case StepKind::kCrop: {
        if (uint64_t{s.top} + s.height > m->height || uint64_t{s.left} + s.width > m->width) {
          return absl::InvalidArgumentError(absl::StrCat(
              "mask: crop ", s.width, "x", s.height, " at (", s.left, ", ", s.top,
              ") is outside the ", m->width, "x", m->height, " mask"));
        }
        const size_t row = size_t{s.width} * m->bpp;
        scratch->resize(size_t{s.height} * row);
        for (uint32_t y = 0; y < s.height; ++y) {
          std::memcpy(scratch->data() + y * row,
                      m->data.data() + (size_t{s.top + y} * m->width + s.left) * m->bpp, row);
        }
        m->height = s.height;
        m->width = s.width;
        m->data.swap(*scratch);
        break;
      }
      case StepKind::kPad: {
        const uint32_t h = m->height + s.pad[1] + s.pad[3];
        const uint32_t w = m->width + s.pad[0] + s.pad[2];
        scratch->resize(size_t{h} * w * m->bpp);
        PadLabels(m->data.data(), m->height, m->width, m->bpp, s.pad, s.padding_mode, fill_bytes,
                  scratch->data());
        m->height = h;
        m->width = w;
        m->data.swap(*scratch);
        break;
      }
      case StepKind::kResize: {
        scratch->resize(size_t{s.height} * s.width * m->bpp);
        ResizeLabels(m->data.data(), m->height, m->width, m->bpp, scratch->data(), s.height,
                     s.width);
        m->height = s.height;
        m->width = s.width;
        m->data.swap(*scratch);
        break;
      }
      case StepKind::kHorizontalFlip:
        FlipLabels(m, true);
        break;
      case StepKind::kVerticalFlip:
        FlipLabels(m, false);
        break;
      case StepKind::kElastic:
        return absl::UnimplementedError(
            "mask: ElasticTransform does not move masks (not served for segmentation sets)");
      case StepKind::kPerspective: {
        double coeffs[8];
        if (!PerspectiveStepCoeffs(s, m->height, m->width, coeffs)) {
          return absl::InvalidArgumentError("mask: a perspective step's corners give no transform");
        }
        scratch->resize(m->bytes());
        PerspectiveLabels(m->data.data(), m->height, m->width, m->bpp, coeffs, fill_bytes,
                          scratch->data());
        m->data.swap(*scratch);
        break;
      }
      case StepKind::kAffine:
      case StepKind::kRotate: {
        scratch->resize(m->bytes());
        if (s.kind == StepKind::kRotate) {
          RotateLabels(m->data.data(), m->height, m->width, m->bpp, s.angle,
                       s.has_center ? s.center : nullptr, fill_bytes, scratch->data());
        } else {
          double matrix[6];
          if (!AffineStepMatrix(s, m->height, m->width, matrix)) {
            return absl::InvalidArgumentError("mask: an affine step's matrix is not finite");
          }
          AffineLabels(m->data.data(), m->height, m->width, m->bpp, matrix, fill_bytes,
                       scratch->data());
        }
        m->data.swap(*scratch);
        break;
      }
      default:
        break;  // colour, point and erase steps leave labels alone
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
