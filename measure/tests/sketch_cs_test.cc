// Count Sketch: unbiased over the choice of hash functions, with an error of
// the order of sqrt(F2 / w).
#include <gtest/gtest.h>

#include <cmath>

#include "dpukit/measure.h"
#include "sketches/count_sketch.h"
#include "zipf.h"

namespace dpukit::measure::sketches {
namespace {

struct ErrorStats {
  double mean = 0, sd = 0, rms = 0;
};
ErrorStats stats(const std::vector<double>& err) {
  ErrorStats s;
  for (double e : err) s.mean += e;
  s.mean /= double(err.size());
  for (double e : err) {
    s.sd += (e - s.mean) * (e - s.mean);
    s.rms += e * e;
  }
  s.sd = std::sqrt(s.sd / double(err.size() - 1));
  s.rms = std::sqrt(s.rms / double(err.size()));
  return s;
}

TEST(SketchCountSketch, UnbiasedOverSeeds) {
  const ZipfStream z(2000, 20000, 1.0, 11);
  const size_t kSeeds = 200;
  const size_t tracked[] = {0, 3, 30, 300};
  std::vector<std::vector<double>> err(std::size(tracked));
  double f2 = 0;
  for (uint64_t t : z.truth) f2 += double(t) * double(t);
  uint32_t width = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    SketchOptions o;
    o.seed = seed;
    CountSketch cs(3072, o);  // width 256 for 2000 flows
    width = cs.width();
    for (size_t i = 0; i < z.packets.size(); ++i) cs.update(z.key(i));
    for (size_t t = 0; t < std::size(tracked); ++t) {
      err[t].push_back(cs.estimate(z.flows[tracked[t]]) - double(z.truth[tracked[t]]));
    }
  }
  ASSERT_EQ(width, 256u);
  const double row_sd = std::sqrt(f2 / width);  // one row's error sd
  for (size_t t = 0; t < std::size(tracked); ++t) {
    const ErrorStats s = stats(err[t]);
    SCOPED_TRACE("rank " + std::to_string(tracked[t]) + " size " + std::to_string(z.truth[tracked[t]]) +
                 ": mean error " + std::to_string(s.mean) + ", sd " + std::to_string(s.sd));
    EXPECT_LE(std::abs(s.mean), 4.0 * s.sd / std::sqrt(double(kSeeds)) + 1.0);
    EXPECT_LE(s.rms, 1.5 * row_sd);  // the median of three rows is no worse than one row
    EXPECT_GT(s.sd, 0.0);            // estimates do vary with the hash functions
  }
  // The biggest flow is estimated within a few percent.
  EXPECT_LE(stats(err[0]).rms, 0.1 * double(z.truth[0]));
}

TEST(SketchCountSketch, EstimateIsTheMedianOfTheSignedRowReads) {
  const ZipfStream z(3000, 30000, 0.8, 5);
  CountSketch cs(6000, SketchOptions{});
  for (size_t i = 0; i < z.packets.size(); ++i) cs.update(z.key(i));
  for (size_t r = 0; r < 100; ++r) {
    double v[3] = {cs.row_read(z.flows[r], 0), cs.row_read(z.flows[r], 1), cs.row_read(z.flows[r], 2)};
    std::sort(v, v + 3);
    EXPECT_EQ(cs.estimate(z.flows[r]), v[1]);
  }
}

TEST(SketchCountSketch, WeightedUpdatesAndNegativeCountersDoNotOverflow) {
  CountSketch a(1200, SketchOptions{}), b(1200, SketchOptions{});
  const ZipfStream z(40, 0, 1.0, 1);
  for (size_t r = 0; r < z.flows.size(); ++r) {
    a.update(z.flows[r], uint32_t(1000 * (r + 1)));
    for (size_t i = 0; i < 10; ++i) b.update(z.flows[r], uint32_t(100 * (r + 1)));
  }
  for (size_t r = 0; r < z.flows.size(); ++r) EXPECT_EQ(a.estimate(z.flows[r]), b.estimate(z.flows[r]));
  // Width 100, 40 flows: most flows are alone in at least two rows.
  size_t exact = 0;
  for (size_t r = 0; r < z.flows.size(); ++r) exact += a.estimate(z.flows[r]) == double(1000 * (r + 1));
  EXPECT_GT(exact, 20u);
}

}  // namespace
}  // namespace dpukit::measure::sketches
