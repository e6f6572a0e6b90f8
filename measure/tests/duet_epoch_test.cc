// Duet's sketch epoch (DuetConfig::epoch_ns): the counters hold the light
// traffic of the last one to two epochs, so their noise stays bounded on a run
// of any length, and heavy flows are promoted as before.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "dpukit/core/flow_table.h"
#include "duet.h"
#include "duet_fixtures.h"
#include "measurer.h"

namespace dpukit::measure {
namespace {

using namespace duet_fixtures;

DuetConfig epoch_cfg(size_t memory, uint64_t top, unsigned bits, bool single_writer, size_t records = 64) {
  DuetConfig d = duet_cfg(memory, top, records, bits);
  d.single_writer = single_writer;
  d.epoch_ns = 1;  // rotated by hand here: only whether there is an epoch matters to Duet
  return d;
}

// The budget for `width` epoch counters (two halves of `bits`) per row after `records` records.
size_t epoch_budget(size_t width, size_t records, unsigned bits) {
  return Duet::records_bytes(records) + 3 * width * 2 * bits / 8;
}

struct Mode {
  unsigned bits;
  bool single_writer;
};

class DuetEpoch : public ::testing::TestWithParam<Mode> {};
INSTANTIATE_TEST_SUITE_P(Counters, DuetEpoch,
                         ::testing::Values(Mode{16, true}, Mode{16, false}, Mode{32, true}, Mode{32, false}),
                         [](const auto& info) {
                           return std::to_string(info.param.bits) + "bit" +
                                  (info.param.single_writer ? "OneWorker" : "Atomic");
                         });

// Epochs of light traffic, each of new flows: 5,000 flows of 4 packets, 20
// packets a counter per epoch with 1,000 counters a row. Without an epoch the
// counters reach TOP (200) after about 10 epochs and light flows are promoted;
// with one they hold two epochs at most.
TEST_P(DuetEpoch, LightTrafficNoiseStaysWithinTwoEpochsAndNoLightFlowIsPromoted) {
  constexpr uint64_t kTop = 200;
  constexpr uint32_t kFlowsPerEpoch = 5000, kPacketsPerFlow = 4, kEpochs = 40;
  constexpr size_t kWidth = 1000;
  constexpr double kEpochPackets = kFlowsPerEpoch * kPacketsPerFlow;
  const size_t memory = epoch_budget(kWidth, 64, GetParam().bits);
  auto run = [&](bool windowed) {
    EmulatedFlowTable table(table_cfg(1 << 16));
    DuetConfig c = epoch_cfg(memory, kTop, GetParam().bits, GetParam().single_writer);
    if (!windowed) c.epoch_ns = 0;  // the same budget as 16/32-bit counters: twice the width
    Duet duet(c, table);
    double mean_noise = 0;
    for (uint32_t e = 0; e < kEpochs; ++e) {
      const uint32_t first = e * kFlowsPerEpoch;
      for (uint32_t p = 0; p < kPacketsPerFlow; ++p)
        for (uint32_t i = 0; i < kFlowsPerEpoch; ++i) duet.on_sketch_path(flow(first + i));
      if (e + 1 == kEpochs) {
        // The last epoch's flows: what their estimates carry beyond their own packets.
        for (uint32_t i = 0; i < kFlowsPerEpoch; ++i) {
          const double est = duet.estimate(flow(first + i));
          EXPECT_GE(est, kPacketsPerFlow);
          // A counter holds this epoch and the last: 2 x 20,000 packets at most.
          EXPECT_LE(est, 2 * kEpochPackets);
          mean_noise += (est - kPacketsPerFlow) / kFlowsPerEpoch;
        }
      } else {
        duet.rotate_epoch();
      }
    }
    return std::pair{duet.stats(), mean_noise};
  };
  const auto [with, noise] = run(true);
  EXPECT_EQ(with.epochs, kEpochs - 1);
  EXPECT_EQ(with.promotions, 0u) << "a light flow reached TOP";
  EXPECT_EQ(with.records_full, 0u);
  // Count-Min's bound for one row, over the window: two epochs' packets per
  // counter (40); the minimum over three rows is below it on average.
  EXPECT_LE(noise, 2 * kEpochPackets / kWidth);
  // The defect the epoch fixes: the same traffic with no epoch promotes light flows.
  const auto [without, noise_without] = run(false);
  EXPECT_GT(without.promotions, 0u);
  EXPECT_GT(noise_without, 2 * kEpochPackets / kWidth);
}

// The pipeline on one thread, the table on a model clock, as duet_test.cc's harness.
struct Pipeline {
  uint64_t now = 1'000'000;
  EmulatedFlowTable table;
  Duet duet;
  explicit Pipeline(const DuetConfig& c) : table(model(table_cfg(1024))), duet(c, table) {}
  EmulatedFlowTable::Config model(EmulatedFlowTable::Config tc) {
    tc.clock = [this] { return now; };
    return tc;
  }
  void packet(const FlowKey& k) {
    now += 1000;
    if (!table.match(k, 64, now)) duet.on_sketch_path(k);
    table.service(now);
    duet.apply_hw_events();
  }
};

// A heavy flow that reaches TOP within the window, across a rotation, is
// promoted on its TOP-th packet with its whole count, and its counters are
// emptied (the previous half too): its estimate stays exact.
TEST_P(DuetEpoch, HeavyFlowReachingTopWithinTheWindowIsPromotedWithItsExactCount) {
  constexpr uint64_t kTop = 100;
  Pipeline p(epoch_cfg(4 << 20, kTop, GetParam().bits, GetParam().single_writer));  // wide rows: no collisions
  const FlowKey heavy = flow(7);
  for (uint32_t i = 0; i < 60; ++i) {
    p.packet(heavy);
    p.packet(flow(1000 + i));  // light flows between
  }
  p.duet.rotate_epoch();
  EXPECT_EQ(p.duet.estimate(heavy), 60.0);  // the previous epoch's half still counts
  for (uint32_t i = 0; i < 39; ++i) p.packet(heavy);
  EXPECT_EQ(p.duet.stats().promotions, 0u);
  p.packet(heavy);  // the 100th
  EXPECT_EQ(p.duet.stats().promotions, 1u);
  EXPECT_EQ(p.duet.stats().installed, 1u);
  for (uint32_t i = 0; i < 500; ++i) p.packet(heavy);  // in hardware now
  EXPECT_EQ(p.duet.estimate(heavy), 600.0);
  // Rotations leave a count held outside the sketch alone.
  p.duet.rotate_epoch();
  p.duet.rotate_epoch();
  EXPECT_EQ(p.duet.estimate(heavy), 600.0);
  for (uint32_t i = 0; i < 60; ++i) EXPECT_EQ(p.duet.estimate(flow(1000 + i)), 0.0);  // two epochs ago
}

// Rotations concurrent with workers updating: no increment of the window is
// lost. Each round, the sketch starts empty, the workers send their flows'
// packets, and the sketch rotates once while they do: every packet is then
// in the current half or the previous one, and each estimate is exact (rows
// wide enough for no collisions, TOP out of reach).
TEST_P(DuetEpoch, RotationConcurrentWithWorkersLosesNoIncrement) {
  const unsigned workers = GetParam().single_writer ? 1 : 3;
  constexpr uint32_t kFlows = 200, kPackets = 8000, kRounds = 5;
  EmulatedFlowTable table(table_cfg(1024));
  const uint64_t top = GetParam().bits == 16 ? Duet::kMaxTop16 : 1'000'000;
  Duet duet(epoch_cfg(8 << 20, top, GetParam().bits, GetParam().single_writer), table);
  for (uint32_t round = 0; round < kRounds; ++round) {
    std::atomic<uint64_t> sent{0};
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        for (uint32_t p = 0; p < kPackets; ++p)
          for (uint32_t i = 0; i < kFlows; ++i) {
            duet.on_sketch_path(flow(w * kFlows + i));
            sent.fetch_add(1, std::memory_order_relaxed);
          }
      });
    while (sent.load(std::memory_order_relaxed) < uint64_t{workers} * kFlows * kPackets / 4) std::this_thread::yield();
    duet.rotate_epoch();  // while the workers run: they have three quarters of their packets to go
    const bool overlapped = sent.load(std::memory_order_relaxed) < uint64_t{workers} * kFlows * kPackets;
    for (auto& t : threads) t.join();
    EXPECT_TRUE(overlapped) << "the rotation came after the workers finished";
    for (uint32_t i = 0; i < workers * kFlows; ++i)
      ASSERT_EQ(duet.estimate(flow(i)), double(kPackets)) << "round " << round << " flow " << i;
    // Two more rotations empty the sketch for the next round.
    duet.rotate_epoch();  // what came before the concurrent rotation leaves
    EXPECT_LT(duet.estimate(flow(0)), double(kPackets));
    duet.rotate_epoch();
    for (uint32_t i = 0; i < workers * kFlows; ++i) ASSERT_EQ(duet.estimate(flow(i)), 0.0);
  }
  EXPECT_EQ(duet.stats().promotions, 0u);
}

// A half that fills stops at its top: it neither wraps nor carries into the
// other half. Only one record, held by another flow, so the flow that reaches
// TOP stays in the sketch and fills its current half (16 bits: 65,535).
TEST(DuetEpochCounters, SaturatedHalfDoesNotCarryOrWrap) {
  for (bool single_writer : {true, false}) {
    SCOPED_TRACE(single_writer ? "one worker" : "atomic");
    EmulatedFlowTable table(table_cfg(1024));
    Duet duet(epoch_cfg(4 << 20, 100, 16, single_writer, 1), table);
    for (int i = 0; i < 100; ++i) duet.on_sketch_path(flow(1));  // takes the one record
    ASSERT_EQ(duet.stats().promotions, 1u);
    const FlowKey f = flow(2);
    for (int i = 0; i < 1000; ++i) duet.on_sketch_path(f);
    EXPECT_EQ(duet.estimate(f), 1000.0);
    duet.rotate_epoch();  // 1,000 in the previous half
    for (int i = 0; i < 70000; ++i) duet.on_sketch_path(f);
    EXPECT_GT(duet.stats().records_full, 0u);
    EXPECT_EQ(duet.estimate(f), 1000.0 + 65535.0);
    duet.rotate_epoch();  // the full half is the previous one now
    EXPECT_EQ(duet.estimate(f), 65535.0);
    for (int i = 0; i < 10; ++i) duet.on_sketch_path(f);
    EXPECT_EQ(duet.estimate(f), 65545.0);
  }
}

TEST(DuetEpochCounters, AnEpochTakesTwiceTheBytesOfACounter) {
  EmulatedFlowTable table(table_cfg(1024));
  const size_t memory = epoch_budget(1000, 64, 16);
  Duet windowed(epoch_cfg(memory, 100, 16, true), table);
  DuetConfig plain = epoch_cfg(memory, 100, 16, true);
  plain.epoch_ns = 0;
  Duet without(plain, table);
  EXPECT_EQ(windowed.width(), 1000u);
  EXPECT_EQ(without.width(), 2000u);
  EXPECT_EQ(windowed.memory_bytes(), without.memory_bytes());
  EXPECT_EQ(without.rotate_epoch(), 0.0);
  EXPECT_EQ(without.stats().epochs, 0u);
}

// The measurer rotates once an epoch's time has passed on the clock it is
// given, and a control path late by several epochs rotates once.
TEST(DuetEpochCounters, MeasurerRotatesWhenAnEpochHasPassed) {
  EmulatedFlowTable table(table_cfg(1024));
  AlgorithmConfig a;
  a.algo = "duet";
  a.memory_bytes = 500 * 1024;
  a.sketch_epoch_ns = 1000;
  Measurer m(a, 1, 100, 0, &table);
  auto epochs = [&] { return m.duet_stats()->epochs; };
  m.rotate_epoch_if_due(5000);  // the first epoch starts
  m.rotate_epoch_if_due(5999);
  EXPECT_EQ(epochs(), 0u);
  const FlowKey f = flow(3);
  const FlowKey* keys[] = {&f};
  m.update_burst(0, keys, 1);
  m.rotate_epoch_if_due(6000);
  EXPECT_EQ(epochs(), 1u);
  EXPECT_EQ(m.estimate(0, f), 1.0);  // the previous epoch's
  m.poll_control(7000, 0);          // the polling worker's control path rotates too
  EXPECT_EQ(epochs(), 2u);
  EXPECT_EQ(m.estimate(0, f), 0.0);
  m.rotate_epoch_if_due(50000);  // late by many epochs: one rotation, the next epoch from now
  EXPECT_EQ(epochs(), 3u);
  m.rotate_epoch_if_due(50999);
  EXPECT_EQ(epochs(), 3u);
  m.rotate_epoch_if_due(51000);
  EXPECT_EQ(epochs(), 4u);
  a.sketch_epoch_ns = 0;
  Measurer none(a, 1, 100, 0, &table);
  none.rotate_epoch_if_due(1);
  none.rotate_epoch_if_due(1'000'000'000);
  EXPECT_EQ(none.duet_stats()->epochs, 0u);
}

}  // namespace
}  // namespace dpukit::measure
