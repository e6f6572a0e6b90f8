#include "rss.h"

#include <gtest/gtest.h>

#include <vector>

namespace dpukit::measure {
namespace {

uint32_t ip(int a, int b, int c, int d) { return (uint32_t(a) << 24) | (b << 16) | (c << 8) | d; }

// Microsoft's "Verifying the RSS Hash Calculation" vectors (also the Intel
// 82599 datasheet's RSS verification suite): destination, source, and the
// expected IPv4-only and IPv4+TCP hashes with the standard key.
struct Vector {
  uint32_t dst, src;
  uint16_t dport, sport;
  uint32_t l3, l4;
};
const Vector kVectors[] = {
    {ip(161, 142, 100, 80), ip(66, 9, 149, 187), 1766, 2794, 0x323e8fc2, 0x51ccc178},
    {ip(65, 69, 140, 83), ip(199, 92, 111, 2), 4739, 14230, 0xd718262a, 0xc626b0ea},
    {ip(12, 22, 207, 184), ip(24, 19, 198, 95), 38024, 12898, 0xd2d0a5de, 0x5c2b394a},
    {ip(209, 142, 163, 6), ip(38, 27, 205, 30), 2217, 48228, 0x82989176, 0xafc7327f},
    {ip(202, 188, 127, 2), ip(153, 39, 163, 191), 1303, 44251, 0x5d1809c5, 0x10e828a2},
};

TEST(Toeplitz, MatchesThePublishedVectors) {
  Toeplitz t;
  for (const auto& v : kVectors) {
    FlowKey k = FlowKey::from_tuple(v.src, v.dst, v.sport, v.dport, 6);
    EXPECT_EQ(t.hash_l3(k), v.l3) << k.str();
    EXPECT_EQ(t.hash_l4(k), v.l4) << k.str();
  }
}

TEST(Toeplitz, DependsOnTheKey) {
  std::array<uint8_t, 40> other = kStandardRssKey;
  other[0] ^= 1;
  FlowKey k = FlowKey::from_tuple(kVectors[0].src, kVectors[0].dst, 2794, 1766, 6);
  EXPECT_NE(Toeplitz(other).hash_l4(k), Toeplitz().hash_l4(k));
}

TEST(RssQueues, SpreadsFlowsAndPinsEachFlowToOneQueue) {
  RssQueues q(4);
  std::vector<int> per(4);
  for (uint32_t i = 0; i < 40000; ++i) {
    FlowKey k = FlowKey::from_tuple(0x0a000000 + i * 7919, 0xc0a80001, 1000 + i % 5000, 443, 6);
    unsigned a = q.queue(k);
    ASSERT_LT(a, 4u);
    EXPECT_EQ(q.queue(k), a);
    ++per[a];
  }
  for (int n : per) EXPECT_NEAR(n, 10000, 1500);
  EXPECT_THROW(RssQueues(0), std::invalid_argument);
}

}  // namespace
}  // namespace dpukit::measure
