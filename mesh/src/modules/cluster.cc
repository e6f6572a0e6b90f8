#include "modules/cluster.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

namespace dpukit::mesh {

uint64_t lb_hash(std::string_view key) { return XXH64(key.data(), key.size(), 0); }

namespace {

std::string host_label(const config::Address& a) {
  return a.is_pipe() ? a.pipe_path : a.ip + ":" + std::to_string(a.port);
}

// Ketama-style ring: each host gets points in proportion to its weight, at
// least minimum_ring_size points in all (capped at maximum_ring_size).
void build_ring(HostSet& set, const config::Cluster& cfg) {
  uint64_t total_weight = 0;
  for (uint32_t w : set.weights) total_weight += w;
  if (total_weight == 0) return;
  uint64_t ring_size = std::min<uint64_t>(std::max<uint64_t>(cfg.ring_hash_minimum_ring_size, set.hosts.size()),
                                          cfg.ring_hash_maximum_ring_size);
  for (uint32_t i = 0; i < set.hosts.size(); ++i) {
    const auto& h = *set.hosts[i];
    uint64_t points = std::max<uint64_t>(1, (ring_size * set.weights[i] + total_weight - 1) / total_weight);
    for (uint64_t p = 0; p < points; ++p) set.ring.emplace_back(lb_hash(h.label + "_" + std::to_string(p)), i);
  }
  std::sort(set.ring.begin(), set.ring.end());
}

// splitmix64: a well-mixed next value for the extra draws of one random value.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

ClusterRuntime::ClusterRuntime(const config::Cluster& cfg, std::vector<ClusterStats*> stats)
    : cfg_(cfg), stats_(std::move(stats)) {
  set_hosts(cfg.endpoints);
}

void ClusterRuntime::set_hosts(std::vector<config::Endpoint> endpoints) {
  endpoints_ = std::move(endpoints);
  auto old = hosts();
  publish(endpoints_, old.get());
}

void ClusterRuntime::adopt_hosts(const HostSet& previous) { publish(endpoints_, &previous); }

void ClusterRuntime::publish(const std::vector<config::Endpoint>& endpoints, const HostSet* old) {
  auto set = std::make_shared<HostSet>();
  for (const auto& ep : endpoints) {
    std::string label = host_label(ep.address);
    std::shared_ptr<Host> h;
    if (old)
      for (const auto& o : old->hosts)
        if (o->label == label) h = o;
    if (!h) {
      h = std::make_shared<Host>();
      h->address = ep.address;
      h->label = label;
    }
    set->weights.push_back(std::max<uint32_t>(1, ep.load_balancing_weight));
    set->hosts.push_back(std::move(h));
  }
  if (cfg_.lb_policy == config::Cluster::LbPolicy::kRingHash) build_ring(*set, cfg_);
  std::atomic_store(&hosts_, std::shared_ptr<const HostSet>(std::move(set)));
}

std::shared_ptr<Host> ClusterRuntime::choose(const LbContext& ctx, int64_t now_ns) {
  auto set = hosts();
  if (!set || set->hosts.empty()) return nullptr;
  // Envoy's healthy_panic_threshold (50 %): below it, balance over all hosts.
  thread_local std::vector<uint32_t> candidates;
  candidates.clear();
  for (uint32_t i = 0; i < set->hosts.size(); ++i)
    if (set->hosts[i]->available(now_ns)) candidates.push_back(i);
  bool panic = candidates.size() * 2 < set->hosts.size();
  return choose_from(*set, candidates, panic, ctx);
}

std::shared_ptr<Host> ClusterRuntime::choose_from(const HostSet& set, const std::vector<uint32_t>& candidates,
                                                  bool all, const LbContext& ctx) {
  size_t n = all ? set.hosts.size() : candidates.size();
  auto at = [&](size_t k) -> const std::shared_ptr<Host>& { return set.hosts[all ? k : candidates[k]]; };
  using P = config::Cluster::LbPolicy;
  switch (cfg_.lb_policy) {
    case P::kRoundRobin: {
      // Weighted round robin: walk a virtual list where each host appears `weight` times.
      uint64_t total = 0;
      auto weight = [&](size_t k) { return set.weights[all ? k : candidates[k]]; };
      for (size_t k = 0; k < n; ++k) total += weight(k);
      uint64_t slot = rr_.fetch_add(1, std::memory_order_relaxed) % total;
      for (size_t k = 0; k < n; ++k) {
        if (slot < weight(k)) return at(k);
        slot -= weight(k);
      }
      return at(n - 1);
    }
    case P::kRandom: return at(ctx.random % n);
    case P::kLeastRequest: {
      auto weight = [&](size_t k) { return set.weights[all ? k : candidates[k]]; };
      bool weighted = false;
      for (size_t k = 1; k < n && !weighted; ++k) weighted = weight(k) != weight(0);
      if (weighted) {
        // Unequal weights: Envoy schedules each host by weight / (active
        // requests + 1) (active_request_bias 1.0, its default). The same
        // shares, drawn at random instead of from an EDF schedule.
        double total = 0;
        auto effective = [&](size_t k) {
          return weight(k) / (1.0 + at(k)->active_requests.load(std::memory_order_relaxed));
        };
        for (size_t k = 0; k < n; ++k) total += effective(k);
        double point = static_cast<double>(ctx.random >> 11) * 0x1.0p-53 * total;
        for (size_t k = 0; k < n; ++k) {
          point -= effective(k);
          if (point < 0) return at(k);
        }
        return at(n - 1);
      }
      // Equal weights: power of `choice_count` choices (independent draws,
      // with replacement, as Envoy's): the fewest active requests, the first on a tie.
      uint64_t r = ctx.random;
      const std::shared_ptr<Host>* best = nullptr;
      for (uint32_t c = 0; c < std::max<uint32_t>(1, cfg_.least_request_choice_count); ++c) {
        const auto& h = at(r % n);
        r = mix(r);
        if (!best || h->active_requests.load(std::memory_order_relaxed) <
                         (*best)->active_requests.load(std::memory_order_relaxed))
          best = &h;
      }
      return *best;
    }
    case P::kRingHash: {
      if (set.ring.empty()) return nullptr;
      uint64_t key = ctx.has_hash ? ctx.hash : ctx.random;
      auto it = std::lower_bound(set.ring.begin(), set.ring.end(), std::make_pair(key, uint32_t{0}));
      // Walk the ring to the first available host (all hosts in panic).
      for (size_t step = 0; step < set.ring.size(); ++step, ++it) {
        if (it == set.ring.end()) it = set.ring.begin();
        uint32_t idx = it->second;
        if (all || std::find(candidates.begin(), candidates.end(), idx) != candidates.end()) return set.hosts[idx];
      }
      return nullptr;
    }
  }
  return nullptr;
}

void ClusterRuntime::report_status(Host& host, unsigned status, int64_t now_ns) {
  if (!cfg_.outlier_detection) return;
  if (status < 500) {
    host.consecutive_5xx.store(0, std::memory_order_relaxed);
    return;
  }
  const auto& od = *cfg_.outlier_detection;
  uint32_t n = host.consecutive_5xx.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n < od.consecutive_5xx) return;
  std::lock_guard lock(eject_mu_);
  if (host.ejected_until_ns.load(std::memory_order_relaxed) > now_ns) return;  // already out
  host.consecutive_5xx.store(0, std::memory_order_relaxed);
  // Envoy's ejectHost: max_ejection_percent first, strictly (the "at least one
  // host" exception needs always_eject_one_host, which we do not take).
  auto set = hosts();
  size_t ejected = 0;
  for (const auto& h : set->hosts) ejected += h->ejected_until_ns.load(std::memory_order_relaxed) > now_ns;
  if ((ejected + 1) * 100 > set->hosts.size() * static_cast<uint64_t>(od.max_ejection_percent)) return;
  // enforcing_consecutive_5xx: the chance, in percent, that a detection ejects (Envoy draws at random too).
  if (od.enforcing_consecutive_5xx < 100 &&
      mix(enforce_draws_.fetch_add(1, std::memory_order_relaxed)) % 100 >= od.enforcing_consecutive_5xx)
    return;
  const int64_t base_ns = static_cast<int64_t>(od.base_ejection_time.count()) * 1000000;
  const int64_t max_ns = std::max<int64_t>(300'000'000'000, base_ns);  // Envoy's default max_ejection_time
  const int64_t interval_ns = std::max<int64_t>(1, static_cast<int64_t>(od.interval.count()) * 1000000);
  // Envoy lowers the backoff by one at each interval the host spends back in service.
  uint32_t backoff = host.eject_backoff.load(std::memory_order_relaxed);
  if (int64_t back = host.ejected_until_ns.load(std::memory_order_relaxed); back > 0 && backoff > 0) {
    int64_t healthy_intervals = (now_ns - back) / interval_ns;
    backoff = healthy_intervals >= backoff ? 0 : backoff - static_cast<uint32_t>(healthy_intervals);
  }
  if (static_cast<int64_t>(backoff) * base_ns < max_ns + base_ns) ++backoff;
  host.eject_backoff.store(backoff, std::memory_order_relaxed);
  host.ejections.fetch_add(1, std::memory_order_relaxed);
  host.ejected_until_ns.store(now_ns + std::min<int64_t>(base_ns * backoff, max_ns), std::memory_order_relaxed);
}

}  // namespace dpukit::mesh
