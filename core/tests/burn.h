// Test helper: spends CPU time on the calling thread.
#pragma once

#include <cstdint>

#include "dpukit/core/accounting.h"

namespace dpukit::test {

// Burns `ns` of this thread's CPU time; returns what it used.
inline uint64_t burn(uint64_t ns) {
  const uint64_t start = thread_cpu_ns();
  volatile uint64_t x = 0;
  while (thread_cpu_ns() - start < ns) x = x + 1;
  return thread_cpu_ns() - start;
}

}  // namespace dpukit::test
