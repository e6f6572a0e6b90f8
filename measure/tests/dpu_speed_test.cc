// The datapath at a dpu speed below the host's (AlgorithmConfig::dpu_speed):
// the dpu worker's sketch work is time-dilated, the wire's (the NIC's) is not.
// Ratios between runs made side by side: no absolute timing (the machine is
// shared).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "dpukit/core/speed_check.h"
#include "dpukit/measure.h"
#include "trace_fixtures.h"

namespace dpukit::measure {
namespace {

using testing::flow;
using testing::skewed_trace;
using testing::two_tier_trace;

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

// What dilation adds is the worker's own work again at F = 0.5, by the
// model's own accounting, and the results do not change. The throughput and
// CPU per packet against full speed are the next test's.
TEST(DpuSpeed, ASketchAtHalfSpeedIsBusyForItsWorkAgain) {
  Trace t = skewed_trace(400000, 40000, 5);
  GroundTruth truth = ground_truth(t.packets);
  const WirePlan plan = plan_wire(t.packets, 1);
  RunConfig full;
  full.algorithm.algo = "cms";
  full.passes = 2;
  RunConfig half = full;
  half.algorithm.dpu_speed = DpuSpeed::parse("0.5");
  std::vector<double> dilated_share;
  for (int round = 0; round < 3; ++round) {
    RunResult a = run(t, truth, full, &plan);
    RunResult b = run(t, truth, half, &plan);
    EXPECT_EQ(a.dpu_dilated_ns, 0u) << "nothing is dilated at host speed";
    EXPECT_GT(b.dpu_dilated_ns, 0u);
    EXPECT_EQ(b.drops, 0u);
    EXPECT_EQ(a.metrics.are, b.metrics.are) << "the same sketch over the same packets";
    dilated_share.push_back(figures(b).dilated_share);
  }
  // F = 0.5: the worker stays busy (1/F - 1) = 1 x its work again.
  EXPECT_GT(median(dilated_share), 0.95);
  EXPECT_LT(median(dilated_share), 1.05);
}

// Issue 31's check on measure's real loop, a Count-Min worker with the
// wire in its loop, as fast as possible: at F = 0.5 against F = 1, paired
// and interleaved (core's paired_speed_check), throughput 0.47-0.53x and
// dpu CPU per packet 1.9-2.1x. With the model's own clock reads billed
// again (the surplus issue 31 found) it was 0.42x and 2.38x.
// The loop is memory-bound, and on this VM its cost flipped between two
// levels 1.43x apart from one run to the next, at both speeds alike
// (core's SpeedCheck::quiet): hence fifteen short pairs, whose median
// ratio is a pair that fell on one level, and five attempts (a busy spell
// once held all three of a check at 2.11x).
TEST(DpuSpeed, CountMinWorkerAtHalfSpeedKeepsTheModelsPromise) {
  Trace t = skewed_trace(400000, 40000, 5);
  GroundTruth truth = ground_truth(t.packets);
  const WirePlan plan = plan_wire(t.packets, 1);
  auto run_at = [&](double f) {
    RunConfig c;
    c.algorithm.algo = "cms";
    c.passes = 2;
    c.algorithm.dpu_speed = DpuSpeed::parse(f >= 1 ? "host" : std::to_string(f));
    const RunResult r = run(t, truth, c, &plan);
    EXPECT_EQ(r.drops, 0u);
    return SpeedSample{r.packets / r.seconds, figures(r).dpu_ns_per_packet};
  };
  const SpeedCheck c = paired_speed_check_with_retry(run_at, 0.5, 15, 5);
  RecordProperty("throughput_ratio", std::to_string(c.median_throughput_ratio()));
  RecordProperty("cpu_ratio", std::to_string(c.median_cpu_ratio()));
  EXPECT_TRUE(c.within()) << c.describe();
}

// The same on Duet's loop: half the packets are heavy flows' that the
// hardware table counts (never the dpu's work, and at full speed either
// way), the rest light flows' for the worker's sketch. A unit is a packet
// the worker measured; Duet's control path runs on its own thread and is
// billed to the dpu too.
TEST(DpuSpeed, DuetWorkerAtHalfSpeedKeepsTheModelsPromise) {
  Trace t = two_tier_trace(100, 3000, 60000);
  GroundTruth truth = ground_truth(t.packets);
  const WirePlan plan = plan_wire(t.packets, 1);
  auto run_at = [&](double f) {
    RunConfig c;
    c.algorithm.algo = "duet";
    c.algorithm.heavy_threshold = 100;
    c.algorithm.hw_idle_timeout_ns = 0;  // entries stay: the hardware counts the same packets in every run
    c.passes = 2;
    c.algorithm.dpu_speed = DpuSpeed::parse(f >= 1 ? "host" : std::to_string(f));
    const RunResult r = run(t, truth, c, &plan);
    EXPECT_EQ(r.drops, 0u);
    EXPECT_EQ(r.hw_hits, 100u * 3000u) << "every heavy packet of the measured pass";
    const double measured = double(r.queues.at(0).delivered);
    return SpeedSample{measured / r.seconds, double(r.cpu.get(Place::kDpu)) / (measured * r.passes)};
  };
  const SpeedCheck c = paired_speed_check_with_retry(run_at, 0.5, 15, 5);
  RecordProperty("throughput_ratio", std::to_string(c.median_throughput_ratio()));
  RecordProperty("cpu_ratio", std::to_string(c.median_cpu_ratio()));
  EXPECT_TRUE(c.within()) << c.describe();
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
