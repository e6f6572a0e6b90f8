#include "dpukit/core/accounting.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace dpukit {

namespace {
uint64_t clock_ns(clockid_t id) {
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

const char* place_name(Place p) {
  switch (p) {
    case Place::kHost: return "host";
    case Place::kDpu: return "dpu";
    case Place::kHw: return "hw";
  }
  return "?";
}

uint64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }
uint64_t thread_cpu_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }
uint64_t process_cpu_ns() { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

uint64_t thread_cpu_ns(pthread_t thread) {
  clockid_t id;
  if (pthread_getcpuclockid(thread, &id) != 0) return 0;
  return clock_ns(id);
}

uint64_t process_cpu_ns(pid_t pid) {
  clockid_t id;
  if (clock_getcpuclockid(pid, &id) != 0) return 0;
  return clock_ns(id);
}

uint64_t rusage_cpu_ns(const rusage& ru) {
  auto tv = [](const timeval& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_usec) * 1000ull;
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

std::vector<IrqTimes> irq_times_per_cpu() {
  std::ifstream in("/proc/stat");
  std::vector<IrqTimes> out;
  static const long ticks = sysconf(_SC_CLK_TCK);
  const uint64_t ns_per_tick = 1000000000ull / static_cast<uint64_t>(ticks > 0 ? ticks : 100);
  std::string line;
  while (std::getline(in, line)) {
    // "cpuN user nice system idle iowait irq softirq ..." (the "cpu" line is the sum)
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream f(line.substr(3));
    size_t cpu = 0;
    uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
    if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    if (out.size() <= cpu) out.resize(cpu + 1);
    out[cpu] = {irq * ns_per_tick, softirq * ns_per_tick};
  }
  return out;
}

PlaceTimer::PlaceTimer(CpuAccount& account, Place place)
    : account_(&account), place_(place), start_(thread_cpu_ns()) {}

uint64_t PlaceTimer::finish() {
  if (done_) return 0;
  done_ = true;
  uint64_t ns = thread_cpu_ns() - start_;
  account_->add(place_, ns);
  return ns;
}

}  // namespace dpukit
