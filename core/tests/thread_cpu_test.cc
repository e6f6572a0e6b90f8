#include "dpukit/core/thread_cpu.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "dpukit/core/accounting.h"
#include "burn.h"

namespace dpukit {
namespace {

using test::burn;

// schedstat counts nanoseconds; the fallback counts 10 ms ticks.
uint64_t slack(const ThreadCpuSampler& s) { return std::string(s.clock()) == "schedstat" ? 5'000'000 : 30'000'000; }

TEST(ThreadCpuSampler, GroupsThreadsByNamePrefix) {
  ThreadCpuSampler s({{"burner", "cpu-test-burn"}, {"sleeper", "cpu-test-sleep"}}, 20);
  s.start();
  std::atomic<uint64_t> used{0};
  std::atomic<bool> release{false};
  auto hold = [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  std::thread b([&] {
    pthread_setname_np(pthread_self(), "cpu-test-burn1");
    used = burn(150'000'000);
    hold();
  });
  std::thread z([&] {
    pthread_setname_np(pthread_self(), "cpu-test-sleep");
    hold();
  });
  // Stopped while both still exist, so the last sample sees their totals.
  while (used == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.stop();
  release = true;
  b.join();
  z.join();
  auto cpu = s.cpu_ns();
  EXPECT_NEAR(double(cpu["burner"]), double(used), double(slack(s))) << "clock " << s.clock();
  EXPECT_LT(cpu["sleeper"], slack(s));
  EXPECT_TRUE(cpu.count("other")) << "threads matching no prefix are summed under other";
  EXPECT_EQ(s.threads_seen()["burner"], 1u);
}

// The kernel-threads scope sees kernel threads (kthreadd's children, such
// as the kworkers) and no process's threads, however they are named.
TEST(ThreadCpuSampler, KernelThreadsScopeSeesKernelThreadsOnly) {
  ThreadCpuSampler kernel(ThreadCpuSampler::KernelThreads{}, {{"kworker", "kworker"}, {"mine", "cpu-test-kern"}}, 20);
  ThreadCpuSampler mine({{"mine", "cpu-test-kern"}}, 20);
  kernel.start();
  mine.start();
  std::atomic<bool> done{false};
  std::thread b([&] {
    pthread_setname_np(pthread_self(), "cpu-test-kern");
    burn(100'000'000);
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  kernel.stop();
  mine.stop();
  done = true;
  b.join();
  EXPECT_GT(kernel.threads_seen()["kworker"], 0u) << "every Linux has kworkers";
  EXPECT_EQ(kernel.threads_seen()["mine"], 0u) << "a process's thread is not a kernel thread";
  EXPECT_EQ(kernel.cpu_ns()["mine"], 0u);
  EXPECT_GT(mine.cpu_ns()["mine"], 50'000'000u) << "while the process scope sees it";
}

TEST(KernelCpuSampler, ReportsEachKindAndIrqTimeOfTheCpusAsked) {
  KernelCpuSampler k(20);
  k.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  k.stop();
  auto t = k.threads_ns();
  for (const char* kind : {"kworker", "ksoftirqd", "jbd2", "kswapd", "other"}) EXPECT_TRUE(t.count(kind)) << kind;
  CpuSet none;
  EXPECT_EQ(k.irq_ns(none).irq_ns + k.irq_ns(none).softirq_ns, 0u);
  CpuSet bogus;
  bogus.cpus = {-1, 100000};
  EXPECT_EQ(k.irq_ns(bogus).softirq_ns, 0u) << "CPUs that do not exist add nothing";
}

TEST(IrqTimes, OneEntryPerCpuNeverDecreasing) {
  auto a = irq_times_per_cpu();
  ASSERT_FALSE(a.empty());
  EXPECT_GE(a.size(), static_cast<size_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  auto b = irq_times_per_cpu();
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GE(b[i].irq_ns, a[i].irq_ns);
    EXPECT_GE(b[i].softirq_ns, a[i].softirq_ns);
  }
}

// A thread that ends between samples keeps what it used up to its last
// sample; here it idles for several periods first, so that is all of it.
TEST(ThreadCpuSampler, KeepsTheTimeOfAThreadThatExited) {
  ThreadCpuSampler s({{"burner", "cpu-test-gone"}}, 20);
  s.start();
  uint64_t used = 0;
  std::thread([&] {
    pthread_setname_np(pthread_self(), "cpu-test-gone");
    used = burn(100'000'000);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }).join();
  s.stop();
  EXPECT_NEAR(double(s.cpu_ns()["burner"]), double(used), double(slack(s)));
}

TEST(ThreadCpuSampler, TimeBeforeStartIsNotCounted) {
  std::atomic<bool> go{false}, done{false};
  uint64_t before = 0;
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "cpu-test-early");
    before = burn(120'000'000);
    go = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ThreadCpuSampler s({{"early", "cpu-test-early"}}, 20);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  s.stop();
  done = true;
  t.join();
  EXPECT_GE(before, 120'000'000u);
  EXPECT_LT(s.cpu_ns()["early"], slack(s)) << "the thread's time before start() was counted";
}

// Another process's threads: a child names itself and burns a known amount
// after the sampler took its baseline.
TEST(ThreadCpuSampler, ReadsAnotherProcess) {
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "cpu-test-child");
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    uint64_t used = burn(150'000'000);
    [[maybe_unused]] ssize_t w = ::write(done[1], &used, sizeof(used));
    ::pause();
    ::_exit(0);
  }
  ThreadCpuSampler s({{"child", "cpu-test-child"}}, 20, child);
  // The child may not have renamed itself yet: wait until it has.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s.start();
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  uint64_t used = 0;
  ASSERT_EQ(::read(done[0], &used, sizeof(used)), static_cast<ssize_t>(sizeof(used)));
  s.stop();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
  EXPECT_NEAR(double(s.cpu_ns()["child"]), double(used), double(slack(s)));
}

}  // namespace
}  // namespace dpukit
