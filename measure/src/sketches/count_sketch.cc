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

CountSketch::CountSketch(size_t budget_bytes, const SketchOptions& options)
    : width_(cs_width(budget_bytes)), seed_(derive_seed(options.seed, SeedPurpose::kRow, 0)) {
  counters_.assign(size_t(kRows) * width_, 0);
}

void CountSketch::update(const FlowKey& key, uint32_t count) {
  const RowHash h = hash(key);
  int32_t* row = counters_.data();
  for (int r = 0; r < kRows; ++r, row += width_) add_signed(row[h.index(r, width_)], h.plus(r), count);
}

void CountSketch::update_burst(const FlowKey* const* keys, size_t n) {
  for_each_chunk(n, [&](size_t begin, size_t end) {
    int32_t* slot[kBurstChunk][kRows];
    uint32_t signs[kBurstChunk];
    for (size_t i = begin; i < end; ++i) {
      const RowHash h = hash(*keys[i]);
      signs[i - begin] = h.spare();
      int32_t* row = counters_.data();
      for (int r = 0; r < kRows; ++r, row += width_) {
        slot[i - begin][r] = &row[h.index(r, width_)];
        __builtin_prefetch(slot[i - begin][r], 1);
      }
    }
    for (size_t i = 0; i < end - begin; ++i)
      for (int r = 0; r < kRows; ++r) add_signed(*slot[i][r], (signs[i] >> r) & 1, 1);
  });
}

double CountSketch::row_read(const FlowKey& key, int row) const {
  const RowHash h = hash(key);
  return double(h.sign(row)) * counters_[size_t(row) * width_ + h.index(row, width_)];
}

double CountSketch::estimate(const FlowKey& key) const {
  static_assert(kRows == 3);
  const RowHash h = hash(key);
  double v[kRows];
  for (int r = 0; r < kRows; ++r) v[r] = double(h.sign(r)) * counters_[size_t(r) * width_ + h.index(r, width_)];
  return median3(v[0], v[1], v[2]);
}

}  // namespace dpukit::measure::sketches
