// NitroSketch over Count-Min and Count Sketch. Guards against the known bugs
// of public implementations: (a) a geometric step whose mean is not 1/p,
// (b) p = 1 dividing by log(0) or producing NaN, (c) a weight that is not
// exactly 1/p (ceil or rounding). Also: unbiasedness, AlwaysCorrect's exact
// phase and both switching rules, the heap's heavy hitters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dpukit/measure.h"
#include "sketches/count_min.h"
#include "sketches/count_sketch.h"
#include "sketches/nitro.h"
#include "unbiased.h"
#include "zipf.h"

namespace dpukit::measure::sketches {
namespace {

SketchOptions nitro_options(uint64_t seed, double p, size_t top_k = 32) {
  SketchOptions o;
  o.seed = seed;
  o.sample_p = p;
  o.top_k = top_k;
  return o;
}
// A NitroSketch budget whose rows are exactly `width` wide.
size_t nitro_budget(uint32_t width, size_t top_k) { return size_t(width) * 12 + TopK::bytes_for(top_k); }

// (a) -----------------------------------------------------------------------

TEST(SketchNitro, GeometricStepHasMeanExactlyOneOverP) {
  const size_t n = 1000000;
  for (double p : {0.5, 0.1, 0.01}) {
    GeometricSampler g(p, 12345);
    double sum = 0;
    size_t ones = 0;
    uint64_t mn = UINT64_MAX;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t gap = g.next_gap();
      sum += double(gap);
      ones += gap == 1;
      mn = std::min(mn, gap);
    }
    const double mean = sum / double(n);
    const double sd_mean = std::sqrt(1.0 - p) / p / std::sqrt(double(n));
    SCOPED_TRACE("p = " + std::to_string(p) + ": mean gap " + std::to_string(mean));
    // 5 standard errors: 0.0035 at p = 0.5, 0.047 at p = 0.1, 0.5 at p = 0.01.
    // An off-by-one (floor vs ceil, 1/p - 1) misses by 1, i.e. 10 to 700 of them.
    EXPECT_NEAR(mean, 1.0 / p, 5.0 * sd_mean);
    EXPECT_EQ(mn, 1u);  // consecutive slots can both be selected
    EXPECT_NEAR(double(ones) / double(n), p, 5.0 * std::sqrt(p * (1 - p) / double(n)));
  }
}

// (b) -----------------------------------------------------------------------

TEST(SketchNitro, POneSelectsEverySlotWithoutNaN) {
  GeometricSampler g(1.0, 7);
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(g.next_gap(), 1u);
  GeometricSampler near_one(1.0 - 1e-12, 7);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) sum += double(near_one.next_gap());
  EXPECT_EQ(sum, 10000.0);

  // nitro-cs / nitro-cms at p = 1 are the vanilla sketches, counter for counter.
  const ZipfStream z(3000, 30000, 1.0, 3);
  const uint32_t w = 700;
  NitroCountSketch ncs(nitro_budget(w, 32), nitro_options(5, 1.0));
  NitroCountMin ncm(nitro_budget(w, 32), nitro_options(5, 1.0));
  SketchOptions vo;
  vo.seed = 5;
  CountSketch cs(size_t(w) * 12, vo);
  CountMin cm(size_t(w) * 12, vo);
  ASSERT_EQ(ncs.rows().width(), cs.width());
  for (size_t i = 0; i < z.packets.size(); ++i) {
    ncs.update(z.key(i));
    ncm.update(z.key(i));
    cs.update(z.key(i));
    cm.update(z.key(i));
  }
  EXPECT_EQ(ncs.rows().weight(), 1.0f);
  EXPECT_EQ(ncs.rows().selected(), 3 * z.packets.size());
  EXPECT_EQ(ncm.rows().selected(), 3 * z.packets.size());
  for (size_t r = 0; r < z.flows.size(); ++r) {
    const double a = ncs.estimate(z.flows[r]), b = ncm.estimate(z.flows[r]);
    ASSERT_TRUE(std::isfinite(a) && std::isfinite(b));
    ASSERT_EQ(a, cs.estimate(z.flows[r]));
    ASSERT_EQ(b, cm.estimate(z.flows[r]));
  }
}

// (c) -----------------------------------------------------------------------

// Float counters accumulate rounding: each of the k additions of w to a
// counter that ends at c is off by at most half an ulp of c, so c is within
// k * ulp(c) / 2 of k * w, i.e. within k * ulp(c) / (2 w) weights of a whole
// number of weights. (At k ~ 900 and c ~ 3000 that is 0.03 weights; a weight
// of 4 or 3 instead of 3.33 leaves counters 0.2-0.4 weights off.)
double float_drift_units(float c, float w, double k) {
  const double ulp = double(std::nextafter(c, INFINITY) - c);
  return k * ulp / (2.0 * double(w)) + 1e-9;
}

TEST(SketchNitro, WeightIsExactlyOneOverP) {
  const double p = 0.3;
  const float w = static_cast<float>(1.0 / p);
  const ZipfStream one(1, 0, 1.0, 1);
  const FlowKey k = one.flows[0];
  const size_t n = 3000, kSeeds = 200;
  double sum_cs = 0, sumsq_cs = 0, sum_row = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    NitroCountSketch ncs(nitro_budget(1000, 32), nitro_options(seed, p));
    NitroCountMin ncm(nitro_budget(1000, 32), nitro_options(seed, p));
    ASSERT_EQ(ncs.rows().weight(), w);
    ASSERT_NE(ncs.rows().weight(), 4.0f);  // not ceil(1/p)
    ASSERT_NE(ncs.rows().weight(), 3.0f);  // not round(1/p)
    for (size_t i = 0; i < n; ++i) {
      ncs.update(k);
      ncm.update(k);
    }
    // Every counter the flow touched holds a whole number of weights, and the
    // numbers add up to the slots the sampler selected.
    double units = 0;
    for (int r = 0; r < 3; ++r) {
      const float c = ncm.rows().counter(r, ncm.index(k, r));
      const double u = double(c) / double(w);
      ASSERT_NEAR(u, std::round(u), float_drift_units(c, w, std::round(u)))
          << "counter " << c << " is not a multiple of " << w;
      units += std::round(u);
      sum_row += c;
    }
    EXPECT_EQ(units, double(ncm.rows().selected()));
    const double e = ncs.estimate(k);
    sum_cs += e;
    sumsq_cs += e * e;
  }
  // Each row read of a single-flow stream is Binomial(n, p) / p: unbiased.
  const double row_mean = sum_row / (3.0 * kSeeds);
  const double row_sd = std::sqrt(n * (1 - p) / p);  // of one row read
  EXPECT_NEAR(row_mean, double(n), 4.0 * row_sd / std::sqrt(3.0 * kSeeds));
  // nitro-cs: the median of three such reads; mean over seeds ~ n. With
  // weight 4 (ceil) it would be 1.2 n, with 3 (round) 0.9 n.
  const double mean = sum_cs / kSeeds;
  const double sd = std::sqrt(sumsq_cs / kSeeds - mean * mean);
  EXPECT_NEAR(mean, double(n), 4.0 * sd / std::sqrt(double(kSeeds)) + 1.0);
  EXPECT_GT(sd, 0.0);
}

// Unbiasedness ----------------------------------------------------------------

TEST(SketchNitro, CountSketchIsUnbiasedOverSeeds) {
  const ZipfStream z(2000, 20000, 1.0, 11);
  expect_unbiased(z, {0, 3, 30}, 200, [](uint64_t seed) {
    return NitroCountSketch(nitro_budget(256, 32), nitro_options(seed, 0.1));
  });
}

// nitro-cms: each sampled row counter is an unbiased estimate of the vanilla
// Count-Min's counter at the same place (the flow plus its collisions). The
// min over rows is not unbiased (it sits below the vanilla min); the rows are.
TEST(SketchNitro, CountMinRowsAreUnbiasedForTheVanillaRows) {
  const ZipfStream z(2000, 20000, 1.0, 12);
  const size_t kSeeds = 150;
  const size_t tracked[] = {0, 10, 100, 1000};
  double sum_diff = 0, sum_var = 0;
  size_t n = 0;
  double nitro_min = 0, vanilla_min = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    NitroCountMin ncm(nitro_budget(256, 32), nitro_options(seed, 0.1));
    SketchOptions vo;
    vo.seed = seed;
    CountMin cm(256 * 12, vo);
    for (size_t i = 0; i < z.packets.size(); ++i) {
      ncm.update(z.key(i));
      cm.update(z.key(i));
    }
    for (size_t r : tracked) {
      const FlowKey& k = z.flows[r];
      for (int row = 0; row < 3; ++row) {
        ASSERT_EQ(ncm.index(k, row), cm.index(k, row));
        const double v = cm.counter(row, cm.index(k, row));
        sum_diff += ncm.rows().counter(row, ncm.index(k, row)) - v;
        sum_var += v * (1 - 0.1) / 0.1;  // Var of Binomial(v, p) / p
        ++n;
      }
      nitro_min += ncm.estimate(k);
      vanilla_min += cm.estimate(k);
    }
  }
  const double mean_diff = sum_diff / double(n);
  EXPECT_NEAR(mean_diff, 0.0, 5.0 * std::sqrt(sum_var) / double(n));
  // The min of noisy reads sits a little below the vanilla min (NitroSketch's
  // correction of Count-Min's overestimate), but it is of the same size.
  EXPECT_LT(nitro_min, vanilla_min);
  EXPECT_GT(nitro_min, 0.85 * vanilla_min);
}

// AlwaysCorrect -----------------------------------------------------------------

TEST(SketchNitro, AlwaysCorrectIsVanillaBeforeThePacketSwitchAndSamplesAfter) {
  const ZipfStream z(1000, 20000, 1.0, 13);
  SketchOptions o = nitro_options(9, 0.1);
  o.always_correct = true;
  o.always_correct_packets = 5000;
  NitroCountSketch ncs(nitro_budget(500, 32), o);
  SketchOptions vo;
  vo.seed = 9;
  CountSketch cs(500 * 12, vo);
  for (size_t i = 0; i < 4999; ++i) {
    ncs.update(z.key(i));
    cs.update(z.key(i));
  }
  EXPECT_FALSE(ncs.rows().sampling());
  for (size_t r = 0; r < z.flows.size(); ++r) ASSERT_EQ(ncs.estimate(z.flows[r]), cs.estimate(z.flows[r]));
  ncs.update(z.key(4999));
  cs.update(z.key(4999));
  EXPECT_TRUE(ncs.rows().sampling());  // switched after exactly 5000 packets
  for (size_t r = 0; r < z.flows.size(); ++r) ASSERT_EQ(ncs.estimate(z.flows[r]), cs.estimate(z.flows[r]));
  EXPECT_EQ(ncs.rows().selected(), 0u);

  for (size_t i = 5000; i < z.packets.size(); ++i) {
    ncs.update(z.key(i));
    cs.update(z.key(i));
  }
  // About p * 3 slots per packet were updated after the switch.
  const double slots = 3.0 * double(z.packets.size() - 5000);
  EXPECT_NEAR(double(ncs.rows().selected()), 0.1 * slots, 5.0 * std::sqrt(slots * 0.1 * 0.9));
  size_t differ = 0;
  for (size_t r = 0; r < z.flows.size(); ++r) differ += ncs.estimate(z.flows[r]) != cs.estimate(z.flows[r]);
  EXPECT_GT(differ, z.flows.size() / 2);
  // Still close to the truth for the largest flow.
  EXPECT_NEAR(ncs.estimate(z.flows[0]), double(z.truth[0]), 0.1 * double(z.truth[0]));
}

TEST(SketchNitro, AlwaysCorrectSplitsAnUpdateThatStraddlesTheSwitch) {
  SketchOptions o = nitro_options(3, 0.1);
  o.always_correct = true;
  o.always_correct_packets = 100;
  NitroCountMin ncm(nitro_budget(500, 32), o);
  const ZipfStream ks(1, 0, 1.0, 2);
  const FlowKey k = ks.flows[0];
  ncm.update(k, 95);
  EXPECT_FALSE(ncm.rows().sampling());
  ncm.update(k, 1000);  // 5 exact, 995 sampled at weight 10
  EXPECT_TRUE(ncm.rows().sampling());
  EXPECT_EQ(ncm.rows().packets(), 1095u);
  double sampled_units = 0;
  for (int r = 0; r < 3; ++r) {
    const double c = ncm.rows().counter(r, ncm.index(k, r));
    const double u = (c - 100.0) / double(ncm.rows().weight());
    EXPECT_NEAR(u, std::round(u), float_drift_units(float(c), ncm.rows().weight(), std::round(u) + 100));
    sampled_units += std::round(u);
  }
  EXPECT_EQ(sampled_units, double(ncm.rows().selected()));
  EXPECT_NEAR(sampled_units, 0.1 * 3 * 995, 5 * std::sqrt(3 * 995 * 0.09));
}

TEST(SketchNitro, AlwaysCorrectL2RuleSwitchesAtTheBound) {
  // One flow: F2 = f^2 exactly, for Count Sketch and (after the collision
  // correction) for Count-Min. Width 1000: the switch is due when
  // f^2 >= 1000^2 (1 + 3 sqrt(2/1000)), i.e. at f = 1065.
  const ZipfStream ks(1, 0, 1.0, 5);
  const FlowKey k = ks.flows[0];
  SketchOptions o = nitro_options(4, 0.1);
  o.always_correct = true;
  NitroCountSketch ncs(nitro_budget(1000, 32), o);
  NitroCountMin ncm(nitro_budget(1000, 32), o);
  const double f_switch = std::ceil(std::sqrt(1e6 * (1 + 3 * std::sqrt(2.0 / 1000))));
  ASSERT_EQ(f_switch, 1065.0);
  for (int i = 0; i < 1064; ++i) {
    ncs.update(k);
    ncm.update(k);
  }
  EXPECT_FALSE(ncs.rows().sampling());
  EXPECT_FALSE(ncm.rows().sampling());
  EXPECT_EQ(ncs.rows().f2_estimate(), 1064.0 * 1064.0);
  EXPECT_NEAR(ncm.rows().f2_estimate(), 1064.0 * 1064.0, 1e-6);
  EXPECT_EQ(ncs.estimate(k), 1064.0);
  ncs.update(k);
  ncm.update(k);
  EXPECT_TRUE(ncs.rows().sampling());
  EXPECT_TRUE(ncm.rows().sampling());
}

TEST(SketchNitro, AlwaysCorrectL2RuleStaysExactOnASmallStream) {
  // 5000 single-packet flows: L2 = sqrt(5000) ~ 71, far below the width.
  const ZipfStream z(5000, 0, 1.0, 6);
  SketchOptions o = nitro_options(4, 0.1);
  o.always_correct = true;
  NitroCountSketch ncs(nitro_budget(1000, 32), o);
  SketchOptions vo;
  vo.seed = 4;
  CountSketch cs(1000 * 12, vo);
  for (const FlowKey& k : z.flows) {
    ncs.update(k);
    cs.update(k);
  }
  EXPECT_FALSE(ncs.rows().sampling());
  EXPECT_NEAR(ncs.rows().f2_estimate(), 5000.0, 5 * 5000.0 * std::sqrt(2.0 / 1000));
  for (const FlowKey& k : z.flows) ASSERT_EQ(ncs.estimate(k), cs.estimate(k));
}

// Heavy hitters and options -----------------------------------------------------

TEST(SketchNitro, HeapFindsTheHeavyHitters) {
  const ZipfStream z(50000, 300000, 1.0, 14);
  const double thr = 0.002 * double(z.packets.size());
  for (const char* algo : {"nitro-cs", "nitro-cms"}) {
    SCOPED_TRACE(algo);
    SketchOptions o;
    o.sample_p = 0.1;
    auto s = make_sketch(algo, 500 * 1024, o);
    for (size_t i = 0; i < z.packets.size(); ++i) s->update(z.key(i));
    // Flows clearly above the threshold (1.5x) are all found; what is
    // reported is at least half the threshold in truth. (Flows right at the
    // threshold go either way under sampling noise.)
    const auto hh = s->heavy_hitters(thr, {});
    size_t clear = 0, found = 0, sound = 0;
    for (size_t r = 0; r < z.flows.size(); ++r) {
      const bool reported =
          std::any_of(hh.begin(), hh.end(), [&](const auto& e) { return e.first == z.flows[r]; });
      if (double(z.truth[r]) >= 1.5 * thr) {
        ++clear;
        found += reported;
      }
      if (reported) sound += double(z.truth[r]) >= 0.5 * thr;
    }
    ASSERT_GT(clear, 10u);
    EXPECT_EQ(found, clear);
    EXPECT_EQ(sound, hh.size());
    for (const auto& e : hh) EXPECT_GE(e.second, thr);
  }
}

TEST(SketchNitro, RejectsSamplingProbabilitiesOutsideZeroOne) {
  for (double p : {0.0, -0.1, 1.5, std::nan("")}) {
    SketchOptions o;
    o.sample_p = p;
    for (const char* algo : {"nitro-cms", "nitro-cs", "nitro-univmon"}) {
      EXPECT_THROW(make_sketch(algo, 500 * 1024, o), std::invalid_argument) << algo << " p=" << p;
    }
  }
}

}  // namespace
}  // namespace dpukit::measure::sketches
