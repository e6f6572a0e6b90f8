// The Arm's packet path and table management in the model: the presets'
// figures and the busy time that bills them. Whether a loop pays them as
// promised is measured on measure's real loop (measure_tests, DpuPacketPath.*).
#include "dpukit/core/dpu_packet_path.h"

#include <gtest/gtest.h>

#include <thread>

#include "dpukit/core/accounting.h"

namespace dpukit {
namespace {

TEST(DpuPacketPath, OnlyTheBlueFieldPresetsHaveOne) {
  EXPECT_FALSE(DpuPacketPath::of(DpuSpeed::parse("host")).any());
  EXPECT_FALSE(DpuPacketPath::of(DpuSpeed::parse("0.45")).any()) << "a bare factor says nothing of the NIC";
  for (const char* name : {"bluefield2", "bluefield3"}) {
    const DpuSpeed speed = DpuSpeed::parse(name);
    const DpuPacketPath p = DpuPacketPath::of(speed);
    EXPECT_TRUE(p.any()) << name;
    // The host's DPDK loop, 1/F as long on the dpu's core.
    EXPECT_NEAR(p.packet_ns * speed.factor, 15.3, 1e-9) << name;
  }
}

TEST(DpuPacketPath, ARuleCostsWhatDuetTableTwoMeasured) {
  const DpuPacketPath p = DpuPacketPath::of(DpuSpeed::parse("bluefield2"));
  // One core: 77 k rules/s at 500 k entries, 63 k at 1 M.
  EXPECT_NEAR(p.rule_cost_ns(500'000), 1e9 / 77000, 2);
  EXPECT_NEAR(p.rule_cost_ns(1'000'000), 1e9 / 63000, 2);
  EXPECT_LT(p.rule_cost_ns(0), p.rule_cost_ns(1000)) << "more entries cost more";
  const nlohmann::json j = p.to_json();
  EXPECT_EQ(j.at("rule_ns").get<double>(), p.rule_ns);
  EXPECT_EQ(j.at("packet_ns").get<double>(), p.packet_ns);
}

// Busy for at least what is asked, at F of it on this core: the time only
// a wall clock can lengthen (preemption), never shorten. Each loop runs on
// a thread of its own, which starts with no overshoot to take off: then the
// calls' busy time adds up to at least what they asked, exactly (each
// call's overshoot is taken off the next, the last one's is kept). How
// close to what was asked it stays on a busy machine is a timing figure,
// not asserted here. (On one thread, the overshoot a preemption leaves in
// the F = 1 loop, unbounded, was credit that let the F = 0.5 loop return
// early.)
uint64_t wall_of(int calls, double ns, double factor) {
  uint64_t took = 0;
  std::thread([&] {
    const uint64_t t0 = now_ns();
    for (int i = 0; i < calls; ++i) spend_dpu_ns(ns, factor);
    took = now_ns() - t0;
  }).join();
  return took;
}

TEST(DpuPacketPath, SpendingKeepsTheThreadBusyForFOfIt) {
  for (double factor : {1.0, 0.5}) EXPECT_GE(double(wall_of(1000, 2000, factor)), 1000 * 2000 * factor) << factor;
  // Calls far shorter than a clock read still add up to at least what was
  // asked: 100,000 calls of 10 ns are at least 1 ms.
  EXPECT_GE(double(wall_of(100000, 10, 1.0)), 100000 * 10.0);
}

}  // namespace
}  // namespace dpukit
