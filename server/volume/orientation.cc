#include "server/volume/orientation.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace stoker::volume {
namespace {

using M3 = std::array<double, 9>;  // row-major

double Det(const M3& m) {
  return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
         m[2] * (m[3] * m[7] - m[4] * m[6]);
}

// (m^-1)^T, or false when m is singular.
bool InverseTranspose(const M3& m, M3* out) {
  const double d = Det(m);
  if (!(std::fabs(d) > 1e-300)) return false;
  // The cofactor matrix divided by the determinant is (m^-1)^T.
  const M3 cof = {m[4] * m[8] - m[5] * m[7], -(m[3] * m[8] - m[5] * m[6]), m[3] * m[7] - m[4] * m[6],
                  -(m[1] * m[8] - m[2] * m[7]), m[0] * m[8] - m[2] * m[6], -(m[0] * m[7] - m[1] * m[6]),
                  m[1] * m[5] - m[2] * m[4], -(m[0] * m[5] - m[2] * m[3]), m[0] * m[4] - m[1] * m[3]};
  for (int i = 0; i < 9; ++i) (*out)[i] = cof[i] / d;
  return true;
}

// The orthogonal polar factor of a nonsingular m (Newton's iteration
// R <- (R + R^-T) / 2, quadratic near the answer); m itself when singular,
// where the largest-magnitude choice below gives nibabel's answer for the
// axes that remain.
M3 PolarFactor(M3 m) {
  for (int it = 0; it < 100; ++it) {
    M3 inv_t;
    if (!InverseTranspose(m, &inv_t)) return m;
    double change = 0;
    for (int i = 0; i < 9; ++i) {
      const double next = 0.5 * (m[i] + inv_t[i]);
      change = std::max(change, std::fabs(next - m[i]));
      m[i] = next;
    }
    if (change < 1e-15) break;
  }
  return m;
}

constexpr char kLow[3] = {'L', 'P', 'I'};   // where a world axis begins
constexpr char kHigh[3] = {'R', 'A', 'S'};  // where it ends

}  // namespace

absl::StatusOr<Orientation3> IoOrientation(const std::array<double, 16>& a) {
  M3 rs;
  for (int col = 0; col < 3; ++col) {
    double zoom = 0;
    for (int r = 0; r < 3; ++r) zoom += a[r * 4 + col] * a[r * 4 + col];
    zoom = std::sqrt(zoom);
    if (zoom == 0) zoom = 1;
    for (int r = 0; r < 3; ++r) rs[r * 3 + col] = a[r * 4 + col] / zoom;
  }
  M3 r = PolarFactor(rs);
  Orientation3 o;
  for (int in = 0; in < 3; ++in) {
    int best = -1;
    double best_abs = 0;
    bool all_zero = true;
    for (int out = 0; out < 3; ++out) {
      const double x = std::fabs(r[out * 3 + in]);
      if (x > 1e-8) all_zero = false;
      if (x > best_abs) {
        best_abs = x;
        best = out;
      }
    }
    if (all_zero || best < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the affine maps voxel axis ", in, " to no world axis (a degenerate affine)"));
    }
    o[in].axis = best;
    o[in].flip = r[best * 3 + in] < 0 ? -1 : 1;
    for (int col = 0; col < 3; ++col) r[best * 3 + col] = 0;
  }
  return o;
}

std::string AxisCodes(const Orientation3& o) {
  std::string s;
  for (const AxisOrientation& x : o) s.push_back(x.flip < 0 ? kLow[x.axis] : kHigh[x.axis]);
  return s;
}

absl::StatusOr<Orientation3> FromAxisCodes(const std::string& codes) {
  Orientation3 o;
  bool used[3] = {false, false, false};
  if (codes.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "axcodes '", codes, "': three letters, one of each of R/L, A/P and S/I (e.g. RAS)"));
  }
  for (int i = 0; i < 3; ++i) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(codes[static_cast<size_t>(i)])));
    int axis = -1, flip = 1;
    for (int w = 0; w < 3; ++w) {
      if (c == kHigh[w]) axis = w;
      if (c == kLow[w]) axis = w, flip = -1;
    }
    if (axis < 0 || used[axis]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "axcodes '", codes, "': three letters, one of each of R/L, A/P and S/I (e.g. RAS)"));
    }
    used[axis] = true;
    o[i] = {axis, flip};
  }
  return o;
}

absl::Status Reorient(const std::string& codes, FloatVolume* v) {
  absl::StatusOr<Orientation3> src = IoOrientation(v->affine);
  if (!src.ok()) return src.status();
  absl::StatusOr<Orientation3> dst = FromAxisCodes(codes);
  if (!dst.ok()) return dst.status();
  // nibabel's ornt_transform: input axis a goes to output axis t[a].axis,
  // flipped when t[a].flip is -1.
  Orientation3 t;
  for (int a = 0; a < 3; ++a) {
    for (int e = 0; e < 3; ++e) {
      if ((*dst)[e].axis == (*src)[a].axis) {
        t[a] = {e, (*src)[a].flip == (*dst)[e].flip ? 1 : -1};
      }
    }
  }
  FloatVolume out;
  out.channels = v->channels;
  for (int a = 0; a < 3; ++a) out.shape[t[a].axis] = v->shape[a];
  out.values.resize(v->values.size());
  int64_t src_idx[3];
  for (int64_t c = 0; c < v->channels; ++c) {
    for (int64_t k = 0; k < v->shape[2]; ++k) {
      for (int64_t j = 0; j < v->shape[1]; ++j) {
        for (int64_t i = 0; i < v->shape[0]; ++i) {
          src_idx[0] = i;
          src_idx[1] = j;
          src_idx[2] = k;
          int64_t dst_idx[3];
          for (int a = 0; a < 3; ++a) {
            dst_idx[t[a].axis] = t[a].flip < 0 ? v->shape[a] - 1 - src_idx[a] : src_idx[a];
          }
          out.values[out.At(c, dst_idx[0], dst_idx[1], dst_idx[2])] = v->values[v->At(c, i, j, k)];
        }
      }
    }
  }
  // nibabel's inv_ornt_aff: new voxel index n relates to the old one by
  // old[a] = flip ? shape[a] - 1 - n[t[a].axis] : n[t[a].axis]; the new
  // affine is old_affine times that map.
  std::array<double, 16> m = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  for (int a = 0; a < 3; ++a) {
    m[a * 4 + t[a].axis] = t[a].flip;
    m[a * 4 + 3] = t[a].flip < 0 ? static_cast<double>(v->shape[a] - 1) : 0.0;
  }
  std::array<double, 16> aff{};
  for (int r = 0; r < 4; ++r) {
    for (int col = 0; col < 4; ++col) {
      double s = 0;
      for (int x = 0; x < 4; ++x) s += v->affine[r * 4 + x] * m[x * 4 + col];
      aff[r * 4 + col] = s;
    }
  }
  out.affine = aff;
  *v = std::move(out);
  return absl::OkStatus();
}

}  // namespace stoker::volume
