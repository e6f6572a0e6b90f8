// Synthetic traces for the datapath's tests, built in memory.
#pragma once

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

}  // namespace dpukit::measure::testing
