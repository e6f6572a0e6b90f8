// The measure datapath on the emulated DPU (ARCHITECTURE.md §2):
//
//   trace replay ──> hw stage ──> RSS ──> one SPSC ring per dpu worker ──> sketch
//   (the wire)       (NIC thread: flow-table match for Duet, RSS, enqueue)    (dpu workers)
//
// A full ring under an offered rate is a counted drop, as on a DPU whose Arm
// cores cannot keep up; as fast as possible, the wire waits instead. Duet adds
// a control thread on the dpu side that applies the flow table's outcomes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"
#include "duet.h"

namespace dpukit::measure {

struct RunConfig {
  std::string algo = "duet";
  size_t memory_bytes = 500 * 1024;
  unsigned workers = 1;
  double rate_pps = 0;              // offered load; 0 = as fast as possible
  double heavy_threshold = 0.0005;  // < 1: a fraction of the packets; >= 1: packets
  uint64_t packets_limit = 0;       // replay only the first N packets (0 = all)
  // Duet's hardware flow table
  size_t hw_capacity = 0;  // 0 = twice the flows that can reach TOP (a power of two, 1,024 to 65,536)
  double hw_insert_rate = 77000;
  uint64_t hw_insert_latency_ns = 20000;
  uint64_t hw_idle_timeout_ns = 1000000000;
  size_t duet_records = 0;  // 0 = sized from the number of flows that can reach TOP
  unsigned duet_counter_bits = 32;
  SketchOptions sketch;
  Placement placement;
  size_t ring_slots = 16384;  // per worker: room for a wake-up's latency at tens of Mpps
  uint64_t timeline_every = 0;  // sample hw occupancy every N packets (0 = no timeline)
};

struct TimelinePoint {
  double seconds;
  uint64_t packets;
  uint64_t hw_entries;
  uint64_t promotions;
  uint64_t drops;
};

struct RunResult {
  uint64_t packets = 0;  // offered
  uint64_t drops = 0;    // full ring under an offered rate
  uint64_t top = 0;      // the heavy threshold in packets
  double seconds = 0;
  CpuAccount cpu;
  uint64_t dpu_work_ns = 0;    // the workers' time inside packet batches (their CPU time also counts wake-ups)
  uint64_t worker_sleeps = 0;  // times a worker found its ring empty and slept
  size_t memory_bytes = 0;  // what the algorithm really allocated
  std::unordered_map<FlowKey, double, FlowKeyHash> estimates;  // every true flow
  std::vector<FlowKey> heavy_reported;
  Metrics metrics;
  std::optional<double> cardinality, entropy;
  std::optional<FlowTableStats> hw;
  std::optional<Duet::Stats> duet;
  std::vector<TimelinePoint> timeline;
};

// The heavy threshold in packets for a trace of `packets` packets.
uint64_t heavy_threshold_packets(double threshold, uint64_t packets);

// Runs `config.algo` over the trace and evaluates it against `truth` (the
// ground truth of the replayed packets). Throws std::invalid_argument for an
// unknown algorithm or a budget too small (BudgetError).
RunResult run(const Trace& trace, const GroundTruth& truth, const RunConfig& config);

std::vector<std::string> algorithms();  // the sketches and "duet"

}  // namespace dpukit::measure
