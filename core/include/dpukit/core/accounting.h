// Where the time goes: CPU time per place (host / dpu / hw), wall time, and
// pinning each place to its own CPUs.
#pragma once

#include <pthread.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace dpukit {

enum class Place { kHost = 0, kDpu = 1, kHw = 2 };
const char* place_name(Place p);  // "host", "dpu", "hw"

uint64_t now_ns();                        // CLOCK_MONOTONIC
uint64_t thread_cpu_ns();                 // the calling thread
uint64_t thread_cpu_ns(pthread_t thread); // another live thread of this process
uint64_t process_cpu_ns();                // this process, all threads
uint64_t process_cpu_ns(pid_t pid);       // another live process (0 if it cannot be read)
uint64_t rusage_cpu_ns(const rusage& ru); // user + system, e.g. from wait4()

// Time each CPU spent in hard and soft interrupt context (/proc/stat, since
// boot): kernel work no task's CPU time includes (block I/O completions,
// network receive). Empty if /proc/stat cannot be read.
struct IrqTimes {
  uint64_t irq_ns = 0, softirq_ns = 0;
};
std::vector<IrqTimes> irq_times_per_cpu();  // indexed by CPU number

// CPU time per place, added to from any thread.
class CpuAccount {
 public:
  CpuAccount() = default;
  // A copy is a snapshot of the totals.
  CpuAccount(const CpuAccount& o) { *this = o; }
  CpuAccount& operator=(const CpuAccount& o) {
    for (size_t i = 0; i < ns_.size(); ++i) ns_[i].store(o.ns_[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  void add(Place p, uint64_t ns) { ns_[static_cast<int>(p)].fetch_add(ns, std::memory_order_relaxed); }
  uint64_t get(Place p) const { return ns_[static_cast<int>(p)].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, 3> ns_{};
};

// Marks the calling thread as working for one place: the thread CPU time it
// uses from construction until finish() (or destruction) goes to that place.
class PlaceTimer {
 public:
  PlaceTimer(CpuAccount& account, Place place);
  ~PlaceTimer() { finish(); }
  uint64_t finish();  // adds and returns the time; later calls add nothing
  PlaceTimer(const PlaceTimer&) = delete;
  PlaceTimer& operator=(const PlaceTimer&) = delete;

 private:
  CpuAccount* account_;
  Place place_;
  uint64_t start_;
  bool done_ = false;
};

// A set of CPUs as Linux writes it: "0-3,6".
struct CpuSet {
  std::vector<int> cpus;
  static CpuSet parse(const std::string& text);  // throws std::invalid_argument on malformed text
  std::string str() const;
  bool empty() const { return cpus.empty(); }
  // The i-th CPU alone, round-robin over the set (worker i of several); empty stays empty.
  CpuSet nth(size_t i) const { return empty() ? CpuSet{} : CpuSet{{cpus[i % cpus.size()]}}; }
};
CpuSet available_cpus();  // this process's affinity mask

// Pins the calling thread. CPUs this process may not use are dropped with a
// warning; if none is left the thread stays unpinned. Returns the warning
// ("" when pinned as asked).
std::string pin_current_thread(const CpuSet& cpus);

// Which CPUs each place runs on. Defaults on a machine with n CPUs: host on
// the first, dpu and hw on the rest; on one CPU everything shares it. An
// explicit choice is kept, minus CPUs that do not exist here.
struct Placement {
  CpuSet host, dpu, hw;
  std::string note;  // why the placement differs from what was asked, if it does
  static Placement plan(const std::string& host_cpus, const std::string& dpu_cpus, const std::string& hw_cpus = "");
};

}  // namespace dpukit
