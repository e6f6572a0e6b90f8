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

std::array<uint64_t, 3> row_seeds(uint64_t seed) {
  return {derive_seed(seed, SeedPurpose::kRow, 0), derive_seed(seed, SeedPurpose::kRow, 1),
          derive_seed(seed, SeedPurpose::kRow, 2)};
}

}  // namespace

template <NitroKind K>
NitroSketch<K>::NitroSketch(size_t budget_bytes, const SketchOptions& options)
    : rows_(nitro_width(K == NitroKind::kCountMin ? "nitro-cms" : "nitro-cs", budget_bytes, options),
            row_seeds(options.seed), derive_seed(options.seed, SeedPurpose::kSampler, 0), options.sample_p,
            switch_rule(options), options.always_correct_packets),
      // The heap hashes keys with row 0's seed, so update() hands it h[0].
      heap_(options.top_k, derive_seed(options.seed, SeedPurpose::kRow, 0)) {}

template <NitroKind K>
std::vector<std::pair<FlowKey, double>> NitroSketch<K>::heavy_hitters(double threshold,
                                                                      const std::vector<FlowKey>&) const {
  std::vector<std::pair<FlowKey, double>> out;
  for (size_t i = 0; i < heap_.size(); ++i) {
    const double e = rows_.estimate(heap_.key(i));
    if (e >= threshold) out.emplace_back(heap_.key(i), e);
  }
  return out;
}

template class NitroSketch<NitroKind::kCountMin>;
template class NitroSketch<NitroKind::kCountSketch>;

}  // namespace dpukit::measure::sketches
