#include "dpukit/core/dpu_speed.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <algorithm>
#include <fstream>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "dpukit/core/accounting.h"

namespace dpukit {

namespace {

// The factors and their sources: docs/core.md says how each was derived.
constexpr DpuSpeedPreset kPresets[] = {
    {"host", 1.0, "the dpu place runs at a host core's speed (no model)"},
    {"bluefield2", 0.45,
     "PulseDB Fig. 2's BlueField-3 factor (0.455, Cortex-A78 at 2.0 GHz) scaled by single-thread 7-zip MIPS per "
     "MHz (sbc-bench: Cortex-A72 1.04, Cortex-A78AE 1.45) to BlueField-2's Cortex-A72 at 2.75 GHz (DPUBench); "
     "docs/core.md gives the derivation"},
    {"bluefield3", 0.455,
     "PulseDB Fig. 2: BlueField-3's Arm cores reach 45.5 % of the host's compaction throughput"},
};

}  // namespace

const char* const kDpuSpeedHelp =
    "how fast a dpu CPU is against a host core: host (1.0), bluefield2, bluefield3, or a number F in (0, 1]; "
    "loops on the dpu place are time-dilated by 1/F (docs/core.md)";

std::span<const DpuSpeedPreset> dpu_speed_presets() { return kPresets; }

DpuSpeed DpuSpeed::parse(const std::string& text) {
  for (const auto& p : kPresets)
    if (text == p.name) return DpuSpeed{p.name, p.factor};
  std::string names;
  for (const auto& p : kPresets) names += std::string(names.empty() ? "" : ", ") + p.name;
  char* end = nullptr;
  errno = 0;
  // strtod skips leading blanks: " 0.5" would be recorded with its blank.
  const bool blank = !text.empty() && std::isspace(static_cast<unsigned char>(text.front()));
  double f = text.empty() || blank ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || blank || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(f))
    throw std::invalid_argument("dpu speed '" + text + "': not a preset (" + names + ") nor a number");
  if (!(f > 0.0 && f <= 1.0))
    throw std::invalid_argument("dpu speed '" + text + "': a factor must be in (0, 1] (a dpu CPU does F of a "
                                "host core's work per second)");
  return DpuSpeed{text, f};
}

nlohmann::json DpuSpeed::to_json() const { return {{"name", name}, {"factor", factor}}; }

namespace {

#if defined(__x86_64__) || defined(__i386__)
// The time stamp counter, when it ticks at a constant rate (constant_tsc and
// nonstop_tsc): a poll() check is then one instruction, not a vDSO call.
double tsc_ticks_per_ns() {
  static const double ticks = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    bool constant = false, nonstop = false;
    while (std::getline(cpuinfo, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      constant = line.find(" constant_tsc") != std::string::npos;
      nonstop = line.find(" nonstop_tsc") != std::string::npos;
      break;
    }
    if (!constant || !nonstop) return 0.0;
    const uint64_t w0 = now_ns(), t0 = __rdtsc();
    while (now_ns() - w0 < 500'000) {
    }
    const uint64_t w1 = now_ns(), t1 = __rdtsc();
    return t1 > t0 && w1 > w0 ? double(t1 - t0) / double(w1 - w0) : 0.0;
  }();
  return ticks;
}
#endif

// poll()'s clock, in ns: the time stamp counter where it is constant.
uint64_t wall_clock_ns() {
#if defined(__x86_64__) || defined(__i386__)
  if (const double t = tsc_ticks_per_ns(); t > 0) return static_cast<uint64_t>(double(__rdtsc()) / t);
#endif
  return now_ns();
}

uint64_t median_of(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Dilation::Dilation(double factor) : factor_(factor) {
  if (!(factor > 0.0 && factor <= 1.0)) throw std::invalid_argument("dilation factor must be in (0, 1]");
  extra_ = factor >= 1.0 ? 0.0 : 1.0 / factor - 1.0;
  if (active()) overhead();  // measured before any unit, not inside one
  start();
}

uint64_t Dilation::wall_now() const { return wall_clock_ns(); }

const Dilation::Overhead& Dilation::overhead() {
  // Medians of short blocks, so that a preemption in one block does not
  // count. A payment's reads billed to the unit after it are one thread CPU
  // clock read (half of the one that ended the last payment, half of the one
  // that starts this) and the wall clock read that ends the payment.
  // Measured on a thread of its own (with the time stamp counter's rate,
  // the first thing wall_now() needs), so that none of it is billed to the
  // thread whose Dilation asked first: a dpu worker's accounted CPU.
  static const Overhead measured = [] {
    Overhead o;
    std::thread([&o] {
      constexpr int kBlocks = 15, kPerBlock = 16;
      std::vector<uint64_t> pay, poll;
      uint64_t sink = 0;
      for (int b = 0; b < kBlocks; ++b) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < kPerBlock; ++i) sink += thread_cpu_ns() + wall_clock_ns();
        pay.push_back((now_ns() - t0) / kPerBlock);
        t0 = now_ns();
        for (int i = 0; i < 64 * kPerBlock; ++i) sink += wall_clock_ns();
        poll.push_back((now_ns() - t0) / (64 * kPerBlock));
      }
      asm volatile("" : : "r"(sink));
      o = Overhead{median_of(pay), median_of(poll)};
    }).join();
    return o;
  }();
  return measured;
}

void Dilation::start() {
  if (!active()) return;
  excluded_ns_ = 0;
  polls_ = checks_ = 0;
  check_every_ = until_check_ = 1;
  credit_ns_ = 0;
  last_cpu_ = thread_cpu_ns();
  last_wall_ = wall_now();
}

void Dilation::pay() {
  if (!active()) return;
  const uint64_t now = thread_cpu_ns();
  const uint64_t spent = now - last_cpu_;
  // The model's own cost within `spent` (this payment's clock reads and the
  // poll() checks since the last) is not the unit's work, and the thread is
  // busy in it anyway: it pays part of the debt.
  const Overhead& o = overhead();
  const uint64_t others = std::min(spent, excluded_ns_);
  const uint64_t own = std::min(spent - others, o.pay_ns + checks_ * o.poll_ns);
  const uint64_t work = spent - others - own;
  excluded_ns_ = 0;
  polls_ = checks_ = 0;
  const int64_t need = static_cast<int64_t>(static_cast<double>(work) * extra_) - static_cast<int64_t>(own) - credit_ns_;
  uint64_t cpu = now;
  if (need > 0) {
    const uint64_t target = now + static_cast<uint64_t>(need);
    // Spin on the wall clock (cheap, vDSO) for what is left, then check the
    // thread's CPU clock (a system call): if the thread was preempted
    // meanwhile the debt is not paid yet, so spin again. The debt is CPU
    // time, not wall time, as on a slower core.
    while (cpu < target) {
      const uint64_t until = now_ns() + (target - cpu);
      while (now_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      cpu = thread_cpu_ns();
    }
  }
  // What this payment went past its debt (the last clock read's length) is
  // credit for the next one; a debt the model's cost already covered leaves
  // its surplus as credit too. Bounded, so that many tiny units do not leave
  // a large unit later unpaid.
  constexpr int64_t kMostCredit = 50'000;
  credit_ns_ = std::min<int64_t>(kMostCredit, need > 0 ? static_cast<int64_t>(cpu - now) - need : -need);
  work_ns_ += work;
  dilated_ns_ += (cpu - now) + own;
  last_cpu_ = cpu;
  last_wall_ = wall_now();
}

void Dilation::poll(uint64_t quantum_ns) {
  if (!active()) return;
  ++polls_;
  if (--until_check_ > 0) return;
  ++checks_;
  until_check_ = check_every_;
  if (wall_now() - last_wall_ < quantum_ns) return;
  // About eight reads in the next quantum, if its calls come as this one's
  // did: a payment then comes at most an eighth of a quantum late.
  constexpr uint64_t kChecksPerQuantum = 8;
  check_every_ = until_check_ = std::max<uint64_t>(1, polls_ / kChecksPerQuantum);
  pay();
}

}  // namespace dpukit
