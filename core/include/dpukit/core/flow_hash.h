// The flow key's hashes, compiled into the caller: XXH3 from xxhash's header
// (XXH_INLINE_ALL), not through a call into the shared library. For a 13-byte
// key XXH3 is a few multiplies; the call (and the library's length dispatch)
// cost as much again, paid on every packet by every per-packet structure.
// flow_hash() (flow_key.h) gives the same values as flow_hash64() here.
#pragma once

#include <cstdint>

#include "dpukit/core/flow_key.h"

// Static, renamed (XXH_INLINE_*) copies of xxhash's functions; coexists with a
// plain #include <xxhash.h> in the same translation unit.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace dpukit {

struct FlowHash128 {
  uint64_t lo, hi;
};

// XXH3 for 9 to 16 bytes, the routine XXH3's entry points dispatch a
// 13-byte key to, called directly: the entry points handle every length and
// the compiler keeps them as calls where they are used often (measured: a call
// per sketch update). The values are XXH3's (FlowHash.InlineIsTheLibrarys
// checks them against the library's).
static_assert(sizeof(FlowKey) >= 9 && sizeof(FlowKey) <= 16, "XXH3's 9-16 byte routine");

// XXH3-128 over the 13 key bytes, seeded. Its 128 output bits behave as
// independent uniform bits (XXH3 passes SMHasher at 128 bits), so disjoint
// bit fields of one call serve as independent hash functions.
[[gnu::always_inline]] inline FlowHash128 flow_hash128(const FlowKey& key, uint64_t seed) {
  const XXH128_hash_t h = XXH3_len_9to16_128b(key.bytes.data(), key.bytes.size(), XXH3_kSecret, seed);
  return {h.low64, h.high64};
}

// XXH3-64, seeded: the value flow_hash() returns, inline.
[[gnu::always_inline]] inline uint64_t flow_hash64(const FlowKey& key, uint64_t seed) {
  return XXH3_len_9to16_64b(key.bytes.data(), key.bytes.size(), XXH3_kSecret, seed);
}

}  // namespace dpukit
