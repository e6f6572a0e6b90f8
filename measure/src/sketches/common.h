// Small pieces every sketch shares: the one hash per packet and its rows,
// seed derivation, a fast PRNG, NitroSketch's geometric sampler, and budget
// checks. Internal to measure (not part of the public header).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "dpukit/core/flow_hash.h"
#include "dpukit/core/flow_key.h"
#include "dpukit/core/random.h"
#include "dpukit/measure.h"

namespace dpukit::measure::sketches {

using dpukit::mix64;
using dpukit::SplitMix64;

// Maps a 32-bit word onto [0, n) with a multiply-high (Lemire's "fastrange"):
// no division; bucket sizes differ by at most one word in 2^32, a relative
// skew of n / 2^32 (1e-5 at 500 KB's 42,666 counters a row).
inline uint32_t bucket_of(uint32_t word, uint32_t n) {
  return static_cast<uint32_t>((uint64_t{word} * n) >> 32);
}

// One hash per packet for every row of a 3-row sketch: one XXH3-128 of the
// key (inline, flow_hash128), split. Row r's counter comes from 32-bit word r
// (bits 32r..32r+31), and the fourth word holds the rest: Count Sketch's
// signs (bit r for row r), UnivMon's level, Elastic's heavy bucket, Duet's
// record slot.
//
// Why the rows stay independent, which the sketches' error bounds need (a
// row's collisions independent of another's, so that the minimum or the
// median of 3 rows concentrates): XXH3-128's output bits are independent and
// uniform for distinct keys (it passes SMHasher's tests at 128 bits, where
// any dependence between output bits fails them), and disjoint bits of
// independent bits are independent. Per row, two keys collide with
// probability 1/width (up to the n / 2^32 skew above), as with a hash of
// their own. It is not double hashing (h1 + i*h2): there, two keys that
// collide in two rows collide in the third almost surely. RowHashTest checks
// the joint distribution of the rows' counters and of the words.
struct RowHash {
  static constexpr int kRows = 3;
  uint64_t lo = 0, hi = 0;

  [[gnu::always_inline]] static RowHash of(const FlowKey& key, uint64_t seed) {
    const FlowHash128 h = flow_hash128(key, seed);
    return {h.lo, h.hi};
  }
  // Row r's word, r in [0, 3).
  uint32_t word(int r) const { return static_cast<uint32_t>(r == 0 ? lo : r == 1 ? lo >> 32 : hi); }
  // The fourth word.
  uint32_t spare() const { return static_cast<uint32_t>(hi >> 32); }
  // Row r's counter in a row of n.
  uint32_t index(int r, uint32_t n) const { return bucket_of(word(r), n); }
  // Count Sketch's sign for row r: +1 or -1 from bit r of the spare word.
  bool plus(int r) const { return (spare() >> r) & 1; }
  int32_t sign(int r) const { return plus(r) ? 1 : -1; }
  // One 64-bit hash of the key for a hash table beside the rows (the top-k
  // heap's index): uniform, which is all such a table needs.
  uint64_t table_hash() const { return lo ^ hi; }

  // Another 128 independent-looking bits for the same key, number k >= 1
  // (UnivMon's levels below the first): SplitMix64's outputs k and k + 64
  // from the state `lo`, a bijective mixer of distinct inputs, which is how
  // SplitMix64 makes independent streams. They depend on `lo` only, never on
  // the fourth word, so they are independent of the bits kept there (the
  // level).
  RowHash derived(uint32_t k) const {
    constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
    return {mix64(lo + k * kGamma), mix64(lo + (k + 64) * kGamma)};
  }
};

// Batched updates (Sketch::update_burst): a dpu worker's burst is taken a
// chunk of packets at a time: hash the chunk and ask for (prefetch) every
// counter it will touch, then update them. The counters' cache misses then
// overlap, where one packet at a time waits for each in turn. A chunk's
// prefetches (3 a packet) stay within what the core keeps in flight.
inline constexpr size_t kBurstChunk = 16;
template <size_t kChunk = kBurstChunk, class F>
inline void for_each_chunk(size_t n, F&& chunk) {
  for (size_t b = 0; b < n; b += kChunk) chunk(b, b + kChunk < n ? b + kChunk : n);
}

// Independent seeds, derived from the user's seed. `purpose` separates
// families (the packet hash of the rows, Elastic's, NitroSketch's samplers);
// the same (seed, purpose, index) always gives the same seed, so a vanilla
// sketch, its NitroSketch variant and Duet built with the same seed hash flows
// to the same counters. (The numbers are those the families had when each
// row had a hash of its own; 2 and 3 were UnivMon's level and Elastic's heavy
// part, now bits of the packet hash.)
enum class SeedPurpose : uint64_t { kRow = 1, kLight = 4, kSampler = 5 };
inline uint64_t derive_seed(uint64_t seed, SeedPurpose purpose, uint64_t index) {
  return mix64(seed * 0x9e3779b97f4a7c15ULL + mix64(static_cast<uint64_t>(purpose) << 32 | index));
}

// NitroSketch's geometric sampling: over a stream of slots, each slot is
// selected independently with probability p. Instead of a coin per slot we
// draw the number of unselected slots before the next selected one,
// G ~ Geometric(p) on {0, 1, 2, ...} with P(G >= k) = (1-p)^k, by inversion:
// G = floor(ln U / ln(1-p)), U uniform on (0, 1]. The step from one selected
// slot to the next is 1 + G, whose mean is exactly 1/p.
//
// p = 1 is special-cased (every slot selected): ln(1-p) would be -inf and
// U = 1 would give 0 * inf = NaN.
class GeometricSampler {
 public:
  GeometricSampler(double p, uint64_t seed)
      : rng_(seed), always_(p >= 1.0), inv_log_q_(p >= 1.0 ? 0.0 : 1.0 / std::log1p(-p)) {}

  // Unselected slots before the next selected one (G).
  uint64_t failures() {
    if (always_) return 0;
    const double g = std::floor(std::log(rng_.uniform_open0()) * inv_log_q_);
    // g >= 0 always (both factors <= 0); cap absurd values (p ~ 1e-18).
    return g < 0x1.0p62 ? static_cast<uint64_t>(g) : (uint64_t{1} << 62);
  }
  // Distance from one selected slot to the next (1 + G); mean 1/p.
  uint64_t next_gap() { return 1 + failures(); }

 private:
  SplitMix64 rng_;
  bool always_;
  double inv_log_q_;
};

// 13-byte key equality as two overlapping 8-byte loads (bytes 0-7 and 5-12):
// no call into libc's memcmp on the hot paths.
inline bool same_key(const FlowKey& a, const FlowKey& b) {
  static_assert(sizeof(FlowKey) == 13);
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a.bytes.data(), 8);
  std::memcpy(&a1, a.bytes.data() + 5, 8);
  std::memcpy(&b0, b.bytes.data(), 8);
  std::memcpy(&b1, b.bytes.data() + 5, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

inline double median3(double a, double b, double c) {
  if (a > b) std::swap(a, b);  // a <= b
  if (b > c) b = c;            // b = min(b, c)
  return a > b ? a : b;        // max(a, min(b, c)) with a <= original b
}

[[noreturn]] inline void budget_error(const std::string& algo, size_t budget, const std::string& why) {
  throw BudgetError(algo + " cannot fit in " + std::to_string(budget) + " bytes: " + why);
}

// The sampling probability of NitroSketch: (0, 1].
inline void check_sample_p(double p) {
  if (!(p > 0.0 && p <= 1.0)) throw std::invalid_argument("sample_p must be in (0, 1], got " + std::to_string(p));
}

}  // namespace dpukit::measure::sketches
