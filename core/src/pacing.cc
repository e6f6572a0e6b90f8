#include "dpukit/core/pacing.h"

#include <time.h>

#include <algorithm>
#include <cmath>

#include "dpukit/core/accounting.h"

namespace dpukit {

Pacer::Pacer(double rate_per_sec, uint32_t max_burst)
    : rate_(rate_per_sec), tokens_(1.0), max_burst_(std::max<uint32_t>(max_burst, 1)), last_ns_(now_ns()) {}

uint32_t Pacer::try_acquire(uint32_t want, uint64_t now) {
  if (rate_ <= 0) {
    released_ += want;
    return want;
  }
  if (now > last_ns_) {
    tokens_ = std::min(max_burst_, tokens_ + (now - last_ns_) * rate_ * 1e-9);
    last_ns_ = now;
  }
  uint32_t n = static_cast<uint32_t>(std::min<double>(want, std::floor(tokens_)));
  tokens_ -= n;
  released_ += n;
  return n;
}

uint32_t Pacer::acquire(uint32_t want) {
  uint64_t now;
  return acquire(want, now);
}

uint32_t Pacer::acquire(uint32_t want, uint64_t& now) {
  now = now_ns();
  if (want == 0 || rate_ <= 0) return try_acquire(want, now);
  for (;; now = now_ns()) {
    if (uint32_t n = try_acquire(want, now)) return n;
    // Sleep through most of the wait, then spin: nanosleep overshoots by tens of µs.
    double wait_ns = (1.0 - tokens_) / rate_ * 1e9;
    if (wait_ns > 200000) {
      timespec ts{0, static_cast<long>(std::min(wait_ns - 100000, 5e8))};
      nanosleep(&ts, nullptr);
    }
  }
}

}  // namespace dpukit
