// What Duet's tests share: flow keys, and the table's and Duet's configurations.
#pragma once

#include <cstdint>

#include "dpukit/core/flow_table.h"
#include "duet.h"

namespace dpukit::measure::duet_fixtures {

inline FlowKey flow(uint32_t i) {
  return FlowKey::from_tuple(0x0a000000u + i, 0xc0000000u + i * 13, 1024 + i % 60000, 80, 6);
}

inline EmulatedFlowTable::Config table_cfg(size_t capacity = 1024, double rate = 0, uint64_t latency = 0,
                                           uint64_t idle = 0) {
  EmulatedFlowTable::Config c;
  c.capacity = capacity;
  c.insert_rate = rate;
  c.insert_latency_ns = latency;
  c.idle_timeout_ns = idle;
  return c;
}

inline DuetConfig duet_cfg(size_t memory, uint64_t top, size_t records = 256, unsigned bits = 32) {
  DuetConfig d;
  d.memory_bytes = memory;
  d.top = top;
  d.records = records;
  d.counter_bits = bits;
  return d;
}

}  // namespace dpukit::measure::duet_fixtures
