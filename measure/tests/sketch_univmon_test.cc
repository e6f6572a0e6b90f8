// UnivMon and NitroSketch-UnivMon: the recursive G-sum estimator (exact when
// every level's heap holds its whole sub-stream), cardinality and entropy on a
// Zipf stream, heavy hitters, the memory layout, and nitro-univmon's unbiased
// per-flow estimates.
#include <gtest/gtest.h>

#include <cmath>

#include "dpukit/measure.h"
#include "sketches/univmon.h"
#include "unbiased.h"
#include "zipf.h"

namespace dpukit::measure::sketches {
namespace {

constexpr size_t k500KB = 500 * 1024;

TEST(SketchUnivMon, LayoutFitsTheBudgetLevelZeroGetsAQuarter) {
  for (size_t budget : {size_t(300 * 1024), k500KB, size_t(600 * 1024), size_t(4 << 20)}) {
    const UnivMonLayout L = univmon_layout("univmon", budget, 1000);
    EXPECT_LE(L.bytes, budget);
    EXPECT_GE(double(L.bytes), 0.99 * double(budget));
    EXPECT_EQ(L.heap_capacity[0], 1000u);
    size_t total = 0;
    for (int j = 0; j < kUnivMonLevels; ++j) total += L.widths[j];
    EXPECT_NEAR(double(L.widths[0]) / double(total), 0.25, 0.01);
    for (int j = 1; j < kUnivMonLevels; ++j) {
      EXPECT_EQ(L.widths[j], L.widths[1]);
      EXPECT_GE(L.widths[j], L.heap_floor);
      EXPECT_GE(L.heap_capacity[j], L.heap_floor);
      EXPECT_LE(L.heap_capacity[j], L.heap_capacity[j - 1]);
    }
    VanillaUnivMon um(budget, SketchOptions{});
    EXPECT_EQ(um.memory_bytes(), L.bytes);
  }
  EXPECT_EQ(univmon_layout("univmon", k500KB, 1000).heap_floor, 256u);
  EXPECT_LT(univmon_layout("univmon", 300 * 1024, 1000).heap_floor, 256u);  // heaps capped at 40%
  EXPECT_THROW(univmon_layout("univmon", 20000, 1000), BudgetError);
  EXPECT_NO_THROW(univmon_layout("univmon", 20000, 16));
}

TEST(SketchUnivMon, RecursiveEstimatorIsExactWhenHeapsHoldEverything) {
  // 150 flows: every level's heap (>= 256 entries) holds its whole sub-stream,
  // so Y_j = |level j| exactly; at 4 MB the Count Sketches (width >= 20k) are
  // collision-free for all practical purposes, so the entropy matches too.
  const ZipfStream z(150, 20000, 1.0, 2);
  auto s = make_sketch("univmon", 4 << 20);
  for (size_t i = 0; i < z.packets.size(); ++i) s->update(z.key(i));
  ASSERT_TRUE(s->cardinality().has_value());
  EXPECT_EQ(*s->cardinality(), double(z.distinct()));
  EXPECT_NEAR(*s->entropy(), z.entropy(), 0.01);
  // Levels are nested sub-streams: deeper levels hold fewer flows.
  auto* um = dynamic_cast<VanillaUnivMon*>(s.get());
  ASSERT_NE(um, nullptr);
  EXPECT_EQ(um->heap(0).size(), z.distinct());
  EXPECT_LT(um->heap(3).size(), um->heap(0).size() / 3);
  for (size_t i = 0; i < um->heap(2).size(); ++i) EXPECT_GE(um->level_of(um->heap(2).key(i)), 2);
}

void expect_cardinality_entropy_hh(const std::string& algo, const SketchOptions& o, const ZipfStream& z,
                                   double card_tol, double ent_tol) {
  auto s = make_sketch(algo, k500KB, o);
  for (size_t i = 0; i < z.packets.size(); ++i) s->update(z.key(i));
  const double card = *s->cardinality(), ent = *s->entropy();
  const double true_card = double(z.distinct()), true_ent = z.entropy();
  SCOPED_TRACE(algo + ": cardinality " + std::to_string(card) + " (true " + std::to_string(true_card) + "), entropy " +
               std::to_string(ent) + " (true " + std::to_string(true_ent) + ")");
  EXPECT_NEAR(card, true_card, card_tol * true_card);
  EXPECT_NEAR(ent, true_ent, ent_tol * true_ent);

  // Heavy hitters: flows with >= 0.5% of the packets. Those clearly above
  // (1.5x) are all found; what is reported is at least half the threshold.
  const double thr = 0.005 * double(z.packets.size());
  const auto hh = s->heavy_hitters(thr, {});
  size_t clear = 0, found = 0, sound = 0;
  for (size_t r = 0; r < z.flows.size(); ++r) {
    if (double(z.truth[r]) < 1.5 * thr) continue;
    ++clear;
    for (const auto& e : hh) found += e.first == z.flows[r];
  }
  for (const auto& e : hh) {
    for (size_t r = 0; r < z.flows.size(); ++r) {
      if (e.first == z.flows[r]) sound += double(z.truth[r]) >= 0.5 * thr;
    }
  }
  ASSERT_GT(clear, 5u);
  EXPECT_EQ(found, clear);
  EXPECT_GE(double(sound), 0.9 * double(hh.size()));
  EXPECT_NEAR(s->estimate(z.flows[0]), double(z.truth[0]), 0.05 * double(z.truth[0]));
}

TEST(SketchUnivMon, CardinalityEntropyAndHeavyHittersOnZipf) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const ZipfStream z(20000, 200000, 1.0, seed);
    SketchOptions o;
    o.seed = seed;
    expect_cardinality_entropy_hh("univmon", o, z, 0.15, 0.10);
  }
}

TEST(SketchUnivMon, NitroAlwaysCorrectKeepsCardinalityAndEntropy) {
  // With the L2 rule each level's Count Sketch switches to sampling on its own
  // sub-stream; the deep levels the cardinality estimate relies on stay exact.
  for (uint64_t seed : {1, 2}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const ZipfStream z(20000, 200000, 1.0, seed);
    SketchOptions o;
    o.seed = seed;
    o.always_correct = true;
    o.sample_p = 0.1;
    expect_cardinality_entropy_hh("nitro-univmon", o, z, 0.15, 0.10);
  }
}

TEST(SketchUnivMon, NitroPerFlowEstimatesAreUnbiased) {
  const ZipfStream z(2000, 20000, 1.0, 4);
  const auto sketch = [](uint64_t seed) {
    SketchOptions o;
    o.seed = seed;
    o.sample_p = 0.1;
    o.top_k = 64;
    return NitroUnivMon(100 * 1024, o);
  };
  ASSERT_TRUE(sketch(1).level(0).sampling());
  const std::vector<size_t> tracked = {0, 5, 50};
  const std::vector<EstimateError> errors = expect_unbiased(z, tracked, 100, sketch);
  // Sampling noise of a flow of size f at p = 0.1: sd about sqrt(9 f).
  for (size_t t = 0; t < tracked.size(); ++t)
    EXPECT_LE(errors[t].sd, 2.0 * std::sqrt(9.0 * double(z.truth[tracked[t]])) + 60.0) << "rank " << tracked[t];
}

TEST(SketchUnivMon, NitroAlwaysCorrectPacketsSwitchesEveryLevelTogether) {
  SketchOptions o;
  o.always_correct = true;
  o.always_correct_packets = 1000;
  o.top_k = 64;
  NitroUnivMon nu(100 * 1024, o);
  VanillaUnivMon vu(100 * 1024, o);
  const ZipfStream z(500, 3000, 1.0, 6);
  for (size_t i = 0; i < 999; ++i) {
    nu.update(z.key(i));
    vu.update(z.key(i));
  }
  for (int j = 0; j < kUnivMonLevels; ++j) EXPECT_FALSE(nu.level(j).sampling());
  for (size_t r = 0; r < z.flows.size(); ++r) ASSERT_EQ(nu.estimate(z.flows[r]), vu.estimate(z.flows[r]));
  EXPECT_EQ(*nu.cardinality(), *vu.cardinality());
  nu.update(z.key(999), 3);  // straddles: 1 exact packet, 2 sampled
  EXPECT_EQ(nu.packets(), 1002u);
  for (int j = 0; j < kUnivMonLevels; ++j) EXPECT_TRUE(nu.level(j).sampling());
}

}  // namespace
}  // namespace dpukit::measure::sketches
