// How fast a dpu CPU is against a host core, and the two ways the emulation
// makes a host core as slow as that (docs/core.md).
//
// Every seed paper rests on the dpu's Arm cores being weaker than the host's
// (PulseDB Fig. 2: BlueField-3's Arm cores reach 45.5 % of the host's
// compaction throughput). Here the dpu place is a host core, so without this
// model every offload looks better than it would on a DPU.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace dpukit {

// A named speed and where its number comes from.
struct DpuSpeedPreset {
  const char* name;
  double factor;
  const char* source;  // the measurement it is taken from, cited
};
std::span<const DpuSpeedPreset> dpu_speed_presets();  // host, bluefield2, bluefield3

// F: a dpu CPU does F of a host core's work per second (0 < F <= 1).
struct DpuSpeed {
  std::string name = "host";  // a preset's name, or the number as given
  double factor = 1.0;

  bool full() const { return factor >= 1.0; }
  // A preset's name or a number in (0, 1]; throws std::invalid_argument that
  // names the presets.
  static DpuSpeed parse(const std::string& text);
  // {"name": ..., "factor": ...}: what every result JSON records.
  nlohmann::json to_json() const;
};

// The help text of every tool's --dpu-speed option, one wording everywhere.
extern const char* const kDpuSpeedHelp;

// Time dilation, for loops we own (measure's workers, the kv agent, DComp's
// worker, the mesh proxy's loops, bench's dpu place). After a unit of work
// the thread stays busy for (1/F - 1) x the CPU time the unit took, so
// throughput and service time scale as on a core F as fast, without the
// gaps a throttled thread has, and the thread's CPU time (what PlaceTimer and
// /proc account) includes the dilated time: what the slower core would have
// spent. What it distorts: memory- and I/O-bound work is slowed as much as
// compute (a real Arm core's memory system is not F times slower), and time
// in the kernel on the thread's behalf is dilated with the rest.
//
// The model's own cost is not billed (docs/core.md, "The model's own
// cost"): reading the thread's CPU clock is a system call (about 1.6 us on
// this VM), and each payment reads it twice, so a unit of 20 us was billed
// 8-10 % too much and the payment overshot by a clock read. So the clock
// reads and poll() checks a unit carries are taken off its work (their cost
// is measured once per process) and count as paying its debt, since the
// thread is busy in them anyway; and what one payment overshoots is credit
// for the next. Over many units the dilated time is (1/F - 1) x the work.
//
// One object per thread; not thread-safe. With F = 1 every call returns at
// once without reading a clock.
class Dilation {
 public:
  explicit Dilation(double factor = 1.0);
  explicit Dilation(const DpuSpeed& speed) : Dilation(speed.factor) {}

  bool active() const { return extra_ > 0; }
  double factor() const { return factor_; }

  // Starts counting this thread's CPU time from now (call on the thread that
  // will do the work, e.g. at the top of its loop). Forgets excluded time
  // and credit from before.
  void start();
  // The unit of work that began at the last start() or pay() is done: stay
  // busy for (1/F - 1) x its CPU time now. For request loops, call it before
  // the reply is sent, so service time is dilated.
  void pay();
  // For busy-polling loops whose units are too small to read a CPU clock
  // each (a burst of packets): pays when at least `quantum_ns` of wall time
  // has passed since the last payment. Between payments it reads a cheap
  // clock (the time stamp counter where there is one) about eight times a
  // quantum, only counting the calls in between: each read is work the
  // loop does not do at F = 1 (9.6 ns a call on this VM in a tight loop,
  // about 3 % of a 32-packet Count-Min burst), and what it stalls in the
  // loop around it is not in the measured overhead. The loop must not
  // block between calls.
  void poll(uint64_t quantum_ns = 20'000);
  // For loops that pay at points of their own (before a write) but at most
  // once a quantum: has `quantum_ns` of wall time passed since the last
  // payment (or start())? One read of poll()'s cheap clock, which the next
  // payment counts as the model's own cost, as it does poll()'s checks.
  bool due(uint64_t quantum_ns) {
    if (!active()) return false;
    ++checks_;
    return wall_now() - last_wall_ >= quantum_ns;
  }
  // This much of the thread's CPU time since the last payment was not the
  // dpu's (the emulated wire or hardware running in the same loop): it is
  // not dilated.
  void exclude(uint64_t cpu_ns) { excluded_ns_ += cpu_ns; }

  uint64_t dilated_ns() const { return dilated_ns_; }  // busy time added so far (the model's own cost included)
  uint64_t work_ns() const { return work_ns_; }        // CPU time of the units themselves

  // What the model costs the thread, measured once per process: one
  // payment's clock reads billed to the unit after it, and one poll() check.
  struct Overhead {
    uint64_t pay_ns = 0, poll_ns = 0;
  };
  static const Overhead& overhead();

 private:
  uint64_t wall_now() const;  // poll()'s clock, in ns

  double factor_ = 1.0;
  double extra_ = 0.0;  // 1/F - 1
  uint64_t last_cpu_ = 0, last_wall_ = 0, excluded_ns_ = 0;
  uint64_t polls_ = 0, checks_ = 0;               // since the last payment: poll() calls, and clock reads among them
  uint64_t check_every_ = 1, until_check_ = 1;  // poll() reads its clock every check_every_ calls
  int64_t credit_ns_ = 0;  // paid beyond the debt so far: taken off the next debt
  uint64_t dilated_ns_ = 0, work_ns_ = 0;
};

// CFS bandwidth, for work we cannot instrument (a process we do not own, a
// kernel thread's share): a cgroup of the cpu controller whose quota is F of
// each of `cpus` CPUs per period (v1 cpu.cfs_quota_us / cpu.cfs_period_us,
// v2 cpu.max where only that is mounted). What it distorts: a throttled
// thread stops until its debt is repaid, so latency gains stalls (one to
// three scheduler ticks here, 8-12 ms at F = 0.5, docs/core.md); throughput
// over many periods is F.
//
// The group is made below this process's own cgroup, named after `name`, the
// pid and a serial. The kernel refuses a period or a quota under 1 ms, and it
// charges a thread that runs alone on its CPU against the quota only at its
// scheduler tick (4 ms at 250 Hz): with a period under two ticks the thread
// overruns, is throttled for its debt and gets less than F (0.33-0.43 at
// F = 0.5 with the 2 ms period, docs/core.md), with no shorter stalls. So the
// default period is the shortest that holds F: two ticks, raised where the
// quota would be under 1 ms. A period asked for explicitly is taken (raised
// only for the 1 ms quota).
//
// The group has the largest weight (cpu.shares, cpu.weight): it stands for
// dpu cores of its own, so within its quota it does not yield to other work
// on the same CPU. On cgroup2 add_thread() makes the group threaded (the
// thread's process must be in this process's cgroup), and then it takes no
// whole process.
class CfsBandwidth {
 public:
  static constexpr uint64_t kShortestPeriodUs = 1000;  // the kernel's minimum period
  static constexpr uint64_t kShortestQuotaUs = 1000;   // the kernel's minimum quota
  // Two scheduler ticks (CLOCK_MONOTONIC_COARSE's resolution is the tick).
  static uint64_t default_period_us();

  // Creates the group; throws std::runtime_error saying why it cannot (no cpu
  // controller mounted, not permitted), std::invalid_argument for a factor
  // outside (0, 1] or too small for a 1 ms quota in a 1 s period.
  // period_us 0: default_period_us().
  CfsBandwidth(const std::string& name, double factor, unsigned cpus = 1, uint64_t period_us = 0);
  // Moves its tasks back to the group this process is in (the root group
  // here) and removes the group.
  ~CfsBandwidth();
  CfsBandwidth(const CfsBandwidth&) = delete;
  CfsBandwidth& operator=(const CfsBandwidth&) = delete;

  void add_thread(pid_t tid);   // one thread (a TID)
  void add_process(pid_t pid);  // every thread of a process, and what it forks later

  uint64_t period_us() const { return period_us_; }
  uint64_t quota_us() const { return quota_us_; }  // 0: no limit (F = 1)
  const std::string& path() const { return dir_; }
  struct Stat {
    uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0;
  };
  Stat stat() const;  // the group's cpu.stat

  // "" when a group can be made here, else why not.
  static std::string unavailable_reason();

 private:
  std::string dir_, parent_;
  bool v2_ = false, threaded_ = false;
  uint64_t period_us_ = 0, quota_us_ = 0;
};

}  // namespace dpukit
