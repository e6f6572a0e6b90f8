// Count-Min: never underestimates, stays within its e/w * N bound, the
// estimate is the minimum of the rows, counters saturate instead of wrapping.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dpukit/measure.h"
#include "sketches/count_min.h"
#include "zipf.h"

namespace dpukit::measure::sketches {
namespace {

TEST(SketchCountMin, NeverUnderestimatesAndStaysWithinItsBound) {
  const ZipfStream z(10000, 200000, 1.0, 7);
  const size_t budget = 24000;  // width 2000 for 10k flows: plenty of collisions
  auto s = make_sketch("cms", budget);
  auto* cm = dynamic_cast<CountMin*>(s.get());
  ASSERT_NE(cm, nullptr);
  ASSERT_EQ(cm->width(), 2000u);
  for (size_t i = 0; i < z.packets.size(); ++i) s->update(z.key(i));

  // Count-Min's guarantee: error <= (e / w) N with probability >= 1 - e^-d (95%).
  const double bound = std::exp(1.0) / cm->width() * double(z.packets.size());
  size_t under = 0, within = 0, flows = 0;
  for (size_t r = 0; r < z.flows.size(); ++r) {
    if (z.truth[r] == 0) continue;
    ++flows;
    const double e = s->estimate(z.flows[r]);
    if (e < double(z.truth[r])) ++under;
    if (e - double(z.truth[r]) <= bound) ++within;
  }
  EXPECT_EQ(under, 0u);
  EXPECT_GE(double(within), 0.93 * double(flows));
  // The largest flow dominates its counters: within 2%.
  EXPECT_NEAR(s->estimate(z.flows[0]), double(z.truth[0]), 0.02 * double(z.truth[0]));
}

TEST(SketchCountMin, EstimateIsTheMinimumOfItsRows) {
  const ZipfStream z(3000, 30000, 0.8, 3);
  CountMin cm(6000, SketchOptions{});  // width 500
  for (size_t i = 0; i < z.packets.size(); ++i) cm.update(z.key(i));
  size_t strictly_smaller = 0;
  for (size_t r = 0; r < 200; ++r) {
    const FlowKey& k = z.flows[r];
    uint32_t m = std::numeric_limits<uint32_t>::max(), mx = 0;
    for (int row = 0; row < CountMin::kRows; ++row) {
      m = std::min(m, cm.counter(row, cm.index(k, row)));
      mx = std::max(mx, cm.counter(row, cm.index(k, row)));
    }
    EXPECT_EQ(cm.estimate(k), double(m));
    if (m < mx) ++strictly_smaller;
  }
  EXPECT_GT(strictly_smaller, 100u);  // the rows do disagree: the min matters
}

TEST(SketchCountMin, WeightedUpdateEqualsRepeatedUpdates) {
  CountMin a(1200, SketchOptions{}), b(1200, SketchOptions{});
  const ZipfStream z(50, 0, 1.0, 1);
  for (size_t r = 0; r < z.flows.size(); ++r) {
    a.update(z.flows[r], uint32_t(r + 1));
    for (size_t i = 0; i <= r; ++i) b.update(z.flows[r]);
  }
  for (size_t r = 0; r < z.flows.size(); ++r) {
    EXPECT_EQ(a.estimate(z.flows[r]), b.estimate(z.flows[r]));
    EXPECT_GE(a.estimate(z.flows[r]), double(r + 1));
  }
}

TEST(SketchCountMin, CountersSaturateInsteadOfWrapping) {
  CountMin cm(1200, SketchOptions{});
  const ZipfStream z(2, 0, 1.0, 1);
  cm.update(z.flows[0], std::numeric_limits<uint32_t>::max() - 3);
  EXPECT_EQ(cm.estimate(z.flows[0]), double(std::numeric_limits<uint32_t>::max() - 3));
  cm.update(z.flows[0], 10);
  EXPECT_EQ(cm.estimate(z.flows[0]), double(std::numeric_limits<uint32_t>::max()));
}

TEST(SketchCountMin, SeedsChooseTheHashFunctions) {
  SketchOptions o1, o2;
  o2.seed = 2;
  CountMin a(120000, o1), b(120000, o2);
  const ZipfStream z(100, 0, 1.0, 1);
  size_t same = 0;
  for (const FlowKey& k : z.flows) same += a.index(k, 0) == b.index(k, 0);
  EXPECT_LT(same, 5u);
  // Rows of one sketch are independent too.
  size_t same_rows = 0;
  for (const FlowKey& k : z.flows) same_rows += a.index(k, 0) == a.index(k, 1);
  EXPECT_LT(same_rows, 5u);
}

}  // namespace
}  // namespace dpukit::measure::sketches
