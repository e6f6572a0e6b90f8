#include "sketches/nitro.h"

#include <algorithm>

namespace dpukit::measure::sketches {

SwitchRule switch_rule(const SketchOptions& options) {
  if (!options.always_correct) return SwitchRule::kLineRate;
  return options.always_correct_packets > 0 ? SwitchRule::kPackets : SwitchRule::kL2;
}

namespace {

uint32_t nitro_width(const std::string& algo, size_t budget, const SketchOptions& options) {
  check_sample_p(options.sample_p);
  if (options.top_k == 0) throw std::invalid_argument(algo + ": top_k must be at least 1");
  const size_t heap = TopK::bytes_for(options.top_k);
  if (heap > budget / 2) {
    budget_error(algo, budget,
                 "its top-" + std::to_string(options.top_k) + " heap needs " + std::to_string(heap) +
                     " bytes and may take at most half of the budget (lower top_k or raise the budget)");
  }
  const size_t w = std::min<size_t>((budget - heap) / (3 * sizeof(float)), UINT32_MAX);
  if (w == 0) budget_error(algo, budget, "no room for 3 rows of counters beside the heap");
  return static_cast<uint32_t>(w);
}

}  // namespace

template <NitroKind K>
NitroSketch<K>::NitroSketch(size_t budget_bytes, const SketchOptions& options)
    : seed_(derive_seed(options.seed, SeedPurpose::kRow, 0)),
      rows_(nitro_width(K == NitroKind::kCountMin ? "nitro-cms" : "nitro-cs", budget_bytes, options),
            derive_seed(options.seed, SeedPurpose::kSampler, 0), options.sample_p, switch_rule(options),
            options.always_correct_packets),
      heap_(options.top_k, seed_) {}

// The packets the sampler passes over whole (at p = 0.01 most of them) are
// passed over together, in one step, without hashing or reading them; a
// packet with a selected slot is updated as update() does it, hashing only
// it. (Hashing the touched packets first and prefetching their counters was
// measured slower: 21.7 against 16.2 ns a packet at p = 0.1, `measure_bench`.)
template <NitroKind K>
void NitroSketch<K>::update_burst(const FlowKey* const* keys, size_t n) {
  size_t i = 0;
  for (; i < n && !rows_.sampling(); ++i) update(*keys[i], 1);  // AlwaysCorrect's exact phase
  while (i < n) {
    const uint64_t skipped = rows_.unselected_slots() / Rows::kRows;
    if (skipped >= n - i) {
      rows_.pass(n - i);
      return;
    }
    rows_.pass(skipped);
    i += skipped;
    update(*keys[i++], 1);
  }
}

template <NitroKind K>
std::vector<std::pair<FlowKey, double>> NitroSketch<K>::heavy_hitters(double threshold,
                                                                      const std::vector<FlowKey>&) const {
  std::vector<std::pair<FlowKey, double>> out;
  for (size_t i = 0; i < heap_.size(); ++i) {
    const double e = estimate(heap_.key(i));
    if (e >= threshold) out.emplace_back(heap_.key(i), e);
  }
  return out;
}

template class NitroSketch<NitroKind::kCountMin>;
template class NitroSketch<NitroKind::kCountSketch>;

}  // namespace dpukit::measure::sketches
