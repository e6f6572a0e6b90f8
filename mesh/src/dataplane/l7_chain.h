// The L7 processing modules between the parser and the deparser, as
// functions of a request's metadata: <parser, (match, action)*>. They read
// only the compiled tables and the request, and write only the request and
// the returned decision, so either execution model can run them — inline on
// the connection's worker (run-to-completion) or on a stage thread of its own.
#pragma once

#include <cstdint>
#include <string>

#include "dataplane/snapshot.h"
#include "http/http1.h"

namespace dpukit::mesh {

// The random draws a request may need, taken by the connection's thread
// (the modules own no random state).
struct Draws {
  uint64_t rate_limit, cluster, lb, request_id_a, request_id_b;
};

struct RouteDecision {
  // kForward: send to `cluster` (load balancing on first use of an upstream);
  // kLocalReply: answer `status` with `body` here.
  enum class Kind { kForward, kLocalReply };
  Kind kind = Kind::kLocalReply;
  unsigned status = 0;
  std::string body;
  http::HeaderList extra;      // headers for the local reply
  bool direct = false;         // a direct_response: the route's response header rules apply
  const CompiledVirtualHost* vhost = nullptr;
  const CompiledRoute* route = nullptr;
  ClusterRuntime* cluster = nullptr;
  LbContext lb;
  // What happened, for the statistics the connection's thread writes.
  uint32_t rl_enabled = 0, rl_ok = 0, rl_rate_limited = 0, rl_enforced = 0;
  bool no_route = false;
  // Time in each module.
  uint64_t filter_ns = 0, router_ns = 0;
};

// The filter module (local rate limits, the upgrade refusal) then the router
// module (Algorithm 1: route by path, header rules, rewrite, cluster choice).
// `peer` is the client's address (for x-forwarded-for and source_ip hashing).
RouteDecision filter_and_route(const HcmRuntime& hcm, http::RequestHead& head, const std::string& peer,
                               const Draws& draws, int64_t t0_ns);

// Applies the decision's counters to the connection manager's statistics.
void count_decision(const RouteDecision& d, HttpStats& stats);

// The response side of the router module: the route's, the virtual host's
// and the route configuration's response header rules.
void apply_response_rules(const RouteDecision& d, const HcmRuntime& hcm, http::HeaderList& headers);

}  // namespace dpukit::mesh
