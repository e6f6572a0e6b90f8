// Synthetic traces for the datapath's tests, built in memory.
#pragma once

#include <algorithm>
#include <random>

#include "dpukit/measure.h"

namespace dpukit::measure::testing {

inline FlowKey flow(uint32_t i) {
  return FlowKey::from_tuple(0x0a000000u + i, 0xc0a80000u + i % 251, 1024 + i % 5000, 80, 6);
}

// `flows` flows, the first tenth carrying most packets.
inline Trace skewed_trace(size_t packets, uint32_t flows, uint32_t seed = 3) {
  Trace t;
  std::mt19937 rng(seed);
  for (size_t n = 0; n < packets; ++n) {
    uint32_t i = rng() % 10 < 7 ? rng() % (flows / 10) : rng() % flows;
    t.packets.push_back({flow(i), 100, 0});
  }
  return t;
}

// `heavy` flows of `each` packets and `light` flows of 5, shuffled.
inline Trace two_tier_trace(uint32_t heavy, uint32_t each, uint32_t light, uint32_t seed = 7) {
  Trace t;
  for (uint32_t i = 0; i < heavy; ++i)
    for (uint32_t k = 0; k < each; ++k) t.packets.push_back({flow(i), 100, 0});
  for (uint32_t i = 0; i < light; ++i)
    for (uint32_t k = 0; k < 5; ++k) t.packets.push_back({flow(heavy + i), 100, 0});
  std::mt19937 rng(seed);
  std::shuffle(t.packets.begin(), t.packets.end(), rng);
  return t;
}

}  // namespace dpukit::measure::testing
