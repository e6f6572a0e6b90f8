// Statistics: each data-plane worker writes its own counters (one writer, no
// locked instructions on the fast path); the control plane sums them when
// /stats/prometheus is scraped. The paper's point (§III-C): Envoy's serial
// statistics work blocks data processing; here the data plane only bumps a
// counter it alone writes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dpukit {
class MetricsWriter;  // dpukit/core/prometheus.h
}

namespace dpukit::mesh {

// A counter written by one thread and read by others.
struct Counter {
  std::atomic<uint64_t> v{0};
  void inc(uint64_t n = 1) { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};
// A gauge moved by one thread (per worker); summed over workers.
struct Gauge {
  std::atomic<int64_t> v{0};
  void add(int64_t n) { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  int64_t get() const { return v.load(std::memory_order_relaxed); }
};

// Envoy's <scope>.ssl.* counters of a TLS context (listener.<address>.ssl.*,
// cluster.<name>.ssl.*), per worker.
struct TlsStats {
  Counter handshake, connection_error, session_reused, no_certificate, fail_verify_no_cert, fail_verify_error,
      fail_verify_san;
  // <scope>.{server,client}_ssl_socket_factory.ssl_context_update_by_sds: written by the control plane's thread only.
  Counter ssl_context_update_by_sds;
  // {downstream,upstream}_context_secrets_not_ready: a connection closed
  // because a pushed secret has not arrived yet (per worker).
  Counter context_secrets_not_ready;
};
// Envoy's ssl.versions.<v>, ssl.ciphers.<c>, ssl.curves.<c>, ssl.sigalgs.<s>:
// names known only once a handshake says them, so one map per scope shared by
// the workers (a handshake costs far more than its lock).
struct TlsNamedCounters {
  void inc(const char* family, const std::string& name);
  mutable std::mutex mu;
  std::map<std::pair<std::string, std::string>, uint64_t> counts;  // {family, name} -> count
};
// Envoy's <stat_prefix>rbac.* statistics of a network RBAC filter.
struct RbacStats {
  Counter allowed, denied, shadow_allowed, shadow_denied;
};

// Envoy's listener.<address>.* statistics.
struct ListenerStats {
  Counter no_filter_chain_match;
};

// Envoy's cluster.<name>.* statistics (the subset we keep).
struct ClusterStats {
  Counter upstream_rq_total, upstream_cx_total, upstream_cx_connect_fail, upstream_cx_connect_timeout,
      upstream_rq_retry, upstream_rq_retry_overflow, upstream_rq_timeout, upstream_rq_per_try_timeout,
      upstream_rq_pending_overflow, upstream_cx_overflow, upstream_rq_rx_reset, upstream_cx_destroy,
      upstream_cx_protocol_error, upstream_rq_completed;
  Counter http2_keepalive_timeout;        // cluster.<name>.http2.keepalive_timeout: a PING unanswered in time
  std::array<Counter, 5> upstream_rq_xx;  // 1xx..5xx
  Gauge upstream_cx_active, upstream_rq_active;
};

// Envoy's http.<stat_prefix>.* statistics of a connection manager, and its local rate limit's.
struct HttpStats {
  Counter downstream_cx_total, downstream_rq_total, downstream_cx_protocol_error, downstream_rq_rx_reset,
      downstream_rq_timeout, downstream_cx_idle_timeout, rq_direct_response, no_route, no_cluster,
      rl_enabled, rl_enforced, rl_rate_limited, rl_ok, downstream_cx_destroy_remote_active_rq,
      downstream_cx_drain_close, rbac_allowed, rbac_denied, rbac_shadow_allowed, rbac_shadow_denied;
  std::array<Counter, 5> downstream_rq_xx;
  Gauge downstream_cx_active, downstream_rq_active;
};

// Envoy's tcp.<stat_prefix>.* statistics.
struct TcpStats {
  Counter downstream_cx_total, downstream_cx_rx_bytes_total, downstream_cx_tx_bytes_total, upstream_flush_total,
      downstream_cx_no_route, idle_timeout;
  Gauge downstream_cx_active;
};

// Time spent in each processing module, per worker (Table III of the paper,
// measured by the modules themselves).
enum class Module { kParser = 0, kFilter, kRouter, kDeparser, kCount };
const char* module_name(Module m);
struct ModuleStats {
  std::array<Counter, static_cast<int>(Module::kCount)> ns, calls;
  void add(Module m, uint64_t n) {
    ns[static_cast<int>(m)].inc(n);
    calls[static_cast<int>(m)].inc();
  }
};

// Host health as the control plane sees it.
struct HostStatsView {
  std::string cluster, address;
  bool healthy, ejected;
  uint64_t ejections;
};

// Named statistics blocks, one per worker, kept across configuration reloads
// (a reload keeps counting where the last configuration left off, as Envoy does).
class StatsStore {
 public:
  explicit StatsStore(unsigned workers) : workers_(workers), modules_(workers) {}
  unsigned workers() const { return workers_; }
  // The block of `name` for each worker (created on first use; slow path only).
  std::vector<ClusterStats*> cluster(const std::string& name);
  std::vector<HttpStats*> http(const std::string& stat_prefix);
  // The connection manager has an RBAC filter: its http.<prefix>.rbac.* statistics are shown (from then on).
  void http_has_rbac(const std::string& stat_prefix);
  std::vector<TcpStats*> tcp(const std::string& stat_prefix);
  // A network RBAC filter's, by its stat_prefix (written as given: "tcp." gives tcp.rbac.*).
  std::vector<RbacStats*> network_rbac(const std::string& stat_prefix);
  // listener.<address>.*: `address` as Envoy writes it ("127.0.0.1_10000").
  std::vector<ListenerStats*> listener(const std::string& address);
  // <scope>.ssl.*, scope "listener" (name: the address as above) or "cluster".
  std::vector<TlsStats*> tls(const std::string& scope, const std::string& name);
  TlsNamedCounters& tls_named(const std::string& scope, const std::string& name);
  ModuleStats& modules(unsigned worker) { return modules_[worker]; }

  // Prometheus text exposition with Envoy's metric names (envoy_cluster_*,
  // envoy_http_*, envoy_tcp_*) plus dpukit_mesh_module_* and the host health gauges.
  std::string prometheus(const std::vector<HostStatsView>& hosts) const;
  // Envoy's plain /stats: "cluster.backend.upstream_rq_total: 5" lines, sorted by name.
  std::string text(const std::vector<HostStatsView>& hosts) const;
  // Per-module totals over workers: {ns, calls}.
  std::pair<uint64_t, uint64_t> module_total(Module m) const;

 private:
  // Both forms from one walk: Prometheus into `e`, the plain lines into `text` when given.
  void render(MetricsWriter& e, std::map<std::string, int64_t>* text, const std::vector<HostStatsView>& hosts) const;
  // Its parts, with mu_ held.
  void render_clusters(MetricsWriter& e, std::map<std::string, int64_t>* text,
                       const std::vector<HostStatsView>& hosts) const;
  void render_http(MetricsWriter& e, std::map<std::string, int64_t>* text) const;
  void render_tcp_and_listeners(MetricsWriter& e, std::map<std::string, int64_t>* text) const;
  void render_tls(MetricsWriter& e, std::map<std::string, int64_t>* text) const;
  void render_dpukit(MetricsWriter& e, std::map<std::string, int64_t>* text) const;
  template <typename T>
  std::vector<T*> blocks(std::map<std::string, std::deque<T>>& m, const std::string& name);

  unsigned workers_;
  mutable std::mutex mu_;
  std::map<std::string, std::deque<ClusterStats>> clusters_;
  std::map<std::string, std::deque<HttpStats>> http_;
  std::set<std::string> http_rbac_;  // prefixes whose connection manager has had an RBAC filter
  std::map<std::string, std::deque<TcpStats>> tcp_;
  std::map<std::string, std::deque<RbacStats>> network_rbac_;
  std::map<std::string, std::deque<ListenerStats>> listeners_;
  std::map<std::pair<std::string, std::string>, std::deque<TlsStats>> tls_;
  std::map<std::pair<std::string, std::string>, TlsNamedCounters> tls_named_;
  std::deque<ModuleStats> modules_;
};

}  // namespace dpukit::mesh
