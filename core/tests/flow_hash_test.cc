// The inline flow hashes (dpukit/core/flow_hash.h) give XXH3's values: the
// shared library's XXH3-128 and XXH3-64, and flow_hash().
#include <gtest/gtest.h>

#include <cstdint>

#include "dpukit/core/flow_key.h"

// The shared library's entry points, named before flow_hash.h renames them.
#include <xxhash.h>
namespace {
XXH128_hash_t library128(const dpukit::FlowKey& k, uint64_t seed) {
  return XXH3_128bits_withSeed(k.bytes.data(), k.bytes.size(), seed);
}
uint64_t library64(const dpukit::FlowKey& k, uint64_t seed) {
  return XXH3_64bits_withSeed(k.bytes.data(), k.bytes.size(), seed);
}
}  // namespace

#include "dpukit/core/flow_hash.h"
#include "dpukit/core/random.h"

namespace dpukit {
namespace {

TEST(FlowHash, InlineIsTheLibrarys) {
  SplitMix64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t x = rng.next();
    const FlowKey k = FlowKey::from_tuple(uint32_t(x), uint32_t(x >> 32), uint16_t(i), uint16_t(x >> 7), uint8_t(i));
    const uint64_t seed = i % 3 == 0 ? 0 : rng.next();
    const FlowHash128 h = flow_hash128(k, seed);
    const auto want = library128(k, seed);
    ASSERT_EQ(h.lo, want.low64) << k.str();
    ASSERT_EQ(h.hi, want.high64) << k.str();
    ASSERT_EQ(flow_hash64(k, seed), library64(k, seed));
    ASSERT_EQ(flow_hash(k, seed), library64(k, seed));
  }
}

}  // namespace
}  // namespace dpukit
