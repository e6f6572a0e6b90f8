// Duet's sketch path (Algorithm 1 lines 6-24) per packet, against the
// Count-Min update it extends: the dpu cost of a packet that missed the
// hardware table. Light flows only (TOP out of reach): no promotions.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"
#include "duet.h"
#include "zipf.h"

namespace dpukit::measure {
namespace {

std::vector<FlowKey> keys() {
  std::mt19937_64 rng(5);
  std::vector<FlowKey> k(1 << 16);
  for (auto& x : k) {
    uint32_t f = static_cast<uint32_t>(rng() % 50000);
    x = FlowKey::from_tuple(0x0a000000u + f, 0xc0a80000u + f * 3, 1024 + f % 5000, 443, 6);
  }
  return k;
}

void BM_DuetSketchPath(benchmark::State& state) {
  EmulatedFlowTable table(EmulatedFlowTable::Config{});
  DuetConfig c;
  c.memory_bytes = 500 * 1024;
  c.top = UINT32_MAX;
  c.records = 500;
  c.single_writer = state.range(0) == 1;
  c.counter_bits = static_cast<unsigned>(state.range(1));
  if (c.counter_bits == 16) c.top = Duet::kMaxTop16;  // out of reach too: 50,000 flows over twice the counters
  Duet duet(c, table);
  auto k = keys();
  size_t i = 0;
  for (auto _ : state) duet.on_sketch_path(k[i++ & 0xffff]);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string(c.single_writer ? "single writer" : "atomic") + ", " + std::to_string(c.counter_bits) +
                 "-bit counters");
}
BENCHMARK(BM_DuetSketchPath)->Args({1, 32})->Args({0, 32})->Args({1, 16})->Args({0, 16});

// The sketch epoch's cost per packet (DuetConfig::epoch_ns: each counter two
// halves, the previous epoch's beside the current one's), paired with the
// same run without one. Args: single writer (1) or atomic (0), counter bits,
// epoch (1) or none (0), packets per call (1: on_sketch_path; 32:
// on_sketch_path_burst, as the datapath hands a worker's burst over).
void BM_DuetEpochSketchPath(benchmark::State& state) {
  EmulatedFlowTable table(EmulatedFlowTable::Config{});
  DuetConfig c;
  c.memory_bytes = 500 * 1024;
  c.records = 500;
  c.single_writer = state.range(0) == 1;
  c.counter_bits = static_cast<unsigned>(state.range(1));
  c.top = c.counter_bits == 16 ? Duet::kMaxTop16 : UINT32_MAX;  // out of reach: light flows only
  c.epoch_ns = state.range(2) ? 10'000'000'000 : 0;             // never rotated here: the per-packet cost only
  Duet duet(c, table);
  const auto k = keys();
  std::vector<const FlowKey*> ptrs(k.size());
  for (size_t j = 0; j < k.size(); ++j) ptrs[j] = &k[j];
  const size_t burst = static_cast<size_t>(state.range(3));  // a divisor of 65,536
  size_t i = 0;
  for (auto _ : state) {
    if (burst == 1)
      duet.on_sketch_path(k[i]);
    else
      duet.on_sketch_path_burst(&ptrs[i], burst);
    i = (i + burst) & 0xffff;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(burst));
  state.SetLabel(std::string(c.single_writer ? "single writer" : "atomic") + ", " + std::to_string(c.counter_bits) +
                 "-bit" + (c.epoch_ns ? " epoch halves" : " counters") +
                 (burst > 1 ? ", bursts of " + std::to_string(burst) : ""));
}
BENCHMARK(BM_DuetEpochSketchPath)
    ->Args({1, 16, 0, 1})
    ->Args({1, 16, 1, 1})
    ->Args({0, 16, 0, 1})
    ->Args({0, 16, 1, 1})
    ->Args({1, 16, 0, 32})
    ->Args({1, 16, 1, 32});

// Every record taken, and flows at TOP that found none: each of their
// packets looks for a record again (it stays in the sketch). What that
// lookup costs once the record table is as full as it gets.
void BM_DuetRecordsFull(benchmark::State& state) {
  EmulatedFlowTable table(EmulatedFlowTable::Config{});
  DuetConfig c;
  c.memory_bytes = 500 * 1024;
  c.top = 2;
  c.records = 500;
  c.single_writer = true;
  Duet duet(c, table);
  auto k = keys();
  for (int pass = 0; pass < 4; ++pass)  // every flow reaches TOP; the first 500 take the records
    for (const FlowKey& key : k) duet.on_sketch_path(key);
  if (duet.stats().records_full == 0) state.SkipWithError("the records did not run out");
  size_t i = 0;
  for (auto _ : state) duet.on_sketch_path(k[i++ & 0xffff]);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DuetRecordsFull);

void BM_CountMinUpdate(benchmark::State& state) {
  auto s = make_sketch("cms", 500 * 1024);
  auto k = keys();
  size_t i = 0;
  for (auto _ : state) s->update(k[i++ & 0xffff], 1);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountMinUpdate);

// What the hardware table takes away. A backbone-like stream (Zipf 1.1 over
// 100k flows, 2M packets, as `gen --preset backbone`): a Count-Min update
// over every packet (Arg 0), against only the packets of flows below TOP =
// 0.05 % (Arg 1), what Duet's worker is left with. A heavy flow's counters
// stay in cache, so the packets the hardware takes are the cheap ones.
void BM_CountMinOnBackbone(benchmark::State& state) {
  static const sketches::ZipfStream stream(100000, 2000000, 1.1, 1);
  static const std::vector<FlowKey> all_keys = [] {
    std::vector<FlowKey> k;
    for (size_t i = 0; i < stream.packets.size(); ++i) k.push_back(stream.key(i));
    return k;
  }();
  static const std::vector<FlowKey> light_keys = [] {
    const uint64_t top = stream.packets.size() / 2000;
    std::vector<FlowKey> k;
    for (size_t i = 0; i < stream.packets.size(); ++i)
      if (stream.truth[stream.packets[i]] < top) k.push_back(stream.key(i));
    return k;
  }();
  const auto& keys = state.range(0) == 0 ? all_keys : light_keys;
  auto s = make_sketch("cms", 500 * 1024);
  size_t i = 0;
  for (auto _ : state) {
    s->update(keys[i], 1);
    if (++i == keys.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) == 0 ? "every packet" : "light flows' packets only (" +
                                                            std::to_string(100 * keys.size() / all_keys.size()) +
                                                            " % of them)");
}
BENCHMARK(BM_CountMinOnBackbone)->Arg(0)->Arg(1);

}  // namespace
}  // namespace dpukit::measure
