#include "sketches/elastic.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace dpukit::measure::sketches {

namespace {
uint32_t sat_add32(uint32_t a, uint32_t b) {
  const uint32_t s = a + b;
  return s < a ? std::numeric_limits<uint32_t>::max() : s;
}
}  // namespace

ElasticSketch::ElasticSketch(size_t budget_bytes, const SketchOptions& options, int light_rows)
    : light_rows_(light_rows), seed_(derive_seed(options.seed, SeedPurpose::kLight, 0)) {
  if (light_rows < 1 || light_rows > 3) throw std::invalid_argument("elastic: light_rows must be 1, 2 or 3");
  const size_t nb = std::min<size_t>(budget_bytes / kHeavyShareDenominator / sizeof(Bucket), UINT32_MAX);
  if (nb == 0) {
    budget_error("elastic", budget_bytes,
                 "needs at least " + std::to_string(kHeavyShareDenominator * sizeof(Bucket)) +
                     " bytes (one 24-byte heavy bucket is 1/11 of the budget)");
  }
  const size_t lw = std::min<size_t>((budget_bytes - nb * sizeof(Bucket)) / light_rows, UINT32_MAX);
  light_width_ = static_cast<uint32_t>(lw);
  buckets_.assign(nb, Bucket{});
  light_.assign(size_t(light_rows) * light_width_, 0);
}

void ElasticSketch::light_add(const RowHash& h, uint32_t count) {
  uint8_t* row = light_.data();
  for (int r = 0; r < light_rows_; ++r, row += light_width_) {
    uint8_t& c = row[h.index(r, light_width_)];
    c = static_cast<uint8_t>(std::min<uint32_t>(255u, uint32_t{c} + std::min<uint32_t>(count, 255u)));
  }
}

uint32_t ElasticSketch::light_estimate(const RowHash& h) const {
  uint32_t m = 255;
  const uint8_t* row = light_.data();
  for (int r = 0; r < light_rows_; ++r, row += light_width_) m = std::min<uint32_t>(m, row[h.index(r, light_width_)]);
  return m;
}

void ElasticSketch::update(const FlowKey& key, uint32_t count) { update(key, hash(key), count); }

void ElasticSketch::update_burst(const FlowKey* const* keys, size_t n) {
  for_each_chunk(n, [&](size_t begin, size_t end) {
    RowHash h[kBurstChunk];
    for (size_t i = begin; i < end; ++i) {
      h[i - begin] = hash(*keys[i]);
      const Bucket* b = &buckets_[heavy_index(h[i - begin])];
      __builtin_prefetch(b, 1);
      __builtin_prefetch(reinterpret_cast<const char*>(b + 1) - 1, 1);  // a bucket may straddle two lines
    }
    for (size_t i = begin; i < end; ++i) update(*keys[i], h[i - begin], 1);
  });
}

void ElasticSketch::update(const FlowKey& key, const RowHash& h, uint32_t count) {
  if (count == 0) return;
  Bucket& b = buckets_[heavy_index(h)];
  if (b.pos == 0) {  // empty bucket
    b.key = key;
    b.pos = count;
    b.neg = 0;
    b.flag = 0;
    return;
  }
  if (same_key(b.key, key)) {
    b.pos = sat_add32(b.pos, count);
    return;
  }
  b.neg = sat_add32(b.neg, count);
  if (uint64_t{b.neg} >= uint64_t{kLambda} * b.pos) {
    light_add(hash(b.key), b.pos);  // the evicted flow keeps its count, now in the light part
    b.key = key;
    b.pos = count;
    b.neg = 1;
    b.flag = 1;
  } else {
    light_add(h, count);
  }
}

double ElasticSketch::estimate(const FlowKey& key) const {
  const RowHash h = hash(key);
  const Bucket& b = buckets_[heavy_index(h)];
  if (b.pos != 0 && same_key(b.key, key)) return double(b.pos) + (b.flag ? double(light_estimate(h)) : 0.0);
  return light_estimate(h);
}

std::vector<std::pair<FlowKey, double>> ElasticSketch::heavy_hitters(double threshold,
                                                                     const std::vector<FlowKey>&) const {
  std::vector<std::pair<FlowKey, double>> out;
  for (const Bucket& b : buckets_) {
    if (b.pos == 0) continue;
    const double e = double(b.pos) + (b.flag ? double(light_estimate(b.key)) : 0.0);
    if (e >= threshold) out.emplace_back(b.key, e);
  }
  return out;
}

}  // namespace dpukit::measure::sketches
