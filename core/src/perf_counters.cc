#include "dpukit/core/perf_counters.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace dpukit {
namespace {

PerfEventSpec hw(const char* name, uint64_t config) { return {name, PERF_TYPE_HARDWARE, config}; }

PerfEventSpec cache(const char* name, uint64_t cache_id, uint64_t op, uint64_t result) {
  return {name, PERF_TYPE_HW_CACHE, cache_id | (op << 8) | (result << 16)};
}

std::string paranoid_level() {
  std::ifstream in("/proc/sys/kernel/perf_event_paranoid");
  std::string v;
  return in >> v ? v : "unknown";
}

// The kernel's refusal in words, with what it usually means here.
std::string open_failure(const std::string& name, int err) {
  std::string why = "perf_event_open(" + name + ") failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
  switch (err) {
    case ENOENT:
      return why + ": the kernel exposes no PMU for this event (a VM without a virtual PMU, or an event this CPU lacks)";
    case EOPNOTSUPP:
      return why + ": the PMU cannot count this event as asked";
    case EACCES:
    case EPERM:
      return why + ": not permitted (kernel.perf_event_paranoid = " + paranoid_level() +
             "; counting one's own threads in user space needs <= 2, or CAP_PERFMON)";
    case ENOSYS:
      return why + ": this kernel has no perf_event_open";
    case EINVAL:
      return why + ": the kernel rejects this event configuration";
    case EMFILE:
      return why + ": out of file descriptors";
    default:
      return why;
  }
}

int perf_event_open(perf_event_attr* attr, int group_fd) {
  // pid 0, cpu -1: the calling thread, on whichever CPU it runs.
  return static_cast<int>(syscall(SYS_perf_event_open, attr, 0, -1, group_fd, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

namespace perf_event {
PerfEventSpec cycles() { return hw("cycles", PERF_COUNT_HW_CPU_CYCLES); }
PerfEventSpec instructions() { return hw("instructions", PERF_COUNT_HW_INSTRUCTIONS); }
PerfEventSpec branch_instructions() { return hw("branch_instructions", PERF_COUNT_HW_BRANCH_INSTRUCTIONS); }
PerfEventSpec branch_misses() { return hw("branch_misses", PERF_COUNT_HW_BRANCH_MISSES); }
PerfEventSpec l1d_read_accesses() {
  return cache("l1d_read_accesses", PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ,
               PERF_COUNT_HW_CACHE_RESULT_ACCESS);
}
PerfEventSpec l1d_read_misses() {
  return cache("l1d_read_misses", PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ,
               PERF_COUNT_HW_CACHE_RESULT_MISS);
}
PerfEventSpec l1d_write_accesses() {
  return cache("l1d_write_accesses", PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_WRITE,
               PERF_COUNT_HW_CACHE_RESULT_ACCESS);
}
PerfEventSpec dtlb_read_accesses() {
  return cache("dtlb_read_accesses", PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_OP_READ,
               PERF_COUNT_HW_CACHE_RESULT_ACCESS);
}
PerfEventSpec dtlb_read_misses() {
  return cache("dtlb_read_misses", PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_OP_READ,
               PERF_COUNT_HW_CACHE_RESULT_MISS);
}
PerfEventSpec itlb_read_accesses() {
  return cache("itlb_read_accesses", PERF_COUNT_HW_CACHE_ITLB, PERF_COUNT_HW_CACHE_OP_READ,
               PERF_COUNT_HW_CACHE_RESULT_ACCESS);
}
PerfEventSpec itlb_read_misses() {
  return cache("itlb_read_misses", PERF_COUNT_HW_CACHE_ITLB, PERF_COUNT_HW_CACHE_OP_READ,
               PERF_COUNT_HW_CACHE_RESULT_MISS);
}
PerfEventSpec task_clock_ns() { return {"task_clock_ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK}; }
PerfEventSpec page_faults() { return {"page_faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS}; }
PerfEventSpec context_switches() { return {"context_switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES}; }
}  // namespace perf_event

PerfCount perf_count_from(const std::string& name, uint64_t raw, uint64_t time_enabled_ns, uint64_t time_running_ns) {
  PerfCount c;
  c.name = name;
  c.raw = raw;
  c.time_enabled_ns = time_enabled_ns;
  c.time_running_ns = time_running_ns;
  if (time_running_ns == 0) {
    c.why = time_enabled_ns == 0 ? "not counted: the counters were never started"
                                 : "not counted: its group never got onto the PMU (time running 0 of " +
                                       std::to_string(time_enabled_ns) + " ns enabled)";
    return c;
  }
  c.counted = true;
  c.value = time_running_ns >= time_enabled_ns
                ? static_cast<double>(raw)
                : static_cast<double>(raw) * static_cast<double>(time_enabled_ns) / static_cast<double>(time_running_ns);
  return c;
}

std::vector<PerfCounters::Group> PerfCounters::default_hardware_groups() {
  using namespace perf_event;
  return {{cycles(), instructions()},
          {branch_instructions(), branch_misses()},
          {l1d_read_accesses(), l1d_read_misses(), l1d_write_accesses()},
          {dtlb_read_accesses(), dtlb_read_misses()},
          {itlb_read_accesses(), itlb_read_misses()}};
}

PerfCounters::PerfCounters(const std::vector<Group>& groups) {
  std::string first_failure;
  size_t failed = 0;
  for (const Group& g : groups) {
    OpenGroup og;
    for (const PerfEventSpec& spec : g) {
      Event e;
      e.spec = spec;
      perf_event_attr attr;
      std::memset(&attr, 0, sizeof attr);
      attr.size = sizeof attr;
      attr.type = spec.type;
      attr.config = spec.config;
      attr.disabled = og.leader_fd < 0 ? 1 : 0;  // members follow their leader
      attr.exclude_kernel = 1;  // the operator's own work; also what perf_event_paranoid 2 allows
      attr.exclude_hv = 1;
      attr.read_format =
          PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
      e.fd = perf_event_open(&attr, og.leader_fd);
      if (e.fd < 0) {
        e.why = open_failure(spec.name, errno);
        if (first_failure.empty()) first_failure = e.why;
        ++failed;
      } else {
        if (ioctl(e.fd, PERF_EVENT_IOC_ID, &e.id) != 0) e.id = 0;
        if (og.leader_fd < 0) og.leader_fd = e.fd;
        ++opened_;
      }
      og.events.push_back(std::move(e));
    }
    groups_.push_back(std::move(og));
  }
  if (opened_ == 0) {
    unavailable_reason_ = first_failure.empty() ? "no events were asked for" : first_failure;
    if (failed > 1) unavailable_reason_ += " (and the " + std::to_string(failed - 1) + " other events failed too)";
  }
}

PerfCounters::~PerfCounters() {
  for (auto& g : groups_)
    for (auto& e : g.events)
      if (e.fd >= 0) close(e.fd);
}

void PerfCounters::start() {
  for (auto& g : groups_) {
    if (g.leader_fd < 0) continue;
    ioctl(g.leader_fd, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP);
    // RESET zeroes the counts but not the enabled / running times: remember
    // them, so the scaling covers this window only.
    std::vector<uint64_t> buf(3 + 2 * g.events.size(), 0);
    if (::read(g.leader_fd, buf.data(), buf.size() * sizeof(uint64_t)) >= static_cast<ssize_t>(3 * sizeof(uint64_t))) {
      g.base_enabled_ns = buf[1];
      g.base_running_ns = buf[2];
    }
    ioctl(g.leader_fd, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
  }
}

void PerfCounters::stop() {
  for (auto& g : groups_)
    if (g.leader_fd >= 0) ioctl(g.leader_fd, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP);
}

std::vector<PerfCount> PerfCounters::read() const {
  std::vector<PerfCount> out;
  for (const auto& g : groups_) {
    // Group read: nr, time_enabled, time_running, then {value, id} per member.
    std::vector<uint64_t> buf(3 + 2 * g.events.size(), 0);
    bool read_ok = false;
    std::string read_error;
    if (g.leader_fd >= 0) {
      ssize_t n = ::read(g.leader_fd, buf.data(), buf.size() * sizeof(uint64_t));
      read_ok = n >= static_cast<ssize_t>(3 * sizeof(uint64_t));
      if (!read_ok) read_error = std::string("reading the group failed: ") + (n < 0 ? std::strerror(errno) : "short read");
    }
    const uint64_t nr = read_ok ? buf[0] : 0;
    for (const auto& e : g.events) {
      if (e.fd < 0) {
        PerfCount c;
        c.name = e.spec.name;
        c.why = e.why;
        out.push_back(c);
        continue;
      }
      if (!read_ok) {
        PerfCount c;
        c.name = e.spec.name;
        c.why = read_error;
        out.push_back(c);
        continue;
      }
      bool found = false;
      for (uint64_t i = 0; i < nr && 3 + 2 * i + 1 < buf.size(); ++i) {
        if (buf[3 + 2 * i + 1] == e.id) {
          out.push_back(perf_count_from(e.spec.name, buf[3 + 2 * i], buf[1] - g.base_enabled_ns,
                                        buf[2] - g.base_running_ns));
          found = true;
          break;
        }
      }
      if (!found) {
        PerfCount c;
        c.name = e.spec.name;
        c.why = "not in its group's read-out";
        out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace dpukit
