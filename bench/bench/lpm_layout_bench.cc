// Where the gap between `dpukit-bench run --ops lpm --backend lib` and DPDK's
// lpm_perf_autotest comes from (docs/bench.md, "LPM against
// lpm_perf_autotest"). One rte_lpm, the same rte_lpm_lookup_bulk in bursts of
// 32, the same uniformly random addresses; only where the addresses come
// from changes:
//   AddressArray  a compact uint32 array, as the test looks them up;
//   Packets       the destination field of separately allocated 64-byte
//                 packets, as the lpm operator reads them (the runner holds
//                 each input in its own buffer, as mbufs are);
//   Operator      the lpm operator's own inputs and lib kernel (its random
//                 table, 100,000 routes), bursts of 32 as the runner gives
//                 them, without the runner's loop around it;
//   OperatorArray the same kernel with lpm.input=address: the addresses in
//                 one array, looked up in calls of the second argument's
//                 count (the runner's calls have 4096).
// The argument is how many distinct addresses are cycled: 4096 (all in
// cache, the table's lines too) or 1 Mi (the 64 MiB table read at random, as
// the test's fresh batches read it).
//
//   taskset -c 1 build/bin/bench_bench --benchmark_filter=Lpm --benchmark_repetitions=5
#include <benchmark/benchmark.h>
#include <rte_lpm.h>

#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "dpdk_env.h"
#include "operator.h"

namespace dpukit::bench {
namespace {

constexpr size_t kBurst = 32;
constexpr size_t kDstOffset = 14 + 16;  // Ethernet header, then the IPv4 destination

// rte_lpm's lookup reads tbl24 (64 MiB whatever the routes) and, under a /24
// with deeper routes, one tbl8 line: 100,000 random routes of /8 to /28 give
// both, and build in a second (the test's 1 M routes take minutes).
rte_lpm* shared_table() {
  static rte_lpm* lpm = [] {
    const DpdkEnv& env = dpdk_env();
    if (!env.ok) throw std::runtime_error("DPDK EAL did not start: " + env.error);
    rte_lpm_config config{};
    config.max_rules = 200000;
    config.number_tbl8s = 4096;
    rte_lpm* t = rte_lpm_create("lpm_layout_bench", SOCKET_ID_ANY, &config);
    if (t == nullptr) throw std::runtime_error("rte_lpm_create failed");
    std::mt19937_64 rng(7);
    for (int i = 0; i < 100000; ++i) {
      const uint8_t depth = static_cast<uint8_t>(8 + rng() % 21);
      const uint32_t prefix = static_cast<uint32_t>(rng()) & (~0u << (32 - depth));
      rte_lpm_add(t, prefix, depth, static_cast<uint32_t>(i));  // a full tbl8 pool refuses a few: fine here
    }
    return t;
  }();
  return lpm;
}

std::vector<uint32_t> addresses(size_t n) {
  std::mt19937_64 rng(11);
  std::vector<uint32_t> a(n);
  for (auto& x : a) x = static_cast<uint32_t>(rng());
  return a;
}

void count_hits(benchmark::State& state, uint64_t hits, size_t lookups) {
  benchmark::DoNotOptimize(hits);
  state.SetItemsProcessed(static_cast<int64_t>(lookups));
}

void BM_LpmBulk_AddressArray(benchmark::State& state) {
  const rte_lpm* lpm = shared_table();
  const std::vector<uint32_t> ips = addresses(static_cast<size_t>(state.range(0)));
  uint32_t hops[kBurst];
  uint64_t hits = 0;
  size_t j = 0, lookups = 0;
  for (auto _ : state) {
    rte_lpm_lookup_bulk(lpm, &ips[j], hops, kBurst);
    for (uint32_t h : hops) hits += (h & RTE_LPM_LOOKUP_SUCCESS) != 0;
    j = (j + kBurst) % ips.size();
    lookups += kBurst;
  }
  count_hits(state, hits, lookups);
}

void BM_LpmBulk_Packets(benchmark::State& state) {
  const rte_lpm* lpm = shared_table();
  const std::vector<uint32_t> ips = addresses(static_cast<size_t>(state.range(0)));
  std::vector<std::unique_ptr<uint8_t[]>> packets(ips.size());
  for (size_t i = 0; i < ips.size(); ++i) {
    packets[i] = std::make_unique<uint8_t[]>(64);
    std::memcpy(&packets[i][kDstOffset], &ips[i], 4);
  }
  uint32_t dst[kBurst], hops[kBurst];
  uint64_t hits = 0;
  size_t j = 0, lookups = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < kBurst; ++k) std::memcpy(&dst[k], &packets[j + k][kDstOffset], 4);
    rte_lpm_lookup_bulk(lpm, dst, hops, kBurst);
    for (uint32_t h : hops) hits += (h & RTE_LPM_LOOKUP_SUCCESS) != 0;
    j = (j + kBurst) % packets.size();
    lookups += kBurst;
  }
  count_hits(state, hits, lookups);
}

void BM_LpmBulk_Operator(benchmark::State& state) {
  if (!dpdk_env().ok) throw std::runtime_error("DPDK EAL did not start: " + dpdk_env().error);
  Operator& op = find_operator("lpm");
  op.reset_params();
  op.set_param("addresses", "uniform");
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<Bytes> inputs = op.make_inputs(64, n, 11);
  const std::vector<std::span<const uint8_t>> views(inputs.begin(), inputs.end());
  auto kernels = op.make_kernels(Backend::kLib, 64, 1);
  std::vector<Bytes> outs(kMaxBurst);
  uint64_t hits = 0;
  size_t j = 0, lookups = 0;
  for (auto _ : state) {
    kernels[0]->process_burst({views.data() + j, kBurst}, {outs.data(), kBurst});
    hits += outs[kBurst - 1][0];
    j = (j + kBurst) % views.size();
    lookups += kBurst;
  }
  count_hits(state, hits, lookups);
}

void BM_LpmBulk_OperatorArray(benchmark::State& state) {
  if (!dpdk_env().ok) throw std::runtime_error("DPDK EAL did not start: " + dpdk_env().error);
  Operator& op = find_operator("lpm");
  op.reset_params();
  op.set_param("addresses", "uniform");
  op.set_param("input", "address");
  const auto n = static_cast<size_t>(state.range(0));
  const auto per_call = static_cast<size_t>(state.range(1));
  Bytes array;
  for (const Bytes& a : op.make_inputs(64, n, 11)) array.insert(array.end(), a.begin(), a.end());
  auto kernels = op.make_kernels(Backend::kLib, 64, 1);
  Bytes out;
  uint64_t hits = 0;
  size_t j = 0, lookups = 0;
  for (auto _ : state) {
    kernels[0]->process_packed({array.data() + j * 4, per_call * 4}, 4, out);
    hits += out[0];
    j = (j + per_call) % n;
    lookups += per_call;
  }
  op.reset_params();
  count_hits(state, hits, lookups);
}

BENCHMARK(BM_LpmBulk_AddressArray)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_LpmBulk_Packets)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_LpmBulk_Operator)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_LpmBulk_OperatorArray)->Args({1 << 20, 32})->Args({1 << 20, 512})->Args({1 << 20, kMaxPacked});

}  // namespace
}  // namespace dpukit::bench

BENCHMARK_MAIN();
