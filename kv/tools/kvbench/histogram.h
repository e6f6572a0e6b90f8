// A latency histogram in the HDR style: logarithmic octaves, each split into
// 32 linear sub-buckets, so any recorded value is known to within 1/32 (~3%)
// of itself while memory stays fixed (~16 KiB) however many samples arrive.
// One per client thread and op type; merged at the end of a run.
#pragma once

#include <array>
#include <cstdint>

namespace dpukit::kv::bench {

class LatencyHistogram {
 public:
  void record(uint64_t ns);
  void merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0; }
  // The value below which a fraction q of the samples fall (the midpoint of
  // the bucket that holds that rank, clamped to [min, max]); 0 when empty.
  double percentile(double q) const;

 private:
  static constexpr int kSubBits = 5;                 // 32 sub-buckets per octave
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = kSub + (64 - kSubBits) * kSub;
  static int index(uint64_t v);
  static uint64_t lower_bound(int idx);
  static uint64_t width(int idx);

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0, sum_ = 0, min_ = UINT64_MAX, max_ = 0;
};

}  // namespace dpukit::kv::bench
