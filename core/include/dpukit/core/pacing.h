// Emitting work at an offered rate (packets/s) with bounded burstiness: a
// token bucket whose depth is the largest burst ever released at once.
#pragma once

#include <cstdint>

namespace dpukit {

class Pacer {
 public:
  // rate <= 0: unpaced (acquire returns `want` at once).
  explicit Pacer(double rate_per_sec, uint32_t max_burst = 32);

  // Waits until at least one item may go, then returns how many may go now:
  // at most min(want, max_burst). Credit beyond max_burst is forfeited, so a
  // stalled sender never catches up in one flood.
  uint32_t acquire(uint32_t want);
  // The same, and `now` is the time (now_ns()) it went at, so that a sender
  // reads the clock once a burst.
  uint32_t acquire(uint32_t want, uint64_t& now);
  // Without waiting: how many may go now (possibly 0).
  uint32_t try_acquire(uint32_t want, uint64_t now);

  double rate() const { return rate_; }
  uint64_t released() const { return released_; }

 private:
  double rate_;
  double tokens_;
  double max_burst_;
  uint64_t last_ns_;
  uint64_t released_ = 0;
};

}  // namespace dpukit
