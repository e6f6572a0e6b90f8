// The router processing module's match-action table (Algorithm 1, line 3:
// the route by the URL path): virtual hosts by Host, then the first route of
// the virtual host whose match holds. The control plane compiles a
// RouteConfiguration into a RouteTable once; workers only look up.
#pragma once

#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/bootstrap.h"
#include "http/http1.h"
#include "modules/cluster.h"

namespace dpukit::mesh {

struct CompiledHeaderMatcher {
  config::HeaderMatcher cfg;
  std::optional<std::regex> regex;
  std::string lower_value;  // cfg.value lower-cased (for ignore_case)
  // Envoy's semantics: a repeated header matches when any of its values
  // matches; an absent header matches only present_match: false (or, with
  // invert_match, present_match: true). ":method", ":path", ":authority" and
  // ":scheme" name the request's pseudo-headers.
  bool matches(const http::RequestHead& head) const;
  bool matches(const http::HeaderList& headers) const;  // no pseudo-headers
  bool value_matches(std::string_view value) const;
};
CompiledHeaderMatcher compile_header_matcher(const config::HeaderMatcher& m);

struct CompiledRoute {
  const config::Route* cfg = nullptr;
  std::optional<std::regex> path_regex;
  std::string match_value;  // lower-cased when the match is case-insensitive
  // prefix and path are matched against the path without the query, as
  // Envoy 1.40 does; safe_regex against the whole path without the query.
  std::vector<CompiledHeaderMatcher> headers;
  std::vector<CompiledHeaderMatcher> query_parameters;  // value_matches on the parameter's first value
  // The action's clusters with cumulative weights (one entry for `cluster`).
  std::vector<std::pair<ClusterRuntime*, uint64_t>> clusters;
  uint64_t total_weight = 0;

  bool matches(const http::RequestHead& head) const;
  // Envoy's weighted pick: random % total_weight in the cumulative weights
  // (nullptr for a route without clusters, e.g. a direct_response).
  ClusterRuntime* pick_cluster(uint64_t random) const;
};

struct CompiledVirtualHost {
  const config::VirtualHost* cfg = nullptr;
  std::vector<CompiledRoute> routes;
};

class RouteTable {
 public:
  // `cluster` resolves a cluster name (the bootstrap was cross-checked, so it exists).
  RouteTable(const config::RouteConfiguration& rc, const std::function<ClusterRuntime*(const std::string&)>& cluster);

  struct Match {
    const CompiledVirtualHost* vhost;
    const CompiledRoute* route;  // nullptr: the host matched a virtual host but no route matched
  };
  // Envoy's domain search order: exact, then the longest suffix wildcard
  // ("*.foo.com"), then the longest prefix wildcard ("foo.*"), then "*".
  // The Host is compared lower-cased, port included.
  Match match(const http::RequestHead& head) const;
  const config::RouteConfiguration& config() const { return *cfg_; }

 private:
  const CompiledVirtualHost* find_vhost(std::string_view host) const;

  const config::RouteConfiguration* cfg_;
  std::vector<CompiledVirtualHost> vhosts_;
  std::unordered_map<std::string, const CompiledVirtualHost*> exact_;
  std::vector<std::pair<std::string, const CompiledVirtualHost*>> suffix_;  // "*.foo.com" -> ".foo.com", longest first
  std::vector<std::pair<std::string, const CompiledVirtualHost*>> prefix_;  // "foo.*" -> "foo.", longest first
  const CompiledVirtualHost* any_ = nullptr;
};

// Applies header rules. Callers apply the route's first, then the virtual
// host's, then the route configuration's: Envoy's default order (with
// most_specific_header_mutations_wins false), so with OVERWRITE the least
// specific level wins. Within one level: the removals, then the adds with
// Envoy's HeaderParser semantics (see apply_header_adds).
void apply_header_adds(const std::vector<config::HeaderValueOption>& adds, http::HeaderList& headers);
void apply_header_rules_request(const config::HeaderRules& rules, http::HeaderList& headers);
void apply_header_rules_response(const config::HeaderRules& rules, http::HeaderList& headers);

}  // namespace dpukit::mesh
