// measure: Duet and NitroSketch with their baselines (papers/duet.md,
// papers/nitrosketch-eval-excerpt.md). The public face of the system: the
// sketch interface and factory, traces, ground truth and metrics, and the
// datapath that runs an algorithm over a trace on the emulated DPU.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dpukit/core/flow_key.h"

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
  double sample_p = 0.1;             // row-update sampling probability
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
  std::string preset = "backbone";  // backbone, datacenter, zipf
  uint64_t flows = 100000;
  uint64_t packets = 2000000;
  double skew = 0;                  // Zipf exponent; 0 = the preset's own
  uint64_t seed = 1;
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

}  // namespace dpukit::measure
