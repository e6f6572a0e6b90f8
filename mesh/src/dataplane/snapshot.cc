#include "dataplane/snapshot.h"

#include <algorithm>

#include "dpukit/core/accounting.h"
#include "tls/tls_context.h"

namespace dpukit::mesh {

std::string address_key(const config::Address& a) { return a.key(); }

namespace {
void log_to(const std::vector<std::unique_ptr<AccessLogger>>& logs, const StreamInfo& info) {
  const auto end = static_cast<int64_t>(now_ns());
  for (const auto& l : logs) l->log(info, end);
}
// The runtime of `previous` that served chain `index` of `l` unchanged (the
// listener by name, the chain by name or by place, their fingerprints the
// same): what it holds between requests (a rate limit's tokens) carries over.
const ListenerRuntime* unchanged_chain(const Snapshot* previous, const config::Listener& l, size_t index) {
  const ListenerRuntime* old = previous ? previous->listener(l.name) : nullptr;
  if (!old || old->cfg->fingerprint != l.fingerprint) return nullptr;
  const config::FilterChain& fc = l.filter_chains[index];
  const ListenerRuntime* found = nullptr;
  if (old->chains.empty()) {
    if (l.filter_chains.size() == 1 || (!fc.name.empty() && old->chain && old->chain->name == fc.name)) found = old;
  } else if (!fc.name.empty()) {
    for (const auto& c : old->chains)
      if (c->chain->name == fc.name) found = c.get();
  } else if (old->chains.size() == l.filter_chains.size()) {
    found = old->chains[index].get();
  }
  return found && found->chain && found->chain->fingerprint == fc.fingerprint ? found : nullptr;
}

}  // namespace

void HcmRuntime::log(const StreamInfo& info) const { log_to(access_logs, info); }
void TcpProxyRuntime::log(const StreamInfo& info) const { log_to(access_logs, info); }

ClusterRuntime* TcpProxyRuntime::pick_cluster(uint64_t random) const {
  if (clusters.size() == 1) return clusters[0].first;
  uint64_t r = random % total_weight;
  for (const auto& [c, cumulative] : clusters)
    if (r < cumulative) return c;
  return clusters.back().first;
}

const ListenerRuntime* Snapshot::listener(const std::string& name) const {
  for (const auto& l : listeners)
    if (l.cfg->name == name) return &l;
  return nullptr;
}

const ListenerRuntime* Snapshot::successor(const ListenerRuntime& served) const {
  const ListenerRuntime* l = listener(served.cfg->name);
  // A listener changed in place (other than its chains) drains every connection, as Envoy's does.
  if (l && l->cfg->fingerprint != served.cfg->fingerprint) return nullptr;
  if (!l || !served.chain) return l;
  // A chain changed (other than its routes) drains its connections; an unchanged one's take the new routes.
  const auto same_chain = [&](const ListenerRuntime* next) {
    return next && next->chain && next->chain->fingerprint == served.chain->fingerprint ? next : nullptr;
  };
  if (l->chains.empty()) {
    // One chain now: the successor of a connection's chain if it was the only one, or has that chain's name
    // (unnamed chains among several cannot be told apart: those connections drain).
    bool same = l->chain && (served.cfg->filter_chains.size() == 1 ||
                             (!served.chain->name.empty() && served.chain->name == l->chain->name));
    return same ? same_chain(l) : nullptr;
  }
  if (!served.chain->name.empty()) {
    for (const auto& c : l->chains)
      if (c->chain->name == served.chain->name) return same_chain(c.get());
    return nullptr;
  }
  const auto& old_chains = served.cfg->filter_chains;
  size_t index = static_cast<size_t>(served.chain - old_chains.data());
  if (old_chains.size() != l->chains.size() || index >= l->chains.size()) return nullptr;
  return l->chains[index]->chain->name.empty() ? same_chain(l->chains[index].get()) : nullptr;
}

std::shared_ptr<const Snapshot> Snapshot::build(config::Bootstrap bootstrap, StatsStore& stats,
                                                const Snapshot* previous, uint64_t version, int64_t now_ns) {
  auto s = std::make_shared<Snapshot>();
  s->bootstrap = std::move(bootstrap);
  s->version = version;
  for (const auto& c : s->bootstrap.clusters) {
    if (previous && c.revision != 0) {
      // The same parse of the same resources (an xDS update that did not change it): its runtime stays, with its
      // hosts, connection pools' breakers and TLS context, as an unchanged cluster stays in Envoy.
      if (auto it = previous->clusters.find(c.name); it != previous->clusters.end() && it->second->config().revision == c.revision) {
        s->clusters.emplace(c.name, it->second);
        continue;
      }
    }
    auto rt = std::make_shared<ClusterRuntime>(c, stats.cluster(c.name));
    if (c.tls) rt->tls = TlsContext::client(*c.tls, stats.tls("cluster", c.name), stats.tls_named("cluster", c.name));
    if (previous) {
      if (auto it = previous->clusters.find(c.name); it != previous->clusters.end()) {
        // Same-named cluster: adopt the previous host objects (health, ejections) where the address is unchanged.
        rt->adopt_hosts(*it->second->hosts());
      }
    }
    s->clusters.emplace(c.name, std::move(rt));
  }
  auto cluster = [&](const std::string& name) { return s->clusters.at(name).get(); };
  // One filter chain's modules: its connection manager or TCP proxy, and its TLS context.
  const auto build_chain = [&](ListenerRuntime& lr, const config::Listener& l, size_t index,
                               const std::string& stat_address) {
    const config::FilterChain& fc = l.filter_chains[index];
    const ListenerRuntime* before = unchanged_chain(previous, l, index);
    lr.chain = &fc;
    if (fc.tls)
      lr.tls = TlsContext::server(*fc.tls, stats.tls("listener", stat_address), stats.tls_named("listener", stat_address));
    for (const auto& n : fc.network_rbacs)
      lr.network_rbacs.push_back({std::make_unique<RbacFilter>(n.rbac), stats.network_rbac(n.stat_prefix)});
    for (const auto& f : fc.filters) {
      if (f.hcm) {
        auto h = std::make_unique<HcmRuntime>();
        h->cfg = &*f.hcm;
        h->routes = std::make_unique<RouteTable>(f.hcm->route_config, cluster);
        for (const auto& hf : f.hcm->http_filters) {
          if (hf.local_ratelimit) {
            h->filters.push_back({false, h->rate_limits.size()});
            // An unchanged chain keeps its buckets (an update elsewhere does not give every client new tokens).
            const size_t i = h->rate_limits.size();
            h->rate_limits.push_back(before && before->hcm && i < before->hcm->rate_limits.size()
                                         ? before->hcm->rate_limits[i]
                                         : std::make_shared<LocalRateLimit>(*hf.local_ratelimit, now_ns));
          } else if (hf.rbac) {
            h->filters.push_back({true, h->rbacs.size()});
            h->rbacs.push_back(std::make_unique<RbacFilter>(*hf.rbac));
          }
        }
        h->stats = stats.http(f.hcm->stat_prefix);
        h->reads_identity = !h->rbacs.empty();
        for (const auto& al : f.hcm->access_log) {
          h->access_logs.push_back(std::make_unique<AccessLogger>(al));
          h->reads_identity = h->reads_identity || h->access_logs.back()->reads_identity();
          for (const auto& name : h->access_logs.back()->response_headers())
            if (std::find(h->logged_response_headers.begin(), h->logged_response_headers.end(), name) ==
                h->logged_response_headers.end())
              h->logged_response_headers.push_back(name);
        }
        if (!h->rbacs.empty()) stats.http_has_rbac(f.hcm->stat_prefix);
        h->limits.max_headers_count = f.hcm->max_headers_count;
        h->limits.max_header_bytes = f.hcm->max_request_headers_kb * 1024;
        h->limits.max_request_line = h->limits.max_header_bytes;
        lr.hcm = std::move(h);
      }
      if (f.tcp_proxy) {
        auto t = std::make_unique<TcpProxyRuntime>();
        t->cfg = &*f.tcp_proxy;
        if (!f.tcp_proxy->cluster.empty()) {
          t->clusters.emplace_back(cluster(f.tcp_proxy->cluster), 1);
          t->total_weight = 1;
        }
        for (const auto& w : f.tcp_proxy->weighted) {
          t->total_weight += w.weight;
          t->clusters.emplace_back(cluster(w.name), t->total_weight);
        }
        t->stats = stats.tcp(f.tcp_proxy->stat_prefix);
        t->reads_identity = !lr.network_rbacs.empty();  // (they come before the tcp_proxy: already built)
        for (const auto& al : f.tcp_proxy->access_log) {
          t->access_logs.push_back(std::make_unique<AccessLogger>(al));
          t->reads_identity = t->reads_identity || t->access_logs.back()->reads_identity();
        }
        lr.tcp = std::move(t);
      }
    }
  };
  for (const auto& l : s->bootstrap.listeners) {
    ListenerRuntime lr;
    lr.cfg = &l;
    lr.address_key = address_key(l.address);
    std::string stat_address = lr.address_key;  // Envoy's listener.<address>: "127.0.0.1_10000"
    std::replace(stat_address.begin(), stat_address.end(), ':', '_');
    lr.stats = stats.listener(stat_address);
    if (l.filter_chains.size() == 1) {
      build_chain(lr, l, 0, stat_address);
    } else {
      for (size_t i = 0; i < l.filter_chains.size(); ++i) {
        auto chain = std::make_unique<ListenerRuntime>();
        chain->cfg = &l;
        chain->address_key = lr.address_key;
        chain->stats = lr.stats;
        build_chain(*chain, l, i, stat_address);
        lr.chains.push_back(std::move(chain));
      }
    }
    s->listeners.push_back(std::move(lr));
  }
  return s;
}

}  // namespace dpukit::mesh
