// The configuration plane: an Envoy v3 bootstrap (YAML), the subset people
// write, read into plain structs with Envoy's field names and defaults.
//
// Strict by design: an unknown field is an error naming its path
// ("static_resources.clusters[0].lb_polcy: unknown field"), a field Envoy has
// but we do not implement is refused by name ("...: not supported by
// dpukit-mesh"), and nothing is silently ignored. Errors are ConfigError.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/tls_config.h"
#include "config/xds_config.h"

namespace dpukit::mesh::config {

// A fault in a configuration: `path` is where (dotted, with [i] for list
// items), what() is "<path>: <reason>".
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string path, const std::string& reason)
      : std::runtime_error(path.empty() ? reason : path + ": " + reason), path_(std::move(path)) {}
  // With the YAML line (1-based): what() is "<path> (line N): <reason>", path() stays bare.
  ConfigError(std::string path, int line, const std::string& reason)
      : std::runtime_error((path.empty() ? "line " + std::to_string(line) : path + " (line " + std::to_string(line) + ")") +
                           ": " + reason),
        path_(std::move(path)),
        line_(line) {}
  const std::string& path() const { return path_; }
  int line() const { return line_; }  // 0 when unknown

 private:
  std::string path_;
  int line_ = 0;
};

using Duration = std::chrono::milliseconds;  // Envoy durations ("1.5s", or {seconds, nanos}), to ms

// address: {socket_address: {address, port_value}} or {pipe: {path}} (a Unix socket).
struct Address {
  std::string ip;         // socket_address.address (an IP literal, or a DNS name for STRICT_DNS)
  uint16_t port = 0;      // socket_address.port_value
  std::string pipe_path;  // pipe.path; non-empty means a Unix domain socket
  // An upstream pipe that is a service's attach point: the bytes go through
  // shared-memory rings (socket direct). Set by the lb_endpoint's metadata
  // filter_metadata: {dpukit.mesh: {attach: shm}}.
  bool shm_attach = false;
  bool is_pipe() const { return !pipe_path.empty(); }
  // "ip:port" or "unix:path": one string per bindable address.
  std::string key() const { return is_pipe() ? "unix:" + pipe_path : ip + ":" + std::to_string(port); }
};

struct HeaderValueOption {  // request_headers_to_add[i]
  std::string key, value;   // header.key, header.value
  // append_action: APPEND_IF_EXISTS_OR_ADD (default), ADD_IF_ABSENT,
  // OVERWRITE_IF_EXISTS_OR_ADD, OVERWRITE_IF_EXISTS; the legacy `append: bool`
  // maps true -> APPEND_IF_EXISTS_OR_ADD, false -> OVERWRITE_IF_EXISTS_OR_ADD.
  enum class Action { kAppendIfExistsOrAdd, kAddIfAbsent, kOverwriteIfExistsOrAdd, kOverwriteIfExists };
  Action action = Action::kAppendIfExistsOrAdd;
};

// Header rules that a route, a virtual host or a route configuration carries.
struct HeaderRules {
  std::vector<HeaderValueOption> request_headers_to_add;
  std::vector<std::string> request_headers_to_remove;
  std::vector<HeaderValueOption> response_headers_to_add;
  std::vector<std::string> response_headers_to_remove;
};

// envoy.config.route.v3.HeaderMatcher: string_match {exact|prefix|suffix|
// contains|safe_regex, ignore_case}, present_match, invert_match.
struct HeaderMatcher {
  std::string name;
  enum class Kind { kExact, kPrefix, kSuffix, kContains, kSafeRegex, kPresent };
  Kind kind = Kind::kPresent;
  std::string value;         // the string or the regex (RE2 syntax; we use std::regex ECMAScript, see docs)
  bool ignore_case = false;  // string_match.ignore_case (not with safe_regex)
  bool present = true;       // present_match's value
  bool invert = false;       // invert_match
};

struct RouteMatch {
  enum class Kind { kPrefix, kPath, kSafeRegex };
  Kind kind = Kind::kPrefix;
  std::string value;          // the prefix, the exact path, or the regex (matched against the whole path)
  bool case_sensitive = true;  // case_sensitive (default true); not with safe_regex
  std::vector<HeaderMatcher> headers;
  // query_parameters: QueryParameterMatcher {name, string_match | present_match}, in a
  // HeaderMatcher (invert is never set): the query parameter's first value is matched.
  std::vector<HeaderMatcher> query_parameters;
};

struct RetryPolicy {
  bool on_5xx = false;              // retry_on contains "5xx"
  bool on_gateway_error = false;    // "gateway-error": 502, 503, 504
  bool on_connect_failure = false;  // "connect-failure"
  bool on_reset = false;            // "reset"
  bool on_retriable_4xx = false;    // "retriable-4xx": 409
  uint32_t num_retries = 1;         // Envoy's default when retry_policy is present
  Duration per_try_timeout{0};      // 0: the route's timeout applies to each try
};

struct WeightedCluster {
  std::string name;
  uint32_t weight = 0;
};

// hash_policy entries (for RING_HASH): a header's value, or the source IP.
struct HashPolicy {
  enum class Kind { kHeader, kSourceIp };
  Kind kind = Kind::kHeader;
  std::string header_name;
  bool terminal = false;
};

struct RouteAction {
  std::string cluster;                    // exactly one of cluster /
  std::vector<WeightedCluster> weighted;  // weighted_clusters.clusters
  Duration timeout{15000};                // Envoy's default 15 s; 0 disables
  std::optional<RetryPolicy> retry_policy;
  std::optional<std::string> prefix_rewrite;
  std::vector<HashPolicy> hash_policy;
};

struct DirectResponse {
  uint32_t status = 200;
  std::string body;  // body.inline_string
};

struct Route {
  std::string name;
  RouteMatch match;
  std::optional<RouteAction> route;                // exactly one of route /
  std::optional<DirectResponse> direct_response;  // direct_response
  HeaderRules headers;
};

struct VirtualHost {
  std::string name;
  std::vector<std::string> domains;  // "*", "*.suffix", "prefix*", exact; an optional ":port" is part of the domain
  std::vector<Route> routes;
  HeaderRules headers;
  bool include_request_attempt_count = false;  // x-envoy-attempt-count on upstream requests
};

struct RouteConfiguration {
  std::string name;
  std::vector<VirtualHost> virtual_hosts;
  HeaderRules headers;
};

// envoy.filters.http.local_ratelimit
struct LocalRateLimit {
  std::string stat_prefix;
  uint32_t max_tokens = 0;       // token_bucket.max_tokens (required, > 0)
  uint32_t tokens_per_fill = 1;  // token_bucket.tokens_per_fill (default 1)
  Duration fill_interval{0};     // token_bucket.fill_interval (required, >= 50 ms as in Envoy)
  // filter_enabled / filter_enforced: default_value as a fraction of
  // requests. Envoy's default when absent is 0 % for both (the filter does nothing).
  double enabled_fraction = 0.0;
  double enforced_fraction = 0.0;
  std::vector<HeaderValueOption> response_headers_to_add;  // on a limited (429) response
};

// envoy.config.rbac.v3: a permission (what is asked) or a principal (who
// asks), a tree of matchers. One struct for both: the kinds a permission
// takes and those a principal takes are disjoint but for any, header,
// url_path and the combinators.
struct RbacMatcher {
  enum class Kind {
    kAny,
    kAnd,                  // and_rules / and_ids
    kOr,                   // or_rules / or_ids
    kNot,                  // not_rule / not_id
    kHeader,               // header (":path", ":method", ":authority" name pseudo-headers)
    kUrlPath,              // url_path.path, against the path without the query
    kDestinationIp,        // destination_ip: the local address the connection reached
    kDestinationPort,      // destination_port
    kDestinationPortRange, // destination_port_range [start, end)
    kRequestedServerName,  // requested_server_name: the TLS SNI ("" without)
    kAuthenticated,        // authenticated: a TLS peer; principal_name against its URI SANs, else DNS SANs, else subject
    kDirectRemoteIp,       // direct_remote_ip (and the deprecated source_ip): the peer's address
    kRemoteIp,             // remote_ip: the peer's address (x-forwarded-for is not trusted here)
  };
  Kind kind = Kind::kAny;
  std::vector<RbacMatcher> children;  // kAnd, kOr: any number; kNot: one
  HeaderMatcher header;               // kHeader; kUrlPath, kRequestedServerName, kAuthenticated: the string matcher (name "")
  bool has_string = false;            // kAuthenticated: principal_name given
  std::string cidr;                   // kDestinationIp, kDirectRemoteIp, kRemoteIp: address_prefix
  uint32_t prefix_len = 0;            //   and prefix_len
  uint32_t port = 0, port_end = 0;    // kDestinationPort; kDestinationPortRange [port, port_end)
};

struct RbacPolicy {
  std::string name;
  std::vector<RbacMatcher> permissions, principals;  // a policy matches when one of each does
};

struct RbacRules {
  enum class Action { kAllow, kDeny, kLog };
  Action action = Action::kAllow;
  std::vector<RbacPolicy> policies;  // in name order, as Envoy's map
};

// envoy.extensions.filters.http.rbac.v3.RBAC: enforced rules, and shadow
// rules that are only counted. No rules: every request passes.
struct Rbac {
  std::optional<RbacRules> rules, shadow_rules;
  std::string rules_stat_prefix, shadow_rules_stat_prefix;
};

struct HttpFilter {
  enum class Kind { kLocalRateLimit, kRbac, kRouter };
  Kind kind = Kind::kRouter;
  std::string name;  // as written
  std::optional<LocalRateLimit> local_ratelimit;
  std::optional<Rbac> rbac;
};

// envoy.config.accesslog.v3.AccessLog: envoy.access_loggers.file (a path)
// or envoy.access_loggers.stdout / .stderr, with a SubstitutionFormatString:
// a text format (text_format_source.inline_string, or the deprecated
// text_format), a json_format (a structure whose string leaves are
// formats), or none (Envoy's default line). Filters are refused.
struct AccessLog {
  enum class Sink { kFile, kStdout, kStderr };
  std::string name;  // as written
  Sink sink = Sink::kFile;
  std::string path;                        // kFile
  std::optional<std::string> text_format;  // absent with json_format, or for the default line
  std::optional<nlohmann::json> json_format;
  bool omit_empty_values = false;
};

// envoy.config.core.v3.Http2ProtocolOptions, the fields people set, with
// Envoy 1.40's defaults (what its SETTINGS frame advertises).
struct Http2ProtocolOptions {
  uint32_t max_concurrent_streams = 1024;                      // 1 .. 2^31-1
  uint32_t initial_stream_window_size = 16 * 1024 * 1024;      // 65535 .. 2^31-1
  uint32_t initial_connection_window_size = 24 * 1024 * 1024;  // 65535 .. 2^31-1
  // connection_keepalive (envoy.config.core.v3.KeepaliveSettings): a PING
  // every `interval`, the connection dropped when one goes unanswered for
  // `timeout`. Honoured on an upstream cluster's connections (the data
  // plane's, the ADS and SDS streams'); refused on a listener.
  struct Keepalive {
    Duration interval{0};
    Duration timeout{0};
  };
  std::optional<Keepalive> connection_keepalive;
};

// envoy.filters.network.http_connection_manager
struct HttpConnectionManager {
  std::string stat_prefix;
  enum class Codec { kAuto, kHttp1, kHttp2 };
  Codec codec_type = Codec::kAuto;
  RouteConfiguration route_config;  // inline route_config (rds is refused)
  std::vector<HttpFilter> http_filters;  // must end with envoy.filters.http.router
  // Limits and timeouts, with Envoy's defaults.
  uint32_t max_request_headers_kb = 60;       // max_request_headers_kb
  uint32_t max_headers_count = 100;           // common_http_protocol_options.max_headers_count
  Duration idle_timeout{3600 * 1000};         // common_http_protocol_options.idle_timeout (1 h)
  Duration stream_idle_timeout{300 * 1000};   // stream_idle_timeout (5 min)
  Duration request_timeout{0};                // request_timeout (0: disabled)
  Duration request_headers_timeout{0};        // request_headers_timeout (0: disabled)
  bool use_remote_address = false;
  bool generate_request_id = true;
  // http_protocol_options (Http1ProtocolOptions): HTTP/1.0 requests are
  // answered 426 unless accept_http_10; one without a Host gets
  // default_host_for_http_10, or 400 when that is empty (Envoy's rules).
  bool accept_http_10 = false;
  std::string default_host_for_http_10;
  Http2ProtocolOptions http2_protocol_options;  // for HTTP/2 clients (codec_type HTTP2, or AUTO with the preface)
  std::vector<AccessLog> access_log;  // a line per request
};

// envoy.filters.network.tcp_proxy
struct TcpProxy {
  std::string stat_prefix;
  std::string cluster;                    // exactly one of cluster /
  std::vector<WeightedCluster> weighted;  // weighted_clusters.clusters
  Duration idle_timeout{3600 * 1000};     // Envoy's default 1 h
  uint32_t max_connect_attempts = 1;
  std::vector<AccessLog> access_log;  // a line per connection
};

struct NetworkFilter {
  enum class Kind { kHttpConnectionManager, kTcpProxy };
  Kind kind = Kind::kHttpConnectionManager;
  std::string name;
  std::optional<HttpConnectionManager> hcm;
  std::optional<TcpProxy> tcp_proxy;
};

// envoy.extensions.filters.network.rbac.v3.RBAC: the same rules, for a
// connection (no HTTP request: header and url_path match nothing), checked
// on its first byte (enforcement_type ONE_TIME_ON_FIRST_BYTE, the default).
struct NetworkRbac {
  std::string stat_prefix;  // <stat_prefix>rbac.* statistics (required)
  Rbac rbac;
};

// A listener's filter chain: chosen by its filter_chain_match (tls_config.h),
// with the TLS transport socket or plaintext, ending with the HCM or tcp_proxy.
struct FilterChain {
  std::string name;
  FilterChainMatch match;
  std::optional<DownstreamTlsContext> tls;  // transport_socket: envoy.transport_sockets.tls
  std::vector<NetworkRbac> network_rbacs;   // envoy.filters.network.rbac before tcp_proxy, in order
  std::vector<NetworkFilter> filters;
  // transport_socket_connect_timeout: the TLS handshake's bound. Envoy has
  // none by default; here 15 s, so that a client that stops mid-handshake
  // does not hold a connection for ever.
  Duration transport_socket_connect_timeout{15000};
  // What was written for it, routes aside (a hash): a connection whose chain
  // a reload or an xDS update changes otherwise drains, as Envoy's do; one
  // whose chain only got new routes takes them (inline or by RDS).
  size_t fingerprint = 0;
};

struct Listener {
  std::string name;  // Envoy names a listener without one itself; here it is named by its address (Address::key)
  Address address;
  std::vector<FilterChain> filter_chains;
  bool tls_inspector = false;  // listener_filters: envoy.filters.listener.tls_inspector
  Duration listener_filters_timeout{15000};        // Envoy's default; 0: no bound
  bool continue_on_listener_filters_timeout = false;  // on the timeout: a chain as for plaintext, else close
  uint32_t per_connection_buffer_limit_bytes = 1024 * 1024;
  // What was written for it besides its filter chains (a hash): when that
  // changes, every connection of the listener drains.
  size_t fingerprint = 0;
};

struct Endpoint {
  Address address;
  uint32_t load_balancing_weight = 1;
};

struct CircuitBreakerThresholds {  // thresholds[priority DEFAULT]; Envoy's defaults
  uint32_t max_connections = 1024;
  uint32_t max_pending_requests = 1024;
  uint32_t max_requests = 1024;
  uint32_t max_retries = 3;
};

struct OutlierDetection {
  uint32_t consecutive_5xx = 5;
  Duration interval{10000};
  Duration base_ejection_time{30000};
  uint32_t max_ejection_percent = 10;
  uint32_t enforcing_consecutive_5xx = 100;  // percent
};

struct HealthCheck {
  Duration timeout{0};   // required
  Duration interval{0};  // required
  uint32_t unhealthy_threshold = 0;  // required
  uint32_t healthy_threshold = 0;    // required
  std::string path;                  // http_health_check.path (required)
  std::string host;                  // http_health_check.host (default: the cluster's name)
  // expected_statuses: [start, end) ranges; default [200, 201).
  std::vector<std::pair<uint32_t, uint32_t>> expected_statuses;
};

struct Cluster {
  std::string name;
  enum class Type { kStatic, kStrictDns };
  Type type = Type::kStatic;
  Duration connect_timeout{5000};
  enum class LbPolicy { kRoundRobin, kLeastRequest, kRandom, kRingHash };
  LbPolicy lb_policy = LbPolicy::kRoundRobin;
  uint32_t least_request_choice_count = 2;   // least_request_lb_config.choice_count
  uint64_t ring_hash_minimum_ring_size = 1024;  // ring_hash_lb_config.minimum_ring_size
  uint64_t ring_hash_maximum_ring_size = 8 * 1024 * 1024;
  std::vector<Endpoint> endpoints;  // load_assignment.endpoints[*].lb_endpoints[*], flattened
  CircuitBreakerThresholds circuit_breakers;
  std::optional<OutlierDetection> outlier_detection;
  std::vector<HealthCheck> health_checks;
  Duration dns_refresh_rate{5000};  // STRICT_DNS
  bool http2 = false;  // typed_extension_protocol_options ... explicit_http_config.http2_protocol_options
  Http2ProtocolOptions http2_protocol_options;  // its fields, when http2
  std::optional<UpstreamTlsContext> tls;  // transport_socket: envoy.transport_sockets.tls
  // Which parse this is: an xDS cluster keeps its revision while its
  // resources are unchanged (config/xds_assembly.h), so the data plane keeps
  // its runtime; 0 (a file's) is never the same as another.
  uint64_t revision = 0;
};

struct Admin {
  std::optional<Address> address;  // absent: no admin listener
};

struct Node {
  std::string id, cluster;
};

struct Bootstrap {
  Node node;
  std::vector<Listener> listeners;
  std::vector<Cluster> clusters;
  Admin admin;
  std::optional<DynamicResources> dynamic_resources;  // xDS: ADS over gRPC (config/xds_config.h)
};

// Parses YAML text (a whole bootstrap). Throws ConfigError. Cross-checks too:
// every route's cluster exists, names are unique, a filter chain ends in a
// terminal filter, the router filter is last, weights are positive.
Bootstrap parse_bootstrap(const std::string& yaml_text);
// Reads and parses a file; an unreadable file is a ConfigError with an empty path.
Bootstrap load_bootstrap(const std::string& file_path);

// Every TLS context of a bootstrap: the filter chains' and the clusters'.
void for_each_tls(const Bootstrap& b, const std::function<void(const CommonTlsContext&)>& fn);
void for_each_tls(Bootstrap& b, const std::function<void(CommonTlsContext&)>& fn);
// The secrets its TLS contexts take by push (SDS over ADS or gRPC), by the
// stream they come on (SdsSecret::stream()): what to subscribe to.
std::map<std::string, std::set<std::string>> pushed_secret_names(const Bootstrap& b);

// The parsed configuration as JSON with Envoy's field names (admin /config_dump).
nlohmann::json to_json(const Bootstrap& bootstrap);

}  // namespace dpukit::mesh::config
