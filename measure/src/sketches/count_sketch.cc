#include "sketches/count_sketch.h"

#include <algorithm>

namespace dpukit::measure::sketches {

namespace {
uint32_t cs_width(size_t budget) {
  const size_t w = std::min<size_t>(budget / (CountSketch::kRows * sizeof(int32_t)), UINT32_MAX);
  if (w == 0) budget_error("cs", budget, "needs at least 12 bytes (3 rows of one 32-bit counter)");
  return static_cast<uint32_t>(w);
}
}  // namespace

CountSketch::CountSketch(size_t budget_bytes, const SketchOptions& options) : width_(cs_width(budget_bytes)) {
  for (int r = 0; r < kRows; ++r) seeds_[r] = derive_seed(options.seed, SeedPurpose::kRow, r);
  counters_.assign(size_t(kRows) * width_, 0);
}

void CountSketch::update(const FlowKey& key, uint32_t count) {
  int32_t* row = counters_.data();
  for (int r = 0; r < kRows; ++r, row += width_) {
    const uint64_t h = flow_hash(key, seeds_[r]);
    int32_t& c = row[bucket_of(h, width_)];
    // Two's-complement arithmetic through uint32 (no signed-overflow UB).
    const uint32_t delta = (h & 1) ? count : 0u - count;
    c = static_cast<int32_t>(static_cast<uint32_t>(c) + delta);
  }
}

double CountSketch::row_read(const FlowKey& key, int row) const {
  const uint64_t h = flow_hash(key, seeds_[row]);
  return double(sign_of(h)) * counters_[size_t(row) * width_ + bucket_of(h, width_)];
}

double CountSketch::estimate(const FlowKey& key) const {
  static_assert(kRows == 3);
  return median3(row_read(key, 0), row_read(key, 1), row_read(key, 2));
}

}  // namespace dpukit::measure::sketches
