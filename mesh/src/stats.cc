#include "stats.h"

#include <functional>
#include <set>
#include <sstream>

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
std::vector<TcpStats*> StatsStore::tcp(const std::string& prefix) { return blocks(tcp_, prefix); }

std::pair<uint64_t, uint64_t> StatsStore::module_total(Module m) const {
  uint64_t ns = 0, calls = 0;
  for (const auto& w : modules_) {
    ns += w.ns[static_cast<int>(m)].get();
    calls += w.calls[static_cast<int>(m)].get();
  }
  return {ns, calls};
}

namespace {

// Writes one metric family: "# TYPE name kind" once, then a sample per labelled series.
class Exposition {
 public:
  void sample(const std::string& name, const char* kind, const std::string& labels, double value) {
    if (typed_.insert(name).second) families_[name] = std::string("# TYPE ") + name + " " + kind + "\n";
    std::ostringstream line;
    line << name;
    if (!labels.empty()) line << "{" << labels << "}";
    line << " " << static_cast<uint64_t>(value) << "\n";
    families_[name] += line.str();
  }
  std::string text() const {
    std::string out;
    for (const auto& [name, body] : families_) out += body;
    return out;
  }

 private:
  std::set<std::string> typed_;
  std::map<std::string, std::string> families_;
};

std::string label(const char* key, const std::string& value) { return std::string(key) + "=\"" + value + "\""; }

template <typename T>
uint64_t sum(const std::deque<T>& d, const std::function<uint64_t(const T&)>& f) {
  uint64_t s = 0;
  for (const auto& b : d) s += f(b);
  return s;
}

}  // namespace

std::string StatsStore::prometheus(const std::vector<HostStatsView>& hosts) const {
  std::lock_guard lock(mu_);
  Exposition e;
  using C = ClusterStats;
  for (const auto& [name, d] : clusters_) {
    std::string l = label("envoy_cluster_name", name);
    auto counter = [&](const char* stat, Counter C::*member) {
      e.sample(std::string("envoy_cluster_") + stat, "counter", l,
               static_cast<double>(sum<C>(d, [&](const C& b) { return (b.*member).get(); })));
    };
    counter("upstream_rq_total", &C::upstream_rq_total);
    counter("upstream_rq_completed", &C::upstream_rq_completed);
    counter("upstream_cx_total", &C::upstream_cx_total);
    counter("upstream_cx_connect_fail", &C::upstream_cx_connect_fail);
    counter("upstream_cx_connect_timeout", &C::upstream_cx_connect_timeout);
    counter("upstream_cx_destroy", &C::upstream_cx_destroy);
    counter("upstream_cx_overflow", &C::upstream_cx_overflow);
    counter("upstream_cx_protocol_error", &C::upstream_cx_protocol_error);
    counter("upstream_rq_retry", &C::upstream_rq_retry);
    counter("upstream_rq_retry_overflow", &C::upstream_rq_retry_overflow);
    counter("upstream_rq_timeout", &C::upstream_rq_timeout);
    counter("upstream_rq_per_try_timeout", &C::upstream_rq_per_try_timeout);
    counter("upstream_rq_pending_overflow", &C::upstream_rq_pending_overflow);
    counter("upstream_rq_rx_reset", &C::upstream_rq_rx_reset);
    for (int k = 0; k < 5; ++k)
      e.sample("envoy_cluster_upstream_rq_xx", "counter",
               label("envoy_response_code_class", std::to_string(k + 1)) + "," + l,
               static_cast<double>(sum<C>(d, [&](const C& b) { return b.upstream_rq_xx[k].get(); })));
    e.sample("envoy_cluster_upstream_cx_active", "gauge", l,
             static_cast<double>(sum<C>(d, [](const C& b) { return static_cast<uint64_t>(b.upstream_cx_active.get()); })));
    e.sample("envoy_cluster_upstream_rq_active", "gauge", l,
             static_cast<double>(sum<C>(d, [](const C& b) { return static_cast<uint64_t>(b.upstream_rq_active.get()); })));
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
    std::string l = label("envoy_cluster_name", name);
    e.sample("envoy_cluster_membership_healthy", "gauge", l, static_cast<double>(m.first));
    e.sample("envoy_cluster_membership_total", "gauge", l, static_cast<double>(m.second));
    e.sample("envoy_cluster_outlier_detection_ejections_enforced_total", "counter", l,
             static_cast<double>(ejections[name]));
  }
  using H = HttpStats;
  for (const auto& [prefix, d] : http_) {
    std::string l = label("envoy_http_conn_manager_prefix", prefix);
    auto counter = [&](const char* stat, Counter H::*member) {
      e.sample(std::string("envoy_http_") + stat, "counter", l,
               static_cast<double>(sum<H>(d, [&](const H& b) { return (b.*member).get(); })));
    };
    counter("downstream_cx_total", &H::downstream_cx_total);
    counter("downstream_rq_total", &H::downstream_rq_total);
    counter("downstream_cx_protocol_error", &H::downstream_cx_protocol_error);
    counter("downstream_rq_rx_reset", &H::downstream_rq_rx_reset);
    counter("downstream_rq_timeout", &H::downstream_rq_timeout);
    counter("downstream_cx_idle_timeout", &H::downstream_cx_idle_timeout);
    counter("downstream_cx_destroy_remote_active_rq", &H::downstream_cx_destroy_remote_active_rq);
    counter("rq_direct_response", &H::rq_direct_response);
    counter("no_route", &H::no_route);
    counter("no_cluster", &H::no_cluster);
    for (int k = 0; k < 5; ++k)
      e.sample("envoy_http_downstream_rq_xx", "counter",
               label("envoy_response_code_class", std::to_string(k + 1)) + "," + l,
               static_cast<double>(sum<H>(d, [&](const H& b) { return b.downstream_rq_xx[k].get(); })));
    e.sample("envoy_http_downstream_cx_active", "gauge", l,
             static_cast<double>(sum<H>(d, [](const H& b) { return static_cast<uint64_t>(b.downstream_cx_active.get()); })));
    e.sample("envoy_http_downstream_rq_active", "gauge", l,
             static_cast<double>(sum<H>(d, [](const H& b) { return static_cast<uint64_t>(b.downstream_rq_active.get()); })));
    // Envoy names these <stat_prefix>.http_local_rate_limit.*; the connection manager's prefix stands in.
    std::string rl = label("envoy_local_http_ratelimit_prefix", prefix);
    e.sample("envoy_http_local_rate_limit_enabled", "counter", rl,
             static_cast<double>(sum<H>(d, [](const H& b) { return b.rl_enabled.get(); })));
    e.sample("envoy_http_local_rate_limit_enforced", "counter", rl,
             static_cast<double>(sum<H>(d, [](const H& b) { return b.rl_enforced.get(); })));
    e.sample("envoy_http_local_rate_limit_rate_limited", "counter", rl,
             static_cast<double>(sum<H>(d, [](const H& b) { return b.rl_rate_limited.get(); })));
    e.sample("envoy_http_local_rate_limit_ok", "counter", rl,
             static_cast<double>(sum<H>(d, [](const H& b) { return b.rl_ok.get(); })));
  }
  using T = TcpStats;
  for (const auto& [prefix, d] : tcp_) {
    std::string l = label("envoy_tcp_prefix", prefix);
    auto counter = [&](const char* stat, Counter T::*member) {
      e.sample(std::string("envoy_tcp_") + stat, "counter", l,
               static_cast<double>(sum<T>(d, [&](const T& b) { return (b.*member).get(); })));
    };
    counter("downstream_cx_total", &T::downstream_cx_total);
    counter("downstream_cx_rx_bytes_total", &T::downstream_cx_rx_bytes_total);
    counter("downstream_cx_tx_bytes_total", &T::downstream_cx_tx_bytes_total);
    counter("downstream_cx_no_route", &T::downstream_cx_no_route);
    counter("idle_timeout", &T::idle_timeout);
    e.sample("envoy_tcp_downstream_cx_active", "gauge", l,
             static_cast<double>(sum<T>(d, [](const T& b) { return static_cast<uint64_t>(b.downstream_cx_active.get()); })));
  }
  for (int m = 0; m < static_cast<int>(Module::kCount); ++m) {
    std::string l = label("module", module_name(static_cast<Module>(m)));
    uint64_t ns = 0, calls = 0;
    for (const auto& w : modules_) {
      ns += w.ns[m].get();
      calls += w.calls[m].get();
    }
    e.sample("dpukit_mesh_module_ns_total", "counter", l, static_cast<double>(ns));
    e.sample("dpukit_mesh_module_calls_total", "counter", l, static_cast<double>(calls));
  }
  return e.text();
}

}  // namespace dpukit::mesh
