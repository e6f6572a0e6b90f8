// NitroSketch over Count-Min ("nitro-cms") and Count Sketch ("nitro-cs"): the
// sampled rows of nitro_rows.h plus a top-k heap of candidate heavy keys,
// offered a packet's key (with its fresh estimate) whenever the packet touched
// at least one row.
//
// Estimates: nitro-cs takes the median of the 3 signed row reads; each row read
// is unbiased for the flow's size, and the median of three independent
// symmetric reads is unbiased too. nitro-cms takes the minimum of the 3 row
// reads; each row read is unbiased for the vanilla Count-Min's row counter
// (which is the flow's size plus its collisions), and the minimum of these
// noisy reads sits below the vanilla minimum by O(sqrt(f/p)): the sampling
// noise partly cancels Count-Min's overestimate (NitroSketch §7 notes the same).
//
// Memory: the heap (TopK::bytes_for(top_k)) comes out of the budget first and
// may take at most half of it; the rest is 3 rows of float counters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/nitro_rows.h"
#include "sketches/topk.h"

namespace dpukit::measure::sketches {

// The switch rule SketchOptions ask for (see nitro_rows.h).
SwitchRule switch_rule(const SketchOptions& options);

template <NitroKind K>
class NitroSketch final : public Sketch {
 public:
  using Rows = NitroRows<K>;
  NitroSketch(size_t budget_bytes, const SketchOptions& options);

  std::string name() const override { return K == NitroKind::kCountMin ? "nitro-cms" : "nitro-cs"; }
  size_t memory_bytes() const override { return rows_.memory_bytes() + heap_.memory_bytes(); }
  void update(const FlowKey& key, uint32_t count = 1) override {
    RowHash h;
    const uint32_t mask = rows_.update(count, [&] { return hash(key); }, h);
    if (mask) offer(key, h, mask);
  }
  // While sampling: the sampler picks the burst's touched packets first (no
  // hash), then only those are hashed and their counters asked for, then
  // updated and offered to the heap in order: the same as update() per packet.
  void update_burst(const FlowKey* const* keys, size_t n) override;
  double estimate(const FlowKey& key) const override { return rows_.estimate_hashed(hash(key)); }
  // From the heap's keys, re-estimated now.
  std::vector<std::pair<FlowKey, double>> heavy_hitters(double threshold,
                                                        const std::vector<FlowKey>& candidates) const override;

  RowHash hash(const FlowKey& key) const { return RowHash::of(key, seed_); }
  uint32_t index(const FlowKey& key, int r) const { return rows_.index(hash(key), r); }
  const Rows& rows() const { return rows_; }
  Rows& rows() { return rows_; }
  const TopK& heap() const { return heap_; }

 private:
  // The heap is offered a packet's key with its fresh estimate once the
  // packet updated a row (`mask`: the rows it updated).
  void offer(const FlowKey& key, const RowHash& h, uint32_t mask) {
    if constexpr (K == NitroKind::kCountMin) {
      // The estimate is a minimum over rows, so any updated row bounds it:
      // when that bound cannot beat a full heap's minimum, offer() would
      // change nothing; skip reading the other rows' counters.
      if (heap_.full()) {
        double bound = std::numeric_limits<double>::infinity();
        for (int r = 0; r < Rows::kRows; ++r) {
          if (mask & (1u << r)) bound = std::min(bound, rows_.row_read(r, h));
        }
        if (!(static_cast<float>(bound) > heap_.min_value())) return;
      }
    }
    heap_.offer(key, h.table_hash(), static_cast<float>(rows_.estimate_hashed(h)));
  }

  uint64_t seed_;
  Rows rows_;
  TopK heap_;
};

using NitroCountMin = NitroSketch<NitroKind::kCountMin>;
using NitroCountSketch = NitroSketch<NitroKind::kCountSketch>;

extern template class NitroSketch<NitroKind::kCountMin>;
extern template class NitroSketch<NitroKind::kCountSketch>;

}  // namespace dpukit::measure::sketches
