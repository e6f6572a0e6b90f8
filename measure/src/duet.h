// Duet (docs/architecture.md, Papers): heavy flows counted by the hardware flow table,
// light flows by one Count-Min shared by every dpu worker with lock-free
// atomic updates; a flow that reaches TOP in the sketch is promoted into the
// hardware table with count TOP and its sketch counters are reset.
// Algorithm 1 (insertion) is on_sketch_path(), Algorithm 2 (query) estimate().
// Beyond the paper (records of promoted flows, their retirement, the
// measurement epoch): docs/measure.md, "Duet: records, retirement and the epoch".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "dpukit/core/dpu_packet_path.h"
#include "dpukit/core/flow_key.h"
#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"

namespace dpukit::measure {

// What a record counted of a flow: its packets outside the sketch (the
// promotion's count, those moved in while its insertion was under way, and
// the hardware counter above TOP), and the bytes the hardware counted (a
// sketch counts packets only).
struct RecordCount {
  FlowKey key;
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t record = 0;  // which promotion: the record's slot and generation (an exporter's delta key)
};

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
  // The sketch in this many partitions, one per dpu worker, the budget
  // split evenly (each partition's rows start on a cache line of their
  // own). RSS pins a flow's packets to one worker, so worker w's flows live
  // in partition w alone: its increments are plain, as a single writer's,
  // and no counter's line moves between cores (the paper's one shared
  // sketch, partitions = 1, took locked fetch-adds on lines shared by every
  // worker: 2 workers measured less than 1, docs/measure.md). Algorithm 2
  // then answers the largest of the partitions' minima: the flow's own
  // partition's is at least its count, and the others hold only noise.
  unsigned partitions = 1;
  // The sketch's measurement epoch (see above): 0 = none, every packet stays
  // in the sketch (the paper's). Otherwise each counter takes twice its
  // bytes (two halves of counter_bits), so the same budget has half as many
  // counters per row; the caller calls rotate_epoch() every epoch_ns.
  uint64_t epoch_ns = 0;
  // The Arm-side cost of managing the hardware table (DpuPacketPath's rule
  // cost, in ns of a dpu core at `dpu_factor` of a host core's speed): an
  // insertion on the worker that promotes (DOCA Flow's add runs on the
  // caller's core), a removal of an aged entry on the control path. None by
  // default.
  DpuPacketPath table_cost;
  double dpu_factor = 1.0;
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
  // dpu worker its flow is pinned to by RSS. Safe on any number of workers at
  // once, each with its own flows (a flow's packets on one worker, as RSS
  // and the paper have it: its record is claimed by that worker alone).
  // `partition`: the worker's (< config partitions; 0 with one), which only
  // that worker may pass.
  void on_sketch_path(const FlowKey& key, unsigned partition = 0);
  // The same for a worker's burst of packets, keys[0..n), in order.
  void on_sketch_path_burst(const FlowKey* const* keys, size_t n, unsigned partition = 0);

  // The control path: applies the hardware table's outcomes (installed,
  // refused, aged); a refusal or aging retires the flow's record. Returns how
  // many events it applied. One thread at a time.
  size_t apply_hw_events();
  // Moves the flows retired since the last call into `out` (appending) and
  // returns how many. Their records are already free: the caller now holds
  // these counts, and a flow may retire many times. From any thread; call it
  // regularly (they are kept until taken).
  size_t take_retired(std::vector<RecordCount>& out);
  // Every live record (pending or installed) and what it counts now. From
  // any thread, while the datapath runs: the heavy flows of the moment,
  // without a set of every flow seen.
  void for_each_record(const std::function<void(const RecordCount&)>& f) const;

  // Algorithm 2, plus the flow's live record, if any (its retired counts are
  // the caller's). Exact for heavy flows; call with the datapath quiescent.
  // With partitions, from the flow's `partition` (its worker's) where the
  // caller knows it: otherwise the largest of every partition's minima,
  // which holds the flow's count but also the largest of their noise (at 2
  // workers, a light flow's ARE 1.39x the known partition's).
  static constexpr unsigned kAnyPartition = ~0u;
  double estimate(const FlowKey& key, unsigned partition = kAnyPartition) const;

  // With an epoch (config epoch_ns > 0; a no-op returning 0 without one):
  // ends the current epoch. The previous epoch's counts leave the sketch,
  // and the current half becomes the previous one. The control path, one
  // thread at a time, while the workers update: it never writes the half
  // they increment, so no increment is lost. Returns the mean count per
  // counter of the epoch that ended (light packets in a counter: the noise
  // an epoch adds; near TOP, the epoch is too long for the traffic).
  double rotate_epoch();
  bool windowed() const { return config_.epoch_ns > 0; }
  uint64_t epoch_ns() const { return config_.epoch_ns; }
  // What the hardware table holds for a key, if anything.
  std::optional<FlowCounters> hw_count(const FlowKey& key) const { return hw_.query(key); }

  using Stats = DuetStats;
  Stats stats() const;
  size_t memory_bytes() const;
  size_t width() const { return width_; }  // counters per row of one partition
  unsigned partitions() const { return config_.partitions; }
  // Where partition p's counters lie: [begin, end) in bytes from the first
  // partition's (for the test that no two partitions share a cache line).
  std::pair<size_t, size_t> partition_bytes(unsigned p) const;
  unsigned counter_bits() const { return config_.counter_bits; }
  uint64_t top() const { return config_.top; }

 private:
  friend class DuetTestPeer;  // measure/tests/duet_reclaim_test.cc: a worker stalled between look-up and update
  struct Record;
  // A record as a look-up found it: the record and its word then (which
  // carries the generation the caller's updates must still find).
  struct Held {
    Record* rec = nullptr;
    uint64_t word = 0;
  };
  struct Hashes {
    uint32_t idx[kRows];
    uint32_t rec;
  };
  Hashes hashes(const FlowKey& key) const;
  uint32_t record_start(const FlowKey& key) const;  // where the key's records are probed from
  Held find_record(const FlowKey& key, uint32_t start) const;
  Record* claim_record(const FlowKey& key, uint32_t start, uint64_t count);
  bool add_to_record(Held held, uint64_t count);
  void retire(Held held, const FlowKey& key, uint64_t hw_packets_above_top, uint64_t hw_bytes);
  RecordCount count_of(const Record& r, uint64_t word) const;
  uint64_t sketch_min(const Hashes& h, unsigned partition) const;  // or kAnyPartition
  // A counter's bytes: both halves with an epoch.
  size_t counter_bytes() const { return config_.counter_bits / 8 * (windowed() ? 2 : 1); }
  template <class T>
  std::atomic<T>* counters(unsigned partition = 0) const;
  size_t partition_stride() const;  // counters from one partition's start to the next's
  // Calls f.template operator()<kSingleWriter, kEpoch, T>() for this configuration.
  template <class F>
  decltype(auto) with_counters(F&& f);
  template <bool kSingleWriter, bool kEpoch, class T>
  uint64_t add_one(std::atomic<T>* part, const Hashes& h, uint32_t half);  // increments the flow's counters; returns the minimum before
  template <bool kSingleWriter, bool kEpoch, class T>
  void sketch_path_burst(const FlowKey* const* keys, size_t n, unsigned partition);
  template <class T>
  uint64_t sketch_min(const Hashes& h, unsigned partition) const;
  template <class T>
  double rotate_epoch();
  template <class T>
  void reset_counters(const Hashes& h, uint64_t amount, unsigned partition);
  void reset_counters(const Hashes& h, uint64_t amount, unsigned partition);
  void bill_rule();  // one rule's management, at the entries held now
  [[gnu::noinline, gnu::cold]] void on_top(const FlowKey& key, const Hashes& h, uint64_t count, unsigned partition);

  DuetConfig config_;
  FlowTable& hw_;
  size_t width_;
  uint64_t hash_seed_;  // the rows' RowHash seed: the Count-Min baseline's with the same seed
  // With an epoch: which half of each counter is the current epoch's (0 or 1).
  std::atomic<uint32_t> current_half_{0};
  // per partition, kRows x width_ (x 2 halves with an epoch) and padding to
  // a cache line; one of the two by config_.counter_bits
  std::unique_ptr<std::atomic<uint32_t>[]> counters32_;
  std::unique_ptr<std::atomic<uint16_t>[]> counters16_;
  size_t record_slots_;  // record_slots(config_.records)
  std::unique_ptr<Record[]> records_;
  std::atomic<uint64_t> promotions_{0}, installed_{0}, refused_{0}, aged_{0}, moved_{0}, records_full_{0},
      retired_{0}, epochs_{0}, rule_billed_ns_{0};
  std::atomic<size_t> records_used_{0};   // reserved or live: goes down when a record is retired
  std::atomic<size_t> longest_probe_{0};  // the furthest any claim placed a record from its key's start
  std::vector<FlowEvent> events_;  // control path scratch
  std::mutex retired_mu_;          // the control path appends, the caller takes
  std::vector<RecordCount> retired_flows_;
};

}  // namespace dpukit::measure
