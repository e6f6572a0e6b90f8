// The flow-table program's counting (DPUBench §5.2, the first workload): the
// server looks up each packet's 5-tuple and counts it, adding the flow when
// it is new.
//
// Software version: SoftFlowTable, an open-addressing table. Why not
// std::unordered_map: it allocates a node per new flow on the packet path and
// chases a pointer per lookup; linear probing over one flat array of 40-byte
// slots, kept at most half full, finds a flow in one or two cache lines and
// never allocates except when it doubles (rare, and avoided entirely when the
// expected flow count is given up front).
//
// Hardware version: the emulated eSwitch (core's EmulatedFlowTable) looks up
// every packet on the NIC thread; a hit is counted there. A miss goes to the
// server's software path (MissPath), which counts the packet in its own
// SoftFlowTable and, at the flow's first miss, asks the table to install it
// (asynchronous, at the table's bounded insertion rate). Until the entry is
// in, the flow's packets keep missing and keep being counted in software: a
// flow's true count is its software count plus its hardware entry's count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dpukit/core/flow_key.h"
#include "dpukit/core/flow_table.h"

namespace dpukit::bench::e2e {

// A flow's share of the order-independent digest of per-flow counts: the
// client sums it over the packets it sends and the server over its counts
// (count x term per flow); with no loss the two sums are equal exactly when
// (up to hash collisions) every flow's count matches.
uint64_t flow_digest_term(const FlowKey& key);

class SoftFlowTable {
 public:
  // What the hardware path knows about a flow (unused by the software version).
  enum class HwState : uint8_t { kNone, kRequested, kInstalled, kRefused };
  struct Entry {
    FlowCounters counters;
    HwState hw = HwState::kNone;
  };

  explicit SoftFlowTable(size_t expected_flows = 1024);

  // The flow's entry, added (zeroed) when absent; *added says which.
  Entry& find_or_add(const FlowKey& key, bool* added = nullptr);
  // Counts one packet; true when the flow is new.
  bool add(const FlowKey& key, uint32_t bytes) {
    bool added;
    Entry& e = find_or_add(key, &added);
    ++e.counters.packets;
    e.counters.bytes += bytes;
    return added;
  }
  Entry* find(const FlowKey& key);
  const Entry* find(const FlowKey& key) const { return const_cast<SoftFlowTable*>(this)->find(key); }

  size_t flows() const { return size_; }
  size_t slots() const { return mask_ + 1; }
  size_t memory_bytes() const { return slots() * sizeof(Slot); }

  template <class F>
  void for_each(F&& f) const {  // f(const FlowKey&, const Entry&)
    for (size_t i = 0; i <= mask_; ++i)
      if (slots_[i].hi & kOccupied) f(key_of(slots_[i]), slots_[i].entry);
  }

 private:
  static constexpr uint64_t kOccupied = 1ull << 63;
  struct Slot {
    uint64_t lo = 0, hi = 0;  // the key as FlowKey::to_words gives it; hi carries kOccupied
    Entry entry;
  };
  static FlowKey key_of(const Slot& s);
  void grow();

  std::unique_ptr<Slot[]> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// The software path behind the emulated hardware table: counts what the
// table missed and requests the insertion of each new flow once.
class MissPath {
 public:
  MissPath(EmulatedFlowTable& table, size_t expected_flows);

  void on_miss(const FlowKey& key, uint32_t bytes);
  // Reads the table's insertion outcomes (bookkeeping only: packets of an
  // installed flow hit in hardware whether or not this has run).
  size_t poll_events();

  struct Stats {
    uint64_t sw_packets = 0;   // packets counted here
    uint64_t requested = 0;    // insertions asked for
    uint64_t installed = 0;    // ... that the table reported done
    uint64_t refused = 0;      // ... that it refused (table full, queue full)
    uint64_t miss_after_install = 0;  // packets counted here after their flow's insertion event was read
  };
  const Stats& stats() const { return stats_; }
  const SoftFlowTable& software() const { return sw_; }

  // Per-flow totals (software + hardware), read once the datapath is quiet.
  struct Totals {
    uint64_t flows = 0;
    uint64_t packets = 0;     // sum over flows of sw + hw
    uint64_t sw_packets = 0;
    uint64_t hw_packets = 0;
    uint64_t bytes = 0;
    uint64_t digest = 0;      // sum of count x flow_digest_term
  };
  Totals totals() const;

 private:
  EmulatedFlowTable& table_;
  SoftFlowTable sw_;
  Stats stats_;
  std::vector<FlowEvent> events_;
};

// Totals of a SoftFlowTable alone (the software version).
MissPath::Totals software_totals(const SoftFlowTable& table);

}  // namespace dpukit::bench::e2e
