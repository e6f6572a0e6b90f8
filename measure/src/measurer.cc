#include "measurer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "dpukit/core/log.h"

namespace dpukit::measure {

namespace {

size_t default_records(uint64_t packets, uint64_t top, size_t hw_capacity, size_t memory_bytes) {
  // At most packets/TOP flows can each bring TOP packets; a quarter of that
  // bound covers the heavy flows of skewed traffic. Promotions beyond it stay
  // in the sketch (counted as records_full). Live, with no length known, as
  // many as the hardware table holds. Never more than a quarter of the budget.
  uint64_t most = std::max<uint64_t>(1, Duet::records_in(memory_bytes / 4));
  if (packets == 0) return static_cast<size_t>(std::min<uint64_t>(most, hw_capacity));
  uint64_t bound = std::max<uint64_t>(1, packets / std::max<uint64_t>(top, 1));
  return static_cast<size_t>(
      std::min(most, std::clamp<uint64_t>(bound / 4, 128, std::max<uint64_t>(128, hw_capacity))));
}

}  // namespace

uint64_t top_packets(const AlgorithmConfig& config, uint64_t packets) {
  if (packets == 0 && !(config.heavy_threshold >= 2))
    throw std::invalid_argument("live: the heavy threshold must be at least 2 packets");
  return heavy_threshold_packets(config.heavy_threshold, packets);
}

EmulatedFlowTable::Config hw_table_config(const AlgorithmConfig& config, uint64_t packets, uint64_t top) {
  EmulatedFlowTable::Config tc;
  // At most packets/TOP flows can reach TOP in an epoch. A real eSwitch holds
  // far more rules; the emulated table's slots cost the wire cache misses, so
  // by default it is sized to what Duet can use.
  tc.capacity = config.hw_capacity          ? config.hw_capacity
                : packets == 0 ? 65536
                               : std::bit_ceil(std::clamp<uint64_t>(2 * packets / std::max<uint64_t>(top, 1), 1024, 65536));
  tc.insert_rate = config.hw_insert_rate;
  tc.insert_latency_ns = config.hw_insert_latency_ns;
  tc.idle_timeout_ns = config.hw_idle_timeout_ns;
  return tc;
}

Measurer::Measurer(const AlgorithmConfig& cfg, unsigned workers, uint64_t top, uint64_t packets, FlowTable* table)
    : workers_(workers), top_(top), none_(cfg.algo == "none"), table_(table), sinks_(workers),
      dpu_speed_(cfg.dpu_speed) {
  if (workers == 0) throw std::invalid_argument("at least one dpu worker");
  if (cfg.algo == "duet") {
    if (!table) throw std::invalid_argument("duet needs a hardware flow table");
    DuetConfig dc;
    dc.memory_bytes = cfg.memory_bytes;
    dc.top = top;
    dc.records = cfg.duet_records ? cfg.duet_records
                                  : default_records(packets, top, table->capacity(), cfg.memory_bytes);
    dc.seed = cfg.sketch.seed;
    dc.counter_bits = cfg.duet_counter_bits;
    if (dc.counter_bits == 0) {
      dc.counter_bits = top <= Duet::kMaxTop16 ? 16 : 32;
      if (dc.counter_bits == 32)
        log_warn("duet: TOP is " + std::to_string(top) + " packets, beyond 16-bit counters' " +
                 std::to_string(Duet::kMaxTop16) + ": using 32-bit counters");
    }
    dc.single_writer = workers == 1;
    if (cfg.duet_sketch == "partitioned")
      dc.partitions = workers;
    else if (cfg.duet_sketch != "shared")
      throw std::invalid_argument("duet sketch '" + cfg.duet_sketch + "': partitioned or shared");
    dc.epoch_ns = epoch_ns_ = cfg.sketch_epoch_ns;
    dc.table_cost = cfg.dpu_packet_path();
    dc.dpu_factor = cfg.dpu_speed.factor;
    try {
      duet_ = std::make_unique<Duet>(dc, *table);
    } catch (const std::invalid_argument& e) {
      throw BudgetError(e.what());
    }
  } else if (!none_) {
    // Equal total memory: each worker's instance gets an equal share.
    for (unsigned w = 0; w < workers; ++w) sketches_.push_back(make_sketch(cfg.algo, cfg.memory_bytes / workers, cfg.sketch));
  }
}

size_t Measurer::memory_bytes() const {
  if (duet_) return duet_->memory_bytes();
  size_t m = 0;
  for (const auto& s : sketches_) m += s->memory_bytes();
  return m;
}

void Measurer::update_burst(unsigned worker, const FlowKey* const* keys, size_t n) {
  if (duet_) {
    duet_->on_sketch_path_burst(keys, n, duet_->partitions() > 1 ? worker : 0);  // Algorithm 1, lines 6-24
  } else if (!none_) {
    sketches_[worker]->update_burst(keys, n);
  } else {
    uint64_t seen = sinks_[worker].seen;
    for (size_t i = 0; i < n; ++i) {
      uint64_t lo, hi;
      keys[i]->to_words(lo, hi);
      seen += lo ^ hi;
    }
    sinks_[worker].seen = seen;
  }
}

size_t Measurer::control_step() {
  if (!duet_) return 0;
  // Under the lock from the outcomes to the sums: an estimate() meanwhile
  // (the table ages flows out while a run is queried) sees a retired flow's
  // count either in its record or in its sum, never in neither.
  std::lock_guard lock(retired_mu_);
  const size_t n = duet_->apply_hw_events();
  // The flows those outcomes retired: their counts to their sums (offline),
  // and for take_retired() (live).
  if (duet_->take_retired(retired_scratch_) > 0) {
    if (keep_retired_sums_)
      for (const RecordCount& r : retired_scratch_) retired_sums_[r.key] += r.packets;
    if (hand_over_) handed_over_.insert(handed_over_.end(), retired_scratch_.begin(), retired_scratch_.end());
    retired_scratch_.clear();
  }
  return n;
}

size_t Measurer::take_retired(std::vector<RecordCount>& out) {
  std::lock_guard lock(retired_mu_);
  const size_t n = handed_over_.size();
  out.insert(out.end(), handed_over_.begin(), handed_over_.end());
  handed_over_.clear();
  return n;
}

void Measurer::for_each_record(const std::function<void(const RecordCount&)>& f) const {
  if (duet_) duet_->for_each_record(f);
}

void Measurer::control_loop(const std::atomic<bool>& stop) {
  if (!duet_) return;
  auto now = [] {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
  // A step (promotions installed or refused, entries aged, an epoch ended)
  // is paid for as on the dpu's slower core; waiting for events costs no CPU.
  Dilation slow(dpu_speed_);
  slow.start();
  while (!stop.load(std::memory_order_acquire)) {
    if (table_->wait_events(std::chrono::milliseconds(2))) control_step();
    rotate_epoch_if_due(now());
    slow.pay();
  }
  drain();
  slow.pay();
  control_dilated_ns_ = slow.dilated_ns();
}

bool Measurer::poll_control(uint64_t now, uint64_t every_ns) {
  if (!duet_ || now < next_control_ns_) return false;
  control_step();
  rotate_epoch_if_due(now);
  next_control_ns_ = now + every_ns;
  return true;
}

void Measurer::rotate_epoch_if_due(uint64_t now) {
  if (!duet_ || epoch_ns_ == 0) return;
  if (epoch_ends_ns_ == 0) {
    epoch_ends_ns_ = now + epoch_ns_;
    return;
  }
  if (now < epoch_ends_ns_) return;
  const double fill = duet_->rotate_epoch();
  // A control path late by more than an epoch starts the next one now, rather than rotate twice in a row.
  epoch_ends_ns_ += epoch_ns_;
  if (epoch_ends_ns_ <= now) epoch_ends_ns_ = now + epoch_ns_;
  // An epoch's light packets in a counter are the noise every flow's count
  // carries: near TOP, light flows start to reach it.
  if (!warned_epoch_ && fill > static_cast<double>(top_) / 4) {
    warned_epoch_ = true;
    log_warn("duet: an epoch of light traffic put " + std::to_string(static_cast<uint64_t>(fill)) +
             " packets in the average sketch counter, more than a quarter of TOP (" + std::to_string(top_) +
             "): shorten --sketch-epoch, or raise --memory");
  }
}

void Measurer::drain() {
  while (control_step() > 0) {  // every outcome, not just one call's worth
  }
}

double Measurer::estimate(unsigned worker, const FlowKey& key) const {
  // Duet: Algorithm 2 plus the flow's record, and what its retired records counted.
  if (duet_) {
    std::lock_guard lock(retired_mu_);
    auto it = retired_sums_.find(key);
    return duet_->estimate(key, duet_->partitions() > 1 ? worker : Duet::kAnyPartition) +
           (it == retired_sums_.end() ? 0.0 : static_cast<double>(it->second));
  }
  if (none_) return 0;
  return sketches_[worker]->estimate(key);
}

Measurer::Answer Measurer::query(const std::vector<std::vector<FlowKey>>& candidates, double threshold) const {
  Answer a;
  if (none_) return a;
  for (unsigned w = 0; w < candidates.size(); ++w)
    for (const FlowKey& k : candidates[w]) {
      double e = estimate(w, k);
      a.estimates.emplace(k, e);
      if (duet_ && e >= threshold) a.heavy.push_back(k);
    }
  if (!duet_)  // sketches that keep keys answer from them
    for (unsigned w = 0; w < candidates.size(); ++w)
      for (auto& [k, e] : sketches_[w]->heavy_hitters(threshold, candidates[w])) a.heavy.push_back(k);
  return a;
}

std::optional<double> Measurer::cardinality() const {
  if (sketches_.empty() || !sketches_[0]->cardinality()) return std::nullopt;
  double sum = 0;
  for (const auto& s : sketches_) sum += s->cardinality().value_or(0);
  return sum;
}

std::optional<double> Measurer::entropy() const {
  if (sketches_.size() != 1) return std::nullopt;
  return sketches_[0]->entropy();
}

std::optional<DuetStats> Measurer::duet_stats() const {
  if (!duet_) return std::nullopt;
  return duet_->stats();
}

}  // namespace dpukit::measure
