// Duet (docs/architecture.md, Papers): heavy flows counted by the hardware flow table,
// light flows by one Count-Min shared by every dpu worker with lock-free
// atomic updates; a flow that reaches TOP in the sketch is promoted into the
// hardware table with count TOP and its sketch counters are reset.
//
// Algorithm 1 (insertion) is on_sketch_path(), run by a dpu worker for each
// packet that missed the hardware table; Algorithm 2 (query) is estimate().
//
// Beyond the paper, which does not say what happens while an insertion is in
// flight: every promoted flow gets a record, touched only on the rare path
// (a flow reaching TOP) and by the control path, so a packet on the sketch
// path costs what a Count-Min update costs. Packets of a promoted flow that
// still reach a worker — while its insertion is pending, in flight in a ring
// when it was installed, or after a refusal — are counted in the sketch; when
// they bring the flow to TOP again, that count moves into the record and the
// counters are reset again, so nothing is lost or counted twice:
//   estimate = sketch minimum + record base + (hw counter - TOP, if installed).
// A refused flow is promoted again at its next TOP. Aging (Case 5) moves the
// hardware count into the record and returns the flow to the sketch.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "dpukit/core/flow_key.h"
#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"

namespace dpukit::measure {

struct DuetConfig {
  size_t memory_bytes = 500 * 1024;  // the dpu side's budget: Count-Min counters + promoted-flow records
  uint64_t top = 1000;               // TOP, in packets
  size_t records = 1024;             // promoted-flow records (records_bytes() of the budget)
  // 16 by default, or 32 as in the paper: a flow leaves the sketch at TOP, so its
  // counters only ever hold light flows, and half-width counters give twice
  // as many per row in the same bytes (Elastic's light part does the same
  // with 8 bits). Needs TOP <= kMaxTop16. Counters saturate, never wrap.
  unsigned counter_bits = 16;
  uint64_t seed = 1;
  // Exactly one dpu worker updates the sketch: increments need no lock
  // prefix. With several workers they are atomic fetch-adds (the paper's).
  bool single_writer = false;
};

class Duet {
 public:
  static constexpr int kRows = 3;  // "3 arrays, 3 hash functions, 32-bit counters"
  static constexpr size_t kRecordBytes = 32;
  // The records are an open-addressed table with 3 slots for every 2
  // records: at most two-thirds full, a lookup of a flow without a record
  // ends within a few slots. With a slot per record it probed the whole
  // table once the records ran out, on every packet of every flow that
  // reached TOP after that (a 30-pass run: 4.8 M such packets, 12.7 Mpps).
  static constexpr size_t record_slots(size_t records) { return records + (records + 1) / 2; }
  // What `records` promoted-flow records take of the budget.
  static constexpr size_t records_bytes(size_t records) { return record_slots(records) * kRecordBytes; }
  // The most records `bytes` hold.
  static constexpr size_t records_in(size_t bytes) { return bytes / kRecordBytes * 2 / 3; }
  // With 16-bit counters: a quarter of their range, the rest for the light
  // flows that share a counter with a flow on its way to TOP.
  static constexpr uint64_t kMaxTop16 = 16383;

  // Throws std::invalid_argument if the budget cannot hold the records and a usable sketch.
  Duet(const DuetConfig& config, FlowTable& hw);
  ~Duet();

  // Algorithm 1, lines 6-24: a packet that missed the hardware table, on the
  // dpu worker its flow is pinned to by RSS. Safe on any number of workers at once.
  void on_sketch_path(const FlowKey& key);
  // The same for a worker's burst of packets, keys[0..n), in order.
  void on_sketch_path_burst(const FlowKey* const* keys, size_t n);

  // The control path: applies the hardware table's outcomes (installed,
  // refused, aged). Returns how many events it applied. One thread at a time.
  size_t apply_hw_events();

  // Algorithm 2, plus the records. Exact for heavy flows; call with the datapath quiescent.
  double estimate(const FlowKey& key) const;
  // What the hardware table holds for a key, if anything.
  std::optional<FlowCounters> hw_count(const FlowKey& key) const { return hw_.query(key); }

  using Stats = DuetStats;
  Stats stats() const;
  size_t memory_bytes() const;
  size_t width() const { return width_; }
  unsigned counter_bits() const { return config_.counter_bits; }
  uint64_t top() const { return config_.top; }

 private:
  struct Record;
  struct Hashes {
    uint32_t idx[kRows];
    uint32_t rec;
  };
  Hashes hashes(const FlowKey& key) const;
  Record* find_record(const FlowKey& key, uint32_t start) const;
  Record* claim_record(const FlowKey& key, uint32_t start);
  uint64_t sketch_min(const Hashes& h) const;
  size_t counter_bytes() const { return config_.counter_bits / 8; }
  template <class T>
  std::atomic<T>* counters() const;
  template <bool kSingleWriter, class T>
  uint64_t add_one(const Hashes& h);  // increments the flow's counters; returns the minimum before
  template <bool kSingleWriter, class T>
  void sketch_path_burst(const FlowKey* const* keys, size_t n);
  template <class T>
  uint64_t sketch_min(const Hashes& h) const;
  template <class T>
  void reset_counters(const Hashes& h, uint64_t amount);
  void reset_counters(const Hashes& h, uint64_t amount);
  [[gnu::noinline, gnu::cold]] void on_top(const FlowKey& key, const Hashes& h, uint64_t count);

  DuetConfig config_;
  FlowTable& hw_;
  size_t width_;
  uint64_t hash_seed_;  // the rows' RowHash seed: the Count-Min baseline's with the same seed
  // kRows x width_, one of the two by config_.counter_bits
  std::unique_ptr<std::atomic<uint32_t>[]> counters32_;
  std::unique_ptr<std::atomic<uint16_t>[]> counters16_;
  size_t record_slots_;  // record_slots(config_.records)
  std::unique_ptr<Record[]> records_;
  std::atomic<uint64_t> promotions_{0}, installed_{0}, refused_{0}, aged_{0}, moved_{0}, records_full_{0};
  std::atomic<size_t> records_used_{0};
  std::atomic<size_t> longest_probe_{0};  // the furthest any record sits from its key's start
  std::vector<FlowEvent> events_;  // control path scratch
};

}  // namespace dpukit::measure
