// Count Sketch (Charikar, Chen & Farach-Colton): d = 3 rows of 32-bit signed
// counters; row r adds s_r(key) * count (s_r = +-1 from the row's hash) to one
// counter; the estimate is the median over rows of s_r(key) * C[r][h_r(key)].
// Each row's read is unbiased and symmetric around the truth, so is the median.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

class CountSketch final : public Sketch {
 public:
  static constexpr int kRows = 3;
  // width = budget / (3 rows * 4 bytes).
  CountSketch(size_t budget_bytes, const SketchOptions& options);

  std::string name() const override { return "cs"; }
  size_t memory_bytes() const override { return counters_.size() * sizeof(int32_t); }
  void update(const FlowKey& key, uint32_t count = 1) override;
  double estimate(const FlowKey& key) const override;

  uint32_t width() const { return width_; }
  // Row r's signed read for the key: s_r(key) * C[r][h_r(key)].
  double row_read(const FlowKey& key, int row) const;

 private:
  uint32_t width_;
  std::array<uint64_t, kRows> seeds_;
  std::vector<int32_t> counters_;  // row-major, kRows x width_
};

}  // namespace dpukit::measure::sketches
