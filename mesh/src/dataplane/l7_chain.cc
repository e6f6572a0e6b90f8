#include "dataplane/l7_chain.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstdio>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "dpukit/core/accounting.h"

namespace dpukit::mesh {

namespace {

std::string request_id(uint64_t a, uint64_t b) {
  // A version-4 UUID from two random words, as Envoy's x-request-id.
  char out[37];
  b = (b & 0x3fffffffffffffffull) | 0x8000000000000000ull;
  a = (a & 0xffffffffffff0fffull) | 0x0000000000004000ull;
  std::snprintf(out, sizeof out, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xffffffffffffull));
  return out;
}

// "/p?q" of "/p?q" or of "http://host/p?q" ("/?q" of "http://host?q").
std::string origin_form(std::string_view target) {
  size_t scheme_end = target.find("://");
  if (target.empty() || target.front() == '/' || scheme_end == std::string_view::npos) return std::string(target);
  size_t path = target.find_first_of("/?", scheme_end + 3);
  if (path == std::string_view::npos) return "/";
  return (target[path] == '?' ? "/" : "") + std::string(target.substr(path));
}

// A filter answers the request: the statistics counted so far stay with the decision.
void answer(RouteDecision& d, unsigned status, std::string body, std::string details, uint32_t flags = 0) {
  d.kind = RouteDecision::Kind::kLocalReply;
  d.status = status;
  d.body = std::move(body);
  d.details = std::move(details);
  d.flags = flags;
}

// The filter module; returns true when it answered the request itself.
bool run_filters(const HcmRuntime& hcm, const http::RequestHead& head, const DownstreamFacts& conn,
                 const Draws& draws, int64_t now_ns, RouteDecision& d) {
  for (const HcmRuntime::FilterSlot& slot : hcm.filters) {
    if (slot.rbac) {
      const RbacFilter::Verdict v = hcm.rbacs[slot.index]->check(head, conn);
      if (v.shadow_counted) (v.shadow_allowed ? d.rbac_shadow_allowed : d.rbac_shadow_denied)++;
      if (v.counted) (v.allowed ? d.rbac_allowed : d.rbac_denied)++;
      if (v.allowed) continue;
      // Envoy's body, and its details naming the policy (a DENY rule's match; "none" for ALLOW rules no policy matched)
      answer(d, 403, "RBAC: access denied",
             "rbac_access_denied_matched_policy[" + (v.policy.empty() ? std::string("none") : v.policy) + "]");
      return true;
    }
    const auto& rl = hcm.rate_limits[slot.index];
    switch (rl->check(now_ns, draws.rate_limit)) {
      case LocalRateLimit::Verdict::kNotEnabled: break;
      case LocalRateLimit::Verdict::kAllowed:
        d.rl_enabled++;
        d.rl_ok++;
        break;
      case LocalRateLimit::Verdict::kLimitedNotEnforced:
        d.rl_enabled++;
        d.rl_rate_limited++;
        break;
      case LocalRateLimit::Verdict::kLimited:
        d.rl_enabled++;
        d.rl_rate_limited++;
        d.rl_enforced = 1;
        answer(d, 429, "local_rate_limited", "local_rate_limited", response_flag::kRateLimited);
        apply_header_adds(rl->config().response_headers_to_add, d.extra);
        return true;
    }
  }
  if (head.upgrade) {
    answer(d, 403, "upgrade failed", "upgrade_failed");  // no upgrade_configs: Envoy answers so
    return true;
  }
  return false;
}

void route(const HcmRuntime& hcm, http::RequestHead& head, const std::string& peer, const Draws& draws,
           RouteDecision& d) {
  auto m = hcm.routes->match(head);
  if (!m.route) {
    answer(d, 404, "", "route_not_found", response_flag::kNoRouteFound);
    d.no_route = true;
    return;
  }
  d.vhost = m.vhost;
  d.route = m.route;
  const config::Route& r = *m.route->cfg;
  if (r.direct_response) {
    answer(d, r.direct_response->status, r.direct_response->body, "direct_response");
    d.direct = true;
    return;
  }
  // Fields the client named in Connection are hop-by-hop: drop them now, so
  // that one named like a field we add (x-forwarded-proto) cannot remove ours.
  head.headers.remove_connection_named();
  // Request header rules: the route's, the virtual host's, the route configuration's.
  apply_header_rules_request(r.headers, head.headers);
  apply_header_rules_request(m.vhost->cfg->headers, head.headers);
  apply_header_rules_request(hcm.routes->config().headers, head.headers);
  const config::RouteAction& a = *r.route;
  if (a.prefix_rewrite && r.match.kind == config::RouteMatch::Kind::kPrefix) {
    // The prefix matched the path: rewrite it in the origin-form target (an absolute-form one loses its authority).
    std::string origin = origin_form(head.target);
    head.headers.set("x-envoy-original-path", head.target);  // Envoy's, for the upstream and the access log
    head.target = *a.prefix_rewrite + origin.substr(std::min(origin.size(), r.match.value.size()));
  }
  head.headers.set("x-forwarded-proto", "http");
  if (hcm.cfg->use_remote_address && !peer.empty()) {
    // Envoy appends the peer to x-forwarded-for when it is the edge (use_remote_address).
    auto xff = head.headers.get("x-forwarded-for");
    head.headers.set("x-forwarded-for", xff ? std::string(*xff) + ", " + peer : peer);
  }
  if (hcm.cfg->generate_request_id && !head.headers.get("x-request-id"))
    head.headers.add("x-request-id", request_id(draws.request_id_a, draws.request_id_b));
  if (a.timeout.count() > 0) head.headers.set("x-envoy-expected-rq-timeout-ms", std::to_string(a.timeout.count()));
  if (m.vhost->cfg->include_request_attempt_count) head.headers.set("x-envoy-attempt-count", "1");
  d.lb.random = draws.lb;
  for (const auto& hp : a.hash_policy) {
    if (hp.kind == config::HashPolicy::Kind::kHeader) {
      if (auto v = head.headers.get(hp.header_name)) {
        d.lb.has_hash = true;
        d.lb.hash = lb_hash(*v);
      }
    } else if (!peer.empty()) {
      d.lb.has_hash = true;
      d.lb.hash = lb_hash(peer);
    }
    if (d.lb.has_hash && hp.terminal) break;
  }
  d.kind = RouteDecision::Kind::kForward;
  d.cluster = m.route->pick_cluster(draws.cluster);
}

}  // namespace

RouteDecision filter_and_route(const HcmRuntime& hcm, http::RequestHead& head, const DownstreamFacts& conn,
                               const Draws& draws, int64_t t0_ns) {
  const std::string& peer = conn.peer_ip;
  RouteDecision d;
  bool answered = run_filters(hcm, head, conn, draws, t0_ns, d);
  int64_t t1 = static_cast<int64_t>(now_ns());
  d.filter_ns = static_cast<uint64_t>(t1 - t0_ns);
  if (answered) {
    // Envoy picks the route before its filters run: the log names the route and cluster a refused request had.
    if (!hcm.access_logs.empty()) {
      auto m = hcm.routes->match(head);
      d.route = m.route;
      if (m.route && m.route->cfg->route) d.routed_cluster = m.route->pick_cluster(draws.cluster)->name();
    }
    return d;
  }
  route(hcm, head, peer, draws, d);
  d.router_ns = now_ns() - static_cast<uint64_t>(t1);
  return d;
}

void count_decision(const RouteDecision& d, HttpStats& stats) {
  if (d.rl_enabled) stats.rl_enabled.inc(d.rl_enabled);
  if (d.rl_ok) stats.rl_ok.inc(d.rl_ok);
  if (d.rl_rate_limited) stats.rl_rate_limited.inc(d.rl_rate_limited);
  if (d.rl_enforced) stats.rl_enforced.inc(d.rl_enforced);
  if (d.rbac_allowed) stats.rbac_allowed.inc(d.rbac_allowed);
  if (d.rbac_denied) stats.rbac_denied.inc(d.rbac_denied);
  if (d.rbac_shadow_allowed) stats.rbac_shadow_allowed.inc(d.rbac_shadow_allowed);
  if (d.rbac_shadow_denied) stats.rbac_shadow_denied.inc(d.rbac_shadow_denied);
  if (d.no_route) stats.no_route.inc();
  if (d.direct) stats.rq_direct_response.inc();
}

namespace {
// A socket address's IP as text ("" for a Unix socket), and its port into `port` when given.
std::string address_text(const sockaddr_storage& ss, uint32_t* port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    if (port) *port = ntohs(a.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    if (port) *port = ntohs(a.sin6_port);
  }
  return text;
}
}  // namespace

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 ? address_text(ss, nullptr) : "";
}

std::string local_address_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  uint32_t port = 0;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  std::string ip = address_text(ss, &port);
  if (ip.empty()) return "";
  return (ss.ss_family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

std::shared_ptr<const DownstreamFacts> downstream_facts(DownstreamStream& sock, bool inspected, bool identity) {
  auto f = std::make_shared<DownstreamFacts>();
  const int fd = sock.native_handle();
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) f->peer_ip = address_text(ss, &f->peer_port);
  if (!identity) return f;
  f->identity = true;
  ss = {};
  len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) f->local_ip = address_text(ss, &f->local_port);
  if (TlsStream* tls = sock.tls()) {
    SSL* ssl = tls->ssl();
    f->tls = true;
    f->tls_version = SSL_get_version(ssl);
    if (const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name); sni && inspected) f->sni = sni;
    if (X509* cert = SSL_get1_peer_certificate(ssl)) {
      f->peer_certificate = true;
      if (auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
        for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
          const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
          if (n->type != GEN_URI && n->type != GEN_DNS) continue;
          const ASN1_STRING* s = n->type == GEN_URI ? n->d.uniformResourceIdentifier : n->d.dNSName;
          std::string v(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
          (n->type == GEN_URI ? f->uri_sans : f->dns_sans).push_back(std::move(v));
        }
        GENERAL_NAMES_free(names);
      }
      if (BIO* bio = BIO_new(BIO_s_mem())) {  // Envoy's subjectPeerCertificate: RFC 2253
        X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
        char* data = nullptr;
        long n = BIO_get_mem_data(bio, &data);
        f->subject.assign(data, static_cast<size_t>(n));
        BIO_free(bio);
      }
      X509_free(cert);
    }
  }
  return f;
}

bool retry_on_covers(const config::RetryPolicy& p, AttemptOutcome why, unsigned status) {
  switch (why) {
    case AttemptOutcome::kConnect:
    case AttemptOutcome::kConnectTimeout: return p.on_5xx || p.on_gateway_error || p.on_connect_failure;
    case AttemptOutcome::kReset:
    case AttemptOutcome::kProtocol: return p.on_5xx || p.on_gateway_error || p.on_reset;
    case AttemptOutcome::kPerTryTimeout: return p.on_5xx || p.on_gateway_error;
    case AttemptOutcome::kStatus:
      return (p.on_5xx && status >= 500) || (p.on_gateway_error && (status == 502 || status == 503 || status == 504)) ||
             (p.on_retriable_4xx && status == 409);
  }
  return false;
}

bool retry_wanted(const RouteDecision& d, uint32_t attempts, AttemptOutcome why, unsigned status) {
  const auto& policy = d.route->cfg->route->retry_policy;
  return policy && attempts <= policy->num_retries && retry_on_covers(*policy, why, status);
}

bool route_may_retry(const RouteDecision& d) {
  const auto& policy = d.route->cfg->route->retry_policy;
  return policy && policy->num_retries > 0;
}

void apply_response_rules(const RouteDecision& d, const HcmRuntime& hcm, http::HeaderList& headers) {
  if (!d.route) return;
  apply_header_rules_response(d.route->cfg->headers, headers);
  apply_header_rules_response(d.vhost->cfg->headers, headers);
  apply_header_rules_response(hcm.routes->config().headers, headers);
}

void take_newest_config(const std::shared_ptr<const Snapshot>& newest, unsigned worker,
                        std::shared_ptr<const Snapshot>& snapshot, const ListenerRuntime*& lr, const HcmRuntime*& hcm,
                        HttpStats*& stats) {
  if (newest == snapshot) return;
  const ListenerRuntime* l = newest->successor(*lr);
  if (!l || !l->hcm) return;
  snapshot = newest;
  lr = l;
  hcm = l->hcm.get();
  stats->downstream_cx_active.add(-1);
  stats = hcm->stats[worker];
  stats->downstream_cx_active.add(1);
}

}  // namespace dpukit::mesh
