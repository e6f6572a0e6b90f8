// The top-k candidate store (UnivMon levels, NitroSketch): keeps the k largest
// values under insertions, increases and decreases; its index stays
// consistent through evictions (backward-shift deletion); heavy flows that
// arrive after the heap filled up with mice still get in.
#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_map>

#include "dpukit/measure.h"
#include "sketches/topk.h"
#include "zipf.h"

namespace dpukit::measure::sketches {
namespace {

void expect_consistent(const TopK& t) {
  for (size_t i = 0; i < t.size(); ++i) {
    ASSERT_TRUE(t.contains(t.key(i)));
    if (i > 0) {
      ASSERT_LE(t.value((i - 1) / 2), t.value(i)) << "heap order broken at " << i;
    }
  }
}

TEST(SketchTopK, KeepsTheLargestUnderGrowingValues) {
  // Values only grow (as Count-Min estimates do): the heap ends up holding
  // exactly the k largest final values.
  const ZipfStream keys(5000, 0, 1.0, 1);
  TopK t(64, 7);
  SplitMix64 rng(3);
  std::unordered_map<size_t, float> final_value;
  for (int round = 0; round < 20; ++round) {
    for (size_t r = 0; r < keys.flows.size(); ++r) {
      float& v = final_value[r];
      v += float(rng.next() % 100) * (r % 97 == 0 ? 10.0f : 1.0f);
      t.offer(keys.flows[r], v);
    }
  }
  ASSERT_EQ(t.size(), 64u);
  expect_consistent(t);
  std::vector<std::pair<float, size_t>> all;
  for (const auto& [r, v] : final_value) all.emplace_back(v, r);
  std::sort(all.rbegin(), all.rend());
  for (size_t i = 0; i < 64; ++i) EXPECT_TRUE(t.contains(keys.flows[all[i].second])) << "rank " << i;
  for (size_t i = 64; i < 200; ++i) EXPECT_FALSE(t.contains(keys.flows[all[i].second])) << "rank " << i;
}

TEST(SketchTopK, IndexSurvivesHeavyChurn) {
  // Many evictions in a small table: backward-shift deletion must keep every
  // resident findable and no evicted key findable.
  const ZipfStream keys(20000, 0, 1.0, 2);
  TopK t(50, 11);
  for (size_t r = 0; r < keys.flows.size(); ++r) t.offer(keys.flows[r], float(r));  // each beats the minimum
  ASSERT_EQ(t.size(), 50u);
  expect_consistent(t);
  for (size_t r = keys.flows.size() - 50; r < keys.flows.size(); ++r) EXPECT_TRUE(t.contains(keys.flows[r]));
  size_t stale = 0;
  for (size_t r = 0; r + 50 < keys.flows.size(); ++r) stale += t.contains(keys.flows[r]);
  EXPECT_EQ(stale, 0u);
  // A decrease that stays above the minimum re-orders the heap...
  const FlowKey& top = keys.flows.back();  // value 19999, the largest
  t.offer(top, 19950.5f);                  // the minimum is 19950
  expect_consistent(t);
  EXPECT_EQ(t.value(0), 19950.0f);
  EXPECT_TRUE(t.value(1) == 19950.5f || t.value(2) == 19950.5f);
  // ...one below the minimum is ignored (the resident keeps its last value).
  t.offer(top, 0.5f);
  expect_consistent(t);
  EXPECT_EQ(t.value(0), 19950.0f);
  EXPECT_TRUE(t.contains(top));
}

TEST(SketchTopK, HeavyFlowsArrivingAfterTheMiceAreStillFound) {
  // 5000 single-packet flows fill every heap first; then 20 heavy flows.
  const ZipfStream mice(5000, 0, 1.0, 5);
  const ZipfStream heavy(20, 0, 1.0, 6);
  for (const char* algo : {"nitro-cs", "nitro-cms", "univmon", "nitro-univmon"}) {
    SCOPED_TRACE(algo);
    SketchOptions o;
    o.top_k = 100;
    o.sample_p = 0.1;
    auto s = make_sketch(algo, 500 * 1024, o);
    for (const FlowKey& k : mice.flows) s->update(k);
    for (int i = 0; i < 2000; ++i) {
      for (const FlowKey& k : heavy.flows) s->update(k);
    }
    const auto hh = s->heavy_hitters(1000, {});
    size_t found = 0;
    for (const FlowKey& k : heavy.flows) {
      found += std::any_of(hh.begin(), hh.end(), [&](const auto& e) { return e.first == k; });
    }
    EXPECT_EQ(found, heavy.flows.size());
    EXPECT_EQ(hh.size(), heavy.flows.size());
  }
}

}  // namespace
}  // namespace dpukit::measure::sketches
