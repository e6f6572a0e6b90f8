// Hardware (and software) event counters of the calling thread through
// perf_event_open(2): cycles, instructions, L1D / TLB accesses and misses,
// branches. Where the kernel or the VM exposes no PMU, the counters say so
// with the kernel's reason; they never report a number they did not count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpukit {

// One event as perf_event_open takes it (type and config of perf_event_attr).
struct PerfEventSpec {
  std::string name;  // how results name it: "instructions", "l1d_read_misses", ...
  uint32_t type = 0;
  uint64_t config = 0;
};

// The generic events the kernel maps onto each CPU's own PMU events.
namespace perf_event {
PerfEventSpec cycles();
PerfEventSpec instructions();
PerfEventSpec branch_instructions();
PerfEventSpec branch_misses();
PerfEventSpec l1d_read_accesses();
PerfEventSpec l1d_read_misses();
PerfEventSpec l1d_write_accesses();
PerfEventSpec dtlb_read_accesses();
PerfEventSpec dtlb_read_misses();
PerfEventSpec itlb_read_accesses();
PerfEventSpec itlb_read_misses();
// Software events: counted by the kernel itself, present without a PMU.
PerfEventSpec task_clock_ns();
PerfEventSpec page_faults();
PerfEventSpec context_switches();
}  // namespace perf_event

// One event's count over the counting window.
struct PerfCount {
  std::string name;
  bool counted = false;  // false: `why` says why there is no value
  std::string why;
  uint64_t raw = 0;  // as the kernel read it
  uint64_t time_enabled_ns = 0, time_running_ns = 0;
  // raw * enabled / running: the estimate over the whole window when the
  // kernel multiplexed the PMU and the group ran only part of the time.
  double value = 0;
  bool scaled() const { return counted && time_running_ns < time_enabled_ns; }
};

// The count of one event from what the kernel read; not counted (with the
// reason) when its group never got onto the PMU (running == 0).
PerfCount perf_count_from(const std::string& name, uint64_t raw, uint64_t time_enabled_ns,
                          uint64_t time_running_ns);

// Counters of the calling thread, user space only. Each group is scheduled
// onto the PMU as a unit, so ratios of events in one group (misses over
// accesses) come from the same instants even when groups are multiplexed.
// An event the kernel refuses is left out with the reason; the others count.
class PerfCounters {
 public:
  using Group = std::vector<PerfEventSpec>;
  explicit PerfCounters(const std::vector<Group>& groups);
  ~PerfCounters();
  PerfCounters(const PerfCounters&) = delete;
  PerfCounters& operator=(const PerfCounters&) = delete;

  // {cycles, instructions}, {branches, branch misses}, {L1D read accesses,
  // read misses, write accesses}, {dTLB read accesses, misses}, {iTLB read
  // accesses, misses}: small groups, so each fits a PMU with few counters.
  static std::vector<Group> default_hardware_groups();

  bool available() const { return opened_ > 0; }  // at least one event opened
  // Why no event could be opened ("" when available()).
  const std::string& unavailable_reason() const { return unavailable_reason_; }

  void start();  // zeroes and enables every group
  void stop();   // disables every group; read() then keeps returning the same counts
  // One count per event asked for, in the order asked. Allowed while running.
  std::vector<PerfCount> read() const;

 private:
  struct Event {
    PerfEventSpec spec;
    int fd = -1;
    uint64_t id = 0;
    std::string why;  // why it did not open
  };
  struct OpenGroup {
    int leader_fd = -1;
    std::vector<Event> events;
    uint64_t base_enabled_ns = 0, base_running_ns = 0;  // at the last start()
  };
  std::vector<OpenGroup> groups_;
  size_t opened_ = 0;
  std::string unavailable_reason_;
};

}  // namespace dpukit
