// Duet's promoted-flow records reclaimed: a record is retired (its count
// handed to the caller, the record freed) when its flow's insertion is
// refused or its hardware entry ages out, and the freed record is claimed by
// the next promotion. These tests check that reuse never mixes two flows'
// counts under concurrent workers, and that a run sees far more heavy flows
// than it has records.
#include "duet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dpukit/core/flow_table.h"
#include "duet_fixtures.h"

namespace dpukit::measure {
namespace {

using namespace duet_fixtures;

// A dpu worker's ring, as the datapath's: the NIC thread hands over bursts of
// the packets that missed the hardware table.
struct Ring {
  std::mutex mu;
  std::deque<std::vector<FlowKey>> bursts;
  void push(std::vector<FlowKey>& burst) {
    if (burst.empty()) return;
    std::lock_guard lock(mu);
    bursts.push_back(std::move(burst));
    burst.clear();
  }
  bool pop(std::vector<FlowKey>& out) {
    std::lock_guard lock(mu);
    if (bursts.empty()) return false;
    out = std::move(bursts.front());
    bursts.pop_front();
    return true;
  }
};

}  // namespace

// A dpu worker's rare path cut in two: the look-up, and the update it makes
// later. Between the two, on another core, the control path can free the
// record and another worker claim it; the concurrent test below cannot stop
// a worker there at will, this one does.
class DuetTestPeer {
 public:
  using Held = Duet::Held;
  static Held find(const Duet& d, const FlowKey& k) { return d.find_record(k, d.record_start(k)); }
  static bool add(Duet& d, Held h, uint64_t count) { return d.add_to_record(h, count); }
  static uint32_t start(const Duet& d, const FlowKey& k) { return d.record_start(k); }
};

namespace {

TEST(DuetReclaimRace, AnUpdateToARecordFreedAndReusedSinceItsLookUpFails) {
  uint64_t now = 1'000'000'000;
  EmulatedFlowTable::Config tc;
  tc.capacity = 64;
  tc.insert_rate = 0;
  tc.insert_latency_ns = 0;
  tc.idle_timeout_ns = 1'000'000;
  tc.clock = [&] { return now; };
  EmulatedFlowTable table(tc);
  Duet duet(duet_cfg(1 << 20, 10, 4, 16), table);
  const FlowKey k = flow(1);
  // j: a flow whose records start where k's does, so it claims k's slot once freed.
  uint32_t j_id = 2;
  while (DuetTestPeer::start(duet, flow(j_id)) != DuetTestPeer::start(duet, k)) ++j_id;
  const FlowKey j = flow(j_id);
  auto control = [&](uint64_t ns) {
    now += ns;
    table.service(now);
    while (duet.apply_hw_events() > 0) {
    }
  };

  for (int n = 0; n < 10; ++n) duet.on_sketch_path(k);  // TOP: promoted
  control(1000);
  ASSERT_TRUE(table.query(k).has_value());
  // A worker looks k's record up (a packet of k in flight reached TOP) ...
  const DuetTestPeer::Held stale = DuetTestPeer::find(duet, k);
  ASSERT_NE(stale.rec, nullptr);
  // ... and before it adds to it, k ages out, its record is retired and freed,
  control(10'000'000);
  std::vector<RecordCount> retired;
  ASSERT_EQ(duet.take_retired(retired), 1u);
  EXPECT_EQ(retired[0].packets, 10u);
  EXPECT_EQ(DuetTestPeer::find(duet, k).rec, nullptr);
  // and j is promoted into the same record.
  for (int n = 0; n < 10; ++n) duet.on_sketch_path(j);
  const DuetTestPeer::Held held_j = DuetTestPeer::find(duet, j);
  ASSERT_EQ(held_j.rec, stale.rec) << "j claimed the record k had";
  EXPECT_EQ(duet.estimate(j), 10.0);
  // The stalled worker's update must fail (it then looks again and finds no record for k).
  EXPECT_FALSE(DuetTestPeer::add(duet, stale, 7)) << "k's count added to whichever flow has the record now";
  EXPECT_EQ(duet.estimate(j), 10.0) << "j's count mixed with k's";
  EXPECT_TRUE(DuetTestPeer::add(duet, held_j, 3)) << "a current look-up's update goes through";
  EXPECT_EQ(duet.estimate(j), 13.0);
}

class DuetReclaim : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(CounterBits, DuetReclaim, ::testing::Values(32u, 16u),
                         [](const auto& info) { return std::to_string(info.param) + "bit"; });

// Four workers, each with its own flows (RSS), promote flows into 32
// records; a table of 24 entries refuses many insertions; flows go idle in
// waves and age out; a sixteenth of the packets skip the hardware stage (in
// flight when their flow's rule took effect), so flows reach TOP again while
// pending and while installed. The control path retires records all along,
// while workers hold them and other workers claim the freed slots. With a
// sketch too wide for collisions every count is exact, so for every flow
//   sum of its retired counts + estimate == packets sent.
// A worker's update to a record retired under it must fail and look again;
// one that lands in the slot's next flow breaks the sum for both flows.
TEST_P(DuetReclaim, ConcurrentReuseNeverMixesTwoFlowsCounts) {
  constexpr unsigned kWorkers = 4;
  constexpr uint32_t kFlows = 600, kWave = 60;
  constexpr uint64_t kPackets = 800000, kStepNs = 1000;
  std::atomic<uint64_t> now{1'000'000'000};
  EmulatedFlowTable::Config tc;
  tc.capacity = 24;
  tc.insert_rate = 200000;           // 5 us apart
  tc.insert_latency_ns = 50'000;     // pending for 50 packets
  tc.idle_timeout_ns = 200'000;      // idle for 200 packets
  tc.clock = [&] { return now.load(std::memory_order_relaxed); };
  EmulatedFlowTable table(tc);
  Duet duet(duet_cfg(4 << 20, 4, 32, GetParam()), table);

  std::vector<uint64_t> truth(kFlows, 0);
  std::vector<Ring> rings(kWorkers);
  std::atomic<bool> sent{false}, stop_control{false};
  std::atomic<uint64_t> control_rounds{0};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < kWorkers; ++w)
    workers.emplace_back([&, w] {
      std::vector<FlowKey> burst;
      for (;;) {
        if (rings[w].pop(burst)) {
          for (const FlowKey& k : burst) duet.on_sketch_path(k);
        } else if (sent.load(std::memory_order_acquire)) {
          if (!rings[w].pop(burst)) return;  // nothing came after the last look
          for (const FlowKey& k : burst) duet.on_sketch_path(k);
        } else {
          std::this_thread::yield();
        }
      }
    });
  std::vector<RecordCount> retired;
  std::thread control([&] {
    std::vector<RecordCount> out;
    while (!stop_control.load(std::memory_order_acquire)) {
      if (duet.apply_hw_events() == 0) std::this_thread::yield();
      duet.take_retired(out);
      control_rounds.fetch_add(1, std::memory_order_release);
    }
    retired.insert(retired.end(), out.begin(), out.end());
  });

  // The NIC thread: the hardware stage, then RSS to the flow's worker.
  std::mt19937 rng(7);
  std::vector<std::vector<FlowKey>> bursts(kWorkers);
  for (uint64_t n = 0; n < kPackets; ++n) {
    const uint64_t t = now.fetch_add(kStepNs, std::memory_order_relaxed) + kStepNs;
    const uint32_t first = static_cast<uint32_t>(n / 20000 * 37 % kFlows);  // a wave moves on every 20,000 packets
    const uint32_t f = (first + rng() % kWave) % kFlows;
    ++truth[f];
    const FlowKey k = flow(f);
    const bool in_flight = rng() % 16 == 0;
    if (in_flight || !table.match(k, 64, t)) {
      auto& b = bursts[f % kWorkers];
      b.push_back(k);
      if (b.size() == 16) rings[f % kWorkers].push(b);
    }
    if (n % 8 == 0) table.service(t);
    if (n % 64 == 0) {
      // The control path keeps up with the model clock, as it does with a
      // real one: the NIC waits for a round of it that began after now.
      const uint64_t r = control_rounds.load(std::memory_order_acquire);
      while (control_rounds.load(std::memory_order_acquire) < r + 2) std::this_thread::yield();
    }
  }
  for (unsigned w = 0; w < kWorkers; ++w) rings[w].push(bursts[w]);
  sent.store(true, std::memory_order_release);
  for (auto& t : workers) t.join();
  stop_control.store(true, std::memory_order_release);
  control.join();

  // Quiescent: apply every outcome still on its way, then check the sums;
  // then let every flow age out and check them again.
  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> retired_sum;
  auto settle = [&](uint64_t ns) {
    for (int i = 0; i < 64; ++i) {
      table.service(now.fetch_add(ns / 64, std::memory_order_relaxed) + ns / 64);
      while (duet.apply_hw_events() > 0) {
      }
    }
    duet.take_retired(retired);
    for (const RecordCount& r : retired) retired_sum[r.key] += r.packets;
    retired.clear();
  };
  auto expect_every_flow_exact = [&](const char* when) {
    size_t wrong = 0;
    for (uint32_t f = 0; f < kFlows; ++f) {
      const double total = duet.estimate(flow(f)) + double(retired_sum[flow(f)]);
      if (total != double(truth[f]) && ++wrong <= 5)
        ADD_FAILURE() << when << ": flow " << f << " sent " << truth[f] << ", retired " << retired_sum[flow(f)]
                      << " + estimate " << duet.estimate(flow(f));
    }
    EXPECT_EQ(wrong, 0u) << when << ": flows whose retired counts and estimate do not add up to what they sent";
  };
  settle(10'000);
  expect_every_flow_exact("after the run");
  settle(10 * tc.idle_timeout_ns);
  expect_every_flow_exact("after every flow aged out");

  const DuetStats st = duet.stats();
  EXPECT_EQ(st.records_used, 0u) << "every record freed once its flow aged out";
  EXPECT_GE(st.records_retired, 50 * st.records) << "each record reused many times";
  EXPECT_EQ(st.records_retired, st.refused + st.aged);
  EXPECT_GT(st.refused, 0u);
  EXPECT_GT(st.aged, 0u);
  EXPECT_GT(st.moved_to_record, 0u) << "flows reached TOP again while pending or installed";
  EXPECT_GT(st.records_full, 0u) << "more flows wanted records than there are";
}

// 100,000 distinct heavy flows through 2,600 records: flows arrive in waves
// of 1,000, each sends 30 packets (TOP is 20), and goes idle when its wave
// ends; its hardware entry ages out (a 2 ms idle timeout on a model clock,
// 1 us a packet) while the next wave runs, which retires its record. Every
// flow is promoted, no promotion finds the records used up, and every flow's
// count (retired + estimate) is within the Count-Min error of the sketch,
// e * N / w for the N packets the sketch saw, of the packets it sent.
TEST(DuetReclaimRun, HundredThousandHeavyFlowsThroughTwentySixHundredRecords) {
  constexpr uint32_t kFlows = 100000, kWave = 1000, kPerFlow = 30;
  constexpr uint64_t kTop = 20, kStepNs = 1000;
  uint64_t now = 1'000'000'000;
  EmulatedFlowTable::Config tc;
  tc.capacity = 8192;
  tc.idle_timeout_ns = 2'000'000;
  tc.clock = [&] { return now; };
  EmulatedFlowTable table(tc);
  DuetConfig dc = duet_cfg(500 * 1024, kTop, 2600, 16);
  dc.single_writer = true;
  Duet duet(dc, table);

  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> retired;
  std::vector<RecordCount> out;
  auto control = [&] {
    duet.apply_hw_events();
    duet.take_retired(out);
    for (const RecordCount& r : out) retired[r.key] += r.packets;
    out.clear();
  };
  std::mt19937 rng(5);
  std::vector<uint32_t> wave;
  uint64_t sketch_packets = 0;
  size_t most_used = 0;
  for (uint32_t first = 0; first < kFlows; first += kWave) {
    wave.clear();
    for (uint32_t f = first; f < first + kWave; ++f) wave.insert(wave.end(), kPerFlow, f);
    std::shuffle(wave.begin(), wave.end(), rng);
    for (size_t n = 0; n < wave.size(); ++n) {
      now += kStepNs;
      const FlowKey k = flow(wave[n]);
      if (!table.match(k, 64, now)) {
        duet.on_sketch_path(k);
        ++sketch_packets;
      }
      if (n % 16 == 0) {
        table.service(now);
        control();
        most_used = std::max<size_t>(most_used, duet.stats().records_used);
      }
    }
  }
  for (int i = 0; i < 16; ++i) {  // the last wave ages out too
    now += tc.idle_timeout_ns;
    table.service(now);
    while (duet.apply_hw_events() > 0) {
    }
    control();
  }

  const DuetStats st = duet.stats();
  EXPECT_EQ(st.records_full, 0u) << "aging kept up: a record was always free";
  EXPECT_GE(st.promotions, uint64_t{kFlows}) << "every flow promoted";
  EXPECT_EQ(st.records_retired, st.promotions);
  EXPECT_EQ(st.records_used, 0u);
  EXPECT_LE(most_used, dc.records);
  EXPECT_GT(most_used, 500u) << "a wave's flows held records at once";

  const double bound = std::exp(1.0) * double(sketch_packets) / double(duet.width());
  size_t outside = 0;
  double worst = 0;
  for (uint32_t f = 0; f < kFlows; ++f) {
    auto it = retired.find(flow(f));
    const double total = duet.estimate(flow(f)) + double(it == retired.end() ? 0 : it->second);
    const double err = std::abs(total - double(kPerFlow));
    worst = std::max(worst, err);
    if (err > bound && ++outside <= 5)
      ADD_FAILURE() << "flow " << f << ": " << total << " for " << kPerFlow << " packets (bound " << bound << ")";
  }
  EXPECT_EQ(outside, 0u) << "flows outside the sketch's error; the worst is " << worst << ", bound " << bound;
}

// The offline run through the real datapath (wire, workers, control path):
// waves of heavy flows that go idle and age out of a 0.5 ms idle timeout, so
// their records retire and are reused many times. A run's estimate of a
// flow adds what its retired records counted to Duet's estimate: no heavy
// flow ends below its true count (without the retired sums, a retired
// flow's estimate is what it left in the sketch, below TOP).
TEST(DuetReclaimRun, AnOfflineRunAddsWhatRetiredRecordsCountedToItsEstimates) {
  Trace trace;
  std::mt19937 rng(3);
  constexpr uint32_t kWaves = 40, kPerWave = 40, kPerFlow = 200;
  for (uint32_t w = 0; w < kWaves; ++w) {
    std::vector<uint32_t> wave;
    for (uint32_t f = w * kPerWave; f < (w + 1) * kPerWave; ++f) wave.insert(wave.end(), kPerFlow, f);
    std::shuffle(wave.begin(), wave.end(), rng);
    for (uint32_t f : wave) trace.packets.push_back({flow(f), 64, 0});
  }
  GroundTruth truth = ground_truth(trace.packets);
  RunConfig cfg;
  cfg.algorithm.algo = "duet";
  cfg.algorithm.memory_bytes = 256 * 1024;
  cfg.algorithm.heavy_threshold = 50;
  cfg.algorithm.duet_records = 64;
  cfg.algorithm.hw_idle_timeout_ns = 500'000;
  RunResult r = run(trace, truth, cfg);
  ASSERT_EQ(r.drops, 0u);
  ASSERT_TRUE(r.duet.has_value());
  EXPECT_GT(r.duet->records_retired, 2 * cfg.algorithm.duet_records) << "records reused";
  size_t below = 0;
  for (const auto& [k, c] : truth)
    if (r.estimates.at(k) < double(c) && ++below <= 5)
      ADD_FAILURE() << k.str() << ": " << r.estimates.at(k) << " for " << c << " packets";
  EXPECT_EQ(below, 0u) << "flows whose estimate lost packets";
}

}  // namespace
}  // namespace dpukit::measure
