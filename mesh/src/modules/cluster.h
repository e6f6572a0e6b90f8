// Upstream clusters as the data plane uses them: the hosts with the health
// the control plane writes (active checks, outlier ejection), the circuit
// breakers, and the load balancer (Algorithm 1, line 7: load balancing on a
// stream's first use of an upstream).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/bootstrap.h"
#include "stats.h"

namespace dpukit::mesh {

// One upstream host. Workers read the health flags and move the request
// counters; the control plane writes health and ejection.
struct Host {
  config::Address address;
  std::string label;  // "127.0.0.1:9001" or the socket path
  std::atomic<bool> healthy{true};           // active health checking (true when none is configured)
  std::atomic<int64_t> ejected_until_ns{0};  // outlier detection: ejected until this monotonic time
  std::atomic<uint32_t> ejections{0};       // ejections so far (a counter, never decreases)
  std::atomic<uint32_t> eject_backoff{0};   // Envoy's ejectTimeBackoff: the multiplier of base_ejection_time
  std::atomic<uint32_t> active_requests{0};  // for LEAST_REQUEST
  std::atomic<uint32_t> consecutive_5xx{0};  // outlier detection input
  bool available(int64_t now_ns) const {
    return healthy.load(std::memory_order_relaxed) && ejected_until_ns.load(std::memory_order_relaxed) <= now_ns;
  }
};

// What a load balancer may use to choose: a hash from the route's
// hash_policy (RING_HASH), and the worker's random stream.
struct LbContext {
  bool has_hash = false;
  uint64_t hash = 0;
  uint64_t random = 0;
};

// The hosts of a cluster at one time. STRICT_DNS clusters get a new set when
// resolution changes; a set is immutable once published.
struct HostSet {
  std::vector<std::shared_ptr<Host>> hosts;
  // load_balancing_weight of each host: kept here, not on the Host, because
  // a Host is shared with the sets before it, which workers may still read.
  std::vector<uint32_t> weights;
  std::vector<std::pair<uint64_t, uint32_t>> ring;  // RING_HASH: (point, host index), sorted
};

class TlsContext;

class ClusterRuntime {
 public:
  ClusterRuntime(const config::Cluster& cfg, std::vector<ClusterStats*> stats);

  const config::Cluster& config() const { return cfg_; }
  const std::string& name() const { return cfg_.name; }
  ClusterStats& stats(unsigned worker) const { return *stats_[worker]; }
  // The UpstreamTlsContext's client side (tls/tls_context.h); nullptr: plaintext.
  std::shared_ptr<TlsContext> tls;

  std::shared_ptr<const HostSet> hosts() const { return std::atomic_load(&hosts_); }
  // Publishes a new host set (STRICT_DNS resolution, control plane only).
  // Hosts whose address is unchanged keep their state.
  void set_hosts(std::vector<config::Endpoint> endpoints);
  // After a reload: hosts with the address of a host in `previous` become that host (its health, its ejection).
  void adopt_hosts(const HostSet& previous);

  // Chooses a host, or nullptr when the cluster has none. Envoy's panic
  // threshold: when fewer than half the hosts are available, every host is a
  // candidate.
  std::shared_ptr<Host> choose(const LbContext& ctx, int64_t now_ns);

  // Circuit breakers (cluster-wide, all workers). try_acquire_* returns false
  // when the threshold is reached.
  bool try_acquire_request() { return try_acquire(active_requests_, cfg_.circuit_breakers.max_requests); }
  void release_request() { active_requests_.fetch_sub(1, std::memory_order_relaxed); }
  bool try_acquire_connection() { return try_acquire(active_connections_, cfg_.circuit_breakers.max_connections); }
  void release_connection() { active_connections_.fetch_sub(1, std::memory_order_relaxed); }
  bool try_acquire_pending() { return try_acquire(pending_, cfg_.circuit_breakers.max_pending_requests); }
  void release_pending() { pending_.fetch_sub(1, std::memory_order_relaxed); }
  bool try_acquire_retry() { return try_acquire(active_retries_, cfg_.circuit_breakers.max_retries); }
  void release_retry() { active_retries_.fetch_sub(1, std::memory_order_relaxed); }

  // Outlier detection input from the data plane: a response's status for a
  // host. At `consecutive_5xx` consecutive 5xx the host is ejected, as Envoy
  // does: only if (ejected + 1) / hosts stays within max_ejection_percent
  // (Envoy >= 1.31 without always_eject_one_host: no "at least one"), for
  // min(base_ejection_time x backoff, max(300 s, base_ejection_time)); the
  // backoff grows by one per ejection and shrinks by one per `interval` the
  // host spends back in service. The host returns when the time is up.
  void report_status(Host& host, unsigned status, int64_t now_ns);
  void report_connect_failure(Host& host, int64_t now_ns) { report_status(host, 503, now_ns); }

 private:
  static bool try_acquire(std::atomic<uint32_t>& n, uint32_t max) {
    if (n.fetch_add(1, std::memory_order_relaxed) >= max) {
      n.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  std::shared_ptr<Host> choose_from(const HostSet& set, const std::vector<uint32_t>& candidates, bool all,
                                     const LbContext& ctx);

  config::Cluster cfg_;
  std::vector<ClusterStats*> stats_;
  void publish(const std::vector<config::Endpoint>& endpoints, const HostSet* old);

  std::vector<config::Endpoint> endpoints_;
  std::shared_ptr<const HostSet> hosts_;
  std::atomic<uint64_t> rr_{0};
  std::atomic<uint64_t> enforce_draws_{0};  // a splitmix64 stream for enforcing_consecutive_5xx
  std::atomic<uint32_t> active_requests_{0}, active_connections_{0}, pending_{0}, active_retries_{0};
  std::mutex eject_mu_;  // ejection decisions (rare)
};

// Hashes for RING_HASH (xxHash64), shared by ring building and lookup.
uint64_t lb_hash(std::string_view key);

}  // namespace dpukit::mesh
