// The sketch factory and the Sketch interface's shared parts (measure.h).
#include <unordered_set>

#include "dpukit/measure.h"
#include "sketches/count_min.h"
#include "sketches/count_sketch.h"
#include "sketches/elastic.h"
#include "sketches/nitro.h"
#include "sketches/univmon.h"

namespace dpukit::measure {

void Sketch::update_burst(const FlowKey* const* keys, size_t n) {
  for (size_t i = 0; i < n; ++i) update(*keys[i], 1);
}

std::vector<std::pair<FlowKey, double>> Sketch::heavy_hitters(double threshold,
                                                              const std::vector<FlowKey>& candidates) const {
  std::vector<std::pair<FlowKey, double>> out;
  std::unordered_set<FlowKey, FlowKeyHash> seen;
  seen.reserve(candidates.size());
  for (const FlowKey& k : candidates) {
    if (!seen.insert(k).second) continue;  // each flow reported once
    const double e = estimate(k);
    if (e >= threshold) out.emplace_back(k, e);
  }
  return out;
}

const std::vector<std::string>& sketch_algorithms() {
  static const std::vector<std::string> names = {"cms",       "cs",       "elastic",      "univmon",
                                                 "nitro-cms", "nitro-cs", "nitro-univmon"};
  return names;
}

std::unique_ptr<Sketch> make_sketch(const std::string& algo, size_t memory_bytes, const SketchOptions& options) {
  using namespace sketches;
  if (algo == "cms") return std::make_unique<CountMin>(memory_bytes, options);
  if (algo == "cs") return std::make_unique<CountSketch>(memory_bytes, options);
  if (algo == "elastic") return std::make_unique<ElasticSketch>(memory_bytes, options);
  if (algo == "univmon") return std::make_unique<VanillaUnivMon>(memory_bytes, options);
  if (algo == "nitro-cms") return std::make_unique<NitroCountMin>(memory_bytes, options);
  if (algo == "nitro-cs") return std::make_unique<NitroCountSketch>(memory_bytes, options);
  if (algo == "nitro-univmon") return std::make_unique<NitroUnivMon>(memory_bytes, options);
  std::string known;
  for (const std::string& n : sketch_algorithms()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown sketch algorithm '" + algo + "' (known: " + known + ")");
}

}  // namespace dpukit::measure
