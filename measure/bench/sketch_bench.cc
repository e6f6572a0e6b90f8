// Update throughput of every sketch at 500 KB (Duet's budget range) on a
// pre-generated Zipf key array (100k flows, skew 1.0, 2^20 packets).
// BM_SketchUpdate: each iteration is one update() through the Sketch
// interface (one virtual call a packet). BM_SketchUpdateBurst: each iteration
// is one update_burst() of 64 packets, a dpu worker's burst, whose keys are
// asked for first (the datapath's worker loop). items/s gives updates per second, ns_per_update = 1e9 / that.
// NitroSketch runs at the default p = 0.1 and at p = 0.01, AlwaysLineRate.
#include <benchmark/benchmark.h>

#include <bit>
#include <random>
#include <string>

#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"
#include "duet.h"
#include "sketches/common.h"
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

constexpr size_t kBurst = 64;  // the datapath's worker burst

void BM_SketchUpdateBurst(benchmark::State& state, const std::string& algo, double p) {
  const std::vector<FlowKey>& keys = zipf_keys();
  std::vector<const FlowKey*> ptrs;
  ptrs.reserve(keys.size());
  for (const FlowKey& k : keys) ptrs.push_back(&k);
  SketchOptions o;
  o.sample_p = p;
  auto sketch = make_sketch(algo, kBudget, o);
  for (size_t i = 0; i < ptrs.size(); i += kBurst) sketch->update_burst(&ptrs[i], kBurst);  // warm up: one pass
  size_t i = 0;
  const size_t n = ptrs.size();  // a multiple of kBurst
  for (auto _ : state) {
    // As the datapath's worker does: every key of the burst asked for first.
    for (size_t j = 0; j < kBurst; ++j) __builtin_prefetch(ptrs[i + j]);
    sketch->update_burst(&ptrs[i], kBurst);
    if ((i += kBurst) == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
  state.counters["ns_per_update"] = benchmark::Counter(double(state.iterations() * kBurst),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["memory_bytes"] = double(sketch->memory_bytes());
}

// The floors of a Count-Min update at 500 KB, apart, on the same keys in the
// same bursts: the one hash a packet (RowHash, with UnivMon's level from it:
// all that NitroSketch-UnivMon must do for a packet no sampler selects), and
// the three counter increments alone, at indices computed beforehand (the
// memory's part: 500 KB of counters, in L2 or not).
void BM_SketchFloorHash(benchmark::State& state) {
  const std::vector<FlowKey>& keys = zipf_keys();
  std::vector<const FlowKey*> ptrs;
  for (const FlowKey& k : keys) ptrs.push_back(&k);
  size_t i = 0;
  uint64_t sink = 0;
  for (auto _ : state) {
    for (size_t j = 0; j < kBurst; ++j) __builtin_prefetch(ptrs[i + j]);
    for (size_t j = 0; j < kBurst; ++j) {
      const sketches::RowHash h = sketches::RowHash::of(*ptrs[i + j], 7);
      sink += h.index(0, 42666) + h.index(1, 42666) + h.index(2, 42666) + std::countr_one(h.spare() >> 3);
    }
    if ((i += kBurst) == ptrs.size()) i = 0;
  }
  benchmark::DoNotOptimize(sink);
  state.counters["ns_per_update"] = benchmark::Counter(double(state.iterations() * kBurst),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SketchFloorHash);

void BM_SketchFloorCounters(benchmark::State& state) {
  const std::vector<FlowKey>& keys = zipf_keys();
  const uint32_t width = kBudget / 12;  // Count-Min's
  std::vector<uint32_t> counters(3 * size_t{width});
  std::vector<uint32_t> idx;
  idx.reserve(3 * keys.size());
  for (const FlowKey& k : keys) {
    const sketches::RowHash h = sketches::RowHash::of(k, 7);
    for (int r = 0; r < 3; ++r) idx.push_back(r * width + h.index(r, width));
  }
  size_t i = 0;
  for (auto _ : state) {
    for (size_t j = 0; j < 3 * kBurst; ++j) ++counters[idx[i + j]];
    if ((i += 3 * kBurst) == idx.size()) i = 0;
  }
  benchmark::DoNotOptimize(counters.data());
  state.counters["ns_per_update"] = benchmark::Counter(double(state.iterations() * kBurst),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SketchFloorCounters);

// Duet's sketch path in bursts: BM_DuetSketchPath's set-up (duet_bench.cc:
// 2^16 keys of 50,000 light flows, 500 KB, TOP out of reach), the burst of
// 64 handed to on_sketch_path_burst() as the datapath's worker does.
void BM_DuetSketchPathBurst(benchmark::State& state) {
  std::mt19937_64 rng(5);
  std::vector<FlowKey> keys(1 << 16);
  for (auto& x : keys) {
    const uint32_t f = static_cast<uint32_t>(rng() % 50000);
    x = FlowKey::from_tuple(0x0a000000u + f, 0xc0a80000u + f * 3, 1024 + f % 5000, 443, 6);
  }
  std::vector<const FlowKey*> ptrs;
  for (const FlowKey& k : keys) ptrs.push_back(&k);
  EmulatedFlowTable table(EmulatedFlowTable::Config{});
  DuetConfig c;
  c.memory_bytes = kBudget;
  c.records = 500;
  c.single_writer = state.range(0) == 1;
  c.counter_bits = static_cast<unsigned>(state.range(1));
  c.top = c.counter_bits == 16 ? Duet::kMaxTop16 : UINT32_MAX;
  Duet duet(c, table);
  size_t i = 0;
  for (auto _ : state) {
    for (size_t j = 0; j < kBurst; ++j) __builtin_prefetch(ptrs[i + j]);
    duet.on_sketch_path_burst(&ptrs[i], kBurst);
    if ((i += kBurst) == ptrs.size()) i = 0;
  }
  state.counters["ns_per_update"] = benchmark::Counter(double(state.iterations() * kBurst),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(std::string(c.single_writer ? "single writer" : "atomic") + ", " + std::to_string(c.counter_bits) +
                 "-bit counters");
}
BENCHMARK(BM_DuetSketchPathBurst)->Args({1, 32})->Args({0, 32})->Args({1, 16})->Args({0, 16});

const bool registered = [] {
  using Fn = void (*)(benchmark::State&, const std::string&, double);
  const std::pair<std::string, Fn> benches[] = {{"BM_SketchUpdate/", BM_SketchUpdate},
                                                {"BM_SketchUpdateBurst/", BM_SketchUpdateBurst}};
  for (const auto& [bench, fn] : benches) {
    for (const std::string& algo : sketch_algorithms()) {
      const bool nitro = algo.rfind("nitro-", 0) == 0;
      benchmark::RegisterBenchmark((bench + algo + (nitro ? "/p=0.1" : "")).c_str(), fn, algo, 0.1);
      if (nitro) benchmark::RegisterBenchmark((bench + algo + "/p=0.01").c_str(), fn, algo, 0.01);
      // Almost no packet selected: what a packet costs NitroSketch-UnivMon before any sampled update.
      if (algo == "nitro-univmon") benchmark::RegisterBenchmark((bench + algo + "/p=0.0001").c_str(), fn, algo, 0.0001);
    }
  }
  return true;
}();

}  // namespace

// The measure benchmarks' one main (the target links benchmark::benchmark, not benchmark_main).
BENCHMARK_MAIN();
