// Count Sketch (Charikar, Chen & Farach-Colton): d = 3 rows of 32-bit signed
// counters; row r adds s_r(key) * count (s_r = +-1) to one counter; the
// estimate is the median over rows of s_r(key) * C[r][h_r(key)]. Each row's
// read is unbiased and symmetric around the truth, so is the median. The
// rows' counters and signs come from one XXH3-128 per packet (RowHash).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

class CountSketch final : public Sketch {
 public:
  static constexpr int kRows = RowHash::kRows;
  // width = budget / (3 rows * 4 bytes).
  CountSketch(size_t budget_bytes, const SketchOptions& options);

  std::string name() const override { return "cs"; }
  size_t memory_bytes() const override { return counters_.size() * sizeof(int32_t); }
  void update(const FlowKey& key, uint32_t count = 1) override;
  // Hash the burst, ask for its counters, then add to them.
  void update_burst(const FlowKey* const* keys, size_t n) override;
  double estimate(const FlowKey& key) const override;

  uint32_t width() const { return width_; }
  RowHash hash(const FlowKey& key) const { return RowHash::of(key, seed_); }
  // Row r's signed read for the key: s_r(key) * C[r][h_r(key)].
  double row_read(const FlowKey& key, int row) const;

 private:
  uint32_t width_;
  uint64_t seed_;
  std::vector<int32_t> counters_;  // row-major, kRows x width_
};

// Adds s * count to a Count Sketch counter, in two's-complement arithmetic
// through uint32 (no signed-overflow UB).
inline void add_signed(int32_t& c, bool plus, uint32_t count) {
  const uint32_t delta = plus ? count : 0u - count;
  c = static_cast<int32_t>(static_cast<uint32_t>(c) + delta);
}

}  // namespace dpukit::measure::sketches
