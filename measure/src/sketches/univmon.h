// UnivMon (Liu et al., SIGCOMM 2016) and NitroSketch-UnivMon: 16 nested
// levels, each a 3-row Count Sketch of its sub-stream and a top-k heap;
// G-sums (cardinality, entropy) by the recursive estimator. The queries,
// the memory split, the hashing and the sampling: docs/measure.md,
// "UnivMon: levels, heaps and the G-sum estimator".
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
