// SplitMix64: a tiny, fast, well-mixed generator and its bijective output
// mixer. Deterministic from the seed on every platform (no std::
// distributions), which traces, tests and sampling decisions rely on.
#pragma once

#include <cstdint>

namespace dpukit {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() { return mix64(s_ += 0x9e3779b97f4a7c15ull); }
  // Uniform on [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform on (0, 1]: never 0, so log() is always finite.
  double uniform_open0() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }
  // Uniform on [0, n) by multiply-shift (bias below n / 2^64); 0 when n == 0.
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  // Uniform on [lo, hi].
  uint32_t range(uint32_t lo, uint32_t hi) { return lo + static_cast<uint32_t>(below(uint64_t{hi} - lo + 1)); }

 private:
  uint64_t s_;
};

}  // namespace dpukit
