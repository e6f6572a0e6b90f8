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

// Saturate: never wrap below the truth.
inline void add_saturating(uint32_t& c, uint32_t count) {
  const uint32_t n = c + count;
  c = n < c ? std::numeric_limits<uint32_t>::max() : n;
}
}  // namespace

CountMin::CountMin(size_t budget_bytes, const SketchOptions& options)
    : width_(cms_width(budget_bytes)), seed_(derive_seed(options.seed, SeedPurpose::kRow, 0)) {
  counters_.assign(size_t(kRows) * width_, 0);
}

void CountMin::update(const FlowKey& key, uint32_t count) {
  const RowHash h = hash(key);
  uint32_t* row = counters_.data();
  for (int r = 0; r < kRows; ++r, row += width_) add_saturating(row[h.index(r, width_)], count);
}

void CountMin::update_burst(const FlowKey* const* keys, size_t n) {
  for_each_chunk(n, [&](size_t begin, size_t end) {
    uint32_t* slot[kBurstChunk][kRows];
    for (size_t i = begin; i < end; ++i) {
      const RowHash h = hash(*keys[i]);
      uint32_t* row = counters_.data();
      for (int r = 0; r < kRows; ++r, row += width_) {
        slot[i - begin][r] = &row[h.index(r, width_)];
        __builtin_prefetch(slot[i - begin][r], 1);
      }
    }
    for (size_t i = 0; i < end - begin; ++i)
      for (int r = 0; r < kRows; ++r) add_saturating(*slot[i][r], 1);
  });
}

double CountMin::estimate(const FlowKey& key) const {
  const RowHash h = hash(key);
  uint32_t m = std::numeric_limits<uint32_t>::max();
  const uint32_t* row = counters_.data();
  for (int r = 0; r < kRows; ++r, row += width_) m = std::min(m, row[h.index(r, width_)]);
  return m;
}

}  // namespace dpukit::measure::sketches
