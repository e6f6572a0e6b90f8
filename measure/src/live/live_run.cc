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
  std::unordered_set<FlowKey, FlowKeyHash> seen;  // flows to report estimates for (candidates)
  std::atomic<uint64_t> packets{0};
  // Flows met for the first time since the reporter last looked (a lock per
  // new flow, not per packet).
  std::mutex fresh_mu;
  std::vector<FlowKey> fresh;
};

// Exports by interval: each heavy flow's packets (and hardware bytes) since
// its last record, so that a collector's sum over the run is the estimate.
// Also keeps the largest flows for /metrics.
struct Reporter {
  uint64_t top = 0;
  uint64_t interval_start_ms = 0;
  std::unordered_set<FlowKey, FlowKeyHash> candidates;
  std::unordered_map<FlowKey, std::pair<uint64_t, uint64_t>, FlowKeyHash> exported;  // packets, bytes
  std::unique_ptr<IpfixExporter> ipfix;
  std::mutex top_mu;
  std::vector<std::pair<FlowKey, double>> largest;

  void gather(std::vector<std::unique_ptr<Worker>>& workers) {
    for (auto& w : workers) {
      std::vector<FlowKey> fresh;
      {
        std::lock_guard lock(w->fresh_mu);
        fresh.swap(w->fresh);
      }
      candidates.insert(fresh.begin(), fresh.end());
    }
  }
  // `heavy`: the flows at or above TOP with their estimates now.
  void report(std::vector<std::pair<FlowKey, double>> heavy, const FlowTable& table, uint64_t now_ms) {
    std::vector<FlowRecord> records;
    for (const auto& [k, e] : heavy) {
      auto& [packets, bytes] = exported[k];
      uint64_t total = static_cast<uint64_t>(e + 0.5);
      uint64_t hw_bytes = 0;
      if (auto hw = table.query(k)) hw_bytes = hw->bytes;
      if (total <= packets) continue;
      records.push_back({k, total - packets, hw_bytes > bytes ? hw_bytes - bytes : 0, interval_start_ms, now_ms});
      packets = total;
      bytes = std::max(bytes, hw_bytes);
    }
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
    // A record is never freed: once all are used, flows that reach TOP stay in the sketch.
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

}  // namespace

LiveResult run_live(const LiveConfig& cfg, const std::atomic<bool>& stop) {
  const AlgorithmConfig& algo = cfg.algorithm;
  if (algo.algo == "none") throw std::invalid_argument("live: --algo none measures nothing");
  LiveResult res;
  res.top = top_packets(algo, 0);

  XdpFlowTable::Options to;
  to.table = hw_table_config(algo, 0, res.top);
  to.bpf_object = cfg.bpf_object;
  to.interface = cfg.interface;
  to.mode = cfg.native ? XdpMode::kNative : XdpMode::kGeneric;
  to.pass_hits = cfg.pass_hits;
  to.account = &res.cpu;
  to.service_cpus = cfg.placement.hw;
  // Every algorithm runs behind the same program: for the baselines nothing is
  // ever installed, so every packet reaches the workers.
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
  reporter.top = res.top;
  if (!cfg.ipfix.empty()) reporter.ipfix = std::make_unique<IpfixExporter>(cfg.ipfix);
  // Duet's estimates may be read while its workers run (its counters and
  // records are atomics); a baseline's sketch belongs to its worker, so
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
  for (unsigned w = 0; w < res.workers; ++w) {
    threads.emplace_back([&, w] {
      if (auto why = pin_current_thread(cfg.placement.dpu.nth(w)); !why.empty()) log_warn("dpu worker: " + why);
      PlaceTimer t(res.cpu, Place::kDpu);
      Worker& me = *workers[w];
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
        if (me.seen.insert(key).second && by_interval) {
          std::lock_guard lock(me.fresh_mu);
          me.fresh.push_back(key);
        }
        if (++n == kBurst) flush();
      };
      while (!done.load(std::memory_order_acquire)) {
        rx.poll_queue(w, on_frame, kPollMs);
        flush();
      }
      while (rx.poll_queue(w, on_frame, 0) > 0) flush();  // what is already in the ring
      flush();
    });
  }
  std::atomic<bool> stop_control{false};
  std::thread control;
  if (is_duet) {
    control = std::thread([&] {
      if (auto why = pin_current_thread(cfg.placement.dpu); !why.empty()) log_warn("dpu control: " + why);
      PlaceTimer t(res.cpu, Place::kDpu);
      measurer.control_loop(stop_control);
    });
  }

  // The run lasts until asked to stop, for the duration, or until enough
  // packets were measured; Duet reports every interval meanwhile.
  auto duet_report = [&] {
    reporter.gather(workers);
    std::vector<std::pair<FlowKey, double>> heavy;
    for (const FlowKey& k : reporter.candidates)
      if (double e = measurer.estimate(0, k); e >= res.top) heavy.emplace_back(k, e);  // Duet's: any worker's
    reporter.report(std::move(heavy), table, wall_ms());
  };
  auto next_report = t0 + std::chrono::duration<double>(cfg.export_interval_s);
  bool warned_records_full = false;
  std::optional<PlaceTimer> report_time;  // the reporter is dpu work
  if (by_interval) report_time.emplace(res.cpu, Place::kDpu);
  for (;;) {
    if (const DuetStats ds = !warned_records_full ? measurer.duet_stats().value_or(DuetStats{}) : DuetStats{};
        ds.records > 0 && ds.records_used >= ds.records) {
      warned_records_full = true;
      log_warn("duet: all " + std::to_string(ds.records) +
               " promoted-flow records are used, and records are never freed: flows that reach TOP from now on "
               "stay in the sketch (raise --duet-records, or restart the measurement)");
    }
    if (by_interval && std::chrono::steady_clock::now() >= next_report) {
      duet_report();
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
  done.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  stop_control.store(true, std::memory_order_release);
  if (control.joinable()) control.join();  // it drains the outcomes that came after the workers stopped
  report_time.reset();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t end_ms = wall_ms();

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
  for (const auto& w : workers) res.dpu_packets += w->packets.load();
  res.hw = table.stats();
  res.duet = measurer.duet_stats();

  // Estimates for every flow a worker saw: a flow reaches the hardware table
  // only by promotion from a worker, so no flow is missed.
  std::vector<std::vector<FlowKey>> routed(res.workers);
  for (unsigned w = 0; w < res.workers; ++w) routed[w].assign(workers[w]->seen.begin(), workers[w]->seen.end());
  Measurer::Answer answer = measurer.query(routed, static_cast<double>(res.top));
  res.estimates = std::move(answer.estimates);
  res.heavy_reported = std::move(answer.heavy);

  // The last interval: what each heavy flow gained since its last record
  // (everything, for a baseline); bytes where the hardware table counted them
  // (a sketch counts packets only).
  std::vector<std::pair<FlowKey, double>> heavy;
  for (const FlowKey& k : res.heavy_reported) heavy.emplace_back(k, res.estimates.at(k));
  reporter.report(std::move(heavy), table, end_ms);
  if (reporter.ipfix) {
    res.ipfix_records = reporter.ipfix->stats().records;
    res.ipfix_errors = reporter.ipfix->stats().send_errors;
  }
  return res;
}

}  // namespace dpukit::measure
