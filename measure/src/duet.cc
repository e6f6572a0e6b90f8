#include "duet.h"

#include "sketches/common.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace dpukit::measure {

namespace {
// Reclamation: a record is freed by the control path (its flow's insertion
// refused, or its entry aged out) while a dpu worker may hold it on the rare
// path, between looking it up and adding to it, and another worker may
// claim the freed slot for another flow at once. Generation counts, not
// epochs: the mutable part of a record (state and base) is one word that
// also carries the record's generation, and it changes only by
// compare-and-swap. Freeing bumps the generation, so a worker's update made
// on a look-up from before the free fails, and the worker looks again
// instead of adding its flow's count to whichever flow has the slot now.
// The key is read like a seqlock, checked against the generation. Nothing is
// added to the per-packet path, and nobody waits: epochs would have every
// worker announce itself before each rare-path look-up and the control path
// wait for all of them before a free, and a worker stalled mid-look-up would
// hold every free back.
//
// The word: generation (22 bits) | state (2) | base (40, packets). 2^40
// packets is beyond what a flow sends through the sketch in one record's
// life (base saturates there). A stale update could succeed only if the slot
// were freed 2^22 times, and found again at the same state and base, while
// one worker sits between two instructions.
enum State : uint64_t { kFree = 0, kClaiming = 1, kPending = 2, kInstalled = 3 };
constexpr int kStateShift = 40, kGenShift = 42;
constexpr uint64_t kBaseMax = (uint64_t{1} << kStateShift) - 1;
constexpr uint64_t kGenMask = (uint64_t{1} << (64 - kGenShift)) - 1;

inline uint64_t gen_of(uint64_t w) { return w >> kGenShift; }
inline State state_of(uint64_t w) { return static_cast<State>((w >> kStateShift) & 3); }
inline uint64_t base_of(uint64_t w) { return w & kBaseMax; }
inline bool is_live(uint64_t w) { return state_of(w) >= kPending; }
inline uint64_t make_word(uint64_t gen, State s, uint64_t base) {
  return (gen & kGenMask) << kGenShift | uint64_t{s} << kStateShift | std::min(base, kBaseMax);
}

constexpr uint64_t kOccupied = 1ull << 63;  // in k1: the slot has held a key (0: never used)

inline uint32_t fastrange(uint32_t x, size_t n) { return static_cast<uint32_t>((uint64_t(x) * n) >> 32); }

inline void pack(const FlowKey& key, uint64_t& a, uint64_t& b) {
  key.to_words(a, b);
  b |= kOccupied;
}
inline uint64_t record_id(size_t slot, uint64_t word) { return gen_of(word) << 32 | slot; }

inline FlowKey unpack(uint64_t a, uint64_t b) {
  FlowKey k;
  uint32_t mid = static_cast<uint32_t>(b);
  std::memcpy(k.bytes.data(), &a, 8);
  std::memcpy(k.bytes.data() + 8, &mid, 4);
  k.bytes[12] = static_cast<uint8_t>(b >> 32);
  return k;
}
}  // namespace

struct Duet::Record {
  std::atomic<uint64_t> k0{0}, k1{0};  // the key, written only while the slot is being claimed
  std::atomic<uint64_t> word{0};       // generation | state | base, changed only by compare-and-swap
  uint64_t spare = 0;                  // a record is half a cache line
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
  if (config.partitions == 0) throw std::invalid_argument("duet: at least one sketch partition");
  width_ = (config.memory_bytes - record_bytes) / (size_t{config.partitions} * kRows * counter_bytes());
  if (width_ < 1)
    throw std::invalid_argument("duet: " + std::to_string(config.memory_bytes) +
                                " bytes leave no counter per row after the records");
  if (width_ > UINT32_MAX) throw std::invalid_argument("duet: budget too large");
  hash_seed_ = sketches::derive_seed(config.seed, sketches::SeedPurpose::kRow, 0);
  const size_t n = config.partitions * partition_stride();
  if (config.counter_bits == 16)
    counters16_ = std::make_unique<std::atomic<uint16_t>[]>(n);
  else
    counters32_ = std::make_unique<std::atomic<uint32_t>[]>(n);
  records_ = std::make_unique<Record[]>(record_slots_);
}

Duet::~Duet() = default;

size_t Duet::memory_bytes() const {
  return size_t{config_.partitions} * kRows * width_ * counter_bytes() + record_slots_ * kRecordBytes;
}

// In counters (of counter_bits, both halves with an epoch, as the arrays
// are typed). One partition: exactly its rows. Several: rounded up to a
// 64-byte line, so that no line holds two workers' counters.
size_t Duet::partition_stride() const {
  const size_t width = config_.counter_bits / 8, per_counter = windowed() ? 2 : 1;
  const size_t n = kRows * width_ * per_counter;
  if (config_.partitions == 1) return n;
  const size_t per_line = 64 / width;
  return (n + per_line - 1) / per_line * per_line;
}

std::pair<size_t, size_t> Duet::partition_bytes(unsigned p) const {
  const size_t width = config_.counter_bits / 8, start = p * partition_stride() * width;
  return {start, start + kRows * width_ * (windowed() ? 2 : 1) * width};
}

template <>
std::atomic<uint32_t>* Duet::counters<uint32_t>(unsigned partition) const {
  return counters32_.get() + partition * partition_stride();
}
template <>
std::atomic<uint16_t>* Duet::counters<uint16_t>(unsigned partition) const {
  return counters16_.get() + partition * partition_stride();
}

template <class F>
decltype(auto) Duet::with_counters(F&& f) {
  // A partition of its own is written by one worker alone.
  const bool one = config_.single_writer || config_.partitions > 1, bits16 = config_.counter_bits == 16;
  if (windowed()) {
    if (one) return bits16 ? f.template operator()<true, true, uint16_t>() : f.template operator()<true, true, uint32_t>();
    return bits16 ? f.template operator()<false, true, uint16_t>() : f.template operator()<false, true, uint32_t>();
  }
  if (one) return bits16 ? f.template operator()<true, false, uint16_t>() : f.template operator()<true, false, uint32_t>();
  return bits16 ? f.template operator()<false, false, uint16_t>() : f.template operator()<false, false, uint32_t>();
}

// One hash per packet (RowHash, sketches/common.h), split as the Count-Min
// baseline built with the same seed splits it, so that Duet's sketch is that
// Count-Min minus what the hardware took over. The record's start slot comes
// from the fourth word, which no row uses. Inline on the sketch path: returned
// from a call, the indices went through the stack as 32-bit stores read back
// as one 64-bit load, a store-forwarding stall on every packet.
template <class Hashes>
[[gnu::always_inline]] inline Hashes split_hash(const FlowKey& key, uint64_t seed, size_t width, size_t slots) {
  const sketches::RowHash h = sketches::RowHash::of(key, seed);
  Hashes out;
  for (int r = 0; r < sketches::RowHash::kRows; ++r) out.idx[r] = h.index(r, static_cast<uint32_t>(width));
  out.rec = fastrange(h.spare(), slots);
  return out;
}

Duet::Hashes Duet::hashes(const FlowKey& key) const {
  return split_hash<Hashes>(key, hash_seed_, width_, record_slots_);
}

uint32_t Duet::record_start(const FlowKey& key) const { return hashes(key).rec; }

Duet::Held Duet::find_record(const FlowKey& key, uint32_t start) const {
  uint64_t a, b;
  pack(key, a, b);
  // A claim takes the first free slot from the key's start, and a record
  // never moves, so a record lies no further from its start than the longest
  // probe any claim made: bounded by that, a miss costs a few probes even
  // once every record is taken. A freed slot stays on the probe path (a
  // tombstone: records claimed past it are still found); a slot that never
  // held a key ends it, since every claim passed only slots holding records.
  const size_t probes = std::min(longest_probe_.load(std::memory_order_acquire) + 1, record_slots_);
  for (size_t n = 0, i = start; n < probes; ++n, i = (i + 1 == record_slots_ ? 0 : i + 1)) {
    Record& r = records_[i];
    const uint64_t w = r.word.load(std::memory_order_acquire);
    if (!is_live(w)) {
      if (state_of(w) == kFree && r.k1.load(std::memory_order_relaxed) == 0) return {};
      continue;
    }
    if (r.k1.load(std::memory_order_relaxed) != b || r.k0.load(std::memory_order_relaxed) != a) continue;
    // The key read is the record's only if no free came between: same generation, still live.
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t now = r.word.load(std::memory_order_relaxed);
    if (gen_of(now) == gen_of(w) && is_live(now)) return {&r, now};
  }
  return {};
}

// Claims a free slot for `key` and publishes it pending with base `count`.
// The caller has reserved one of config_.records.
Duet::Record* Duet::claim_record(const FlowKey& key, uint32_t start, uint64_t count) {
  uint64_t a, b;
  pack(key, a, b);
  for (size_t n = 0, i = start; n < record_slots_; ++n, i = (i + 1 == record_slots_ ? 0 : i + 1)) {
    Record& r = records_[i];
    uint64_t w = r.word.load(std::memory_order_relaxed);
    if (state_of(w) != kFree ||
        !r.word.compare_exchange_strong(w, make_word(gen_of(w), kClaiming, 0), std::memory_order_acq_rel))
      continue;
    // The seqlock's writer side: a reader that sees the new key sees the claim.
    std::atomic_thread_fence(std::memory_order_release);
    r.k0.store(a, std::memory_order_relaxed);
    r.k1.store(b, std::memory_order_relaxed);
    // Before the record is published: whoever later looks this key up (this
    // worker, or the control path after the insert request) probes this far.
    size_t longest = longest_probe_.load(std::memory_order_relaxed);
    while (n > longest && !longest_probe_.compare_exchange_weak(longest, n, std::memory_order_release)) {
    }
    r.word.store(make_word(gen_of(w), kPending, count), std::memory_order_release);
    return &r;
  }
  return nullptr;
}

// Adds `count` to a record's base if it is still the one the look-up found
// (same generation, live); false if it was retired since.
bool Duet::add_to_record(Held held, uint64_t count) {
  uint64_t w = held.word;
  const uint64_t gen = gen_of(w);
  while (gen_of(w) == gen && is_live(w))
    if (held.rec->word.compare_exchange_weak(w, make_word(gen, state_of(w), base_of(w) + count),
                                             std::memory_order_acq_rel))
      return true;
  return false;
}

// The control path only. Frees the record (the next generation) and hands
// its count over; the compare-and-swap that frees it fixes the base, so a
// worker's add either made it in or fails and finds no record.
void Duet::retire(Held held, const FlowKey& key, uint64_t hw_packets_above_top, uint64_t hw_bytes) {
  uint64_t w = held.word;
  const uint64_t gen = gen_of(w);
  do {
    if (gen_of(w) != gen || !is_live(w)) return;  // only this thread frees: not reached
  } while (!held.rec->word.compare_exchange_weak(w, make_word(gen + 1, kFree, 0), std::memory_order_acq_rel));
  {
    std::lock_guard lock(retired_mu_);
    retired_flows_.push_back(
        {key, base_of(w) + hw_packets_above_top, hw_bytes, record_id(held.rec - records_.get(), w)});
  }
  retired_.fetch_add(1, std::memory_order_relaxed);
  records_used_.fetch_sub(1, std::memory_order_release);
}

size_t Duet::take_retired(std::vector<RecordCount>& out) {
  std::lock_guard lock(retired_mu_);
  out.insert(out.end(), retired_flows_.begin(), retired_flows_.end());
  size_t n = retired_flows_.size();
  retired_flows_.clear();
  return n;
}

// A live record's count now: base, and the hardware's count above TOP once installed.
RecordCount Duet::count_of(const Record& r, uint64_t word) const {
  RecordCount c{unpack(r.k0.load(std::memory_order_relaxed), r.k1.load(std::memory_order_relaxed)), base_of(word), 0,
                record_id(&r - records_.get(), word)};
  if (state_of(word) == kInstalled)
    if (auto hw = hw_.query(c.key)) {
      c.packets += hw->packets - std::min(hw->packets, config_.top);  // lines 2-3
      c.bytes = hw->bytes;
    }
  return c;
}

void Duet::for_each_record(const std::function<void(const RecordCount&)>& f) const {
  for (size_t i = 0; i < record_slots_; ++i) {
    const Record& r = records_[i];
    const uint64_t w = r.word.load(std::memory_order_acquire);
    if (!is_live(w)) continue;
    RecordCount c = count_of(r, w);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t now = r.word.load(std::memory_order_relaxed);
    if (gen_of(now) != gen_of(w) || !is_live(now)) continue;  // retired meanwhile: its count went to take_retired
    c.packets += base_of(now) - base_of(w);  // moved in while reading
    f(c);
  }
}

template <class T>
uint64_t Duet::sketch_min(const Hashes& h, unsigned partition) const {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  const std::atomic<T>* c = counters<T>(partition);
  if (windowed()) {  // both halves: the last one to two epochs
    for (int i = 0; i < kRows; ++i) {
      const std::atomic<T>* cell = c + 2 * (i * width_ + h.idx[i]);
      m = std::min<uint64_t>(
          m, uint64_t{cell[0].load(std::memory_order_relaxed)} + cell[1].load(std::memory_order_relaxed));
    }
    return m;
  }
  for (int i = 0; i < kRows; ++i) m = std::min<uint64_t>(m, c[i * width_ + h.idx[i]].load(std::memory_order_relaxed));
  return m;
}

// Algorithm 2's minimum. Partitioned: the largest of the partitions'
// minima, since the flow's packets are all in one partition, and the query
// need not know which (the NIC's RSS chose it).
uint64_t Duet::sketch_min(const Hashes& h, unsigned partition) const {
  if (partition != kAnyPartition || config_.partitions == 1) {
    const unsigned p = config_.partitions == 1 ? 0 : partition;
    return config_.counter_bits == 16 ? sketch_min<uint16_t>(h, p) : sketch_min<uint32_t>(h, p);
  }
  uint64_t m = 0;
  for (unsigned p = 0; p < config_.partitions; ++p)
    m = std::max(m, config_.counter_bits == 16 ? sketch_min<uint16_t>(h, p) : sketch_min<uint32_t>(h, p));
  return m;
}

// Takes up to `amount` from one counter (or half); returns what it took.
template <class T>
uint64_t take_from(std::atomic<T>& c, uint64_t amount) {
  T v = c.load(std::memory_order_relaxed);
  while (!c.compare_exchange_weak(v, v > amount ? static_cast<T>(v - amount) : T{0}, std::memory_order_relaxed)) {
  }
  return std::min<uint64_t>(v, amount);
}

// Counter reset: take the flow's own count out of its counters (never below
// zero), so that it stops inflating the light flows it collides with. With
// an epoch, from the previous half first: those packets are the ones the
// next rotation would drop anyway, and the current half keeps the rest.
template <class T>
void Duet::reset_counters(const Hashes& h, uint64_t amount, unsigned partition) {
  std::atomic<T>* counter = counters<T>(partition);
  if (windowed()) {
    const uint32_t cur = current_half_.load(std::memory_order_acquire);
    for (int i = 0; i < kRows; ++i) {
      std::atomic<T>* cell = counter + 2 * (i * width_ + h.idx[i]);
      take_from(cell[cur], amount - take_from(cell[cur ^ 1], amount));
    }
    return;
  }
  for (int i = 0; i < kRows; ++i) take_from(counter[i * width_ + h.idx[i]], amount);
}

void Duet::reset_counters(const Hashes& h, uint64_t amount, unsigned partition) {
  config_.counter_bits == 16 ? reset_counters<uint16_t>(h, amount, partition)
                             : reset_counters<uint32_t>(h, amount, partition);
}

// Lines 7-20 in one pass, row by row as a Count-Min update: every counter is
// incremented and its old value gives the minimum, which is returned. If the
// flow turns out to reach TOP, the reset takes the increment back with the
// flow's count, so the counters end as Algorithm 1 leaves them (read, then
// update or promote) after one memory pass instead of two.
//
// With an epoch (kEpoch), a counter is two halves side by side: `half` is
// the current epoch's, which the packet increments; the other is the
// previous epoch's, and the counter's value is their sum. Both are in the
// bytes one counter took, so the update touches the same lines as without
// an epoch. The rotation (rotate_epoch) empties the previous half and then
// makes it the current one: it never writes the half a worker increments, so
// a single worker's plain load-and-store stays exact while the control path
// rotates. Moving the current half into the previous one instead (one word,
// [previous | current], rotated by compare-and-swap) would write that half:
// a single worker's store from a load before the rotation would undo it.
// Two separate half-size sketches would read a second line per row.
template <bool kSingleWriter, bool kEpoch, class T>
[[gnu::always_inline]] inline uint64_t Duet::add_one(std::atomic<T>* part, const Hashes& h, uint32_t half) {
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr size_t kHalves = kEpoch ? 2 : 1;
  uint64_t m = std::numeric_limits<uint64_t>::max();
  std::atomic<T>* row = part;
  for (int r = 0; r < kRows; ++r, row += kHalves * width_) {
    std::atomic<T>* cell = row + kHalves * h.idx[r];
    auto& c = cell[kEpoch ? half : 0];
    T old;
    if constexpr (kSingleWriter) {
      // One worker: nobody else writes, so a plain (non-locked) increment is exact.
      old = c.load(std::memory_order_relaxed);
      if (old != kMax) c.store(old + 1, std::memory_order_relaxed);
    } else if constexpr (sizeof(T) == 4 && !kEpoch) {
      old = c.fetch_add(1, std::memory_order_relaxed);  // sync_fetch_and_add (2^32 packets in one counter: not here)
    } else {
      // A 16-bit counter can fill (and an epoch's half, of either width, must
      // stop at its top rather than wrap): a compare-and-swap that stops there.
      old = c.load(std::memory_order_relaxed);
      while (old != kMax && !c.compare_exchange_weak(old, old + 1, std::memory_order_relaxed)) {
      }
    }
    if constexpr (kEpoch)
      m = std::min<uint64_t>(m, uint64_t{old} + cell[half ^ 1].load(std::memory_order_relaxed));
    else
      m = std::min<uint64_t>(m, old);
  }
  return m;
}

void Duet::on_sketch_path(const FlowKey& key, unsigned partition) {
  // No record is read here: a promoted flow is looked up only on the rare
  // path, so a light flow's packet costs what a Count-Min update costs.
  const Hashes h = split_hash<Hashes>(key, hash_seed_, width_, record_slots_);
  const uint64_t min_cnt = with_counters([&]<bool kSingleWriter, bool kEpoch, class T>() {
    return add_one<kSingleWriter, kEpoch, T>(counters<T>(partition), h,
                                             kEpoch ? current_half_.load(std::memory_order_acquire) : 0);
  });
  if (min_cnt + 1 >= config_.top) on_top(key, h, min_cnt + 1, partition);
}

// A chunk of the burst at a time: hash it and ask for its counters, then
// each packet in order as on_sketch_path() does it (the same atomic
// increments, and its own TOP check on the minimum its increments returned).
template <bool kSingleWriter, bool kEpoch, class T>
void Duet::sketch_path_burst(const FlowKey* const* keys, size_t n, unsigned partition) {
  std::atomic<T>* c = counters<T>(partition);
  constexpr size_t kHalves = kEpoch ? 2 : 1;
  sketches::for_each_chunk(n, [&](size_t begin, size_t end) {
    Hashes h[sketches::kBurstChunk];
    for (size_t i = begin; i < end; ++i) {
      h[i - begin] = split_hash<Hashes>(*keys[i], hash_seed_, width_, record_slots_);
      for (int r = 0; r < kRows; ++r) __builtin_prefetch(&c[kHalves * (r * width_ + h[i - begin].idx[r])], 1);
    }
    // A chunk that straddles a rotation counts in the half that was current
    // when it began: the packets stay in the window, one epoch less long.
    const uint32_t half = kEpoch ? current_half_.load(std::memory_order_acquire) : 0;
    for (size_t i = begin; i < end; ++i) {
      const uint64_t min_cnt = add_one<kSingleWriter, kEpoch, T>(c, h[i - begin], half);
      if (min_cnt + 1 >= config_.top) on_top(*keys[i], h[i - begin], min_cnt + 1, partition);
    }
  });
}

// With several workers the increments are locked read-modify-writes, which
// wait for their line anyway and keep no more than one in flight: there the
// burst's prefetches only add work (measure_bench, 5 interleaved rounds: 18.1
// ns a packet in bursts against 16.8 one at a time), so packet by packet.
void Duet::on_sketch_path_burst(const FlowKey* const* keys, size_t n, unsigned partition) {
  if (!config_.single_writer && config_.partitions == 1) {
    for (size_t i = 0; i < n; ++i) on_sketch_path(*keys[i]);
    return;
  }
  with_counters([&]<bool kSingleWriter, bool kEpoch, class T>() {
    if constexpr (kSingleWriter) sketch_path_burst<true, kEpoch, T>(keys, n, partition);
  });
}

template <class T>
double Duet::rotate_epoch() {
  const uint32_t cur = current_half_.load(std::memory_order_relaxed);
  const size_t n = kRows * width_;
  uint64_t sum = 0;
  // First the previous epoch's half is emptied, while the workers still
  // increment the other; then the release below makes it the current one,
  // and a worker that sees the new half sees it empty. A worker still on
  // the old half counts there: its packet stays for one epoch more.
  for (unsigned p = 0; p < config_.partitions; ++p) {
    std::atomic<T>* c = counters<T>(p);
    for (size_t i = 0; i < n; ++i) {
      sum += c[2 * i + cur].load(std::memory_order_relaxed);
      c[2 * i + (cur ^ 1)].store(0, std::memory_order_relaxed);
    }
  }
  current_half_.store(cur ^ 1, std::memory_order_release);
  epochs_.fetch_add(1, std::memory_order_relaxed);
  return static_cast<double>(sum) / static_cast<double>(n * config_.partitions);
}

double Duet::rotate_epoch() {
  if (!windowed()) return 0;
  return config_.counter_bits == 16 ? rotate_epoch<uint16_t>() : rotate_epoch<uint32_t>();
}

// Lines 21-24, and what the paper leaves open: the flow's sketch count is
// `count` (this packet included).
void Duet::on_top(const FlowKey& key, const Hashes& h, uint64_t count, unsigned partition) {
  for (;;) {
    const Held held = find_record(key, h.rec);
    if (!held.rec) break;
    // Its insertion is under way (or the packet was in flight when it was
    // installed): move what the sketch holds of it into the record.
    if (add_to_record(held, count)) {
      reset_counters(h, count, partition);
      moved_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Retired between the look-up and the update (and the slot perhaps
    // another flow's by now): look again; there is no record for this flow.
  }
  // Reserve one of config_.records first: the slots outnumber the records,
  // so the slots running out no longer stops two workers from both taking
  // the last record.
  size_t used = records_used_.load(std::memory_order_relaxed);
  do {
    if (used >= config_.records) {
      // No record left: the flow stays in the sketch (already counted), and
      // its next packet tries again.
      records_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  } while (!records_used_.compare_exchange_weak(used, used + 1, std::memory_order_acquire));
  // The promotion, with the flow's whole sketch count in base: TOP, as the
  // paper inserts it, or more for a flow that waited for a record.
  Record* rec = claim_record(key, h.rec, count);
  if (!rec) {  // not reached: there are more slots than records
    records_used_.fetch_sub(1, std::memory_order_relaxed);
    records_full_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  reset_counters(h, count, partition);
  promotions_.fetch_add(1, std::memory_order_relaxed);
  // The hw counter starts at TOP; what it counts above TOP is the flow's.
  hw_.request_insert(key, {config_.top, 0}, static_cast<uint64_t>(rec - records_.get()));
  bill_rule();
}

void Duet::bill_rule() {
  if (config_.table_cost.rule_ns <= 0 && config_.table_cost.rule_ns_per_million <= 0) return;
  // The records in use are the rules installed or on their way: the entries Table II's cost grows with.
  const double ns = config_.table_cost.rule_cost_ns(records_used_.load(std::memory_order_relaxed));
  spend_dpu_ns(ns, config_.dpu_factor);
  rule_billed_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

size_t Duet::apply_hw_events() {
  events_.clear();
  hw_.poll_events(events_, 4096);
  for (const FlowEvent& e : events_) {
    Held held = find_record(e.key, record_start(e.key));
    if (!held.rec) continue;  // not a promotion of ours
    switch (e.kind) {
      case FlowEvent::Kind::kInserted:
        // pending -> installed, keeping whatever a worker moves into base meanwhile
        for (uint64_t w = held.word; gen_of(w) == gen_of(held.word) && state_of(w) == kPending;)
          if (held.rec->word.compare_exchange_weak(w, make_word(gen_of(w), kInstalled, base_of(w)),
                                                   std::memory_order_acq_rel)) {
            installed_.fetch_add(1, std::memory_order_relaxed);
            break;
          }
        break;
      case FlowEvent::Kind::kRefused:
        // The table is full or busy: the flow goes back to the sketch path
        // and its count to the caller; it is promoted again at its next TOP.
        if (state_of(held.word) != kPending) break;
        retire(held, e.key, 0, 0);
        refused_.fetch_add(1, std::memory_order_relaxed);
        break;
      case FlowEvent::Kind::kAged:
      case FlowEvent::Kind::kRemoved:
        if (e.reason == FlowEvent::Reason::kNotFound) break;
        // Case 5: the flow goes back to the sketch path, and its count, with
        // the hardware's above TOP, to the caller.
        retire(held, e.key, e.counters.packets - std::min(e.counters.packets, config_.top), e.counters.bytes);
        aged_.fetch_add(1, std::memory_order_relaxed);
        bill_rule();  // the Arm destroys the aged entry's rule
        break;
    }
  }
  return events_.size();
}

// Algorithm 2, with what the paper leaves open (see duet.h). Exact for a
// heavy flow when the sketch minimum holds only its own packets.
double Duet::estimate(const FlowKey& key, unsigned partition) const {
  if (partition != kAnyPartition && partition >= config_.partitions && config_.partitions > 1)
    throw std::invalid_argument("duet: no sketch partition " + std::to_string(partition));
  const Hashes h = hashes(key);
  uint64_t est = sketch_min(h, partition);
  if (const Held held = find_record(key, h.rec); held.rec) est += count_of(*held.rec, held.word).packets;
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
  s.records_retired = retired_.load();
  s.epochs = epochs_.load();
  s.rule_billed_ns = rule_billed_ns_.load();
  return s;
}

}  // namespace dpukit::measure
