#include "flow_count.h"

#include <cstring>

#include "dpukit/core/random.h"

namespace dpukit::bench::e2e {

uint64_t flow_digest_term(const FlowKey& key) { return mix64(flow_hash(key, 0xD16E57ull)) | 1; }

SoftFlowTable::SoftFlowTable(size_t expected_flows) {
  size_t n = 16;
  while (n < expected_flows * 2) n <<= 1;
  slots_ = std::make_unique<Slot[]>(n);
  mask_ = n - 1;
}

FlowKey SoftFlowTable::key_of(const Slot& s) {
  FlowKey k;
  std::memcpy(k.bytes.data(), &s.lo, 8);
  const uint64_t hi = s.hi & ~kOccupied;
  std::memcpy(k.bytes.data() + 8, &hi, 5);  // little-endian: the low 5 bytes hold key bytes 8-12
  return k;
}

SoftFlowTable::Entry* SoftFlowTable::find(const FlowKey& key) {
  uint64_t lo, hi;
  key.to_words(lo, hi);
  hi |= kOccupied;
  for (size_t i = flow_hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (!(s.hi & kOccupied)) return nullptr;
    if (s.hi == hi && s.lo == lo) return &s.entry;
  }
}

SoftFlowTable::Entry& SoftFlowTable::find_or_add(const FlowKey& key, bool* added) {
  uint64_t lo, hi;
  key.to_words(lo, hi);
  hi |= kOccupied;
  for (size_t i = flow_hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.hi == hi && s.lo == lo) {
      if (added) *added = false;
      return s.entry;
    }
    if (!(s.hi & kOccupied)) {
      if ((size_ + 1) * 2 > slots()) {  // keep at most half full: short probes
        grow();
        return find_or_add(key, added);
      }
      s.lo = lo;
      s.hi = hi;
      s.entry = Entry{};
      ++size_;
      if (added) *added = true;
      return s.entry;
    }
  }
}

void SoftFlowTable::grow() {
  std::unique_ptr<Slot[]> old = std::move(slots_);
  const size_t old_slots = mask_ + 1;
  slots_ = std::make_unique<Slot[]>(old_slots * 2);
  mask_ = old_slots * 2 - 1;
  for (size_t j = 0; j < old_slots; ++j) {
    const Slot& s = old[j];
    if (!(s.hi & kOccupied)) continue;
    size_t i = flow_hash(key_of(s)) & mask_;
    while (slots_[i].hi & kOccupied) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

MissPath::MissPath(EmulatedFlowTable& table, size_t expected_flows) : table_(table), sw_(expected_flows) {
  events_.reserve(256);
}

void MissPath::on_miss(const FlowKey& key, uint32_t bytes) {
  SoftFlowTable::Entry& e = sw_.find_or_add(key);
  ++e.counters.packets;
  e.counters.bytes += bytes;
  ++stats_.sw_packets;
  if (e.hw == SoftFlowTable::HwState::kNone) {
    // Installed with zero counts: the entry counts only what hits in hardware,
    // the software table keeps what it saw, and the two add up per flow.
    table_.request_insert(key, FlowCounters{0, 0});
    e.hw = SoftFlowTable::HwState::kRequested;
    ++stats_.requested;
  } else if (e.hw == SoftFlowTable::HwState::kInstalled) {
    // A packet the NIC looked up before the entry was in, handed over after.
    ++stats_.miss_after_install;
  }
}

size_t MissPath::poll_events() {
  events_.clear();
  const size_t n = table_.poll_events(events_, 256);
  for (const FlowEvent& ev : events_) {
    SoftFlowTable::Entry* e = sw_.find(ev.key);
    if (!e) continue;
    if (ev.kind == FlowEvent::Kind::kInserted) {
      e->hw = SoftFlowTable::HwState::kInstalled;
      ++stats_.installed;
    } else if (ev.kind == FlowEvent::Kind::kRefused) {
      e->hw = SoftFlowTable::HwState::kRefused;  // stays in software for good
      ++stats_.refused;
    }
  }
  return n;
}

MissPath::Totals software_totals(const SoftFlowTable& table) {
  MissPath::Totals t;
  table.for_each([&](const FlowKey& k, const SoftFlowTable::Entry& e) {
    ++t.flows;
    t.packets += e.counters.packets;
    t.sw_packets += e.counters.packets;
    t.bytes += e.counters.bytes;
    t.digest += e.counters.packets * flow_digest_term(k);
  });
  return t;
}

MissPath::Totals MissPath::totals() const {
  Totals t;
  // Every flow the hardware holds was requested from here, so walking the
  // software table visits every flow.
  sw_.for_each([&](const FlowKey& k, const SoftFlowTable::Entry& e) {
    const FlowCounters hwc =
        e.hw == SoftFlowTable::HwState::kNone ? FlowCounters{} : table_.query(k).value_or(FlowCounters{});
    const uint64_t hw = hwc.packets, hw_bytes = hwc.bytes;
    ++t.flows;
    t.sw_packets += e.counters.packets;
    t.hw_packets += hw;
    t.packets += e.counters.packets + hw;
    t.bytes += e.counters.bytes + hw_bytes;
    t.digest += (e.counters.packets + hw) * flow_digest_term(k);
  });
  return t;
}

}  // namespace dpukit::bench::e2e
