// CPU time of a process's threads (this one's, or a child's), grouped by
// thread-name prefix: how much of a program's CPU went to one kind of its
// threads, when those threads are not ours to time from inside.
//
// Each task's name is read from /proc/<pid>/task/<tid>/stat (comm), its time
// from `schedstat` (nanoseconds on CPU) when the kernel has it, otherwise
// from `stat` utime + stime (clock ticks, 10 ms resolution).
//
// Threads come and go, and a thread's counters vanish with it, so a sampler
// thread reads every task periodically and keeps, per tid, the largest value
// seen; a thread that exits loses at most one period of CPU time. The time a
// thread used before start() is not counted.
//
// The kernel-threads scope samples every kernel thread instead (kthreadd and
// its children: writeback kworkers, ksoftirqd, jbd2, kswapd...): the kernel's
// own CPU time, which no process's figure includes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dpukit/core/accounting.h"

namespace dpukit {

class ThreadCpuSampler {
 public:
  struct Group {
    std::string name;    // what the group is reported as
    std::string prefix;  // the thread-name prefix (comm, at most 15 characters) of its threads
  };
  // Threads matching no group's prefix are summed under "other". `pid` 0 is
  // this process.
  ThreadCpuSampler(std::vector<Group> groups, unsigned period_ms = 100, pid_t pid = 0);
  struct KernelThreads {};
  ThreadCpuSampler(KernelThreads, std::vector<Group> groups, unsigned period_ms = 100);
  ~ThreadCpuSampler();

  void start();           // takes the baseline and starts sampling
  void stop();            // takes a last sample and stops
  std::map<std::string, uint64_t> cpu_ns() const;  // per group (and "other"), over [start, stop]
  std::map<std::string, uint64_t> threads_seen() const;  // tids seen per group
  const char* clock() const { return use_schedstat_ ? "schedstat" : "stat-ticks"; }

 private:
  struct Task {
    std::string group;
    uint64_t start = 0;  // the thread's start time (ticks since boot)
    uint64_t base = 0, max = 0;
  };
  struct Reading {
    std::string comm;
    pid_t ppid = 0;
    uint64_t start = 0, ns = 0;
  };
  void sample();
  bool read_task(pid_t tid, Reading& r) const;
  std::string group_of(const std::string& comm) const;

  std::vector<Group> groups_;
  unsigned period_ms_;
  bool use_schedstat_;
  std::string task_dir_;  // /proc/<pid>/task/, or /proc/ for kernel threads
  bool kernel_ = false;   // only tasks that are kernel threads
  mutable std::mutex mu_;
  std::map<pid_t, Task> tasks_;
  std::map<std::string, uint64_t> retired_;  // time of threads whose tid was reused
  bool baseline_ = true;  // the first sample sets each thread's base
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// The kernel's own CPU time over an interval, which no process's figure
// includes: kernel threads by kind (writeback and other work items in
// kworkers, deferred softirqs in ksoftirqd, the ext4 journal in jbd2, page
// reclaim in kswapd; the rest as "other"), and hard and soft interrupt time
// per CPU.
class KernelCpuSampler {
 public:
  explicit KernelCpuSampler(unsigned period_ms = 100);
  void start();
  void stop();
  std::map<std::string, uint64_t> threads_ns() const;  // over [start, stop]
  IrqTimes irq_ns(const CpuSet& cpus) const;           // on these CPUs, over [start, stop]

 private:
  ThreadCpuSampler threads_;
  std::vector<IrqTimes> irq0_, irq1_;
};

}  // namespace dpukit
