// The dpu speed model: presets and parsing, and the two mechanisms that make
// a host core F as fast (Dilation, CfsBandwidth).
//
// The throughput tests are the timing bounds issue 25 asks for (0.5x +- 5 %
// at F = 0.5). This machine is small and shared, so each is measured in
// short rounds, the two modes interleaved (ABBA) and compared as the median
// of paired ratios; the measuring threads are pinned and, where permitted,
// get nice -20 so that a compiler on the same CPU takes little of their time.
// A measurement out of bounds is repeated once before the test fails.
#include "dpukit/core/dpu_speed.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dpukit/core/accounting.h"
#include "burn.h"

namespace dpukit {
namespace {

// -- DpuSpeed ---------------------------------------------------------------

TEST(DpuSpeed, PresetsParseToTheirFactors) {
  EXPECT_EQ(DpuSpeed::parse("host").factor, 1.0);
  EXPECT_TRUE(DpuSpeed::parse("host").full());
  EXPECT_EQ(DpuSpeed::parse("bluefield3").factor, 0.455);
  EXPECT_EQ(DpuSpeed::parse("bluefield3").name, "bluefield3");
  EXPECT_EQ(DpuSpeed::parse("bluefield2").factor, 0.45);
  size_t n = 0;
  for (const auto& p : dpu_speed_presets()) {
    ++n;
    EXPECT_EQ(DpuSpeed::parse(p.name).factor, p.factor);
    EXPECT_GT(std::string(p.source).size(), 20u) << p.name << " has no source";
  }
  EXPECT_EQ(n, 3u);
}

TEST(DpuSpeed, NumbersInRangeAreFactors) {
  EXPECT_EQ(DpuSpeed::parse("0.5").factor, 0.5);
  EXPECT_EQ(DpuSpeed::parse("0.5").name, "0.5");
  EXPECT_FALSE(DpuSpeed::parse("0.5").full());
  EXPECT_EQ(DpuSpeed::parse("1").factor, 1.0);
  EXPECT_EQ(DpuSpeed::parse("1e-3").factor, 0.001);
  EXPECT_EQ(DpuSpeed::parse("0.25").to_json(), (nlohmann::json{{"name", "0.25"}, {"factor", 0.25}}));
}

TEST(DpuSpeed, RejectsWhatIsNotASpeed) {
  for (const char* bad : {"0", "1.5", "", "abc", "nan", "inf", "-0.5", "0.5x", "BlueField3", " 0.5", "\t0.5"}) {
    try {
      DpuSpeed::parse(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
  }
  // A word that is not a preset is answered with the presets' names.
  try {
    DpuSpeed::parse("abc");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bluefield2"), std::string::npos) << e.what();
  }
}

// -- a CPU-bound unit of work ------------------------------------------------

// Pure computation, no memory traffic: what F describes.
uint64_t compute(uint64_t iterations, uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

std::atomic<uint64_t> sink{0};

// Iterations of compute() that take about `ns` of CPU on this thread.
uint64_t calibrate(uint64_t ns) {
  uint64_t n = 10'000;
  for (;;) {
    const uint64_t t0 = thread_cpu_ns();
    sink += compute(n, t0);
    const uint64_t took = thread_cpu_ns() - t0;
    if (took >= 2'000'000) return std::max<uint64_t>(1, n * ns / took);
    n *= 4;
  }
}

// Gives the calling thread a CPU of its own as far as this machine allows: a
// CfsBandwidth group at F = 1 (no quota, the largest weight), so that other
// work on its CPU takes little of its time. Without cgroups, nothing.
std::unique_ptr<CfsBandwidth> dedicate_thread() {
  static const bool available = CfsBandwidth::unavailable_reason().empty();
  if (!available) return nullptr;
  auto g = std::make_unique<CfsBandwidth>("dedicated", 1.0);
  g->add_thread(gettid());
  return g;
}

// Runs `fn` on a new thread pinned to `cpu` and dedicated.
void run_pinned(int cpu, const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      if (const auto warning = pin_current_thread(CpuSet{{cpu}}); !warning.empty()) throw std::runtime_error(warning);
      const auto dedicated = dedicate_thread();
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

int last_cpu() { return available_cpus().cpus.back(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One round of a CPU-bound loop: units done per wall second for `seconds`,
// calling `after` after each unit; and the longest wall gap between the ends
// of successive units.
struct Round {
  double units_per_sec = 0;
  uint64_t units = 0, longest_gap_ns = 0;
};
Round loop_round(uint64_t iterations, double seconds, const std::function<void()>& after) {
  Round r;
  const uint64_t t0 = now_ns(), end = t0 + static_cast<uint64_t>(seconds * 1e9);
  uint64_t last = t0, now = t0;
  do {
    sink += compute(iterations, now);
    after();
    now = now_ns();
    r.longest_gap_ns = std::max(r.longest_gap_ns, now - last);
    last = now;
    ++r.units;
  } while (now < end);
  r.units_per_sec = r.units / ((now - t0) / 1e9);
  return r;
}

// Paired rounds of mode A and mode B in ABBA order; per pair the ratio B/A.
struct Paired {
  std::vector<double> ratios;
  std::vector<Round> a, b;
  double median_ratio() const { return median(ratios); }
  std::string describe() const {
    std::ostringstream s;
    auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    s << "median ratio " << median_ratio() << " over " << ratios.size() << " pairs (range " << *lo << " - " << *hi
      << ")";
    return s.str();
  }
};
Paired paired_rounds(int pairs, const std::function<Round()>& a, const std::function<Round()>& b) {
  Paired p;
  for (int i = 0; i < pairs; ++i) {
    Round ra, rb;
    if (i % 2 == 0) {
      ra = a();
      rb = b();
    } else {
      rb = b();
      ra = a();
    }
    p.a.push_back(ra);
    p.b.push_back(rb);
    p.ratios.push_back(rb.units_per_sec / ra.units_per_sec);
  }
  return p;
}

// Measures, and measures once more if the median is outside
// [want - tolerance, want + tolerance]: a single disturbance on a shared
// machine must not fail the test, a wrong mechanism fails both times.
Paired measure_ratio(const std::function<Paired()>& measure, double want, double tolerance, const char* what) {
  Paired p = measure();
  std::cout << what << ": " << p.describe() << "\n";
  if (std::abs(p.median_ratio() - want) > tolerance) {
    p = measure();
    std::cout << what << " (repeated): " << p.describe() << "\n";
  }
  return p;
}

constexpr uint64_t kUnitNs = 100'000;  // a unit of work: ~100 us of CPU
constexpr double kRoundSec = 0.05;
constexpr int kPairs = 8;              // 0.4 s of each mode
// A CFS round spans many periods (8 ms at 250 Hz), so that where a round
// starts in a period matters little.
constexpr double kCfsRoundSec = 0.2;
constexpr int kCfsPairs = 5;  // 1 s of each mode

// -- Dilation ----------------------------------------------------------------

TEST(Dilation, FullSpeedDoesNothing) {
  Dilation d(1.0);
  EXPECT_FALSE(d.active());
  d.start();
  test::burn(1'000'000);
  d.pay();
  d.poll(0);
  EXPECT_EQ(d.dilated_ns(), 0u);
  EXPECT_EQ(d.work_ns(), 0u);
}

TEST(Dilation, RejectsFactorsOutsideTheRange) {
  EXPECT_THROW(Dilation(0.0), std::invalid_argument);
  EXPECT_THROW(Dilation(1.5), std::invalid_argument);
  EXPECT_THROW(Dilation(-1.0), std::invalid_argument);
  EXPECT_THROW(Dilation(NAN), std::invalid_argument);
}

TEST(Dilation, HalfSpeedHalvesThroughput) {
  run_pinned(last_cpu(), [] {
    const uint64_t iterations = calibrate(kUnitNs);
    auto at = [&](double f) {
      return [&, f] {
        Dilation d(f);
        d.start();
        return loop_round(iterations, kRoundSec, [&] { d.pay(); });
      };
    };
    const Paired p = measure_ratio([&] { return paired_rounds(kPairs, at(1.0), at(0.5)); }, 0.5, 0.025,
                                   "Dilation F=0.5 / F=1 throughput");
    RecordProperty("throughput_ratio", std::to_string(p.median_ratio()));
    EXPECT_NEAR(p.median_ratio(), 0.5, 0.025) << p.describe();
  });
}

// The dilated time is CPU time of the thread: an account of the dpu place
// holds what the slower core would have spent, 1/F x the units' own CPU.
TEST(Dilation, AccountedCpuIsTheUndilatedCpuOverF) {
  run_pinned(last_cpu(), [] {
    const uint64_t iterations = calibrate(kUnitNs);
    constexpr int kUnits = 2000;  // ~0.2 s undilated, ~0.4 s dilated
    auto attempt = [&](double& accounted_over_work, double& work_over_plain) {
      uint64_t plain = thread_cpu_ns();
      for (int i = 0; i < kUnits; ++i) sink += compute(iterations, i);
      plain = thread_cpu_ns() - plain;
      CpuAccount account;
      Dilation d(0.5);
      {
        PlaceTimer timer(account, Place::kDpu);
        d.start();
        for (int i = 0; i < kUnits; ++i) {
          sink += compute(iterations, i);
          d.pay();
        }
      }
      accounted_over_work = double(account.get(Place::kDpu)) / double(d.work_ns());
      work_over_plain = double(d.work_ns()) / double(plain);
      std::cout << "accounted dpu CPU " << account.get(Place::kDpu) / 1e6 << " ms, work " << d.work_ns() / 1e6
                << " ms, dilated " << d.dilated_ns() / 1e6 << " ms, the same units undilated " << plain / 1e6
                << " ms\n";
    };
    double ratio = 0, work = 0;
    attempt(ratio, work);
    if (std::abs(ratio - 2.0) > 0.1 || std::abs(work - 1.0) > 0.1) attempt(ratio, work);
    RecordProperty("accounted_over_work", std::to_string(ratio));
    EXPECT_NEAR(ratio, 2.0, 0.1);  // 2x within 5 %
    // work_ns() is the units' own CPU: what the same units take undilated.
    EXPECT_NEAR(work, 1.0, 0.1);
  });
}

// Two dpu threads on two CPUs: one dilating does not slow the other, and
// its own debt is its thread's CPU time, not the process's (the other
// thread's CPU would pay it off early).
TEST(Dilation, DoesNotDelayAThreadOnAnotherCpu) {
  const auto cpus = available_cpus().cpus;
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs, this process may use " << cpus.size();
  // The other thread runs a CPU-bound loop at the factor of the current
  // generation; a new generation restarts it, and the rate of each
  // generation is kept.
  std::atomic<bool> stop{false};
  std::atomic<double> factor{1.0};
  std::atomic<uint64_t> generation{0}, started{0};
  std::mutex mu;
  std::map<uint64_t, double> other_rate;
  std::thread other([&] {
    pin_current_thread(CpuSet{{cpus[0]}});
    const auto dedicated = dedicate_thread();
    const uint64_t iterations = calibrate(kUnitNs);
    while (!stop) {
      const uint64_t gen = generation.load();
      Dilation d(factor.load());
      uint64_t units = 0;
      const uint64_t t0 = now_ns();
      d.start();
      started = gen;
      while (!stop && generation.load() == gen) {
        sink += compute(iterations, units);
        d.pay();
        ++units;
      }
      std::lock_guard lock(mu);
      other_rate[gen] = units / ((now_ns() - t0) / 1e9);
    }
  });
  auto switch_other = [&](double f) {
    factor = f;
    const uint64_t gen = generation.fetch_add(1) + 1;
    while (started.load() != gen) std::this_thread::yield();
    return gen;
  };
  Paired own, theirs;
  run_pinned(cpus[1], [&] {
    const uint64_t iterations = calibrate(kUnitNs);
    auto measure = [&] {
      // Rounds in ABBA order with the other thread at F = 1 (A) or 0.5 (B).
      std::vector<std::pair<Round, uint64_t>> a, b;
      for (int i = 0; i < 2 * kPairs; ++i) {
        const bool slow = (i % 4 == 1 || i % 4 == 2);
        const uint64_t gen = switch_other(slow ? 0.5 : 1.0);
        (slow ? b : a).emplace_back(loop_round(iterations, kRoundSec, [] {}), gen);
      }
      switch_other(1.0);  // ends the last generation, so its rate is kept
      Paired mine, its;
      std::lock_guard lock(mu);
      for (int i = 0; i < kPairs; ++i) {
        mine.ratios.push_back(b[i].first.units_per_sec / a[i].first.units_per_sec);
        its.ratios.push_back(other_rate[b[i].second] / other_rate[a[i].second]);
      }
      return std::pair{mine, its};
    };
    std::tie(own, theirs) = measure();
    std::cout << "undilated thread, other at F=0.5 / F=1: " << own.describe()
              << "; the other's own throughput F=0.5 / F=1: " << theirs.describe() << "\n";
    if (std::abs(own.median_ratio() - 1.0) > 0.05 || std::abs(theirs.median_ratio() - 0.5) > 0.025) {
      std::tie(own, theirs) = measure();
      std::cout << "(repeated) undilated thread: " << own.describe() << "; the other: " << theirs.describe()
                << "\n";
    }
  });
  stop = true;
  other.join();
  RecordProperty("neighbour_ratio", std::to_string(own.median_ratio()));
  EXPECT_NEAR(own.median_ratio(), 1.0, 0.05) << own.describe();
  EXPECT_NEAR(theirs.median_ratio(), 0.5, 0.025) << theirs.describe();
}

// poll() is for loops whose units are too small to pay each: it pays only
// once its quantum of wall time has passed since the last payment.
TEST(Dilation, PollPaysOnlyAfterItsQuantum) {
  Dilation d(0.5);
  d.start();
  const uint64_t used = test::burn(300'000);
  d.poll(60'000'000'000);  // a minute has not passed
  EXPECT_EQ(d.work_ns(), 0u);
  EXPECT_EQ(d.dilated_ns(), 0u);
  d.poll(250'000);  // 300 us of CPU took at least 300 us of wall time
  EXPECT_GE(d.work_ns(), used);
  EXPECT_GE(d.dilated_ns(), d.work_ns());  // F = 0.5: as much again
  const uint64_t paid = d.work_ns();
  d.poll(60'000'000'000);  // just paid: the quantum starts again
  EXPECT_EQ(d.work_ns(), paid);
}

// due(): a loop that pays at points of its own asks whether a quantum has
// passed; its clock reads are the model's cost, not the unit's work.
TEST(Dilation, DueAfterItsQuantumAndItsChecksAreNotWork) {
  EXPECT_FALSE(Dilation(1.0).due(0));  // full speed: never a payment
  Dilation d(0.5);
  d.start();
  EXPECT_FALSE(d.due(60'000'000'000));
  test::burn(300'000);
  EXPECT_TRUE(d.due(250'000));
  d.pay();
  // A million checks and nothing else: without their cost taken off, the
  // unit's work would be all of their CPU time.
  const uint64_t t0 = thread_cpu_ns();
  const uint64_t work0 = d.work_ns();
  int due = 0;
  for (int i = 0; i < 1'000'000; ++i) due += d.due(60'000'000'000);
  const uint64_t checks = thread_cpu_ns() - t0;
  d.pay();
  EXPECT_EQ(due, 0);
  EXPECT_LT(double(d.work_ns() - work0), 0.6 * double(checks)) << "checks' CPU " << checks << " ns";
}

// exclude(): CPU time in the loop that is not the dpu's is not dilated.
TEST(Dilation, ExcludedTimeIsNotDilated) {
  Dilation d(0.5);
  d.start();
  const uint64_t dpu = test::burn(2'000'000);
  d.exclude(test::burn(6'000'000));  // the emulated wire, in the same loop
  d.pay();
  EXPECT_GE(d.work_ns(), dpu);
  EXPECT_LT(d.work_ns(), dpu + 1'000'000) << "the excluded 6 ms were counted as work";
  EXPECT_GE(d.dilated_ns(), d.work_ns());
  EXPECT_LT(d.dilated_ns(), d.work_ns() + 1'000'000);
  // An exclusion counts for one payment only.
  const uint64_t before = d.work_ns();
  test::burn(2'000'000);
  d.pay();
  EXPECT_GE(d.work_ns() - before, 2'000'000u);
}

// -- CfsBandwidth ------------------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// This task's line for the cpu controller in /proc/<pid>/task/<tid>/cgroup.
std::string cpu_cgroup_of(pid_t pid, pid_t tid) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/cgroup"));
  std::string line, v2;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",cpu,") != std::string::npos) return line.substr(b + 1);
    if (a + 1 == b) v2 = line.substr(b + 1);
  }
  return v2;
}

#define SKIP_WITHOUT_CFS()                                                       \
  do {                                                                           \
    const std::string why = CfsBandwidth::unavailable_reason();                  \
    if (!why.empty()) GTEST_SKIP() << "CFS bandwidth unavailable here: " << why; \
  } while (0)

TEST(CfsBandwidth, RejectsBadArguments) {
  EXPECT_THROW(CfsBandwidth("t", 0.0), std::invalid_argument);
  EXPECT_THROW(CfsBandwidth("t", 1.5), std::invalid_argument);
  EXPECT_THROW(CfsBandwidth("t", 0.5, 0), std::invalid_argument);
  EXPECT_THROW(CfsBandwidth("a/b", 0.5), std::invalid_argument);
  EXPECT_THROW(CfsBandwidth("", 0.5), std::invalid_argument);
  // 1 ms of quota needs a period over the kernel's longest (1 s).
  EXPECT_THROW(CfsBandwidth("t", 0.0005, 1, 1000), std::invalid_argument);
}

// The default period is two scheduler ticks; an explicit one is taken down
// to the kernel's 1 ms, raised only so that the quota is 1 ms or more (the
// kernel refuses less).
TEST(CfsBandwidth, PeriodAndQuota) {
  SKIP_WITHOUT_CFS();
  timespec tick{};
  ASSERT_EQ(clock_getres(CLOCK_MONOTONIC_COARSE, &tick), 0);
  EXPECT_EQ(CfsBandwidth::default_period_us(), std::max<uint64_t>(1000, 2 * tick.tv_nsec / 1000));
  struct Case {
    double f;
    unsigned cpus;
    uint64_t asked, period, quota;
  };
  const uint64_t d = CfsBandwidth::default_period_us();
  for (const Case& c : {Case{0.5, 1, 1000, 2000, 1000}, Case{0.25, 1, 1000, 4000, 1000},
                        Case{0.455, 1, 1000, 2198, 1000}, Case{0.5, 2, 1000, 1000, 1000},
                        Case{0.25, 2, 1000, 2000, 1000}, Case{0.9, 4, 1000, 1000, 3600},
                        Case{0.5, 1, 100'000, 100'000, 50'000}, Case{0.5, 1, 0, d, d / 2},
                        Case{0.25, 2, 0, d, d / 2}}) {
    CfsBandwidth g("period", c.f, c.cpus, c.asked);
    EXPECT_EQ(g.period_us(), c.period) << c.f << " x " << c.cpus << " asked " << c.asked;
    EXPECT_EQ(g.quota_us(), c.quota) << c.f << " x " << c.cpus << " asked " << c.asked;
    if (slurp(g.path() + "/cpu.max").empty()) {
      EXPECT_EQ(slurp(g.path() + "/cpu.cfs_period_us"), std::to_string(c.period) + "\n");
      EXPECT_EQ(slurp(g.path() + "/cpu.cfs_quota_us"), std::to_string(c.quota) + "\n");
    } else {
      EXPECT_EQ(slurp(g.path() + "/cpu.max"), std::to_string(c.quota) + " " + std::to_string(c.period) + "\n");
    }
  }
  CfsBandwidth full("period", 1.0);
  EXPECT_EQ(full.quota_us(), 0u) << "F = 1: no limit";
  const std::string limit = slurp(full.path() + "/cpu.max");
  EXPECT_EQ(limit.empty() ? slurp(full.path() + "/cpu.cfs_quota_us") : limit.substr(0, 4),
            limit.empty() ? "-1\n" : "max ");
}

TEST(CfsBandwidth, GroupIsPerProcessAndRemovedWithItsTasksMovedBack) {
  SKIP_WITHOUT_CFS();
  std::string path;
  const std::string home = cpu_cgroup_of(getpid(), gettid());
  std::thread t([&] {
    {
      CfsBandwidth g("members", 0.5);
      path = g.path();
      EXPECT_NE(path.find("members-" + std::to_string(getpid())), std::string::npos) << path;
      CfsBandwidth other("members", 0.5);
      EXPECT_NE(other.path(), g.path()) << "two groups of one name in one process";
      g.add_thread(gettid());
      const std::string in = cpu_cgroup_of(getpid(), gettid());
      EXPECT_NE(in, home);
      EXPECT_EQ(path.substr(path.size() - in.substr(in.rfind('/')).size()), in.substr(in.rfind('/')));
      EXPECT_EQ(cpu_cgroup_of(getpid(), getpid()), home) << "only the thread moved";
    }
    EXPECT_EQ(cpu_cgroup_of(getpid(), gettid()), home) << "the thread went back";
  });
  t.join();
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " is still there";
}

// Without the right to make a group the reason says so, and the
// constructor throws it instead of running at full speed unnoticed.
TEST(CfsBandwidth, NotPermittedIsAClearError) {
  SKIP_WITHOUT_CFS();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    std::string out;
    if (setgid(65534) != 0 || setuid(65534) != 0) {
      out = "cannot drop root";
    } else {
      out = CfsBandwidth::unavailable_reason() + "\n";
      try {
        CfsBandwidth g("unprivileged", 0.5);
        out += "constructed";
      } catch (const std::runtime_error& e) {
        out += e.what();
      }
    }
    if (write(fds[1], out.data(), out.size())) {}
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(child, nullptr, 0);
  const auto nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos) << out;
  const std::string reason = out.substr(0, nl), error = out.substr(nl + 1);
  EXPECT_NE(reason.find("cannot create a cgroup"), std::string::npos) << reason;
  EXPECT_NE(reason.find("needs root"), std::string::npos) << reason;
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;
  EXPECT_NE(error.find("needs root"), std::string::npos) << error;
}

TEST(CfsBandwidth, AddProcessMovesAWholeProcess) {
  SKIP_WITHOUT_CFS();
  const std::string home = cpu_cgroup_of(getpid(), getpid());
  const pid_t child = fork();
  if (child == 0) {
    std::thread([] { pause(); }).detach();
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  std::string path;
  {
    CfsBandwidth g("process", 0.25);
    path = g.path();
    g.add_process(child);
    const std::string in = cpu_cgroup_of(child, child);
    EXPECT_NE(in, home);
    EXPECT_EQ(path.substr(path.size() - in.size() + in.rfind('/')), in.substr(in.rfind('/')));
    EXPECT_EQ(cpu_cgroup_of(getpid(), getpid()), home);
  }
  EXPECT_EQ(cpu_cgroup_of(child, child), home);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " is still there";
  CfsBandwidth g("process", 0.5);
  EXPECT_THROW(g.add_process(999'999'999), std::runtime_error) << "no such process";
}

// The group stands for a dpu core of its own: a thread of this process
// spinning on the same CPU (the weight of any task, or of a busy session's
// autogroup) does not take its quota; it gets F of the CPU, not a fair half.
TEST(CfsBandwidth, GetsItsQuotaBesideACompetitorOnItsCpu) {
  SKIP_WITHOUT_CFS();
  const int cpu = last_cpu();
  std::atomic<bool> stop{false};
  std::thread competitor([&] {
    pin_current_thread(CpuSet{{cpu}});
    volatile uint64_t x = 0;
    while (!stop) x = x + 1;
  });
  double share = 0;
  std::thread t([&] {
    pin_current_thread(CpuSet{{cpu}});
    CfsBandwidth g("share", 0.75);
    g.add_thread(gettid());
    test::burn(20'000'000);
    const uint64_t c0 = thread_cpu_ns(), w0 = now_ns();
    while (now_ns() - w0 < 500'000'000) {
    }
    share = double(thread_cpu_ns() - c0) / double(now_ns() - w0);
  });
  t.join();
  stop = true;
  competitor.join();
  RecordProperty("cpu_share", std::to_string(share));
  EXPECT_NEAR(share, 0.75, 0.1) << "an equal weight would give about 0.5";
}

// A CPU-bound loop at F = 0.5 in CfsBandwidth groups of `period_us` (0: the
// default), beside the same loop at F = 1 in ABBA pairs.
struct CfsMeasurement {
  Paired paired;
  uint64_t period_us = 0, longest_stall_ns = 0, longest_free_gap_ns = 0, unit_ns = UINT64_MAX;
  uint64_t periods = 0, throttled = 0;
};
CfsMeasurement measure_cfs(uint64_t period_us, bool retry) {
  CfsMeasurement m;
  run_pinned(last_cpu(), [&] {
    const uint64_t iterations = calibrate(kUnitNs);
    // Each round in a group of its own, at F = 1 or 0.5: the same weight.
    auto at = [&](double f) {
      return [&, f] {
        CfsBandwidth g("throughput", f, 1, period_us);
        m.period_us = f < 1.0 ? g.period_us() : m.period_us;
        g.add_thread(gettid());
        // A new group starts with a full quota: the round starts in the
        // steady state, at some point of a period, as it ends.
        loop_round(iterations, 3 * g.period_us() / 1e6, [] {});
        Round r = loop_round(iterations, kCfsRoundSec, [] {});
        if (f < 1.0) {
          const auto s = g.stat();
          m.periods += s.periods;
          m.throttled += s.throttled_periods;
        }
        return r;
      };
    };
    auto measure = [&] { return paired_rounds(kCfsPairs, at(1.0), at(0.5)); };
    m.paired = retry ? measure_ratio(measure, 0.5, 0.025, "CfsBandwidth F=0.5 / F=1 throughput") : measure();
  });
  for (const Round& r : m.paired.b) m.longest_stall_ns = std::max(m.longest_stall_ns, r.longest_gap_ns);
  for (const Round& r : m.paired.a) {
    m.longest_free_gap_ns = std::max(m.longest_free_gap_ns, r.longest_gap_ns);
    m.unit_ns = std::min<uint64_t>(m.unit_ns, static_cast<uint64_t>(1e9 / r.units_per_sec));
  }
  std::cout << "CfsBandwidth F=0.5, period " << m.period_us << " us: " << m.paired.describe()
            << "; longest gap between units " << m.longest_stall_ns / 1e3 << " us (unthrottled: "
            << m.longest_free_gap_ns / 1e3 << " us; a unit takes " << m.unit_ns / 1e3 << " us); " << m.throttled
            << " of " << m.periods << " periods throttled\n";
  return m;
}

// Throughput at F = 0.5 is half, over many periods; a throttled thread stops
// for the rest of the period: the longest stall is reported.
TEST(CfsBandwidth, HalfSpeedHalvesThroughputAndReportsTheLongestStall) {
  SKIP_WITHOUT_CFS();
  const CfsMeasurement m = measure_cfs(0, true);
  RecordProperty("period_us", std::to_string(m.period_us));
  RecordProperty("throughput_ratio", std::to_string(m.paired.median_ratio()));
  RecordProperty("longest_stall_us", std::to_string(m.longest_stall_ns / 1000));
  RecordProperty("longest_unthrottled_gap_us", std::to_string(m.longest_free_gap_ns / 1000));
  EXPECT_NEAR(m.paired.median_ratio(), 0.5, 0.025) << m.paired.describe();
  EXPECT_GT(m.throttled, 0u) << "the quota never throttled the loop";
}

// Why the default period is not the kernel's shortest: reported, not
// bounded (it depends on the kernel's tick). The loop is still throttled.
TEST(CfsBandwidth, ShortestPeriodReportedBesideTheDefault) {
  SKIP_WITHOUT_CFS();
  const CfsMeasurement m = measure_cfs(CfsBandwidth::kShortestPeriodUs, false);
  RecordProperty("period_us", std::to_string(m.period_us));
  RecordProperty("throughput_ratio", std::to_string(m.paired.median_ratio()));
  RecordProperty("longest_stall_us", std::to_string(m.longest_stall_ns / 1000));
  EXPECT_EQ(m.period_us, 2000u) << "F = 0.5 needs 2 ms for the kernel's 1 ms quota";
  EXPECT_LT(m.paired.median_ratio(), 0.75) << m.paired.describe();
  EXPECT_GT(m.throttled, 0u);
}

}  // namespace
}  // namespace dpukit
