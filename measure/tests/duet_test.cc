#include "duet.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <unordered_map>

#include "datapath.h"
#include "dpukit/core/flow_table.h"

namespace dpukit::measure {
namespace {

FlowKey flow(uint32_t i) { return FlowKey::from_tuple(0x0a000000u + i, 0xc0000000u + i * 13, 1024 + i % 60000, 80, 6); }

EmulatedFlowTable::Config table_cfg(size_t capacity = 1024, double rate = 0, uint64_t latency = 0, uint64_t idle = 0) {
  EmulatedFlowTable::Config c;
  c.capacity = capacity;
  c.insert_rate = rate;
  c.insert_latency_ns = latency;
  c.idle_timeout_ns = idle;
  return c;
}

// The pipeline on one thread with a model clock: the hw stage matches, a miss
// goes to Duet's sketch path, the NIC applies due rules, the control path
// applies their outcomes.
struct Harness {
  EmulatedFlowTable table;
  Duet duet;
  uint64_t now;
  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> truth;
  Harness(EmulatedFlowTable::Config tc, DuetConfig dc) : table(on_model_clock(tc)), duet(dc, table), now(now_ns()) {}
  // Duet's requests are stamped with the model time too, whatever the scheduler does.
  EmulatedFlowTable::Config on_model_clock(EmulatedFlowTable::Config tc) {
    tc.clock = [this] { return now; };
    return tc;
  }
  void packet(const FlowKey& k, uint64_t step_ns = 1000) {
    now += step_ns;
    ++truth[k];
    if (!table.match(k, 64, now)) duet.on_sketch_path(k);
    table.service(now);
    duet.apply_hw_events();
  }
  void settle(uint64_t ns) {
    now += ns;
    table.service(now);
    duet.apply_hw_events();
  }
};

DuetConfig duet_cfg(size_t memory, uint64_t top, size_t records = 256) {
  DuetConfig d;
  d.memory_bytes = memory;
  d.top = top;
  d.records = records;
  return d;
}

TEST(Duet, HeavyFlowsMoveToHardwareAndEveryCountIsExactWithoutCollisions) {
  Harness h(table_cfg(), duet_cfg(4 << 20, 10));  // wide rows: no collisions among 50 flows
  std::mt19937 rng(3);
  for (int n = 0; n < 20000; ++n) {
    uint32_t i = rng() % 100 < 80 ? rng() % 5 : 5 + rng() % 45;  // 5 heavy flows, 45 light ones
    h.packet(flow(i));
  }
  for (auto& [k, c] : h.truth) EXPECT_EQ(h.duet.estimate(k), double(c)) << k.str();
  auto st = h.duet.stats();
  EXPECT_GE(st.installed, 5u);
  for (uint32_t i = 0; i < 5; ++i) {
    auto hw = h.duet.hw_count(flow(i));
    ASSERT_TRUE(hw.has_value()) << "heavy flow " << i << " is in the hardware table";
    EXPECT_GT(hw->packets, 10u);
  }
  EXPECT_GT(h.table.stats().hits, 15000u) << "most packets counted by hw";
}

TEST(Duet, PromotionHappensAtTopWithCountTop) {
  Harness h(table_cfg(), duet_cfg(1 << 20, 10));
  for (int n = 0; n < 9; ++n) h.packet(flow(1));
  EXPECT_FALSE(h.duet.hw_count(flow(1)).has_value());
  EXPECT_EQ(h.duet.stats().promotions, 0u);
  h.packet(flow(1));  // the 10th packet: min_cnt + 1 == TOP
  EXPECT_EQ(h.duet.stats().promotions, 1u);
  ASSERT_TRUE(h.duet.hw_count(flow(1)).has_value());
  EXPECT_EQ(h.duet.hw_count(flow(1))->packets, 10u) << "inserted with P.Cnt = TOP";
  EXPECT_EQ(h.duet.estimate(flow(1)), 10.0);
  h.packet(flow(1));
  EXPECT_EQ(h.duet.hw_count(flow(1))->packets, 11u) << "later packets counted in hw";
}

TEST(Duet, CounterResetTakesTheHeavyFlowOutOfItsCounters) {
  // One counter per row: every flow shares every counter, so the light flows'
  // estimates carry the heavy flow's count until the reset takes it out.
  Harness h(table_cfg(), duet_cfg(Duet::kRecordBytes * 16 + 3 * 4 * 1, 106, 16));
  ASSERT_EQ(h.duet.width(), 1u);
  for (int n = 0; n < 100; ++n) h.packet(flow(0));
  for (uint32_t i = 1; i <= 5; ++i) h.packet(flow(i));
  EXPECT_EQ(h.duet.estimate(flow(1)), 105.0) << "a light flow inflated by the heavy one";
  h.packet(flow(0));  // min_cnt = 105: 105 + 1 reaches TOP, promotion and reset
  EXPECT_EQ(h.duet.stats().promotions, 1u);
  EXPECT_EQ(h.duet.estimate(flow(1)), 0.0) << "the reset subtracted the flow's count, saturating at zero";
  EXPECT_EQ(h.duet.estimate(flow(0)), 106.0) << "promoted with count TOP, never below the true 101";
  h.packet(flow(2));
  EXPECT_EQ(h.duet.estimate(flow(2)), 1.0) << "light flows count from the reset on";
}

TEST(Duet, PacketsWhileTheInsertionIsPendingAreCountedOnce) {
  // 10 rules/s and 50 ms latency: the insertion stays pending for a while.
  Harness h(table_cfg(1024, 10, 50'000'000), duet_cfg(4 << 20, 10));
  for (int n = 0; n < 10; ++n) h.packet(flow(7));
  EXPECT_EQ(h.duet.stats().promotions, 1u);
  for (int n = 0; n < 300; ++n) h.packet(flow(7), 100'000);  // 30 ms: still pending
  EXPECT_FALSE(h.duet.hw_count(flow(7)).has_value());
  EXPECT_EQ(h.duet.estimate(flow(7)), 310.0);
  EXPECT_EQ(h.duet.stats().moved_to_record, 30u) << "each TOP reached while pending moved into the record";
  for (int n = 0; n < 300; ++n) h.packet(flow(7), 100'000);  // installed on the way
  ASSERT_TRUE(h.duet.hw_count(flow(7)).has_value());
  EXPECT_EQ(h.duet.estimate(flow(7)), 610.0) << "hw + packets counted in software while pending, no double count";
  EXPECT_EQ(h.duet.stats().promotions, 1u) << "no second promotion while pending";
}

TEST(Duet, RefusedFlowsStayExactInSoftware) {
  Harness h(table_cfg(1), duet_cfg(4 << 20, 10));  // room for one rule
  for (int n = 0; n < 100; ++n) {
    h.packet(flow(1));
    h.packet(flow(2));
  }
  auto st = h.duet.stats();
  EXPECT_EQ(st.installed, 1u);
  EXPECT_EQ(st.refused, 10u) << "flow 2 is promoted again at each TOP it reaches: 10, 20, ..., 100";
  EXPECT_EQ(st.promotions, 11u);
  EXPECT_EQ(h.duet.estimate(flow(1)), 100.0);
  EXPECT_EQ(h.duet.estimate(flow(2)), 100.0);
}

TEST(Duet, AgingReturnsAnIdleHeavyFlowToTheSketchWithoutLosingItsCount) {
  Harness h(table_cfg(1024, 0, 0, 10'000'000), duet_cfg(4 << 20, 10));  // 10 ms idle timeout
  for (int n = 0; n < 50; ++n) h.packet(flow(3));
  ASSERT_TRUE(h.duet.hw_count(flow(3)).has_value());
  h.settle(50'000'000);  // idle
  EXPECT_FALSE(h.duet.hw_count(flow(3)).has_value()) << "aged out of hardware";
  EXPECT_EQ(h.duet.stats().aged, 1u);
  EXPECT_EQ(h.duet.estimate(flow(3)), 50.0);
  for (int n = 0; n < 5; ++n) h.packet(flow(3));  // back as a light flow (Case 1)
  EXPECT_FALSE(h.duet.hw_count(flow(3)).has_value());
  EXPECT_EQ(h.duet.estimate(flow(3)), 55.0);
  for (int n = 0; n < 20; ++n) h.packet(flow(3));  // heavy again: a second promotion
  EXPECT_EQ(h.duet.stats().promotions, 2u);
  EXPECT_EQ(h.duet.estimate(flow(3)), 75.0);
}

TEST(Duet, ConcurrentWorkersLoseNoUpdates) {
  // 16 counters per row shared by every flow of two workers: only atomic
  // updates keep every increment. TOP is out of reach, so nothing is promoted.
  EmulatedFlowTable table(table_cfg());
  Duet duet(duet_cfg(Duet::kRecordBytes * 16 + 3 * 4 * 16, 1'000'000'000, 16), table);
  constexpr int kPerWorker = 400000;
  auto work = [&](uint32_t first) {
    for (int n = 0; n < kPerWorker; ++n) duet.on_sketch_path(flow(first + n % 100));
  };
  std::thread a(work, 0), b(work, 1000);
  a.join();
  b.join();
  // Every counter of a row together holds every packet.
  double sum = 0;
  for (uint32_t i = 0; i < 100; ++i) sum += duet.estimate(flow(i)) + duet.estimate(flow(1000 + i));
  EXPECT_GE(sum, 2.0 * kPerWorker) << "min over rows of a full-collision sketch is at least the true count";
  EXPECT_EQ(duet.stats().promotions, 0u);
}

TEST(Duet, RefusesABudgetThatCannotHoldItsRecords) {
  EmulatedFlowTable table(table_cfg());
  EXPECT_THROW(Duet(duet_cfg(1024, 10, 64), table), std::invalid_argument);
}

// Through the real datapath (NIC thread, RSS, rings, two workers, control
// thread): with no drops, no flow that reached TOP loses a packet.
TEST(DuetDatapath, PromotedFlowsNeverLosePacketsWithTwoWorkers) {
  Trace trace;
  std::mt19937 rng(11);
  for (int n = 0; n < 300000; ++n) {
    uint32_t r = rng() % 1000;
    uint32_t i = r < 600 ? r % 20 : 20 + rng() % 5000;  // 20 heavy flows carry 60%
    trace.packets.push_back({flow(i), 64, 0});
  }
  GroundTruth truth = ground_truth(trace.packets);
  RunConfig cfg;
  cfg.algo = "duet";
  cfg.memory_bytes = 64 * 1024;  // collisions
  cfg.workers = 2;
  cfg.heavy_threshold = 500;
  cfg.hw_insert_rate = 2000;  // slow: pending periods while traffic flows
  RunResult r = run(trace, truth, cfg);
  EXPECT_EQ(r.drops, 0u);
  size_t heavy = 0;
  for (const auto& [k, c] : truth) {
    if (c < r.top) continue;
    ++heavy;
    EXPECT_GE(r.estimates.at(k), double(c)) << k.str();
  }
  EXPECT_GE(heavy, 20u);
  ASSERT_TRUE(r.hw.has_value());
  EXPECT_GT(r.hw->hits, 0u);
  EXPECT_GT(r.cpu.get(Place::kDpu), 0u);
  EXPECT_GT(r.cpu.get(Place::kHw), 0u);
}

}  // namespace
}  // namespace dpukit::measure
