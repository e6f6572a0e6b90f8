// The factory and the shared Sketch interface: names, budgets (BudgetError
// when too small, memory_bytes() <= budget and most of it used), unknown
// names, the default heavy_hitters(), and every algorithm tracking a Zipf
// stream at Duet's budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dpukit/measure.h"
#include "zipf.h"

namespace dpukit::measure {
namespace {

using sketches::ZipfStream;

TEST(SketchFactory, KnowsTheSevenAlgorithms) {
  const std::vector<std::string> expected = {"cms",       "cs",       "elastic",      "univmon",
                                             "nitro-cms", "nitro-cs", "nitro-univmon"};
  EXPECT_EQ(sketch_algorithms(), expected);
  for (const std::string& a : sketch_algorithms()) EXPECT_EQ(make_sketch(a, 500 * 1024)->name(), a);
}

TEST(SketchFactory, UnknownNameIsInvalidArgumentNotBudgetError) {
  for (const char* bad : {"", "CMS", "countmin", "nitro", "duet"}) {
    try {
      make_sketch(bad, 500 * 1024);
      ADD_FAILURE() << "no exception for '" << bad << "'";
    } catch (const BudgetError&) {
      ADD_FAILURE() << "BudgetError for unknown name '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("unknown"), std::string::npos);
    }
  }
}

TEST(SketchFactory, TooSmallBudgetIsBudgetErrorWithAReason) {
  for (const std::string& a : sketch_algorithms()) {
    for (size_t budget : {size_t(0), size_t(8)}) {
      try {
        make_sketch(a, budget);
        ADD_FAILURE() << a << " accepted " << budget << " bytes";
      } catch (const BudgetError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(a), std::string::npos) << what;
        EXPECT_NE(what.find("bytes"), std::string::npos) << what;
      }
    }
  }
  // Heaps that cannot fit are a budget problem too.
  EXPECT_THROW(make_sketch("univmon", 64 * 1024), BudgetError);
  EXPECT_THROW(make_sketch("nitro-cs", 40 * 1024), BudgetError);
  SketchOptions small_heaps;
  small_heaps.top_k = 50;
  EXPECT_NO_THROW(make_sketch("univmon", 64 * 1024, small_heaps));
  EXPECT_NO_THROW(make_sketch("nitro-cs", 40 * 1024, small_heaps));
}

TEST(SketchFactory, MemoryIsWithinAndMostlyUsesTheBudget) {
  for (const std::string& a : sketch_algorithms()) {
    for (size_t budget : {size_t(300 * 1024), size_t(500 * 1024), size_t(600 * 1024), size_t(8 << 20)}) {
      auto s = make_sketch(a, budget);
      EXPECT_LE(s->memory_bytes(), budget) << a;
      EXPECT_GE(double(s->memory_bytes()), 0.99 * double(budget)) << a;
    }
    // Small budgets either fit or say why.
    for (size_t budget : {size_t(300), size_t(2000), size_t(20000)}) {
      try {
        auto s = make_sketch(a, budget);
        EXPECT_LE(s->memory_bytes(), budget) << a;
      } catch (const BudgetError&) {
      }
    }
  }
}

TEST(SketchFactory, EveryAlgorithmTracksAZipfStream) {
  const ZipfStream z(30000, 300000, 1.0, 17);
  const double thr = 0.002 * double(z.packets.size());
  std::vector<FlowKey> candidates(z.flows.begin(), z.flows.begin() + 2000);
  for (const std::string& a : sketch_algorithms()) {
    SCOPED_TRACE(a);
    auto s = make_sketch(a, 500 * 1024);
    for (size_t i = 0; i < z.packets.size(); ++i) s->update(z.key(i));
    // A sampled row read (NitroSketch, at the default p) adds its own noise,
    // of variance f (1/p - 1): three of its standard deviations beside the 10 %.
    const double p = SketchOptions{}.sample_p;
    const bool sampled = a.rfind("nitro", 0) == 0;
    for (size_t r = 0; r < 3; ++r) {
      const double f = double(z.truth[r]);
      const double sampling = sampled ? 3 * std::sqrt(f * (1 / p - 1)) : 0;
      EXPECT_NEAR(s->estimate(z.flows[r]), f, 0.1 * f + sampling) << "rank " << r;
    }
    // Heavy hitters: the clearly heavy flows (>= 1.5x the threshold) are all
    // found; what is reported is at least half the threshold in truth. (Flows
    // right at the threshold go either way under estimation noise.)
    const auto hh = s->heavy_hitters(thr, candidates);
    size_t clear = 0, found = 0, sound = 0;
    for (size_t r = 0; r < z.flows.size(); ++r) {
      if (double(z.truth[r]) < 1.5 * thr) continue;
      ++clear;
      found += std::count_if(hh.begin(), hh.end(), [&](const auto& e) { return e.first == z.flows[r]; });
    }
    for (const auto& e : hh) {
      EXPECT_GE(e.second, thr);
      for (size_t r = 0; r < z.flows.size(); ++r) {
        if (e.first == z.flows[r]) sound += double(z.truth[r]) >= 0.5 * thr;
      }
    }
    ASSERT_GT(clear, 10u);
    EXPECT_GE(double(found), 0.95 * double(clear));
    EXPECT_GE(double(sound), 0.9 * double(hh.size()));
    const bool univ = a.find("univmon") != std::string::npos;
    EXPECT_EQ(s->cardinality().has_value(), univ);
    EXPECT_EQ(s->entropy().has_value(), univ);
  }
}

TEST(SketchFactory, DefaultHeavyHittersEstimatesEachCandidateOnce) {
  const ZipfStream z(1000, 20000, 1.2, 3);
  auto s = make_sketch("cms", 500 * 1024);
  for (size_t i = 0; i < z.packets.size(); ++i) s->update(z.key(i));
  std::vector<FlowKey> cand = {z.flows[0], z.flows[1], z.flows[0], z.flows[500], z.flows[1]};
  const double thr = double(z.truth[1]);
  const auto hh = s->heavy_hitters(thr, cand);
  ASSERT_EQ(hh.size(), 2u);  // flows 0 and 1, once each; flow 500 is small
  EXPECT_TRUE(hh[0].first == z.flows[0]);
  EXPECT_TRUE(hh[1].first == z.flows[1]);
  EXPECT_EQ(hh[0].second, s->estimate(z.flows[0]));
  EXPECT_TRUE(s->heavy_hitters(thr, {}).empty());
}

}  // namespace
}  // namespace dpukit::measure
