// One hash per packet (RowHash, sketches/common.h) and the batched updates.
// - The rows split from one XXH3-128 behave as independent hash functions:
//   the joint distribution of two and of three rows' counters, of the signs
//   and of UnivMon's level with the rows is uniform (chi-square). Double
//   hashing (h1 + i*h2) fails the three-row test: its third row follows from
//   the other two.
// - update_burst() leaves every sketch exactly as update() per packet does,
//   and Duet's burst sketch path does what on_sketch_path() per packet does.
// - Duet's rows are the Count-Min baseline's with the same seed.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "dpukit/core/flow_table.h"
#include "dpukit/measure.h"
#include "duet.h"
#include "sketches/common.h"
#include "sketches/count_min.h"
#include "sketches/univmon.h"
#include "zipf.h"

namespace dpukit::measure::sketches {
namespace {

// Sequential 5-tuples: the structured keys a weak hash shows its patterns on.
std::vector<FlowKey> sequential_keys(size_t n) {
  std::vector<FlowKey> k;
  k.reserve(n);
  for (size_t i = 0; i < n; ++i)
    k.push_back(FlowKey::from_tuple(0x0a000000u + static_cast<uint32_t>(i / 1000), 0xc0a80001u,
                                    static_cast<uint16_t>(1024 + i % 1000), 443, 6));
  return k;
}

// Pearson's chi-square of observed counts against a uniform expectation,
// in standard deviations above its mean (df = cells - 1, variance 2 df).
double chi_square_sigmas(const std::vector<uint64_t>& cells, uint64_t total) {
  const double expected = double(total) / double(cells.size());
  double x2 = 0;
  for (uint64_t c : cells) x2 += (double(c) - expected) * (double(c) - expected) / expected;
  const double df = double(cells.size() - 1);
  return (x2 - df) / std::sqrt(2 * df);
}

constexpr uint32_t kW = 16;                  // counters a row: 16^3 = 4,096 cells for three rows
constexpr size_t kKeys = 400000;             // about 100 keys a cell
constexpr double kSigmas = 6;                // fixed keys, so deterministic; 6 sigma is far from chance

TEST(RowHash, RowsAreJointlyUniformInPairsAndTriples) {
  const auto keys = sequential_keys(kKeys);
  std::vector<uint64_t> pair01(kW * kW), pair02(kW * kW), pair12(kW * kW), triple(kW * kW * kW);
  for (const FlowKey& k : keys) {
    const RowHash h = RowHash::of(k, 7);
    const uint32_t a = h.index(0, kW), b = h.index(1, kW), c = h.index(2, kW);
    ++pair01[a * kW + b];
    ++pair02[a * kW + c];
    ++pair12[b * kW + c];
    ++triple[(a * kW + b) * kW + c];
  }
  EXPECT_LT(chi_square_sigmas(pair01, kKeys), kSigmas);
  EXPECT_LT(chi_square_sigmas(pair02, kKeys), kSigmas);
  EXPECT_LT(chi_square_sigmas(pair12, kKeys), kSigmas);
  EXPECT_LT(chi_square_sigmas(triple, kKeys), kSigmas);
}

// The control: rows by double hashing from the same 128 bits pass the pairs
// but not the triple, so the test above can tell.
TEST(RowHash, DoubleHashingFailsTheTripleTest) {
  const auto keys = sequential_keys(kKeys);
  std::vector<uint64_t> triple(kW * kW * kW);
  for (const FlowKey& k : keys) {
    const RowHash h = RowHash::of(k, 7);
    auto row = [&](uint64_t i) { return static_cast<uint32_t>(((h.lo + i * h.hi) >> 32) * kW >> 32); };
    ++triple[(row(0) * kW + row(1)) * kW + row(2)];
  }
  EXPECT_GT(chi_square_sigmas(triple, kKeys), 100.0);
}

TEST(RowHash, SignsAndLevelAreIndependentOfTheRows) {
  const auto keys = sequential_keys(kKeys);
  constexpr int kLevels = 4;  // levels 0, 1, 2 and 3 or deeper
  std::vector<uint64_t> sign_row(kW * 8), level_row0(kW * kLevels), level_row_deep(kW * kLevels), levels(kLevels);
  for (const FlowKey& k : keys) {
    const RowHash h = RowHash::of(k, 7);
    ++sign_row[h.index(2, kW) * 8 + (h.spare() & 7)];
    // UnivMon's level (VanillaUnivMon::level_of): trailing ones above the signs.
    const int level = std::min(std::countr_one(h.spare() >> 3), kLevels - 1);
    ++levels[level];
    ++level_row0[h.index(0, kW) * kLevels + level];
    ++level_row_deep[h.derived(1).index(1, kW) * kLevels + level];
  }
  EXPECT_LT(chi_square_sigmas(sign_row, kKeys), kSigmas);
  // Level j holds 2^-j of the keys: weigh the cells by that before comparing.
  auto level_sigmas = [&](const std::vector<uint64_t>& cells) {
    double x2 = 0;
    for (uint32_t i = 0; i < kW; ++i)
      for (int j = 0; j < kLevels; ++j) {
        const double p = (j < kLevels - 1 ? std::ldexp(1.0, -(j + 1)) : std::ldexp(1.0, -(kLevels - 1))) / kW;
        const double e = p * kKeys;
        x2 += (double(cells[i * kLevels + j]) - e) * (double(cells[i * kLevels + j]) - e) / e;
      }
    const double df = kW * kLevels - 1;
    return (x2 - df) / std::sqrt(2 * df);
  };
  EXPECT_LT(level_sigmas(level_row0), kSigmas);
  EXPECT_LT(level_sigmas(level_row_deep), kSigmas);
  EXPECT_NEAR(double(levels[1]) / kKeys, 0.25, 0.005);
}

TEST(RowHash, DerivedHashesAreIndependentOfTheFirstAndOfEachOther) {
  const auto keys = sequential_keys(kKeys);
  std::vector<uint64_t> level0_vs_1(kW * kW), level1_vs_2(kW * kW);
  for (const FlowKey& k : keys) {
    const RowHash h = RowHash::of(k, 7);
    ++level0_vs_1[h.index(0, kW) * kW + h.derived(1).index(0, kW)];
    ++level1_vs_2[h.derived(1).index(2, kW) * kW + h.derived(2).index(2, kW)];
  }
  EXPECT_LT(chi_square_sigmas(level0_vs_1, kKeys), kSigmas);
  EXPECT_LT(chi_square_sigmas(level1_vs_2, kKeys), kSigmas);
}

// update_burst() in bursts of 64 (a dpu worker's) against update() per packet.
void expect_burst_matches(const std::string& algo, const SketchOptions& o) {
  const ZipfStream z(20000, 300000, 1.0, 5);
  auto one = make_sketch(algo, 200 * 1024, o);
  auto burst = make_sketch(algo, 200 * 1024, o);
  std::vector<const FlowKey*> keys;
  for (size_t i = 0; i < z.packets.size(); ++i) {
    one->update(z.key(i), 1);
    keys.push_back(&z.key(i));
    if (keys.size() == 64 || i + 1 == z.packets.size()) {
      burst->update_burst(keys.data(), keys.size());
      keys.clear();
    }
  }
  for (const FlowKey& k : z.flows) ASSERT_EQ(one->estimate(k), burst->estimate(k)) << algo << " " << k.str();
  const auto hh1 = one->heavy_hitters(100, z.flows), hh2 = burst->heavy_hitters(100, z.flows);
  ASSERT_EQ(hh1.size(), hh2.size()) << algo;
  for (size_t i = 0; i < hh1.size(); ++i) {
    EXPECT_EQ(hh1[i].first, hh2[i].first) << algo;
    EXPECT_EQ(hh1[i].second, hh2[i].second) << algo;
  }
  EXPECT_EQ(one->cardinality(), burst->cardinality()) << algo;
  EXPECT_EQ(one->entropy(), burst->entropy()) << algo;
}

TEST(SketchBurst, EveryAlgorithmUpdatesABurstAsItsPackets) {
  SketchOptions o;
  for (const std::string& algo : sketch_algorithms()) expect_burst_matches(algo, o);
  o.sample_p = 0.01;
  for (const char* algo : {"nitro-cms", "nitro-cs", "nitro-univmon"}) expect_burst_matches(algo, o);
}

TEST(SketchBurst, AlwaysCorrectSwitchesInsideABurstAsPerPacket) {
  SketchOptions o;
  o.always_correct = true;
  o.always_correct_packets = 1000;  // mid-burst: 1000 = 15 * 64 + 40
  for (const char* algo : {"nitro-cms", "nitro-cs", "nitro-univmon"}) expect_burst_matches(algo, o);
  o.always_correct_packets = 0;  // the L2 rule, each level on its own
  for (const char* algo : {"nitro-cms", "nitro-cs", "nitro-univmon"}) expect_burst_matches(algo, o);
}

TEST(SketchBurst, UnivMonLevelsComeFromThePacketHash) {
  VanillaUnivMon um(500 * 1024, SketchOptions{});
  const auto keys = sequential_keys(100000);
  std::vector<size_t> at(kUnivMonLevels);
  for (const FlowKey& k : keys) ++at[um.level_of(k)];
  // Level j (or deeper) holds 2^-j of the flows.
  for (int j = 1; j < 8; ++j) {
    size_t deeper = 0;
    for (int i = j; i < kUnivMonLevels; ++i) deeper += at[i];
    const double expect = std::ldexp(double(keys.size()), -j);
    EXPECT_NEAR(double(deeper), expect, 6 * std::sqrt(expect)) << "level " << j;
  }
}

}  // namespace
}  // namespace dpukit::measure::sketches

namespace dpukit::measure {
namespace {

// The light flows' Count-Min inside Duet maps a key to the same counters as
// the Count-Min baseline with the same seed: with TOP out of reach (no
// promotion) and the same width, every estimate is the baseline's.
TEST(DuetHash, RowsAreTheCountMinBaselinesWithTheSameSeed) {
  for (uint64_t seed : {1ull, 77ull}) {
    EmulatedFlowTable table(EmulatedFlowTable::Config{});
    DuetConfig c;
    c.memory_bytes = 64 * 1024;
    c.records = 64;
    c.counter_bits = 32;
    c.top = 1ull << 40;
    c.seed = seed;
    Duet duet(c, table);
    SketchOptions o;
    o.seed = seed;
    sketches::CountMin cm(duet.width() * 3 * sizeof(uint32_t), o);
    ASSERT_EQ(cm.width(), duet.width());
    const sketches::ZipfStream z(5000, 100000, 1.0, 3);
    for (size_t i = 0; i < z.packets.size(); ++i) {
      duet.on_sketch_path(z.key(i));
      cm.update(z.key(i));
    }
    for (const FlowKey& k : z.flows) ASSERT_EQ(duet.estimate(k), cm.estimate(k)) << k.str();
  }
}

// The burst path against the per-packet path, TOP within reach (promotions,
// the rare path per packet) on one worker and with atomic increments.
TEST(DuetHash, BurstSketchPathIsThePerPacketOne) {
  for (unsigned bits : {16u, 32u})
    for (bool single : {true, false}) {
      EmulatedFlowTable::Config tc;
      tc.clock = [] { return uint64_t{0}; };  // both tables in the same state whatever the scheduler does
      EmulatedFlowTable t1(tc), t2(tc);
      DuetConfig c;
      c.memory_bytes = 64 * 1024;
      c.records = 64;
      c.counter_bits = bits;
      c.top = 200;
      c.single_writer = single;
      Duet one(c, t1), burst(c, t2);
      const sketches::ZipfStream z(5000, 100000, 1.1, 4);
      std::vector<const FlowKey*> keys;
      for (size_t i = 0; i < z.packets.size(); ++i) {
        one.on_sketch_path(z.key(i));
        keys.push_back(&z.key(i));
        if (keys.size() == 64 || i + 1 == z.packets.size()) {
          burst.on_sketch_path_burst(keys.data(), keys.size());
          keys.clear();
        }
      }
      const auto s1 = one.stats(), s2 = burst.stats();
      EXPECT_GT(s1.promotions, 10u);
      EXPECT_EQ(s1.promotions, s2.promotions);
      EXPECT_EQ(s1.moved_to_record, s2.moved_to_record);
      EXPECT_EQ(s1.records_full, s2.records_full);
      for (const FlowKey& k : z.flows) ASSERT_EQ(one.estimate(k), burst.estimate(k)) << bits << " " << single;
    }
}

}  // namespace
}  // namespace dpukit::measure
