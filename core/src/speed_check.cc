#include "dpukit/core/speed_check.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

namespace dpukit {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string range(const std::vector<double>& v) {
  std::ostringstream s;
  s.precision(3);
  s << median(v);
  if (!v.empty()) s << " [" << *std::min_element(v.begin(), v.end()) << "-" << *std::max_element(v.begin(), v.end()) << "]";
  return s.str();
}

// The calling thread, and every thread it starts meanwhile, at nice -20
// where permitted (root): other work on this shared machine (a compiler)
// then takes little of the loop's CPUs. Restored at the end.
class Favoured {
 public:
  Favoured() {
    errno = 0;
    before_ = getpriority(PRIO_PROCESS, 0);
    ok_ = errno == 0 && setpriority(PRIO_PROCESS, 0, -20) == 0;
  }
  ~Favoured() {
    if (ok_) setpriority(PRIO_PROCESS, 0, before_);
  }

 private:
  int before_ = 0;
  bool ok_ = false;
};

// Spells of other work on this VM can last seconds.
constexpr std::chrono::milliseconds kBusySpellPause{1000}, kMaxBusySpellPause{8000};
constexpr int kMaxBusyAttempts = 6;

}  // namespace

double SpeedCheck::median_throughput_ratio() const { return median(throughput_ratio); }
double SpeedCheck::median_cpu_ratio() const { return median(cpu_ratio); }

bool SpeedCheck::quiet(double spread) const {
  auto agree = [spread](const std::vector<SpeedSample>& runs) {
    if (runs.empty()) return false;
    auto [lo, hi] = std::minmax_element(runs.begin(), runs.end(), [](const SpeedSample& a, const SpeedSample& b) {
      return a.dpu_ns_per_unit < b.dpu_ns_per_unit;
    });
    return hi->dpu_ns_per_unit <= lo->dpu_ns_per_unit * (1 + spread);
  };
  return agree(full) && agree(slow);
}

bool SpeedCheck::within(double throughput_tolerance, double cpu_tolerance) const {
  const double t = median_throughput_ratio(), c = median_cpu_ratio();
  return std::abs(t / factor - 1) <= throughput_tolerance && std::abs(c * factor - 1) <= cpu_tolerance;
}

std::string SpeedCheck::describe() const {
  std::ostringstream s;
  s << "F = " << factor << ": throughput " << range(throughput_ratio) << " (promise " << factor << "), dpu CPU per unit "
    << range(cpu_ratio) << " (promise " << 1 / factor << ") over " << throughput_ratio.size() << " pairs"
    << (quiet() ? "" : " (the runs at one speed disagree: the machine was busy)");
  for (size_t i = 0; i < full.size(); ++i)
    s << "; pair " << i + 1 << ": " << full[i].units_per_s << " / " << slow[i].units_per_s << " units/s, "
      << full[i].dpu_ns_per_unit << " / " << slow[i].dpu_ns_per_unit << " dpu ns/unit";
  return s.str();
}

SpeedCheck paired_speed_check(const std::function<SpeedSample(double factor)>& run, double factor, int pairs) {
  Favoured favoured;
  SpeedCheck c;
  c.factor = factor;
  for (int i = 0; i < pairs; ++i) {
    SpeedSample a, b;
    if (i % 2 == 0) {
      a = run(1.0);
      b = run(factor);
    } else {
      b = run(factor);
      a = run(1.0);
    }
    c.full.push_back(a);
    c.slow.push_back(b);
    c.throughput_ratio.push_back(b.units_per_s / a.units_per_s);
    c.cpu_ratio.push_back(b.dpu_ns_per_unit / a.dpu_ns_per_unit);
  }
  return c;
}

SpeedCheck paired_speed_check_with_retry(const std::function<SpeedSample(double factor)>& run, double factor,
                                         int pairs, int attempts) {
  SpeedCheck c;
  int failed = 0, busy = 0;
  auto pause = kBusySpellPause;
  for (int a = 1;; ++a) {
    c = paired_speed_check(run, factor, pairs);
    std::fprintf(stderr, "speed check, attempt %d (%d of %d counted): %s\n", a, failed + 1, attempts,
                 c.describe().c_str());
    if (c.within()) break;
    // An attempt on a busy machine says little of the model: it is not
    // counted, up to kMaxBusyAttempts of them, each after a longer pause
    // (a CI run once found every one of five attempts busy, for minutes).
    if (!c.quiet() && busy < kMaxBusyAttempts) {
      ++busy;
      std::this_thread::sleep_for(pause);
      pause = std::min(2 * pause, kMaxBusySpellPause);
      continue;
    }
    if (++failed >= std::max(1, attempts)) break;
  }
  return c;
}

}  // namespace dpukit
