// Ground truth and the accuracy metrics on hand-computed examples.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dpukit/measure.h"

namespace dpukit::measure {
namespace {

using Estimates = std::unordered_map<FlowKey, double, FlowKeyHash>;

FlowKey flow(uint32_t i) { return FlowKey::from_tuple(0x0a000000u + i, 0x0b000000u, 1000 + i, 80, 6); }

TEST(MetricsGroundTruth, CountsPacketsPerKey) {
  std::vector<Packet> pkts;
  for (uint32_t i : {1, 2, 1, 3, 1, 2}) pkts.push_back(Packet{flow(i), 100, 0});
  GroundTruth t = ground_truth(pkts);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at(flow(1)), 3u);
  EXPECT_EQ(t.at(flow(2)), 2u);
  EXPECT_EQ(t.at(flow(3)), 1u);
  EXPECT_TRUE(ground_truth({}).empty());
}

// truth A=10 B=2 C=1 D=1; estimates A=12 B=2 C=3, D missing, E (not a flow) = 100.
TEST(Metrics, HandComputedExample) {
  GroundTruth truth = {{flow(1), 10}, {flow(2), 2}, {flow(3), 1}, {flow(4), 1}};
  Estimates est = {{flow(1), 12}, {flow(2), 2}, {flow(3), 3}, {flow(5), 100}};
  Metrics m = evaluate(truth, est, {flow(1), flow(3), flow(1)}, 2);
  // ARE: (2/10 + 0 + 2/1 + 1/1) / 4
  EXPECT_DOUBLE_EQ(m.are, 0.8);
  // AAE: (2 + 0 + 2 + 1) / 4
  EXPECT_DOUBLE_EQ(m.aae, 1.25);
  // RMSE: sqrt((4 + 0 + 4 + 1) / 4)
  EXPECT_DOUBLE_EQ(m.rmse, 1.5);
  // WMRE: true n1=2 n2=1 n10=1; estimated n^2=1 n^3=1 n^12=1 (D at 0 is in no bucket).
  // |diff|: 2 + 0 + 1 + 1 + 1 = 5; mean of both: 1 + 1 + .5 + .5 + .5 = 3.5
  EXPECT_DOUBLE_EQ(m.wmre, 5.0 / 3.5);
  // HH at 2: true {A, B}; reported {A, C} (A twice counts once).
  EXPECT_EQ(m.hh_true, 2u);
  EXPECT_EQ(m.hh_reported, 2u);
  EXPECT_DOUBLE_EQ(m.hh_precision, 0.5);
  EXPECT_DOUBLE_EQ(m.hh_recall, 0.5);
  EXPECT_DOUBLE_EQ(m.hh_f1, 0.5);
}

TEST(Metrics, PerfectEstimatesAreZeroError) {
  GroundTruth truth = {{flow(1), 7}, {flow(2), 3}, {flow(3), 3}};
  Estimates est = {{flow(1), 7}, {flow(2), 3}, {flow(3), 3}};
  Metrics m = evaluate(truth, est, {flow(1)}, 5);
  EXPECT_EQ(m.are, 0);
  EXPECT_EQ(m.aae, 0);
  EXPECT_EQ(m.rmse, 0);
  EXPECT_EQ(m.wmre, 0);
  EXPECT_EQ(m.hh_precision, 1);
  EXPECT_EQ(m.hh_recall, 1);
  EXPECT_EQ(m.hh_f1, 1);
}

TEST(Metrics, ErrorsGrowWithTheEstimateError) {
  GroundTruth truth = {{flow(1), 4}, {flow(2), 8}};
  Metrics a = evaluate(truth, {{flow(1), 5}, {flow(2), 8}}, {}, 100);
  Metrics b = evaluate(truth, {{flow(1), 8}, {flow(2), 16}}, {}, 100);
  EXPECT_DOUBLE_EQ(a.are, 0.125);
  EXPECT_DOUBLE_EQ(b.are, 1.0);
  EXPECT_DOUBLE_EQ(a.aae, 0.5);
  EXPECT_DOUBLE_EQ(b.aae, 6.0);
  EXPECT_DOUBLE_EQ(b.rmse, std::sqrt((16.0 + 64.0) / 2));
  // b: true n4=1 n8=1; estimated n8=1 n16=1 -> |1-0| + |1-1| + |0-1| = 2 over .5 + 1 + .5 = 2
  EXPECT_DOUBLE_EQ(b.wmre, 1.0);
  // Underestimates count the same as overestimates.
  Metrics c = evaluate(truth, {{flow(1), 3}, {flow(2), 8}}, {}, 100);
  EXPECT_DOUBLE_EQ(c.are, a.are);
}

TEST(Metrics, WmreRoundsEstimates) {
  // truth 1, 2, 1; estimates 1.4 -> 1, 1.5 -> 2, -3 -> 0 (no bucket)
  GroundTruth truth = {{flow(1), 1}, {flow(2), 2}, {flow(3), 1}};
  Metrics m = evaluate(truth, {{flow(1), 1.4}, {flow(2), 1.5}, {flow(3), -3}}, {}, 10);
  // n1 = 2, n2 = 1; n^1 = 1, n^2 = 1 -> 1 / (1.5 + 1)
  EXPECT_DOUBLE_EQ(m.wmre, 0.4);
  EXPECT_DOUBLE_EQ(m.aae, (0.4 + 0.5 + 4) / 3);
  // NaN and huge estimates do not break the bucketing.
  Metrics n = evaluate(truth, {{flow(1), std::nan("")}, {flow(2), 1e300}, {flow(3), 1}}, {}, 10);
  // n1 = 2, n2 = 1; n^1 = 1 (flow 3), n^huge = 1 -> (1 + 1 + 1) / (1.5 + .5 + .5)
  EXPECT_DOUBLE_EQ(n.wmre, 3.0 / 2.5);
  // All estimates missing: every true flow is in no estimated bucket -> WMRE 2.
  EXPECT_DOUBLE_EQ(evaluate(truth, {}, {}, 10).wmre, 2.0);
}

TEST(Metrics, HeavyHitterZeroCases) {
  GroundTruth truth = {{flow(1), 50}, {flow(2), 5}};
  // No true heavy flow, nothing reported: vacuously perfect.
  Metrics none = evaluate(truth, {}, {}, 1000);
  EXPECT_EQ(none.hh_true, 0u);
  EXPECT_EQ(none.hh_precision, 1);
  EXPECT_EQ(none.hh_recall, 1);
  EXPECT_EQ(none.hh_f1, 1);
  // A true heavy flow, nothing reported: precision 1, recall 0, F1 0.
  Metrics missed = evaluate(truth, {}, {}, 10);
  EXPECT_EQ(missed.hh_true, 1u);
  EXPECT_EQ(missed.hh_precision, 1);
  EXPECT_EQ(missed.hh_recall, 0);
  EXPECT_EQ(missed.hh_f1, 0);
  // Reported but nothing is heavy (one of them is not a flow at all).
  Metrics false_alarm = evaluate(truth, {}, {flow(2), flow(9)}, 1000);
  EXPECT_EQ(false_alarm.hh_reported, 2u);
  EXPECT_EQ(false_alarm.hh_precision, 0);
  EXPECT_EQ(false_alarm.hh_recall, 1);
  EXPECT_EQ(false_alarm.hh_f1, 0);
  // Threshold is inclusive; 2 of 3 reported are right, 2 of 2 found.
  Metrics m = evaluate(truth, {}, {flow(1), flow(2), flow(7)}, 5);
  EXPECT_EQ(m.hh_true, 2u);
  EXPECT_DOUBLE_EQ(m.hh_precision, 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.hh_recall, 1.0);
  EXPECT_DOUBLE_EQ(m.hh_f1, 0.8);
}

TEST(Metrics, EmptyTruthAndZeroCounts) {
  Metrics e = evaluate({}, {{flow(1), 3}}, {}, 1);
  EXPECT_EQ(e.are, 0);
  EXPECT_EQ(e.aae, 0);
  EXPECT_EQ(e.rmse, 0);
  EXPECT_EQ(e.wmre, 0);
  // A zero count is not a flow: it neither divides by zero nor counts.
  GroundTruth truth = {{flow(1), 0}, {flow(2), 4}};
  Metrics m = evaluate(truth, {{flow(1), 9}, {flow(2), 6}}, {flow(1)}, 0);
  EXPECT_DOUBLE_EQ(m.are, 0.5);
  EXPECT_DOUBLE_EQ(m.aae, 2);
  EXPECT_EQ(m.hh_true, 1u);
  EXPECT_EQ(m.hh_precision, 0);
  EXPECT_TRUE(std::isfinite(m.wmre));
}

}  // namespace
}  // namespace dpukit::measure
