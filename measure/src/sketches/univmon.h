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
// Hashing: one XXH3-128 per packet (RowHash, common.h). Level 0's rows and
// signs are its words 0-2 and bits 0-2 of the fourth word; the flow's level
// is the number of trailing one bits of the fourth word above bit 2 (the
// sampling hash, independent of every level's rows); level j >= 1 hashes its
// rows with RowHash::derived(j), which is independent of that word too.
// NitroSketch-UnivMon samples inside every level's Count Sketch (nitro_rows.h);
// a level's heap is offered the key when the packet touched at least one of
// that level's rows. AlwaysCorrect: with always_correct_packets = N all levels
// switch together after N packets; with the L2 rule each level switches on
// its own sub-stream's L2 (deep levels, with little traffic, stay exact).
// AlwaysLineRate (p < 1 from the start) undercounts cardinality: a flow enters
// a heap only once one of its packets is sampled, so most single-packet flows
// are never seen (the NitroSketch paper's point about AlwaysCorrect UnivMon).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpukit/measure.h"
#include "sketches/common.h"
#include "sketches/count_sketch.h"
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
  static constexpr int kRows = RowHash::kRows;
  explicit CsLevel(uint32_t width) : width_(width) { counters_.assign(size_t(kRows) * width_, 0); }
  static constexpr uint32_t kAllRows = (1u << kRows) - 1;
  template <class HashFn>
  uint32_t update(uint32_t count, HashFn&& hash, RowHash& h) {
    h = hash();
    int32_t* row = counters_.data();
    for (int r = 0; r < kRows; ++r, row += width_) add_signed(row[h.index(r, width_)], h.plus(r), count);
    return kAllRows;
  }
  void prefetch(const RowHash& h) const {
    for (int r = 0; r < kRows; ++r) __builtin_prefetch(&counters_[size_t(r) * width_ + h.index(r, width_)], 1);
  }
  double estimate_hashed(const RowHash& h) const {
    double v[kRows];
    for (int r = 0; r < kRows; ++r) v[r] = double(h.sign(r)) * counters_[size_t(r) * width_ + h.index(r, width_)];
    return median3(v[0], v[1], v[2]);
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
  // Hash the burst (one hash a packet gives its levels too), ask for the
  // counters it will touch, then update in order: the same as update() per
  // packet. NitroSketch-UnivMon asks only for the sampled levels' counters.
  void update_burst(const FlowKey* const* keys, size_t n) override;
  double estimate(const FlowKey& key) const override { return level_estimate(key, 0); }
  std::vector<std::pair<FlowKey, double>> heavy_hitters(double threshold,
                                                        const std::vector<FlowKey>& candidates) const override;
  std::optional<double> cardinality() const override;
  std::optional<double> entropy() const override;

  // Inspection (tests).
  const Level& level(int j) const { return levels_[j]; }
  Level& level(int j) { return levels_[j]; }
  const TopK& heap(int j) const { return heaps_[j]; }
  int level_of(const FlowKey& key) const { return level_of(hash(key)); }  // deepest level the flow belongs to
  RowHash hash(const FlowKey& key) const { return RowHash::of(key, seed_); }
  // Level j's hash of a key whose (level 0) hash is `h`.
  static RowHash level_hash(const RowHash& h, int j) { return j == 0 ? h : h.derived(static_cast<uint32_t>(j)); }
  double level_estimate(const FlowKey& key, int j) const { return levels_[j].estimate_hashed(level_hash(hash(key), j)); }
  uint64_t packets() const { return packets_; }
  const UnivMonLayout& layout() const { return layout_; }

 private:
  static int level_of(const RowHash& h) { return std::min(std::countr_one(h.spare() >> RowHash::kRows), kLevels - 1); }
  void update_levels(const FlowKey& key, const RowHash& h, int depth, uint32_t count);
  void burst_vanilla(const FlowKey* const* keys, size_t n);
  void burst_sampled(const FlowKey* const* keys, size_t n);
  enum class G { kCount, kXLogX };
  double gsum(G g) const;
  double flow_size(const FlowKey& key, int level, const std::array<double, kLevels>& f2) const;

  UnivMonLayout layout_;
  uint64_t seed_;
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
