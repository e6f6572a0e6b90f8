// How paired_speed_check judges, on runs whose figures are given: no timing.
#include "dpukit/core/speed_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace dpukit {
namespace {

// A loop whose figures follow a script: the i-th run at full speed returns
// full[i], the i-th at F slow[i], each the last one once used up.
struct Scripted {
  std::vector<SpeedSample> full, slow;
  std::vector<double> asked;
  size_t full_runs = 0, slow_runs = 0;
  SpeedSample operator()(double f) {
    asked.push_back(f);
    const std::vector<SpeedSample>& script = f >= 1 ? full : slow;
    size_t& n = f >= 1 ? full_runs : slow_runs;
    return script[std::min(n++, script.size() - 1)];
  }
};

SpeedSample at(double units_per_s, double ns) { return {units_per_s, ns}; }

TEST(SpeedCheck, PairsAlternateTheirOrder) {
  Scripted s{{at(100, 10)}, {at(50, 20)}};
  paired_speed_check(std::ref(s), 0.5, 4);
  EXPECT_EQ(s.asked, (std::vector<double>{1, 0.5, 0.5, 1, 1, 0.5, 0.5, 1}));
}

TEST(SpeedCheck, AModelThatKeepsItsPromiseIsWithin) {
  Scripted s{{at(100, 10), at(101, 10), at(99, 10.1)}, {at(50, 20), at(51, 19.8), at(49, 20.4)}};
  const SpeedCheck c = paired_speed_check(std::ref(s), 0.5);
  EXPECT_TRUE(c.quiet());
  EXPECT_TRUE(c.within()) << c.describe();
}

TEST(SpeedCheck, TheSurplusIssue31FoundIsOutside) {
  // 0.42x and 2.38x, the figures before the model stopped billing itself
  Scripted s{{at(100, 10)}, {at(42, 23.8)}};
  const SpeedCheck c = paired_speed_check(std::ref(s), 0.5);
  EXPECT_TRUE(c.quiet());
  EXPECT_FALSE(c.within()) << c.describe();
  EXPECT_NEAR(c.median_cpu_ratio(), 2.38, 1e-9);
}

TEST(SpeedCheck, RunsThatDisagreeAtOneSpeedAreNamed) {
  // one full-speed run was 1.4x dearer: the medians still keep the promise
  Scripted s{{at(100, 10), at(70, 14), at(100, 10)}, {at(50, 20)}};
  const SpeedCheck c = paired_speed_check(std::ref(s), 0.5);
  EXPECT_FALSE(c.quiet());
  EXPECT_TRUE(c.within()) << c.describe();
  EXPECT_NE(c.describe().find("the machine was busy"), std::string::npos) << c.describe();
}

TEST(SpeedCheck, RetriesUntilWithinAndNoFurther) {
  // attempt 1's medians fall on the busy runs, attempt 2 keeps the promise
  Scripted s{{at(70, 14), at(70, 14), at(100, 10), at(100, 10)}, {at(50, 20)}};
  const SpeedCheck c = paired_speed_check_with_retry(std::ref(s), 0.5, 3, 3);
  EXPECT_TRUE(c.within()) << c.describe();
  EXPECT_EQ(s.asked.size(), 12u) << "two attempts of three pairs";
}

TEST(SpeedCheck, ABusyAttemptIsNotCounted) {
  // one attempt allowed: the first, outside on a busy machine, is not counted; the second keeps the promise
  Scripted s{{at(70, 14), at(70, 14), at(100, 10), at(100, 10)}, {at(50, 20)}};
  const SpeedCheck c = paired_speed_check_with_retry(std::ref(s), 0.5, 3, 1);
  EXPECT_TRUE(c.within()) << c.describe();
  EXPECT_EQ(s.asked.size(), 12u) << "two attempts of three pairs";
}

TEST(SpeedCheck, AModelOutsideItsPromiseFailsEveryAttempt) {
  Scripted s{{at(100, 10)}, {at(42, 23.8)}};
  const SpeedCheck c = paired_speed_check_with_retry(std::ref(s), 0.5, 3, 3);
  EXPECT_FALSE(c.within());
  EXPECT_EQ(s.asked.size(), 18u) << "three attempts of three pairs";
}

}  // namespace
}  // namespace dpukit
