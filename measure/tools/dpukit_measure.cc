// dpukit-measure: Duet, NitroSketch and the baseline sketches on the emulated DPU.
//
//   run      one algorithm over one trace: accuracy, speed, CPU per place
//   compare  a grid of algorithms x memory budgets over one trace
//   live     measure a live interface (XDP + AF_XDP)
//   zero-loss the highest offered rate one algorithm takes with no drops
//   gen      write a synthetic trace (pcap)
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "dpukit/core/cli.h"
#include "dpukit/core/results.h"
#include "dpukit/measure.h"

namespace dpukit::measure {
namespace {

const char* kTool = "dpukit-measure";

// Live, Duet's sketch epoch by default (--sketch-epoch): a live run has no
// end, and without an epoch its counters fill with light flows until every
// new flow reaches TOP at once. 10 s: a flow is heavy if it sends TOP packets
// within about 10 s (100 packets/s at the default TOP of 1,000), the same
// as --export-interval's default. Two epochs of light traffic put
// 2 x 10 s x rate / w packets in a counter; at 500 KB (w about 32,700 per
// row with an epoch) that stays below TOP up to about 1.6 M light packets/s
// (60 s: 270,000).
constexpr int kLiveSketchEpochS = 10;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The options offline runs and live runs share: the hardware table's model
// (its capacity defaults differ), Duet's counters, NitroSketch's sampling
// and the hash seed.
void add_shared_options(ArgParser& p) {
  p.option("hw-insert-rate", "hardware rule insertions per second (duet)", "77000");
  p.option("hw-insert-latency-us", "hardware rule insertion latency (duet)", "20");
  p.option("hw-idle-timeout-ms", "hardware entry aging; 0 = never (duet)", "1000");
  p.option("duet-counter-bits",
           "width of Duet's sketch counters: 16 (the default, where TOP <= 16383; 32 beyond) or 32 (the paper's)");
  p.option("duet-sketch", "Duet's sketch across dpu workers: shared (the paper's: one sketch, atomic increments "
                          "from every worker) or partitioned (one partition per worker, the flows RSS gives it; no "
                          "counter shared between cores; 2 workers run 1.8x one, shared 0.75x)", "partitioned");
  p.option("duet-records", "promoted-flow records inside Duet's budget; a record is freed when its flow's insertion "
                           "is refused or its hardware entry ages out, so this bounds the flows promoted at once "
                           "(default: run sizes it from the trace, live takes a quarter of the budget, at most "
                           "--hw-capacity)");
  p.option("sketch-epoch", "seconds: Duet's sketch counters hold only the last one to two epochs of light traffic, "
                           "so their noise stays bounded on a run of any length; a flow must reach TOP within about "
                           "an epoch; 0 = never reset (default: run 0, live " + std::to_string(kLiveSketchEpochS) + ")");
  p.option("sample-p", "NitroSketch sampling probability (at 0.1 a sampled packet's top-k heap step makes it dearer than "
                       "the sketch it samples)", "0.01");
  p.option("seed", "hash seed", "1");
  // The dpu workers and Duet's control path are dilated; the wire and the
  // hardware table are the NIC's and stay at full speed.
  p.dpu_speed_option();
  p.option("packet-path-ns", "ns of a dpu core each packet a worker takes from its ring costs it (DPDK receive and "
                             "transmit on the Arm core; offline runs only) (default: the --dpu-speed preset's, "
                             "none at host; docs/core.md)");
  p.option("rule-cost-us", "us of a dpu core each hardware rule Duet installs or removes costs it, with the table "
                           "empty (default: the --dpu-speed preset's, none at host; more entries add the preset's "
                           "per-million cost; docs/core.md)");
}

// Into the AlgorithmConfig an offline run and a live one share;
// `sketch_epoch_s` is --sketch-epoch's default.
void read_shared_options(const ArgParser& p, AlgorithmConfig& c, double sketch_epoch_s) {
  c.hw_insert_rate = p.number("hw-insert-rate");
  c.hw_insert_latency_ns = static_cast<uint64_t>(p.number("hw-insert-latency-us") * 1000);
  c.hw_idle_timeout_ns = static_cast<uint64_t>(p.number("hw-idle-timeout-ms") * 1e6);
  c.duet_counter_bits = p.has("duet-counter-bits") ? static_cast<unsigned>(p.u64("duet-counter-bits")) : 0;
  if (p.has("duet-counter-bits") && c.duet_counter_bits != 16 && c.duet_counter_bits != 32)
    p.fail("--duet-counter-bits must be 16 or 32");
  c.duet_sketch = p.str("duet-sketch");
  if (c.duet_sketch != "partitioned" && c.duet_sketch != "shared")
    p.fail("--duet-sketch must be partitioned or shared, not '" + c.duet_sketch + "'");
  c.duet_records = p.has("duet-records") ? p.u64("duet-records") : 0;
  if (p.has("duet-records") && c.duet_records == 0) p.fail("--duet-records must be > 0");
  c.sketch.sample_p = p.number("sample-p");
  if (!(c.sketch.sample_p > 0 && c.sketch.sample_p <= 1)) p.fail("--sample-p must be in (0, 1]");
  c.sketch.seed = p.u64("seed");
  const double epoch_s = p.has("sketch-epoch") ? p.number("sketch-epoch") : sketch_epoch_s;
  if (!(epoch_s >= 0 && epoch_s <= 1e6)) p.fail("--sketch-epoch must be between 0 and 1e6 seconds");
  c.sketch_epoch_ns = static_cast<uint64_t>(epoch_s * 1e9);
  c.dpu_speed = p.dpu_speed();
  if (p.has("packet-path-ns") || p.has("rule-cost-us")) {
    DpuPacketPath path = DpuPacketPath::of(c.dpu_speed);
    if (p.has("packet-path-ns")) path.packet_ns = p.number("packet-path-ns");
    if (p.has("rule-cost-us")) {
      // Table II's line scaled to start there: more entries still cost more, in proportion.
      const DpuPacketPath table_two = DpuPacketPath::of(DpuSpeed::parse("bluefield2"));
      path.rule_ns = p.number("rule-cost-us") * 1000;
      path.rule_ns_per_million = path.rule_ns * table_two.rule_ns_per_million / table_two.rule_ns;
    }
    if (!(path.packet_ns >= 0 && path.packet_ns <= 1e6)) p.fail("--packet-path-ns must be between 0 and 1e6");
    if (!(path.rule_ns >= 0 && path.rule_ns <= 1e9)) p.fail("--rule-cost-us must be between 0 and 1e6");
    c.packet_path = path;
  }
}

void add_run_options(ArgParser& p) {
  p.option("trace", "pcap, pcapng or .dat capture", "", true);
  p.option("workers", "dpu workers (RSS queues)", "1");
  p.option("rate", "offered load in packets/s; a full ring drops (default: as fast as possible, no drops)");
  p.option("heavy-threshold", "TOP and the heavy-hitter threshold: < 1 a fraction of the packets, >= 1 packets",
           "0.0005");
  p.option("hw-capacity", "hardware flow-table entries (duet; default: twice the flows that can reach TOP)");
  add_shared_options(p);
  p.option("packet-size", "every packet's bytes on the wire, for Gbps and the hardware byte counters "
                          "(default: the trace's own)");
  p.flag("poll", "dpu workers poll their rings (as a DPDK worker does) instead of sleeping when idle");
  p.option("passes", "replay the trace this many times: all but the last as warm-up (Duet converges), "
                     "the last timed and paced", "1");
  p.flag("always-correct", "NitroSketch AlwaysCorrect mode (p = 1 until converged)");
  p.option("top-k", "heavy-hitter heap size (NitroSketch, UnivMon)", "1000");
  p.option("packets", "replay only the first N packets");
  p.option("timeline-every", "sample hw occupancy every N packets");
  p.cpus_option("host-cpus", "CPUs of the host side");
  p.cpus_option("dpu-cpus", "CPUs of the dpu workers");
  p.cpus_option("hw-cpus", "CPU of the hardware side's threads: none in these runs, whose wires (one per RSS queue) "
                          "run in the dpu workers' loops, billed as hw");
  p.option("json", "write the result here");
}

RunConfig run_config(const ArgParser& p, const std::string& algo, size_t memory) {
  RunConfig c;
  AlgorithmConfig& a = c.algorithm;
  a.algo = algo;
  a.memory_bytes = memory;
  a.heavy_threshold = p.number("heavy-threshold");
  a.hw_capacity = p.has("hw-capacity") ? p.u64("hw-capacity") : 0;
  read_shared_options(p, a, 0);  // offline: no epoch, so the accuracy figures stay those of the paper's Duet
  a.sketch.always_correct = p.has("always-correct");
  a.sketch.top_k = p.u64("top-k");
  c.workers = static_cast<unsigned>(p.u64("workers"));
  c.rate_pps = p.has("rate") ? p.number("rate") : 0;
  c.packet_size = p.has("packet-size") ? static_cast<uint32_t>(p.bytes("packet-size")) : 0;
  if (p.has("packet-size") && (c.packet_size < 64 || c.packet_size > 65535))
    p.fail("--packet-size must be between 64 and 65535 bytes");
  c.worker_poll = p.has("poll");
  c.passes = static_cast<unsigned>(p.u64("passes"));
  if (c.passes < 1 || c.passes > 100) p.fail("--passes must be between 1 and 100");
  c.packets_limit = p.has("packets") ? p.u64("packets") : 0;
  c.timeline_every = p.has("timeline-every") ? p.u64("timeline-every") : 0;
  if (c.workers == 0) p.fail("--workers must be at least 1");
  if (!(a.heavy_threshold > 0)) p.fail("--heavy-threshold must be > 0");
  if (p.has("hw-capacity") && a.hw_capacity == 0) p.fail("--hw-capacity must be > 0");
  try {
    c.placement = Placement::plan(p.str("host-cpus"), p.str("dpu-cpus"), p.str("hw-cpus"));
    if (!p.has("hw-cpus")) c.placement.hw = c.placement.host;
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  return c;
}

void check_algo(const std::string& algo) {
  auto all = algorithms();
  if (std::find(all.begin(), all.end(), algo) == all.end())
    throw InputError("unknown algorithm '" + algo + "' (choose from " + join(all) + ")");
}

Trace load(const std::string& path) {
  try {
    return load_trace(path);
  } catch (const TraceError& e) {
    throw InputError(e.what());
  }
}

RunResult run_checked(const Trace& trace, const GroundTruth& truth, const RunConfig& cfg,
                      const WirePlan* wire = nullptr) {
  try {
    return run(trace, truth, cfg, wire);
  } catch (const BudgetError& e) {
    throw InputError(e.what());
  } catch (const std::invalid_argument& e) {
    throw InputError(cfg.algorithm.algo + ": " + e.what());
  }
}

// The packets a run replays: the whole trace, or its first --packets (a view, not a copy).
std::span<const Packet> replayed(const Trace& trace, const RunConfig& cfg) {
  size_t n = cfg.packets_limit ? std::min<size_t>(cfg.packets_limit, trace.packets.size()) : trace.packets.size();
  return std::span<const Packet>(trace.packets).first(n);
}

double true_entropy(const GroundTruth& truth, uint64_t packets) {
  double h = 0;
  for (const auto& [k, c] : truth) {
    double q = double(c) / packets;
    h -= q * std::log2(q);
  }
  return h;
}

nlohmann::json duet_json(const DuetStats& d) {
  return {{"counter_bits", d.counter_bits},   {"promotions", d.promotions},
          {"installed", d.installed},         {"refused", d.refused},
          {"aged", d.aged},                   {"moved_to_record", d.moved_to_record},
          {"records_full", d.records_full},   {"records", d.records},
          {"records_used", d.records_used}, {"records_retired", d.records_retired},
          {"epochs", d.epochs}, {"rule_billed_ns", d.rule_billed_ns}};
}

nlohmann::json metrics_json(const Metrics& m) {
  return {{"are", m.are},
          {"aae", m.aae},
          {"rmse", m.rmse},
          {"wmre", m.wmre},
          {"hh_precision", m.hh_precision},
          {"hh_recall", m.hh_recall},
          {"hh_f1", m.hh_f1},
          {"hh_true", m.hh_true},
          {"hh_reported", m.hh_reported}};
}

// " (dpu at bluefield2, F = 0.25)" where the dpu is slower than a host core, else "".
std::string speed_note(const DpuSpeed& speed) {
  if (speed.full()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, " (dpu at %s, F = %g)", speed.name.c_str(), speed.factor);
  return buf;
}

// The figures of one run, as the JSON contract lists them.
nlohmann::json figures_json(const Trace& trace, const GroundTruth& truth, const RunConfig& cfg, const RunResult& r) {
  const double replayed_packets = double(r.packets) * r.passes;  // CPU time covers every pass
  nlohmann::json f = {
      {"algo", cfg.algorithm.algo},
      {"memory_bytes", cfg.algorithm.memory_bytes},
      {"memory_used_bytes", r.memory_bytes},
      {"packets", r.packets},
      {"flows", truth.size()},
      {"skipped", trace.skipped},
      {"trace_huge_page_bytes", trace.huge_page_bytes},
      {"drops", r.drops},
      {"top", r.top},
      {"seconds", r.seconds},
      {"throughput_mpps", r.packets / r.seconds / 1e6},
      {"throughput_gbps", r.bytes * 8 / r.seconds / 1e9},
      {"offered_mpps", r.packets / r.wire_seconds / 1e6},
      {"bytes", r.bytes},
      {"passes", r.passes},
      {"dpu_cpu_ns_per_packet", double(r.cpu.get(Place::kDpu)) / replayed_packets},
      {"dpu_work_ns_per_packet", double(r.dpu_work_ns) / replayed_packets},
      {"dpu_dilated_ns", r.dpu_dilated_ns},
      {"dpu_packet_path_ns", r.dpu_packet_path_ns},
      // Per packet a worker handled: Duet's workers get only what the hardware table did not count,
      // and a packet dropped at a full ring reached none.
      {"dpu_work_ns_per_worker_packet",
       double(r.dpu_work_ns) / std::max(1.0, replayed_packets - double(r.hw ? r.hw->hits : 0) - double(r.drops))},
      {"worker_sleeps", r.worker_sleeps},
      {"hw_cpu_ns_per_packet", double(r.cpu.get(Place::kHw)) / replayed_packets},
      {"cpu_ns", {{"host", r.cpu.get(Place::kHost)}, {"dpu", r.cpu.get(Place::kDpu)}, {"hw", r.cpu.get(Place::kHw)}}},
  };
  if (r.evaluated) f["metrics"] = metrics_json(r.metrics);
  if (r.cardinality) f["cardinality"] = {{"estimate", *r.cardinality}, {"true", truth.size()}};
  if (r.entropy) f["entropy"] = {{"estimate", *r.entropy}, {"true", true_entropy(truth, r.packets)}};
  if (r.hw)
    f["hw"] = {{"capacity", r.hw->capacity}, {"entries", r.hw->entries},     {"inserts", r.hw->inserted},    {"refused", r.hw->refused_table_full + r.hw->refused_queue_full},
               {"packets", r.hw->hits},        {"aged", r.hw->aged},           {"pending", r.hw->pending},
               {"share_of_packets", double(r.hw_hits) / r.packets}};
  if (r.duet) f["duet"] = duet_json(*r.duet);
  nlohmann::json queues = nlohmann::json::array();  // one wire per RSS queue
  for (const auto& q : r.queues)
    queues.push_back({{"packets", q.packets}, {"hw_hits", q.hw_hits}, {"delivered", q.delivered},
                      {"drops", q.drops}, {"rate_pps", q.rate_pps}, {"wire_seconds", q.wire_seconds},
                      {"seconds", q.seconds}, {"preemptions", q.preemptions},
                      {"longest_stall_seconds", q.longest_stall_seconds}});
  f["queues"] = queues;
  if (!r.timeline.empty()) {
    nlohmann::json t = nlohmann::json::array();
    for (const auto& p : r.timeline)
      t.push_back({{"seconds", p.seconds}, {"packets", p.packets}, {"hw_entries", p.hw_entries},
                   {"promotions", p.promotions}, {"drops", p.drops}});
    f["timeline"] = t;
  }
  return f;
}

nlohmann::json parameters_json(const ArgParser& p, const RunConfig& c, const std::string& trace) {
  const AlgorithmConfig& a = c.algorithm;
  return {{"trace", trace},
          {"workers", c.workers},
          {"rate_pps", c.rate_pps},
          {"heavy_threshold", a.heavy_threshold},
          {"packets_limit", c.packets_limit},
          {"hw_capacity", a.hw_capacity ? nlohmann::json(a.hw_capacity) : nlohmann::json("auto")},
          {"hw_insert_rate", a.hw_insert_rate},
          {"hw_insert_latency_us", a.hw_insert_latency_ns / 1e3},
          {"hw_idle_timeout_ms", a.hw_idle_timeout_ns / 1e6},
          {"sample_p", a.sketch.sample_p},
          {"always_correct", a.sketch.always_correct},
          {"top_k", a.sketch.top_k},
          {"seed", a.sketch.seed},
          {"duet_records", p.has("duet-records") ? nlohmann::json(a.duet_records) : nlohmann::json("auto")},
          {"duet_counter_bits", a.duet_counter_bits ? nlohmann::json(a.duet_counter_bits) : nlohmann::json("auto")},
          {"duet_sketch", a.duet_sketch},
          {"sketch_epoch_s", a.sketch_epoch_ns / 1e9},
          {"packet_size", c.packet_size ? nlohmann::json(c.packet_size) : nlohmann::json("trace")},
          {"worker_poll", c.worker_poll},
          {"passes", c.passes},
          {"dpu_packet_path", a.dpu_packet_path().to_json()}};
}

// The result of a command over --trace with `c`: its placement, dpu speed and parameters.
Result trace_result(const char* command, int argc, char** argv, const ArgParser& p, const RunConfig& c) {
  Result out(std::string(kTool) + " " + command, argc, argv);
  out.set_placement(c.placement);
  out.set_dpu_speed(c.algorithm.dpu_speed);
  out.parameters() = parameters_json(p, c, p.str("trace"));
  return out;
}

std::string dotted(uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." + std::to_string((a >> 8) & 255) + "." +
         std::to_string(a & 255);
}

void dump_estimates(const std::string& path, const GroundTruth& truth, const RunResult& r) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "src_ip,dst_ip,src_port,dst_port,proto,true_count,estimate\n";
  for (const auto& [k, c] : truth) {
    auto it = r.estimates.find(k);
    out << dotted(k.src_ip()) << ',' << dotted(k.dst_ip()) << ',' << k.src_port() << ',' << k.dst_port() << ','
        << int(k.proto()) << ',' << c << ',' << (it == r.estimates.end() ? 0.0 : it->second) << '\n';
  }
  if (!out) throw std::runtime_error("cannot write " + path + " (disk full?)");
}

int cmd_run(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " run", "Run one algorithm over a trace on the emulated DPU and measure it.");
  p.option("algo", "cms, cs, elastic, univmon, nitro-cms, nitro-cs, nitro-univmon, duet, or none (the datapath alone)",
           "", true);
  p.option("memory", "memory budget, e.g. 500KB (K = 1024)", "500KB");
  p.option("dump-estimates", "write every flow's true count and estimate as CSV");
  add_run_options(p);
  p.parse(argc, argv, 2);
  std::string algo = p.str("algo");
  check_algo(algo);
  RunConfig cfg = run_config(p, algo, p.bytes("memory"));
  Trace trace = load(p.str("trace"));
  if (trace.packets.empty()) throw InputError(p.str("trace") + ": no IPv4 TCP/UDP packets to measure");
  GroundTruth truth = ground_truth(replayed(trace, cfg));
  RunResult r = run_checked(trace, truth, cfg);

  Result out = trace_result("run", argc, argv, p, cfg);
  out.parameters()["algo"] = algo;
  out.parameters()["memory_bytes"] = cfg.algorithm.memory_bytes;
  out.figures() = figures_json(trace, truth, cfg, r);
  out.set_cpu(r.cpu);
  out.set_wall_ns(static_cast<uint64_t>(r.seconds * 1e9));
  const Metrics& m = r.metrics;
  std::printf("%s @ %zu B: %llu packets, %zu flows, %.2f Mpps, drops %llu; ", algo.c_str(), cfg.algorithm.memory_bytes,
              (unsigned long long)r.packets, truth.size(), r.packets / r.seconds / 1e6, (unsigned long long)r.drops);
  if (r.evaluated)
    std::printf("ARE %.4f AAE %.3f RMSE %.3f WMRE %.4f HH F1 %.3f; ", m.are, m.aae, m.rmse, m.wmre, m.hh_f1);
  std::printf("dpu %.1f ns/packet%s\n", double(r.cpu.get(Place::kDpu)) / r.packets,
              speed_note(cfg.algorithm.dpu_speed).c_str());
  if (p.has("dump-estimates")) dump_estimates(p.str("dump-estimates"), truth, r);
  if (p.has("json")) out.write(p.str("json"));
  return 0;
}

int cmd_compare(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " compare", "Run a grid of algorithms x memory budgets over one trace.");
  p.option("algos", "comma-separated algorithms", "cms,cs,elastic,duet");
  p.option("memory", "comma-separated budgets", "300KB,400KB,500KB,600KB");
  add_run_options(p);
  p.parse(argc, argv, 2);
  std::vector<std::string> algos = split(p.str("algos"));
  std::vector<std::string> mems = split(p.str("memory"));
  if (algos.empty() || mems.empty()) p.fail("--algos and --memory need at least one value each");
  std::vector<size_t> budgets;
  for (const auto& m : mems) {
    try {
      budgets.push_back(parse_bytes(m));
    } catch (const std::invalid_argument& e) {
      p.fail(std::string("--memory: ") + e.what());
    }
  }
  for (const auto& a : algos) check_algo(a);
  Trace trace = load(p.str("trace"));
  if (trace.packets.empty()) throw InputError(p.str("trace") + ": no IPv4 TCP/UDP packets to measure");
  RunConfig base = run_config(p, algos[0], budgets[0]);
  std::span<const Packet> replay = replayed(trace, base);
  GroundTruth truth = ground_truth(replay);
  WirePlan wire = plan_wire(replay, base.workers);  // the same for every point of the grid
  CpuAccount total;
  double wall = 0;
  nlohmann::json grid = nlohmann::json::array();
  for (const auto& algo : algos) {
    for (size_t mem : budgets) {
      RunConfig cfg = run_config(p, algo, mem);
      RunResult r = run_checked(trace, truth, cfg, &wire);
      for (Place pl : {Place::kHost, Place::kDpu, Place::kHw}) total.add(pl, r.cpu.get(pl));
      wall += r.seconds;
      grid.push_back(figures_json(trace, truth, cfg, r));
      std::printf("%-14s %8zu B  ARE %9.4f  AAE %8.3f  RMSE %9.3f  WMRE %.4f  HH F1 %.3f  %6.2f Mpps  dpu %6.1f ns/pkt\n",
                  algo.c_str(), mem, r.metrics.are, r.metrics.aae, r.metrics.rmse, r.metrics.wmre, r.metrics.hh_f1,
                  r.packets / r.seconds / 1e6, double(r.cpu.get(Place::kDpu)) / r.packets);
      std::fflush(stdout);
    }
  }
  Result out = trace_result("compare", argc, argv, p, base);
  out.parameters()["algos"] = algos;
  out.parameters()["memory_bytes"] = budgets;
  out.figures() = {{"packets", replay.size()}, {"flows", truth.size()}, {"skipped", trace.skipped}, {"grid", grid}};
  out.set_cpu(total);
  out.set_wall_ns(static_cast<uint64_t>(wall * 1e9));
  if (p.has("json")) out.write(p.str("json"));
  return 0;
}

int cmd_gen(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " gen", "Write a synthetic trace as a pcap file.");
  p.option("preset", "backbone (heavy-tailed, many mice), datacenter (~80% of packets in few heavy flows), zipf, "
                     "or churn (a tenth of the flows heavy, with equal counts: a soak's wave)",
           "backbone");
  p.option("flows", "flows at most", "100000").option("packets", "packets", "2000000");
  p.option("skew", "Zipf exponent (default: the preset's)").option("seed", "random seed", "1");
  p.option("first-flow", "number the flows from here: waves written with --first-flow K*flows share no flow", "0");
  p.option("heavy-share", "churn: the heavy flows' share of the packets", "0.9");
  p.option("out", "output pcap", "", true);
  p.parse(argc, argv, 2);
  GenOptions g;
  g.preset = p.str("preset");
  g.flows = p.u64("flows");
  g.packets = p.u64("packets");
  g.skew = p.has("skew") ? p.number("skew") : 0;
  g.seed = p.u64("seed");
  g.first_flow = p.u64("first-flow");
  g.heavy_share = p.number("heavy-share");
  if (g.preset != "backbone" && g.preset != "datacenter" && g.preset != "zipf" && g.preset != "churn")
    p.fail("--preset must be backbone, datacenter, zipf or churn, not '" + g.preset + "'");
  if (g.flows == 0 || g.packets == 0) p.fail("--flows and --packets must be > 0");
  try {
    generate_trace(g, p.str("out"));
  } catch (const std::invalid_argument& e) {  // the generator checks its options: bad input
    p.fail(e.what());
  }
  std::printf("wrote %s: %llu packets, preset %s, at most %llu flows, seed %llu\n", p.str("out").c_str(),
              (unsigned long long)g.packets, g.preset.c_str(), (unsigned long long)g.flows,
              (unsigned long long)g.seed);
  return 0;
}

int cmd_zero_loss(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " zero-loss",
              "The highest offered rate one algorithm takes with no drops (Duet Fig. 5): a binary search over\n"
              "--rate, one replay of the trace per probe. A probe passes when no ring overflowed and the wire\n"
              "really offered the rate. The wire's work (RSS, the hardware match) is planned once, before any run.");
  p.option("algo", "as for run, or none (the datapath alone: the worker's per-packet floor)", "", true);
  p.option("memory", "memory budget, e.g. 500KB (K = 1024)", "500KB");
  p.option("precision", "stop when the bracket is narrower than this fraction of its top", "0.02");
  p.option("low", "a rate known to pass, packets/s (default: search from 0)");
  p.option("high", "a rate known to drop, packets/s (default: twice the unpaced rate)");
  p.option("low-fraction", "without --low: search no lower than this fraction of the unpaced rate (a probe that "
                           "drops there ends the search with rate 0), so that a busy machine's stalls cannot send "
                           "it down to rates whose probes take seconds each", "0");
  add_run_options(p);
  p.parse(argc, argv, 2);
  std::string algo = p.str("algo");
  check_algo(algo);
  RunConfig cfg = run_config(p, algo, p.bytes("memory"));
  if (cfg.rate_pps > 0) p.fail("--rate is what zero-loss searches for; give --low/--high to bound it");
  double precision = p.number("precision");
  if (!(precision > 0 && precision < 1)) p.fail("--precision must be in (0, 1)");
  double low = p.has("low") ? p.number("low") : 0, high = p.has("high") ? p.number("high") : 0;
  if (low < 0 || (high > 0 && high <= low)) p.fail("want 0 <= --low < --high");
  const double low_fraction = p.number("low-fraction");
  if (!(low_fraction >= 0 && low_fraction < 0.5)) p.fail("--low-fraction must be in [0, 0.5)");
  Trace trace = load(p.str("trace"));
  if (trace.packets.empty()) throw InputError(p.str("trace") + ": no IPv4 TCP/UDP packets to measure");
  std::span<const Packet> replay = replayed(trace, cfg);
  GroundTruth truth = ground_truth(replay);
  WirePlan wire = plan_wire(replay, cfg.workers);
  ZeroLossSearch z;
  try {
    z = zero_loss_rate(trace, truth, cfg, wire, precision, low, high, low_fraction);
  } catch (const BudgetError& e) {
    throw InputError(e.what());
  }
  const RunResult& r = z.at_rate;
  double bytes_per_packet = r.packets ? double(r.bytes) / r.packets : 0;
  Result out = trace_result("zero-loss", argc, argv, p, cfg);
  out.parameters()["algo"] = algo;
  out.parameters()["memory_bytes"] = cfg.algorithm.memory_bytes;
  out.parameters()["precision"] = precision;
  out.parameters()["low_fraction"] = low_fraction;
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& pr : z.probes)
    probes.push_back({{"rate_pps", pr.rate_pps}, {"drops", pr.drops}, {"achieved_pps", pr.achieved_pps},
                      {"preemptions", pr.preemptions}, {"longest_stall_seconds", pr.longest_stall_seconds}});
  nlohmann::json f = {{"algo", algo},
                      {"zero_loss_pps", z.rate_pps},
                      {"zero_loss_mpps", z.rate_pps / 1e6},
                      {"zero_loss_gbps", z.rate_pps * bytes_per_packet * 8 / 1e9},
                      {"refused_pps", z.refused_pps},
                      {"unpaced_pps", z.unpaced_pps},
                      {"probes", probes}};
  if (r.packets) {
    f["at_rate"] = figures_json(trace, truth, cfg, r);
    out.set_cpu(r.cpu);
    out.set_wall_ns(static_cast<uint64_t>(r.seconds * 1e9));
  }
  out.figures() = f;
  std::printf("%s: zero loss up to %.3f Mpps (%.2f Gbps at %.0f B/packet); dropped at %.3f Mpps; unpaced %.3f Mpps; "
              "%zu probes",
              algo.c_str(), z.rate_pps / 1e6, z.rate_pps * bytes_per_packet * 8 / 1e9, bytes_per_packet,
              z.refused_pps / 1e6, z.unpaced_pps / 1e6, z.probes.size());
  if (r.hw) std::printf("; hardware share %.3f", double(r.hw_hits) / r.packets);
  std::printf("%s\n", speed_note(cfg.algorithm.dpu_speed).c_str());
  if (p.has("json")) out.write(p.str("json"));
  return 0;
}

std::atomic<bool> live_stop{false};
extern "C" void on_live_signal(int) { live_stop.store(true); }

int cmd_live(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " live",
              "Measure a live interface: an XDP program is the hardware flow table (a packet of an installed\n"
              "flow is counted in the kernel and goes no further), the other packets reach one dpu worker per\n"
              "receive queue through AF_XDP, and Duet or a baseline sketch runs on them. Needs root. Stops at\n"
              "--duration, --packets, or SIGINT/SIGTERM.");
  p.option("iface", "the interface to measure", "", true);
  p.option("algo", "cms, cs, elastic, univmon, nitro-cms, nitro-cs, nitro-univmon or duet", "duet");
  p.option("memory", "memory budget, e.g. 500KB (K = 1024)", "500KB");
  p.option("heavy-threshold", "TOP and the heavy-hitter threshold, in packets", "1000");
  p.option("duration", "seconds to measure (default: until --packets or a signal)");
  p.option("packets", "stop once this many flow packets were measured (hw and dpu)");
  p.flag("native", "native (driver) XDP instead of generic (skb) mode");
  p.flag("pass-hits", "let packets counted in the hardware table go on to the kernel stack (default: drop them: "
                      "a monitoring port)");
  p.flag("all-flows", "duet: keep every flow seen and report each one's estimate at the end (memory grows with "
                      "the flows; by default only the promoted-flow records, for a run of any length)");
  p.option("hw-capacity", "hardware flow-table entries (the BPF map's size)", "65536");
  add_shared_options(p);
  p.cpus_option("dpu-cpus", "CPUs of the dpu workers and control");
  p.cpus_option("hw-cpus", "CPU of the hardware table's service thread");
  p.option("bpf-object", "the compiled XDP program (default: the build's)");
  p.option("ipfix", "send the heavy flows to this IPFIX collector (host:port): each flow's packets since its "
                    "last record, every --export-interval (duet) or at the end (the baselines)");
  p.option("export-interval", "seconds between Duet's reports (IPFIX, /metrics' largest flows); 0: at the end only",
           "10");
  p.option("metrics", "serve Prometheus /metrics on this address during the run (e.g. 127.0.0.1:9464)");
  p.option("json", "write the result here");
  p.parse(argc, argv, 2);
  LiveConfig c;
  AlgorithmConfig& a = c.algorithm;
  c.interface = p.str("iface");
  a.algo = p.str("algo");
  check_algo(a.algo);
  a.memory_bytes = p.bytes("memory");
  a.heavy_threshold = p.number("heavy-threshold");
  if (!(a.heavy_threshold >= 2)) p.fail("--heavy-threshold must be at least 2 packets");
  c.duration_s = p.has("duration") ? p.number("duration") : 0;
  c.packets = p.has("packets") ? p.u64("packets") : 0;
  c.native = p.has("native");
  c.pass_hits = p.has("pass-hits");
  c.all_flows = p.has("all-flows");
  a.hw_capacity = p.u64("hw-capacity");
  if (a.hw_capacity == 0) p.fail("--hw-capacity must be > 0");
  read_shared_options(p, a, kLiveSketchEpochS);
  // Live packets reach the workers through the kernel's real receive path
  // (AF_XDP), whose cost the workers pay: the model's packet cost would bill it twice.
  DpuPacketPath live_path = a.dpu_packet_path();
  live_path.packet_ns = 0;
  a.packet_path = live_path;
  if (p.has("bpf-object")) c.bpf_object = p.str("bpf-object");
  if (p.has("ipfix")) c.ipfix = p.str("ipfix");
  c.export_interval_s = p.number("export-interval");
  if (!(c.export_interval_s >= 0)) p.fail("--export-interval must be >= 0");
  if (p.has("metrics")) c.metrics = p.str("metrics");
  try {
    c.placement = Placement::plan("", p.str("dpu-cpus"), p.str("hw-cpus"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  std::signal(SIGINT, on_live_signal);
  std::signal(SIGTERM, on_live_signal);
  LiveResult r;
  try {
    r = run_live(c, live_stop);
  } catch (const BudgetError& e) {
    throw InputError(e.what());
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  const double hw_share = r.hw_packets + r.dpu_packets ? double(r.hw_packets) / (r.hw_packets + r.dpu_packets) : 0;
  Result out(std::string(kTool) + " live", argc, argv);
  out.set_placement(c.placement);
  out.set_dpu_speed(a.dpu_speed);
  out.set_backend(std::string("xdp-") + r.xdp_mode);
  out.parameters() = {{"iface", c.interface},       {"algo", a.algo},         {"memory_bytes", a.memory_bytes},
                      {"top", r.top},               {"hw_capacity", a.hw_capacity},
                      {"hw_insert_rate", a.hw_insert_rate}, {"xdp_mode", r.xdp_mode}, {"pass_hits", c.pass_hits},
                      {"sketch_epoch_s", a.sketch_epoch_ns / 1e9},
                      {"dpu_packet_path", a.dpu_packet_path().to_json()}};
  nlohmann::json heavy = nlohmann::json::array();
  for (const auto& k : r.heavy_reported) heavy.push_back({{"flow", k.str()}, {"estimate", r.estimates.at(k)}});
  nlohmann::json f = {{"algo", a.algo},
                      {"workers", r.workers},
                      {"seconds", r.seconds},
                      {"frames", r.frames},
                      {"hw_packets", r.hw_packets},
                      {"dpu_packets", r.dpu_packets},
                      {"not_a_flow", r.not_a_flow},
                      {"drops", r.drops},
                      {"hw_share", hw_share},
                      {"flows", r.estimates.size()},
                      {"memory_used_bytes", r.memory_bytes},
                      {"heavy", heavy},
                      {"ipfix_records", r.ipfix_records},
                      {"ipfix_errors", r.ipfix_errors},
                      {"cpu_ns", {{"dpu", r.cpu.get(Place::kDpu)}, {"hw", r.cpu.get(Place::kHw)}}},
                      {"dpu_dilated_ns", r.dpu_dilated_ns}};
  f["xdp_program"] = r.xdp_run_time_measured
                         ? nlohmann::json{{"cpu_ns", r.xdp_run_ns},
                                          {"runs", r.xdp_runs},
                                          {"ns_per_run", r.xdp_runs ? double(r.xdp_run_ns) / r.xdp_runs : 0.0}}
                         : nlohmann::json(nullptr);
  if (r.hw) f["hw"] = {{"entries", r.hw->entries}, {"inserts", r.hw->inserted},
                       {"refused", r.hw->refused_table_full + r.hw->refused_queue_full}, {"aged", r.hw->aged}};
  if (r.duet) f["duet"] = duet_json(*r.duet);
  out.figures() = f;
  out.set_cpu(r.cpu);
  out.set_wall_ns(static_cast<uint64_t>(r.seconds * 1e9));
  std::printf("%s on %s (%s XDP, %u workers): %.1f s, %llu frames; %llu packets counted in hw (%.1f %%), %llu by the "
              "dpu workers, %llu not flows, %llu dropped; %zu flows, %zu heavy\n",
              a.algo.c_str(), c.interface.c_str(), r.xdp_mode.c_str(), r.workers, r.seconds,
              (unsigned long long)r.frames, (unsigned long long)r.hw_packets, 100 * hw_share,
              (unsigned long long)r.dpu_packets, (unsigned long long)r.not_a_flow, (unsigned long long)r.drops,
              r.estimates.size(), r.heavy_reported.size());
  if (r.xdp_run_time_measured && r.xdp_runs)
    std::printf("the XDP program (the hardware tier): %.0f ns a frame, %.3f s of CPU in the kernel's receive path\n",
                double(r.xdp_run_ns) / r.xdp_runs, r.xdp_run_ns / 1e9);
  if (p.has("json")) out.write(p.str("json"));
  return 0;
}

const Subcommand kCommands[] = {
    {"run", cmd_run, "one algorithm over one trace: accuracy, speed, CPU per place"},
    {"compare", cmd_compare, "a grid of algorithms x memory budgets over one trace"},
    {"live", cmd_live, "measure a live interface: XDP hardware tier, AF_XDP dpu workers"},
    {"zero-loss", cmd_zero_loss, "the highest offered rate one algorithm takes with no drops"},
    {"gen", cmd_gen, "write a synthetic trace (pcap)"},
};

}  // namespace
}  // namespace dpukit::measure

int main(int argc, char** argv) {
  using namespace dpukit::measure;
  return dpukit::run_subcommands(kTool, "Duet, NitroSketch and baseline sketches on the emulated DPU.", kCommands,
                                 argc, argv);
}
