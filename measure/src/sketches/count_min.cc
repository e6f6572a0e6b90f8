#include "sketches/count_min.h"

#include <algorithm>
#include <limits>

namespace dpukit::measure::sketches {

namespace {
uint32_t cms_width(size_t budget) {
  const size_t w = std::min<size_t>(budget / (CountMin::kRows * sizeof(uint32_t)), UINT32_MAX);
  if (w == 0) budget_error("cms", budget, "needs at least 12 bytes (3 rows of one 32-bit counter)");
  return static_cast<uint32_t>(w);
}
}  // namespace

CountMin::CountMin(size_t budget_bytes, const SketchOptions& options) : width_(cms_width(budget_bytes)) {
  for (int r = 0; r < kRows; ++r) seeds_[r] = derive_seed(options.seed, SeedPurpose::kRow, r);
  counters_.assign(size_t(kRows) * width_, 0);
}

void CountMin::update(const FlowKey& key, uint32_t count) {
  uint32_t* row = counters_.data();
  for (int r = 0; r < kRows; ++r, row += width_) {
    uint32_t& c = row[bucket_of(flow_hash(key, seeds_[r]), width_)];
    const uint32_t n = c + count;
    c = n < c ? std::numeric_limits<uint32_t>::max() : n;  // saturate: never wrap below the truth
  }
}

double CountMin::estimate(const FlowKey& key) const {
  uint32_t m = std::numeric_limits<uint32_t>::max();
  const uint32_t* row = counters_.data();
  for (int r = 0; r < kRows; ++r, row += width_) m = std::min(m, row[bucket_of(flow_hash(key, seeds_[r]), width_)]);
  return m;
}

}  // namespace dpukit::measure::sketches
