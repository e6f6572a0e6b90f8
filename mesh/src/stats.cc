#include "stats.h"

#include <cctype>

#include <utility>

#include "dpukit/core/prometheus.h"
#include "tls/engine_crypto.h"

namespace dpukit::mesh {

const char* module_name(Module m) {
  switch (m) {
    case Module::kParser: return "parser";
    case Module::kFilter: return "filter";
    case Module::kRouter: return "router";
    case Module::kDeparser: return "deparser";
    default: return "?";
  }
}

template <typename T>
std::vector<T*> StatsStore::blocks(std::map<std::string, std::deque<T>>& m, const std::string& name) {
  std::lock_guard lock(mu_);
  auto& d = m[name];
  if (d.empty()) d.resize(workers_);
  std::vector<T*> out;
  for (auto& b : d) out.push_back(&b);
  return out;
}

std::vector<ClusterStats*> StatsStore::cluster(const std::string& name) { return blocks(clusters_, name); }
std::vector<HttpStats*> StatsStore::http(const std::string& prefix) { return blocks(http_, prefix); }
void StatsStore::http_has_rbac(const std::string& prefix) {
  std::lock_guard lock(mu_);
  http_rbac_.insert(prefix);
}
std::vector<TcpStats*> StatsStore::tcp(const std::string& prefix) { return blocks(tcp_, prefix); }

std::vector<ListenerStats*> StatsStore::listener(const std::string& address) { return blocks(listeners_, address); }
std::vector<RbacStats*> StatsStore::network_rbac(const std::string& prefix) { return blocks(network_rbac_, prefix); }

std::vector<TlsStats*> StatsStore::tls(const std::string& scope, const std::string& name) {
  std::lock_guard lock(mu_);
  auto& d = tls_[{scope, name}];
  if (d.empty()) d.resize(workers_);
  std::vector<TlsStats*> out;
  for (auto& b : d) out.push_back(&b);
  return out;
}

TlsNamedCounters& StatsStore::tls_named(const std::string& scope, const std::string& name) {
  std::lock_guard lock(mu_);
  return tls_named_[{scope, name}];  // std::map: the address stays
}

void TlsNamedCounters::inc(const char* family, const std::string& name) {
  std::lock_guard lock(mu);
  ++counts[{family, name}];
}

std::pair<uint64_t, uint64_t> StatsStore::module_total(Module m) const {
  uint64_t ns = 0, calls = 0;
  for (const auto& w : modules_) {
    ns += w.ns[static_cast<int>(m)].get();
    calls += w.calls[static_cast<int>(m)].get();
  }
  return {ns, calls};
}

namespace {

// Envoy's plain /stats: "<dotted name>: <value>" lines, sorted.
using TextStats = std::map<std::string, int64_t>;

// One kind of statistics block (a cluster's, a connection manager's, a TCP
// proxy's), summed over the workers' blocks, as Envoy names it: metric
// <prefix><stat>, help "Envoy <help prefix><stat>", and in /stats <dotted><stat>.
template <typename T>
class Summed {
 public:
  Summed(MetricsWriter& out, TextStats* text, const std::deque<T>& blocks, std::string prefix, std::string help,
         MetricLabels labels, std::string dotted)
      : out_(out),
        text_(text),
        blocks_(blocks),
        prefix_(std::move(prefix)),
        help_(std::move(help)),
        labels_(std::move(labels)),
        dotted_(std::move(dotted)) {}

  void counter(const char* stat, Counter T::*member) const {
    uint64_t total = 0;
    for (const T& b : blocks_) total += (b.*member).get();
    out_.counter(prefix_ + stat, "Envoy " + help_ + stat, total, labels_);
    if (text_) (*text_)[dotted_ + stat] = static_cast<int64_t>(total);
  }
  void gauge(const char* stat, Gauge T::*member) const {
    int64_t total = 0;
    for (const T& b : blocks_) total += (b.*member).get();
    out_.gauge(prefix_ + stat, "Envoy " + help_ + stat, total, labels_);
    if (text_) (*text_)[dotted_ + stat] = total;
  }
  // <stat>_xx{envoy_response_code_class="1".."5"}, Envoy's <stat>_1xx..5xx.
  void code_classes(const char* stat, std::array<Counter, 5> T::*member) const {
    static const char* const kClass[] = {"1", "2", "3", "4", "5"};
    for (size_t k = 0; k < 5; ++k) {
      uint64_t total = 0;
      for (const T& b : blocks_) total += (b.*member)[k].get();
      MetricLabels labels = {{"envoy_response_code_class", kClass[k]}};
      labels.insert(labels.end(), labels_.begin(), labels_.end());
      out_.counter(prefix_ + stat + "_xx", "Envoy " + help_ + stat + "_<code class>xx", total, labels);
      if (text_) (*text_)[dotted_ + stat + "_" + kClass[k] + "xx"] = static_cast<int64_t>(total);
    }
  }

 private:
  MetricsWriter& out_;
  TextStats* text_;
  const std::deque<T>& blocks_;
  std::string prefix_, help_;
  MetricLabels labels_;
  std::string dotted_;
};

}  // namespace

std::string StatsStore::prometheus(const std::vector<HostStatsView>& hosts) const {
  MetricsWriter e;
  render(e, nullptr, hosts);
  return e.text();
}

std::string StatsStore::text(const std::vector<HostStatsView>& hosts) const {
  MetricsWriter ignored;
  TextStats lines;
  render(ignored, &lines, hosts);
  std::string out;
  for (const auto& [name, value] : lines) out += name + ": " + std::to_string(value) + "\n";
  return out;
}

void StatsStore::render(MetricsWriter& e, std::map<std::string, int64_t>* text,
                        const std::vector<HostStatsView>& hosts) const {
  std::lock_guard lock(mu_);
  // Envoy's names (its /stats/prometheus and /stats), so that dashboards made
  // for Envoy read ours.
  render_clusters(e, text, hosts);
  render_http(e, text);
  render_tcp_and_listeners(e, text);
  render_tls(e, text);
  render_dpukit(e, text);
}

void StatsStore::render_clusters(MetricsWriter& e, std::map<std::string, int64_t>* text,
                                 const std::vector<HostStatsView>& hosts) const {
  using C = ClusterStats;
  for (const auto& [name, d] : clusters_) {
    const Summed<C> c(e, text, d, "envoy_cluster_", "cluster.<name>.", {{"envoy_cluster_name", name}},
                      "cluster." + name + ".");
    c.counter("upstream_rq_total", &C::upstream_rq_total);
    c.counter("upstream_rq_completed", &C::upstream_rq_completed);
    c.counter("upstream_cx_total", &C::upstream_cx_total);
    c.counter("upstream_cx_connect_fail", &C::upstream_cx_connect_fail);
    c.counter("upstream_cx_connect_timeout", &C::upstream_cx_connect_timeout);
    c.counter("upstream_cx_destroy", &C::upstream_cx_destroy);
    c.counter("upstream_cx_overflow", &C::upstream_cx_overflow);
    c.counter("upstream_cx_protocol_error", &C::upstream_cx_protocol_error);
    c.counter("upstream_rq_retry", &C::upstream_rq_retry);
    c.counter("upstream_rq_retry_overflow", &C::upstream_rq_retry_overflow);
    c.counter("upstream_rq_timeout", &C::upstream_rq_timeout);
    c.counter("upstream_rq_per_try_timeout", &C::upstream_rq_per_try_timeout);
    c.counter("upstream_rq_pending_overflow", &C::upstream_rq_pending_overflow);
    c.counter("upstream_rq_rx_reset", &C::upstream_rq_rx_reset);
    c.code_classes("upstream_rq", &C::upstream_rq_xx);
    c.gauge("upstream_cx_active", &C::upstream_cx_active);
    c.gauge("upstream_rq_active", &C::upstream_rq_active);
    const Summed<C> h2(e, text, d, "envoy_cluster_http2_", "cluster.<name>.http2.", {{"envoy_cluster_name", name}},
                       "cluster." + name + ".http2.");
    h2.counter("keepalive_timeout", &C::http2_keepalive_timeout);
  }
  std::map<std::string, std::pair<uint64_t, uint64_t>> membership;  // cluster -> {healthy, total}
  std::map<std::string, uint64_t> ejections;
  for (const auto& h : hosts) {
    auto& m = membership[h.cluster];
    m.second++;
    if (h.healthy && !h.ejected) m.first++;
    ejections[h.cluster] += h.ejections;
  }
  for (const auto& [name, m] : membership) {
    const MetricLabels l = {{"envoy_cluster_name", name}};
    e.gauge("envoy_cluster_membership_healthy", "Envoy cluster.<name>.membership_healthy", m.first, l);
    e.gauge("envoy_cluster_membership_total", "Envoy cluster.<name>.membership_total", m.second, l);
    e.counter("envoy_cluster_outlier_detection_ejections_enforced_total",
              "Envoy cluster.<name>.outlier_detection.ejections_enforced_total", ejections[name], l);
    if (text) {
      (*text)["cluster." + name + ".membership_healthy"] = static_cast<int64_t>(m.first);
      (*text)["cluster." + name + ".membership_total"] = static_cast<int64_t>(m.second);
      (*text)["cluster." + name + ".outlier_detection.ejections_enforced_total"] = static_cast<int64_t>(ejections[name]);
    }
  }
}

void StatsStore::render_http(MetricsWriter& e, std::map<std::string, int64_t>* text) const {
  using H = HttpStats;
  for (const auto& [prefix, d] : http_) {
    const Summed<H> h(e, text, d, "envoy_http_", "http.<stat_prefix>.", {{"envoy_http_conn_manager_prefix", prefix}},
                      "http." + prefix + ".");
    h.counter("downstream_cx_total", &H::downstream_cx_total);
    h.counter("downstream_rq_total", &H::downstream_rq_total);
    h.counter("downstream_cx_protocol_error", &H::downstream_cx_protocol_error);
    h.counter("downstream_rq_rx_reset", &H::downstream_rq_rx_reset);
    h.counter("downstream_rq_timeout", &H::downstream_rq_timeout);
    h.counter("downstream_cx_idle_timeout", &H::downstream_cx_idle_timeout);
    h.counter("downstream_cx_drain_close", &H::downstream_cx_drain_close);
    h.counter("downstream_cx_destroy_remote_active_rq", &H::downstream_cx_destroy_remote_active_rq);
    h.counter("rq_direct_response", &H::rq_direct_response);
    h.counter("no_route", &H::no_route);
    h.counter("no_cluster", &H::no_cluster);
    h.code_classes("downstream_rq", &H::downstream_rq_xx);
    h.gauge("downstream_cx_active", &H::downstream_cx_active);
    h.gauge("downstream_rq_active", &H::downstream_rq_active);
    // Envoy names these <stat_prefix>.http_local_rate_limit.*; the connection manager's prefix stands in.
    const Summed<H> rl(e, text, d, "envoy_http_local_rate_limit_", "<stat_prefix>.http_local_rate_limit.",
                       {{"envoy_local_http_ratelimit_prefix", prefix}}, prefix + ".http_local_rate_limit.");
    rl.counter("enabled", &H::rl_enabled);
    rl.counter("enforced", &H::rl_enforced);
    rl.counter("rate_limited", &H::rl_rate_limited);
    rl.counter("ok", &H::rl_ok);
    if (http_rbac_.count(prefix)) {  // Envoy's http.<stat_prefix>.rbac.*, where an RBAC filter is configured
      const Summed<H> rbac(e, text, d, "envoy_http_rbac_", "http.<stat_prefix>.rbac.",
                           {{"envoy_http_conn_manager_prefix", prefix}}, "http." + prefix + ".rbac.");
      rbac.counter("allowed", &H::rbac_allowed);
      rbac.counter("denied", &H::rbac_denied);
      rbac.counter("shadow_allowed", &H::rbac_shadow_allowed);
      rbac.counter("shadow_denied", &H::rbac_shadow_denied);
    }
  }
}

// tcp_proxy's, the network RBAC filters' and the listeners' own.
void StatsStore::render_tcp_and_listeners(MetricsWriter& e, std::map<std::string, int64_t>* text) const {
  using T = TcpStats;
  for (const auto& [prefix, d] : tcp_) {
    const Summed<T> t(e, text, d, "envoy_tcp_", "tcp.<stat_prefix>.", {{"envoy_tcp_prefix", prefix}},
                      "tcp." + prefix + ".");
    t.counter("downstream_cx_total", &T::downstream_cx_total);
    t.counter("downstream_cx_rx_bytes_total", &T::downstream_cx_rx_bytes_total);
    t.counter("downstream_cx_tx_bytes_total", &T::downstream_cx_tx_bytes_total);
    t.counter("downstream_cx_no_route", &T::downstream_cx_no_route);
    t.counter("idle_timeout", &T::idle_timeout);
    t.gauge("downstream_cx_active", &T::downstream_cx_active);
  }
  for (const auto& [prefix, d] : network_rbac_) {
    std::string metric = "envoy_" + prefix + "rbac_";  // Envoy's Prometheus name: the dotted name, '.' as '_'
    for (char& c : metric)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    const Summed<RbacStats> r(e, text, d, metric, "<stat_prefix>rbac.", {}, prefix + "rbac.");
    r.counter("allowed", &RbacStats::allowed);
    r.counter("denied", &RbacStats::denied);
    r.counter("shadow_allowed", &RbacStats::shadow_allowed);
    r.counter("shadow_denied", &RbacStats::shadow_denied);
  }
  for (const auto& [address, d] : listeners_) {
    const Summed<ListenerStats> l(e, text, d, "envoy_listener_", "listener.<address>.",
                                  {{"envoy_listener_address", address}}, "listener." + address + ".");
    l.counter("no_filter_chain_match", &ListenerStats::no_filter_chain_match);
  }
}

void StatsStore::render_tls(MetricsWriter& e, std::map<std::string, int64_t>* text) const {
  // Envoy's names: envoy_listener_ssl_handshake{envoy_listener_address}, envoy_cluster_ssl_handshake{envoy_cluster_name}.
  for (const auto& [key, d] : tls_) {
    const auto& [scope, name] = key;
    const std::string label = scope == "listener" ? "envoy_listener_address" : "envoy_cluster_name";
    const Summed<TlsStats> t(e, text, d, "envoy_" + scope + "_ssl_",
                             scope + ".<" + (scope == "listener" ? "address" : "name") + ">.ssl.", {{label, name}},
                             scope + "." + name + ".ssl.");
    t.counter("handshake", &TlsStats::handshake);
    t.counter("connection_error", &TlsStats::connection_error);
    t.counter("session_reused", &TlsStats::session_reused);
    t.counter("no_certificate", &TlsStats::no_certificate);
    t.counter("fail_verify_no_cert", &TlsStats::fail_verify_no_cert);
    t.counter("fail_verify_error", &TlsStats::fail_verify_error);
    t.counter("fail_verify_san", &TlsStats::fail_verify_san);
    const std::string factory = scope == "listener" ? "server_ssl_socket_factory" : "client_ssl_socket_factory";
    const Summed<TlsStats> f(e, text, d, "envoy_" + scope + "_" + factory + "_",
                             scope + (scope == "listener" ? ".<address>." : ".<name>.") + factory + ".", {{label, name}},
                             scope + "." + name + "." + factory + ".");
    f.counter("ssl_context_update_by_sds", &TlsStats::ssl_context_update_by_sds);
    f.counter(scope == "listener" ? "downstream_context_secrets_not_ready" : "upstream_context_secrets_not_ready",
              &TlsStats::context_secrets_not_ready);
    if (auto it = tls_named_.find(key); it != tls_named_.end()) {
      const TlsNamedCounters& named = it->second;
      std::lock_guard named_lock(named.mu);
      // family "ciphers" -> label envoy_ssl_cipher, as Envoy's tag extraction names them.
      static const std::map<std::string, std::string> kLabel = {
          {"ciphers", "envoy_ssl_cipher"}, {"versions", "envoy_ssl_version"},
          {"curves", "envoy_ssl_curve"}, {"sigalgs", "envoy_ssl_sigalg"}};
      for (const auto& [fk, count] : named.counts) {
        e.counter("envoy_" + scope + "_ssl_" + fk.first, "Envoy " + scope + ".ssl." + fk.first + ".<name>", count,
                  {{kLabel.at(fk.first), fk.second}, {label, name}});
        if (text) (*text)[scope + "." + name + ".ssl." + fk.first + "." + fk.second] = static_cast<int64_t>(count);
      }
    }
  }
}

// dpukit's own: time in each processing module, and the crypto engine's work.
void StatsStore::render_dpukit(MetricsWriter& e, std::map<std::string, int64_t>* text) const {
  for (int m = 0; m < static_cast<int>(Module::kCount); ++m) {
    const MetricLabels l = {{"module", module_name(static_cast<Module>(m))}};
    const auto [ns, calls] = module_total(static_cast<Module>(m));
    e.counter("dpukit_mesh_module_ns_total", "Time in each processing module, ns", ns, l);
    e.counter("dpukit_mesh_module_calls_total", "Calls of each processing module", calls, l);
    if (text) {
      (*text)[std::string("dpukit.mesh.module.") + module_name(static_cast<Module>(m)) + ".ns"] = static_cast<int64_t>(ns);
      (*text)[std::string("dpukit.mesh.module.") + module_name(static_cast<Module>(m)) + ".calls"] = static_cast<int64_t>(calls);
    }
  }
  if (engine_crypto_in_use()) {  // record crypto on the crypto engine (tls/engine_crypto.h): hw CPU, not the dpu's
    const EngineCryptoTotals t = engine_crypto_totals();
    e.counter("dpukit_mesh_record_crypto_engine_calls_total", "Records' payloads encrypted or decrypted on the crypto engine", t.calls);
    e.counter("dpukit_mesh_record_crypto_engine_bytes_total", "Payload bytes through the crypto engine", t.bytes);
    e.counter("dpukit_mesh_record_crypto_engine_hw_ns_total", "CPU time of the crypto engine's work (hw place), ns", t.hw_ns);
    if (text) {
      (*text)["dpukit.mesh.record_crypto_engine.calls"] = static_cast<int64_t>(t.calls);
      (*text)["dpukit.mesh.record_crypto_engine.bytes"] = static_cast<int64_t>(t.bytes);
      (*text)["dpukit.mesh.record_crypto_engine.hw_ns"] = static_cast<int64_t>(t.hw_ns);
    }
  }
}

}  // namespace dpukit::mesh
