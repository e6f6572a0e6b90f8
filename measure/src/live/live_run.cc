// Live measurement on an interface (the public header draws it): the XDP
// program is the hardware tier, one dpu worker per receive queue takes the
// misses from its AF_XDP socket, and the same Duet (or baseline sketch) runs
// on them as offline. What is measured is exported at the end: IPFIX to a
// collector, and /metrics while the run lasts.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "dpukit/core/log.h"
#include "dpukit/core/prometheus.h"
#include "dpukit/measure.h"
#include "duet.h"
#include "measurer.h"
#include "export/ipfix.h"
#include "live/xdp_flow_table.h"
#include "live/xsk_receiver.h"
#include "trace/parse.h"

namespace dpukit::measure {
namespace {

constexpr int kLinkEthernet = 1;  // DLT_EN10MB: AF_XDP hands over whole Ethernet frames
constexpr int kPollMs = 20;       // a worker's longest sleep when its queue is idle
constexpr size_t kTopFlows = 10;  // heavy flows shown in /metrics
constexpr size_t kBurst = 64;     // flow packets a worker hands the measurer at once

uint64_t wall_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// One dpu worker's own state: only it writes; read once it has stopped, or
// (the counters) by /metrics at any time.
struct Worker {
  // Flows to give estimates for at the end: the baselines' (their sketches
  // cannot list keys), and Duet's with --all-flows. Grows with the flows.
  std::unordered_set<FlowKey, FlowKeyHash> seen;
  std::atomic<uint64_t> packets{0};
  uint64_t dilated_ns = 0;  // what the dpu speed's dilation added (read once it has stopped)
};

// Exports: each heavy flow's packets (and hardware bytes) since its last
// record, so that a collector's sum over the run is what was measured. Also
// keeps the largest flows for /metrics.
//
// Duet reports from its records, every interval and at the end: a record's
// count (its flow's packets outside the sketch) since the record's last
// export, and a retired record's rest once. State is kept per record, and a
// record's goes when it retires: the reporter holds at most the records,
// however many flows a run sees. The packets a flow leaves in the sketch
// after its last record retired (fewer than TOP) are not exported, unless
// every flow is kept (by_flow), where the end reports each heavy flow's
// whole estimate.
struct Reporter {
  uint64_t interval_start_ms = 0;
  bool by_flow = false;  // also keep what each flow exported (the baselines, --all-flows)
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> by_record;             // packets, bytes
  std::unordered_map<FlowKey, std::pair<uint64_t, uint64_t>, FlowKeyHash> exported;  // by_flow: packets, bytes
  std::unique_ptr<IpfixExporter> ipfix;
  std::mutex top_mu;
  std::vector<std::pair<FlowKey, double>> largest;
  std::vector<RecordCount> retired;  // scratch

  void add(std::vector<FlowRecord>& out, const FlowKey& k, uint64_t packets, uint64_t bytes, uint64_t now_ms) {
    out.push_back({k, packets, bytes, interval_start_ms, now_ms});
    if (by_flow) {
      auto& [p, b] = exported[k];
      p += packets;
      b += bytes;
    }
  }
  // One record's count now: what it gained since its last export.
  void add_record(std::vector<FlowRecord>& out, const RecordCount& c, bool retired_now, uint64_t now_ms) {
    auto it = by_record.try_emplace(c.record).first;
    auto& [packets, bytes] = it->second;
    if (c.packets > packets || c.bytes > bytes)
      add(out, c.key, c.packets - std::min(c.packets, packets), c.bytes - std::min(c.bytes, bytes), now_ms);
    packets = std::max(packets, c.packets);
    bytes = std::max(bytes, c.bytes);
    if (retired_now) by_record.erase(it);
  }
  // Duet: the records retired since the last report, then every record now.
  void report_records(Measurer& measurer, uint64_t now_ms) {
    std::vector<FlowRecord> records;
    retired.clear();
    measurer.take_retired(retired);
    for (const RecordCount& r : retired) add_record(records, r, true, now_ms);
    std::vector<std::pair<FlowKey, double>> heavy;
    measurer.for_each_record([&](const RecordCount& c) {
      add_record(records, c, false, now_ms);
      heavy.emplace_back(c.key, measurer.estimate(Measurer::kAnyWorker, c.key));  // a record does not say its worker
    });
    send(records, std::move(heavy), now_ms);
  }
  // `heavy`: flows at or above TOP with their estimates now; each exports
  // what its estimate gained since its last record (by_flow).
  void report_flows(std::vector<std::pair<FlowKey, double>> heavy, const FlowTable& table, uint64_t now_ms) {
    std::vector<FlowRecord> records;
    for (const auto& [k, e] : heavy) {
      const auto [packets, bytes] = exported[k];
      uint64_t total = static_cast<uint64_t>(e + 0.5);
      uint64_t hw_bytes = 0;
      if (auto hw = table.query(k)) hw_bytes = hw->bytes;
      if (total > packets) add(records, k, total - packets, hw_bytes > bytes ? hw_bytes - bytes : 0, now_ms);
    }
    send(records, std::move(heavy), now_ms);
  }
  void send(const std::vector<FlowRecord>& records, std::vector<std::pair<FlowKey, double>> heavy, uint64_t now_ms) {
    if (ipfix) ipfix->send(records);
    interval_start_ms = now_ms;
    std::partial_sort(heavy.begin(), heavy.begin() + std::min(kTopFlows, heavy.size()), heavy.end(),
                      [](const auto& a, const auto& b) { return a.second > b.second; });
    heavy.resize(std::min(kTopFlows, heavy.size()));
    std::lock_guard lock(top_mu);
    largest = std::move(heavy);
  }
};

std::string metrics_text(const std::string& algo, const std::vector<std::unique_ptr<Worker>>& workers,
                         const XdpFlowTable& table, const XskReceiver& rx, const Measurer& measurer,
                         Reporter& reporter) {
  MetricsWriter m;
  uint64_t dpu = 0;
  for (const auto& w : workers) dpu += w->packets.load(std::memory_order_relaxed);
  const auto counters = table.datapath_counters();
  const auto st = table.stats();
  const auto rs = rx.stats();
  m.counter("dpukit_measure_packets_total", "Packets measured, by place: hw = counted in the XDP flow table, "
            "dpu = by a dpu worker's sketch", counters.hits, {{"place", "hw"}, {"algo", algo}});
  m.counter("dpukit_measure_packets_total", "", dpu, {{"place", "dpu"}, {"algo", algo}});
  m.counter("dpukit_measure_not_a_flow_total", "Frames that are not IPv4 TCP/UDP", counters.not_a_flow);
  m.gauge("dpukit_measure_hw_entries", "Entries in the hardware flow table", st.entries);
  m.gauge("dpukit_measure_hw_capacity", "Capacity of the hardware flow table", st.capacity);
  m.counter("dpukit_measure_hw_inserts_total", "Rules the hardware flow table installed", st.inserted);
  m.counter("dpukit_measure_hw_refusals_total", "Insertions the hardware flow table refused",
            st.refused_table_full + st.refused_queue_full + st.refused_exists);
  m.counter("dpukit_measure_hw_aged_total", "Entries aged out of the hardware flow table", st.aged);
  if (const std::optional<DuetStats> duet = measurer.duet_stats()) {
    const DuetStats& ds = *duet;
    m.counter("dpukit_measure_promotions_total", "Flows Duet promoted to the hardware table", ds.promotions);
    m.counter("dpukit_measure_duet_records_retired_total",
              "Promoted-flow records retired (the flow aged out or was refused): count exported, record freed",
              ds.records_retired);
    // Records are freed as flows age out; while all are used, flows that reach TOP stay in the sketch.
    m.gauge("dpukit_measure_duet_records_used", "Promoted-flow records in use", ds.records_used);
    m.gauge("dpukit_measure_duet_records", "Promoted-flow records (--duet-records)", ds.records);
    m.counter("dpukit_measure_duet_records_full_total",
              "Packets that brought a flow to TOP when no record was left (the flow stays in the sketch)",
              ds.records_full);
  }
  m.counter("dpukit_measure_drops_total", "Frames lost before a dpu worker saw them (AF_XDP ring full or dropped)",
            rs.total.rx_dropped + rs.total.rx_ring_full);
  std::lock_guard lock(reporter.top_mu);
  for (const auto& [k, e] : reporter.largest)
    m.gauge("dpukit_measure_top_flow_packets", "The largest heavy flows' estimated packets at the last report",
            e, {{"flow", k.str()}});
  return m.text();
}

// The hardware tier: the XDP program and its flow table on the interface,
// sized as the algorithm's hardware tier (res.top set).
XdpFlowTable::Options hw_tier_options(const LiveConfig& cfg, LiveResult& res) {
  XdpFlowTable::Options to;
  to.table = hw_table_config(cfg.algorithm, 0, res.top);
  to.bpf_object = cfg.bpf_object;
  to.interface = cfg.interface;
  to.mode = cfg.native ? XdpMode::kNative : XdpMode::kGeneric;
  to.pass_hits = cfg.pass_hits;
  to.account = &res.cpu;
  to.service_cpus = cfg.placement.hw;
  return to;
}

// One dpu worker: the frames its receive queue's AF_XDP socket takes (what
// the hardware tier did not count), parsed and handed to the measurer in
// bursts, until `done`.
void dpu_worker(unsigned w, const LiveConfig& cfg, XskReceiver& rx, Measurer& measurer, Worker& me, bool keep_seen,
                const std::atomic<bool>& done, CpuAccount& cpu) {
  if (auto why = pin_current_thread(cfg.placement.dpu.nth(w)); !why.empty()) log_warn("dpu worker: " + why);
  PlaceTimer t(cpu, Place::kDpu);
  // The worker's CPU time is the dpu's (taking frames from its socket,
  // parsing, the sketch): dilated as on a slower core. The XDP program,
  // the hardware tier, runs in the kernel's receive path, not here.
  Dilation slow(cfg.algorithm.dpu_speed);
  FlowKey burst[kBurst];
  const FlowKey* keys[kBurst];
  for (size_t i = 0; i < kBurst; ++i) keys[i] = &burst[i];
  size_t n = 0;
  auto flush = [&] {
    if (n == 0) return;
    measurer.update_burst(w, keys, n);  // Duet: Algorithm 1, lines 6-24
    me.packets.store(me.packets.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    n = 0;
  };
  auto on_frame = [&](const uint8_t* frame, uint32_t len, unsigned) {
    FlowKey& key = burst[n];
    // Not IPv4 TCP/UDP: the XDP program counted it (not_a_flow), whichever way it went.
    if (parse_frame(kLinkEthernet, frame, len, &key) != ParseResult::kOk) return;
    if (keep_seen) me.seen.insert(key);
    if (++n == kBurst) flush();
  };
  slow.start();
  while (!done.load(std::memory_order_acquire)) {
    rx.poll_queue(w, on_frame, kPollMs);
    flush();
    slow.poll();  // waiting in poll_queue costs no CPU, so nothing idle is dilated
  }
  while (rx.poll_queue(w, on_frame, 0) > 0) flush();  // what is already in the ring
  flush();
  slow.pay();
  me.dilated_ns = slow.dilated_ns();
}

// The run lasts until asked to stop, for the duration, or until enough
// packets were measured; Duet reports every interval meanwhile (`report`,
// with `by_interval`).
template <class Report>
void measure_until_end(const LiveConfig& cfg, const std::atomic<bool>& stop, std::chrono::steady_clock::time_point t0,
                       const XdpFlowTable& table, const std::vector<std::unique_ptr<Worker>>& workers,
                       const Measurer& measurer, bool by_interval, Report report) {
  auto next_report = t0 + std::chrono::duration<double>(cfg.export_interval_s);
  bool warned_records_full = false;
  for (;;) {
    if (const DuetStats ds = !warned_records_full ? measurer.duet_stats().value_or(DuetStats{}) : DuetStats{};
        ds.records > 0 && ds.records_used >= ds.records) {
      warned_records_full = true;
      log_warn("duet: all " + std::to_string(ds.records) +
               " promoted-flow records are used: flows that reach TOP stay in the sketch until aging frees one "
               "(raise --duet-records, or shorten --hw-idle-timeout-ms)");
    }
    if (by_interval && std::chrono::steady_clock::now() >= next_report) {
      report();
      next_report += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(cfg.export_interval_s));
    }
    if (stop.load(std::memory_order_relaxed)) break;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cfg.duration_s > 0 && elapsed >= cfg.duration_s) break;
    if (cfg.packets) {
      uint64_t n = table.datapath_counters().hits;
      for (const auto& w : workers) n += w->packets.load(std::memory_order_relaxed);
      if (n >= cfg.packets) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The counters once the workers have stopped: the hardware tier's, the
// workers', the frames lost before them.
void read_counters(LiveResult& res, const XdpFlowTable& table, const XskReceiver& rx,
                   const std::vector<std::unique_ptr<Worker>>& workers, const Measurer& measurer,
                   uint64_t report_dilated_ns) {
  const auto counters = table.datapath_counters();
  const auto rs = rx.stats();
  res.hw_packets = counters.hits;
  res.frames = counters.frames;
  // The program sees every frame; a worker sees only those that reached it
  // while it ran (a kernel's neighbour discovery can arrive after it stopped).
  res.not_a_flow = counters.not_a_flow;
  res.xdp_run_time_measured = counters.run_time_measured;
  res.xdp_run_ns = counters.run_ns;
  res.xdp_runs = counters.runs;
  res.drops = rs.total.rx_dropped + rs.total.rx_ring_full;
  for (const auto& w : workers) {
    res.dpu_packets += w->packets.load();
    res.dpu_dilated_ns += w->dilated_ns;
  }
  res.dpu_dilated_ns += measurer.control_dilated_ns() + report_dilated_ns;
  res.hw = table.stats();
  res.duet = measurer.duet_stats();
}

// The end: the estimates, and the last reports.
void report_at_end(LiveResult& res, Reporter& reporter, Measurer& measurer, const XdpFlowTable& table,
                   const std::vector<std::unique_ptr<Worker>>& workers, bool keep_seen, uint64_t end_ms) {
  // The last interval: Duet's records (the retired ones' rest, and what the
  // others gained).
  if (measurer.is_duet()) reporter.report_records(measurer, end_ms);
  // Estimates for every flow a worker saw (a flow reaches the hardware table
  // only by promotion from a worker, so no flow is missed); Duet without
  // --all-flows: the flows holding records.
  std::vector<std::vector<FlowKey>> routed(res.workers);
  if (keep_seen)
    for (unsigned w = 0; w < res.workers; ++w) routed[w].assign(workers[w]->seen.begin(), workers[w]->seen.end());
  else
    measurer.for_each_record([&](const RecordCount& c) { routed[0].push_back(c.key); });  // Duet's: any worker's
  Measurer::Answer answer = measurer.query(routed, static_cast<double>(res.top));
  res.estimates = std::move(answer.estimates);
  res.heavy_reported = std::move(answer.heavy);

  // Where every flow is kept: what each heavy flow's estimate gained since
  // its last record (everything, for a baseline; for Duet, what it left in
  // the sketch); bytes where the hardware table counted them (a sketch
  // counts packets only).
  if (keep_seen) {
    std::vector<std::pair<FlowKey, double>> heavy;
    for (const FlowKey& k : res.heavy_reported) heavy.emplace_back(k, res.estimates.at(k));
    reporter.report_flows(std::move(heavy), table, end_ms);
  }
  if (reporter.ipfix) {
    res.ipfix_records = reporter.ipfix->stats().records;
    res.ipfix_errors = reporter.ipfix->stats().send_errors;
  }
}

}  // namespace

LiveResult run_live(const LiveConfig& cfg, const std::atomic<bool>& stop) {
  const AlgorithmConfig& algo = cfg.algorithm;
  if (algo.algo == "none") throw std::invalid_argument("live: --algo none measures nothing");
  LiveResult res;
  res.top = top_packets(algo, 0);

  // Every algorithm runs behind the same program: for the baselines nothing is
  // ever installed, so every packet reaches the workers.
  const XdpFlowTable::Options to = hw_tier_options(cfg, res);
  XdpFlowTable table(to);
  XskReceiver rx(table);
  res.workers = rx.queue_count();
  res.xdp_mode = to_string(to.mode);

  Measurer measurer(algo, res.workers, res.top, 0, &table);
  res.memory_bytes = measurer.memory_bytes();
  const bool is_duet = measurer.is_duet();
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned w = 0; w < res.workers; ++w) workers.push_back(std::make_unique<Worker>());

  Reporter reporter;
  // Duet's retired flows go to the reporter, not to per-flow sums.
  const bool keep_seen = !is_duet || cfg.all_flows;
  if (is_duet) measurer.hand_over_retired(cfg.all_flows);
  reporter.by_flow = keep_seen;
  if (!cfg.ipfix.empty()) reporter.ipfix = std::make_unique<IpfixExporter>(cfg.ipfix);
  // Duet's records may be read while its workers run (their words and its
  // counters are atomics); a baseline's sketch belongs to its worker, so
  // baselines report once, at the end.
  const bool by_interval = is_duet && cfg.export_interval_s > 0 && (reporter.ipfix || !cfg.metrics.empty());
  std::unique_ptr<MetricsEndpoint> endpoint;
  if (!cfg.metrics.empty())
    endpoint = std::make_unique<MetricsEndpoint>(
        cfg.metrics, [&] { return metrics_text(algo.algo, workers, table, rx, measurer, reporter); });
  res.metrics_port = endpoint ? endpoint->port() : 0;
  log_info("live: measuring " + cfg.interface + " (" + res.xdp_mode + " XDP, " + std::to_string(res.workers) +
           " dpu worker" + (res.workers == 1 ? "" : "s") + ")" +
           (endpoint ? "; /metrics on port " + std::to_string(res.metrics_port) : ""));

  std::atomic<bool> done{false};
  const uint64_t start_ms = wall_ms();
  reporter.interval_start_ms = start_ms;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < res.workers; ++w)
    threads.emplace_back([&, w] { dpu_worker(w, cfg, rx, measurer, *workers[w], keep_seen, done, res.cpu); });
  std::atomic<bool> stop_control{false};
  std::thread control;
  if (is_duet) {
    control = std::thread([&] {
      if (auto why = pin_current_thread(cfg.placement.dpu); !why.empty()) log_warn("dpu control: " + why);
      PlaceTimer t(res.cpu, Place::kDpu);
      measurer.control_loop(stop_control);
    });
  }

  Dilation report_slow(algo.dpu_speed);  // the reporter is dpu work too
  std::optional<PlaceTimer> report_time;  // the reporter is dpu work
  if (by_interval) report_time.emplace(res.cpu, Place::kDpu);
  measure_until_end(cfg, stop, t0, table, workers, measurer, by_interval, [&] {
    report_slow.start();
    reporter.report_records(measurer, wall_ms());
    report_slow.pay();
  });
  done.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  stop_control.store(true, std::memory_order_release);
  if (control.joinable()) control.join();  // it drains the outcomes that came after the workers stopped
  report_time.reset();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t end_ms = wall_ms();

  read_counters(res, table, rx, workers, measurer, report_slow.dilated_ns());
  report_at_end(res, reporter, measurer, table, workers, keep_seen, end_ms);
  return res;
}

}  // namespace dpukit::measure
