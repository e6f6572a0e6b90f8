// The measure datapath on the emulated DPU (the public header draws it).
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <thread>

#include "dpukit/core/log.h"
#include "dpukit/core/pacing.h"
#include "dpukit/core/ring.h"
#include "dpukit/measure.h"
#include "measurer.h"
#include "rss.h"

namespace dpukit::measure {

namespace {

constexpr size_t kBurst = 32;  // packets the wire hands the NIC at once (<= EmulatedFlowTable::kMaxBurst)
constexpr size_t kPop = 64;    // indices a worker takes at once
constexpr size_t kHeaderAhead = 6;  // how far ahead in its batch a worker asks for a packet's header


// One dpu worker's queue: an SPSC ring of packet indices (the analogue of
// mbuf pointers: the worker reads the packet from the shared trace) with a
// futex doorbell. A worker that finds its ring empty sleeps at once, and the
// NIC rings it only once a batch has gathered or a moment has passed
// (interrupt moderation), so a worker's CPU time is its work, not polling an
// empty ring. It does not poll first: a measurement worker forwards nothing,
// so a wake-up's latency costs nothing, and polling was measured to keep it
// from ever sleeping (on this KVM guest even 64 PAUSEs outlast the 3 µs
// between bursts at 10 M packets/s, so the worker burnt its whole core).
constexpr size_t kWakeBatch = 2048;         // packets that justify a wake-up
constexpr uint64_t kWakeDelayNs = 100'000;  // the most a packet waits for one
constexpr uint64_t kControlPollNs = 20'000;  // polled control path: how often worker 0 applies the table's outcomes

struct WorkerQueue {
  explicit WorkerQueue(size_t slots) : mem(slots), producer(mem.producer()), consumer(mem.consumer()) {}
  HeapRing<uint32_t> mem;
  SpscRing<uint32_t> producer, consumer;
  alignas(kCacheLine) std::atomic<uint32_t> sleeping{0};
  alignas(kCacheLine) std::atomic<uint32_t> bell{0};

  uint64_t sleeps = 0;            // worker side: times it slept for want of work
  uint64_t first_unwoken_ns = 0;  // NIC side: when the oldest packet not yet signalled arrived

  // NIC side, after enqueueing: ring the worker if it sleeps and enough has gathered.
  void maybe_wake(uint64_t now) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!sleeping.load(std::memory_order_relaxed)) {
      first_unwoken_ns = 0;
      return;
    }
    if (first_unwoken_ns == 0) first_unwoken_ns = now;
    if (producer.size() >= kWakeBatch || now - first_unwoken_ns >= kWakeDelayNs) wake();
  }
  void wake() {
    first_unwoken_ns = 0;
    bell.fetch_add(1, std::memory_order_relaxed);
    bell.notify_one();
  }
  // Worker side: waits for work; false once `done` is set and nothing is left.
  // Polling, it never sleeps, so the NIC never has to ring it, and it runs
  // `idle` while it waits.
  template <class Idle>
  bool wait(const std::atomic<bool>& done, bool poll, Idle&& idle) {
    if (poll) {
      for (;;) {
        if (!consumer.empty()) return true;
        if (done.load(std::memory_order_acquire)) return !consumer.empty();
        idle();
        cpu_relax();
      }
    }
    for (;;) {
      uint32_t seen = bell.load(std::memory_order_relaxed);
      sleeping.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!consumer.empty()) {
        sleeping.store(0, std::memory_order_relaxed);
        return true;
      }
      if (done.load(std::memory_order_acquire)) {
        sleeping.store(0, std::memory_order_relaxed);
        return !consumer.empty();
      }
      bell.wait(seen, std::memory_order_relaxed);
      ++sleeps;
      sleeping.store(0, std::memory_order_relaxed);
    }
  }
};

void pin(const CpuSet& cpus, const char* what) {
  if (auto w = pin_current_thread(cpus); !w.empty()) log_warn(std::string(what) + ": " + w);
}

}  // namespace

std::vector<std::string> algorithms() {
  std::vector<std::string> a = sketch_algorithms();
  a.push_back("duet");
  a.push_back("none");
  return a;
}

WirePlan plan_wire(std::span<const Packet> packets, unsigned workers) {
  if (workers == 0 || workers > 65535) throw std::invalid_argument("workers must be between 1 and 65535");
  if (packets.size() > UINT32_MAX) throw std::invalid_argument("trace too long for one run (more than 2^32 packets)");
  WirePlan w;
  w.workers = workers;
  w.flow_id.resize(packets.size());
  w.queue.resize(packets.size());
  RssQueues rss(workers);
  std::unordered_map<FlowKey, uint32_t, FlowKeyHash> ids;
  for (size_t i = 0; i < packets.size(); ++i) {
    auto [it, fresh] = ids.try_emplace(packets[i].key, static_cast<uint32_t>(w.flows.size()));
    if (fresh) w.flows.push_back(packets[i].key);
    w.flow_id[i] = it->second;
    w.queue[i] = static_cast<uint16_t>(rss.queue(packets[i].key));
  }
  return w;
}

uint64_t heavy_threshold_packets(double threshold, uint64_t packets) {
  if (!(threshold > 0)) throw std::invalid_argument("heavy threshold must be > 0");
  if (threshold >= 1) return static_cast<uint64_t>(std::llround(threshold));
  return std::max<uint64_t>(2, static_cast<uint64_t>(std::ceil(threshold * packets)));
}

RunResult run(const Trace& trace, const GroundTruth& truth, const RunConfig& cfg, const WirePlan* wire_plan) {
  if (cfg.workers == 0 || cfg.workers > 128) throw std::invalid_argument("workers must be between 1 and 128");
  const size_t n = cfg.packets_limit ? std::min<size_t>(cfg.packets_limit, trace.packets.size()) : trace.packets.size();
  if (n > UINT32_MAX) throw std::invalid_argument("trace too long for one run (more than 2^32 packets)");
  const Packet* pkts = trace.packets.data();
  WirePlan own_plan;
  if (!wire_plan) {
    own_plan = plan_wire(std::span<const Packet>(trace.packets).first(n), cfg.workers);
    wire_plan = &own_plan;
  }
  if (wire_plan->workers != cfg.workers || wire_plan->flow_id.size() < n)
    throw std::invalid_argument("the wire plan was made for another trace or worker count");
  const WirePlan& wire = *wire_plan;

  const unsigned passes = std::max(1u, cfg.passes);
  RunResult res;
  res.packets = n;
  res.passes = passes;
  for (size_t i = 0; i < n; ++i) res.bytes += cfg.packet_size ? cfg.packet_size : pkts[i].wire_len;

  // The algorithm: Duet with its flow table, one baseline sketch per worker,
  // or nothing (the datapath's own per-packet cost).
  const AlgorithmConfig& algo = cfg.algorithm;
  res.top = top_packets(algo, n);
  std::unordered_map<FlowKey, uint32_t, FlowKeyHash> flow_ids;  // for the table's installs
  std::unique_ptr<EmulatedFlowTable> table;
  if (algo.algo == "duet") {
    table = std::make_unique<EmulatedFlowTable>(hw_table_config(algo, n, res.top));
    flow_ids.reserve(wire.flows.size());
    for (uint32_t i = 0; i < wire.flows.size(); ++i) flow_ids.emplace(wire.flows[i], i);
    table->index_flow_ids(wire.flows.size(), [&flow_ids](const FlowKey& k) {
      auto it = flow_ids.find(k);
      return it == flow_ids.end() ? EmulatedFlowTable::kNoFlowId : it->second;
    });
  }
  Measurer measurer(algo, cfg.workers, res.top, n, table.get());
  res.memory_bytes = measurer.memory_bytes();
  const bool duet = measurer.is_duet();

  RssQueues rss(cfg.workers);  // for the queries: which worker's sketch holds a flow
  std::vector<std::unique_ptr<WorkerQueue>> queues;
  for (unsigned w = 0; w < cfg.workers; ++w) queues.push_back(std::make_unique<WorkerQueue>(cfg.ring_slots));

  std::atomic<bool> wire_done{false}, stop_hw{false}, stop_control{false};
  std::atomic<uint64_t> drops{0}, dpu_work{0}, sleeps{0};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < cfg.workers; ++w) {
    workers.emplace_back([&, w] {
      pin(cfg.placement.dpu.nth(w), "dpu worker");
      PlaceTimer t(res.cpu, Place::kDpu);
      WorkerQueue& q = *queues[w];
      uint32_t idx[kPop];
      const FlowKey* keys[kPop];
      uint64_t work = 0;  // wall time inside batches: the work, without polling and sleeping
      // Duet's control path with polling workers: a thread sharing a polling
      // worker's core takes it for a whole scheduler slice (milliseconds: the
      // ring overflows), so worker 0 applies the table's outcomes between
      // batches instead, as a DPDK lcore runs a service function.
      const bool runs_control = duet && cfg.worker_poll && w == 0;
      auto control = [&] {
        if (runs_control) measurer.poll_control(now_ns(), kControlPollNs);
      };
      while (q.wait(wire_done, cfg.worker_poll, control)) {
        uint64_t b0 = now_ns();
        size_t k;
        while ((k = q.consumer.try_pop(idx, kPop)) > 0) {
          control();
          // Every header of the burst is asked for before the burst is handed
          // over, as a DPDK worker prefetches its mbufs: a worker that reads
          // every packet streams through the trace, which the hardware
          // prefetcher follows; Duet's reads a third of them, scattered.
          for (size_t i = 0; i < k; ++i) {
            __builtin_prefetch(&pkts[idx[i]]);
            keys[i] = &pkts[idx[i]].key;
          }
          measurer.update_burst(w, keys, k);
        }
        work += now_ns() - b0;
      }
      dpu_work.fetch_add(work, std::memory_order_relaxed);
      sleeps.fetch_add(q.sleeps, std::memory_order_relaxed);
    });
  }
  std::thread control;
  if (duet && !cfg.worker_poll) {
    control = std::thread([&] {
      pin(cfg.placement.dpu, "dpu control");
      PlaceTimer t(res.cpu, Place::kDpu);
      measurer.control_loop(stop_control);
    });
  }

  std::atomic<uint64_t> t0{now_ns()};  // the measured pass's start
  uint64_t hw_hits_before = 0;       // hardware hits of the warm-up passes
  std::thread nic([&] {
    pin(cfg.placement.hw, "hw");
    PlaceTimer t(res.cpu, Place::kHw);
    // Each worker's packets of the burst: fixed arrays, filled without a branch per packet.
    std::vector<std::array<uint32_t, kBurst>> staged(cfg.workers);
    std::vector<size_t> staged_n(cfg.workers, 0);
    uint64_t next_sample = cfg.timeline_every;
    const uint32_t* flow_id = wire.flow_id.data();
    const uint16_t* queue_of = wire.queue.data();
    uint32_t sizes[kBurst], missed[kBurst];
    // Stages the burst's packets first + at(k), k < m, for their RSS queues.
    auto stage = [&](uint32_t first, size_t m, auto at) {
      if (cfg.workers == 1) {
        for (size_t k = 0; k < m; ++k) staged[0][k] = first + at(k);
        staged_n[0] = m;
        return;
      }
      for (size_t k = 0; k < m; ++k) {
        const uint32_t j = first + at(k);
        const uint16_t q = queue_of[j];
        staged[q][staged_n[q]++] = j;
      }
    };
    // One replay of the trace; only the last (measured) one is paced and timed.
    auto replay = [&](bool measured) {
      if (measured && passes > 1) {
        // Warm-up over: let the workers catch up, then start the clock.
        for (auto& q : queues)
          while (!q->producer.empty()) {
            if (q->sleeping.load(std::memory_order_relaxed)) q->wake();
            if (table) table->service(now_ns());
            cpu_relax();
          }
        if (table) hw_hits_before = table->stats().hits;
        t0.store(now_ns(), std::memory_order_relaxed);
      }
      // Warm-up passes go as fast as possible, the wire waiting for the workers.
      Pacer pacer(measured ? cfg.rate_pps : 0, kBurst);
      const bool drop_when_full = measured && cfg.rate_pps > 0;
      for (size_t i = 0; i < n;) {
        uint64_t now;
        size_t burst = pacer.acquire(static_cast<uint32_t>(std::min(kBurst, n - i)), now);
        const uint32_t first = static_cast<uint32_t>(i);
        if (table) {  // Algorithm 1, lines 2-4: a hit is counted in hardware and goes no further
          if (!cfg.packet_size)
            for (size_t j = 0; j < burst; ++j) sizes[j] = pkts[i + j].wire_len;
          size_t m = table->match_burst_by_id(flow_id + i, burst, cfg.packet_size ? nullptr : sizes,
                                              cfg.packet_size, now, missed);
          stage(first, m, [&](size_t k) { return missed[k]; });
        } else {
          stage(first, burst, [](size_t k) { return static_cast<uint32_t>(k); });
        }
        i += burst;
        for (unsigned w = 0; w < cfg.workers; ++w) {
          const size_t size = staged_n[w];
          if (size == 0) continue;
          const uint32_t* s = staged[w].data();
          WorkerQueue& q = *queues[w];
          size_t pushed = q.producer.try_push(s, size);
          if (pushed < size) {
            if (drop_when_full) {
              drops.fetch_add(size - pushed, std::memory_order_relaxed);  // the Arm cores fell behind
            } else {
              while (pushed < size) {  // as fast as possible: the wire waits
                if (q.sleeping.load(std::memory_order_relaxed)) q.wake();
                cpu_relax();
                pushed += q.producer.try_push(s + pushed, size - pushed);
              }
            }
          }
          staged_n[w] = 0;
        }
        // A polling worker never sleeps; asking whether its ring is empty would
        // read the consumer's index every burst and pull that line away from it.
        if (!cfg.worker_poll)
          for (auto& q : queues)
            if (!q->producer.empty()) q->maybe_wake(now);
        if (table) table->service(now);
        if (measured && i == n) res.wire_seconds = (now_ns() - t0.load(std::memory_order_relaxed)) / 1e9;
        if (cfg.timeline_every && measured && i >= next_sample) {
          next_sample += cfg.timeline_every;
          res.timeline.push_back({(now_ns() - t0.load(std::memory_order_relaxed)) / 1e9, i,
                                  table ? table->stats().entries : 0, duet ? measurer.duet_stats()->promotions : 0,
                                  drops.load(std::memory_order_relaxed)});
        }
      }
    };
    for (unsigned pass = 0; pass < passes; ++pass) replay(pass + 1 == passes);
    wire_done.store(true, std::memory_order_release);
    for (auto& q : queues) {
      q->bell.fetch_add(1);
      q->bell.notify_all();
    }
    // The NIC keeps applying rule insertions until the run is over.
    while (table && !stop_hw.load(std::memory_order_acquire)) {
      table->service(now_ns());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (auto& w : workers) w.join();
  res.seconds = (now_ns() - t0.load()) / 1e9;
  stop_hw.store(true, std::memory_order_release);
  nic.join();
  if (control.joinable()) {
    stop_control.store(true, std::memory_order_release);
    control.join();
  } else if (duet) {  // polled control path: the outcomes that came after the workers stopped
    PlaceTimer t(res.cpu, Place::kDpu);
    measurer.drain();
  }
  res.drops = drops.load();
  res.dpu_work_ns = dpu_work.load();
  res.worker_sleeps = sleeps.load();

  // Queries, with the datapath quiescent.
  if (measurer.is_none()) {
    res.evaluated = false;
    return res;
  }
  const double hh_threshold = static_cast<double>(res.top) * passes;  // every pass counted the heavy flows again
  std::vector<std::vector<FlowKey>> routed(cfg.workers);  // which worker's queue carried each flow
  for (const auto& [k, c] : truth) routed[cfg.workers == 1 ? 0 : rss.queue(k)].push_back(k);
  Measurer::Answer answer = measurer.query(routed, hh_threshold);
  res.estimates = std::move(answer.estimates);
  res.heavy_reported = std::move(answer.heavy);
  res.cardinality = measurer.cardinality();
  res.entropy = measurer.entropy();
  res.duet = measurer.duet_stats();
  if (table) {
    res.hw = table->stats();
    res.hw_hits = res.hw->hits - hw_hits_before;
  }
  if (passes == 1) {
    res.metrics = evaluate(truth, res.estimates, res.heavy_reported, static_cast<double>(res.top));
  } else {  // every pass counted every flow again
    GroundTruth replayed = truth;
    for (auto& [k, c] : replayed) c *= passes;
    res.metrics = evaluate(replayed, res.estimates, res.heavy_reported, hh_threshold);
  }
  return res;
}

ZeroLossSearch zero_loss_rate(const Trace& trace, const GroundTruth& truth, const RunConfig& config,
                              const WirePlan& wire, double precision, double low, double high) {
  if (!(precision > 0 && precision < 1)) throw std::invalid_argument("zero-loss search: precision must be in (0, 1)");
  if (low < 0 || (high > 0 && high <= low)) throw std::invalid_argument("zero-loss search: want 0 <= low < high");
  ZeroLossSearch z;
  RunConfig c = config;
  c.rate_pps = 0;
  for (int i = 0; i < 2; ++i) {  // the faster of two: the first also warms the caches and the allocator
    RunResult unpaced = run(trace, truth, c, &wire);
    z.unpaced_pps = std::max(z.unpaced_pps, unpaced.packets / std::max(unpaced.seconds, 1e-9));
  }
  double hi = high > 0 ? high : 2 * z.unpaced_pps, lo = low;
  // A probe passes when nothing dropped and the wire offered at least 90 % of
  // the rate: a NIC thread that cannot keep up offers less, and drops nothing.
  // The rate reported is the one it offered.
  constexpr double kWireShortfall = 0.1;
  // A failed probe is tried again before the rate is given up: on a shared
  // VM a worker can lose its CPU for milliseconds, which no ring absorbs,
  // and that says nothing about the rate.
  auto probe = [&](double rate) {
    c.rate_pps = rate;
    for (int attempt = 0; attempt < 2; ++attempt) {
      RunResult r = run(trace, truth, c, &wire);
      double achieved = r.packets / std::max(r.wire_seconds, 1e-9);
      z.probes.push_back({rate, r.drops, achieved});
      if (r.drops == 0 && achieved >= rate * (1 - kWireShortfall)) {
        if (achieved > z.rate_pps) {  // what the wire really offered (its pacing falls a few % short)
          z.rate_pps = achieved;
          z.at_rate = std::move(r);
        }
        return true;
      }
    }
    return false;
  };
  if (probe(hi)) return z;
  z.refused_pps = hi;
  bool have_low = false;
  if (lo > 0) {
    have_low = probe(lo);
    if (!have_low) {
      z.refused_pps = lo;
      return z;  // even the floor drops: rate_pps stays 0
    }
  }
  // Halving from an unknown floor stops at 1,000 packets/s: below that the answer is "nothing".
  while (hi - lo > precision * hi && (lo > 0 || hi > 1000)) {
    double mid = lo > 0 ? (lo + hi) / 2 : hi / 2;
    if (probe(mid)) {
      lo = mid;
      have_low = true;
    } else {
      hi = mid;
      z.refused_pps = mid;
    }
  }
  if (!have_low) z.rate_pps = 0;
  return z;
}

}  // namespace dpukit::measure
