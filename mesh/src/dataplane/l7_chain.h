// The L7 processing modules between the parser and the deparser, as
// functions of a request's metadata: <parser, (match, action)*>. They read
// only the compiled tables and the request, and write only the request and
// the returned decision, so either execution model can run them — inline on
// the connection's worker (run-to-completion) or on a stage thread of its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "dataplane/downstream_stream.h"
#include "dataplane/snapshot.h"
#include "http/http1.h"
#include "modules/access_log.h"
#include "modules/rbac.h"

namespace dpukit::mesh {

// The random draws a request may need, taken by the connection's thread
// (the modules own no random state).
struct Draws {
  uint64_t rate_limit, cluster, lb, request_id_a, request_id_b;
};

// The configuration a connection's next request uses: `newest`'s successor of
// the listener or filter chain that serves the connection (Snapshot::successor),
// else the one it has (its listener or chain went away, or is no longer HTTP).
// The connection's downstream_cx_active moves to the new statistics with it.
void take_newest_config(const std::shared_ptr<const Snapshot>& newest, unsigned worker,
                        std::shared_ptr<const Snapshot>& snapshot, const ListenerRuntime*& lr, const HcmRuntime*& hcm,
                        HttpStats*& stats);

struct RouteDecision {
  // kForward: send to `cluster` (load balancing on first use of an upstream);
  // kLocalReply: answer `status` with `body` here.
  enum class Kind { kForward, kLocalReply };
  Kind kind = Kind::kLocalReply;
  unsigned status = 0;
  std::string body;
  http::HeaderList extra;      // headers for the local reply
  bool direct = false;         // a direct_response: the route's response header rules apply
  std::string details;         // the local reply's %RESPONSE_CODE_DETAILS% ("route_not_found", ...)
  uint32_t flags = 0;          // and its response flags (modules/access_log.h)
  std::string_view routed_cluster;  // a filter's answer: the cluster the route would have taken (for the log)
  const CompiledVirtualHost* vhost = nullptr;
  const CompiledRoute* route = nullptr;
  ClusterRuntime* cluster = nullptr;
  LbContext lb;
  // What happened, for the statistics the connection's thread writes.
  uint32_t rl_enabled = 0, rl_ok = 0, rl_rate_limited = 0, rl_enforced = 0;
  uint32_t rbac_allowed = 0, rbac_denied = 0, rbac_shadow_allowed = 0, rbac_shadow_denied = 0;
  bool no_route = false;
  // Time in each module.
  uint64_t filter_ns = 0, router_ns = 0;
};

// The filter module (local rate limits and RBAC, in the configured order;
// the upgrade refusal) then the router module (Algorithm 1: route by path,
// header rules, rewrite, cluster choice). `conn`: what the connection says
// (the client's address for x-forwarded-for and source_ip hashing; its
// identity and destination for RBAC).
RouteDecision filter_and_route(const HcmRuntime& hcm, http::RequestHead& head, const DownstreamFacts& conn,
                               const Draws& draws, int64_t t0_ns);

// Applies the decision's counters to the connection manager's statistics.
void count_decision(const RouteDecision& d, HttpStats& stats);

// The response side of the router module: the route's, the virtual host's
// and the route configuration's response header rules.
void apply_response_rules(const RouteDecision& d, const HcmRuntime& hcm, http::HeaderList& headers);

// ---- for the router stream (dataplane/router_stream.h): what an upstream attempt's outcome means ----

// Envoy's texts for its local replies about an upstream.
inline constexpr const char* kReplyConnectFailure =
    "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure";
inline constexpr const char* kReplyConnectTimeout =
    "upstream connect error or disconnect/reset before headers. reset reason: connection timeout";
inline constexpr const char* kReplyUpstreamReset =
    "upstream connect error or disconnect/reset before headers. reset reason: connection termination";
inline constexpr const char* kReplyOverflow =
    "upstream connect error or disconnect/reset before headers. reset reason: overflow";
inline constexpr const char* kReplyProtocolError =
    "upstream connect error or disconnect/reset before headers. reset reason: protocol error";

// How an upstream attempt ended, for retry_on.
enum class AttemptOutcome { kConnect, kConnectTimeout, kReset, kProtocol, kPerTryTimeout, kStatus };

// Whether the route's retry_on covers this outcome (`status`: the upstream's, for kStatus).
bool retry_on_covers(const config::RetryPolicy& p, AttemptOutcome why, unsigned status);

// Whether the route retries an attempt that ended so: retry_on covers it and
// num_retries is not used up (`attempts`: tries so far). The caller checks
// the rest: the request still replayable, no response started, the retry
// circuit breaker.
bool retry_wanted(const RouteDecision& d, uint32_t attempts, AttemptOutcome why, unsigned status);
// Whether the route may try a request again at all: only then is its body
// kept after it was sent (Envoy's rule too).
bool route_may_retry(const RouteDecision& d);

// Envoy's back-off before retry number `attempts` (1 after the first try):
// a random time up to 25 ms x 2^(attempts - 1), capped at 250 ms.
inline std::chrono::milliseconds retry_backoff(uint32_t attempts, uint64_t random) {
  uint64_t cap_ms = std::min<uint64_t>(250, 25ull << std::min<uint32_t>(attempts - 1, 4));
  return std::chrono::milliseconds(random % (cap_ms + 1));
}

// The client's IP address of a connected socket ("" for a Unix socket): for
// x-forwarded-for and source_ip hashing.
std::string peer_address(int fd);
// A socket's local address as "ip:port" ("[ip]:port" for IPv6; "" for a Unix socket), for the access log.
std::string local_address_of(int fd);
// What a downstream connection says, read once when it opens: the peer's and
// local addresses, and over TLS the SNI and the peer certificate's SANs and
// subject.
// `inspected`: the listener has a tls_inspector, the only thing that tells
// Envoy the requested server name (without one, RBAC sees "", as Envoy's does).
// `identity`: read the local address, the SNI and the peer certificate
// (only RBAC reads them: without an RBAC filter a connection is spared
// parsing its peer's certificate); otherwise the peer's address alone.
std::shared_ptr<const DownstreamFacts> downstream_facts(DownstreamStream& sock, bool inspected, bool identity);

// The index of a status's class in the *_rq_xx counters (1xx .. 5xx).
inline unsigned status_class(unsigned status) { return std::min(4u, std::max(1u, status / 100) - 1); }

}  // namespace dpukit::mesh
