#include "duet.h"

#include "sketches/common.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace dpukit::measure {

namespace {
// A record's state. Pending and installed: the flow's insertion is under way
// or done. Refused and aged: the flow is back on the sketch path and is
// promoted again at its next TOP.
enum State : uint64_t { kPending = 0, kInstalled = 1, kRefused = 2, kAged = 3 };

constexpr uint64_t kOccupied = 1ull << 63;
constexpr uint64_t kClaiming = 1ull << 62;  // k1 while the claiming worker writes the key

inline uint32_t fastrange(uint32_t x, size_t n) { return static_cast<uint32_t>((uint64_t(x) * n) >> 32); }

inline void pack(const FlowKey& key, uint64_t& a, uint64_t& b) {
  key.to_words(a, b);
  b |= kOccupied;
}
}  // namespace

struct Duet::Record {
  std::atomic<uint64_t> k0{0}, k1{0};  // the key; k1 == 0: free, kClaiming: being written
  std::atomic<uint64_t> state{kPending};
  std::atomic<uint64_t> base{0};  // packets counted neither in the sketch nor by the hw counter above TOP
};
static_assert(sizeof(std::atomic<uint64_t>) * 4 == Duet::kRecordBytes);

Duet::Duet(const DuetConfig& config, FlowTable& hw) : config_(config), hw_(hw) {
  if (config.top < 2) throw std::invalid_argument("duet: TOP must be at least 2 packets");
  if (config.records == 0) throw std::invalid_argument("duet: at least one promoted-flow record");
  if (config.records > UINT32_MAX / 2) throw std::invalid_argument("duet: too many records");
  record_slots_ = record_slots(config.records);
  size_t record_bytes = records_bytes(config.records);
  if (record_bytes >= config.memory_bytes)
    throw std::invalid_argument("duet: " + std::to_string(config.memory_bytes) + " bytes cannot hold " +
                                std::to_string(config.records) + " promoted-flow records");
  if (config.counter_bits != 16 && config.counter_bits != 32)
    throw std::invalid_argument("duet: counters are 16 or 32 bits, not " + std::to_string(config.counter_bits));
  if (config.counter_bits == 16 && config.top > kMaxTop16)
    throw std::invalid_argument("duet: 16-bit counters need TOP <= " + std::to_string(kMaxTop16) + " packets, not " +
                                std::to_string(config.top) + " (use 32-bit counters)");
  width_ = (config.memory_bytes - record_bytes) / (kRows * counter_bytes());
  if (width_ < 1)
    throw std::invalid_argument("duet: " + std::to_string(config.memory_bytes) +
                                " bytes leave no counter per row after the records");
  if (width_ > UINT32_MAX) throw std::invalid_argument("duet: budget too large");
  hash_seed_ = sketches::derive_seed(config.seed, sketches::SeedPurpose::kRow, 0);
  if (config.counter_bits == 16)
    counters16_ = std::make_unique<std::atomic<uint16_t>[]>(kRows * width_);
  else
    counters32_ = std::make_unique<std::atomic<uint32_t>[]>(kRows * width_);
  records_ = std::make_unique<Record[]>(record_slots_);
}

Duet::~Duet() = default;

size_t Duet::memory_bytes() const { return kRows * width_ * counter_bytes() + record_slots_ * kRecordBytes; }

template <>
std::atomic<uint32_t>* Duet::counters<uint32_t>() const {
  return counters32_.get();
}
template <>
std::atomic<uint16_t>* Duet::counters<uint16_t>() const {
  return counters16_.get();
}

// One hash per packet (RowHash, sketches/common.h), split as the Count-Min
// baseline built with the same seed splits it, so that Duet's sketch is that
// Count-Min minus what the hardware took over. The record's start slot comes
// from the fourth word, which no row uses.
Duet::Hashes Duet::hashes(const FlowKey& key) const {
  const sketches::RowHash h = sketches::RowHash::of(key, hash_seed_);
  Hashes out;
  for (int r = 0; r < kRows; ++r) out.idx[r] = h.index(r, static_cast<uint32_t>(width_));
  out.rec = fastrange(h.spare(), record_slots_);
  return out;
}

Duet::Record* Duet::find_record(const FlowKey& key, uint32_t start) const {
  uint64_t a, b;
  pack(key, a, b);
  // Records are never freed, so a key stays where it was claimed: no further
  // from its start than the longest probe any claim made. Bounded by that,
  // a miss costs a few probes even once every record is taken.
  const size_t probes = std::min(longest_probe_.load(std::memory_order_relaxed) + 1, record_slots_);
  for (size_t n = 0, i = start; n < probes; ++n, i = (i + 1 == record_slots_ ? 0 : i + 1)) {
    Record& r = records_[i];
    uint64_t k1 = r.k1.load(std::memory_order_acquire);
    if (k1 == 0) return nullptr;  // a free slot ends the probe too
    if (k1 == b && r.k0.load(std::memory_order_relaxed) == a) return &r;
  }
  return nullptr;
}

Duet::Record* Duet::claim_record(const FlowKey& key, uint32_t start) {
  uint64_t a, b;
  pack(key, a, b);
  for (size_t n = 0, i = start; n < record_slots_; ++n, i = (i + 1 == record_slots_ ? 0 : i + 1)) {
    Record& r = records_[i];
    uint64_t expected = 0;
    if (r.k1.load(std::memory_order_relaxed) == 0 &&
        r.k1.compare_exchange_strong(expected, kClaiming, std::memory_order_acq_rel)) {
      r.k0.store(a, std::memory_order_relaxed);
      // Before the record is published: whoever later looks this key up (this
      // worker, or the control path after the insert request) probes this far.
      size_t longest = longest_probe_.load(std::memory_order_relaxed);
      while (n > longest && !longest_probe_.compare_exchange_weak(longest, n, std::memory_order_relaxed)) {
      }
      return &r;  // the caller fills it, then publishes k1 = b
    }
  }
  return nullptr;
}

template <class T>
uint64_t Duet::sketch_min(const Hashes& h) const {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  const std::atomic<T>* c = counters<T>();
  for (int i = 0; i < kRows; ++i) m = std::min<uint64_t>(m, c[i * width_ + h.idx[i]].load(std::memory_order_relaxed));
  return m;
}

uint64_t Duet::sketch_min(const Hashes& h) const {
  return config_.counter_bits == 16 ? sketch_min<uint16_t>(h) : sketch_min<uint32_t>(h);
}

// Counter reset: take the flow's own count out of its counters (never below
// zero), so that it stops inflating the light flows it collides with.
template <class T>
void Duet::reset_counters(const Hashes& h, uint64_t amount) {
  std::atomic<T>* counter = counters<T>();
  for (int i = 0; i < kRows; ++i) {
    auto& c = counter[i * width_ + h.idx[i]];
    T v = c.load(std::memory_order_relaxed);
    while (!c.compare_exchange_weak(v, v > amount ? static_cast<T>(v - amount) : T{0}, std::memory_order_relaxed)) {
    }
  }
}

void Duet::reset_counters(const Hashes& h, uint64_t amount) {
  config_.counter_bits == 16 ? reset_counters<uint16_t>(h, amount) : reset_counters<uint32_t>(h, amount);
}

// Lines 7-20 in one pass, row by row as a Count-Min update: every counter is
// incremented and its old value gives the minimum, which is returned. If the
// flow turns out to reach TOP, the reset takes the increment back with the
// flow's count, so the counters end as Algorithm 1 leaves them (read, then
// update or promote) after one memory pass instead of two.
template <bool kSingleWriter, class T>
[[gnu::always_inline]] inline uint64_t Duet::add_one(const Hashes& h) {
  constexpr T kMax = std::numeric_limits<T>::max();
  T m = kMax;
  std::atomic<T>* row = counters<T>();
  for (int r = 0; r < kRows; ++r, row += width_) {
    auto& c = row[h.idx[r]];
    T old;
    if constexpr (kSingleWriter) {
      // One worker: nobody else writes, so a plain (non-locked) increment is exact.
      old = c.load(std::memory_order_relaxed);
      if (old != kMax) c.store(old + 1, std::memory_order_relaxed);
    } else if constexpr (sizeof(T) == 4) {
      old = c.fetch_add(1, std::memory_order_relaxed);  // sync_fetch_and_add (2^32 packets in one counter: not here)
    } else {
      // A 16-bit counter can fill: a compare-and-swap that stops at the top.
      old = c.load(std::memory_order_relaxed);
      while (old != kMax && !c.compare_exchange_weak(old, old + 1, std::memory_order_relaxed)) {
      }
    }
    m = std::min(m, old);
  }
  return m;
}

void Duet::on_sketch_path(const FlowKey& key) {
  // No record is read here: a promoted flow is looked up only on the rare
  // path, so a light flow's packet costs what a Count-Min update costs.
  const Hashes h = hashes(key);
  uint64_t min_cnt;
  if (config_.counter_bits == 16)
    min_cnt = config_.single_writer ? add_one<true, uint16_t>(h) : add_one<false, uint16_t>(h);
  else
    min_cnt = config_.single_writer ? add_one<true, uint32_t>(h) : add_one<false, uint32_t>(h);
  if (min_cnt + 1 >= config_.top) on_top(key, h, min_cnt + 1);
}

// A chunk of the burst at a time: hash it and ask for its counters, then
// each packet in order as on_sketch_path() does it (the same atomic
// increments, and its own TOP check on the minimum its increments returned).
template <bool kSingleWriter, class T>
void Duet::sketch_path_burst(const FlowKey* const* keys, size_t n) {
  const std::atomic<T>* c = counters<T>();
  sketches::for_each_chunk(n, [&](size_t begin, size_t end) {
    Hashes h[sketches::kBurstChunk];
    for (size_t i = begin; i < end; ++i) {
      h[i - begin] = hashes(*keys[i]);
      for (int r = 0; r < kRows; ++r) __builtin_prefetch(&c[r * width_ + h[i - begin].idx[r]], 1);
    }
    for (size_t i = begin; i < end; ++i) {
      const uint64_t min_cnt = add_one<kSingleWriter, T>(h[i - begin]);
      if (min_cnt + 1 >= config_.top) on_top(*keys[i], h[i - begin], min_cnt + 1);
    }
  });
}

void Duet::on_sketch_path_burst(const FlowKey* const* keys, size_t n) {
  if (config_.counter_bits == 16)
    config_.single_writer ? sketch_path_burst<true, uint16_t>(keys, n) : sketch_path_burst<false, uint16_t>(keys, n);
  else
    config_.single_writer ? sketch_path_burst<true, uint32_t>(keys, n) : sketch_path_burst<false, uint32_t>(keys, n);
}

// Lines 21-24, and what the paper leaves open: the flow's sketch count is
// `count` (this packet included).
void Duet::on_top(const FlowKey& key, const Hashes& h, uint64_t count) {
  Record* rec = find_record(key, h.rec);
  if (rec) {
    uint64_t s = rec->state.load(std::memory_order_acquire);
    if (s == kPending || s == kInstalled ||
        !rec->state.compare_exchange_strong(s, kPending, std::memory_order_acq_rel)) {
      // Its insertion is under way (or the packet was in flight when it was
      // installed): move what the sketch holds of it into the record.
      rec->base.fetch_add(count, std::memory_order_relaxed);
      reset_counters(h, count);
      moved_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Refused or aged, and heavy again: a new promotion.
  } else {
    // Reserve one of config_.records first: the slots outnumber the records,
    // so the slots running out no longer stops two workers from both taking
    // the last record.
    size_t used = records_used_.load(std::memory_order_relaxed);
    do {
      if (used >= config_.records) {
        // No record left: the flow stays in the sketch (already counted).
        records_full_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    } while (!records_used_.compare_exchange_weak(used, used + 1, std::memory_order_relaxed));
    rec = claim_record(key, h.rec);  // finds a slot: there are more slots than records
    if (!rec) {
      records_used_.fetch_sub(1, std::memory_order_relaxed);
      records_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    rec->state.store(kPending, std::memory_order_relaxed);
    uint64_t a, b;
    pack(key, a, b);
    rec->k1.store(b, std::memory_order_release);
  }
  // Promotion with count TOP (the hw counter's first TOP are in base), then
  // the counter reset.
  rec->base.fetch_add(config_.top, std::memory_order_relaxed);
  reset_counters(h, count);
  promotions_.fetch_add(1, std::memory_order_relaxed);
  hw_.request_insert(key, {config_.top, 0}, static_cast<uint64_t>(rec - records_.get()));
}

size_t Duet::apply_hw_events() {
  events_.clear();
  hw_.poll_events(events_, 4096);
  for (const FlowEvent& e : events_) {
    Record* rec = find_record(e.key, hashes(e.key).rec);
    if (!rec) continue;  // not a promotion of ours
    uint64_t pending = kPending, installed = kInstalled;
    switch (e.kind) {
      case FlowEvent::Kind::kInserted:
        if (rec->state.compare_exchange_strong(pending, kInstalled, std::memory_order_acq_rel))
          installed_.fetch_add(1, std::memory_order_relaxed);
        break;
      case FlowEvent::Kind::kRefused:
        // The table is full or busy: the flow stays on the sketch path, its
        // TOP packets kept in base, and is promoted again at its next TOP.
        if (rec->state.compare_exchange_strong(pending, kRefused, std::memory_order_acq_rel))
          refused_.fetch_add(1, std::memory_order_relaxed);
        break;
      case FlowEvent::Kind::kAged:
      case FlowEvent::Kind::kRemoved:
        if (e.reason == FlowEvent::Reason::kNotFound) break;
        // Case 5: the hardware count above TOP goes into base; later packets
        // go to the sketch again.
        if (rec->state.compare_exchange_strong(installed, kAged, std::memory_order_acq_rel)) {
          rec->base.fetch_add(e.counters.packets - config_.top, std::memory_order_relaxed);
          aged_.fetch_add(1, std::memory_order_relaxed);
        }
        break;
    }
  }
  return events_.size();
}

// Algorithm 2, with what the paper leaves open (see duet.h). Exact for a
// heavy flow when the sketch minimum holds only its own packets.
double Duet::estimate(const FlowKey& key) const {
  const Hashes h = hashes(key);
  uint64_t est = sketch_min(h);
  if (const Record* rec = find_record(key, h.rec)) {
    est += rec->base.load(std::memory_order_relaxed);
    if (rec->state.load(std::memory_order_acquire) == kInstalled)
      if (auto c = hw_.query(key)) est += c->packets - config_.top;  // lines 2-3
  }
  return static_cast<double>(est);
}

Duet::Stats Duet::stats() const {
  Stats s;
  s.counter_bits = config_.counter_bits;
  s.promotions = promotions_.load();
  s.installed = installed_.load();
  s.refused = refused_.load();
  s.aged = aged_.load();
  s.moved_to_record = moved_.load();
  s.records_full = records_full_.load();
  s.records = config_.records;
  s.records_used = records_used_.load();
  return s;
}

}  // namespace dpukit::measure
