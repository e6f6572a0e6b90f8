// Count-Min (Cormode & Muthukrishnan): d = 3 rows of 32-bit counters; an
// update adds to one counter per row, the estimate is the minimum of the
// flow's d counters. Never underestimates (counters saturate instead of
// wrapping). Duet §IV.B: 3 arrays, 32-bit counters. The rows' hash functions
// are the 3 words of one XXH3-128 per packet (RowHash, common.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

class CountMin final : public Sketch {
 public:
  static constexpr int kRows = RowHash::kRows;
  // width = budget / (3 rows * 4 bytes).
  CountMin(size_t budget_bytes, const SketchOptions& options);

  std::string name() const override { return "cms"; }
  size_t memory_bytes() const override { return counters_.size() * sizeof(uint32_t); }
  void update(const FlowKey& key, uint32_t count = 1) override;
  // Hash the burst, ask for its counters, then add to them.
  void update_burst(const FlowKey* const* keys, size_t n) override;
  double estimate(const FlowKey& key) const override;

  uint32_t width() const { return width_; }
  RowHash hash(const FlowKey& key) const { return RowHash::of(key, seed_); }
  uint32_t index(const FlowKey& key, int row) const { return hash(key).index(row, width_); }
  uint32_t counter(int row, uint32_t i) const { return counters_[size_t(row) * width_ + i]; }

 private:
  uint32_t width_;
  uint64_t seed_;
  std::vector<uint32_t> counters_;  // row-major, kRows x width_
};

}  // namespace dpukit::measure::sketches
