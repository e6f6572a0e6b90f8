#include "dpukit/core/thread_cpu.h"

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "file_text.h"

namespace dpukit {

namespace {
constexpr pid_t kKthreadd = 2;  // the parent of every kernel thread

}  // namespace

ThreadCpuSampler::ThreadCpuSampler(std::vector<Group> groups, unsigned period_ms, pid_t pid)
    : groups_(std::move(groups)), period_ms_(period_ms) {
  task_dir_ = "/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/task/";
  std::string probe;
  use_schedstat_ = read_text_file("/proc/self/task/" + std::to_string(gettid()) + "/schedstat", probe) && !probe.empty();
}

ThreadCpuSampler::ThreadCpuSampler(KernelThreads, std::vector<Group> groups, unsigned period_ms)
    : ThreadCpuSampler(std::move(groups), period_ms, 0) {
  task_dir_ = "/proc/";
  kernel_ = true;
}

ThreadCpuSampler::~ThreadCpuSampler() { stop(); }

std::string ThreadCpuSampler::group_of(const std::string& comm) const {
  for (const auto& g : groups_)
    if (comm.rfind(g.prefix, 0) == 0) return g.name;
  return "other";
}

bool ThreadCpuSampler::read_task(pid_t tid, Reading& r) const {
  std::string dir = task_dir_ + std::to_string(tid) + "/", stat;
  if (!read_text_file(dir + "stat", stat)) return false;
  // "tid (comm) state ppid ...": comm may hold spaces or ')', so take the
  // last ')' as its end.
  size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  r.comm = stat.substr(open + 1, close - open - 1);
  // Fields after the comm, counted from field 3 (state): ppid is field 4,
  // utime 14, stime 15, starttime 22 (which tells a reused tid from the old
  // thread).
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  r.start = 0;
  for (int f = 3; f <= 22 && rest >> field; ++f) {
    if (f == 4) r.ppid = pid_t(std::atoi(field.c_str()));
    if (f == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (f == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    if (f == 22) r.start = std::strtoull(field.c_str(), nullptr, 10);
  }
  if (kernel_ && tid != kKthreadd && r.ppid != kKthreadd) return false;  // a process, not a kernel thread
  if (use_schedstat_) {
    std::string s;
    if (!read_text_file(dir + "schedstat", s)) return false;
    r.ns = std::strtoull(s.c_str(), nullptr, 10);
    return true;
  }
  static const long ticks = sysconf(_SC_CLK_TCK);
  r.ns = (utime + stime) * (1000000000ull / uint64_t(ticks > 0 ? ticks : 100));
  return true;
}

void ThreadCpuSampler::sample() {
  DIR* d = opendir(task_dir_.c_str());
  if (!d) return;
  std::vector<std::pair<pid_t, Reading>> seen;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pid_t tid = pid_t(std::atoi(e->d_name));
    Reading r;
    if (read_task(tid, r)) seen.push_back({tid, std::move(r)});
  }
  closedir(d);
  std::lock_guard lk(mu_);
  for (auto& [tid, r] : seen) {
    auto [it, inserted] = tasks_.try_emplace(tid);
    Task& t = it->second;
    if (!inserted && t.start != r.start) {
      // The tid was reused by a new thread: bank the old thread's time.
      retired_[t.group] += t.max - t.base;
      inserted = true;
    }
    if (inserted) {
      t.start = r.start;
      t.base = baseline_ ? r.ns : 0;  // a thread born after start() counts from zero
      t.max = r.ns;
    }
    // A thread may rename itself after it is first seen (thread pools often
    // name their threads right after creating them): the latest name wins.
    t.group = group_of(r.comm);
    if (r.ns > t.max) t.max = r.ns;
  }
  baseline_ = false;
}

void ThreadCpuSampler::start() {
  sample();
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "dpukit-cpu");
    std::unique_lock lk(stop_mu_);
    while (!stop_cv_.wait_for(lk, std::chrono::milliseconds(period_ms_), [this] { return stopping_; })) {
      lk.unlock();
      sample();
      lk.lock();
    }
  });
}

void ThreadCpuSampler::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
  sample();
}

std::map<std::string, uint64_t> ThreadCpuSampler::cpu_ns() const {
  std::lock_guard lk(mu_);
  std::map<std::string, uint64_t> out;
  for (const auto& g : groups_) out[g.name] = 0;
  out["other"] = 0;
  for (const auto& [group, ns] : retired_) out[group] += ns;
  for (const auto& [tid, t] : tasks_) out[t.group] += t.max - t.base;
  return out;
}

std::map<std::string, uint64_t> ThreadCpuSampler::threads_seen() const {
  std::lock_guard lk(mu_);
  std::map<std::string, uint64_t> out;
  for (const auto& [tid, t] : tasks_) ++out[t.group];
  return out;
}

KernelCpuSampler::KernelCpuSampler(unsigned period_ms)
    : threads_(ThreadCpuSampler::KernelThreads{},
               {{"kworker", "kworker"}, {"ksoftirqd", "ksoftirqd"}, {"jbd2", "jbd2"}, {"kswapd", "kswapd"}},
               period_ms) {}

void KernelCpuSampler::start() {
  irq0_ = irq_times_per_cpu();
  threads_.start();
}

void KernelCpuSampler::stop() {
  threads_.stop();
  irq1_ = irq_times_per_cpu();
}

std::map<std::string, uint64_t> KernelCpuSampler::threads_ns() const { return threads_.cpu_ns(); }

IrqTimes KernelCpuSampler::irq_ns(const CpuSet& cpus) const {
  IrqTimes t;
  for (int c : cpus.cpus) {
    const auto i = static_cast<size_t>(c);
    if (c < 0 || i >= irq0_.size() || i >= irq1_.size()) continue;
    t.irq_ns += irq1_[i].irq_ns - irq0_[i].irq_ns;
    t.softirq_ns += irq1_[i].softirq_ns - irq0_[i].softirq_ns;
  }
  return t;
}

}  // namespace dpukit
