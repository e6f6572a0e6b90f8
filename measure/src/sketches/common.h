// Small pieces every sketch shares: index and sign derivation from a seeded
// flow hash, seed derivation, a fast PRNG, NitroSketch's geometric sampler,
// and budget checks. Internal to measure (not part of the public header).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "dpukit/core/flow_key.h"
#include "dpukit/core/random.h"
#include "dpukit/measure.h"

namespace dpukit::measure::sketches {

// Maps a 64-bit hash onto [0, n) with a multiply-high (Lemire's "fastrange"):
// uses the hash's high bits, no division, uniform for any n.
inline uint32_t bucket_of(uint64_t h, uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(h) * n) >> 64);
}

// A Count Sketch sign from the same row hash: its lowest bit. bucket_of()
// reads the highest bits, so for a well-mixed hash (XXH3) the two are
// independent.
inline int32_t sign_of(uint64_t h) { return (h & 1) ? 1 : -1; }

// Independent seeds for the hash functions of a sketch, derived from the
// user's seed. `purpose` separates families (rows, levels, samplers); the same
// (seed, purpose, index) always gives the same seed, so a vanilla sketch and
// its NitroSketch variant built with the same SketchOptions::seed hash flows
// to the same counters.
enum class SeedPurpose : uint64_t { kRow = 1, kLevelSample = 2, kHeavy = 3, kLight = 4, kSampler = 5 };
inline uint64_t derive_seed(uint64_t seed, SeedPurpose purpose, uint64_t index) {
  return mix64(seed * 0x9e3779b97f4a7c15ULL + mix64(static_cast<uint64_t>(purpose) << 32 | index));
}

using dpukit::mix64;
using dpukit::SplitMix64;

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
