#include "datapath.h"

#include <algorithm>
#include <bit>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <thread>

#include "dpukit/core/log.h"
#include "dpukit/core/pacing.h"
#include "dpukit/core/ring.h"
#include "rss.h"

namespace dpukit::measure {

namespace {

constexpr size_t kBurst = 32;  // packets the wire hands the NIC at once
constexpr size_t kPop = 64;    // indices a worker takes at once


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
  bool wait(const std::atomic<bool>& done) {
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

CpuSet nth_cpu(const CpuSet& set, unsigned i) {
  if (set.empty()) return set;
  return CpuSet{{set.cpus[i % set.cpus.size()]}};
}

size_t default_records(uint64_t packets, uint64_t top, size_t hw_capacity) {
  // At most packets/TOP flows can each bring TOP packets; a quarter of that
  // bound covers the heavy flows of skewed traffic. Promotions beyond it stay
  // in the sketch (counted as records_full).
  uint64_t bound = std::max<uint64_t>(1, packets / std::max<uint64_t>(top, 1));
  return static_cast<size_t>(std::clamp<uint64_t>(bound / 4, 128, std::max<uint64_t>(128, hw_capacity)));
}

}  // namespace

std::vector<std::string> algorithms() {
  std::vector<std::string> a = sketch_algorithms();
  a.push_back("duet");
  return a;
}

uint64_t heavy_threshold_packets(double threshold, uint64_t packets) {
  if (!(threshold > 0)) throw std::invalid_argument("heavy threshold must be > 0");
  if (threshold >= 1) return static_cast<uint64_t>(std::llround(threshold));
  return std::max<uint64_t>(2, static_cast<uint64_t>(std::ceil(threshold * packets)));
}

RunResult run(const Trace& trace, const GroundTruth& truth, const RunConfig& cfg) {
  if (cfg.workers == 0 || cfg.workers > 128) throw std::invalid_argument("workers must be between 1 and 128");
  const size_t n = cfg.packets_limit ? std::min<size_t>(cfg.packets_limit, trace.packets.size()) : trace.packets.size();
  if (n > UINT32_MAX) throw std::invalid_argument("trace too long for one run (more than 2^32 packets)");
  const Packet* pkts = trace.packets.data();

  RunResult res;
  res.packets = n;
  res.top = heavy_threshold_packets(cfg.heavy_threshold, n);

  // The algorithm: Duet with its flow table, or one baseline sketch per worker.
  const bool is_duet = cfg.algo == "duet";
  std::unique_ptr<EmulatedFlowTable> table;
  std::unique_ptr<Duet> duet;
  std::vector<std::unique_ptr<Sketch>> sketches;
  if (is_duet) {
    EmulatedFlowTable::Config tc;
    // At most packets/TOP flows can reach TOP in an epoch. A real eSwitch holds
    // far more rules; the emulated table's slots cost the NIC thread cache
    // misses, so by default it is sized to what Duet can use.
    tc.capacity = cfg.hw_capacity ? cfg.hw_capacity
                                  : std::bit_ceil(std::clamp<uint64_t>(2 * n / res.top, 1024, 65536));
    tc.insert_rate = cfg.hw_insert_rate;
    tc.insert_latency_ns = cfg.hw_insert_latency_ns;
    tc.idle_timeout_ns = cfg.hw_idle_timeout_ns;
    table = std::make_unique<EmulatedFlowTable>(tc);
    DuetConfig dc;
    dc.memory_bytes = cfg.memory_bytes;
    dc.top = res.top;
    dc.records = cfg.duet_records ? cfg.duet_records : default_records(n, res.top, tc.capacity);
    dc.seed = cfg.sketch.seed;
    dc.counter_bits = cfg.duet_counter_bits;
    dc.single_writer = cfg.workers == 1;
    try {
      duet = std::make_unique<Duet>(dc, *table);
    } catch (const std::invalid_argument& e) {
      throw BudgetError(e.what());
    }
    res.memory_bytes = duet->memory_bytes();
  } else {
    // Equal total memory: each worker's instance gets an equal share.
    for (unsigned w = 0; w < cfg.workers; ++w) {
      SketchOptions o = cfg.sketch;
      sketches.push_back(make_sketch(cfg.algo, cfg.memory_bytes / cfg.workers, o));
      res.memory_bytes += sketches.back()->memory_bytes();
    }
  }

  RssQueues rss(cfg.workers);
  std::vector<std::unique_ptr<WorkerQueue>> queues;
  for (unsigned w = 0; w < cfg.workers; ++w) queues.push_back(std::make_unique<WorkerQueue>(cfg.ring_slots));

  std::atomic<bool> wire_done{false}, stop_hw{false}, stop_control{false};
  std::atomic<uint64_t> drops{0}, dpu_work{0}, sleeps{0};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < cfg.workers; ++w) {
    workers.emplace_back([&, w] {
      pin(nth_cpu(cfg.placement.dpu, w), "dpu worker");
      PlaceTimer t(res.cpu, Place::kDpu);
      WorkerQueue& q = *queues[w];
      Sketch* sketch = is_duet ? nullptr : sketches[w].get();
      uint32_t idx[kPop];
      uint64_t work = 0;  // wall time inside batches: the work, without polling and sleeping
      while (q.wait(wire_done)) {
        uint64_t b0 = now_ns();
        size_t k;
        while ((k = q.consumer.try_pop(idx, kPop)) > 0) {
          if (duet) {
            for (size_t i = 0; i < k; ++i) duet->on_sketch_path(pkts[idx[i]].key);
          } else {
            for (size_t i = 0; i < k; ++i) sketch->update(pkts[idx[i]].key, 1);
          }
        }
        work += now_ns() - b0;
      }
      dpu_work.fetch_add(work, std::memory_order_relaxed);
      sleeps.fetch_add(q.sleeps, std::memory_order_relaxed);
    });
  }
  std::thread control;
  if (duet) {
    control = std::thread([&] {
      pin(cfg.placement.dpu, "dpu control");
      PlaceTimer t(res.cpu, Place::kDpu);
      while (!stop_control.load(std::memory_order_acquire)) {
        if (table->wait_events(std::chrono::milliseconds(2))) duet->apply_hw_events();
      }
      while (duet->apply_hw_events() > 0) {  // every outcome, not just the first 4,096
      }
    });
  }

  uint64_t t0 = now_ns();
  std::thread nic([&] {
    pin(cfg.placement.hw, "hw");
    PlaceTimer t(res.cpu, Place::kHw);
    Pacer pacer(cfg.rate_pps, kBurst);
    std::vector<std::vector<uint32_t>> staged(cfg.workers);
    for (auto& s : staged) s.reserve(kBurst);
    uint64_t next_sample = cfg.timeline_every;
    for (size_t i = 0; i < n;) {
      size_t burst = pacer.acquire(static_cast<uint32_t>(std::min(kBurst, n - i)));
      uint64_t now = now_ns();
      for (size_t j = i; j < i + burst; ++j) {
        if (table && table->match(pkts[j].key, pkts[j].wire_len, now)) continue;  // Algorithm 1, lines 2-4
        staged[rss.queue(pkts[j].key)].push_back(static_cast<uint32_t>(j));
      }
      i += burst;
      for (unsigned w = 0; w < cfg.workers; ++w) {
        auto& s = staged[w];
        if (s.empty()) continue;
        WorkerQueue& q = *queues[w];
        size_t pushed = q.producer.try_push(s.data(), s.size());
        if (pushed < s.size()) {
          if (cfg.rate_pps > 0) {
            drops.fetch_add(s.size() - pushed, std::memory_order_relaxed);  // the Arm cores fell behind
          } else {
            while (pushed < s.size()) {  // as fast as possible: the wire waits
              if (q.sleeping.load(std::memory_order_relaxed)) q.wake();
              cpu_relax();
              pushed += q.producer.try_push(s.data() + pushed, s.size() - pushed);
            }
          }
        }
        s.clear();
      }
      for (auto& q : queues)
        if (!q->producer.empty()) q->maybe_wake(now);
      if (table) table->service(now);
      if (cfg.timeline_every && i >= next_sample) {
        next_sample += cfg.timeline_every;
        res.timeline.push_back({(now_ns() - t0) / 1e9, i, table ? table->stats().entries : 0,
                                duet ? duet->stats().promotions : 0, drops.load(std::memory_order_relaxed)});
      }
    }
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
  res.seconds = (now_ns() - t0) / 1e9;
  stop_hw.store(true, std::memory_order_release);
  nic.join();
  if (control.joinable()) {
    stop_control.store(true, std::memory_order_release);
    control.join();
  }
  res.drops = drops.load();
  res.dpu_work_ns = dpu_work.load();
  res.worker_sleeps = sleeps.load();

  // Queries, with the datapath quiescent.
  std::vector<FlowKey> keys;
  keys.reserve(truth.size());
  for (const auto& [k, c] : truth) keys.push_back(k);
  if (duet) {
    for (const auto& k : keys) {
      double e = duet->estimate(k);
      res.estimates.emplace(k, e);
      if (e >= res.top) res.heavy_reported.push_back(k);
    }
    res.hw = table->stats();
    res.duet = duet->stats();
  } else {
    std::vector<std::vector<FlowKey>> routed(cfg.workers);
    for (const auto& k : keys) {
      unsigned w = rss.queue(k);
      routed[w].push_back(k);
      res.estimates.emplace(k, sketches[w]->estimate(k));
    }
    for (unsigned w = 0; w < cfg.workers; ++w)
      for (auto& [k, e] : sketches[w]->heavy_hitters(static_cast<double>(res.top), routed[w]))
        res.heavy_reported.push_back(k);
    if (cfg.workers == 1) {
      res.cardinality = sketches[0]->cardinality();
      res.entropy = sketches[0]->entropy();
    } else if (sketches[0]->cardinality()) {
      double sum = 0;  // RSS partitions the flows, so distinct counts add up
      for (auto& s : sketches) sum += s->cardinality().value_or(0);
      res.cardinality = sum;
    }
  }
  res.metrics = evaluate(truth, res.estimates, res.heavy_reported, static_cast<double>(res.top));
  return res;
}

}  // namespace dpukit::measure
