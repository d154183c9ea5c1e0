#include "server/volume/spacing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace stoker::volume {
namespace {

using M4 = std::array<double, 16>;  // row-major

M4 Mul(const M4& a, const M4& b) {
  M4 c{};
  for (int r = 0; r < 4; ++r) {
    for (int col = 0; col < 4; ++col) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += a[r * 4 + k] * b[k * 4 + col];
      c[r * 4 + col] = s;
    }
  }
  return c;
}

// The inverse of a 4x4 by Gauss-Jordan with partial pivoting; false when
// singular.
bool Invert(const M4& m, M4* out) {
  double a[4][8];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) {
      a[r][c] = m[r * 4 + c];
      a[r][c + 4] = r == c ? 1.0 : 0.0;
    }
  }
  for (int c = 0; c < 4; ++c) {
    int p = c;
    for (int r = c + 1; r < 4; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    }
    if (!(std::fabs(a[p][c]) > 1e-300)) return false;
    if (p != c) {
      for (int k = 0; k < 8; ++k) std::swap(a[p][k], a[c][k]);
    }
    const double d = a[c][c];
    for (int k = 0; k < 8; ++k) a[c][k] /= d;
    for (int r = 0; r < 4; ++r) {
      if (r == c) continue;
      const double f = a[r][c];
      if (f == 0) continue;
      for (int k = 0; k < 8; ++k) a[r][k] -= f * a[c][k];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) (*out)[r * 4 + c] = a[r][c + 4];
  }
  return true;
}

}  // namespace

absl::StatusOr<SpacingPlan> PlanSpacing(const std::array<double, 16>& a,
                                        const std::array<int64_t, 3>& shape,
                                        const std::array<double, 3>& pixdim,
                                        uint64_t max_voxels) {
  for (int i = 0; i < 3; ++i) {
    if (!(pixdim[i] > 0) || !std::isfinite(pixdim[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Spacing: pixdim ", pixdim[i], " along axis ", i, " is not > 0"));
    }
  }
  // zoom_affine: rotation = rzs inv(zs), zs the upper Cholesky factor of
  // rzs^T rzs; the new linear part rotation diag(pixdim).
  double g[3][3];
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += a[k * 4 + r] * a[k * 4 + c];
      g[r][c] = s;
    }
  }
  double l[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c <= r; ++c) {
      double s = g[r][c];
      for (int k = 0; k < c; ++k) s -= l[r][k] * l[c][k];
      if (r == c) {
        if (!(s > 0)) return absl::InvalidArgumentError("Spacing: the affine is not invertible");
        l[r][r] = std::sqrt(s);
      } else {
        l[r][c] = s / l[c][c];
      }
    }
  }
  // zs = l^T (upper); its inverse by back substitution.
  double zi[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  for (int c = 0; c < 3; ++c) {
    for (int r = c; r >= 0; --r) {
      double s = r == c ? 1.0 : 0.0;
      for (int k = r + 1; k <= c; ++k) s -= l[k][r] * zi[k][c];
      zi[r][c] = s / l[r][r];
    }
  }
  M4 out_affine = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      double rot = 0;
      for (int k = 0; k < 3; ++k) rot += a[r * 4 + k] * zi[k][c];
      out_affine[r * 4 + c] = rot * pixdim[c];
    }
  }
  // compute_shape_offset (scale_extent=False).
  M4 out_inv;
  if (!Invert(out_affine, &out_inv)) {
    return absl::InvalidArgumentError("Spacing: the new affine is not invertible");
  }
  const M4 to_out = Mul(out_inv, a);
  double corner_in[8][3], corner_out[8][3];
  for (int i = 0; i < 8; ++i) {
    const double c[3] = {(i >> 2 & 1) != 0 ? static_cast<double>(shape[0] - 1) : 0.0,
                         (i >> 1 & 1) != 0 ? static_cast<double>(shape[1] - 1) : 0.0,
                         (i & 1) != 0 ? static_cast<double>(shape[2] - 1) : 0.0};
    for (int r = 0; r < 3; ++r) {
      corner_out[i][r] = to_out[r * 4 + 0] * c[0] + to_out[r * 4 + 1] * c[1] +
                         to_out[r * 4 + 2] * c[2] + to_out[r * 4 + 3];
      corner_in[i][r] = a[r * 4 + 0] * c[0] + a[r * 4 + 1] * c[1] + a[r * 4 + 2] * c[2] +
                        a[r * 4 + 3];
    }
  }
  SpacingPlan plan;
  uint64_t voxels = 1;
  for (int r = 0; r < 3; ++r) {
    double lo = corner_out[0][r], hi = corner_out[0][r];
    for (int i = 1; i < 8; ++i) {
      lo = std::min(lo, corner_out[i][r]);
      hi = std::max(hi, corner_out[i][r]);
    }
    const double n = std::nearbyint(hi - lo + 1.0);  // numpy's round: half to even
    if (!(n >= 1) || n > 1e9) {
      return absl::ResourceExhaustedError("Spacing: the output would have no size or too much");
    }
    plan.shape[r] = static_cast<int64_t>(n);
    if (voxels > max_voxels / static_cast<uint64_t>(plan.shape[r])) {
      voxels = max_voxels + 1;
    } else {
      voxels *= static_cast<uint64_t>(plan.shape[r]);
    }
  }
  if (voxels > max_voxels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Spacing: ", plan.shape[0], " x ", plan.shape[1], " x ", plan.shape[2],
        " voxels of pixdim (", pixdim[0], ", ", pixdim[1], ", ", pixdim[2], ") is over ",
        max_voxels));
  }
  int origin = -1;
  for (int i = 0; i < 8 && origin < 0; ++i) {
    bool smallest = true;
    for (int r = 0; r < 3; ++r) {
      double m = std::numeric_limits<double>::infinity();
      for (int j = 0; j < 8; ++j) m = std::min(m, corner_out[j][r] - corner_out[i][r]);
      if (std::fabs(m) > 1e-8) smallest = false;
    }
    if (smallest) origin = i;
  }
  for (int r = 0; r < 3; ++r) {
    double offset;
    if (origin >= 0) {
      offset = corner_in[origin][r];
    } else {
      offset = a[r * 4 + 3];
      for (int c = 0; c < 3; ++c) {
        offset += a[r * 4 + c] * (static_cast<double>(shape[c]) / 2.0) -
                  out_affine[r * 4 + c] * (static_cast<double>(plan.shape[c]) / 2.0);
      }
    }
    out_affine[r * 4 + 3] = offset;
  }
  plan.affine = out_affine;
  // spatial_resample's shortcut: the voxel map is the identity within 1e-3
  // (numpy's allclose: atol 1e-3, rtol 1e-5) and the shape is the same.
  M4 in_inv;
  if (!Invert(a, &in_inv)) return absl::InvalidArgumentError("Spacing: the affine is not invertible");
  const M4 xform = Mul(in_inv, out_affine);
  bool identity = plan.shape == shape;
  for (int r = 0; r < 4 && identity; ++r) {
    for (int c = 0; c < 4; ++c) {
      const double want = r == c ? 1.0 : 0.0;
      if (std::fabs(xform[r * 4 + c] - want) > 1e-3 + 1e-5 * std::fabs(want)) identity = false;
    }
  }
  plan.unchanged = identity;
  return plan;
}

absl::Status Resample(const SpacingPlan& plan, Interpolation mode, FloatVolume* v) {
  if (plan.unchanged) return absl::OkStatus();
  M4 in_inv;
  if (!Invert(v->affine, &in_inv)) {
    return absl::InvalidArgumentError("Spacing: the affine is not invertible");
  }
  const M4 x = Mul(in_inv, plan.affine);  // output voxel -> input voxel
  FloatVolume out;
  out.shape = plan.shape;
  out.channels = v->channels;
  out.affine = plan.affine;
  out.values.resize(static_cast<size_t>(out.Voxels()));
  const int64_t ni = v->shape[0], nj = v->shape[1], nk = v->shape[2];
  const double dims[3] = {static_cast<double>(ni - 1), static_cast<double>(nj - 1),
                          static_cast<double>(nk - 1)};
  for (int64_t k = 0; k < out.shape[2]; ++k) {
    for (int64_t j = 0; j < out.shape[1]; ++j) {
      for (int64_t i = 0; i < out.shape[0]; ++i) {
        double p[3];
        for (int r = 0; r < 3; ++r) {
          p[r] = x[r * 4 + 0] * static_cast<double>(i) + x[r * 4 + 1] * static_cast<double>(j) +
                 x[r * 4 + 2] * static_cast<double>(k) + x[r * 4 + 3];
        }
        for (int r = 0; r < 3; ++r) p[r] = std::min(std::max(p[r], 0.0), dims[r]);
        if (mode == Interpolation::kNearest) {
          const int64_t a = static_cast<int64_t>(std::nearbyint(p[0]));
          const int64_t b = static_cast<int64_t>(std::nearbyint(p[1]));
          const int64_t c = static_cast<int64_t>(std::nearbyint(p[2]));
          for (int64_t ch = 0; ch < v->channels; ++ch) {
            out.values[out.At(ch, i, j, k)] = v->values[v->At(ch, a, b, c)];
          }
          continue;
        }
        const int64_t i0 = static_cast<int64_t>(std::floor(p[0]));
        const int64_t j0 = static_cast<int64_t>(std::floor(p[1]));
        const int64_t k0 = static_cast<int64_t>(std::floor(p[2]));
        const int64_t i1 = std::min(i0 + 1, ni - 1), j1 = std::min(j0 + 1, nj - 1),
                      k1 = std::min(k0 + 1, nk - 1);
        const double fx = p[0] - static_cast<double>(i0), fy = p[1] - static_cast<double>(j0),
                     fz = p[2] - static_cast<double>(k0);
        for (int64_t ch = 0; ch < v->channels; ++ch) {
          auto at = [&](int64_t a, int64_t b, int64_t c) {
            return static_cast<double>(v->values[v->At(ch, a, b, c)]);
          };
          const double s = at(i0, j0, k0) * (1 - fx) * (1 - fy) * (1 - fz) +
                           at(i1, j0, k0) * fx * (1 - fy) * (1 - fz) +
                           at(i0, j1, k0) * (1 - fx) * fy * (1 - fz) +
                           at(i1, j1, k0) * fx * fy * (1 - fz) +
                           at(i0, j0, k1) * (1 - fx) * (1 - fy) * fz +
                           at(i1, j0, k1) * fx * (1 - fy) * fz +
                           at(i0, j1, k1) * (1 - fx) * fy * fz + at(i1, j1, k1) * fx * fy * fz;
          out.values[out.At(ch, i, j, k)] = static_cast<float>(s);
        }
      }
    }
  }
  *v = std::move(out);
  return absl::OkStatus();
}

}  // namespace stoker::volume
