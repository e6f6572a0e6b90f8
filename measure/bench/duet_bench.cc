// Duet's sketch path (Algorithm 1 lines 6-24) per packet, against the
// Count-Min update it extends: the dpu cost of a packet that missed the
// hardware table. Light flows only (TOP out of reach): no promotions.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"
#include "duet.h"

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
  Duet duet(c, table);
  auto k = keys();
  size_t i = 0;
  for (auto _ : state) duet.on_sketch_path(k[i++ & 0xffff]);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(c.single_writer ? "single writer" : "atomic fetch-add");
}
BENCHMARK(BM_DuetSketchPath)->Arg(1)->Arg(0);

void BM_CountMinUpdate(benchmark::State& state) {
  auto s = make_sketch("cms", 500 * 1024);
  auto k = keys();
  size_t i = 0;
  for (auto _ : state) s->update(k[i++ & 0xffff], 1);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountMinUpdate);

}  // namespace
}  // namespace dpukit::measure
