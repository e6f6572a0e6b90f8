// The parsed bootstrap back in Envoy's v3 shape (admin /config_dump), with
// every default made explicit. It parses again to the same Bootstrap.
#include <cmath>
#include <cstdio>

#include "config/bootstrap.h"
#include "config/checked_yaml.h"

namespace dpukit::mesh::config {
namespace {

using json = nlohmann::json;

json address(const Address& a) {
  if (a.is_pipe()) return {{"pipe", {{"path", a.pipe_path}}}};
  return {{"socket_address", {{"address", a.ip}, {"port_value", a.port}}}};
}

std::string append_action(HeaderValueOption::Action action) {
  switch (action) {
    case HeaderValueOption::Action::kAppendIfExistsOrAdd: return "APPEND_IF_EXISTS_OR_ADD";
    case HeaderValueOption::Action::kAddIfAbsent: return "ADD_IF_ABSENT";
    case HeaderValueOption::Action::kOverwriteIfExistsOrAdd: return "OVERWRITE_IF_EXISTS_OR_ADD";
    case HeaderValueOption::Action::kOverwriteIfExists: return "OVERWRITE_IF_EXISTS";
  }
  return "";
}

json header_options(const std::vector<HeaderValueOption>& options) {
  json out = json::array();
  for (const auto& o : options)
    out.push_back({{"header", {{"key", o.key}, {"value", o.value}}}, {"append_action", append_action(o.action)}});
  return out;
}

void add_header_rules(json& j, const HeaderRules& h) {
  if (!h.request_headers_to_add.empty()) j["request_headers_to_add"] = header_options(h.request_headers_to_add);
  if (!h.request_headers_to_remove.empty()) j["request_headers_to_remove"] = h.request_headers_to_remove;
  if (!h.response_headers_to_add.empty()) j["response_headers_to_add"] = header_options(h.response_headers_to_add);
  if (!h.response_headers_to_remove.empty()) j["response_headers_to_remove"] = h.response_headers_to_remove;
}

json weighted_clusters(const std::vector<WeightedCluster>& weighted) {
  json clusters = json::array();
  for (const auto& w : weighted) clusters.push_back({{"name", w.name}, {"weight", w.weight}});
  return {{"clusters", clusters}};
}

json header_matcher(const HeaderMatcher& m) {
  json j = {{"name", m.name}};
  if (m.invert) j["invert_match"] = true;
  using K = HeaderMatcher::Kind;
  switch (m.kind) {
    case K::kPresent: j["present_match"] = m.present; return j;
    case K::kSafeRegex: j["string_match"] = {{"safe_regex", {{"regex", m.value}}}}; return j;
    case K::kExact: j["string_match"] = {{"exact", m.value}}; break;
    case K::kPrefix: j["string_match"] = {{"prefix", m.value}}; break;
    case K::kSuffix: j["string_match"] = {{"suffix", m.value}}; break;
    case K::kContains: j["string_match"] = {{"contains", m.value}}; break;
  }
  if (m.ignore_case) j["string_match"]["ignore_case"] = true;
  return j;
}

json route_match(const RouteMatch& m) {
  json j;
  switch (m.kind) {
    case RouteMatch::Kind::kPrefix: j["prefix"] = m.value; break;
    case RouteMatch::Kind::kPath: j["path"] = m.value; break;
    case RouteMatch::Kind::kSafeRegex: j["safe_regex"] = {{"regex", m.value}}; break;
  }
  if (m.kind != RouteMatch::Kind::kSafeRegex) j["case_sensitive"] = m.case_sensitive;
  if (!m.headers.empty()) {
    j["headers"] = json::array();
    for (const auto& h : m.headers) j["headers"].push_back(header_matcher(h));
  }
  if (!m.query_parameters.empty()) {
    j["query_parameters"] = json::array();
    for (const auto& q : m.query_parameters) j["query_parameters"].push_back(header_matcher(q));
  }
  return j;
}

std::string retry_on(const RetryPolicy& p) {
  std::string out;
  const auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : ",") + std::string(name);
  };
  add(p.on_5xx, "5xx");
  add(p.on_gateway_error, "gateway-error");
  add(p.on_connect_failure, "connect-failure");
  add(p.on_reset, "reset");
  add(p.on_retriable_4xx, "retriable-4xx");
  return out;
}

json route_action(const RouteAction& a) {
  json j;
  if (!a.cluster.empty()) j["cluster"] = a.cluster;
  else j["weighted_clusters"] = weighted_clusters(a.weighted);
  j["timeout"] = duration_json(a.timeout);
  if (a.retry_policy)
    j["retry_policy"] = {{"retry_on", retry_on(*a.retry_policy)},
                         {"num_retries", a.retry_policy->num_retries},
                         {"per_try_timeout", duration_json(a.retry_policy->per_try_timeout)}};
  if (a.prefix_rewrite) j["prefix_rewrite"] = *a.prefix_rewrite;
  for (const auto& h : a.hash_policy) {
    json p = h.kind == HashPolicy::Kind::kHeader ? json{{"header", {{"header_name", h.header_name}}}}
                                                  : json{{"connection_properties", {{"source_ip", true}}}};
    if (h.terminal) p["terminal"] = true;
    j["hash_policy"].push_back(p);
  }
  return j;
}

json route_config(const RouteConfiguration& rc) {
  json j = {{"name", rc.name}, {"virtual_hosts", json::array()}};
  for (const auto& v : rc.virtual_hosts) {
    json vh = {{"name", v.name}, {"domains", v.domains}, {"routes", json::array()}};
    if (v.include_request_attempt_count) vh["include_request_attempt_count"] = true;
    for (const auto& r : v.routes) {
      json route = {{"match", route_match(r.match)}};
      if (!r.name.empty()) route["name"] = r.name;
      if (r.route) route["route"] = route_action(*r.route);
      if (r.direct_response) {
        route["direct_response"] = {{"status", r.direct_response->status}};
        if (!r.direct_response->body.empty())
          route["direct_response"]["body"] = {{"inline_string", r.direct_response->body}};
      }
      add_header_rules(route, r.headers);
      vh["routes"].push_back(route);
    }
    add_header_rules(vh, v.headers);
    j["virtual_hosts"].push_back(vh);
  }
  add_header_rules(j, rc.headers);
  return j;
}

// A fraction as Envoy's FractionalPercent, in millionths.
json fractional_percent(double fraction) {
  return {{"default_value", {{"numerator", std::lround(fraction * 1'000'000)}, {"denominator", "MILLION"}}}};
}

json string_matcher(const HeaderMatcher& m) {  // the string_match part of a HeaderMatcher
  return header_matcher(m).value("string_match", json::object());
}

json rbac_matcher(const RbacMatcher& m, bool permission) {
  using K = RbacMatcher::Kind;
  auto set = [&](const char* perm, const char* princ) {
    json items = json::array();
    for (const auto& c : m.children) items.push_back(rbac_matcher(c, permission));
    return json{{permission ? perm : princ, {{permission ? "rules" : "ids", items}}}};
  };
  auto cidr = [&] { return json{{"address_prefix", m.cidr}, {"prefix_len", m.prefix_len}}; };
  switch (m.kind) {
    case K::kAny: return {{"any", true}};
    case K::kAnd: return set("and_rules", "and_ids");
    case K::kOr: return set("or_rules", "or_ids");
    case K::kNot: return {{permission ? "not_rule" : "not_id", rbac_matcher(m.children.at(0), permission)}};
    case K::kHeader: return {{"header", header_matcher(m.header)}};
    case K::kUrlPath: return {{"url_path", {{"path", string_matcher(m.header)}}}};
    case K::kDestinationIp: return {{"destination_ip", cidr()}};
    case K::kDestinationPort: return {{"destination_port", m.port}};
    case K::kDestinationPortRange: return {{"destination_port_range", {{"start", m.port}, {"end", m.port_end}}}};
    case K::kRequestedServerName: return {{"requested_server_name", string_matcher(m.header)}};
    case K::kAuthenticated:
      return {{"authenticated", m.has_string ? json{{"principal_name", string_matcher(m.header)}} : json::object()}};
    case K::kDirectRemoteIp: return {{"direct_remote_ip", cidr()}};
    case K::kRemoteIp: return {{"remote_ip", cidr()}};
  }
  return {};
}

json rbac_rules(const RbacRules& r) {
  static constexpr const char* kAction[] = {"ALLOW", "DENY", "LOG"};
  json policies = json::object();
  for (const auto& p : r.policies) {
    json perms = json::array(), princs = json::array();
    for (const auto& m : p.permissions) perms.push_back(rbac_matcher(m, true));
    for (const auto& m : p.principals) princs.push_back(rbac_matcher(m, false));
    policies[p.name] = {{"permissions", perms}, {"principals", princs}};
  }
  return {{"action", kAction[static_cast<int>(r.action)]}, {"policies", policies}};
}

json http_filter(const HttpFilter& f) {
  if (f.kind == HttpFilter::Kind::kRouter)
    return {{"name", f.name}, {"typed_config", {{"@type", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}};
  if (f.kind == HttpFilter::Kind::kRbac) {
    const Rbac& r = *f.rbac;
    json c = {{"@type", "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"}};
    if (r.rules) c["rules"] = rbac_rules(*r.rules);
    if (r.shadow_rules) c["shadow_rules"] = rbac_rules(*r.shadow_rules);
    if (!r.rules_stat_prefix.empty()) c["rules_stat_prefix"] = r.rules_stat_prefix;
    if (!r.shadow_rules_stat_prefix.empty()) c["shadow_rules_stat_prefix"] = r.shadow_rules_stat_prefix;
    return {{"name", f.name}, {"typed_config", c}};
  }
  const LocalRateLimit& l = *f.local_ratelimit;
  json c = {{"@type", "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"},
            {"stat_prefix", l.stat_prefix},
            {"token_bucket",
             {{"max_tokens", l.max_tokens}, {"tokens_per_fill", l.tokens_per_fill}, {"fill_interval", duration_json(l.fill_interval)}}},
            {"filter_enabled", fractional_percent(l.enabled_fraction)},
            {"filter_enforced", fractional_percent(l.enforced_fraction)}};
  if (!l.response_headers_to_add.empty()) c["response_headers_to_add"] = header_options(l.response_headers_to_add);
  return {{"name", f.name}, {"typed_config", c}};
}

json http2_options(const Http2ProtocolOptions& o) {
  json j = {{"max_concurrent_streams", o.max_concurrent_streams},
            {"initial_stream_window_size", o.initial_stream_window_size},
            {"initial_connection_window_size", o.initial_connection_window_size}};
  if (const auto& k = o.connection_keepalive)
    j["connection_keepalive"] = {{"interval", duration_json(k->interval)}, {"timeout", duration_json(k->timeout)}};
  return j;
}

json access_logs(const std::vector<AccessLog>& logs) {
  json out = json::array();
  for (const auto& l : logs) {
    json format;
    if (l.json_format) format["json_format"] = *l.json_format;
    else format["text_format_source"] = {{"inline_string", *l.text_format}};
    if (l.omit_empty_values) format["omit_empty_values"] = true;
    json typed;
    switch (l.sink) {
      case AccessLog::Sink::kFile:
        typed = {{"@type", "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"}, {"path", l.path}};
        break;
      case AccessLog::Sink::kStdout:
        typed = {{"@type", "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"}};
        break;
      case AccessLog::Sink::kStderr:
        typed = {{"@type", "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog"}};
        break;
    }
    typed["log_format"] = std::move(format);
    out.push_back({{"name", l.name}, {"typed_config", std::move(typed)}});
  }
  return out;
}

json hcm(const HttpConnectionManager& h) {
  static constexpr const char* kCodec[] = {"AUTO", "HTTP1", "HTTP2"};
  json j = {{"@type", "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"},
            {"stat_prefix", h.stat_prefix},
            {"codec_type", kCodec[static_cast<int>(h.codec_type)]},
            {"route_config", route_config(h.route_config)},
            {"http_filters", json::array()},
            {"max_request_headers_kb", h.max_request_headers_kb},
            {"common_http_protocol_options",
             {{"idle_timeout", duration_json(h.idle_timeout)}, {"max_headers_count", h.max_headers_count}}},
            {"stream_idle_timeout", duration_json(h.stream_idle_timeout)},
            {"request_timeout", duration_json(h.request_timeout)},
            {"request_headers_timeout", duration_json(h.request_headers_timeout)},
            {"use_remote_address", h.use_remote_address},
            {"generate_request_id", h.generate_request_id},
            {"http_protocol_options",
             {{"accept_http_10", h.accept_http_10}, {"default_host_for_http_10", h.default_host_for_http_10}}}};
  if (h.codec_type != HttpConnectionManager::Codec::kHttp1) j["http2_protocol_options"] = http2_options(h.http2_protocol_options);
  for (const auto& f : h.http_filters) j["http_filters"].push_back(http_filter(f));
  if (!h.access_log.empty()) j["access_log"] = access_logs(h.access_log);
  return j;
}

json tcp_proxy(const TcpProxy& t) {
  json j = {{"@type", "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"},
            {"stat_prefix", t.stat_prefix},
            {"idle_timeout", duration_json(t.idle_timeout)},
            {"max_connect_attempts", t.max_connect_attempts}};
  if (!t.cluster.empty()) j["cluster"] = t.cluster;
  else j["weighted_clusters"] = weighted_clusters(t.weighted);
  if (!t.access_log.empty()) j["access_log"] = access_logs(t.access_log);
  return j;
}

json listener(const Listener& l) {
  json chains = json::array();
  for (const auto& c : l.filter_chains) {
    json filters = json::array();
    for (const auto& n : c.network_rbacs) {
      json t = {{"@type", "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC"},
                {"stat_prefix", n.stat_prefix}};
      if (n.rbac.rules) t["rules"] = rbac_rules(*n.rbac.rules);
      if (n.rbac.shadow_rules) t["shadow_rules"] = rbac_rules(*n.rbac.shadow_rules);
      if (!n.rbac.shadow_rules_stat_prefix.empty()) t["shadow_rules_stat_prefix"] = n.rbac.shadow_rules_stat_prefix;
      filters.push_back({{"name", "envoy.filters.network.rbac"}, {"typed_config", t}});
    }
    for (const auto& f : c.filters)
      filters.push_back({{"name", f.name}, {"typed_config", f.hcm ? hcm(*f.hcm) : tcp_proxy(*f.tcp_proxy)}});
    json chain = {{"filters", filters}};
    if (!c.name.empty()) chain["name"] = c.name;
    if (json m = to_json(c.match); !m.empty()) chain["filter_chain_match"] = m;
    if (c.tls) chain["transport_socket"] = to_json(*c.tls);
    chain["transport_socket_connect_timeout"] = duration_json(c.transport_socket_connect_timeout);
    chains.push_back(chain);
  }
  json j = {{"name", l.name},
            {"address", address(l.address)},
            {"filter_chains", chains},
            {"per_connection_buffer_limit_bytes", l.per_connection_buffer_limit_bytes}};
  j["listener_filters_timeout"] = duration_json(l.listener_filters_timeout);
  if (l.continue_on_listener_filters_timeout) j["continue_on_listener_filters_timeout"] = true;
  if (l.tls_inspector)
    j["listener_filters"] = json::array(
        {{{"name", "envoy.filters.listener.tls_inspector"},
          {"typed_config", {{"@type", "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"}}}}});
  return j;
}

json cluster(const Cluster& c) {
  static constexpr const char* kType[] = {"STATIC", "STRICT_DNS"};
  static constexpr const char* kLbPolicy[] = {"ROUND_ROBIN", "LEAST_REQUEST", "RANDOM", "RING_HASH"};
  json endpoints = json::array();
  for (const auto& e : c.endpoints)
    endpoints.push_back({{"endpoint", {{"address", address(e.address)}}}, {"load_balancing_weight", e.load_balancing_weight}});
  const auto& cb = c.circuit_breakers;
  json j = {{"name", c.name},
            {"type", kType[static_cast<int>(c.type)]},
            {"connect_timeout", duration_json(c.connect_timeout)},
            {"lb_policy", kLbPolicy[static_cast<int>(c.lb_policy)]},
            {"load_assignment", {{"cluster_name", c.name}, {"endpoints", json::array({{{"lb_endpoints", endpoints}}})}}},
            {"circuit_breakers",
             {{"thresholds", json::array({{{"priority", "DEFAULT"},
                                           {"max_connections", cb.max_connections},
                                           {"max_pending_requests", cb.max_pending_requests},
                                           {"max_requests", cb.max_requests},
                                           {"max_retries", cb.max_retries}}})}}}};
  if (c.lb_policy == Cluster::LbPolicy::kLeastRequest)
    j["least_request_lb_config"] = {{"choice_count", c.least_request_choice_count}};
  if (c.lb_policy == Cluster::LbPolicy::kRingHash)  // uint64: strings in proto-JSON
    j["ring_hash_lb_config"] = {{"minimum_ring_size", std::to_string(c.ring_hash_minimum_ring_size)},
                                {"maximum_ring_size", std::to_string(c.ring_hash_maximum_ring_size)}};
  if (c.outlier_detection) {
    const auto& o = *c.outlier_detection;
    j["outlier_detection"] = {{"consecutive_5xx", o.consecutive_5xx},
                              {"interval", duration_json(o.interval)},
                              {"base_ejection_time", duration_json(o.base_ejection_time)},
                              {"max_ejection_percent", o.max_ejection_percent},
                              {"enforcing_consecutive_5xx", o.enforcing_consecutive_5xx}};
  }
  for (const auto& h : c.health_checks) {
    json statuses = json::array();
    for (const auto& [start, end] : h.expected_statuses)
      statuses.push_back({{"start", std::to_string(start)}, {"end", std::to_string(end)}});  // int64: strings
    j["health_checks"].push_back({{"timeout", duration_json(h.timeout)},
                                  {"interval", duration_json(h.interval)},
                                  {"unhealthy_threshold", h.unhealthy_threshold},
                                  {"healthy_threshold", h.healthy_threshold},
                                  {"http_health_check", {{"path", h.path}, {"host", h.host}, {"expected_statuses", statuses}}}});
  }
  if (c.type == Cluster::Type::kStrictDns) j["dns_refresh_rate"] = duration_json(c.dns_refresh_rate);
  if (c.tls) j["transport_socket"] = to_json(*c.tls);
  if (c.http2)
    j["typed_extension_protocol_options"] = {
        {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
         {{"@type", "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"},
          {"explicit_http_config", {{"http2_protocol_options", http2_options(c.http2_protocol_options)}}}}}};
  return j;
}

}  // namespace

nlohmann::json to_json(const Bootstrap& b) {
  json j = {{"node", {{"id", b.node.id}, {"cluster", b.node.cluster}}},
            {"static_resources", {{"listeners", json::array()}, {"clusters", json::array()}}}};
  if (b.admin.address) j["admin"] = {{"address", address(*b.admin.address)}};
  for (const auto& l : b.listeners) j["static_resources"]["listeners"].push_back(listener(l));
  for (const auto& c : b.clusters) j["static_resources"]["clusters"].push_back(cluster(c));
  return j;
}

}  // namespace dpukit::mesh::config
