#include "dpukit/core/flow_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

namespace dpukit {
namespace {

constexpr uint64_t kMs = 1'000'000;

FlowKey key(uint32_t i) { return FlowKey::from_tuple(0x0a000000u + i, 0x0b000000u + i * 7, 1000 + i % 60000, 443, 6); }

EmulatedFlowTable::Config cfg(size_t capacity, double rate = 0, uint64_t latency = 0, uint64_t idle = 0) {
  EmulatedFlowTable::Config c;
  c.capacity = capacity;
  c.insert_rate = rate;  // 0: as fast as requested
  c.insert_latency_ns = latency;
  c.idle_timeout_ns = idle;
  return c;
}

// Applies everything queued by advancing the NIC clock far enough.
void drain(EmulatedFlowTable& t) { t.service(now_ns() + 3600'000 * kMs); }

std::vector<FlowEvent> events(EmulatedFlowTable& t) {
  std::vector<FlowEvent> out;
  t.poll_events(out, SIZE_MAX);
  return out;
}

TEST(FlowKey, RoundTripsTheTupleAndPrintsIt) {
  FlowKey k = FlowKey::from_tuple(0x0a000001, 0xc0a80102, 53, 40000, 17);
  EXPECT_EQ(k.src_ip(), 0x0a000001u);
  EXPECT_EQ(k.dst_ip(), 0xc0a80102u);
  EXPECT_EQ(k.src_port(), 53);
  EXPECT_EQ(k.dst_port(), 40000);
  EXPECT_EQ(k.proto(), 17);
  EXPECT_EQ(k.bytes[0], 10) << "network byte order";
  EXPECT_EQ(k.str(), "10.0.0.1:53->192.168.1.2:40000/17");
  EXPECT_NE(flow_hash(k, 1), flow_hash(k, 2));
}

TEST(FlowTable, MissesUntilTheInsertionIsApplied) {
  uint64_t now = now_ns();
  auto c = cfg(16, 0, 5 * kMs);
  c.clock = [&now] { return now; };  // the request is stamped `now`, however late this thread runs
  EmulatedFlowTable t(c);
  EXPECT_FALSE(t.match(key(1), 100, now));
  t.request_insert(key(1), {10, 1000}, 77);
  EXPECT_FALSE(t.match(key(1), 100, now)) << "insertions are asynchronous";
  t.service(now + 6 * kMs);
  EXPECT_TRUE(t.match(key(1), 100, now + 7 * kMs));
  auto ev = events(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, FlowEvent::Kind::kInserted);
  EXPECT_EQ(ev[0].cookie, 77u);
  EXPECT_EQ(ev[0].key, key(1));
}

TEST(FlowTable, CountersAreExact) {
  EmulatedFlowTable t(cfg(1024));
  std::mt19937 rng(7);
  std::unordered_map<uint32_t, FlowCounters> truth;
  for (uint32_t i = 0; i < 500; ++i) {
    t.request_insert(key(i), {i, i * 10u});
    truth[i] = {i, i * 10u};
  }
  drain(t);
  uint64_t now = now_ns();
  for (int n = 0; n < 200000; ++n) {
    uint32_t i = rng() % 700;  // some flows are not installed
    uint32_t len = 40 + rng() % 1400;
    bool hit = t.match(key(i), len, now);
    EXPECT_EQ(hit, i < 500);
    if (hit) {
      truth[i].packets += 1;
      truth[i].bytes += len;
    }
  }
  for (auto& [i, c] : truth) {
    auto q = t.query(key(i));
    ASSERT_TRUE(q.has_value());
    EXPECT_EQ(q->packets, c.packets) << key(i).str();
    EXPECT_EQ(q->bytes, c.bytes) << key(i).str();
  }
  EXPECT_FALSE(t.query(key(600)).has_value());
  auto st = t.stats();
  EXPECT_EQ(st.lookups, 200000u);
  EXPECT_EQ(st.entries, 500u);
}

TEST(FlowTable, CapacityIsEnforcedAndRefusalsCounted) {
  EmulatedFlowTable t(cfg(100));
  for (uint32_t i = 0; i < 130; ++i) t.request_insert(key(i), {});
  t.request_insert(key(5), {});  // a duplicate
  drain(t);
  auto st = t.stats();
  EXPECT_EQ(st.entries, 100u);
  EXPECT_EQ(st.inserted, 100u);
  EXPECT_EQ(st.refused_table_full, 30u);
  EXPECT_EQ(st.refused_exists + st.refused_table_full, 31u);
  size_t refused = 0, full = 0;
  for (auto& e : events(t)) {
    refused += e.kind == FlowEvent::Kind::kRefused;
    full += e.reason == FlowEvent::Reason::kTableFull;
  }
  EXPECT_EQ(refused, 31u);
  EXPECT_EQ(full, 30u);
  uint64_t now = now_ns();
  EXPECT_TRUE(t.match(key(99), 1, now));
  EXPECT_FALSE(t.match(key(100), 1, now)) << "a refused flow must not be matched";
}

TEST(FlowTable, TheInsertionQueueIsBounded) {
  auto c = cfg(1000, 1000);
  c.insert_queue = 10;
  EmulatedFlowTable t(c);
  for (uint32_t i = 0; i < 15; ++i) t.request_insert(key(i), {});
  auto st = t.stats();
  EXPECT_EQ(st.refused_queue_full, 5u);
  EXPECT_EQ(st.pending, 10u);
  EXPECT_TRUE(t.wait_events(std::chrono::microseconds(0)));
  EXPECT_EQ(events(t).size(), 5u) << "queue-full refusals are reported at once";
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(t.wait_events(std::chrono::milliseconds(20)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(19));
}

TEST(FlowTable, InsertionsAreAppliedAtTheConfiguredRateOnTheModelClock) {
  EmulatedFlowTable t(cfg(100000, 1000, 0));  // 1000 rules/s: one per ms
  for (uint32_t i = 0; i < 100; ++i) t.request_insert(key(i), {});
  uint64_t start = now_ns();
  t.service(start + 50 * kMs);
  size_t applied = t.stats().inserted;
  EXPECT_GE(applied, 49u);
  EXPECT_LE(applied, 52u);
}

TEST(FlowTable, MeasuredInsertionRateIsWithinTenPercentOfConfigured) {
  for (double rate : {20000.0, 77000.0}) {
    EmulatedFlowTable t(cfg(65536, rate, 20000));
    CpuAccount acct;
    FlowTableNicThread nic(t, &acct);
    const uint32_t n = static_cast<uint32_t>(rate / 4);  // a quarter of a second of work
    for (uint32_t i = 0; i < n; ++i) t.request_insert(key(i), {});
    std::vector<FlowEvent> ev;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ev.size() < n && std::chrono::steady_clock::now() < deadline) {
      if (!t.poll_events(ev, SIZE_MAX)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    nic.stop();
    ASSERT_EQ(ev.size(), n);
    uint64_t first = UINT64_MAX, last = 0;
    for (auto& e : ev) {
      ASSERT_EQ(e.kind, FlowEvent::Kind::kInserted);
      first = std::min(first, e.done_ns);
      last = std::max(last, e.done_ns);
    }
    double measured = (n - 1) * 1e9 / double(last - first);
    EXPECT_NEAR(measured / rate, 1.0, 0.10) << "configured " << rate << " rules/s, measured " << measured;
    EXPECT_GT(acct.get(Place::kHw), 0u) << "the NIC thread's CPU time is hw time";
  }
}

TEST(FlowTable, AgingRemovesIdleEntriesAndReportsTheirCounts) {
  EmulatedFlowTable t(cfg(64, 0, 0, 100 * kMs));
  for (uint32_t i = 0; i < 10; ++i) t.request_insert(key(i), {5, 500});
  uint64_t t0 = now_ns();
  t.service(t0);
  ASSERT_EQ(t.stats().entries, 10u);
  events(t);
  // Flows 0-4 keep receiving packets; 5-9 go idle.
  for (uint64_t ms = 10; ms <= 300; ms += 10) {
    for (uint32_t i = 0; i < 5; ++i) t.match(key(i), 100, t0 + ms * kMs);
    t.service(t0 + ms * kMs);
  }
  auto st = t.stats();
  EXPECT_EQ(st.aged, 5u);
  EXPECT_EQ(st.entries, 5u);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_TRUE(t.query(key(i)).has_value());
  for (uint32_t i = 5; i < 10; ++i) EXPECT_FALSE(t.query(key(i)).has_value());
  std::set<uint32_t> aged;
  for (auto& e : events(t)) {
    ASSERT_EQ(e.kind, FlowEvent::Kind::kAged);
    EXPECT_EQ(e.counters.packets, 5u) << "the final counts travel with the aging event";
    EXPECT_GE(e.done_ns, t0 + 100 * kMs);
    EXPECT_LE(e.done_ns, t0 + 140 * kMs) << "aged within 1.25 idle timeouts plus one service step";
    aged.insert(e.key.src_ip() - 0x0a000000u);
  }
  EXPECT_EQ(aged, (std::set<uint32_t>{5, 6, 7, 8, 9}));
}

TEST(FlowTable, RemovalKeepsTheOtherEntriesReachable) {
  // Many entries in a small table collide; removing some must not hide the rest.
  EmulatedFlowTable t(cfg(512));
  for (uint32_t i = 0; i < 512; ++i) t.request_insert(key(i), {i, 0});
  drain(t);
  for (uint32_t i = 0; i < 512; i += 3) t.request_remove(key(i));
  t.request_remove(key(9999));
  drain(t);
  for (uint32_t i = 0; i < 512; ++i) {
    auto q = t.query(key(i));
    if (i % 3 == 0) {
      EXPECT_FALSE(q.has_value()) << i;
    } else {
      ASSERT_TRUE(q.has_value()) << i;
      EXPECT_EQ(q->packets, i);
    }
  }
  auto st = t.stats();
  EXPECT_EQ(st.removed, 171u);
  EXPECT_EQ(st.entries, 512u - 171u);
  size_t not_found = 0;
  for (auto& e : events(t)) not_found += e.reason == FlowEvent::Reason::kNotFound;
  EXPECT_EQ(not_found, 1u);
  // Freed room is usable again.
  for (uint32_t i = 1000; i < 1171; ++i) t.request_insert(key(i), {});
  drain(t);
  EXPECT_EQ(t.stats().entries, 512u);
}

// One packet through the burst path, `bytes` given per packet.
bool match_one(EmulatedFlowTable& t, uint32_t id, uint32_t bytes, uint64_t now) {
  uint32_t missed[1];
  return t.match_burst_by_id(&id, 1, &bytes, 0, now, missed) == 0;
}

TEST(FlowTable, MatchByIdAgreesWithMatchByKeyThroughChurn) {
  // 2,000 flows numbered 0..1999 (id 1999 has no id: kNoFlowId), a table of
  // 256 full of collisions, and random inserts, removals and aging: after
  // every step, matching by id must hit exactly where matching by key does.
  constexpr uint32_t kFlows = 2000;
  uint64_t now = now_ns();
  EmulatedFlowTable t(cfg(256, 0, 0, 50 * kMs));
  t.index_flow_ids(kFlows - 1, [](const FlowKey& k) {
    uint32_t i = k.src_ip() - 0x0a000000u;
    return i < kFlows - 1 ? i : EmulatedFlowTable::kNoFlowId;
  });
  std::mt19937 rng(7);
  uint64_t by_key = 0, by_id = 0;
  for (int step = 0; step < 40; ++step) {
    for (int r = 0; r < 60; ++r) {
      uint32_t i = rng() % kFlows;
      if (rng() % 3) t.request_insert(key(i), {0, 0});
      else t.request_remove(key(i));
    }
    now += 20 * kMs;  // some entries age between steps
    t.service(now);
    for (uint32_t i = 0; i < kFlows; ++i) {
      if (rng() % 4) continue;  // hit a random quarter, so that some entries stay idle
      bool hit_key = t.query(key(i)).has_value();
      bool hit_id = match_one(t, i < kFlows - 1 ? i : EmulatedFlowTable::kNoFlowId, 64, now);
      if (i == kFlows - 1) {
        EXPECT_FALSE(hit_id) << "a flow without an id is never matched by id";
        continue;
      }
      ASSERT_EQ(hit_id, hit_key) << "flow " << i << " at step " << step;
      by_key += hit_key;
      by_id += hit_id;
    }
    // A whole burst, one size for all, answers the same.
    uint32_t ids[EmulatedFlowTable::kMaxBurst], missed[EmulatedFlowTable::kMaxBurst];
    for (auto& id : ids) id = rng() % kFlows;
    const uint64_t hits_before = t.stats().hits;
    size_t misses = t.match_burst_by_id(ids, EmulatedFlowTable::kMaxBurst, nullptr, 64, now, missed);
    ASSERT_EQ(t.stats().hits - hits_before, EmulatedFlowTable::kMaxBurst - misses) << "misses are not hits";
    ASSERT_TRUE(std::is_sorted(missed, missed + misses));
    for (size_t j = 0, m = 0; j < EmulatedFlowTable::kMaxBurst; ++j) {
      bool hit = !(m < misses && missed[m] == j);
      m += !hit;
      ASSERT_EQ(hit, ids[j] < kFlows - 1 && t.query(key(ids[j])).has_value()) << "burst, flow " << ids[j];
    }
  }
  EXPECT_GT(by_id, 1000u) << "the churn left too few entries to test";
  EXPECT_GT(t.stats().aged, 0u);
  EXPECT_GT(t.stats().removed, 0u);
  // Counts by id land in the entry a key query reads.
  size_t checked = 0;
  for (uint32_t i = 0; i < kFlows - 1; ++i) {
    auto q = t.query(key(i));
    if (!q) continue;
    ASSERT_TRUE(match_one(t, i, 100, now));
    EXPECT_EQ(t.query(key(i))->packets, q->packets + 1);
    EXPECT_EQ(t.query(key(i))->bytes, q->bytes + 100);
    ++checked;
  }
  EXPECT_GT(checked, 100u);
}

TEST(FlowTable, QueriesFromAnotherThreadSeeConsistentCountersWhileTheNicWrites) {
  EmulatedFlowTable t(cfg(4096));
  for (uint32_t i = 0; i < 2000; ++i) t.request_insert(key(i), {});
  drain(t);
  std::atomic<bool> stop{false};
  std::thread nic([&] {
    uint64_t now = now_ns();
    for (int round = 0; !stop.load(); ++round) {
      for (uint32_t i = 0; i < 2000; ++i) t.match(key(i), 1, now);
      // Churn: remove and re-insert a few entries so that slots move.
      t.request_remove(key(round % 2000));
      t.request_insert(key(round % 2000), {});
      t.service(now_ns() + 3600'000 * kMs);
    }
  });
  uint64_t found = 0;
  for (int n = 0; n < 200000; ++n) {
    auto q = t.query(key(1000 + n % 1000));
    if (q) {
      // One byte a packet; the reader takes packets first, so bytes can lag by at most one.
      EXPECT_GE(q->bytes + 1, q->packets);
      ++found;
    }
  }
  stop = true;
  nic.join();
  EXPECT_GT(found, 190000u);
}


// ---- wire contexts: one per RSS queue, matching concurrently with the control path

TEST(FlowTableWires, ARemovedEntrysFinalCountsWaitForEveryWireToMoveOn) {
  uint64_t now = now_ns();
  auto c = cfg(64);
  c.clock = [&now] { return now; };
  EmulatedFlowTable t(c);
  t.index_flow_ids(16, [](const FlowKey& k) { return k.src_ip() - 0x0a000000u; });
  auto a = t.attach_wire(), b = t.attach_wire();
  EXPECT_NE(a->id(), b->id());
  EXPECT_NE(a->id(), 0u) << "0 is the default context";
  t.request_insert(key(3), {10, 100}, 5);
  t.service(now);
  events(t);
  uint32_t id = 3, missed[1];
  EXPECT_EQ(a->match_burst_by_id(&id, 1, nullptr, 64, now, missed), 0u);
  EXPECT_TRUE(b->match(key(3), 64, now));
  t.request_remove(key(3), 6);
  t.service(now);
  EXPECT_FALSE(t.query(key(3)).has_value()) << "out of the index at once";
  EXPECT_EQ(a->match_burst_by_id(&id, 1, nullptr, 64, now, missed), 1u) << "no longer matched";
  EXPECT_EQ(t.stats().reclaiming, 1u) << "b has not ended a call since the entry left";
  EXPECT_TRUE(events(t).empty()) << "the final counts are not known yet";
  b->idle();
  t.service(now);
  auto ev = events(t);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, FlowEvent::Kind::kRemoved);
  EXPECT_EQ(ev[0].cookie, 6u);
  EXPECT_EQ(ev[0].counters.packets, 12u);
  EXPECT_EQ(ev[0].counters.bytes, 228u);
  EXPECT_EQ(t.stats().reclaiming, 0u);
  auto st = t.stats();
  EXPECT_EQ(st.lookups, 3u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.cross_queue_hits, 1u) << "b hit the entry a had hit first";
}

TEST(FlowTableWires, AttachingIsBoundedAndComesBeforeTheIdIndex) {
  EmulatedFlowTable t(cfg(16));
  std::vector<std::unique_ptr<EmulatedFlowTable::Wire>> wires;
  for (unsigned i = 0; i < EmulatedFlowTable::kMaxWires; ++i) wires.push_back(t.attach_wire());
  EXPECT_THROW(t.attach_wire(), std::length_error);
  EXPECT_THROW(t.index_flow_ids(4, [](const FlowKey&) { return 0u; }), std::logic_error);
  wires.pop_back();
  EXPECT_NO_THROW(wires.push_back(t.attach_wire())) << "a detached context is reused";
  wires.clear();
  EXPECT_NO_THROW(t.index_flow_ids(4, [](const FlowKey&) { return 0u; }));
}

TEST(FlowTableWires, TwoWiresHittingOneEntryLoseNoCount) {
  // RSS pins a flow to one queue; if a flow did reach two, both queues' hits
  // must still be counted: the entry's owner adds with plain stores, the
  // other wire with atomic adds on counters of its own.
  EmulatedFlowTable t(cfg(16));
  t.index_flow_ids(1, [](const FlowKey&) { return 0u; });
  t.request_insert(key(0), {});
  drain(t);
  constexpr int kBursts = 100000;
  constexpr size_t kN = 32;
  // Both attached before either starts: a detached context's id is reused.
  auto wx = t.attach_wire(), wy = t.attach_wire();
  std::atomic<int> ready{0};
  auto hammer = [&](EmulatedFlowTable::Wire* w) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }  // start together, so that the two really overlap
    uint32_t ids[kN] = {}, missed[kN];
    uint64_t now = now_ns();
    for (int r = 0; r < kBursts; ++r) {
      if (w->match_burst_by_id(ids, kN, nullptr, 3, now, missed) != 0) ADD_FAILURE() << "a miss";
      if (!w->match(key(0), 5, now)) ADD_FAILURE() << "a miss by key";
    }
  };
  std::thread x(hammer, wx.get()), y(hammer, wy.get());
  x.join();
  y.join();
  const uint64_t per_wire = kBursts * (kN + 1);
  auto q = t.query(key(0));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->packets, 2 * per_wire);
  EXPECT_EQ(q->bytes, 2 * kBursts * (kN * 3 + 5));
  auto st = t.stats();
  EXPECT_EQ(st.hits, 2 * per_wire);
  EXPECT_EQ(st.cross_queue_hits, per_wire) << "every hit of the wire that did not hit first";
}

TEST(FlowTableWires, ConcurrentWiresWithInsertsRemovalsAndAgingCountEveryHitExactly) {
  // Four wire contexts (one per RSS queue: flow f belongs to queue f % 4)
  // match bursts by id and single packets by key as fast as they can, while
  // the control path inserts, removes and ages entries under them. Every hit
  // a wire saw must come back exactly once: in the final counts of an
  // aged or removed entry, or in a query of one still installed.
  constexpr uint32_t kFlows = 4096, kWires = 4;
  EmulatedFlowTable t(cfg(1024, 0, 0, 2 * kMs));  // a small table: constant churn and full-table refusals
  t.index_flow_ids(kFlows, [](const FlowKey& k) { return k.src_ip() - 0x0a000000u; });
  struct Seen {
    std::vector<uint64_t> packets = std::vector<uint64_t>(kFlows), bytes = std::vector<uint64_t>(kFlows);
    uint64_t lookups = 0;
  };
  std::vector<Seen> seen(kWires);
  std::atomic<bool> stop{false};
  std::vector<std::thread> wires;
  for (uint32_t q = 0; q < kWires; ++q) {
    wires.emplace_back([&, q] {
      auto w = t.attach_wire();
      std::mt19937 rng(q);
      Seen& s = seen[q];
      uint32_t ids[EmulatedFlowTable::kMaxBurst], sizes[EmulatedFlowTable::kMaxBurst], missed[EmulatedFlowTable::kMaxBurst];
      for (int round = 0; !stop.load(std::memory_order_relaxed); ++round) {
        const size_t n = 1 + rng() % EmulatedFlowTable::kMaxBurst;
        for (size_t i = 0; i < n; ++i) {
          ids[i] = (rng() % (kFlows / kWires)) * kWires + q;
          sizes[i] = 40 + rng() % 1460;
        }
        const uint64_t now = now_ns();
        size_t m = w->match_burst_by_id(ids, n, sizes, 0, now, missed);
        for (size_t i = 0, k = 0; i < n; ++i) {
          if (k < m && missed[k] == i) {
            ++k;
            continue;
          }
          s.packets[ids[i]] += 1;
          s.bytes[ids[i]] += sizes[i];
        }
        s.lookups += n;
        const uint32_t f = (rng() % (kFlows / kWires)) * kWires + q;
        if (w->match(key(f), 100, now)) {
          s.packets[f] += 1;
          s.bytes[f] += 100;
        }
        s.lookups += 1;
        if (round % 64 == 0) w->idle();  // as a wire between bursts may
      }
    });
  }
  // The control path: requests keep coming; each insertion seeds the entry with {1, 7}.
  std::mt19937 rng(99);
  std::vector<FlowEvent> ev;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
  while (std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < 50; ++r) {
      const uint32_t f = rng() % kFlows;
      if (rng() % 4) t.request_insert(key(f), {1, 7});
      else t.request_remove(key(f));
    }
    t.service(now_ns());
    t.poll_events(ev, SIZE_MAX);
  }
  stop = true;
  for (auto& w : wires) w.join();  // each detaches
  t.service(now_ns());
  t.poll_events(ev, SIZE_MAX);
  EXPECT_EQ(t.stats().reclaiming, 0u) << "every wire has detached";

  std::vector<uint64_t> packets(kFlows), bytes(kFlows);
  uint64_t inserted = 0, aged = 0, removed = 0;
  for (const FlowEvent& e : ev) {
    const uint32_t f = e.key.src_ip() - 0x0a000000u;
    if (e.kind == FlowEvent::Kind::kInserted) {
      ++inserted;
      packets[f] -= 1;  // the seed is not a hit
      bytes[f] -= 7;
    } else if (e.kind == FlowEvent::Kind::kAged || (e.kind == FlowEvent::Kind::kRemoved && e.reason == FlowEvent::Reason::kNone)) {
      aged += e.kind == FlowEvent::Kind::kAged;
      removed += e.kind == FlowEvent::Kind::kRemoved;
      packets[f] += e.counters.packets;
      bytes[f] += e.counters.bytes;
    }
  }
  for (uint32_t f = 0; f < kFlows; ++f)
    if (auto q = t.query(key(f))) {
      packets[f] += q->packets;
      bytes[f] += q->bytes;
    }
  uint64_t hits = 0, lookups = 0;
  for (uint32_t f = 0; f < kFlows; ++f) {
    const Seen& s = seen[f % kWires];
    ASSERT_EQ(packets[f], s.packets[f]) << "flow " << f;
    ASSERT_EQ(bytes[f], s.bytes[f]) << "flow " << f;
    hits += s.packets[f];
  }
  for (const Seen& s : seen) lookups += s.lookups;
  auto st = t.stats();
  EXPECT_EQ(st.hits, hits);
  EXPECT_EQ(st.lookups, lookups);
  EXPECT_EQ(st.cross_queue_hits, 0u) << "each flow reached one wire only";
  EXPECT_EQ(st.inserted, inserted);
  EXPECT_EQ(st.aged, aged);
  EXPECT_EQ(st.removed, removed);
  EXPECT_GT(aged, 100u) << "too little aging to test";
  EXPECT_GT(removed, 100u) << "too few removals to test";
  EXPECT_GT(hits, 100000u) << "too few hits to test";
}

}  // namespace
}  // namespace dpukit
