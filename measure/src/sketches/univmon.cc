#include "sketches/univmon.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "sketches/nitro.h"

namespace dpukit::measure::sketches {

namespace {

constexpr double kHeapShareMax = 0.40;
constexpr size_t kHeapFloorMax = 256;
constexpr size_t kHeapFloorMin = 16;
constexpr size_t kWidthFloorMin = 64;

size_t heap_bytes(size_t top_k, size_t floor_k, std::array<size_t, kUnivMonLevels>* caps) {
  size_t total = 0;
  for (int j = 0; j < kUnivMonLevels; ++j) {
    const size_t k = j == 0 ? top_k : std::min(top_k, std::max(floor_k, top_k >> j));
    if (caps) (*caps)[j] = k;
    total += TopK::bytes_for(k);
  }
  return total;
}
}  // namespace

UnivMonLayout univmon_layout(const std::string& algo, size_t budget, size_t top_k) {
  if (top_k == 0) throw std::invalid_argument(algo + ": top_k must be at least 1");
  if (top_k > (size_t{1} << 24)) throw std::invalid_argument(algo + ": top_k must be at most 2^24");
  UnivMonLayout L;
  const size_t heap_cap = static_cast<size_t>(kHeapShareMax * double(budget));
  size_t kf = std::min(top_k, kHeapFloorMax);
  const size_t kf_min = std::min(top_k, kHeapFloorMin);
  while (kf > kf_min && heap_bytes(top_k, kf, nullptr) > heap_cap) --kf;
  const size_t heaps = heap_bytes(top_k, kf, &L.heap_capacity);
  if (heaps > heap_cap) {
    budget_error(algo, budget,
                 "its 16 levels' heaps (top_k = " + std::to_string(top_k) + ", at least " + std::to_string(kf) +
                     " per level) need " + std::to_string(heaps) +
                     " bytes, more than 40% of the budget (lower top_k or raise the budget)");
  }
  L.heap_floor = kf;
  const uint32_t wf = static_cast<uint32_t>(std::max<size_t>(kWidthFloorMin, kf));
  const size_t per_row = (budget - heaps) / (3 * sizeof(uint32_t));  // counters per row, summed over levels
  const size_t min_counters = size_t{kUnivMonLevels} * wf;
  if (min_counters > per_row) {
    budget_error(algo, budget,
                 "needs at least " + std::to_string(heaps + min_counters * 3 * sizeof(uint32_t)) +
                     " bytes: heaps of " + std::to_string(heaps) + " bytes and 16 levels x 3 rows x " +
                     std::to_string(wf) + " counters");
  }
  // Level 0 a quarter, levels 1..15 an equal share of the rest (at least w_f);
  // what rounding leaves goes to level 0.
  const size_t wj = std::min<size_t>(std::max<size_t>(wf, (per_row - per_row / 4) / (kUnivMonLevels - 1)), UINT32_MAX);
  const size_t w0 = std::min<size_t>(per_row - wj * (kUnivMonLevels - 1), UINT32_MAX);
  size_t counters = 0;
  for (int j = 0; j < kUnivMonLevels; ++j) {
    L.widths[j] = static_cast<uint32_t>(j == 0 ? w0 : wj);
    counters += 3 * size_t{L.widths[j]};
  }
  L.bytes = heaps + counters * sizeof(uint32_t);
  return L;
}

template <bool kNitro>
UnivMon<kNitro>::UnivMon(size_t budget_bytes, const SketchOptions& options)
    : layout_(univmon_layout(kNitro ? "nitro-univmon" : "univmon", budget_bytes, options.top_k)),
      seed_(derive_seed(options.seed, SeedPurpose::kRow, 0)) {
  SwitchRule rule = SwitchRule::kLineRate;
  if constexpr (kNitro) {
    check_sample_p(options.sample_p);
    rule = switch_rule(options);
    if (rule == SwitchRule::kPackets) {
      rule = SwitchRule::kExternal;
      switch_at_ = options.always_correct_packets;
    }
  }
  levels_.reserve(kLevels);
  heaps_.reserve(kLevels);
  for (int j = 0; j < kLevels; ++j) {
    if constexpr (kNitro) {
      levels_.emplace_back(layout_.widths[j], derive_seed(options.seed, SeedPurpose::kSampler, j), options.sample_p,
                           rule);
    } else {
      levels_.emplace_back(layout_.widths[j]);
    }
    // Every level's heap indexes keys by the packet's own hash: update() hands it that.
    heaps_.emplace_back(layout_.heap_capacity[j], seed_);
    memory_ += levels_.back().memory_bytes() + heaps_.back().memory_bytes();
  }
}

template <bool kNitro>
void UnivMon<kNitro>::update_levels(const FlowKey& key, const RowHash& h, int depth, uint32_t count) {
  for (int j = 0; j <= depth; ++j) {
    RowHash hj;
    Level& lv = levels_[j];
    if (!lv.update(count, [&] { return level_hash(h, j); }, hj)) continue;
    heaps_[j].offer(key, h.table_hash(), static_cast<float>(lv.estimate_hashed(hj)));
  }
}

template <bool kNitro>
void UnivMon<kNitro>::update(const FlowKey& key, uint32_t count) {
  if (count == 0) return;
  const RowHash h = hash(key);
  const int depth = level_of(h);
  if constexpr (kNitro) {
    if (switch_at_ > 0 && !switched_) {
      const uint32_t exact = static_cast<uint32_t>(std::min<uint64_t>(count, switch_at_ - packets_));
      update_levels(key, h, depth, exact);
      packets_ += exact;
      if (packets_ >= switch_at_) {
        switched_ = true;
        for (Level& lv : levels_) lv.start_sampling();
      }
      if (exact < count) {
        update_levels(key, h, depth, count - exact);
        packets_ += count - exact;
      }
      return;
    }
  }
  update_levels(key, h, depth, count);
  packets_ += count;
}

template <bool kNitro>
void UnivMon<kNitro>::update_burst(const FlowKey* const* keys, size_t n) {
  size_t i = 0;
  if constexpr (kNitro) {
    for (; i < n && switch_at_ > 0 && !switched_; ++i) update(*keys[i], 1);  // exact until the switch
    burst_sampled(keys + i, n - i);
  } else {
    burst_vanilla(keys, n);
  }
}

template <bool kNitro>
void UnivMon<kNitro>::burst_vanilla(const FlowKey* const* keys, size_t n) {
  for_each_chunk(n, [&](size_t begin, size_t end) {
    RowHash h[kBurstChunk];
    int depth[kBurstChunk];
    for (size_t i = begin; i < end; ++i) {
      h[i - begin] = hash(*keys[i]);
      depth[i - begin] = level_of(h[i - begin]);
      for (int j = 0; j <= depth[i - begin]; ++j) levels_[j].prefetch(level_hash(h[i - begin], j));
    }
    for (size_t i = begin; i < end; ++i) update_levels(*keys[i], h[i - begin], depth[i - begin], 1);
  });
  packets_ += n;
}

// NitroSketch-UnivMon: every packet is hashed (its levels depend on it), and
// then the chunk is taken level by level: a level's sampler and counters see
// only that level's packets, in order, so level by level ends as packet by
// packet does. A level whose sampler passes over all of the chunk's packets
// at that level (the common case at small p) costs one step; otherwise the
// packets it skips are passed over together and only those it selects are
// updated (the level's hash derived only for them). This replaces a loop over
// each packet's levels, whose varying length the branch predictor cannot
// follow.
template <bool kNitro>
void UnivMon<kNitro>::burst_sampled(const FlowKey* const* keys, size_t n) {
  // Larger chunks than the others': nothing is prefetched, and the more
  // packets a level's one step passes over, the fewer steps.
  constexpr size_t kSampledChunk = 64;
  if constexpr (kNitro) {
    for_each_chunk<kSampledChunk>(n, [&](size_t begin, size_t end) {
      const size_t m = end - begin;
      RowHash h[kSampledChunk];
      uint8_t depth[kSampledChunk];
      std::array<uint32_t, kLevels> at_level{};  // the chunk's packets at level j or deeper
      for (size_t i = 0; i < m; ++i) {
        h[i] = hash(*keys[begin + i]);
        depth[i] = static_cast<uint8_t>(level_of(h[i]));
        ++at_level[depth[i]];
      }
      for (int j = kLevels - 2; j >= 0; --j) at_level[j] += at_level[j + 1];
      for (int j = 0; j < kLevels && at_level[j] > 0; ++j) {
        Level& lv = levels_[j];
        if (lv.sampling() && lv.unselected_slots() >= uint64_t{at_level[j]} * Level::kRows) {
          lv.pass(at_level[j]);
          continue;
        }
        // From packet i on: pass over the whole packets the sampler skips
        // (none while exact), then update the next packet at this level.
        for (size_t i = 0;;) {
          const uint64_t skipped = lv.sampling() ? lv.unselected_slots() / Level::kRows : 0;
          uint64_t seen = 0;  // packets at this level from i on, up to the one to update
          for (; i < m; ++i) {
            seen += depth[i] >= j;
            if (seen > skipped) break;
          }
          if (i == m) {  // the chunk ends first
            lv.pass(seen);
            break;
          }
          lv.pass(skipped);
          RowHash hj;
          if (lv.update(1, [&] { return level_hash(h[i], j); }, hj))
            heaps_[j].offer(*keys[begin + i], h[i].table_hash(), static_cast<float>(lv.estimate_hashed(hj)));
          ++i;
        }
      }
    });
    packets_ += n;
  }
}

template <bool kNitro>
std::vector<std::pair<FlowKey, double>> UnivMon<kNitro>::heavy_hitters(double threshold,
                                                                       const std::vector<FlowKey>&) const {
  std::vector<std::pair<FlowKey, double>> out;
  const TopK& hp = heaps_[0];
  for (size_t i = 0; i < hp.size(); ++i) {
    const double e = level_estimate(hp.key(i), 0);
    if (e >= threshold) out.emplace_back(hp.key(i), e);
  }
  return out;
}

// The flow's size as seen at `level`: levels 0..level all count the flow (the
// sub-streams are nested), each through its own hash functions, so their
// estimates are independent; combine them weighting each by the inverse of
// its noise variance: (F2_i - m^2) / w_i, the load of the other flows in the
// level's sketch, plus the flow's own sampling noise (NitroSketch). m, the
// flow's own share of F2_i, is the smallest of its estimates at levels
// 0..level: subtracting a level's own estimate instead would let a collision
// that inflates it claim a tiny variance and dominate. Only levels up to
// `level` may be used: the recursive estimator is unbiased because the
// g-value of a flow at level j does not depend on whether the flow also
// belongs to level j+1; an estimate that used deeper levels would.
template <bool kNitro>
double UnivMon<kNitro>::flow_size(const FlowKey& key, int level, const std::array<double, kLevels>& f2) const {
  double est[kLevels];
  double m = std::numeric_limits<double>::infinity();
  const RowHash h = hash(key);
  for (int j = 0; j <= level; ++j) {
    est[j] = levels_[j].estimate_hashed(level_hash(h, j));
    m = std::min(m, std::max(est[j], 0.0));
  }
  double num = 0, den = 0;
  for (int j = 0; j <= level; ++j) {
    const double var =
        std::max(f2[j] - m * m, 0.0) / levels_[j].width() + levels_[j].own_noise_var(std::max(est[j], 0.0)) + 1e-3;
    num += est[j] / var;
    den += 1.0 / var;
  }
  return std::max(1.0, num / den);
}

template <bool kNitro>
double UnivMon<kNitro>::gsum(G g) const {
  // F2 of every level's sub-stream, for the noise variances of flow_size().
  std::array<double, kLevels> f2{};
  if (g == G::kXLogX) {
    for (int j = 0; j < kLevels; ++j) f2[j] = levels_[j].f2_from_counters();
  }
  double y = 0;
  for (int j = kLevels - 1; j >= 0; --j) {
    double sum = 0;
    const TopK& hp = heaps_[j];
    for (size_t i = 0; i < hp.size(); ++i) {
      const FlowKey& key = hp.key(i);
      double gv = 1.0;
      if (g == G::kXLogX) {
        const double f = flow_size(key, j, f2);
        gv = f * std::log2(f);
      }
      const bool in_next = j + 1 < kLevels && level_of(key) >= j + 1;
      sum += in_next ? -gv : gv;
    }
    y = j == kLevels - 1 ? sum : 2.0 * y + sum;
  }
  return y;
}

template <bool kNitro>
std::optional<double> UnivMon<kNitro>::cardinality() const {
  // The level-0 heap's keys are distinct flows that were seen: a lower bound.
  return std::max(gsum(G::kCount), double(heaps_[0].size()));
}

template <bool kNitro>
std::optional<double> UnivMon<kNitro>::entropy() const {
  if (packets_ == 0) return 0.0;
  const double m = double(packets_);
  const double h = std::log2(m) - gsum(G::kXLogX) / m;
  return std::clamp(h, 0.0, std::log2(m));
}

template class UnivMon<false>;
template class UnivMon<true>;

}  // namespace dpukit::measure::sketches
