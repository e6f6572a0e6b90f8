#include "histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace dpukit::kv::bench {

// Values below kSub have a bucket each. Above, a value whose highest set bit
// is b lands in octave (b - kSubBits), at the sub-bucket given by the kSubBits
// bits just below that highest bit.
int LatencyHistogram::index(uint64_t v) {
  if (v < uint64_t(kSub)) return int(v);
  int msb = 63 - std::countl_zero(v);
  int shift = msb - kSubBits;
  int sub = int((v >> shift) & (kSub - 1));
  return kSub + shift * kSub + sub;
}

uint64_t LatencyHistogram::lower_bound(int idx) {
  if (idx < kSub) return uint64_t(idx);
  int shift = (idx - kSub) / kSub, sub = (idx - kSub) % kSub;
  return (uint64_t(kSub) + uint64_t(sub)) << shift;
}

uint64_t LatencyHistogram::width(int idx) { return idx < kSub ? 1 : uint64_t(1) << ((idx - kSub) / kSub); }

void LatencyHistogram::record(uint64_t ns) {
  ++buckets_[index(ns)];
  ++count_;
  sum_ += ns;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
}

void LatencyHistogram::merge(const LatencyHistogram& o) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += o.buckets_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

double LatencyHistogram::percentile(double q) const {
  if (count_ == 0) return 0;
  // The sample of rank ceil(q * count) (1-based), as in the usual definition.
  uint64_t rank = std::max<uint64_t>(1, uint64_t(std::ceil(q * double(count_))));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      double mid = double(lower_bound(i)) + double(width(i) - 1) / 2.0;
      return std::clamp(mid, double(min_), double(max_));
    }
  }
  return double(max_);
}

}  // namespace dpukit::kv::bench
