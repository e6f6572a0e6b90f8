// Update throughput of every sketch at 500 KB (Duet's budget range) on a
// pre-generated Zipf key array (100k flows, skew 1.0, 2^20 packets). Each
// iteration is one update through the Sketch interface (one virtual call, as
// in the datapath); items/s gives updates per second, ns/update = 1e9 / that.
// NitroSketch runs at the default p = 0.1 and at p = 0.01, AlwaysLineRate.
#include <benchmark/benchmark.h>

#include <string>

#include "dpukit/measure.h"
#include "zipf.h"

namespace {

using namespace dpukit;
using namespace dpukit::measure;

constexpr size_t kBudget = 500 * 1024;

const std::vector<FlowKey>& zipf_keys() {
  static const std::vector<FlowKey> keys = [] {
    const sketches::ZipfStream z(100000, size_t{1} << 20, 1.0, 42);
    std::vector<FlowKey> k;
    k.reserve(z.packets.size());
    for (size_t i = 0; i < z.packets.size(); ++i) k.push_back(z.key(i));
    return k;
  }();
  return keys;
}

void BM_SketchUpdate(benchmark::State& state, const std::string& algo, double p) {
  const std::vector<FlowKey>& keys = zipf_keys();
  SketchOptions o;
  o.sample_p = p;
  auto sketch = make_sketch(algo, kBudget, o);
  // Warm up: one pass, so that heaps are full and caches are warm, as in steady state.
  for (const FlowKey& k : keys) sketch->update(k);
  size_t i = 0;
  const size_t n = keys.size();
  for (auto _ : state) {
    sketch->update(keys[i]);
    if (++i == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["ns_per_update"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["memory_bytes"] = double(sketch->memory_bytes());
}

const bool registered = [] {
  for (const std::string& algo : sketch_algorithms()) {
    const bool nitro = algo.rfind("nitro-", 0) == 0;
    benchmark::RegisterBenchmark(("BM_SketchUpdate/" + algo + (nitro ? "/p=0.1" : "")).c_str(), BM_SketchUpdate, algo,
                                 0.1);
    if (nitro) benchmark::RegisterBenchmark(("BM_SketchUpdate/" + algo + "/p=0.01").c_str(), BM_SketchUpdate, algo, 0.01);
  }
  return true;
}();

}  // namespace

// The measure benchmarks' one main (the target links benchmark::benchmark, not benchmark_main).
BENCHMARK_MAIN();
