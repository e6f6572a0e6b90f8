// The dpu speed model on bench's real loop (issue 31): the runner's timing
// threads on the dpu place at F = 0.5 against F = 1, paired and interleaved,
// medians of 3 pairs (core's paired_speed_check): throughput 0.47-0.53x and
// dpu CPU per unit of work 1.9-2.1x. A model that bills its own clock reads
// or overshoots its payments (the surplus issue 31 found: 1.30x added busy
// time where 1/F - 1 = 1.22 was due) falls outside.
#include <gtest/gtest.h>

#include "dpukit/bench.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/speed_check.h"

namespace dpukit::bench {
namespace {

TEST(BenchDpuSpeed, TheRunnerAtHalfSpeedKeepsTheModelsPromise) {
  const std::string cpu = std::to_string(available_cpus().cpus.back());
  auto run_at = [&](double f) {
    RunOptions o;
    o.ops = {"sha256"};  // compute-bound: what F describes
    o.sizes = {1024};
    o.threads = {1};
    o.backends = {Backend::kLib};
    o.place = "dpu";
    o.dpu_cpus = o.host_cpus = cpu;
    o.dpu_speed = DpuSpeed::parse(f >= 1 ? "host" : std::to_string(f));
    o.warmup_s = 0.05;
    o.min_time_s = 0.15;
    o.repetitions = 3;
    o.progress = false;
    const auto result = run(o);
    const auto& p = result.at("points").at(0);
    SpeedSample s;
    s.units_per_s = p.at("mops").get<double>() * 1e6;
    s.dpu_ns_per_unit = 1e3 / p.at("mops_per_cpu_second").get<double>();
    return s;
  };
  const SpeedCheck c = paired_speed_check_with_retry(run_at, 0.5);
  RecordProperty("throughput_ratio", std::to_string(c.median_throughput_ratio()));
  RecordProperty("cpu_ratio", std::to_string(c.median_cpu_ratio()));
  EXPECT_TRUE(c.within()) << c.describe();
}

}  // namespace
}  // namespace dpukit::bench
