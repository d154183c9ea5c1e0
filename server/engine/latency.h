// Latency histograms with log2 buckets (ring::WaitBucket), as the status
// reports them: cheap to add to, percentiles within a factor of two.

#ifndef STOKER_SERVER_ENGINE_LATENCY_H_
#define STOKER_SERVER_ENGINE_LATENCY_H_

#include <array>
#include <cstdint>

#include "stoker/ring_layout.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

class LatencyHistogram {
 public:
  void Add(uint64_t ns) {
    ++buckets_[ring::WaitBucket(ns)];
    ++count_;
    total_ns_ += ns;
  }
  uint64_t count() const { return count_; }
  uint64_t total_ns() const { return total_ns_; }
  const std::array<uint64_t, ring::kWaitBuckets>& buckets() const { return buckets_; }

 private:
  std::array<uint64_t, ring::kWaitBuckets> buckets_{};
  uint64_t count_ = 0;
  uint64_t total_ns_ = 0;
};

// Mean and p50/p99 of a histogram; each percentile is its bucket's upper
// bound.
inline v1::LatencySummary Summarize(const uint64_t* buckets, uint64_t total_ns) {
  v1::LatencySummary s;
  uint64_t count = 0;
  for (uint32_t b = 0; b < ring::kWaitBuckets; ++b) count += buckets[b];
  s.set_count(count);
  if (count == 0) return s;
  uint32_t used = ring::kWaitBuckets;
  while (used > 0 && buckets[used - 1] == 0) --used;
  for (uint32_t b = 0; b < used; ++b) s.add_buckets(buckets[b]);
  s.set_mean_ms(static_cast<double>(total_ns) / count / 1e6);
  auto percentile = [&](double p) {
    const uint64_t rank = static_cast<uint64_t>(p * (count - 1)) + 1;
    uint64_t seen = 0;
    for (uint32_t b = 0; b < ring::kWaitBuckets; ++b) {
      seen += buckets[b];
      if (seen >= rank) return static_cast<double>(uint64_t{2} << b) / 1000.0;  // us -> ms
    }
    return static_cast<double>(uint64_t{2} << (ring::kWaitBuckets - 1)) / 1000.0;
  };
  s.set_p50_ms(percentile(0.50));
  s.set_p99_ms(percentile(0.99));
  return s;
}

inline v1::LatencySummary Summarize(const LatencyHistogram& h) {
  return Summarize(h.buckets().data(), h.total_ns());
}

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_LATENCY_H_
