// Count-Min (Cormode & Muthukrishnan): d = 3 rows of 32-bit counters, one
// seeded hash per row; an update adds to one counter per row, the estimate is
// the minimum of the flow's d counters. Never underestimates (counters
// saturate instead of wrapping). Duet §IV.B: 3 arrays, 32-bit counters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

class CountMin final : public Sketch {
 public:
  static constexpr int kRows = 3;
  // width = budget / (3 rows * 4 bytes).
  CountMin(size_t budget_bytes, const SketchOptions& options);

  std::string name() const override { return "cms"; }
  size_t memory_bytes() const override { return counters_.size() * sizeof(uint32_t); }
  void update(const FlowKey& key, uint32_t count = 1) override;
  double estimate(const FlowKey& key) const override;

  uint32_t width() const { return width_; }
  uint32_t index(const FlowKey& key, int row) const { return bucket_of(flow_hash(key, seeds_[row]), width_); }
  uint32_t counter(int row, uint32_t i) const { return counters_[size_t(row) * width_ + i]; }

 private:
  uint32_t width_;
  std::array<uint64_t, kRows> seeds_;
  std::vector<uint32_t> counters_;  // row-major, kRows x width_
};

}  // namespace dpukit::measure::sketches
