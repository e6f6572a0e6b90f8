// The Arm's packet path and table management in the model: the presets'
// figures and the busy time that bills them. Whether a loop pays them as
// promised is measured on measure's real loop (measure_tests, DpuPacketPath.*).
#include "dpukit/core/dpu_packet_path.h"

#include <gtest/gtest.h>

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
// a wall clock can lengthen (preemption), never shorten.
TEST(DpuPacketPath, SpendingKeepsTheThreadBusyForFOfIt) {
  for (double factor : {1.0, 0.5}) {
    const uint64_t t0 = now_ns();
    for (int i = 0; i < 1000; ++i) spend_dpu_ns(2000, factor);
    const double took = double(now_ns() - t0);
    EXPECT_GE(took, 1000 * 2000 * factor - 2000) << "factor " << factor;
  }
  // Calls far shorter than a clock read still add up: the overshoot of one
  // is taken off the next, so 100,000 calls of 10 ns are about 1 ms, not
  // 100,000 clock reads' worth. At least what was asked, again.
  const uint64_t t0 = now_ns();
  for (int i = 0; i < 100000; ++i) spend_dpu_ns(10, 1.0);
  EXPECT_GE(double(now_ns() - t0), 100000 * 10.0 - 2000);
}

}  // namespace
}  // namespace dpukit
