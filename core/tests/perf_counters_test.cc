#include "dpukit/core/perf_counters.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "dpukit/core/accounting.h"

namespace dpukit {
namespace {

// A loop whose instruction count grows with `n` (volatile: not folded away).
uint64_t spin(uint64_t n) {
  volatile uint64_t x = 0;
  for (uint64_t i = 0; i < n; ++i) x = x + i;
  return x;
}

void burn_ns(uint64_t ns) {
  uint64_t start = thread_cpu_ns();
  while (thread_cpu_ns() - start < ns) spin(1000);
}

const PerfCount* find(const std::vector<PerfCount>& counts, const std::string& name) {
  for (const auto& c : counts)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(PerfCounters, ScalingByEnabledOverRunning) {
  PerfCount full = perf_count_from("x", 1000, 500, 500);
  EXPECT_TRUE(full.counted);
  EXPECT_FALSE(full.scaled());
  EXPECT_DOUBLE_EQ(full.value, 1000);
  PerfCount half = perf_count_from("x", 1000, 800, 200);  // on the PMU a quarter of the time
  EXPECT_TRUE(half.counted);
  EXPECT_TRUE(half.scaled());
  EXPECT_DOUBLE_EQ(half.value, 4000);
  PerfCount never = perf_count_from("x", 0, 800, 0);
  EXPECT_FALSE(never.counted);
  EXPECT_NE(never.why.find("never got onto the PMU"), std::string::npos) << never.why;
}

// Whatever this machine offers, the hardware counters either count a loop
// sensibly or say why not, per event and as a whole.
TEST(PerfCounters, HardwareEventsCountOrSayWhy) {
  PerfCounters pc(PerfCounters::default_hardware_groups());
  if (!pc.available()) {
    EXPECT_NE(pc.unavailable_reason().find("perf_event_open("), std::string::npos) << pc.unavailable_reason();
    pc.start();
    spin(100000);
    pc.stop();
    auto counts = pc.read();
    ASSERT_EQ(counts.size(), 11u);
    for (const auto& c : counts) {
      EXPECT_FALSE(c.counted) << c.name;
      EXPECT_FALSE(c.why.empty()) << c.name;
      EXPECT_EQ(c.value, 0) << c.name;
    }
    std::printf("hardware counters unavailable here: %s\n", pc.unavailable_reason().c_str());
    return;
  }
  EXPECT_TRUE(pc.unavailable_reason().empty());
  pc.start();
  spin(1'000'000);
  auto mid = pc.read();
  spin(1'000'000);
  pc.stop();
  auto end = pc.read();
  auto after = pc.read();
  const PerfCount* i_mid = find(mid, "instructions");
  const PerfCount* i_end = find(end, "instructions");
  ASSERT_TRUE(i_mid && i_end);
  if (!i_end->counted) GTEST_SKIP() << "instructions not countable here: " << i_end->why;
  EXPECT_GT(i_mid->raw, 1'000'000u);  // at least one instruction per iteration
  EXPECT_GT(i_end->raw, i_mid->raw);  // monotone while running
  EXPECT_EQ(find(after, "instructions")->raw, i_end->raw);  // frozen once stopped
  // A second window counts from zero again and about twice the work.
  pc.start();
  spin(4'000'000);
  pc.stop();
  auto big = pc.read();
  const PerfCount* i_big = find(big, "instructions");
  EXPECT_GT(i_big->value, 1.5 * i_end->value);
  EXPECT_LT(i_big->value, 3.0 * i_end->value);
}

// Software events exist without a PMU, so the open / start / stop / read
// machinery is exercised on every Linux machine.
TEST(PerfCounters, SoftwareTaskClockMatchesThreadCpuTime) {
  PerfCounters pc({{perf_event::task_clock_ns(), perf_event::context_switches()}});
  if (!pc.available()) GTEST_SKIP() << "perf_event_open refused even software events: " << pc.unavailable_reason();
  pc.start();
  uint64_t c0 = thread_cpu_ns();
  burn_ns(20'000'000);
  auto mid = pc.read();
  burn_ns(20'000'000);
  uint64_t cpu = thread_cpu_ns() - c0;
  pc.stop();
  auto end = pc.read();
  burn_ns(5'000'000);
  auto later = pc.read();
  const PerfCount* t_mid = find(mid, "task_clock_ns");
  const PerfCount* t_end = find(end, "task_clock_ns");
  ASSERT_TRUE(t_mid && t_end);
  ASSERT_TRUE(t_end->counted) << t_end->why;
  EXPECT_GT(t_end->raw, t_mid->raw);
  EXPECT_NEAR(t_end->value, static_cast<double>(cpu), 0.2 * static_cast<double>(cpu));
  EXPECT_GT(t_end->time_enabled_ns, 0u);
  EXPECT_LE(t_end->time_running_ns, t_end->time_enabled_ns);
  EXPECT_EQ(find(later, "task_clock_ns")->raw, t_end->raw);  // stopped
  EXPECT_TRUE(find(end, "context_switches")->counted);

  // start() again: counts and times cover the new window only.
  pc.start();
  burn_ns(5'000'000);
  pc.stop();
  auto again = pc.read();
  const PerfCount* t_again = find(again, "task_clock_ns");
  EXPECT_LT(t_again->value, 0.5 * t_end->value);
  EXPECT_LT(t_again->time_enabled_ns, t_end->time_enabled_ns);
}

TEST(PerfCounters, RefusedEventIsLeftOutWithItsReason) {
  PerfEventSpec bogus{"bogus", 0x7fff0000u, 0};  // no PMU has this type
  PerfCounters pc({{bogus, perf_event::task_clock_ns()}});
  auto counts = pc.read();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_FALSE(counts[0].counted);
  EXPECT_NE(counts[0].why.find("perf_event_open(bogus) failed"), std::string::npos) << counts[0].why;
  if (!pc.available()) GTEST_SKIP() << "perf_event_open refused even software events: " << pc.unavailable_reason();
  pc.start();
  burn_ns(2'000'000);
  pc.stop();
  counts = pc.read();
  EXPECT_FALSE(counts[0].counted);
  EXPECT_TRUE(counts[1].counted) << counts[1].why;  // the good event leads its group instead
  EXPECT_GT(counts[1].value, 1e6);

  PerfCounters none({{bogus}});
  EXPECT_FALSE(none.available());
  EXPECT_NE(none.unavailable_reason().find("bogus"), std::string::npos);
}

TEST(PerfCounters, ReadBeforeStartIsNotACount) {
  PerfCounters pc({{perf_event::task_clock_ns()}});
  if (!pc.available()) GTEST_SKIP() << pc.unavailable_reason();
  auto counts = pc.read();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_FALSE(counts[0].counted);
  EXPECT_NE(counts[0].why.find("never started"), std::string::npos) << counts[0].why;
}

}  // namespace
}  // namespace dpukit
