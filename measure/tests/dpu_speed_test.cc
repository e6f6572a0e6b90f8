// The datapath at a dpu speed below the host's (AlgorithmConfig::dpu_speed):
// the dpu worker's sketch work is time-dilated, the wire's (the NIC's) is not.
// Ratios between runs made side by side, with loose bounds: no absolute
// timing (the machine is shared).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "dpukit/measure.h"
#include "trace_fixtures.h"

namespace dpukit::measure {
namespace {

using testing::flow;
using testing::skewed_trace;

// `heavy` flows of `each` packets and `light` flows of 5, shuffled.
Trace two_tier_trace(uint32_t heavy, uint32_t each, uint32_t light, uint32_t seed = 7) {
  Trace t;
  for (uint32_t i = 0; i < heavy; ++i)
    for (uint32_t k = 0; k < each; ++k) t.packets.push_back({flow(i), 100, 0});
  for (uint32_t i = 0; i < light; ++i)
    for (uint32_t k = 0; k < 5; ++k) t.packets.push_back({flow(heavy + i), 100, 0});
  std::mt19937 rng(seed);
  std::shuffle(t.packets.begin(), t.packets.end(), rng);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

struct Figures {
  double dpu_ns_per_packet, pps, dilated_share;
};

Figures figures(const RunResult& r) {
  const double replayed = double(r.packets) * r.passes;
  const double dpu = double(r.cpu.get(Place::kDpu));
  return {dpu / replayed, r.packets / r.seconds,
          // what dilation added against the dpu CPU it dilated
          double(r.dpu_dilated_ns) / std::max(1.0, dpu - double(r.dpu_dilated_ns))};
}

// The wire's share (the NIC's, not dilated) is not checked here: Count-Min's
// wire costs about 0.2 ns a packet, and billed by its share of the loop's
// wall time, it varied 1.8x between two undilated runs on a busy machine.
TEST(DpuSpeed, ASketchAtHalfSpeedSpendsTwiceTheDpuCpuPerPacket) {
  Trace t = skewed_trace(400000, 40000, 5);
  GroundTruth truth = ground_truth(t.packets);
  const WirePlan plan = plan_wire(t.packets, 1);
  RunConfig full;
  full.algorithm.algo = "cms";
  full.passes = 2;
  RunConfig half = full;
  half.algorithm.dpu_speed = DpuSpeed::parse("0.5");
  // Paired rounds, full then half, medians: a slow spell of the machine falls
  // on both alike. The rate is wall time, so it is compared only in pairs
  // whose measured passes lost their CPU to nobody (a few milliseconds of
  // preemption would outweigh a run); CPU time is compared in every pair.
  std::vector<double> dpu_ratio, rate_ratio, dilated_share;
  for (int round = 0; round < 15 && (round < 3 || rate_ratio.size() < 3); ++round) {
    RunResult a = run(t, truth, full, &plan);
    RunResult b = run(t, truth, half, &plan);
    EXPECT_EQ(a.dpu_dilated_ns, 0u) << "nothing is dilated at host speed";
    EXPECT_GT(b.dpu_dilated_ns, 0u);
    EXPECT_EQ(b.drops, 0u);
    EXPECT_EQ(a.metrics.are, b.metrics.are) << "the same sketch over the same packets";
    const Figures fa = figures(a), fb = figures(b);
    dpu_ratio.push_back(fb.dpu_ns_per_packet / fa.dpu_ns_per_packet);
    if (a.queues[0].preemptions == 0 && b.queues[0].preemptions == 0) rate_ratio.push_back(fb.pps / fa.pps);
    dilated_share.push_back(fb.dilated_share);
  }
  // F = 0.5: the worker stays busy (1/F - 1) = 1 x its work again.
  EXPECT_GT(median(dilated_share), 0.8);
  EXPECT_LT(median(dilated_share), 1.2);
  EXPECT_GT(median(dpu_ratio), 1.6) << "the dpu CPU per packet is about twice the full-speed run's";
  EXPECT_LT(median(dpu_ratio), 2.6);
  if (rate_ratio.empty()) {
    std::fprintf(stderr, "the rate was not compared: every pair of runs was preempted (a busy machine)\n");
    return;
  }
  EXPECT_GT(median(rate_ratio), 0.35) << "the worker's rate falls to about half";
  EXPECT_LT(median(rate_ratio), 0.7);
}

TEST(DpuSpeed, DuetsHardwareCountsTheSamePacketsAtHalfSpeed) {
  // Two passes, entries never aging, light flows far below TOP: every heavy
  // flow is in the table before the measured pass, so the hardware counts
  // all their packets there, however fast the workers are.
  Trace t = two_tier_trace(100, 2000, 20000);
  GroundTruth truth = ground_truth(t.packets);
  const WirePlan plan = plan_wire(t.packets, 1);
  RunConfig full;
  full.algorithm.algo = "duet";
  full.algorithm.heavy_threshold = 100;
  full.algorithm.hw_idle_timeout_ns = 0;
  full.passes = 2;
  RunConfig half = full;
  half.algorithm.dpu_speed = DpuSpeed::parse("0.5");
  RunResult a = run(t, truth, full, &plan);
  RunResult b = run(t, truth, half, &plan);
  ASSERT_TRUE(a.hw && b.hw);
  EXPECT_EQ(a.hw_hits, 100u * 2000u) << "every heavy packet of the measured pass, at full speed";
  EXPECT_EQ(b.hw_hits, a.hw_hits) << "and at half speed";
  EXPECT_EQ(b.hw->entries, a.hw->entries);
  EXPECT_EQ(b.hw_hits + b.queues[0].delivered, b.packets);
  EXPECT_EQ(a.dpu_dilated_ns, 0u);
  EXPECT_GT(b.dpu_dilated_ns, 0u) << "the workers and the control path were dilated";
}

}  // namespace
}  // namespace dpukit::measure
