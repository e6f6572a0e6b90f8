// The algorithm layer of a measurement, one for the offline datapath
// (datapath.cc) and the live one (live/live_run.cc): what an AlgorithmConfig
// builds (Duet over a hardware flow table, one baseline sketch per dpu
// worker, or nothing), and its three paths:
//   - per packet: a dpu worker hands its whole burst to update_burst();
//   - control: Duet's outcomes of the hardware table (installed, refused,
//     aged) applied by control_step(), from a control thread (control_loop)
//     or a polling worker between bursts (poll_control);
//   - query: estimates and heavy hitters, by query().
// The datapaths own the packets, the threads and the table; the measurer
// owns what is measured.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"
#include "duet.h"

namespace dpukit::measure {

// TOP in packets: `packets` is the length of what a run replays, 0 for a
// live run, which has none to take a share of (a fraction is refused).
// Throws std::invalid_argument.
uint64_t top_packets(const AlgorithmConfig& config, uint64_t packets);

// The hardware table's model from the configuration. Offline, the default
// capacity is what Duet can use (twice the flows that can reach TOP in
// `packets`); live (packets = 0) it is 65,536.
EmulatedFlowTable::Config hw_table_config(const AlgorithmConfig& config, uint64_t packets, uint64_t top);

class Measurer {
 public:
  // `workers`: dpu workers, each fed by its own RSS queue; `top` from
  // top_packets; `packets`: what the run will see (sizes Duet's records;
  // 0 = unknown, live); `table`: Duet's hardware flow table (unused by the
  // baselines). Throws std::invalid_argument for an unknown algorithm and
  // BudgetError for a budget too small.
  Measurer(const AlgorithmConfig& config, unsigned workers, uint64_t top, uint64_t packets, FlowTable* table);

  bool is_duet() const { return duet_ != nullptr; }
  bool is_none() const { return none_; }
  unsigned workers() const { return workers_; }
  uint64_t top() const { return top_; }
  size_t memory_bytes() const;

  // ---- per packet: worker w's burst, keys[0..n), in order. Duet is safe
  // on every worker at once; a baseline sketch belongs to its worker.
  void update_burst(unsigned worker, const FlowKey* const* keys, size_t n);

  // ---- control (Duet; a no-op for the others). One thread at a time.
  // Applies the hardware table's outcomes; returns how many.
  size_t control_step();
  // A control thread: waits for outcomes and applies them until `stop`,
  // then drains what is left. Each step is time-dilated at the config's dpu
  // speed (the control path is the dpu's); control_dilated_ns() says how much
  // was added, once the loop has returned.
  void control_loop(const std::atomic<bool>& stop);
  uint64_t control_dilated_ns() const { return control_dilated_ns_; }
  // A polling worker's control path: at most every `every_ns`. Returns
  // whether it ran (the worker's own dilation pays for it).
  bool poll_control(uint64_t now, uint64_t every_ns);
  // Duet's sketch epoch (AlgorithmConfig::sketch_epoch_ns): ends an epoch
  // once its time has passed, `now` in ns of any steady clock (the first
  // call starts the first epoch). From the control path; the control loop
  // and poll_control call it.
  void rotate_epoch_if_due(uint64_t now);
  // Every outcome still pending (after the workers stopped).
  void drain();

  // ---- Duet's retired flows: a record is retired, its count handed over,
  // when its flow's insertion is refused or its entry ages out (duet.h). By
  // default the measurer keeps their per-flow sums and estimate() adds them,
  // as a collector would (offline: a run's flows are known). A live run
  // exports them: hand_over_retired() before the run (keep_sums: the sums
  // too, for estimates of every flow at the end), then take_retired()
  // regularly, and for_each_record() for the heavy flows holding records now.
  void hand_over_retired(bool keep_sums) {
    hand_over_ = true;
    keep_retired_sums_ = keep_sums;
  }
  size_t take_retired(std::vector<RecordCount>& out);
  void for_each_record(const std::function<void(const RecordCount&)>& f) const;

  // ---- query
  // The estimate of a flow that worker `worker`'s queue carries. Duet's may
  // be read while its workers run; a baseline's with its worker stopped.
  // kAnyWorker: Duet's of a flow whose worker is not known (from every
  // sketch partition).
  static constexpr unsigned kAnyWorker = Duet::kAnyPartition;
  double estimate(unsigned worker, const FlowKey& key) const;
  // Estimates for candidates[w] (the flows worker w's queue carried: RSS
  // pins each flow to one worker), and the flows at or above `threshold`.
  struct Answer {
    std::unordered_map<FlowKey, double, FlowKeyHash> estimates;
    std::vector<FlowKey> heavy;
  };
  Answer query(const std::vector<std::vector<FlowKey>>& candidates, double threshold) const;
  std::optional<double> cardinality() const;  // RSS partitions the flows: distinct counts add up
  std::optional<double> entropy() const;      // one worker's sketch only
  std::optional<DuetStats> duet_stats() const;

 private:
  unsigned workers_;
  uint64_t top_;
  bool none_;
  FlowTable* table_;
  std::unique_ptr<Duet> duet_;
  std::vector<std::unique_ptr<Sketch>> sketches_;  // baselines: one per worker, an equal share of the budget
  // "none": each worker folds its keys' words here, so that reading them is not optimised away.
  struct alignas(64) Sink {
    uint64_t seen = 0;
  };
  std::vector<Sink> sinks_;
  DpuSpeed dpu_speed_;
  uint64_t control_dilated_ns_ = 0;
  uint64_t next_control_ns_ = 0;
  uint64_t epoch_ns_ = 0, epoch_ends_ns_ = 0;
  bool warned_epoch_ = false;
  bool keep_retired_sums_ = true, hand_over_ = false;
  std::vector<RecordCount> retired_scratch_;  // control path
  mutable std::mutex retired_mu_;             // the control path adds, a live reporter reads and takes
  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> retired_sums_;
  std::vector<RecordCount> handed_over_;
};

}  // namespace dpukit::measure
