#include "modules/filter.h"

#include <algorithm>

namespace dpukit::mesh {

namespace {

// The time (ns) a bucket takes to fill from empty to max_tokens, bounded so that
// now - fill_time cannot overflow.
int64_t fill_time_ns(uint32_t max_tokens, uint32_t per_fill, int64_t interval_ns) {
  __int128 t = (static_cast<__int128>(max_tokens) * interval_ns + per_fill - 1) / per_fill;
  return static_cast<int64_t>(std::min<__int128>(t, int64_t{1} << 61));
}

}  // namespace

TokenBucket::TokenBucket(uint32_t max_tokens, uint32_t tokens_per_fill, int64_t fill_interval_ns, int64_t now_ns)
    : max_(max_tokens), per_fill_(std::max<uint32_t>(1, tokens_per_fill)),
      interval_ns_(std::max<int64_t>(1, fill_interval_ns)),
      empty_at_ns_(now_ns - fill_time_ns(max_tokens, per_fill_, interval_ns_)) {}  // starts full

bool TokenBucket::try_take(int64_t now_ns) {
  // In "credit" units (ns x per_fill) a token is interval_ns of credit, so the
  // arithmetic is exact; rounding only ever loses (never makes) a fraction of a token.
  const __int128 cap = static_cast<__int128>(max_) * interval_ns_;
  int64_t empty_at = empty_at_ns_.load(std::memory_order_relaxed);
  for (;;) {
    __int128 credit = static_cast<__int128>(now_ns - empty_at) * per_fill_;
    if (credit > cap) credit = cap;
    if (credit < interval_ns_) return false;
    credit -= interval_ns_;
    // The new empty_at leaves at most `credit` (rounded down to whole ns).
    int64_t next = now_ns - static_cast<int64_t>(credit / per_fill_);
    if (empty_at_ns_.compare_exchange_weak(empty_at, next, std::memory_order_relaxed)) return true;
  }
}

LocalRateLimit::LocalRateLimit(const config::LocalRateLimit& cfg, int64_t now_ns)
    : cfg_(cfg),
      bucket_(cfg.max_tokens, cfg.tokens_per_fill, static_cast<int64_t>(cfg.fill_interval.count()) * 1000000, now_ns) {}

LocalRateLimit::Verdict LocalRateLimit::check(int64_t now_ns, uint64_t random) {
  // Two independent draws from one random value for the two fractions.
  double draw_enabled = static_cast<double>(random & 0xffffffff) / 4294967296.0;
  double draw_enforced = static_cast<double>(random >> 32) / 4294967296.0;
  if (draw_enabled >= cfg_.enabled_fraction) return Verdict::kNotEnabled;
  if (bucket_.try_take(now_ns)) return Verdict::kAllowed;
  return draw_enforced < cfg_.enforced_fraction ? Verdict::kLimited : Verdict::kLimitedNotEnforced;
}

}  // namespace dpukit::mesh
