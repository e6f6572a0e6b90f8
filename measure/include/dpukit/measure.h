// measure: Duet and NitroSketch with their baselines (docs/architecture.md
// §3.1; the papers are cited there). The public face of the system: the
// sketch interface and factory, traces, ground truth and metrics, and the
// datapath that runs an algorithm over a trace on the emulated DPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_packet_path.h"
#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/flow_key.h"
#include "dpukit/core/flow_table.h"

namespace dpukit::measure {

// ------------------------------------------------------------------ sketches

// A per-flow frequency estimator with a fixed memory budget. Single-threaded:
// one instance per dpu worker (Duet's shared lock-free sketch is separate).
class Sketch {
 public:
  virtual ~Sketch() = default;
  virtual std::string name() const = 0;
  // Bytes of counters and key stores actually allocated (<= the budget).
  virtual size_t memory_bytes() const = 0;
  virtual void update(const FlowKey& key, uint32_t count = 1) = 0;
  // One packet of each of keys[0..n): a dpu worker's burst. A sketch that
  // hashes the burst first and prefetches its counters overrides it; the
  // default updates them one at a time.
  virtual void update_burst(const FlowKey* const* keys, size_t n);
  virtual double estimate(const FlowKey& key) const = 0;
  // Flows whose estimate is >= threshold. Sketches that keep keys (Elastic's
  // heavy part, UnivMon's and NitroSketch's heaps) answer from them and may
  // ignore `candidates`; the others estimate every candidate.
  virtual std::vector<std::pair<FlowKey, double>> heavy_hitters(double threshold,
                                                                const std::vector<FlowKey>& candidates) const;
  // Where the algorithm supports it.
  virtual std::optional<double> cardinality() const { return std::nullopt; }
  virtual std::optional<double> entropy() const { return std::nullopt; }
};

struct SketchOptions {
  uint64_t seed = 1;
  // NitroSketch
  // Row-update sampling probability. 0.01, as the paper's comparisons use:
  // there NitroSketch-CMS costs a third of Count-Min a packet at equal memory
  // (at 0.1, 1.5-1.7x more: the top-k heap step of a sampled packet;
  // docs/measure.md, "NitroSketch's default p").
  double sample_p = 0.01;
  bool always_correct = false;       // AlwaysCorrect: p = 1 until converged, then sample_p
  uint64_t always_correct_packets = 0;  // 0 = decide from the L2 estimate (see docs/measure.md)
  size_t top_k = 1000;               // heavy-hitter heap size (NitroSketch, UnivMon)
};

class BudgetError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// "cms", "cs", "elastic", "univmon", "nitro-cms", "nitro-cs", "nitro-univmon".
// Throws std::invalid_argument for an unknown name and BudgetError, with the
// reason, for a budget too small for the algorithm.
std::unique_ptr<Sketch> make_sketch(const std::string& algo, size_t memory_bytes, const SketchOptions& options = {});
const std::vector<std::string>& sketch_algorithms();  // the names above

// ------------------------------------------------------------------ traces

struct Packet {
  FlowKey key;
  uint32_t wire_len = 0;  // bytes on the wire (IP length + link header where known)
  uint64_t ts_ns = 0;     // capture time; 0 where the format has none
};

struct Trace {
  std::string path;
  std::string format;      // "pcap", "pcapng", "dat"
  std::vector<Packet> packets;
  uint64_t skipped = 0;    // frames that are not IPv4 TCP/UDP
  size_t huge_page_bytes = 0;  // of `packets`, backed by 2 MiB pages (load_trace asks; the kernel may refuse)
};

// A capture that cannot be read: names the file and the byte offset.
class TraceError : public std::runtime_error {
 public:
  TraceError(const std::string& path, uint64_t offset, const std::string& what)
      : std::runtime_error(path + ": at byte " + std::to_string(offset) + ": " + what), path_(path), offset_(offset) {}
  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }

 private:
  std::string path_;
  uint64_t offset_;
};

// pcap or pcapng (libpcap; Ethernet, 802.1Q/802.1ad VLAN, raw IP and Linux
// cooked link types), told apart by their magic numbers, or the 13-byte
// ElasticSketch ".dat" record format, which has none: a file named *.dat whose
// size is a multiple of 13. Throws TraceError.
Trace load_trace(const std::string& path);

struct GenOptions {
  std::string preset = "backbone";  // backbone, datacenter, zipf, churn
  uint64_t flows = 100000;
  uint64_t packets = 2000000;
  double skew = 0;                  // Zipf exponent; 0 = the preset's own
  uint64_t seed = 1;
  uint64_t first_flow = 0;          // flows are ranks first_flow.. (waves of new flows)
  double heavy_share = 0.9;         // churn: the heavy tenth of the flows' share of the packets
};
// Writes a synthetic pcap (Ethernet + IPv4 + TCP/UDP). Throws on a bad preset or I/O error.
void generate_trace(const GenOptions& options, const std::string& out_path);

// ------------------------------------------------------------------ truth and metrics

using GroundTruth = std::unordered_map<FlowKey, uint64_t, FlowKeyHash>;
GroundTruth ground_truth(std::span<const Packet> packets);

struct Metrics {
  double are = 0, aae = 0, rmse = 0, wmre = 0;
  double hh_precision = 0, hh_recall = 0, hh_f1 = 0;
  uint64_t hh_true = 0, hh_reported = 0;
};
// ARE, AAE and RMSE over every flow of the truth; WMRE over the flow-size
// distribution (Kumar et al.) of the true sizes against the estimated sizes;
// heavy hitters: flows with true count >= hh_threshold against reported ones.
Metrics evaluate(const GroundTruth& truth, const std::unordered_map<FlowKey, double, FlowKeyHash>& estimates,
                 const std::vector<FlowKey>& reported_heavy, double hh_threshold);

// ------------------------------------------------------------------ the datapath on the emulated DPU
//
//   queue 0's wire ──> hw table match ──> rx ring ──> dpu worker 0 ──> sketch
//   queue 1's wire ──> (one table, shared) ──> rx ring ──> dpu worker 1 ──> sketch
//   ...
//
// One wire per RSS queue, as a NIC's queues are filled in parallel by its
// hardware: the trace is split per queue when planned, and each queue's
// packets go out at that queue's share of the offered rate. A queue's wire
// runs in its worker's own loop, on a clock that leaves out the wire's own
// time (the hardware's work, billed as hw), and there is no central
// dispatch. A full rx ring under an offered rate is a counted drop, as on a
// DPU whose Arm cores cannot keep up; as fast as possible, the wire waits
// instead. Duet adds the table's firmware (insertions, aging) on the hw side
// and a control path on the dpu side that applies its outcomes.

// The wire's work on a trace, done once before any run. On a DPU the NIC's
// parser, its flow-table match and RSS run in the hardware pipeline at line
// rate; here, so that the wire costs what hardware costs, their per-packet
// work is done ahead of time: every packet's RSS queue (Toeplitz over the
// 5-tuple), the trace split per queue, and a dense flow id that only the
// emulated hardware table uses (its match is then one array read: O(1), as
// in hardware). The wires only move positions in their queue's arrays, and
// the dpu workers still read and hash the real key.
struct WirePlan {
  unsigned workers = 0;
  std::vector<uint32_t> flow_id;  // per packet
  std::vector<uint16_t> queue;    // per packet: its dpu worker
  std::vector<FlowKey> flows;     // by flow id
  // One RSS queue's packets, in trace order, each field contiguous: a worker
  // reads only its own queue's memory, front to back, as a NIC's DMA fills a
  // queue's buffers. Read through the trace's index list instead, a worker's
  // share of N queues is 1/N of the trace scattered over all of it, and its
  // per-packet cost grew with N (a line per packet, in an order the
  // prefetcher does not follow). 25 bytes a packet.
  struct Queue {
    std::vector<uint32_t> index;      // each packet's place in the trace
    std::vector<FlowKey> keys;
    std::vector<uint32_t> flow_ids;   // the hardware table's match
    std::vector<uint32_t> wire_lens;  // its byte counters
    size_t packets_before(size_t n) const;  // of the trace's first n packets, how many are this queue's
  };
  std::vector<Queue> queues;
};
WirePlan plan_wire(std::span<const Packet> packets, unsigned workers);

// What is measured and how: the same for an offline run and a live one.
struct AlgorithmConfig {
  std::string algo = "duet";        // algorithms(): a sketch, "duet", or "none" (the datapath alone; offline only)
  size_t memory_bytes = 500 * 1024;
  // TOP and the heavy-hitter threshold: < 1 a fraction of the packets a run
  // replays (offline only: a live run has no length), >= 1 packets.
  double heavy_threshold = 0.0005;
  // Duet's hardware flow table. Capacity 0: offline, twice the flows that can
  // reach TOP (a power of two, 1,024 to 65,536); live, 65,536.
  size_t hw_capacity = 0;
  double hw_insert_rate = 77000;
  uint64_t hw_insert_latency_ns = 20000;
  uint64_t hw_idle_timeout_ns = 1000000000;
  // 0 = sized from the number of flows that can reach TOP (live: the table's
  // capacity), at most a quarter of the budget
  size_t duet_records = 0;
  // 16 or 32; 0 = 16, or 32 where TOP is beyond 16-bit counters' reach (with a warning)
  unsigned duet_counter_bits = 0;
  // Duet's sketch across dpu workers: "shared" (the paper's one sketch with
  // atomic increments) or "partitioned" (one partition per worker, no
  // counter shared between cores). Equal total memory either way.
  // Partitioned by measurement (docs/measure.md, "Duet on several
  // workers"): 2 workers against 1, 0.90x twice the rate as fast as possible
  // and 0.92x zero-loss, where shared gave 0.38x and 0.37x, at an ARE 1.2 %
  // above one worker's.
  std::string duet_sketch = "partitioned";
  // Duet's sketch epoch: its counters hold the light traffic of the last one
  // to two epochs (DuetConfig::epoch_ns). 0 = none (every packet stays).
  uint64_t sketch_epoch_ns = 0;
  SketchOptions sketch;
  // How fast the dpu's CPUs are (docs/core.md): the dpu workers' loops and
  // Duet's control path are time-dilated by 1/F. The wire, the hardware
  // table and its firmware are the NIC's and stay at full speed.
  DpuSpeed dpu_speed;
  // What the dpu's cores pay for the NIC around them (core's
  // dpu_packet_path.h): each packet a worker takes from its ring, receive
  // and transmit (offline runs; live, the real receive path is the cost),
  // and each rule Duet installs or removes. Unset: the preset's, by
  // dpu_speed (none at host or at a bare factor).
  std::optional<DpuPacketPath> packet_path;
  DpuPacketPath dpu_packet_path() const { return packet_path ? *packet_path : DpuPacketPath::of(dpu_speed); }
};

struct RunConfig {
  AlgorithmConfig algorithm;
  unsigned workers = 1;
  double rate_pps = 0;              // offered load; 0 = as fast as possible
  uint64_t packets_limit = 0;       // replay only the first N packets (0 = all)
  uint32_t packet_size = 0;         // every packet's bytes on the wire (0 = the trace's own)
  // The trace is replayed this many times; all but the last are warm-up,
  // as fast as possible with no drops (Duet converges: its heavy flows reach
  // the hardware table), and only the last is timed and paced. Estimates
  // and metrics cover every pass.
  unsigned passes = 1;
  // Workers poll their rx rings, as a DPDK worker does, instead of sleeping
  // until an interrupt would wake them (a batch of packets arrived, or a
  // moment passed): no wake-up latency or cost, a whole core each.
  bool worker_poll = false;
  Placement placement;
  size_t ring_slots = 16384;  // each queue's rx ring: room for a wake-up's latency at tens of Mpps
  uint64_t timeline_every = 0;  // sample hw occupancy every N packets (0 = no timeline)
};

struct TimelinePoint {
  double seconds;
  uint64_t packets;
  uint64_t hw_entries;
  uint64_t promotions;
  uint64_t drops;
};

struct DuetStats {
  unsigned counter_bits = 0;
  uint64_t promotions = 0;       // insert requests made
  uint64_t installed = 0;
  uint64_t refused = 0;          // refusals: the flow went back to the sketch path
  uint64_t aged = 0;
  uint64_t moved_to_record = 0;  // a promoted flow reached TOP in the sketch again (pending, or in flight when installed)
  uint64_t records_full = 0;     // packets that brought a flow to TOP when no record was left (it stays in the sketch)
  uint64_t records = 0;          // promoted-flow records (DuetConfig::records)
  uint64_t records_used = 0;     // in use: flows pending or installed. A refused or aged flow's record is
  uint64_t records_retired = 0;  // retired: its count handed to the caller (Duet::take_retired), the record freed
  uint64_t epochs = 0;           // sketch epochs ended (Duet::rotate_epoch)
  // The dpu time the rules' management was billed (DpuPacketPath): each
  // insertion on the worker that promoted, each removal on the control path.
  uint64_t rule_billed_ns = 0;
};

struct RunResult {
  uint64_t packets = 0;  // offered in the measured pass
  uint64_t bytes = 0;    // offered in the measured pass, on the wire
  unsigned passes = 1;   // the trace's replays; CPU time covers them all
  uint64_t hw_hits = 0;  // packets the hardware table counted in the measured pass
  uint64_t drops = 0;    // full ring under an offered rate
  uint64_t top = 0;      // the heavy threshold in packets
  // The measured pass, until the last worker finished, on the workers' clock:
  // the wall clock with the wires' own time (the NIC's) left out.
  double seconds = 0;
  double wire_seconds = 0;  // the same, until the last wire sent its last packet: the offered rate's time
  // dpu: the workers' time but their wires' share, and Duet's control path;
  // hw: the wires' share of the workers' time (the table's match, the rx
  // ring, the table's firmware)
  CpuAccount cpu;
  uint64_t dpu_work_ns = 0;    // the workers' time inside packet batches (their CPU time also counts polling)
  // Of the dpu CPU time, what time dilation added (AlgorithmConfig::dpu_speed
  // below host speed): the workers' and the control path's. 0 at F = 1.
  uint64_t dpu_dilated_ns = 0;
  // Of the dpu CPU time, what the Arm's packet path was billed
  // (AlgorithmConfig::packet_path): every packet the workers took from
  // their rings, every pass. 0 without one.
  uint64_t dpu_packet_path_ns = 0;
  uint64_t worker_sleeps = 0;  // times a worker slept until its wire's packets would wake it
  size_t memory_bytes = 0;  // what the algorithm really allocated
  bool evaluated = true;    // false for "none": no estimates, no metrics
  std::unordered_map<FlowKey, double, FlowKeyHash> estimates;  // every true flow
  std::vector<FlowKey> heavy_reported;
  Metrics metrics;
  std::optional<double> cardinality, entropy;
  std::optional<FlowTableStats> hw;
  std::optional<DuetStats> duet;
  std::vector<TimelinePoint> timeline;
  // Per RSS queue, in the measured pass: its wire's share of the rate and
  // where its packets went (packets = hw_hits + delivered + drops).
  struct Queue {
    uint64_t packets = 0;
    uint64_t hw_hits = 0;    // counted in the hardware table
    uint64_t delivered = 0;  // reached the worker's sketch
    uint64_t drops = 0;      // found the rx ring full
    double rate_pps = 0;     // the share of the offered rate (0: as fast as possible)
    double wire_seconds = 0;  // until its wire sent its last packet
    double seconds = 0;       // until its worker had measured it
    // Its worker's thread losing its CPU while its wire's clock runs on, as
    // a NIC's does (what falls due beyond the ring's room is dropped): the
    // involuntary context switches, and the longest stretch between two of
    // the wire's turns outside the wire's own time (a burst of the worker's,
    // Duet's polled control path, or a time the CPU was taken away).
    uint64_t preemptions = 0;
    double longest_stall_seconds = 0;
  };
  std::vector<Queue> queues;
};

// The heavy threshold in packets for a trace of `packets` packets.
uint64_t heavy_threshold_packets(double threshold, uint64_t packets);

// Runs `config.algo` over the trace and evaluates it against `truth` (the
// ground truth of the replayed packets). `wire` is the trace's plan for
// config.workers (plan_wire); without one the run makes its own first.
// Throws std::invalid_argument for an unknown algorithm or a plan made for
// another trace or worker count, and BudgetError for a budget too small.
RunResult run(const Trace& trace, const GroundTruth& truth, const RunConfig& config, const WirePlan* wire = nullptr);

std::vector<std::string> algorithms();  // the sketches, "duet" and "none"

// The highest offered rate a run takes with no drops, by binary search over
// config.rate_pps between `low` and `high` packets/s (high = 0: twice the
// faster of two as-fast-as-possible runs), until the bracket is narrower
// than `precision` of its top. A probe passes when a run drops nothing and
// the wires offered at least 90 % of the rate (each keeps its queue's share
// of the rate on its clock: what a worker cannot take is a drop); a failed probe is run once more before the rate is given
// up. The rate found is the highest the wire really offered in a passing probe.
struct ZeroLossSearch {
  double rate_pps = 0;      // the highest rate offered with no drops (what the wire offered, not the target)
  double refused_pps = 0;   // the lowest target rate that failed (0 if none did)
  double unpaced_pps = 0;   // the as-fast-as-possible run's rate
  RunResult at_rate;        // the run at rate_pps
  struct Probe {
    double rate_pps;
    uint64_t drops;
    double achieved_pps;
    // Over the queues: their workers' involuntary context switches and the
    // longest stall. A drop with a stall longer than the ring's room at the
    // queue's rate (ring_slots / rate) is the host taking the worker's CPU,
    // not the rate.
    uint64_t preemptions = 0;
    double longest_stall_seconds = 0;
  };
  std::vector<Probe> probes;
};
// `low_fraction` (with low = 0): the search's floor is this fraction of the
// unpaced rate, so that a search on a busy machine, whose probes drop on the
// worker losing its CPU, ends there instead of halving down to rates whose
// probes each take seconds (rate_pps 0 then, refused_pps the floor).
ZeroLossSearch zero_loss_rate(const Trace& trace, const GroundTruth& truth, const RunConfig& config,
                              const WirePlan& wire, double precision = 0.02, double low = 0, double high = 0,
                              double low_fraction = 0);

// ------------------------------------------------------------------ live measurement on an interface
//
//   interface ──> XDP program: the hardware tier ──> AF_XDP socket per rx queue ──> dpu worker ──> sketch
//                 (BPF hash map = the flow table;     (the NIC's RSS picks           (Duet or a
//                  a hit is counted and done)          the worker)                    baseline)
//
// Needs root (CAP_BPF and CAP_NET_ADMIN); errors say what is missing.
struct LiveConfig {
  // TOP and the heavy-hitter threshold in packets (a live run has no length to take a share of).
  LiveConfig() { algorithm.heavy_threshold = 1000; }
  std::string interface;
  AlgorithmConfig algorithm;
  double duration_s = 0;   // stop after this long (0: no limit)
  uint64_t packets = 0;    // stop once this many flow packets were measured, hw and dpu (0: no limit)
  bool native = false;     // native (driver) XDP instead of generic (skb)
  bool pass_hits = false;  // a hit goes on to the kernel stack instead of being dropped after counting
  Placement placement;
  std::string bpf_object;  // the compiled XDP program; empty: the one the build put beside the tools
  std::string ipfix;       // IPFIX collector host:port for the heavy flows; empty: none
  // Duet reports (IPFIX records, /metrics' largest flows) every interval,
  // each heavy flow's packets since its last record; the baselines, whose
  // sketches belong to their workers, once at the end.
  double export_interval_s = 10;
  std::string metrics;     // bind address of a Prometheus /metrics endpoint during the run; empty: none
  // Duet: keep every flow seen, to give each an estimate at the end (and
  // export each heavy flow's whole estimate). Memory grows with the flows;
  // without it Duet keeps nothing per flow beyond its records, and a run can
  // last any time. The baselines always keep them (their sketches cannot list keys).
  bool all_flows = false;
};

struct LiveResult {
  unsigned workers = 0;  // one per receive queue
  std::string xdp_mode;
  uint64_t top = 0;
  double seconds = 0;
  uint64_t frames = 0;       // frames the XDP program saw
  uint64_t hw_packets = 0;   // counted in the hardware table
  uint64_t dpu_packets = 0;  // flow packets the dpu workers measured
  uint64_t not_a_flow = 0;   // frames that are not IPv4 TCP/UDP
  uint64_t drops = 0;        // frames lost on the way to a worker (AF_XDP ring full or dropped)
  size_t memory_bytes = 0;
  CpuAccount cpu;            // dpu: workers and control; hw: the table's service thread (not the XDP program itself)
  uint64_t dpu_dilated_ns = 0;  // of the dpu CPU time, what time dilation added (0 at F = 1)
  // The XDP program's own CPU time (the kernel's BPF run-time statistics):
  // the hardware tier's per-frame work, which runs in the kernel's receive
  // path and so is in no thread of ours. Not measured where the kernel
  // refuses BPF_ENABLE_STATS (before 5.8, or without CAP_SYS_ADMIN).
  bool xdp_run_time_measured = false;
  uint64_t xdp_run_ns = 0, xdp_runs = 0;
  // every flow a worker saw (Duet without all_flows: the flows holding records at the end)
  std::unordered_map<FlowKey, double, FlowKeyHash> estimates;
  std::vector<FlowKey> heavy_reported;
  std::optional<FlowTableStats> hw;
  std::optional<DuetStats> duet;
  uint16_t metrics_port = 0;
  uint64_t ipfix_records = 0, ipfix_errors = 0;
};

// Measures the interface until `stop` is set, the duration passes or enough
// packets were measured. Throws std::invalid_argument for a bad
// configuration, BudgetError for a budget too small, and LiveError (from
// measure's private live code: a std::runtime_error) with what the kernel or
// the machine refused.
LiveResult run_live(const LiveConfig& config, const std::atomic<bool>& stop);

}  // namespace dpukit::measure
