// One configuration, compiled into the data plane's match-action tables: the
// listener table (Algorithm 1, line 1: the listener by (dip, dport)), each
// connection manager's route table and filters, the tcp_proxy routes, and
// the clusters. Built by the control plane (the slow path), then shared
// read-only by every worker; a reload builds a new one and swaps it in.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/bootstrap.h"
#include "http/http1.h"
#include "modules/access_log.h"
#include "modules/cluster.h"
#include "modules/filter.h"
#include "modules/rbac.h"
#include "modules/router.h"
#include "stats.h"

namespace dpukit::mesh {

struct HcmRuntime {
  const config::HttpConnectionManager* cfg = nullptr;
  std::unique_ptr<RouteTable> routes;
  std::vector<std::shared_ptr<LocalRateLimit>> rate_limits;  // in filter order; an unchanged chain's carry over
  std::vector<std::unique_ptr<RbacFilter>> rbacs;              // in filter order
  // The filters before the router, in the configured order: an RBAC filter
  // (rbacs[index]) or a local rate limit (rate_limits[index]).
  struct FilterSlot {
    bool rbac;
    size_t index;
  };
  std::vector<FilterSlot> filters;
  std::vector<HttpStats*> stats;                             // per worker
  http::Limits limits;
  std::vector<std::unique_ptr<AccessLogger>> access_logs;    // a line per request
  // A connection reads its local address, TLS facts and peer certificate
  // (DownstreamFacts) only where RBAC or an access log names them.
  bool reads_identity = false;
  std::vector<std::string> logged_response_headers;  // what the access logs read of a response (%RESP(...)%)
  void log(const StreamInfo& info) const;  // a line in each access log
};

struct TcpProxyRuntime {
  const config::TcpProxy* cfg = nullptr;
  std::vector<std::pair<ClusterRuntime*, uint64_t>> clusters;  // cumulative weights
  uint64_t total_weight = 0;
  std::vector<TcpStats*> stats;
  std::vector<std::unique_ptr<AccessLogger>> access_logs;  // a line per connection
  bool reads_identity = false;
  void log(const StreamInfo& info) const;
  ClusterRuntime* pick_cluster(uint64_t random) const;
};

class TlsContext;  // tls/tls_context.h

struct ListenerRuntime {
  const config::Listener* cfg = nullptr;
  std::string address_key;  // "127.0.0.1:10000" or "unix:/path": the same key means the same socket
  std::unique_ptr<HcmRuntime> hcm;
  std::unique_ptr<TcpProxyRuntime> tcp;
  const config::FilterChain* chain = nullptr;  // the filter chain served
  std::shared_ptr<TlsContext> tls;             // its TLS transport socket; nullptr: plaintext
  // Its network RBAC filters, in order, with their statistics (per worker).
  struct NetworkRbacRuntime {
    std::unique_ptr<RbacFilter> rules;
    std::vector<RbacStats*> stats;
  };
  std::vector<NetworkRbacRuntime> network_rbacs;
  // Several filter chains: one runtime each, chosen per connection by its
  // filter_chain_match (this one then serves none itself).
  std::vector<std::unique_ptr<ListenerRuntime>> chains;
  std::vector<ListenerStats*> stats;  // listener.<address>.*, per worker
};

struct Snapshot {
  config::Bootstrap bootstrap;  // owns what the compiled tables point into
  std::map<std::string, std::shared_ptr<ClusterRuntime>> clusters;
  std::vector<ListenerRuntime> listeners;
  uint64_t version = 0;

  // Compiles `bootstrap`. A cluster of the same revision in `previous` (an
  // xDS cluster whose resources did not change) is kept as it is; hosts of
  // another same-named cluster keep their health and ejection state; a
  // filter chain unchanged but for its routes keeps its rate limits' tokens.
  static std::shared_ptr<const Snapshot> build(config::Bootstrap bootstrap, StatsStore& stats,
                                               const Snapshot* previous, uint64_t version, int64_t now_ns);
  const ListenerRuntime* listener(const std::string& name) const;
  // What serves, in this snapshot, the connections that `served` (a listener
  // or one of its filter chains, from an older snapshot) served: the same
  // listener's same chain — by name, or by position where chains are unnamed
  // and their number is unchanged. nullptr when it is gone, or changed other
  // than in its routes (config::FilterChain::fingerprint): its connections drain.
  const ListenerRuntime* successor(const ListenerRuntime& served) const;
};

std::string address_key(const config::Address& a);

}  // namespace dpukit::mesh
