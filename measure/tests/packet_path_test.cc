// The Arm's packet path and table management in measure's datapath
// (AlgorithmConfig::packet_path, core's dpu_packet_path.h): what is billed,
// to which packets, and that the bill lands in the dpu's CPU time on the
// real loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dpukit/measure.h"
#include "trace_fixtures.h"

namespace dpukit::measure {
namespace {

using testing::skewed_trace;
using testing::two_tier_trace;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

RunConfig at_bluefield2(const std::string& algo) {
  RunConfig c;
  c.algorithm.algo = algo;
  c.algorithm.dpu_speed = DpuSpeed::parse("bluefield2");
  return c;
}

TEST(PacketPath, EveryPacketAWorkerTakesPaysItAtBlueFieldAndNoneAtHost) {
  Trace t = skewed_trace(100000, 10000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c = at_bluefield2("cms");
  c.passes = 2;
  const RunResult r = run(t, truth, c);
  const double packet_ns = DpuPacketPath::of(c.algorithm.dpu_speed).packet_ns;
  ASSERT_GT(packet_ns, 0);
  // Every packet of both passes reached the worker: Count-Min has no hardware tier.
  EXPECT_NEAR(double(r.dpu_packet_path_ns), 2.0 * 100000 * packet_ns, 1.0);

  RunConfig host;
  host.algorithm.algo = "cms";
  EXPECT_EQ(run(t, truth, host).dpu_packet_path_ns, 0u);
  RunConfig bare = host;
  bare.algorithm.dpu_speed = DpuSpeed::parse("0.45");
  EXPECT_EQ(run(t, truth, bare).dpu_packet_path_ns, 0u) << "a bare factor says nothing of the NIC";
  RunConfig given = host;
  given.algorithm.packet_path = DpuPacketPath{.packet_ns = 50};
  EXPECT_NEAR(double(run(t, truth, given).dpu_packet_path_ns), 100000 * 50.0, 1.0) << "given at host speed";
}

// Duet: the packets the hardware table counts never reach a core and never
// pay; each rule promoted or aged pays Table II's cost at the entries held.
TEST(PacketPath, DuetsHardwarePacketsPayNothingAndItsRulesPayTableTwo) {
  Trace t = two_tier_trace(100, 2000, 20000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c = at_bluefield2("duet");
  c.algorithm.heavy_threshold = 100;
  c.algorithm.hw_idle_timeout_ns = 0;
  const RunResult r = run(t, truth, c);
  const DpuPacketPath path = DpuPacketPath::of(c.algorithm.dpu_speed);
  ASSERT_EQ(r.queues.size(), 1u);
  ASSERT_GT(r.hw_hits, 0u);
  EXPECT_EQ(r.queues[0].delivered + r.hw_hits, r.packets);
  EXPECT_NEAR(double(r.dpu_packet_path_ns), double(r.queues[0].delivered) * path.packet_ns, 1.0);
  ASSERT_TRUE(r.duet);
  const DuetStats& d = *r.duet;
  EXPECT_EQ(d.promotions, 100u) << "every heavy flow once, none aged";
  const double rules = double(d.promotions + d.aged);
  EXPECT_GE(double(d.rule_billed_ns), rules * (path.rule_cost_ns(0) - 1));
  EXPECT_LE(double(d.rule_billed_ns), rules * path.rule_cost_ns(d.records));

  RunConfig f_only = c;
  f_only.algorithm.packet_path = DpuPacketPath{};
  const RunResult r0 = run(t, truth, f_only);
  EXPECT_EQ(r0.dpu_packet_path_ns, 0u);
  EXPECT_EQ(r0.duet->rule_billed_ns, 0u);
}

// The bill is in the dpu's CPU time, on the real loop: Count-Min at
// bluefield2 with the packet path against without, in pairs whose order
// alternates; the extra dpu CPU per packet is the packet path's cost, which
// the spin's F share and the dilation's (1/F - 1) make together. A model
// that left the spin undilated would give 0.45x, one that billed it twice
// 2.2x; the bounds are 0.7-1.5x, the median of nine pairs. The slower runs
// take longer, so on a busy machine they take more preemptions and cache
// refills per packet (CI once measured 1.36x): attempts whose runs without
// the path disagree among themselves (the machine was busy) are not counted,
// up to six, after growing pauses; three counted attempts.
TEST(PacketPath, TheBillLandsInTheDpusCpuTime) {
  Trace t = skewed_trace(200000, 20000, 5);
  GroundTruth truth = ground_truth(t.packets);
  const WirePlan plan = plan_wire(t.packets, 1);
  const double packet_ns = DpuPacketPath::of(DpuSpeed::parse("bluefield2")).packet_ns;
  auto dpu_ns_per_packet = [&](bool with_path) {
    RunConfig c = at_bluefield2("cms");
    c.passes = 2;
    if (!with_path) c.algorithm.packet_path = DpuPacketPath{};
    const RunResult r = run(t, truth, c, &plan);
    return double(r.cpu.get(Place::kDpu)) / (double(r.packets) * r.passes);
  };
  double ratio = 0;
  int counted = 0, busy = 0;
  auto pause = std::chrono::milliseconds(1000);
  while (counted < 3) {
    std::vector<double> extra, without;
    for (int pair = 0; pair < 9; ++pair) {
      const bool first = pair % 2 == 0;
      const double a = dpu_ns_per_packet(first), b = dpu_ns_per_packet(!first);
      extra.push_back(first ? a - b : b - a);
      without.push_back(first ? b : a);
    }
    ratio = median(extra) / packet_ns;
    if (ratio > 0.7 && ratio < 1.5) break;
    const auto [lo, hi] = std::minmax_element(without.begin(), without.end());
    if (*hi > 1.25 * *lo && busy < 6) {  // the machine was busy: not counted
      ++busy;
      std::this_thread::sleep_for(pause);
      pause = std::min(2 * pause, std::chrono::milliseconds(8000));
      continue;
    }
    ++counted;
  }
  RecordProperty("extra_over_packet_ns", std::to_string(ratio));
  EXPECT_GT(ratio, 0.7);
  EXPECT_LT(ratio, 1.5);
}

}  // namespace
}  // namespace dpukit::measure
