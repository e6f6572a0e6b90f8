#include "duet.h"

#include "sketches/common.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace dpukit::measure {

namespace {
// Record word: state in the top two bits, packets counted in software below.
constexpr uint64_t kStateShift = 62;
constexpr uint64_t kCountMask = (1ull << kStateShift) - 1;
enum State : uint64_t { kPending = 0, kInstalled = 1, kRefused = 2, kAged = 3 };
inline State state_of(uint64_t word) { return static_cast<State>(word >> kStateShift); }
inline uint64_t make_word(State s, uint64_t count) { return (uint64_t(s) << kStateShift) | count; }

constexpr uint64_t kOccupied = 1ull << 63;
constexpr uint64_t kClaiming = 1ull << 62;  // k1 while the claiming worker writes the key

inline uint32_t fastrange(uint32_t x, size_t n) { return static_cast<uint32_t>((uint64_t(x) * n) >> 32); }

void pack(const FlowKey& key, uint64_t& a, uint64_t& b) {
  a = 0;
  b = 0;
  std::memcpy(&a, key.bytes.data(), 8);
  std::memcpy(&b, key.bytes.data() + 8, 5);
  b |= kOccupied;
}
}  // namespace

struct Duet::Record {
  std::atomic<uint64_t> k0{0}, k1{0};  // the key; k1 == 0: free, kClaiming: being written
  std::atomic<uint64_t> word{0};       // state | packets counted in software in this episode
  std::atomic<uint64_t> base{0};       // packets before this episode's software count: TOP + earlier episodes
};
static_assert(sizeof(std::atomic<uint64_t>) * 4 == Duet::kRecordBytes);

Duet::Duet(const DuetConfig& config, FlowTable& hw) : config_(config), hw_(hw) {
  if (config.top < 2) throw std::invalid_argument("duet: TOP must be at least 2 packets");
  if (config.records == 0) throw std::invalid_argument("duet: at least one promoted-flow record");
  size_t record_bytes = config.records * kRecordBytes;
  if (record_bytes >= config.memory_bytes)
    throw std::invalid_argument("duet: " + std::to_string(config.memory_bytes) + " bytes cannot hold " +
                                std::to_string(config.records) + " promoted-flow records");
  width_ = (config.memory_bytes - record_bytes) / (kRows * sizeof(uint32_t));
  if (width_ < 1)
    throw std::invalid_argument("duet: " + std::to_string(config.memory_bytes) +
                                " bytes leave no counter per row after the records");
  if (width_ > UINT32_MAX) throw std::invalid_argument("duet: budget too large");
  for (int r = 0; r < kRows; ++r) row_seeds_[r] = sketches::derive_seed(config.seed, sketches::SeedPurpose::kRow, r);
  counters_ = std::make_unique<std::atomic<uint32_t>[]>(kRows * width_);
  records_ = std::make_unique<Record[]>(config.records);
}

Duet::~Duet() = default;

size_t Duet::memory_bytes() const { return kRows * width_ * sizeof(uint32_t) + config_.records * kRecordBytes; }

// The same row hashes as the Count-Min baseline built with the same seed, so
// that Duet's sketch is that Count-Min minus what the hardware took over.
// Inlined into its callers: returned through memory, the four 32-bit fields
// were read back as 64-bit words, a store-forwarding stall on every packet.
[[gnu::always_inline]] inline Duet::Hashes Duet::hashes(const FlowKey& key) const {
  Hashes out;
  uint64_t h0 = 0;
  for (int r = 0; r < kRows; ++r) {
    uint64_t h = flow_hash(key, row_seeds_[r]);
    out.idx[r] = sketches::bucket_of(h, static_cast<uint32_t>(width_));
    if (r == 0) h0 = h;
  }
  out.rec = fastrange(static_cast<uint32_t>(h0), config_.records);  // low bits: bucket_of used the high ones
  return out;
}

Duet::Record* Duet::find_record(const FlowKey& key, uint32_t start) const {
  uint64_t a, b;
  pack(key, a, b);
  for (size_t n = 0, i = start; n < config_.records; ++n, i = (i + 1 == config_.records ? 0 : i + 1)) {
    Record& r = records_[i];
    uint64_t k1 = r.k1.load(std::memory_order_acquire);
    if (k1 == 0) return nullptr;  // records are never freed: a free slot ends the probe
    if (k1 == b && r.k0.load(std::memory_order_relaxed) == a) return &r;
  }
  return nullptr;
}

Duet::Record* Duet::claim_record(const FlowKey& key, uint32_t start) {
  uint64_t a, b;
  pack(key, a, b);
  for (size_t n = 0, i = start; n < config_.records; ++n, i = (i + 1 == config_.records ? 0 : i + 1)) {
    Record& r = records_[i];
    uint64_t expected = 0;
    if (r.k1.load(std::memory_order_relaxed) == 0 &&
        r.k1.compare_exchange_strong(expected, kClaiming, std::memory_order_acq_rel)) {
      r.k0.store(a, std::memory_order_relaxed);
      return &r;  // the caller fills it, then publishes k1 = b
    }
  }
  return nullptr;
}

uint64_t Duet::sketch_min(const Hashes& h) const {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  for (int i = 0; i < kRows; ++i)
    m = std::min<uint64_t>(m, counters_[i * width_ + h.idx[i]].load(std::memory_order_relaxed));
  return m;
}

// Counter reset: take the flow's own count out of its counters (never below
// zero), so that it stops inflating the light flows it collides with.
void Duet::reset_counters(const Hashes& h, uint64_t amount) {
  for (int i = 0; i < kRows; ++i) {
    auto& c = counters_[i * width_ + h.idx[i]];
    uint32_t v = c.load(std::memory_order_relaxed);
    while (!c.compare_exchange_weak(v, v > amount ? static_cast<uint32_t>(v - amount) : 0u,
                                    std::memory_order_relaxed)) {
    }
  }
}

[[gnu::always_inline]] inline uint64_t Duet::add_one(const Hashes& h) {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  for (int i = 0; i < kRows; ++i) {
    auto& c = counters_[i * width_ + h.idx[i]];
    uint32_t old;
    if (config_.single_writer) {
      // One worker: nobody else writes, so a plain (non-locked) increment is exact.
      old = c.load(std::memory_order_relaxed);
      c.store(old + 1, std::memory_order_relaxed);
    } else {
      old = c.fetch_add(1, std::memory_order_relaxed);  // sync_fetch_and_add
    }
    m = std::min<uint64_t>(m, old);
  }
  return m;
}

void Duet::on_sketch_path(const FlowKey& key) {
  const Hashes h = hashes(key);
  Record* rec = find_record(key, h.rec);
  if (rec) {
    uint64_t w = rec->word.load(std::memory_order_acquire);
    if (state_of(w) != kAged) {
      // A promoted flow: count it in its record. If aging retires the record
      // between the load and this add, the add lands in the retired episode,
      // which estimate() includes: counted once either way.
      rec->word.fetch_add(1, std::memory_order_relaxed);
      record_packets_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  // Lines 7-20 in one pass: every counter is incremented and its old value
  // gives the minimum. If the flow turns out to reach TOP, the reset below
  // takes the increment back with the flow's count, so the counters end as
  // Algorithm 1 leaves them (read, then update or promote) with one memory
  // pass instead of two.
  const uint64_t min_cnt = add_one(h);
  if (min_cnt + 1 < config_.top) return;
  // Lines 21-24: promotion with count TOP, then the counter reset.
  if (rec) {
    // Returned from the hardware table by aging and heavy again: a new episode.
    uint64_t w = rec->word.load(std::memory_order_relaxed);
    rec->base.fetch_add((w & kCountMask) + config_.top, std::memory_order_relaxed);
    rec->word.store(make_word(kPending, 0), std::memory_order_release);
  } else {
    rec = claim_record(key, h.rec);
    if (!rec) {
      // No record left: the flow stays in the sketch (already counted above).
      records_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    rec->base.store(config_.top, std::memory_order_relaxed);
    rec->word.store(make_word(kPending, 0), std::memory_order_relaxed);
    uint64_t a, b;
    pack(key, a, b);
    rec->k1.store(b, std::memory_order_release);
  }
  reset_counters(h, min_cnt + 1);  // the flow's count, this packet's increment included
  promotions_.fetch_add(1, std::memory_order_relaxed);
  hw_.request_insert(key, {config_.top, 0}, static_cast<uint64_t>(rec - records_.get()));
}

size_t Duet::apply_hw_events() {
  events_.clear();
  hw_.poll_events(events_, 4096);
  for (const FlowEvent& e : events_) {
    Record* rec = find_record(e.key, hashes(e.key).rec);
    if (!rec) continue;  // not a promotion of ours
    uint64_t w = rec->word.load(std::memory_order_acquire);
    switch (e.kind) {
      case FlowEvent::Kind::kInserted:
        while (state_of(w) == kPending &&
               !rec->word.compare_exchange_weak(w, make_word(kInstalled, w & kCountMask), std::memory_order_acq_rel)) {
        }
        installed_.fetch_add(1, std::memory_order_relaxed);
        break;
      case FlowEvent::Kind::kRefused:
        // The table is full or busy: the flow stays exact in its record.
        while (state_of(w) == kPending &&
               !rec->word.compare_exchange_weak(w, make_word(kRefused, w & kCountMask), std::memory_order_acq_rel)) {
        }
        refused_.fetch_add(1, std::memory_order_relaxed);
        break;
      case FlowEvent::Kind::kAged:
      case FlowEvent::Kind::kRemoved:
        if (e.reason == FlowEvent::Reason::kNotFound) break;
        // Case 5: retire the episode — its hardware count (which includes
        // TOP) and its software count go into base; later packets go to the
        // sketch again.
        while (state_of(w) == kInstalled) {
          if (rec->word.compare_exchange_weak(w, make_word(kAged, 0), std::memory_order_acq_rel)) {
            rec->base.fetch_add(e.counters.packets + (w & kCountMask) - config_.top, std::memory_order_relaxed);
            aged_.fetch_add(1, std::memory_order_relaxed);
            break;
          }
        }
        break;
    }
  }
  return events_.size();
}

double Duet::estimate(const FlowKey& key) const {
  const Hashes h = hashes(key);
  const Record* rec = find_record(key, h.rec);
  if (!rec) return static_cast<double>(sketch_min(h));  // Algorithm 2, lines 5-11
  uint64_t w = rec->word.load(std::memory_order_acquire);
  uint64_t base = rec->base.load(std::memory_order_relaxed), sw = w & kCountMask;
  switch (state_of(w)) {
    case kInstalled:
      if (auto c = hw_.query(key)) return static_cast<double>(c->packets + sw + base - config_.top);  // lines 2-3
      return static_cast<double>(base + sw);  // installed and already aged out, event not yet applied
    case kPending:
    case kRefused:
      return static_cast<double>(base + sw);
    case kAged:
      return static_cast<double>(base + sw + sketch_min(h));
  }
  return 0;
}

Duet::Stats Duet::stats() const {
  Stats s;
  s.promotions = promotions_.load();
  s.installed = installed_.load();
  s.refused = refused_.load();
  s.aged = aged_.load();
  s.record_packets = record_packets_.load();
  s.records_full = records_full_.load();
  return s;
}

}  // namespace dpukit::measure
