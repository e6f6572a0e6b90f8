// Google Benchmark microbenchmarks of the DPU model's building blocks.
#include <benchmark/benchmark.h>

#include <random>
#include <thread>

#include "dpukit/core/channel.h"
#include "dpukit/core/flow_table.h"
#include "dpukit/core/pacing.h"
#include "dpukit/core/ring.h"

namespace dpukit {
namespace {

// Push then pop a batch on one thread: the ring's own cost, no cache-line transfer.
void BM_RingPushPop(benchmark::State& state) {
  const size_t batch = state.range(0);
  HeapRing<uint64_t> mem(4096);
  auto p = mem.producer();
  auto c = mem.consumer();
  std::vector<uint64_t> in(batch, 1), out(batch);
  for (auto _ : state) {
    p.try_push(in.data(), batch);
    benchmark::DoNotOptimize(c.try_pop(out.data(), batch));
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_RingPushPop)->Arg(1)->Arg(8)->Arg(32);

// The channel between two threads: submit, DMA-read copy, complete, reap.
void BM_ChannelRoundTrip(benchmark::State& state) {
  const size_t size = state.range(0);
  auto [host, dpu] = make_channel_pair({});
  std::atomic<bool> stop{false};
  std::thread t([&, d = std::move(dpu)]() mutable {
    std::vector<ChannelDpu::Message> msgs;
    std::vector<ChannelCompletion> done;
    while (true) {
      if (d.receive(msgs, 256, std::chrono::milliseconds(50)) == 0) {
        if (d.closed()) return;
        continue;
      }
      done.clear();
      for (auto& m : msgs) done.push_back({m.request.id, 0, 0, 0, 0});
      d.complete(done);
    }
  });
  std::vector<uint8_t> payload(size, 7);
  ChannelCompletion comp[256];
  uint64_t id = 0, reaped = 0;
  for (auto _ : state) {
    while (!host.try_submit(1, id, payload)) reaped += host.wait_completions(comp, 256, std::chrono::milliseconds(10));
    ++id;
    reaped += host.poll_completions(comp, 256);
  }
  while (reaped < id) reaped += host.wait_completions(comp, 256, std::chrono::milliseconds(100));
  host.close();
  t.join();
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * size);
}
BENCHMARK(BM_ChannelRoundTrip)->Arg(64)->Arg(1024)->Arg(16384)->UseRealTime();

// The emulated NIC's packet path on a table with 50,000 entries, half hits.
void BM_FlowTableMatch(benchmark::State& state) {
  EmulatedFlowTable::Config cfg;
  cfg.capacity = 65536;
  cfg.insert_rate = 0;
  cfg.insert_latency_ns = 0;
  EmulatedFlowTable t(cfg);
  for (uint32_t i = 0; i < 50000; ++i) t.request_insert(FlowKey::from_tuple(i, 1, 2, 3, 6), {});
  t.service(now_ns() + 1'000'000'000);
  std::vector<FlowKey> probe(4096);
  std::mt19937 rng(1);
  for (auto& k : probe) k = FlowKey::from_tuple(rng() % 100000, 1, 2, 3, 6);
  uint64_t now = now_ns();
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(t.match(probe[i++ & 4095], 64, now));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlowTableMatch);

// The emulated wire's path: bursts of 32 dense flow ids, 100,000 flows of
// which `state.range(0)` are installed and take 64 % of the packets (a
// skewed trace's heavy flows, as Duet's measured pass on the backbone trace).
void BM_FlowTableMatchBurstById(benchmark::State& state) {
  constexpr uint32_t kFlows = 100000;
  const uint32_t installed = static_cast<uint32_t>(state.range(0));
  EmulatedFlowTable::Config cfg;
  cfg.capacity = 32768;
  cfg.insert_rate = 0;
  cfg.insert_latency_ns = 0;
  EmulatedFlowTable t(cfg);
  t.index_flow_ids(kFlows, [](const FlowKey& k) { return k.src_ip(); });
  for (uint32_t i = 0; i < installed; ++i) t.request_insert(FlowKey::from_tuple(i, 1, 2, 3, 6), {});
  t.service(now_ns() + 1'000'000'000);
  std::vector<uint32_t> ids(1 << 16);
  std::mt19937 rng(1);
  for (auto& id : ids) id = rng() % 100 < 64 ? rng() % installed : installed + rng() % (kFlows - installed);
  uint32_t missed[32];
  uint64_t now = now_ns();
  size_t i = 0, misses = 0;
  for (auto _ : state) {
    misses += t.match_burst_by_id(&ids[i], 32, nullptr, 64, now, missed);
    i = (i + 32) & (ids.size() - 1);
  }
  benchmark::DoNotOptimize(misses);
  state.SetItemsProcessed(state.iterations() * 32);
}
BENCHMARK(BM_FlowTableMatchBurstById)->Arg(1000)->Arg(5000);

// One table, one wire context per thread (an RSS queue each: thread t
// matches the flows with id % threads == t), as the emulated wire runs one
// per queue: the time per packet must not grow with the threads, since no
// line is written per packet by two of them (per-context statistics and
// miss sinks, entries owned by their queue's context).
void BM_FlowTableWiresPerQueue(benchmark::State& state) {
  constexpr uint32_t kFlows = 100000, kInstalled = 2000;
  // Made by thread 0 before the threads' common start, replaced by the next
  // run's thread 0 (every thread of this run has then ended, its wire with it).
  static std::unique_ptr<EmulatedFlowTable> table;
  if (state.thread_index() == 0) {
    EmulatedFlowTable::Config cfg;
    cfg.capacity = 32768;
    cfg.insert_rate = 0;
    cfg.insert_latency_ns = 0;
    table = std::make_unique<EmulatedFlowTable>(cfg);
    table->index_flow_ids(kFlows, [](const FlowKey& k) { return k.src_ip(); });
    for (uint32_t i = 0; i < kInstalled; ++i) table->request_insert(FlowKey::from_tuple(i, 1, 2, 3, 6), {});
    table->service(now_ns() + 1'000'000'000);
  }
  const uint32_t threads = static_cast<uint32_t>(state.threads()), me = static_cast<uint32_t>(state.thread_index());
  std::vector<uint32_t> ids(1 << 16);
  std::mt19937 rng(1 + me);
  for (auto& id : ids) {
    uint32_t f = rng() % 100 < 64 ? rng() % kInstalled : kInstalled + rng() % (kFlows - kInstalled);
    id = f - f % threads + me;  // this queue's flows only
    if (id >= kFlows) id = me;
  }
  uint32_t missed[32];
  uint64_t now = now_ns();
  size_t i = 0, misses = 0;
  std::unique_ptr<EmulatedFlowTable::Wire> wire;
  for (auto _ : state) {  // the threads enter the loop together, after thread 0 made the table
    if (!wire) [[unlikely]] wire = table->attach_wire();
    misses += wire->match_burst_by_id(&ids[i], 32, nullptr, 64, now, missed);
    i = (i + 32) & (ids.size() - 1);
  }
  benchmark::DoNotOptimize(misses);
  state.SetItemsProcessed(state.iterations() * 32);
  wire.reset();
}
BENCHMARK(BM_FlowTableWiresPerQueue)->Threads(1)->Threads(2);

void BM_PacerUnlimitedRate(benchmark::State& state) {
  Pacer p(1e12, 32);
  for (auto _ : state) benchmark::DoNotOptimize(p.acquire(32));
}
BENCHMARK(BM_PacerUnlimitedRate);

}  // namespace
}  // namespace dpukit

BENCHMARK_MAIN();
