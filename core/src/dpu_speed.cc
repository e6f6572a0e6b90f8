#include "dpukit/core/dpu_speed.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

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

Dilation::Dilation(double factor) : factor_(factor) {
  if (!(factor > 0.0 && factor <= 1.0)) throw std::invalid_argument("dilation factor must be in (0, 1]");
  extra_ = factor >= 1.0 ? 0.0 : 1.0 / factor - 1.0;
  start();
}

void Dilation::start() {
  if (!active()) return;
  excluded_ns_ = 0;
  last_cpu_ = thread_cpu_ns();
  last_wall_ = now_ns();
}

void Dilation::pay() {
  if (!active()) return;
  const uint64_t now = thread_cpu_ns();
  const uint64_t spent = now - last_cpu_;
  const uint64_t work = spent > excluded_ns_ ? spent - excluded_ns_ : 0;
  excluded_ns_ = 0;
  const uint64_t target = now + static_cast<uint64_t>(static_cast<double>(work) * extra_);
  // Spin on the wall clock (cheap, vDSO) for what is left, then check the
  // thread's CPU clock (a system call): if the thread was preempted meanwhile
  // the debt is not paid yet, so spin again. The debt is CPU time, not wall
  // time, as on a slower core.
  uint64_t cpu = now;
  while (cpu < target) {
    const uint64_t until = now_ns() + (target - cpu);
    while (now_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    cpu = thread_cpu_ns();
  }
  work_ns_ += work;
  dilated_ns_ += cpu - now;
  last_cpu_ = cpu;
  last_wall_ = now_ns();
}

void Dilation::poll(uint64_t quantum_ns) {
  if (!active()) return;
  if (now_ns() - last_wall_ < quantum_ns) return;
  pay();
}

}  // namespace dpukit
