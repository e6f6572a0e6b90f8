#include "ycsb.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dpukit::kv::bench {

double zeta(uint64_t n, double theta) {
  constexpr uint64_t kDirect = 100000;
  double sum = 0;
  uint64_t direct = std::min(n, kDirect);
  for (uint64_t i = 1; i <= direct; ++i) sum += std::pow(double(i), -theta);
  if (n <= kDirect) return sum;
  // Tail sum_{i=m+1..n} f(i), f(x) = x^-theta, by Euler-Maclaurin from m to n:
  // integral + (f(n) - f(m))/2 + (f'(n) - f'(m))/12 - (f'''(n) - f'''(m))/720.
  double m = double(kDirect), N = double(n), a = 1 - theta;
  auto f = [&](double x) { return std::pow(x, -theta); };
  auto f1 = [&](double x) { return -theta * std::pow(x, -theta - 1); };
  auto f3 = [&](double x) { return -theta * (theta + 1) * (theta + 2) * std::pow(x, -theta - 3); };
  double integral = std::abs(a) < 1e-12 ? std::log(N / m) : (std::pow(N, a) - std::pow(m, a)) / a;
  return sum + integral + (f(N) - f(m)) / 2 + (f1(N) - f1(m)) / 12 - (f3(N) - f3(m)) / 720;
}

Zipfian::Zipfian(uint64_t n, double theta) : Zipfian(n, theta, zeta(n, theta)) {}

Zipfian::Zipfian(uint64_t n, double theta, double zeta_n) : n_(n), theta_(theta), zetan_(zeta_n) {
  if (n == 0) throw std::invalid_argument("zipfian over zero items");
  if (!(theta > 0 && theta < 1)) throw std::invalid_argument("zipfian constant must be in (0, 1)");
  alpha_ = 1 / (1 - theta);
  zeta2_ = 1 + std::pow(0.5, theta);
  eta_ = (1 - std::pow(2.0 / double(n), 1 - theta)) / (1 - zeta2_ / zetan_);
}

void Zipfian::set_items(uint64_t n) {
  if (n == n_) return;
  if (n > n_) {
    for (uint64_t i = n_ + 1; i <= n; ++i) zetan_ += std::pow(double(i), -theta_);
  } else {
    zetan_ = zeta(n, theta_);  // shrinking never happens in YCSB; recompute rather than subtract
  }
  n_ = n;
  eta_ = (1 - std::pow(2.0 / double(n), 1 - theta_)) / (1 - zeta2_ / zetan_);
}

uint64_t Zipfian::next(SplitMix64& rng) {
  double u = rng.uniform();
  double uz = u * zetan_;
  if (uz < 1) return 0;
  if (uz < zeta2_) return 1;  // 1 + 0.5^theta
  uint64_t v = uint64_t(double(n_) * std::pow(eta_ * u - eta_ + 1, alpha_));
  return v < n_ ? v : n_ - 1;
}

uint64_t Zipfian::next(SplitMix64& rng, uint64_t n) {
  set_items(n);
  return next(rng);
}

void InsertSequence::acknowledge(uint64_t record) {
  std::lock_guard lk(mu_);
  uint64_t lim = limit_.load(std::memory_order_relaxed);
  if (record != lim) {
    done_above_.insert(record);
    return;
  }
  ++lim;
  while (!done_above_.empty() && *done_above_.begin() == lim) {
    done_above_.erase(done_above_.begin());
    ++lim;
  }
  limit_.store(lim, std::memory_order_release);
}

const char* op_name(OpType t) {
  switch (t) {
    case OpType::kRead: return "read";
    case OpType::kUpdate: return "update";
    case OpType::kInsert: return "insert";
    case OpType::kScan: return "scan";
    case OpType::kRmw: return "read_modify_write";
  }
  return "?";
}

Workload ycsb_workload(const std::string& name) {
  Workload w;
  w.name = name;
  auto set = [&](OpType t, double p) { w.proportion[int(t)] = p; };
  if (name == "load") {
    set(OpType::kInsert, 1);
    w.load = true;
  } else if (name == "a") {
    set(OpType::kRead, 0.5), set(OpType::kUpdate, 0.5);
  } else if (name == "b") {
    set(OpType::kRead, 0.95), set(OpType::kUpdate, 0.05);
  } else if (name == "c") {
    set(OpType::kRead, 1);
  } else if (name == "d") {
    set(OpType::kRead, 0.95), set(OpType::kInsert, 0.05);
    w.dist = KeyDist::kLatest;
  } else if (name == "e") {
    set(OpType::kScan, 0.95), set(OpType::kInsert, 0.05);
  } else if (name == "f") {
    set(OpType::kRead, 0.5), set(OpType::kRmw, 0.5);
  } else {
    throw std::invalid_argument("unknown YCSB workload '" + name + "' (choose load, a, b, c, d, e or f)");
  }
  return w;
}

}  // namespace dpukit::kv::bench
