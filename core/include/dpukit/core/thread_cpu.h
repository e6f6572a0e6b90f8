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
    uint64_t start = 0, ns = 0;
  };
  void sample();
  bool read_task(pid_t tid, Reading& r) const;
  std::string group_of(const std::string& comm) const;

  std::vector<Group> groups_;
  unsigned period_ms_;
  bool use_schedstat_;
  std::string task_dir_;  // /proc/<pid>/task/
  mutable std::mutex mu_;
  std::map<pid_t, Task> tasks_;
  std::map<std::string, uint64_t> retired_;  // time of threads whose tid was reused
  bool baseline_ = true;  // the first sample sets each thread's base
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dpukit
