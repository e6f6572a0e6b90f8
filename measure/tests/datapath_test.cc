// The datapath's public face: the wire plan, the "none" algorithm, packet
// sizes, Duet's counter width and the zero-loss search.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <map>
#include <set>

#include "dpukit/measure.h"
#include "trace_fixtures.h"
#include "rss.h"

namespace dpukit::measure {
namespace {

using testing::flow;
using testing::skewed_trace;

TEST(WirePlan, NumbersFlowsDenselyInOrderOfFirstPacketAndKeepsRssQueues) {
  Trace t = skewed_trace(20000, 3000);
  WirePlan w = plan_wire(t.packets, 4);
  ASSERT_EQ(w.flow_id.size(), t.packets.size());
  ASSERT_EQ(w.queue.size(), t.packets.size());
  EXPECT_EQ(w.flows.size(), ground_truth(t.packets).size());
  RssQueues rss(4);
  std::set<unsigned> queues;
  uint32_t next_new = 0;
  for (size_t i = 0; i < t.packets.size(); ++i) {
    ASSERT_LT(w.flow_id[i], w.flows.size());
    EXPECT_EQ(w.flows[w.flow_id[i]], t.packets[i].key) << i;
    if (w.flow_id[i] == next_new) ++next_new;  // a new flow gets the next id
    ASSERT_LT(w.flow_id[i], next_new) << "ids are handed out in order of first packet";
    EXPECT_EQ(w.queue[i], rss.queue(t.packets[i].key)) << i;
    queues.insert(w.queue[i]);
  }
  EXPECT_EQ(queues.size(), 4u);
}

TEST(WirePlan, EachQueueHoldsItsOwnPacketsContiguouslyInTraceOrder) {
  Trace t = skewed_trace(20000, 3000);
  for (size_t i = 0; i < t.packets.size(); ++i) t.packets[i].wire_len = 64 + i % 1400;  // each its own
  WirePlan w = plan_wire(t.packets, 4);
  ASSERT_EQ(w.queues.size(), 4u);
  size_t total = 0;
  for (unsigned q = 0; q < 4; ++q) {
    const WirePlan::Queue& wq = w.queues[q];
    ASSERT_EQ(wq.keys.size(), wq.index.size());
    ASSERT_EQ(wq.flow_ids.size(), wq.index.size());
    ASSERT_EQ(wq.wire_lens.size(), wq.index.size());
    total += wq.index.size();
    for (size_t j = 0; j < wq.index.size(); ++j) {
      const size_t i = wq.index[j];
      if (j) {
        ASSERT_LT(wq.index[j - 1], i) << "in trace order";
      }
      EXPECT_EQ(w.queue[i], q);
      EXPECT_EQ(wq.keys[j], t.packets[i].key);
      EXPECT_EQ(wq.flow_ids[j], w.flow_id[i]);
      EXPECT_EQ(wq.wire_lens[j], t.packets[i].wire_len);
    }
    // A run of the trace's first n packets takes each queue's share of them.
    const size_t n = 7777;
    EXPECT_EQ(wq.packets_before(n), static_cast<size_t>(std::count(w.queue.begin(), w.queue.begin() + n, q)));
  }
  EXPECT_EQ(total, t.packets.size());
}

TEST(WirePlan, ARunRefusesAPlanForAnotherWorkerCountOrAShorterTrace) {
  Trace t = skewed_trace(5000, 500);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "cms";
  c.workers = 2;
  WirePlan one = plan_wire(t.packets, 1);
  EXPECT_THROW(run(t, truth, c, &one), std::invalid_argument);
  WirePlan shorter = plan_wire(std::span<const Packet>(t.packets).first(100), 2);
  EXPECT_THROW(run(t, truth, c, &shorter), std::invalid_argument);
  WirePlan two = plan_wire(t.packets, 2);
  RunResult r = run(t, truth, c, &two);
  EXPECT_EQ(r.packets, t.packets.size());
  EXPECT_EQ(r.metrics.are, run(t, truth, c).metrics.are) << "the same sketches see the same packets either way";
}

TEST(Datapath, NoneCarriesEveryPacketToTheWorkersAndEvaluatesNothing) {
  Trace t = skewed_trace(50000, 2000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "none";
  c.workers = 2;
  RunResult r = run(t, truth, c);
  EXPECT_FALSE(r.evaluated);
  EXPECT_EQ(r.packets, t.packets.size());
  EXPECT_EQ(r.drops, 0u);
  EXPECT_TRUE(r.estimates.empty());
  EXPECT_FALSE(r.hw.has_value());
  EXPECT_GT(r.cpu.get(Place::kDpu), 0u);
  EXPECT_EQ(r.bytes, 100u * t.packets.size());
}

TEST(Datapath, PacketSizeSetsTheBytesOnTheWireAndInTheHardwareTable) {
  Trace t = skewed_trace(60000, 1000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "duet";
  c.algorithm.heavy_threshold = 200;
  c.packet_size = 1024;
  c.algorithm.hw_idle_timeout_ns = 0;
  RunResult r = run(t, truth, c);
  EXPECT_EQ(r.bytes, 1024u * t.packets.size());
  ASSERT_TRUE(r.hw.has_value());
  EXPECT_GT(r.hw->hits, 0u) << "heavy flows were promoted and matched by id";
}

TEST(Datapath, DuetCountersAre16BitsUnlessTopIsBeyondTheirReach) {
  Trace t = skewed_trace(40000, 1000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "duet";
  c.algorithm.heavy_threshold = 100;
  RunResult r16 = run(t, truth, c);
  ASSERT_TRUE(r16.duet.has_value());
  EXPECT_EQ(r16.duet->counter_bits, 16u);
  c.algorithm.heavy_threshold = 20000;  // TOP beyond 16-bit counters' reach
  RunResult r32 = run(t, truth, c);
  EXPECT_EQ(r32.duet->counter_bits, 32u);
  c.algorithm.duet_counter_bits = 16;  // asked for explicitly: refused, not widened
  EXPECT_THROW(run(t, truth, c), BudgetError);
  c.algorithm.heavy_threshold = 100;
  c.algorithm.duet_counter_bits = 32;
  EXPECT_EQ(run(t, truth, c).duet->counter_bits, 32u);
}

TEST(ZeroLossSearch, BracketsTheRateWithEveryProbeJudgedByItsDropsAndOfferedRate) {
  Trace t = skewed_trace(1000000, 5000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "cms";
  c.ring_slots = 4096;  // small rings (still above a wake-up's 100 µs): an overloaded worker drops soon
  WirePlan w = plan_wire(t.packets, 1);
  ZeroLossSearch z = zero_loss_rate(t, truth, c, w, 0.05);
  ASSERT_GT(z.unpaced_pps, 0);
  ASSERT_GE(z.probes.size(), 2u);
  EXPECT_EQ(z.probes.front().rate_pps, 2 * z.unpaced_pps) << "the first probe is twice the unpaced rate";
  std::map<double, std::pair<int, bool>> tries;  // target rate -> attempts, and whether one passed
  bool found = z.rate_pps == 0;
  for (const auto& p : z.probes) {
    auto& [attempts, passed] = tries[p.rate_pps];
    ++attempts;
    bool ok = p.drops == 0 && p.achieved_pps >= p.rate_pps * 0.9;
    passed = passed || ok;
    if (ok) {
      EXPECT_LE(p.achieved_pps, z.rate_pps) << "the highest rate offered in a passing probe is the answer";
    }
    found = found || (ok && p.achieved_pps == z.rate_pps);
  }
  EXPECT_TRUE(found) << "the answer is a passing probe's offered rate";
  for (const auto& [rate, t] : tries) {
    EXPECT_LE(t.first, 2) << "a rate is tried at most twice";
    if (!t.second) {
      EXPECT_EQ(t.first, 2) << "a failed rate was tried twice";
    }
  }
  if (z.refused_pps > 0) {
    EXPECT_FALSE(tries.at(z.refused_pps).second);
  }
  if (z.rate_pps > 0) {
    EXPECT_EQ(z.at_rate.drops, 0u);
    EXPECT_EQ(z.at_rate.packets, t.packets.size());
  }
  if (z.refused_pps == 0) {  // the unpaced run was slowed by something else: twice its rate passed
    EXPECT_GT(z.rate_pps, 0.9 * z.probes.front().rate_pps);
    return;
  }
  EXPECT_LT(z.rate_pps, z.refused_pps);
  if (z.rate_pps > 0) {
    EXPECT_LE(z.refused_pps - z.rate_pps, 0.15 * z.refused_pps) << "the bracket (5 %) plus the wire's shortfall";
  }
}

TEST(ZeroLossSearch, RefusesBadBounds) {
  Trace t = skewed_trace(1000, 100);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "cms";
  WirePlan w = plan_wire(t.packets, 1);
  EXPECT_THROW(zero_loss_rate(t, truth, c, w, 0), std::invalid_argument);
  EXPECT_THROW(zero_loss_rate(t, truth, c, w, 0.02, 1000, 500), std::invalid_argument);
  EXPECT_THROW(zero_loss_rate(t, truth, c, w, 0.02, 0, 0, 0.5), std::invalid_argument);
  EXPECT_THROW(zero_loss_rate(t, truth, c, w, 0.02, 0, 0, -0.1), std::invalid_argument);
}

TEST(ZeroLossSearch, ALowFractionIsTheFloorOfTheSearch) {
  Trace t = skewed_trace(200000, 5000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "cms";
  c.ring_slots = 256;  // the smallest ring: a worker that is away for a moment drops
  WirePlan w = plan_wire(t.packets, 1);
  ZeroLossSearch z = zero_loss_rate(t, truth, c, w, 0.001, 0, 0, 0.25);
  ASSERT_GT(z.unpaced_pps, 0);
  for (const auto& p : z.probes) EXPECT_GE(p.rate_pps, 0.25 * z.unpaced_pps * (1 - 1e-9));
  // Twice the unpaced rate drops; the floor is probed next (halving would probe the unpaced rate).
  auto next = std::find_if(z.probes.begin(), z.probes.end(),
                           [&](const ZeroLossSearch::Probe& p) { return p.rate_pps != z.probes.front().rate_pps; });
  if (z.probes.front().drops > 0) {
    ASSERT_NE(next, z.probes.end());
    EXPECT_DOUBLE_EQ(next->rate_pps, 0.25 * z.unpaced_pps);
  }
  EXPECT_TRUE(z.rate_pps == 0 || z.rate_pps >= 0.25 * z.unpaced_pps * 0.9)
      << "a rate from the bracket, or none: the floor dropped";
}

// ------------------------------------------------------------ one wire per RSS queue

size_t queue_packets(const WirePlan& plan, unsigned q) {
  return static_cast<size_t>(std::count(plan.queue.begin(), plan.queue.end(), q));
}

// Count-Min with far more counters than flows is exact: a packet carried to
// another worker than its queue's would be missing from its flow's
// estimate, and one carried twice would be counted twice.
TEST(PerQueueWire, EveryPacketReachesExactlyItsQueuesWorkerOnce) {
  Trace t = skewed_trace(30000, 300);
  GroundTruth truth = ground_truth(t.packets);
  for (unsigned workers : {1u, 3u}) {
    RunConfig c;
    c.algorithm.algo = "cms";
    c.algorithm.memory_bytes = 4 << 20;
    c.workers = workers;
    c.passes = 2;
    WirePlan plan = plan_wire(t.packets, workers);
    RunResult r = run(t, truth, c, &plan);
    ASSERT_EQ(r.queues.size(), workers);
    for (unsigned q = 0; q < workers; ++q) {
      EXPECT_EQ(r.queues[q].packets, queue_packets(plan, q)) << q;
      EXPECT_EQ(r.queues[q].delivered, r.queues[q].packets) << q;
      EXPECT_EQ(r.queues[q].drops, 0u) << q;
    }
    for (const auto& [k, c] : truth) EXPECT_EQ(r.estimates.at(k), 2.0 * c) << k.str() << " with " << workers;
  }
}

// Under a rate no worker can take, every queue's wire still sends its
// packets on its clock: what finds the rx ring full is a counted drop, and
// every packet is counted once, in hardware, by the worker, or as a drop.
TEST(PerQueueWire, DropsAreCountedUnderAnImpossibleRate) {
  Trace t = skewed_trace(60000, 1000);
  GroundTruth truth = ground_truth(t.packets);
  for (const char* algo : {"cms", "duet"}) {
    RunConfig c;
    c.algorithm.algo = algo;
    c.algorithm.heavy_threshold = 100;
    c.workers = 2;
    c.passes = 2;  // Duet: the warm-up installs the heavy flows, the measured pass has hits
    c.algorithm.hw_insert_rate = 1e7;  // all of them, however short the warm-up
    c.rate_pps = 1e12;
    c.ring_slots = 256;
    RunResult r = run(t, truth, c);
    uint64_t drops = 0, hits = 0, delivered = 0;
    for (const auto& q : r.queues) {
      EXPECT_EQ(q.hw_hits + q.delivered + q.drops, q.packets) << algo;
      drops += q.drops;
      hits += q.hw_hits;
      delivered += q.delivered;
    }
    EXPECT_GT(drops, (t.packets.size() - hits) / 2) << algo << ": rings of 256 slots take little of 60,000 packets";
    EXPECT_EQ(drops, r.drops) << algo;
    EXPECT_EQ(hits, r.hw_hits) << algo;
    if (std::string(algo) == "duet") {
      EXPECT_GT(hits, 0u) << "the hardware table counts at any rate";
    } else {
      double counted = 0;  // the first pass's packets, and what the measured pass delivered
      for (const auto& [k, e] : r.estimates) counted += e;
      EXPECT_EQ(counted, double(t.packets.size() + delivered)) << "no collisions at this size";
    }
  }
}

// Each queue's wire offers its share of the rate: the shares sum to the
// rate, and no worker has its queue's last packet before that share allows.
TEST(PerQueueWire, PerQueueRatesSumToTheOfferedRate) {
  Trace t = skewed_trace(40000, 2000);
  GroundTruth truth = ground_truth(t.packets);
  RunConfig c;
  c.algorithm.algo = "none";
  c.workers = 3;
  c.rate_pps = 2e6;
  WirePlan plan = plan_wire(t.packets, c.workers);
  RunResult r = run(t, truth, c, &plan);
  ASSERT_EQ(r.queues.size(), 3u);
  double sum = 0;
  for (unsigned q = 0; q < 3; ++q) {
    const auto& s = r.queues[q];
    EXPECT_DOUBLE_EQ(s.rate_pps, c.rate_pps * double(queue_packets(plan, q)) / double(t.packets.size()));
    EXPECT_GE(s.seconds, double(s.packets - 1) / s.rate_pps) << "queue " << q << " ran ahead of its share";
    EXPECT_LE(s.wire_seconds, s.seconds) << q;
    // The longest time its loop did not run: some, within the pass.
    EXPECT_GT(s.longest_stall_seconds, 0) << q;
    EXPECT_LE(s.longest_stall_seconds, s.seconds) << q;
    sum += s.rate_pps;
  }
  EXPECT_NEAR(sum, c.rate_pps, 1e-6 * c.rate_pps);
  EXPECT_EQ(r.drops, 0u);
}

}  // namespace
}  // namespace dpukit::measure
