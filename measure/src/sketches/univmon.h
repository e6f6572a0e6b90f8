// UnivMon (Liu et al., SIGCOMM 2016) and NitroSketch-UnivMon.
//
// Levels j = 0..15. A flow belongs to level j when its sampling hash has at
// least j trailing one bits (level 0 = every flow, level j ~ 2^-j of the
// flows); the sub-streams are nested. Each level has a 3-row Count Sketch of
// its sub-stream and a top-k heap of the level's largest flows by their
// current Count Sketch estimate.
//
// Queries:
//   estimate(f)      the level-0 Count Sketch.
//   heavy_hitters    the level-0 heap, re-estimated.
//   G-sums           Sum_f g(f) by the recursive estimator, from the deepest
//                    level up:  Y_15 = Sum_{f in heap_15} g(f^_15),
//                    Y_j = 2 Y_{j+1} + Sum_{f in heap_j} (1 - 2 h_{j+1}(f)) g(f^_j)
//                    (h_{j+1}(f) = 1 when f belongs to level j+1); Y_0
//                    estimates the G-sum. f^_j, the flow's size as seen at
//                    level j: levels 0..j all count the flow with independent
//                    hash functions, so f^_j is their inverse-variance-weighted
//                    mean (each level's noise variance estimated from its own
//                    counters), at least 1. It may not use levels below j:
//                    E[(1 - 2 h_{j+1}(f)) g(f^_j)] = 0, which makes the
//                    estimator unbiased, needs f^_j independent of h_{j+1}(f).
//                    (Measured on Zipf streams of 2-4M packets at 300-500 KB,
//                    this halves the entropy error of the plain per-level
//                    estimate: mean |error| 3% instead of 6%, worst 13% vs 35%.)
//   cardinality()    g(x) = x^0 = 1: the number of distinct flows.
//   entropy()        g(x) = x log2 x: H = log2 m - (1/m) Y_0, in bits, with m the
//                    number of packets (counted exactly).
//
// Memory (all of it out of the budget):
//   heaps   level 0 keeps top_k entries (it answers heavy hitters); level j >= 1
//           keeps max(K_f, top_k >> j). Cardinality needs the deep levels' heaps
//           to hold every flow of their sub-stream (its error is about
//           1/sqrt(K_f)), so K_f = min(top_k, 256), lowered (not below 16) until
//           the heaps take at most 40% of the budget.
//   sketch  the rest, as 3 rows of 4-byte counters per level: level 0 (which
//           also answers per-flow queries) gets a quarter, levels 1..15 share
//           the other three quarters equally (at least w_f = max(64, K_f)
//           columns each). Level j's estimation error enters Y_0 multiplied by
//           2^j, so the deeper levels must not be starved: with widths halving
//           by level, as the sub-streams do, entropy came out 10-30% low at
//           300-500 KB; equal widths (classic UnivMon) starve level 0; a level-0
//           share of 1/4 was the best of 1/16, 0.15, 1/4, 0.35 and halving.
// NitroSketch-UnivMon samples inside every level's Count Sketch (nitro_rows.h);
// a level's heap is offered the key when the packet touched at least one of
// that level's rows. AlwaysCorrect: with always_correct_packets = N all levels
// switch together after N packets; with the L2 rule each level switches on
// its own sub-stream's L2 (deep levels, with little traffic, stay exact).
// AlwaysLineRate (p < 1 from the start) undercounts cardinality: a flow enters
// a heap only once one of its packets is sampled, so most single-packet flows
// are never seen (the NitroSketch paper's point about AlwaysCorrect UnivMon).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/common.h"
#include "sketches/nitro_rows.h"
#include "sketches/topk.h"

namespace dpukit::measure::sketches {

inline constexpr int kUnivMonLevels = 16;

struct UnivMonLayout {
  std::array<uint32_t, kUnivMonLevels> widths{};
  std::array<size_t, kUnivMonLevels> heap_capacity{};
  size_t heap_floor = 0;  // K_f
  size_t bytes = 0;       // what the layout allocates
};
// Throws BudgetError (naming `algo`) when the budget cannot hold the layout.
UnivMonLayout univmon_layout(const std::string& algo, size_t budget, size_t top_k);

// A vanilla Count Sketch level with the interface of NitroRows.
class CsLevel {
 public:
  static constexpr int kRows = 3;
  CsLevel(uint32_t width, const std::array<uint64_t, kRows>& seeds) : width_(width), seeds_(seeds) {
    counters_.assign(size_t(kRows) * width_, 0);
  }
  static constexpr uint32_t kAllRows = (1u << kRows) - 1;
  uint32_t update(const FlowKey& key, uint32_t count, uint64_t (&h)[kRows]) {
    for (int r = 0; r < kRows; ++r) {
      h[r] = flow_hash(key, seeds_[r]);
      int32_t& c = counters_[size_t(r) * width_ + bucket_of(h[r], width_)];
      const uint32_t delta = (h[r] & 1) ? count : 0u - count;
      c = static_cast<int32_t>(static_cast<uint32_t>(c) + delta);
    }
    return kAllRows;
  }
  void hash_missing(const FlowKey&, uint64_t (&)[kRows], uint32_t) const {}
  double estimate_hashed(const uint64_t (&h)[kRows]) const {
    double v[kRows];
    for (int r = 0; r < kRows; ++r) v[r] = double(sign_of(h[r])) * counters_[size_t(r) * width_ + bucket_of(h[r], width_)];
    return median3(v[0], v[1], v[2]);
  }
  double estimate(const FlowKey& key) const {
    uint64_t h[kRows];
    for (int r = 0; r < kRows; ++r) h[r] = flow_hash(key, seeds_[r]);
    return estimate_hashed(h);
  }
  uint32_t width() const { return width_; }
  size_t memory_bytes() const { return counters_.size() * sizeof(int32_t); }
  // F2 of the level's sub-stream: the median over rows of the sum of squared
  // counters (AMS). O(width); query time only.
  double f2_from_counters() const {
    double s[kRows] = {0, 0, 0};
    for (int r = 0; r < kRows; ++r) {
      for (uint32_t i = 0; i < width_; ++i) s[r] += double(counters_[size_t(r) * width_ + i]) * counters_[size_t(r) * width_ + i];
    }
    return median3(s[0], s[1], s[2]);
  }
  // Variance a flow of size f adds to its own estimate (none: no sampling).
  double own_noise_var(double) const { return 0; }

 private:
  uint32_t width_;
  std::array<uint64_t, kRows> seeds_;
  std::vector<int32_t> counters_;
};

template <bool kNitro>
class UnivMon final : public Sketch {
 public:
  static constexpr int kLevels = kUnivMonLevels;
  using Level = std::conditional_t<kNitro, NitroRows<NitroKind::kCountSketch>, CsLevel>;

  UnivMon(size_t budget_bytes, const SketchOptions& options);

  std::string name() const override { return kNitro ? "nitro-univmon" : "univmon"; }
  size_t memory_bytes() const override { return memory_; }
  void update(const FlowKey& key, uint32_t count = 1) override;
  double estimate(const FlowKey& key) const override { return levels_[0].estimate(key); }
  std::vector<std::pair<FlowKey, double>> heavy_hitters(double threshold,
                                                        const std::vector<FlowKey>& candidates) const override;
  std::optional<double> cardinality() const override;
  std::optional<double> entropy() const override;

  // Inspection (tests).
  const Level& level(int j) const { return levels_[j]; }
  Level& level(int j) { return levels_[j]; }
  const TopK& heap(int j) const { return heaps_[j]; }
  int level_of(const FlowKey& key) const;  // deepest level the flow belongs to
  uint64_t packets() const { return packets_; }
  const UnivMonLayout& layout() const { return layout_; }

 private:
  void update_levels(const FlowKey& key, int depth, uint32_t count);
  enum class G { kCount, kXLogX };
  double gsum(G g) const;
  double flow_size(const FlowKey& key, int level, const std::array<double, kLevels>& f2) const;

  UnivMonLayout layout_;
  uint64_t sample_seed_;
  std::vector<Level> levels_;
  std::vector<TopK> heaps_;
  size_t memory_ = 0;
  uint64_t packets_ = 0;
  uint64_t switch_at_ = 0;  // nitro, AlwaysCorrect with a packet count: all levels switch here
  bool switched_ = false;
};

using VanillaUnivMon = UnivMon<false>;
using NitroUnivMon = UnivMon<true>;

extern template class UnivMon<false>;
extern template class UnivMon<true>;

}  // namespace dpukit::measure::sketches
