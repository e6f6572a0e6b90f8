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

}  // namespace
}  // namespace dpukit
