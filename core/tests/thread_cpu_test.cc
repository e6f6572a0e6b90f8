#include "dpukit/core/thread_cpu.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <csignal>
#include <thread>

#include "dpukit/core/accounting.h"
#include "burn.h"

namespace dpukit {
namespace {

using test::burn;

// The bounds below are exact on schedstat's clock, the same sum as a
// thread's own CPU clock once the thread is blocked: what a thread used
// between the sampler's start and stop is at least what it measured itself
// in that span and at most its whole CPU time. No bound depends on how busy
// the machine is: each thread waits on a condition (no CPU) while the
// sampler's start or stop needs it still. The fallback clock counts 10 ms
// ticks, and gets their rounding.
uint64_t slack(const ThreadCpuSampler& s) { return std::string(s.clock()) == "schedstat" ? 0 : 30'000'000; }

// A one-shot flag a thread waits on without spending CPU.
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(ThreadCpuSampler, GroupsThreadsByNamePrefix) {
  ThreadCpuSampler s({{"burner", "cpu-test-burn"}, {"sleeper", "cpu-test-sleep"}}, 20);
  Gate named_b, named_z, go, burnt, release;
  uint64_t used = 0, burner_total = 0, sleeper_total = 0;
  std::thread b([&] {
    pthread_setname_np(pthread_self(), "cpu-test-burn1");
    named_b.open();
    go.wait();
    used = burn(150'000'000);
    burnt.open();
    release.wait();
    burner_total = thread_cpu_ns();
  });
  std::thread z([&] {
    pthread_setname_np(pthread_self(), "cpu-test-sleep");
    named_z.open();
    release.wait();
    sleeper_total = thread_cpu_ns();
  });
  named_b.wait();
  named_z.wait();
  s.start();  // both named (a thread is grouped by the name it has when first seen)
  go.open();
  burnt.wait();
  s.stop();  // while both still exist, blocked: the last sample sees their totals
  release.open();
  b.join();
  z.join();
  auto cpu = s.cpu_ns();
  EXPECT_GE(cpu["burner"] + slack(s), used) << "clock " << s.clock();
  EXPECT_LE(cpu["burner"], burner_total + slack(s)) << "clock " << s.clock();
  EXPECT_LE(cpu["sleeper"], sleeper_total + slack(s)) << "clock " << s.clock();
  EXPECT_TRUE(cpu.count("other")) << "threads matching no prefix are summed under other";
  EXPECT_EQ(s.threads_seen()["burner"], 1u);
  EXPECT_EQ(s.threads_seen()["sleeper"], 1u);
}

// The kernel-threads scope sees kernel threads (kthreadd's children, such
// as the kworkers) and no process's threads, however they are named.
TEST(ThreadCpuSampler, KernelThreadsScopeSeesKernelThreadsOnly) {
  ThreadCpuSampler kernel(ThreadCpuSampler::KernelThreads{}, {{"kworker", "kworker"}, {"mine", "cpu-test-kern"}}, 20);
  ThreadCpuSampler mine({{"mine", "cpu-test-kern"}}, 20);
  Gate named, go, burnt, release;
  uint64_t used = 0;
  std::thread b([&] {
    pthread_setname_np(pthread_self(), "cpu-test-kern");
    named.open();
    go.wait();
    used = burn(100'000'000);
    burnt.open();
    release.wait();
  });
  named.wait();
  kernel.start();
  mine.start();
  go.open();
  burnt.wait();
  kernel.stop();
  mine.stop();
  release.open();
  b.join();
  EXPECT_GT(kernel.threads_seen()["kworker"], 0u) << "every Linux has kworkers";
  EXPECT_EQ(kernel.threads_seen()["mine"], 0u) << "a process's thread is not a kernel thread";
  EXPECT_EQ(kernel.cpu_ns()["mine"], 0u);
  EXPECT_GE(mine.cpu_ns()["mine"] + slack(mine), used) << "while the process scope sees it";
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
// sample: it ends only once a sample has seen all it burnt, and stop()'s
// last sample, which no longer finds it, must keep that.
TEST(ThreadCpuSampler, KeepsTheTimeOfAThreadThatExited) {
  ThreadCpuSampler s({{"burner", "cpu-test-gone"}}, 20);
  Gate named, go, burnt, release;
  uint64_t used = 0, total = 0;
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "cpu-test-gone");
    named.open();
    go.wait();
    used = burn(100'000'000);
    burnt.open();
    release.wait();
    total = thread_cpu_ns();
  });
  named.wait();
  s.start();
  go.open();
  burnt.wait();
  // Until a periodic sample has seen it all (a sampler that never samples fails here, after a minute).
  const uint64_t deadline = now_ns() + 60'000'000'000ull;
  while (s.cpu_ns()["burner"] + slack(s) < used && now_ns() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  release.open();
  t.join();
  s.stop();
  EXPECT_GE(s.cpu_ns()["burner"] + slack(s), used);
  EXPECT_LE(s.cpu_ns()["burner"], total + slack(s));
}

TEST(ThreadCpuSampler, TimeBeforeStartIsNotCounted) {
  Gate burnt, release;
  uint64_t before = 0, at_start = 0, total = 0;
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "cpu-test-early");
    before = burn(120'000'000);
    at_start = thread_cpu_ns();
    burnt.open();
    release.wait();
    total = thread_cpu_ns();
  });
  burnt.wait();
  ThreadCpuSampler s({{"early", "cpu-test-early"}}, 20);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  s.stop();
  release.open();
  t.join();
  EXPECT_GE(before, 120'000'000u);
  // Only what it used after start(), blocked all along: its CPU after it burnt, at most.
  EXPECT_LE(s.cpu_ns()["early"], total - at_start + slack(s)) << "the thread's time before start() was counted";
}

// Another process's threads: a child names itself and burns a known amount
// after the sampler took its baseline, then tells its whole CPU time.
TEST(ThreadCpuSampler, ReadsAnotherProcess) {
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "cpu-test-child");
    char c = 'n';
    if (::write(done[1], &c, 1) != 1) ::_exit(1);  // named
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    uint64_t used = burn(150'000'000);
    if (::write(done[1], &used, sizeof(used)) != sizeof(used)) ::_exit(1);
    if (::read(go[0], &c, 1) != 1) ::_exit(1);  // sampled: now its total
    uint64_t total = thread_cpu_ns();
    [[maybe_unused]] ssize_t w = ::write(done[1], &total, sizeof(total));
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(done[0], &c, 1), 1);  // the child has its name: the sampler groups it by that
  ThreadCpuSampler s({{"child", "cpu-test-child"}}, 20, child);
  s.start();
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  uint64_t used = 0, total = 0;
  ASSERT_EQ(::read(done[0], &used, sizeof(used)), static_cast<ssize_t>(sizeof(used)));
  s.stop();  // the child blocked in read()
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ASSERT_EQ(::read(done[0], &total, sizeof(total)), static_cast<ssize_t>(sizeof(total)));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
  EXPECT_GE(s.cpu_ns()["child"] + slack(s), used);
  EXPECT_LE(s.cpu_ns()["child"], total + slack(s));
}

}  // namespace
}  // namespace dpukit
