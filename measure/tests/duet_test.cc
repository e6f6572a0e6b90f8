#include "duet.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <unordered_map>

#include "dpukit/core/flow_table.h"
#include "duet_fixtures.h"

namespace dpukit::measure {
namespace {

using namespace duet_fixtures;

// The pipeline on one thread with a model clock: the hw stage matches, a miss
// goes to Duet's sketch path, the NIC applies due rules, the control path
// applies their outcomes.
struct Harness {
  EmulatedFlowTable table;
  Duet duet;
  uint64_t now;
  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> truth;
  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> retired;  // what the caller was handed, per flow
  Harness(EmulatedFlowTable::Config tc, const DuetConfig& dc) : table(on_model_clock(tc)), duet(dc, table), now(now_ns()) {}
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
    control();
  }
  void settle(uint64_t ns) {
    now += ns;
    table.service(now);
    control();
  }
  void control() {
    duet.apply_hw_events();
    std::vector<RecordCount> out;
    duet.take_retired(out);
    for (const RecordCount& r : out) retired[r.key] += r.packets;
  }
  // A flow's count over the run: what retired with its records, and the estimate now.
  double total(const FlowKey& k) const {
    auto it = retired.find(k);
    return duet.estimate(k) + double(it == retired.end() ? 0 : it->second);
  }
};

// The algorithm's behaviour with the paper's 32-bit counters and with 16-bit ones.
class DuetAlgorithm : public ::testing::TestWithParam<unsigned> {
 protected:
  unsigned bits() const { return GetParam(); }
  DuetConfig cfg(size_t memory, uint64_t top, size_t records = 256) const {
    return duet_cfg(memory, top, records, bits());
  }
  // The budget for `width` counters per row after `records` records.
  size_t budget(size_t width, size_t records) const {
    return Duet::records_bytes(records) + 3 * width * bits() / 8;
  }
};
INSTANTIATE_TEST_SUITE_P(CounterBits, DuetAlgorithm, ::testing::Values(32u, 16u),
                         [](const auto& info) { return std::to_string(info.param) + "bit"; });

TEST_P(DuetAlgorithm, HeavyFlowsMoveToHardwareAndEveryCountIsExactWithoutCollisions) {
  Harness h(table_cfg(), cfg(4 << 20, 10));  // wide rows: no collisions among 50 flows
  std::mt19937 rng(3);
  for (int n = 0; n < 20000; ++n) {
    uint32_t i = rng() % 100 < 80 ? rng() % 5 : 5 + rng() % 45;  // 5 heavy flows, 45 light ones
    h.packet(flow(i));
  }
  for (auto& [k, c] : h.truth) EXPECT_EQ(h.duet.estimate(k), double(c)) << k.str();
  auto st = h.duet.stats();
  EXPECT_GE(st.installed, 5u);
  EXPECT_EQ(st.records_retired, 0u) << "nothing aged or was refused";
  for (uint32_t i = 0; i < 5; ++i) {
    auto hw = h.duet.hw_count(flow(i));
    ASSERT_TRUE(hw.has_value()) << "heavy flow " << i << " is in the hardware table";
    EXPECT_GT(hw->packets, 10u);
  }
  EXPECT_GT(h.table.stats().hits, 15000u) << "most packets counted by hw";
}

TEST_P(DuetAlgorithm, PromotionHappensAtTopWithCountTop) {
  Harness h(table_cfg(), cfg(1 << 20, 10));
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

TEST_P(DuetAlgorithm, CounterResetTakesTheHeavyFlowOutOfItsCounters) {
  // One counter per row: every flow shares every counter, so the light flows'
  // estimates carry the heavy flow's count until the reset takes it out.
  Harness h(table_cfg(), cfg(budget(1, 16), 106, 16));
  ASSERT_EQ(h.duet.width(), 1u);
  ASSERT_EQ(h.duet.counter_bits(), bits());
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

TEST_P(DuetAlgorithm, PacketsWhileTheInsertionIsPendingAreCountedOnce) {
  // 10 rules/s and 50 ms latency: the insertion stays pending for a while.
  Harness h(table_cfg(1024, 10, 50'000'000), cfg(4 << 20, 10));
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

TEST_P(DuetAlgorithm, RefusedFlowsStayExactInSoftware) {
  Harness h(table_cfg(1), cfg(4 << 20, 10));  // room for one rule
  for (int n = 0; n < 100; ++n) {
    h.packet(flow(1));
    h.packet(flow(2));
  }
  auto st = h.duet.stats();
  EXPECT_EQ(st.installed, 1u);
  EXPECT_EQ(st.refused, 10u) << "flow 2 is promoted again at each TOP it reaches: 10, 20, ..., 100";
  EXPECT_EQ(st.promotions, 11u);
  EXPECT_EQ(st.records_retired, 10u) << "each refusal retires flow 2's record";
  EXPECT_EQ(st.records_used, 1u) << "flow 1's";
  EXPECT_EQ(h.duet.estimate(flow(1)), 100.0);
  EXPECT_EQ(h.retired[flow(2)], 100u) << "every refused promotion's count handed over";
  EXPECT_EQ(h.total(flow(2)), 100.0);
}

TEST_P(DuetAlgorithm, AgingReturnsAnIdleHeavyFlowToTheSketchWithoutLosingItsCount) {
  Harness h(table_cfg(1024, 0, 0, 10'000'000), cfg(4 << 20, 10));  // 10 ms idle timeout
  for (int n = 0; n < 50; ++n) h.packet(flow(3));
  ASSERT_TRUE(h.duet.hw_count(flow(3)).has_value());
  h.settle(50'000'000);  // idle
  EXPECT_FALSE(h.duet.hw_count(flow(3)).has_value()) << "aged out of hardware";
  EXPECT_EQ(h.duet.stats().aged, 1u);
  EXPECT_EQ(h.duet.stats().records_used, 0u) << "its record is free again";
  EXPECT_EQ(h.duet.stats().records_retired, 1u);
  EXPECT_EQ(h.retired[flow(3)], 50u) << "TOP and the 40 the hardware counted, handed over";
  EXPECT_EQ(h.duet.estimate(flow(3)), 0.0) << "nothing of it left in the sketch";
  for (int n = 0; n < 5; ++n) h.packet(flow(3));  // back as a light flow (Case 1)
  EXPECT_FALSE(h.duet.hw_count(flow(3)).has_value());
  EXPECT_EQ(h.total(flow(3)), 55.0);
  for (int n = 0; n < 20; ++n) h.packet(flow(3));  // heavy again: a second promotion, into a new record
  EXPECT_EQ(h.duet.stats().promotions, 2u);
  EXPECT_EQ(h.duet.stats().records_used, 1u);
  EXPECT_EQ(h.total(flow(3)), 75.0);
  EXPECT_EQ(h.duet.estimate(flow(3)), 25.0) << "the second promotion's count";
}

// One counter per row, shared by every flow of two workers: each counter must
// end holding every packet, which only atomic updates guarantee. TOP is out of
// reach, so nothing is promoted.
void expect_no_lost_updates(unsigned bits, uint64_t top, int per_worker) {
  EmulatedFlowTable table(table_cfg());
  DuetConfig c = duet_cfg(Duet::records_bytes(16) + 3 * bits / 8, top, 16, bits);
  c.single_writer = false;
  Duet duet(c, table);
  ASSERT_EQ(duet.width(), 1u);
  auto work = [&](uint32_t first) {
    for (int n = 0; n < per_worker; ++n) duet.on_sketch_path(flow(first + n % 100));
  };
  std::thread a(work, 0), b(work, 1000);
  a.join();
  b.join();
  EXPECT_EQ(duet.estimate(flow(0)), 2.0 * per_worker) << bits << "-bit counters lost updates";
  EXPECT_EQ(duet.stats().promotions, 0u);
}

TEST(DuetConcurrency, ConcurrentWorkersLoseNoUpdates) { expect_no_lost_updates(32, 1'000'000'000, 400000); }

TEST(DuetConcurrency, SixteenBitCountersLoseNoUpdatesEither) {
  // The 16-bit update is a compare-and-swap that stops at the top; the total stays below TOP.
  expect_no_lost_updates(16, Duet::kMaxTop16, 8000);
}

// The cases the single-thread harness never produces, because it applies the
// table's outcomes at once: a packet that reaches the sketch after its flow
// was installed (it was in a ring), and an entry that ages out before the
// control path has applied its insertion.
TEST(DuetEvents, APacketInFlightAtInstallAndAnEntryAgedBeforeItsInsertionWasSeen) {
  EmulatedFlowTable::Config tc = table_cfg(1024, 0, 0, 10'000'000);  // 10 ms idle timeout
  uint64_t now = now_ns();
  tc.clock = [&] { return now; };
  EmulatedFlowTable table(tc);
  Duet duet(duet_cfg(4 << 20, 10), table);
  const FlowKey k = flow(9);
  for (int n = 0; n < 10; ++n) duet.on_sketch_path(k);  // reaches TOP: promoted
  now += 1000;
  table.service(now);  // installed in the table; the control path has not seen it yet
  ASSERT_TRUE(table.query(k).has_value());
  for (int n = 0; n < 5; ++n) ASSERT_TRUE(table.match(k, 64, now));  // 5 packets counted in hardware
  duet.on_sketch_path(k);  // one that was in a ring when the rule took effect
  now += 50'000'000;
  table.service(now);  // idle: aged out, still before any event was applied
  ASSERT_FALSE(table.query(k).has_value());
  while (duet.apply_hw_events() > 0) {
  }
  EXPECT_EQ(duet.stats().installed, 1u);
  EXPECT_EQ(duet.stats().aged, 1u);
  std::vector<RecordCount> retired;
  ASSERT_EQ(duet.take_retired(retired), 1u);
  EXPECT_EQ(retired[0].key, k);
  EXPECT_EQ(retired[0].packets, 15u) << "TOP + 5 in hardware";
  EXPECT_EQ(retired[0].bytes, 5u * 64) << "what the hardware counted";
  EXPECT_EQ(duet.estimate(k), 1.0) << "the one in flight stays in the sketch";
  for (int n = 0; n < 3; ++n) duet.on_sketch_path(k);  // back on the sketch path
  EXPECT_EQ(duet.estimate(k), 4.0);
  EXPECT_EQ(duet.take_retired(retired), 0u) << "taken once";
}

TEST(DuetCounters, SixteenBitCountersSaturateInsteadOfWrapping) {
  // One counter per row and a single record: after the first promotion every
  // other flow that reaches TOP finds no record and stays in the sketch, so
  // the shared counters climb past 65,535 packets. They must stop there, with
  // one worker's plain increments and with several workers' atomic ones.
  for (bool single_writer : {true, false}) {
    EmulatedFlowTable table(table_cfg());
    DuetConfig c = duet_cfg(Duet::records_bytes(1) + 3 * 2 * 1, Duet::kMaxTop16, 1, 16);
    c.single_writer = single_writer;
    Duet duet(c, table);
    ASSERT_EQ(duet.width(), 1u);
    for (uint64_t n = 0; n < Duet::kMaxTop16; ++n) duet.on_sketch_path(flow(0));  // takes the only record
    EXPECT_EQ(duet.stats().promotions, 1u);
    for (uint32_t n = 0; n < 100000; ++n) duet.on_sketch_path(flow(1 + n % 999));
    EXPECT_EQ(duet.stats().promotions, 1u);
    EXPECT_GT(duet.stats().records_full, 0u);
    EXPECT_EQ(duet.estimate(flow(500)), 65535.0)
        << "saturated, not wrapped to a small count (single writer: " << single_writer << ")";
  }
}

TEST_P(DuetAlgorithm, EveryRecordIsFoundWhenAllAreTakenAndLaterFlowsStayInTheSketch) {
  // 8 records for 12 heavy flows: the first 8 take every record (some far
  // from where their key starts probing), the other 4 find none. Every count
  // stays exact in a sketch without collisions.
  Harness h(table_cfg(), cfg(4 << 20, 10, 8));
  for (int n = 0; n < 30; ++n)
    for (uint32_t i = 0; i < 12; ++i) h.packet(flow(i));
  EXPECT_EQ(h.duet.stats().promotions, 8u);
  EXPECT_GT(h.duet.stats().records_full, 0u);
  EXPECT_EQ(h.duet.stats().records, 8u);
  EXPECT_EQ(h.duet.stats().records_used, 8u);
  for (uint32_t i = 0; i < 12; ++i) EXPECT_EQ(h.duet.estimate(flow(i)), 30.0) << i;
  EXPECT_EQ(h.duet.estimate(flow(100)), 0.0) << "a flow never seen";
}

TEST(DuetConfigCheck, RefusesABudgetThatCannotHoldItsRecords) {
  EmulatedFlowTable table(table_cfg());
  EXPECT_THROW(Duet(duet_cfg(1024, 10, 64), table), std::invalid_argument);
  EXPECT_THROW(Duet(duet_cfg(1 << 20, 10, 64, 8), table), std::invalid_argument) << "8-bit counters";
  EXPECT_THROW(Duet(duet_cfg(1 << 20, Duet::kMaxTop16 + 1, 64, 16), table),
               std::invalid_argument)
      << "TOP beyond what 16-bit counters hold with room for the light flows";
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
  cfg.algorithm.algo = "duet";
  cfg.algorithm.memory_bytes = 64 * 1024;  // collisions
  cfg.workers = 2;
  cfg.algorithm.heavy_threshold = 500;
  cfg.algorithm.hw_insert_rate = 2000;  // slow: pending periods while traffic flows
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
