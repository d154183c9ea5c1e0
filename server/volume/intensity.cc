#include "server/volume/intensity.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace stoker::volume {
namespace {

// (x - sub) / div in float32 over `n` values from `x` (where mask allows).
void Normalize(float* x, int64_t n, bool nonzero, double sub, double div) {
  const float s = static_cast<float>(sub);
  const float d = static_cast<float>(div == 0.0 ? 1.0 : div);
  for (int64_t i = 0; i < n; ++i) {
    if (nonzero && x[i] == 0.0f) continue;
    x[i] = (x[i] - s) / d;
  }
}

// The mean and population std of x (the nonzero ones with `nonzero`), in
// float64; false when no value counts.
bool Stats(const float* x, int64_t n, bool nonzero, double* mean, double* std) {
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (nonzero && x[i] == 0.0f) continue;
    sum += x[i];
    ++count;
  }
  if (count == 0) return false;
  *mean = sum / static_cast<double>(count);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (nonzero && x[i] == 0.0f) continue;
    const double d = x[i] - *mean;
    sq += d * d;
  }
  *std = std::sqrt(sq / static_cast<double>(count));
  return true;
}

}  // namespace

void ScaleIntensityRange(const ScaleIntensityRangeParams& p, FloatVolume* v) {
  const float a_min = static_cast<float>(p.a_min);
  if (p.a_max - p.a_min == 0.0) {
    const float b_min = static_cast<float>(p.b_min.value_or(0.0));
    for (float& x : v->values) {
      x = x - a_min;
      if (p.b_min) x = x + b_min;
    }
    return;
  }
  const float range = static_cast<float>(p.a_max - p.a_min);
  const bool to_b = p.b_min.has_value() && p.b_max.has_value();
  const float b_range = to_b ? static_cast<float>(*p.b_max - *p.b_min) : 1.0f;
  const float b_min = to_b ? static_cast<float>(*p.b_min) : 0.0f;
  const bool clip_lo = p.clip && p.b_min.has_value();
  const bool clip_hi = p.clip && p.b_max.has_value();
  const float lo = clip_lo ? static_cast<float>(*p.b_min) : 0.0f;
  const float hi = clip_hi ? static_cast<float>(*p.b_max) : 0.0f;
  for (float& x : v->values) {
    float y = (x - a_min) / range;
    if (to_b) y = y * b_range + b_min;
    if (clip_lo && y < lo) y = lo;
    if (clip_hi && y > hi) y = hi;
    x = y;
  }
}

absl::Status NormalizeIntensity(const NormalizeIntensityParams& p, FloatVolume* v) {
  const int64_t channels = p.channel_wise ? v->channels : 1;
  const int64_t per = p.channel_wise ? v->ChannelVoxels() : v->Voxels();
  for (const std::vector<double>* given : {&p.subtrahend, &p.divisor}) {
    if (given->empty()) continue;
    if (p.channel_wise && static_cast<int64_t>(given->size()) != channels) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NormalizeIntensity: the volume has ", channels, " channels and ",
          given == &p.subtrahend ? "subtrahend" : "divisor", " has ", given->size(),
          " values: give one per channel"));
    }
    if (!p.channel_wise && given->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NormalizeIntensity: ", given == &p.subtrahend ? "subtrahend" : "divisor", " has ",
          given->size(), " values: give one, or channel_wise=True with one per channel"));
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    float* x = v->values.data() + c * per;
    double mean = 0, std = 1;
    const bool any = Stats(x, per, p.nonzero, &mean, &std);
    if (!any) continue;  // MONAI: nothing to normalize
    const double sub = p.subtrahend.empty() ? mean : p.subtrahend[static_cast<size_t>(c)];
    const double div = p.divisor.empty() ? std : p.divisor[static_cast<size_t>(c)];
    Normalize(x, per, p.nonzero, sub, div);
  }
  return absl::OkStatus();
}

}  // namespace stoker::volume
