// The measure datapath on the emulated DPU (the public header draws it): one
// wire per RSS queue, in its dpu worker's own loop.
//
// Why the wire runs in the worker's loop and not on threads of its own: a
// NIC fills each queue's rx ring in hardware, beside the cores, and a core
// only ever sees its own ring. A thread per queue would need a core per
// queue besides the workers' (on this 2-core machine, two workers and their
// wires cannot each have one, and a wire thread sharing a polling worker's
// core takes it for whole scheduler slices), and one thread for all queues
// is the central dispatch whose cost grows with every ring it feeds. In the
// worker's loop, each queue's wire costs the same whatever the number of
// queues, and it sees the ring exactly as a NIC does: packets arrive on the
// wire's clock whether or not the worker is busy, and a packet that arrives
// to a full ring is dropped. The wire's work (the hardware table's match,
// putting packets in the ring) is the NIC's: it is timed, billed as hw, and
// left out of the worker's clock, so that it neither costs dpu CPU nor
// slows the worker (the arrivals are due on a clock that stops while the
// wire works). What it cannot leave out is the cache the match shares with
// the worker's sketch on one core. At a dpu speed below the host's, the
// worker's own part of the loop (its bursts, Duet's polled control path) is
// time-dilated as on a slower core; the wire's part and the worker's idle
// waits are left out of the dilation (the NIC is not slower, and a slower
// core waits no longer for packets that are not there). What the NIC does
// cost a dpu core, receiving each packet it takes from the ring and sending
// it back (the Arm's packet path, core's dpu_packet_path.h), the worker pays
// as its own work.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <ctime>
#include <sys/resource.h>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "dpukit/core/huge_pages.h"
#include "dpukit/core/log.h"
#include "dpukit/core/ring.h"  // cpu_relax
#include "dpukit/measure.h"
#include "measurer.h"
#include "rss.h"

namespace dpukit::measure {

namespace {

constexpr size_t kBurst = 32;      // packets the wire matches at once (<= EmulatedFlowTable::kMaxBurst)
constexpr size_t kPop = 64;        // packets a worker takes from its rx ring at once
constexpr size_t kWireStep = 256;  // as fast as possible: the most the wire puts in the ring at once
// A sleeping worker is woken (interrupt moderation) once a batch has arrived
// or a moment after the first packet, so its CPU time is its work, not
// polling an empty ring; polling was measured to keep a worker from ever
// sleeping (on this KVM guest even 64 PAUSEs outlast the 3 µs between
// bursts at 10 M packets/s).
constexpr uint64_t kWakeBatch = 2048;        // packets that justify a wake-up
constexpr uint64_t kWakeDelayNs = 100'000;   // the most a packet waits for one
constexpr uint64_t kControlPollNs = 20'000;  // polled control path: how often worker 0 applies the table's outcomes
constexpr uint64_t kTimelinePollUs = 500;    // how often the timeline looks at the wires
constexpr uint64_t kFirmwarePollNs = 2'000;  // the longest a new insertion request waits to be seen

// The calling thread's involuntary context switches so far.
uint64_t involuntary_switches() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<uint64_t>(ru.ru_nivcsw);
}

void pin(const CpuSet& cpus, const char* what) {
  if (auto w = pin_current_thread(cpus); !w.empty()) log_warn(std::string(what) + ": " + w);
}

// What a run's threads share.
struct Shared {
  const RunConfig& cfg;
  const WirePlan& plan;
  unsigned passes;
  EmulatedFlowTable* table;  // Duet's; null otherwise
  Measurer& measurer;
  std::atomic<uint64_t> t0{0};  // the measured pass's start (0: not yet)
  // Every wire begins the measured pass at once, and its clock starts then.
  struct StartClock {
    std::atomic<uint64_t>* t0;
    void operator()() noexcept { t0->store(now_ns(), std::memory_order_release); }
  };
  std::barrier<StartClock> measured_start;
  std::atomic<unsigned> running{0};  // workers not yet finished
  // Each queue's own, on its own cache lines: the wire's progress in the
  // measured pass (for the timeline) and its drops.
  struct alignas(64) Progress {
    std::atomic<uint64_t> sent{0}, drops{0};
  };
  std::unique_ptr<Progress[]> progress;
  // Each worker's results.
  struct alignas(64) Worker {  // written by its worker as it goes: lines of its own
    RunResult::Queue queue;
    // Wall time: in the worker's loops, the wire's part of it, and the
    // worker's batches; CPU time: the thread's.
    uint64_t loop_ns = 0, hw_ns = 0, work_ns = 0, cpu_ns = 0, sleeps = 0;
    uint64_t dilated_ns = 0;      // what the dpu speed's dilation added to cpu_ns
    double packet_path_ns = 0;    // what the Arm's packet path was billed (dpu ns)
    unsigned replays = 0;         // passes this worker has finished
  };
  std::vector<Worker> workers;
  std::atomic<unsigned> replays_done{0};  // passes finished, over every worker

  // The table's firmware work (due insertions and removals, aging), as a
  // NIC's rule engine does it beside its queues: run by whichever wire finds
  // it due, one at a time, and billed with the wire's time as hw. A thread
  // of its own would have to be scheduled in time on the machine the
  // workers fill, and a run would then depend on when it was.
  alignas(64) std::atomic<uint64_t> next_firmware_ns{0};
  alignas(64) std::atomic_flag firmware_busy;
  bool firmware_due(uint64_t now) const {
    return table && now >= next_firmware_ns.load(std::memory_order_relaxed);
  }
  void run_firmware(uint64_t now) {
    // Looked at before it is taken: a worker that finds it taken then only
    // reads the line, instead of writing it as every try to take it does.
    if (firmware_busy.test(std::memory_order_relaxed) || firmware_busy.test_and_set(std::memory_order_acquire)) return;
    // service() says when it falls due next, but not when a request made
    // after it will: it is looked at again within kFirmwarePollNs.
    next_firmware_ns.store(std::min(table->service(now), now + kFirmwarePollNs), std::memory_order_relaxed);
    firmware_busy.clear(std::memory_order_release);
  }

  Shared(const RunConfig& c, const WirePlan& w, EmulatedFlowTable* t, Measurer& m)
      : cfg(c), plan(w), passes(std::max(1u, c.passes)), table(t), measurer(m),
        measured_start(c.workers, StartClock{&t0}), progress(new Progress[c.workers]), workers(c.workers) {}
};

// One RSS queue's wire: its packets, its share of the rate, its context of
// the hardware table and its rx ring (positions in the queue's own arrays:
// the wire is the ring's only writer and the worker its only reader, on one
// thread).
class QueueWire {
 public:
  QueueWire(Shared& s, unsigned q, size_t n)
      : s_(s), queue_(s.plan.queues[q]), n_(queue_.packets_before(n)),
        ring_(std::bit_ceil(std::max<size_t>(s.cfg.ring_slots, kWireStep))), mask_(ring_.size() - 1) {
    if (s.table) hw_ = s.table->attach_wire();
  }

  size_t packets() const { return n_; }
  size_t sent() const { return sent_; }
  bool done() const { return sent_ == n_ && head_ == tail_; }
  void restart() { sent_ = 0; }
  // Holds no hardware entry while the worker waits (the table reclaims behind it).
  void idle() {
    if (hw_) hw_->idle();
  }

  // Puts the queue's packets up to `due` on the wire: the hardware table
  // counts its flows' packets, the others go to the ring, or, when it is
  // full, are dropped (under a rate; unpaced, `due` leaves room for them).
  // Returns the packets dropped.
  uint64_t send(size_t due, uint64_t now, RunResult::Queue& q) {
    uint64_t dropped = 0;
    uint32_t missed[kBurst];
    while (sent_ < due) {
      const size_t burst = std::min(kBurst, due - sent_);
      size_t m = burst;
      if (hw_) {  // Algorithm 1, lines 2-4: a hit is counted in hardware and goes no further
        m = hw_->match_burst_by_id(queue_.flow_ids.data() + sent_, burst,
                                   s_.cfg.packet_size ? nullptr : queue_.wire_lens.data() + sent_,
                                   s_.cfg.packet_size, now, missed);
        q.hw_hits += burst - m;
      }
      const size_t take = std::min(m, ring_.size() - (tail_ - head_));
      for (size_t k = 0; k < take; ++k) ring_[tail_++ & mask_] = static_cast<uint32_t>(sent_ + (hw_ ? missed[k] : k));
      dropped += m - take;  // the Arm cores fell behind
      sent_ += burst;
    }
    q.drops += dropped;
    return dropped;
  }
  // As fast as possible: the wire waits for room in the ring, and sends
  // only once the worker is near the end of what it has, so that the ring's
  // live part stays small in the worker's cache.
  size_t unpaced_due() const {
    const size_t held = tail_ - head_;
    if (held >= kPop) return sent_;
    return std::min({n_, sent_ + kWireStep, sent_ + (ring_.size() - held) / kBurst * kBurst});
  }
  // Up to kPop packets from the ring.
  size_t pop(uint32_t* out) {
    const size_t k = std::min<size_t>(kPop, tail_ - head_);
    for (size_t i = 0; i < k; ++i) out[i] = ring_[head_++ & mask_];
    return k;
  }
  const FlowKey* key(uint32_t position) const { return &queue_.keys[position]; }

 private:
  Shared& s_;
  const WirePlan::Queue& queue_;
  size_t n_, sent_ = 0;
  std::vector<uint32_t> ring_;
  size_t mask_, head_ = 0, tail_ = 0;
  std::unique_ptr<EmulatedFlowTable::Wire> hw_;
};

// One pass of a queue's packets through its worker: the worker's loop, with
// the wire in it. `clock` is the worker's: the wall clock minus the wire's
// time (hw_ns). In the measured pass under a rate, packet j of the queue is
// due at t0 + j / rate_q, whether or not the worker keeps up. `slow`
// dilates the worker's part of the loop (the dpu speed); the wire's time and
// the idle waits are excluded from it by their wall time (a thread preempted
// in one of them is dilated a little less).
void replay(Shared& s, unsigned w, QueueWire& wire, bool measured, Shared::Worker& me, Dilation& slow) {
  const RunConfig& cfg = s.cfg;
  const double rate = measured && cfg.rate_pps > 0 ? me.queue.rate_pps : 0;
  const uint64_t t0 = s.t0.load(std::memory_order_relaxed);
  const uint64_t hw_at_start = me.hw_ns;
  auto clock = [&](uint64_t now) { return now - (me.hw_ns - hw_at_start); };  // since this pass began
  auto due_at = [&](size_t j) { return t0 + static_cast<uint64_t>(std::ceil(j * 1e9 / rate)); };
  const bool runs_control = s.measurer.is_duet() && cfg.worker_poll && w == 0;
  // Each packet taken from the ring was received by DPDK on an Arm core and
  // is sent back to the wire: the dpu's work, dilated with the rest.
  const double packet_path_ns = cfg.algorithm.dpu_packet_path().packet_ns;
  const double factor = cfg.algorithm.dpu_speed.factor;
  uint32_t pos[kPop];
  const FlowKey* keys[kPop];
  wire.restart();
  const uint64_t start = now_ns();
  uint64_t now = start;
  slow.start();
  // The worker's part of the loop, on the wire's clock: its longest stretch
  // is a burst, the polled control path, or the thread losing its CPU. The
  // first is from the start of the wire's clock (a worker woken late from
  // the start barrier finds its due packets waiting).
  uint64_t longest_stall = measured ? start - std::min(start, t0) : 0;
  auto worker_time = [&] {
    const uint64_t after = now_ns();
    longest_stall = std::max(longest_stall, after - now);
    return after;
  };
  while (!wire.done()) {
    // The wire: what is due now.
    size_t due = wire.unpaced_due();
    if (rate > 0) due = std::min<size_t>(wire.packets(), static_cast<size_t>((clock(now) - t0) * rate / 1e9) + 1);
    const bool firmware = s.firmware_due(now);
    if (due > wire.sent() || firmware) {
      const uint64_t dropped = due > wire.sent() ? wire.send(due, now, me.queue) : 0;
      if (firmware) s.run_firmware(now);
      const uint64_t after = now_ns();
      me.hw_ns += after - now;
      slow.exclude(after - now);  // the NIC's work: at full speed
      now = after;
      if (measured) {
        s.progress[w].sent.store(wire.sent(), std::memory_order_relaxed);
        if (dropped) s.progress[w].drops.fetch_add(dropped, std::memory_order_relaxed);
        // The wire's last packet went out when it was due (a NIC's wire is
        // never late; a worker that is late finds its ring full, or not);
        // as fast as possible, when the wire found room for it.
        if (wire.sent() == wire.packets())
          me.queue.wire_seconds = ((rate > 0 ? due_at(wire.packets() - 1) : clock(now)) - t0) / 1e9;
      }
    }
    if (runs_control && s.measurer.poll_control(now, kControlPollNs)) now = worker_time();
    // The worker: a burst from its ring, handed over whole. Every header is
    // asked for first, as a DPDK worker prefetches its mbufs.
    if (size_t k = wire.pop(pos)) {
      for (size_t i = 0; i < k; ++i) {
        keys[i] = wire.key(pos[i]);
        __builtin_prefetch(keys[i]);
      }
      s.measurer.update_burst(w, keys, k);
      if (packet_path_ns > 0) {
        spend_dpu_ns(double(k) * packet_path_ns, factor);
        me.packet_path_ns += double(k) * packet_path_ns;
      }
      slow.poll();  // as on the dpu's slower core: busy for (1/F - 1) x the work, every 20 us of it
      me.queue.delivered += measured ? k : 0;
      const uint64_t after = worker_time();
      me.work_ns += after - now;
      now = after;
      continue;
    }
    if (wire.done() || rate == 0) continue;
    // Nothing to do until the next packet is due: poll, or sleep until an
    // interrupt would wake the worker.
    if (cfg.worker_poll) {
      cpu_relax();
    } else {
      const uint64_t wake = std::min(due_at(wire.sent()) + kWakeDelayNs,
                                     due_at(std::min<size_t>(wire.packets(), wire.sent() + kWakeBatch) - 1));
      const uint64_t c = clock(now);
      if (wake > c) {
        wire.idle();
        timespec ts{static_cast<time_t>((wake - c) / 1000000000), static_cast<long>((wake - c) % 1000000000)};
        nanosleep(&ts, nullptr);
        ++me.sleeps;
        now = now_ns();  // a sleep is not a stall
        continue;
      }
    }
    const uint64_t after = worker_time();
    slow.exclude(after - now);  // waiting for the wire: no slower on a slower core
    now = after;
  }
  s.replays_done.fetch_add(1, std::memory_order_acq_rel);
  ++me.replays;
  // The polled control path is worker 0's: it goes on until every worker
  // has finished the pass, or a worker whose queue lasts longer would find
  // its flows' outcomes never applied and every record held (4 workers on
  // 2 CPUs: whole runs of a wave test with no record freed).
  while (runs_control && s.replays_done.load(std::memory_order_acquire) < s.cfg.workers * me.replays) {
    if (s.measurer.poll_control(now, kControlPollNs)) {
      now = now_ns();
      slow.poll();
    } else {
      cpu_relax();
      const uint64_t after = now_ns();
      slow.exclude(after - now);
      now = after;
    }
  }
  slow.pay();  // the rest of the worker's debt, within the pass it belongs to
  now = now_ns();
  me.loop_ns += now - start;
  if (measured) {
    me.queue.seconds = (clock(now) - t0) / 1e9;
    me.queue.longest_stall_seconds = longest_stall / 1e9;
  }
}

// The worker step: dpu worker w with its queue's wire, through every pass;
// all but the last as fast as possible (warm-up), then the measured one,
// begun by every worker at once. Its CPU time is dpu time, but for the
// wire's, which is hw.
void run_worker(Shared& s, unsigned w, size_t n) {
  pin(s.cfg.placement.dpu.nth(w), "dpu worker");
  const uint64_t cpu0 = thread_cpu_ns();
  Shared::Worker& me = s.workers[w];
  QueueWire wire(s, w, n);
  Dilation slow(s.cfg.algorithm.dpu_speed);
  me.queue.packets = wire.packets();
  if (s.cfg.rate_pps > 0 && n > 0) me.queue.rate_pps = s.cfg.rate_pps * double(wire.packets()) / double(n);
  for (unsigned pass = 0; pass < s.passes; ++pass) {
    const bool measured = pass + 1 == s.passes;
    uint64_t switches = 0;
    if (measured) {
      wire.idle();
      me.queue = {.packets = me.queue.packets, .rate_pps = me.queue.rate_pps};  // the measured pass's own
      s.measured_start.arrive_and_wait();
      switches = involuntary_switches();
    }
    replay(s, w, wire, measured, me, slow);
    if (measured) me.queue.preemptions = involuntary_switches() - switches;
  }
  wire.idle();
  me.dilated_ns = slow.dilated_ns();
  me.cpu_ns = thread_cpu_ns() - cpu0;
  s.running.fetch_sub(1, std::memory_order_release);
}

// The timeline: the table's occupancy every cfg.timeline_every packets of
// the measured pass, looked at from the run's own thread as the wires go.
void sample_timeline(Shared& s, RunResult& res) {
  uint64_t next = s.cfg.timeline_every;
  while (s.running.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(kTimelinePollUs));
    const uint64_t t0 = s.t0.load(std::memory_order_acquire);
    if (t0 == 0) continue;
    uint64_t sent = 0, drops = 0;
    for (unsigned w = 0; w < s.cfg.workers; ++w) {
      sent += s.progress[w].sent.load(std::memory_order_relaxed);
      drops += s.progress[w].drops.load(std::memory_order_relaxed);
    }
    if (sent < next) continue;
    next = (sent / s.cfg.timeline_every + 1) * s.cfg.timeline_every;
    res.timeline.push_back({(now_ns() - t0) / 1e9, sent, s.table ? s.table->stats().entries : 0,
                            s.measurer.is_duet() ? s.measurer.duet_stats()->promotions : 0, drops});
  }
}

// The hardware table for Duet, numbered by the plan's flow ids.
std::unique_ptr<EmulatedFlowTable> make_table(const RunConfig& cfg, const WirePlan& plan, size_t n, uint64_t top) {
  if (cfg.algorithm.algo != "duet") return nullptr;
  auto table = std::make_unique<EmulatedFlowTable>(hw_table_config(cfg.algorithm, n, top));
  auto ids = std::make_shared<std::unordered_map<FlowKey, uint32_t, FlowKeyHash>>();
  ids->reserve(plan.flows.size());
  for (uint32_t i = 0; i < plan.flows.size(); ++i) ids->emplace(plan.flows[i], i);
  table->index_flow_ids(plan.flows.size(), [ids](const FlowKey& k) {
    auto it = ids->find(k);
    return it == ids->end() ? EmulatedFlowTable::kNoFlowId : it->second;
  });
  return table;
}

// The collect step, with the datapath quiescent: what the workers did, and
// the measurer's answers against the truth.
void collect(Shared& s, const GroundTruth& truth, RunResult& res) {
  uint64_t hw_hits = 0;
  for (const Shared::Worker& me : s.workers) {
    // The wire's share of the loop's time is the NIC's. A share of the CPU
    // time, not the wall time itself: on a shared machine the thread may lose
    // its CPU in the middle of either part.
    const uint64_t hw = me.loop_ns ? static_cast<uint64_t>(double(me.cpu_ns) * std::min(1.0, double(me.hw_ns) / me.loop_ns)) : 0;
    res.cpu.add(Place::kHw, hw);
    res.cpu.add(Place::kDpu, me.cpu_ns - hw);
    res.drops += me.queue.drops;
    res.dpu_work_ns += me.work_ns;
    res.dpu_dilated_ns += me.dilated_ns;
    res.dpu_packet_path_ns += static_cast<uint64_t>(me.packet_path_ns);
    res.worker_sleeps += me.sleeps;
    res.wire_seconds = std::max(res.wire_seconds, me.queue.wire_seconds);
    res.seconds = std::max(res.seconds, me.queue.seconds);
    hw_hits += me.queue.hw_hits;
    res.queues.push_back(me.queue);
  }
  if (s.table) {
    res.hw = s.table->stats();
    res.hw_hits = hw_hits;
  }
  res.duet = s.measurer.duet_stats();
  if (s.measurer.is_none()) {
    res.evaluated = false;
    return;
  }
  const unsigned passes = s.passes;
  const double hh_threshold = static_cast<double>(res.top) * passes;  // every pass counted the heavy flows again
  RssQueues rss(s.cfg.workers);
  std::vector<std::vector<FlowKey>> routed(s.cfg.workers);  // which worker's queue carried each flow
  for (const auto& [k, c] : truth) routed[rss.queue(k)].push_back(k);
  Measurer::Answer answer = s.measurer.query(routed, hh_threshold);
  res.estimates = std::move(answer.estimates);
  res.heavy_reported = std::move(answer.heavy);
  res.cardinality = s.measurer.cardinality();
  res.entropy = s.measurer.entropy();
  if (passes == 1) {
    res.metrics = evaluate(truth, res.estimates, res.heavy_reported, static_cast<double>(res.top));
  } else {  // every pass counted every flow again
    GroundTruth replayed = truth;
    for (auto& [k, c] : replayed) c *= passes;
    res.metrics = evaluate(replayed, res.estimates, res.heavy_reported, hh_threshold);
  }
}

}  // namespace

std::vector<std::string> algorithms() {
  std::vector<std::string> a = sketch_algorithms();
  a.push_back("duet");
  a.push_back("none");
  return a;
}

size_t WirePlan::Queue::packets_before(size_t n) const {
  return std::lower_bound(index.begin(), index.end(), n, [](uint32_t i, size_t v) { return i < v; }) - index.begin();
}

WirePlan plan_wire(std::span<const Packet> packets, unsigned workers) {
  if (workers == 0 || workers > 65535) throw std::invalid_argument("workers must be between 1 and 65535");
  if (packets.size() > UINT32_MAX) throw std::invalid_argument("trace too long for one run (more than 2^32 packets)");
  WirePlan w;
  w.workers = workers;
  w.flow_id.resize(packets.size());
  w.queue.resize(packets.size());
  RssQueues rss(workers);
  std::vector<size_t> count(workers);
  for (size_t i = 0; i < packets.size(); ++i) {
    const unsigned q = rss.queue(packets[i].key);
    w.queue[i] = static_cast<uint16_t>(q);
    ++count[q];
  }
  // Each array sized once (no regrowth: no spare capacity) and, as the
  // trace's packets are, in huge pages where the kernel gives them.
  w.queues.resize(workers);
  for (unsigned q = 0; q < workers; ++q) {
    WirePlan::Queue& wq = w.queues[q];
    wq.index.resize(count[q]);
    wq.keys.resize(count[q]);
    wq.flow_ids.resize(count[q]);
    wq.wire_lens.resize(count[q]);
    back_with_huge_pages(wq.keys.data(), wq.keys.size() * sizeof(FlowKey));
    back_with_huge_pages(wq.flow_ids.data(), wq.flow_ids.size() * sizeof(uint32_t));
    back_with_huge_pages(wq.wire_lens.data(), wq.wire_lens.size() * sizeof(uint32_t));
  }
  std::fill(count.begin(), count.end(), 0);
  std::unordered_map<FlowKey, uint32_t, FlowKeyHash> ids;
  for (size_t i = 0; i < packets.size(); ++i) {
    auto [it, fresh] = ids.try_emplace(packets[i].key, static_cast<uint32_t>(w.flows.size()));
    if (fresh) w.flows.push_back(packets[i].key);
    w.flow_id[i] = it->second;
    WirePlan::Queue& wq = w.queues[w.queue[i]];
    const size_t j = count[w.queue[i]]++;
    wq.index[j] = static_cast<uint32_t>(i);
    wq.keys[j] = packets[i].key;
    wq.flow_ids[j] = it->second;
    wq.wire_lens[j] = packets[i].wire_len;
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
  WirePlan own_plan;
  if (!wire_plan) {
    own_plan = plan_wire(std::span<const Packet>(trace.packets).first(n), cfg.workers);
    wire_plan = &own_plan;
  }
  if (wire_plan->workers != cfg.workers || wire_plan->flow_id.size() < n ||
      wire_plan->queues.size() != cfg.workers)
    throw std::invalid_argument("the wire plan was made for another trace or worker count");

  RunResult res;
  res.packets = n;
  res.passes = std::max(1u, cfg.passes);
  for (size_t i = 0; i < n; ++i) res.bytes += cfg.packet_size ? cfg.packet_size : trace.packets[i].wire_len;
  res.top = top_packets(cfg.algorithm, n);

  // The NIC: Duet's hardware table; the wires that match against it, and
  // run its firmware, are in the workers' loops.
  std::unique_ptr<EmulatedFlowTable> table = make_table(cfg, *wire_plan, n, res.top);
  Measurer measurer(cfg.algorithm, cfg.workers, res.top, n, table.get());
  res.memory_bytes = measurer.memory_bytes();

  Shared s(cfg, *wire_plan, table.get(), measurer);
  // Duet's control path: a thread on the dpu side, or, with polling workers,
  // worker 0 between bursts (a thread sharing a polling worker's core takes
  // it for a whole scheduler slice, and the ring overflows), as a DPDK lcore
  // runs a service function.
  std::atomic<bool> stop_control{false};
  std::thread control;
  if (measurer.is_duet() && !cfg.worker_poll)
    control = std::thread([&] {
      pin(cfg.placement.dpu, "dpu control");
      PlaceTimer t(res.cpu, Place::kDpu);
      measurer.control_loop(stop_control);
    });
  s.running.store(cfg.workers);
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < cfg.workers; ++w) workers.emplace_back(run_worker, std::ref(s), w, n);
  if (cfg.timeline_every) sample_timeline(s, res);
  for (auto& t : workers) t.join();
  // The firmware once more, no wire attached: entries that aged out in the
  // wires' last calls are reclaimed and their final counts reach Duet as
  // events (their records still count them until then, and the table no longer does).
  if (table) table->service(now_ns());
  if (control.joinable()) {
    stop_control.store(true, std::memory_order_release);
    control.join();  // it drains the outcomes that came after the workers stopped
  } else if (measurer.is_duet()) {
    PlaceTimer t(res.cpu, Place::kDpu);
    measurer.drain();
  }
  collect(s, truth, res);
  res.dpu_dilated_ns += measurer.control_dilated_ns();
  return res;
}

ZeroLossSearch zero_loss_rate(const Trace& trace, const GroundTruth& truth, const RunConfig& config,
                              const WirePlan& wire, double precision, double low, double high, double low_fraction) {
  if (!(precision > 0 && precision < 1)) throw std::invalid_argument("zero-loss search: precision must be in (0, 1)");
  if (low < 0 || (high > 0 && high <= low)) throw std::invalid_argument("zero-loss search: want 0 <= low < high");
  if (!(low_fraction >= 0 && low_fraction < 0.5))
    throw std::invalid_argument("zero-loss search: the low fraction must be in [0, 0.5)");
  ZeroLossSearch z;
  RunConfig c = config;
  c.rate_pps = 0;
  for (int i = 0; i < 2; ++i) {  // the faster of two: the first also warms the caches and the allocator
    RunResult unpaced = run(trace, truth, c, &wire);
    z.unpaced_pps = std::max(z.unpaced_pps, unpaced.packets / std::max(unpaced.seconds, 1e-9));
  }
  double hi = high > 0 ? high : 2 * z.unpaced_pps, lo = low > 0 ? low : low_fraction * z.unpaced_pps;
  if (lo >= hi) lo = 0;
  // A probe passes when nothing dropped and the wires offered at least 90 % of
  // the rate. Each queue's wire keeps its clock (a packet is due whether or
  // not its worker runs), so a probe is in practice decided by its drops; the
  // rate reported is the one the wires offered.
  constexpr double kWireShortfall = 0.1;
  // A failed probe is tried again before the rate is given up: on a shared
  // VM a worker can lose its CPU for milliseconds, which no ring absorbs,
  // and that says nothing about the rate (each probe records its longest
  // stall, so a reader can tell).
  auto probe = [&](double rate) {
    c.rate_pps = rate;
    for (int attempt = 0; attempt < 2; ++attempt) {
      RunResult r = run(trace, truth, c, &wire);
      double achieved = r.packets / std::max(r.wire_seconds, 1e-9);
      ZeroLossSearch::Probe p{rate, r.drops, achieved};
      for (const RunResult::Queue& q : r.queues) {
        p.preemptions += q.preemptions;
        p.longest_stall_seconds = std::max(p.longest_stall_seconds, q.longest_stall_seconds);
      }
      z.probes.push_back(p);
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
