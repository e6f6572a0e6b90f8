// The filter processing module: the HTTP filters that run between the parser
// and the router. Today: envoy.filters.http.local_ratelimit, a token bucket
// shared by every worker (as Envoy's is), refilled lazily from the clock.
//
// Envoy 1.40's local rate limit bucket (AtomicTokenBucketImpl) refills
// continuously at tokens_per_fill / fill_interval, not in whole fills: half
// an interval after the bucket ran dry, half of tokens_per_fill is there.
#pragma once

#include <atomic>
#include <cstdint>

#include "config/bootstrap.h"

namespace dpukit::mesh {

class TokenBucket {
 public:
  TokenBucket(uint32_t max_tokens, uint32_t tokens_per_fill, int64_t fill_interval_ns, int64_t now_ns);
  // Takes one token if there is a whole one. Lock-free; safe from any thread.
  bool try_take(int64_t now_ns);

 private:
  uint32_t max_, per_fill_;
  int64_t interval_ns_;
  // The bucket holds min(max, (now - empty_at) * per_fill / interval) tokens:
  // empty_at is when it was (or would have been) empty. Taking a token moves
  // it forward by interval / per_fill.
  std::atomic<int64_t> empty_at_ns_;
};

class LocalRateLimit {
 public:
  LocalRateLimit(const config::LocalRateLimit& cfg, int64_t now_ns);
  enum class Verdict { kNotEnabled, kAllowed, kLimitedNotEnforced, kLimited };
  // `random` decides the filter_enabled / filter_enforced fractions.
  Verdict check(int64_t now_ns, uint64_t random);
  const config::LocalRateLimit& config() const { return cfg_; }

 private:
  config::LocalRateLimit cfg_;
  TokenBucket bucket_;
};

}  // namespace dpukit::mesh
