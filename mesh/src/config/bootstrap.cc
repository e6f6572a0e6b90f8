// Envoy v3 bootstrap YAML -> the structs of bootstrap.h. Each parse_* reads
// one Envoy message through Fields, which refuses keys we do not implement;
// the cross-checks (names, references) run once everything is read.
#include "config/bootstrap.h"
#include "config/xds_assembly.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "config/access_log_format.h"
#include "config/checked_yaml.h"

namespace dpukit::mesh::config {
namespace {

constexpr std::string_view kHcmType =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
constexpr std::string_view kTcpProxyType = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
constexpr std::string_view kLocalRateLimitType =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
constexpr std::string_view kRouterType = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
constexpr std::string_view kHttpRbacType = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";
constexpr std::string_view kNetworkRbacType = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC";
constexpr std::string_view kFileAccessLogType =
    "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog";
constexpr std::string_view kStdoutAccessLogType =
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog";
constexpr std::string_view kStderrAccessLogType =
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog";
constexpr std::string_view kHttpProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
constexpr std::string_view kHttpProtocolOptionsType =
    "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

bool is_ip_literal(const std::string& text) {
  unsigned char buf[16];
  return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

// Envoy compiles regexes with RE2; we use std::regex ECMAScript, whose
// common subset with RE2 (classes, anchors, alternation, counted
// repetition) is what routes use. RE2-only syntax such as (?P<name>) fails here.
void check_regex(const At& at, const std::string& regex) {
  try {
    std::regex compiled(regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    at.fail("invalid regex '" + regex + "': " + e.what());
  }
}

std::string parse_regex(const At& at) {  // envoy.type.matcher.v3.RegexMatcher
  const Fields f = at.fields("envoy.type.matcher.v3.RegexMatcher", {"regex"});
  const At regex = f.required("regex");
  std::string value = regex.nonempty_str();
  check_regex(regex, value);
  return value;
}

// The @type of a typed_config, which must be `type`.
Fields typed_config(const At& at, std::string_view message, std::string_view type,
                    std::initializer_list<std::string_view> known) {
  const Fields f = at.fields(message, known);
  const At type_at = f.required("@type");
  if (type_at.str() != type) type_at.fail("expected " + std::string(type) + ", got '" + type_at.str() + "'");
  return f;
}

Address parse_address(const At& at) {
  const Fields f = at.fields("envoy.config.core.v3.Address", {"socket_address", "pipe"});
  Address address;
  if (f.exactly_one_of({"socket_address", "pipe"}) == "pipe") {
    const Fields pipe = f["pipe"].fields("envoy.config.core.v3.Pipe", {"path"});
    address.pipe_path = pipe.required("path").nonempty_str();
    return address;
  }
  const Fields sa = f["socket_address"].fields("envoy.config.core.v3.SocketAddress", {"address", "port_value", "protocol"});
  address.ip = sa.required("address").nonempty_str();
  address.port = static_cast<uint16_t>(sa.required("port_value").u32(1, 65535));
  if (sa.has("protocol")) sa["protocol"].choice<int>({{"TCP", 0}}, {"UDP"});
  return address;
}

// A listener's or the admin's address: no DNS names.
Address parse_bind_address(const At& at) {
  Address address = parse_address(at);
  if (!address.is_pipe() && !is_ip_literal(address.ip))
    at.fail("address '" + address.ip + "' is not an IP address");
  return address;
}

// --- header rules -----------------------------------------------------------

HeaderValueOption parse_header_value_option(const At& at) {
  const Fields f = at.fields("envoy.config.core.v3.HeaderValueOption", {"header", "append", "append_action"});
  const Fields header = f.required("header").fields("envoy.config.core.v3.HeaderValue", {"key", "value"});
  HeaderValueOption option;
  option.key = header.required("key").nonempty_str();
  option.value = header["value"].str_or("");
  using A = HeaderValueOption::Action;
  if (f.has("append") && f.has("append_action")) f.self().fail("append and append_action both given");
  if (f.has("append"))
    option.action = f["append"].boolean() ? A::kAppendIfExistsOrAdd : A::kOverwriteIfExistsOrAdd;
  if (f.has("append_action"))
    option.action = f["append_action"].choice<A>({{"APPEND_IF_EXISTS_OR_ADD", A::kAppendIfExistsOrAdd},
                                                   {"ADD_IF_ABSENT", A::kAddIfAbsent},
                                                   {"OVERWRITE_IF_EXISTS_OR_ADD", A::kOverwriteIfExistsOrAdd},
                                                   {"OVERWRITE_IF_EXISTS", A::kOverwriteIfExists}},
                                                  {});
  return option;
}

std::vector<HeaderValueOption> parse_header_value_options(const At& at) {
  std::vector<HeaderValueOption> out;
  if (at.present())
    for (const At& item : at.items()) out.push_back(parse_header_value_option(item));
  return out;
}

std::vector<std::string> parse_header_names(const At& at) {
  std::vector<std::string> out;
  if (at.present())
    for (const At& item : at.items()) out.push_back(item.nonempty_str());
  return out;
}

// request_headers_to_add/remove and response_headers_to_add/remove.
HeaderRules parse_header_rules(const Fields& f) {
  return HeaderRules{parse_header_value_options(f["request_headers_to_add"]),
                     parse_header_names(f["request_headers_to_remove"]),
                     parse_header_value_options(f["response_headers_to_add"]),
                     parse_header_names(f["response_headers_to_remove"])};
}

#define HEADER_RULE_FIELDS \
  "request_headers_to_add", "request_headers_to_remove", "response_headers_to_add", "response_headers_to_remove"

// --- routes -----------------------------------------------------------------

void parse_string_match(const Fields& f, HeaderMatcher& m);

HeaderMatcher parse_header_matcher(const At& at) {
  const Fields f =
      at.fields("envoy.config.route.v3.HeaderMatcher", {"name", "string_match", "present_match", "invert_match"});
  HeaderMatcher m;
  m.name = f.required("name").nonempty_str();
  m.invert = f["invert_match"].boolean_or(false);
  const auto which = f.one_of({"string_match", "present_match"});
  if (which == "present_match") {  // absent: Envoy matches on the header's presence
    m.present = f["present_match"].boolean();
    return m;
  }
  if (!which) return m;
  parse_string_match(f, m);
  return m;
}

HeaderMatcher parse_query_parameter_matcher(const At& at) {
  const Fields f =
      at.fields("envoy.config.route.v3.QueryParameterMatcher", {"name", "string_match", "present_match"});
  HeaderMatcher m;
  m.name = f.required("name").nonempty_str();
  if (f.exactly_one_of({"string_match", "present_match"}) == "present_match") {
    m.present = f["present_match"].boolean();
    if (!m.present) f["present_match"].fail("present_match: false matches nothing in Envoy");
    return m;
  }
  parse_string_match(f, m);
  return m;
}

void parse_string_matcher(const At& at, HeaderMatcher& m);

// string_match {exact|prefix|suffix|contains|safe_regex, ignore_case} into `m`.
void parse_string_match(const Fields& f, HeaderMatcher& m) { parse_string_matcher(f["string_match"], m); }

// An envoy.type.matcher.v3.StringMatcher into `m` (its kind, value and ignore_case).
void parse_string_matcher(const At& at, HeaderMatcher& m) {
  using K = HeaderMatcher::Kind;
  const Fields sm = at.fields("envoy.type.matcher.v3.StringMatcher",
                              {"exact", "prefix", "suffix", "contains", "safe_regex", "ignore_case"});
  const std::string_view kind = sm.exactly_one_of({"exact", "prefix", "suffix", "contains", "safe_regex"});
  m.ignore_case = sm["ignore_case"].boolean_or(false);
  if (kind == "safe_regex") {
    if (m.ignore_case) sm["ignore_case"].fail("ignore_case has no effect for safe_regex");  // as in Envoy
    m.kind = K::kSafeRegex;
    m.value = parse_regex(sm["safe_regex"]);
    return;
  }
  m.kind = kind == "exact" ? K::kExact : kind == "prefix" ? K::kPrefix : kind == "suffix" ? K::kSuffix : K::kContains;
  m.value = sm[kind].str();
}

RouteMatch parse_route_match(const At& at) {
  const Fields f =
      at.fields("envoy.config.route.v3.RouteMatch",
                {"prefix", "path", "safe_regex", "case_sensitive", "headers", "query_parameters"});
  RouteMatch m;
  const std::string_view kind = f.exactly_one_of({"prefix", "path", "safe_regex"});
  m.case_sensitive = f["case_sensitive"].boolean_or(true);
  if (kind == "safe_regex") {
    // Envoy ignores case_sensitive for regexes; we refuse what would be ignored.
    if (!m.case_sensitive) f["case_sensitive"].fail("case_sensitive has no effect for safe_regex");
    m.kind = RouteMatch::Kind::kSafeRegex;
    m.value = parse_regex(f["safe_regex"]);
  } else {
    m.kind = kind == "prefix" ? RouteMatch::Kind::kPrefix : RouteMatch::Kind::kPath;
    m.value = f[kind].str();
  }
  if (f.has("headers"))
    for (const At& item : f["headers"].items()) m.headers.push_back(parse_header_matcher(item));
  if (f.has("query_parameters"))
    for (const At& item : f["query_parameters"].items())
      m.query_parameters.push_back(parse_query_parameter_matcher(item));
  return m;
}

std::vector<WeightedCluster> parse_weighted_clusters(const At& at, std::string_view message,
                                                     std::string_view weight_message) {
  const Fields f = at.fields(message, {"clusters"});
  std::vector<WeightedCluster> out;
  for (const At& item : f.required("clusters").items()) {
    const Fields c = item.fields(weight_message, {"name", "weight"});
    out.push_back({c.required("name").nonempty_str(), c.required("weight").u32(1)});
  }
  if (out.empty()) f["clusters"].fail("at least one cluster is required");
  return out;
}

RetryPolicy parse_retry_policy(const At& at) {
  const Fields f = at.fields("envoy.config.route.v3.RetryPolicy", {"retry_on", "num_retries", "per_try_timeout"});
  RetryPolicy p;
  const At retry_on = f.required("retry_on");
  std::stringstream list(retry_on.nonempty_str());
  for (std::string item; std::getline(list, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item == "5xx") p.on_5xx = true;
    else if (item == "gateway-error") p.on_gateway_error = true;
    else if (item == "connect-failure") p.on_connect_failure = true;
    else if (item == "reset") p.on_reset = true;
    else if (item == "retriable-4xx") p.on_retriable_4xx = true;
    else retry_on.fail("'" + item + "' is not supported by dpukit-mesh");  // Envoy would silently ignore a typo
  }
  p.num_retries = f["num_retries"].u32_or(p.num_retries);
  p.per_try_timeout = f["per_try_timeout"].duration_or(p.per_try_timeout);
  return p;
}

HashPolicy parse_hash_policy(const At& at) {
  const Fields f =
      at.fields("envoy.config.route.v3.RouteAction.HashPolicy", {"header", "connection_properties", "terminal"});
  HashPolicy h;
  h.terminal = f["terminal"].boolean_or(false);
  if (f.exactly_one_of({"header", "connection_properties"}) == "header") {
    const Fields header = f["header"].fields("envoy.config.route.v3.RouteAction.HashPolicy.Header", {"header_name"});
    h.header_name = header.required("header_name").nonempty_str();
    return h;
  }
  const Fields cp = f["connection_properties"].fields(
      "envoy.config.route.v3.RouteAction.HashPolicy.ConnectionProperties", {"source_ip"});
  if (!cp.required("source_ip").boolean()) cp["source_ip"].fail("source_ip: false hashes nothing");
  h.kind = HashPolicy::Kind::kSourceIp;
  return h;
}

RouteAction parse_route_action(const At& at) {
  const Fields f = at.fields("envoy.config.route.v3.RouteAction", {"cluster", "weighted_clusters", "timeout",
                                                                   "retry_policy", "prefix_rewrite", "hash_policy"});
  RouteAction a;
  if (f.exactly_one_of({"cluster", "weighted_clusters"}) == "cluster")
    a.cluster = f["cluster"].nonempty_str();
  else
    a.weighted = parse_weighted_clusters(f["weighted_clusters"], "envoy.config.route.v3.WeightedCluster",
                                         "envoy.config.route.v3.WeightedCluster.ClusterWeight");
  a.timeout = f["timeout"].duration_or(a.timeout);
  if (f.has("retry_policy")) a.retry_policy = parse_retry_policy(f["retry_policy"]);
  if (f.has("prefix_rewrite")) a.prefix_rewrite = f["prefix_rewrite"].str();
  if (f.has("hash_policy"))
    for (const At& item : f["hash_policy"].items()) a.hash_policy.push_back(parse_hash_policy(item));
  return a;
}

DirectResponse parse_direct_response(const At& at) {
  const Fields f = at.fields("envoy.config.route.v3.DirectResponseAction", {"status", "body"});
  DirectResponse d;
  d.status = f.required("status").u32(200, 599);  // Envoy: [200, 600)
  if (f.has("body"))
    d.body = f["body"].fields("envoy.config.core.v3.DataSource", {"inline_string"}).required("inline_string").str();
  return d;
}

Route parse_route(const At& at) {
  const Fields f = at.fields("envoy.config.route.v3.Route", {"name", "match", "route", "direct_response", HEADER_RULE_FIELDS});
  Route r;
  r.name = f["name"].str_or("");
  r.match = parse_route_match(f.required("match"));
  if (f.exactly_one_of({"route", "direct_response"}) == "route") {
    r.route = parse_route_action(f["route"]);
    // Envoy takes this too, but a regex names no prefix to replace.
    if (r.route->prefix_rewrite && r.match.kind == RouteMatch::Kind::kSafeRegex)
      f["route"].fail("prefix_rewrite needs a prefix or path match, not safe_regex");
  } else {
    r.direct_response = parse_direct_response(f["direct_response"]);
  }
  r.headers = parse_header_rules(f);
  return r;
}

VirtualHost parse_virtual_host(const At& at) {
  const Fields f = at.fields("envoy.config.route.v3.VirtualHost",
                             {"name", "domains", "routes", "include_request_attempt_count", HEADER_RULE_FIELDS});
  VirtualHost v;
  v.name = f.required("name").nonempty_str();
  const At domains = f.required("domains");
  v.domains = domains.strings();
  if (v.domains.empty()) domains.fail("at least one domain is required");
  if (f.has("routes"))
    for (const At& item : f["routes"].items()) v.routes.push_back(parse_route(item));
  v.headers = parse_header_rules(f);
  v.include_request_attempt_count = f["include_request_attempt_count"].boolean_or(false);
  return v;
}

RouteConfiguration parse_route_config(const At& at) {
  const Fields f =
      at.fields("envoy.config.route.v3.RouteConfiguration", {"name", "virtual_hosts", HEADER_RULE_FIELDS});
  RouteConfiguration rc;
  rc.name = f["name"].str_or("");
  std::set<std::string> domains;  // Envoy refuses a domain in two virtual hosts (domains are case-insensitive)
  std::set<std::string> names;
  if (f.has("virtual_hosts")) {
    for (const At& item : f["virtual_hosts"].items()) {
      rc.virtual_hosts.push_back(parse_virtual_host(item));
      if (!names.insert(rc.virtual_hosts.back().name).second)
        item.fail("duplicate virtual host name '" + rc.virtual_hosts.back().name + "'");
      for (std::string domain : rc.virtual_hosts.back().domains) {
        std::transform(domain.begin(), domain.end(), domain.begin(), [](unsigned char c) { return std::tolower(c); });
        if (!domains.insert(domain).second) item.fail("domain '" + domain + "' is given twice (domains are unique across virtual hosts)");
      }
    }
  }
  rc.headers = parse_header_rules(f);
  return rc;
}

// --- HTTP filters -----------------------------------------------------------

double parse_fractional_percent(const At& at) {  // RuntimeFractionalPercent -> a fraction
  // runtime_key is accepted: with no runtime layers (we have none) Envoy uses default_value.
  const Fields f = at.fields("envoy.config.core.v3.RuntimeFractionalPercent", {"default_value", "runtime_key"});
  const Fields value =
      f.required("default_value").fields("envoy.type.v3.FractionalPercent", {"numerator", "denominator"});
  const double denominator =
      value["denominator"].present()
          ? value["denominator"].choice<double>({{"HUNDRED", 100}, {"TEN_THOUSAND", 10'000}, {"MILLION", 1'000'000}}, {})
          : 100;
  return std::min(1.0, value["numerator"].u32_or(0) / denominator);  // Envoy caps the numerator at the denominator
}

LocalRateLimit parse_local_ratelimit(const At& at) {
  const Fields f = typed_config(at, "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
                                kLocalRateLimitType,
                                {"@type", "stat_prefix", "token_bucket", "filter_enabled", "filter_enforced",
                                 "response_headers_to_add"});
  LocalRateLimit l;
  l.stat_prefix = f.required("stat_prefix").nonempty_str();
  const Fields bucket =
      f.required("token_bucket").fields("envoy.type.v3.TokenBucket", {"max_tokens", "tokens_per_fill", "fill_interval"});
  l.max_tokens = bucket.required("max_tokens").u32(1);
  l.tokens_per_fill = bucket["tokens_per_fill"].u32_or(l.tokens_per_fill, 1);
  const At fill = bucket.required("fill_interval");
  l.fill_interval = fill.duration();
  if (l.fill_interval < Duration(50)) fill.fail("fill_interval must be at least 50ms (as in Envoy)");
  if (f.has("filter_enabled")) l.enabled_fraction = parse_fractional_percent(f["filter_enabled"]);
  if (f.has("filter_enforced")) l.enforced_fraction = parse_fractional_percent(f["filter_enforced"]);
  l.response_headers_to_add = parse_header_value_options(f["response_headers_to_add"]);
  return l;
}

// --- RBAC (envoy.config.rbac.v3) ------------------------------------------------

void parse_cidr(const At& at, RbacMatcher& m) {  // envoy.config.core.v3.CidrRange
  const Fields f = at.fields("envoy.config.core.v3.CidrRange", {"address_prefix", "prefix_len"});
  m.cidr = f.required("address_prefix").nonempty_str();
  unsigned char bytes[16];
  const bool v4 = ::inet_pton(AF_INET, m.cidr.c_str(), bytes) == 1;
  if (!v4 && ::inet_pton(AF_INET6, m.cidr.c_str(), bytes) != 1)
    f["address_prefix"].fail("'" + m.cidr + "' is not an IP address");
  m.prefix_len = f["prefix_len"].u32_or(v4 ? 32 : 128, 0, v4 ? 32 : 128);
}

RbacMatcher parse_rbac_matcher(const At& at, bool permission, bool network);

std::vector<RbacMatcher> parse_rbac_set(const At& at, bool permission, bool network) {
  const Fields f = at.fields(permission ? "envoy.config.rbac.v3.Permission.Set" : "envoy.config.rbac.v3.Principal.Set",
                             {permission ? "rules" : "ids"});
  std::vector<RbacMatcher> out;
  for (const At& item : f.required(permission ? "rules" : "ids").items())
    out.push_back(parse_rbac_matcher(item, permission, network));
  return out;
}

// A Permission (permission) or a Principal: exactly one of its kinds. The
// two messages share any, header, url_path and the combinators (named
// and_rules/or_rules/not_rule in one, and_ids/or_ids/not_id in the other).
// `network`: for envoy.filters.network.rbac, which has no request: header and
// url_path are refused, as Envoy refuses them there.
RbacMatcher parse_rbac_matcher(const At& at, bool permission, bool network) {
  using K = RbacMatcher::Kind;
  const std::string_view and_name = permission ? "and_rules" : "and_ids", or_name = permission ? "or_rules" : "or_ids",
                         not_name = permission ? "not_rule" : "not_id";
  const Fields f = permission ? at.fields("envoy.config.rbac.v3.Permission",
                                          {"and_rules", "or_rules", "any", "header", "url_path", "destination_ip",
                                           "destination_port", "destination_port_range", "not_rule",
                                           "requested_server_name"})
                              : at.fields("envoy.config.rbac.v3.Principal",
                                          {"and_ids", "or_ids", "any", "authenticated", "source_ip",
                                           "direct_remote_ip", "remote_ip", "header", "url_path", "not_id"});
  const std::string_view kind =
      permission ? f.exactly_one_of({"and_rules", "or_rules", "any", "header", "url_path", "destination_ip",
                                     "destination_port", "destination_port_range", "not_rule", "requested_server_name"})
                 : f.exactly_one_of({"and_ids", "or_ids", "any", "authenticated", "source_ip", "direct_remote_ip",
                                     "remote_ip", "header", "url_path", "not_id"});
  const At v = f[kind];
  if (network && (kind == "header" || kind == "url_path"))
    v.fail(std::string(kind) + " rules are not supported by the RBAC network filter (a connection has no request; "
           "as in Envoy)");
  RbacMatcher m;
  if (kind == "any") {
    if (!v.boolean()) v.fail("any must be true");
  } else if (kind == and_name || kind == or_name) {
    m.kind = kind == and_name ? K::kAnd : K::kOr;
    m.children = parse_rbac_set(v, permission, network);
  } else if (kind == not_name) {
    m.kind = K::kNot;
    m.children.push_back(parse_rbac_matcher(v, permission, network));
  } else if (kind == "header") {
    m.kind = K::kHeader;
    m.header = parse_header_matcher(v);
  } else if (kind == "url_path") {
    m.kind = K::kUrlPath;
    parse_string_matcher(v.fields("envoy.type.matcher.v3.PathMatcher", {"path"}).required("path"), m.header);
  } else if (kind == "destination_ip" || kind == "source_ip" || kind == "direct_remote_ip" || kind == "remote_ip") {
    m.kind = kind == "destination_ip" ? K::kDestinationIp : kind == "remote_ip" ? K::kRemoteIp : K::kDirectRemoteIp;
    parse_cidr(v, m);
  } else if (kind == "destination_port") {
    m.kind = K::kDestinationPort;
    m.port = v.u32(0, 65535);
  } else if (kind == "destination_port_range") {
    m.kind = K::kDestinationPortRange;
    const Fields r = v.fields("envoy.type.v3.Int32Range", {"start", "end"});
    m.port = r["start"].u32_or(0, 0, 65536);
    m.port_end = r["end"].u32_or(0, 0, 65536);
    if (m.port_end < m.port) r["end"].fail("end must not be below start");
  } else if (kind == "requested_server_name") {
    m.kind = K::kRequestedServerName;
    parse_string_matcher(v, m.header);
  } else {  // authenticated
    m.kind = K::kAuthenticated;
    const Fields a = v.fields("envoy.config.rbac.v3.Principal.Authenticated", {"principal_name"});
    if (a.has("principal_name")) {
      m.has_string = true;
      parse_string_matcher(a["principal_name"], m.header);
    }
  }
  return m;
}

RbacRules parse_rbac_rules(const At& at, bool network = false) {
  const Fields f = at.fields("envoy.config.rbac.v3.RBAC", {"action", "policies"});
  RbacRules r;
  if (f.has("action"))
    r.action = f["action"].choice<RbacRules::Action>(
        {{"ALLOW", RbacRules::Action::kAllow}, {"DENY", RbacRules::Action::kDeny}, {"LOG", RbacRules::Action::kLog}},
        {});
  const At policies = f["policies"];
  if (!policies.present()) return r;
  for (const auto& [name, policy] : policies.mapping()) {
    const Fields p = policy.fields("envoy.config.rbac.v3.Policy", {"permissions", "principals"});
    RbacPolicy out;
    out.name = name;
    for (const At& item : p.required("permissions").items())
      out.permissions.push_back(parse_rbac_matcher(item, true, network));
    for (const At& item : p.required("principals").items())
      out.principals.push_back(parse_rbac_matcher(item, false, network));
    if (out.permissions.empty()) p["permissions"].fail("at least one permission is required");
    if (out.principals.empty()) p["principals"].fail("at least one principal is required");
    r.policies.push_back(std::move(out));
  }
  std::sort(r.policies.begin(), r.policies.end(), [](const RbacPolicy& a, const RbacPolicy& b) { return a.name < b.name; });
  return r;
}

Rbac parse_http_rbac(const At& at) {
  const Fields f = typed_config(at, "envoy.extensions.filters.http.rbac.v3.RBAC", kHttpRbacType,
                                {"@type", "rules", "rules_stat_prefix", "shadow_rules", "shadow_rules_stat_prefix"});
  Rbac r;
  if (f.has("rules")) r.rules = parse_rbac_rules(f["rules"]);
  if (f.has("shadow_rules")) r.shadow_rules = parse_rbac_rules(f["shadow_rules"]);
  r.rules_stat_prefix = f["rules_stat_prefix"].str_or("");
  r.shadow_rules_stat_prefix = f["shadow_rules_stat_prefix"].str_or("");
  return r;
}

NetworkRbac parse_network_rbac(const At& at) {
  const Fields f = typed_config(at, "envoy.extensions.filters.network.rbac.v3.RBAC", kNetworkRbacType,
                                {"@type", "rules", "shadow_rules", "shadow_rules_stat_prefix", "stat_prefix",
                                 "enforcement_type"});
  NetworkRbac n;
  n.stat_prefix = f.required("stat_prefix").nonempty_str();
  if (f.has("rules")) n.rbac.rules = parse_rbac_rules(f["rules"], true);
  if (f.has("shadow_rules")) n.rbac.shadow_rules = parse_rbac_rules(f["shadow_rules"], true);
  n.rbac.shadow_rules_stat_prefix = f["shadow_rules_stat_prefix"].str_or("");
  if (f.has("enforcement_type"))
    f["enforcement_type"].choice<int>({{"ONE_TIME_ON_FIRST_BYTE", 0}}, {"CONTINUOUS"});
  return n;
}

HttpFilter parse_http_filter(const At& at) {
  const Fields f = at.fields("envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
                             {"name", "typed_config"});
  HttpFilter filter;
  const At name = f.required("name");
  filter.name = name.nonempty_str();
  if (filter.name == "envoy.filters.http.local_ratelimit") {
    filter.kind = HttpFilter::Kind::kLocalRateLimit;
    filter.local_ratelimit = parse_local_ratelimit(f.required("typed_config"));
  } else if (filter.name == "envoy.filters.http.rbac") {
    filter.kind = HttpFilter::Kind::kRbac;
    filter.rbac = parse_http_rbac(f.required("typed_config"));
  } else if (filter.name == "envoy.filters.http.router") {
    filter.kind = HttpFilter::Kind::kRouter;
    typed_config(f.required("typed_config"), "envoy.extensions.filters.http.router.v3.Router", kRouterType, {"@type"});
  } else {
    name.fail(filter.name + " is not supported by dpukit-mesh");
  }
  return filter;
}

// --- network filters --------------------------------------------------------

// envoy.config.core.v3.Http2ProtocolOptions (the HCM's, or an upstream's):
// the stream limit and the flow-control windows, in Envoy's ranges.
Http2ProtocolOptions parse_http2_protocol_options(const At& at) {
  const Fields f = at.fields("envoy.config.core.v3.Http2ProtocolOptions",
                             {"max_concurrent_streams", "initial_stream_window_size", "initial_connection_window_size",
                              "connection_keepalive"});
  constexpr uint32_t kMax31 = 0x7fffffff;
  Http2ProtocolOptions o;
  o.max_concurrent_streams = f["max_concurrent_streams"].u32_or(o.max_concurrent_streams, 1, kMax31);
  o.initial_stream_window_size = f["initial_stream_window_size"].u32_or(o.initial_stream_window_size, 65535, kMax31);
  o.initial_connection_window_size =
      f["initial_connection_window_size"].u32_or(o.initial_connection_window_size, 65535, kMax31);
  if (f.has("connection_keepalive")) {
    // Envoy sends no interval PINGs without an interval; a keepalive here is one that pings.
    const Fields k = f["connection_keepalive"].fields("envoy.config.core.v3.KeepaliveSettings", {"interval", "timeout"});
    Http2ProtocolOptions::Keepalive ka;
    ka.interval = k.required("interval").duration();
    ka.timeout = k.required("timeout").duration();
    if (ka.interval.count() < 1) k["interval"].fail("must be at least 1ms");
    if (ka.timeout.count() < 1) k["timeout"].fail("must be at least 1ms");
    o.connection_keepalive = ka;
  }
  return o;
}

// A format string, checked now so that a bad operator is refused by its path.
std::string checked_format(const At& at) {
  std::string text = at.str();
  try {
    compile_format(text);
  } catch (const std::invalid_argument& e) {
    at.fail(e.what());
  }
  return text;
}

// json_format (a google.protobuf.Struct): string leaves are formats; nested structures are kept.
nlohmann::json parse_json_format(const At& at) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : at.mapping()) {
    if (value.is_map()) out[key] = parse_json_format(value);
    else out[key] = checked_format(value);
  }
  return out;
}

// envoy.config.core.v3.SubstitutionFormatString
void parse_log_format(const At& at, AccessLog& log) {
  const Fields f = at.fields("envoy.config.core.v3.SubstitutionFormatString",
                             {"text_format", "json_format", "text_format_source", "omit_empty_values",
                              "json_format_options"});
  const std::string_view which = f.exactly_one_of({"text_format", "json_format", "text_format_source"});
  if (which == "text_format") {
    log.text_format = checked_format(f["text_format"]);
  } else if (which == "json_format") {
    log.json_format = parse_json_format(f["json_format"]);
  } else {
    const Fields src = f["text_format_source"].fields("envoy.config.core.v3.DataSource", {"inline_string"});
    log.text_format = checked_format(src.required("inline_string"));
  }
  log.omit_empty_values = f["omit_empty_values"].boolean_or(false);
  if (f.has("json_format_options"))  // sort_properties: always so (Envoy sorts them too)
    f["json_format_options"].fields("envoy.config.core.v3.JsonFormatOptions", {"sort_properties"});
}

// access_log: a list of envoy.config.accesslog.v3.AccessLog (HCM and tcp_proxy).
std::vector<AccessLog> parse_access_logs(const At& at) {
  std::vector<AccessLog> out;
  for (const At& item : at.items()) {
    const Fields f = item.fields("envoy.config.accesslog.v3.AccessLog", {"name", "typed_config"});
    AccessLog log;
    log.name = f["name"].str_or("");
    const At typed = f.required("typed_config");
    const std::string type = typed.type_url();
    if (type == kFileAccessLogType) {
      const Fields t = typed_config(typed, "envoy.extensions.access_loggers.file.v3.FileAccessLog", kFileAccessLogType,
                                    {"@type", "path", "log_format"});
      log.sink = AccessLog::Sink::kFile;
      log.path = t.required("path").nonempty_str();
      if (t.has("log_format")) parse_log_format(t["log_format"], log);
    } else if (type == kStdoutAccessLogType || type == kStderrAccessLogType) {
      const bool out_stream = type == kStdoutAccessLogType;
      const Fields t = typed_config(typed,
                                    out_stream ? "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
                                               : "envoy.extensions.access_loggers.stream.v3.StderrAccessLog",
                                    type, {"@type", "log_format"});
      log.sink = out_stream ? AccessLog::Sink::kStdout : AccessLog::Sink::kStderr;
      if (t.has("log_format")) parse_log_format(t["log_format"], log);
    } else {
      typed.fail("access logger '" + type + "' is not supported by dpukit-mesh (FileAccessLog, StdoutAccessLog and "
                 "StderrAccessLog are)");
    }
    if (!log.text_format && !log.json_format) log.text_format = std::string(kDefaultAccessLogFormat);
    out.push_back(std::move(log));
  }
  return out;
}

HttpConnectionManager parse_hcm(const At& at) {
  const Fields f = typed_config(
      at, "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager", kHcmType,
      {"@type", "stat_prefix", "codec_type", "route_config", "http_filters", "max_request_headers_kb",
       "common_http_protocol_options", "stream_idle_timeout", "request_timeout", "request_headers_timeout",
       "use_remote_address", "generate_request_id", "http_protocol_options", "http2_protocol_options", "access_log"});
  HttpConnectionManager h;
  if (f.has("access_log")) h.access_log = parse_access_logs(f["access_log"]);
  h.stat_prefix = f.required("stat_prefix").nonempty_str();
  using C = HttpConnectionManager::Codec;
  if (f.has("codec_type"))
    h.codec_type = f["codec_type"].choice<C>({{"AUTO", C::kAuto}, {"HTTP1", C::kHttp1}, {"HTTP2", C::kHttp2}}, {"HTTP3"});
  h.route_config = parse_route_config(f.required("route_config"));
  const At filters = f.required("http_filters");
  for (const At& item : filters.items()) {
    if (!h.http_filters.empty() && h.http_filters.back().kind == HttpFilter::Kind::kRouter)
      item.fail("envoy.filters.http.router must be the last HTTP filter");
    h.http_filters.push_back(parse_http_filter(item));
  }
  if (h.http_filters.empty() || h.http_filters.back().kind != HttpFilter::Kind::kRouter)
    filters.fail("the last HTTP filter must be envoy.filters.http.router");
  h.max_request_headers_kb = f["max_request_headers_kb"].u32_or(h.max_request_headers_kb, 1, 8192);  // Envoy's range
  if (f.has("common_http_protocol_options")) {
    const Fields o = f["common_http_protocol_options"].fields("envoy.config.core.v3.HttpProtocolOptions",
                                                              {"idle_timeout", "max_headers_count"});
    h.idle_timeout = o["idle_timeout"].duration_or(h.idle_timeout);
    h.max_headers_count = o["max_headers_count"].u32_or(h.max_headers_count, 1);
  }
  h.stream_idle_timeout = f["stream_idle_timeout"].duration_or(h.stream_idle_timeout);
  h.request_timeout = f["request_timeout"].duration_or(h.request_timeout);
  h.request_headers_timeout = f["request_headers_timeout"].duration_or(h.request_headers_timeout);
  h.use_remote_address = f["use_remote_address"].boolean_or(h.use_remote_address);
  h.generate_request_id = f["generate_request_id"].boolean_or(h.generate_request_id);
  if (f.has("http_protocol_options")) {
    const Fields o = f["http_protocol_options"].fields("envoy.config.core.v3.Http1ProtocolOptions",
                                                       {"accept_http_10", "default_host_for_http_10"});
    h.accept_http_10 = o["accept_http_10"].boolean_or(h.accept_http_10);
    h.default_host_for_http_10 = o["default_host_for_http_10"].str_or("");
  }
  if (f.has("http2_protocol_options")) {
    if (h.codec_type == HttpConnectionManager::Codec::kHttp1)
      f["http2_protocol_options"].fail("needs codec_type AUTO or HTTP2 (HTTP1 never serves HTTP/2)");
    h.http2_protocol_options = parse_http2_protocol_options(f["http2_protocol_options"]);
    if (h.http2_protocol_options.connection_keepalive)
      f["http2_protocol_options"].fail("connection_keepalive is not supported on a listener's HTTP/2 (dpukit-mesh "
                                       "honours it on the ADS cluster only)");
  }
  return h;
}

TcpProxy parse_tcp_proxy(const At& at) {
  const Fields f = typed_config(at, "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy", kTcpProxyType,
                                {"@type", "stat_prefix", "cluster", "weighted_clusters", "idle_timeout",
                                 "max_connect_attempts", "access_log"});
  TcpProxy t;
  if (f.has("access_log")) t.access_log = parse_access_logs(f["access_log"]);
  t.stat_prefix = f.required("stat_prefix").nonempty_str();
  if (f.exactly_one_of({"cluster", "weighted_clusters"}) == "cluster")
    t.cluster = f["cluster"].nonempty_str();
  else
    t.weighted = parse_weighted_clusters(f["weighted_clusters"],
                                         "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster",
                                         "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy.WeightedCluster.ClusterWeight");
  t.idle_timeout = f["idle_timeout"].duration_or(t.idle_timeout);
  t.max_connect_attempts = f["max_connect_attempts"].u32_or(t.max_connect_attempts, 1);
  return t;
}

NetworkFilter parse_network_filter(const At& at) {
  const Fields f = at.fields("envoy.config.listener.v3.Filter", {"name", "typed_config"});
  NetworkFilter filter;
  const At name = f.required("name");
  filter.name = name.nonempty_str();
  if (filter.name == "envoy.filters.network.http_connection_manager") {
    filter.kind = NetworkFilter::Kind::kHttpConnectionManager;
    filter.hcm = parse_hcm(f.required("typed_config"));
  } else if (filter.name == "envoy.filters.network.tcp_proxy") {
    filter.kind = NetworkFilter::Kind::kTcpProxy;
    filter.tcp_proxy = parse_tcp_proxy(f.required("typed_config"));
  } else {
    name.fail(filter.name + " is not supported by dpukit-mesh");
  }
  return filter;
}

// A hash of what `node` says, without the members `drop` names (`drop`
// also removes each filter's typed_config.route_config: routes are taken in place).
size_t fingerprint(const YAML::Node& node, std::string_view drop, bool routes_aside) {
  YAML::Node copy = YAML::Clone(node);
  if (copy.IsMap() && !drop.empty()) copy.remove(std::string(drop));
  if (routes_aside && copy.IsMap() && copy["filters"].IsSequence())
    for (YAML::Node filter : copy["filters"])
      if (filter.IsMap() && filter["typed_config"].IsMap()) filter["typed_config"].remove("route_config");
  YAML::Emitter out;
  out << copy;
  return std::hash<std::string_view>()(std::string_view(out.c_str(), out.size()));
}

FilterChain parse_filter_chain(const At& at) {
  const Fields chain =
      at.fields("envoy.config.listener.v3.FilterChain",
                {"name", "filter_chain_match", "transport_socket", "filters", "transport_socket_connect_timeout"});
  FilterChain c;
  c.name = chain["name"].str_or("");
  if (chain.has("filter_chain_match")) c.match = parse_filter_chain_match(chain["filter_chain_match"]);
  if (chain.has("transport_socket")) c.tls = parse_downstream_transport_socket(chain["transport_socket"]);
  if (chain.has("transport_socket_connect_timeout"))
    c.transport_socket_connect_timeout = chain["transport_socket_connect_timeout"].duration();
  // Network RBAC filters, then one terminal filter (the HCM or tcp_proxy).
  const At filters = chain.required("filters");
  for (const At& item : filters.items()) {
    if (!c.filters.empty()) item.fail("the filter chain already ends with " + c.filters.back().name);
    if (item.fields("envoy.config.listener.v3.Filter", {"name", "typed_config"})["name"].str_or("") ==
        "envoy.filters.network.rbac") {
      c.network_rbacs.push_back(
          parse_network_rbac(item.fields("envoy.config.listener.v3.Filter", {"name", "typed_config"})
                                 .required("typed_config")));
      continue;
    }
    c.filters.push_back(parse_network_filter(item));
    if (!c.network_rbacs.empty() && c.filters.back().hcm)
      item.fail("envoy.filters.network.rbac before http_connection_manager is not supported by dpukit-mesh "
                "(envoy.filters.http.rbac does the same per request)");
  }
  if (c.filters.empty()) filters.fail("the filter chain must end with http_connection_manager or tcp_proxy");
  c.fingerprint = fingerprint(at.node(), "", true);
  return c;
}

Listener parse_listener(const At& at) {
  const Fields f = at.fields("envoy.config.listener.v3.Listener",
                             {"name", "address", "filter_chains", "listener_filters", "listener_filters_timeout",
                              "continue_on_listener_filters_timeout", "per_connection_buffer_limit_bytes"});
  Listener l;
  l.name = f["name"].str_or("");  // proto3: absent and "" are the same; cross_check names it
  l.address = parse_bind_address(f.required("address"));
  if (f.has("listener_filters")) l.tls_inspector = parse_listener_filters(f["listener_filters"]);
  l.listener_filters_timeout = f["listener_filters_timeout"].duration_or(l.listener_filters_timeout);
  l.continue_on_listener_filters_timeout = f["continue_on_listener_filters_timeout"].boolean_or(false);
  const At chains_at = f.required("filter_chains");
  const std::vector<At> chains = chains_at.items();
  if (chains.empty()) chains_at.fail("at least one filter chain is required");
  for (const At& item : chains) {
    l.filter_chains.push_back(parse_filter_chain(item));
    const FilterChainMatch& m = l.filter_chains.back().match;
    // As Envoy does, a listener whose chains match on what the ClientHello says gets the tls_inspector.
    if (!m.server_names.empty() || m.transport_protocol == "tls" || !m.application_protocols.empty())
      l.tls_inspector = true;
    for (size_t i = 0; i + 1 < l.filter_chains.size(); ++i)
      if (to_json(l.filter_chains[i].match) == to_json(m))
        item.fail("the same filter_chain_match as filter_chains[" + std::to_string(i) + "]");
  }
  l.per_connection_buffer_limit_bytes = f["per_connection_buffer_limit_bytes"].u32_or(l.per_connection_buffer_limit_bytes);
  l.fingerprint = fingerprint(at.node(), "filter_chains", false);
  return l;
}

// --- clusters ---------------------------------------------------------------

// An lb_endpoint's metadata: only dpukit-mesh's own namespace, which says how
// a service attaches (no other filter here reads metadata, so any other
// namespace would be silently ignored: it is refused instead).
bool parse_endpoint_attach(const At& at, const Address& address) {
  const Fields md = at.fields("envoy.config.core.v3.Metadata", {"filter_metadata"});
  if (!md.has("filter_metadata")) return false;
  const Fields namespaces = md["filter_metadata"].extension_map({"dpukit.mesh"});
  if (!namespaces.has("dpukit.mesh")) return false;
  const Fields ours = namespaces["dpukit.mesh"].fields("dpukit.mesh.EndpointMetadata", {"attach"});
  if (!ours.has("attach")) return false;
  const At attach = ours["attach"];
  const bool shm = attach.choice<bool>({{"shm", true}, {"socket", false}}, {});
  if (shm && !address.is_pipe()) attach.fail("attach: shm needs a pipe address (the service's attach point)");
  return shm;
}

std::vector<Endpoint> parse_load_assignment(const At& at, const Cluster& cluster) {
  const Fields f = at.fields("envoy.config.endpoint.v3.ClusterLoadAssignment", {"cluster_name", "endpoints"});
  f.required("cluster_name").nonempty_str();
  std::vector<Endpoint> out;
  if (!f.has("endpoints")) return out;
  for (const At& locality : f["endpoints"].items()) {
    const Fields lf = locality.fields("envoy.config.endpoint.v3.LocalityLbEndpoints", {"lb_endpoints"});
    if (!lf.has("lb_endpoints")) continue;
    for (const At& item : lf["lb_endpoints"].items()) {
      const Fields e =
          item.fields("envoy.config.endpoint.v3.LbEndpoint", {"endpoint", "load_balancing_weight", "metadata"});
      const Fields ep = e.required("endpoint").fields("envoy.config.endpoint.v3.Endpoint", {"address"});
      const At address_at = ep.required("address");
      Endpoint endpoint{parse_address(address_at), e["load_balancing_weight"].u32_or(1, 1)};
      if (e.has("metadata")) endpoint.address.shm_attach = parse_endpoint_attach(e["metadata"], endpoint.address);
      if (cluster.type == Cluster::Type::kStatic && !endpoint.address.is_pipe() && !is_ip_literal(endpoint.address.ip))
        address_at.fail("a STATIC cluster needs IP addresses, got '" + endpoint.address.ip + "' (use STRICT_DNS)");
      out.push_back(std::move(endpoint));
    }
  }
  return out;
}

CircuitBreakerThresholds parse_circuit_breakers(const At& at) {
  const Fields f = at.fields("envoy.config.cluster.v3.CircuitBreakers", {"thresholds"});
  CircuitBreakerThresholds t;
  if (!f.has("thresholds")) return t;
  const std::vector<At> items = f["thresholds"].items();
  if (items.size() > 1) items[1].fail("only the DEFAULT priority's thresholds are supported");
  for (const At& item : items) {
    const Fields tf = item.fields("envoy.config.cluster.v3.CircuitBreakers.Thresholds",
                                  {"priority", "max_connections", "max_pending_requests", "max_requests", "max_retries"});
    if (tf.has("priority")) tf["priority"].choice<int>({{"DEFAULT", 0}}, {"HIGH"});
    t.max_connections = tf["max_connections"].u32_or(t.max_connections);
    t.max_pending_requests = tf["max_pending_requests"].u32_or(t.max_pending_requests);
    t.max_requests = tf["max_requests"].u32_or(t.max_requests);
    t.max_retries = tf["max_retries"].u32_or(t.max_retries);
  }
  return t;
}

OutlierDetection parse_outlier_detection(const At& at) {
  const Fields f = at.fields("envoy.config.cluster.v3.OutlierDetection",
                             {"consecutive_5xx", "interval", "base_ejection_time", "max_ejection_percent",
                              "enforcing_consecutive_5xx"});
  OutlierDetection o;
  o.consecutive_5xx = f["consecutive_5xx"].u32_or(o.consecutive_5xx);
  o.interval = f["interval"].duration_or(o.interval);
  if (o.interval <= Duration(0)) f["interval"].fail("must be greater than 0");
  o.base_ejection_time = f["base_ejection_time"].duration_or(o.base_ejection_time);
  if (o.base_ejection_time <= Duration(0)) f["base_ejection_time"].fail("must be greater than 0");
  o.max_ejection_percent = f["max_ejection_percent"].u32_or(o.max_ejection_percent, 0, 100);
  o.enforcing_consecutive_5xx = f["enforcing_consecutive_5xx"].u32_or(o.enforcing_consecutive_5xx, 0, 100);
  return o;
}

Duration positive_duration(const At& at) {
  const Duration d = at.duration();
  if (d <= Duration(0)) at.fail("must be greater than 0");
  return d;
}

HealthCheck parse_health_check(const At& at, const std::string& cluster_name) {
  const Fields f = at.fields("envoy.config.core.v3.HealthCheck", {"timeout", "interval", "unhealthy_threshold",
                                                                  "healthy_threshold", "http_health_check"});
  HealthCheck h;
  h.timeout = positive_duration(f.required("timeout"));
  h.interval = positive_duration(f.required("interval"));
  h.unhealthy_threshold = f.required("unhealthy_threshold").u32();
  h.healthy_threshold = f.required("healthy_threshold").u32();
  const Fields http = f.required("http_health_check")
                          .fields("envoy.config.core.v3.HealthCheck.HttpHealthCheck", {"path", "host", "expected_statuses"});
  h.path = http.required("path").nonempty_str();
  h.host = http["host"].str_or(cluster_name);
  if (http.has("expected_statuses")) {
    for (const At& item : http["expected_statuses"].items()) {
      const Fields range = item.fields("envoy.type.v3.Int64Range", {"start", "end"});
      const auto start = static_cast<uint32_t>(range.required("start").integer(100, 599));
      const auto end = static_cast<uint32_t>(range.required("end").integer(101, 600));
      if (end <= start) item.fail("end must be greater than start (the range is [start, end))");
      h.expected_statuses.emplace_back(start, end);
    }
  }
  if (h.expected_statuses.empty()) h.expected_statuses.emplace_back(200, 201);
  return h;
}

// typed_extension_protocol_options: only the upstream HTTP protocol choice
// (and, for HTTP/2, its Http2ProtocolOptions).
bool parse_upstream_http2(const At& at, Http2ProtocolOptions& h2) {
  const Fields ext = at.extension_map({kHttpProtocolOptions});
  const Fields f = typed_config(ext.required(kHttpProtocolOptions), kHttpProtocolOptions, kHttpProtocolOptionsType,
                                {"@type", "explicit_http_config"});
  const Fields explicit_config = f.required("explicit_http_config")
                                     .fields("envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig",
                                             {"http_protocol_options", "http2_protocol_options"});
  const std::string_view which = explicit_config.exactly_one_of({"http_protocol_options", "http2_protocol_options"});
  if (which == "http2_protocol_options") {
    h2 = parse_http2_protocol_options(explicit_config[which]);
    return true;
  }
  explicit_config[which].fields("envoy.config.core.v3.Http1ProtocolOptions", {});  // no option implemented: {}
  return false;
}

Cluster parse_cluster(const At& at) {
  const Fields f = at.fields("envoy.config.cluster.v3.Cluster",
                             {"name", "type", "connect_timeout", "lb_policy", "least_request_lb_config",
                              "ring_hash_lb_config", "load_assignment", "circuit_breakers", "outlier_detection",
                              "health_checks", "dns_refresh_rate", "typed_extension_protocol_options",
                              "transport_socket"});
  Cluster c;
  c.name = f.required("name").nonempty_str();
  using T = Cluster::Type;
  if (f.has("type"))
    c.type = f["type"].choice<T>({{"STATIC", T::kStatic}, {"STRICT_DNS", T::kStrictDns}},
                                 {"LOGICAL_DNS", "EDS", "ORIGINAL_DST"});
  if (f.has("connect_timeout")) c.connect_timeout = positive_duration(f["connect_timeout"]);
  using P = Cluster::LbPolicy;
  if (f.has("lb_policy"))
    c.lb_policy = f["lb_policy"].choice<P>({{"ROUND_ROBIN", P::kRoundRobin},
                                            {"LEAST_REQUEST", P::kLeastRequest},
                                            {"RANDOM", P::kRandom},
                                            {"RING_HASH", P::kRingHash}},
                                           {"MAGLEV", "CLUSTER_PROVIDED", "LOAD_BALANCING_POLICY_CONFIG"});
  // A policy's config under another policy would be silently ignored: refuse it.
  if (f.has("least_request_lb_config")) {
    if (c.lb_policy != P::kLeastRequest) f["least_request_lb_config"].fail("needs lb_policy: LEAST_REQUEST");
    const Fields lr =
        f["least_request_lb_config"].fields("envoy.config.cluster.v3.Cluster.LeastRequestLbConfig", {"choice_count"});
    c.least_request_choice_count = lr["choice_count"].u32_or(c.least_request_choice_count, 2);
  }
  if (f.has("ring_hash_lb_config")) {
    if (c.lb_policy != P::kRingHash) f["ring_hash_lb_config"].fail("needs lb_policy: RING_HASH");
    const Fields rh = f["ring_hash_lb_config"].fields("envoy.config.cluster.v3.Cluster.RingHashLbConfig",
                                                      {"minimum_ring_size", "maximum_ring_size"});
    constexpr uint64_t kMaxRing = 8 * 1024 * 1024;  // Envoy's upper bound for both
    if (rh.has("minimum_ring_size")) c.ring_hash_minimum_ring_size = rh["minimum_ring_size"].integer(1, kMaxRing);
    if (rh.has("maximum_ring_size")) c.ring_hash_maximum_ring_size = rh["maximum_ring_size"].integer(1, kMaxRing);
    if (c.ring_hash_minimum_ring_size > c.ring_hash_maximum_ring_size)
      rh.self().fail("minimum_ring_size is greater than maximum_ring_size");
  }
  if (f.has("load_assignment")) c.endpoints = parse_load_assignment(f["load_assignment"], c);
  if (f.has("circuit_breakers")) c.circuit_breakers = parse_circuit_breakers(f["circuit_breakers"]);
  if (f.has("outlier_detection")) c.outlier_detection = parse_outlier_detection(f["outlier_detection"]);
  if (f.has("health_checks"))
    for (const At& item : f["health_checks"].items()) c.health_checks.push_back(parse_health_check(item, c.name));
  if (f.has("dns_refresh_rate")) {
    if (c.type != T::kStrictDns) f["dns_refresh_rate"].fail("needs type: STRICT_DNS");
    c.dns_refresh_rate = positive_duration(f["dns_refresh_rate"]);
  }
  if (f.has("typed_extension_protocol_options"))
    c.http2 = parse_upstream_http2(f["typed_extension_protocol_options"], c.http2_protocol_options);
  if (f.has("transport_socket")) c.tls = parse_upstream_transport_socket(f["transport_socket"]);
  return c;
}

// --- the bootstrap ----------------------------------------------------------

// Where each cluster name was used, checked once all clusters are known.
struct ClusterReference {
  std::string name;
  std::string path;
  bool tcp_proxy = false;  // used by a tcp_proxy (an L4 relay), not an HTTP route
};

void collect_references(const Listener& l, std::size_t li, std::vector<ClusterReference>& refs) {
  const auto add_weighted = [&](const std::vector<WeightedCluster>& weighted, const std::string& at, bool tcp) {
    for (std::size_t i = 0; i < weighted.size(); ++i)
      refs.push_back({weighted[i].name, at + ".weighted_clusters.clusters[" + std::to_string(i) + "].name", tcp});
  };
  for (std::size_t ci = 0; ci < l.filter_chains.size(); ++ci) {
    const std::string base = "static_resources.listeners[" + std::to_string(li) + "].filter_chains[" +
                             std::to_string(ci) + "].filters[0].typed_config";
    for (const NetworkFilter& filter : l.filter_chains[ci].filters) {
      if (filter.tcp_proxy) {
        if (!filter.tcp_proxy->cluster.empty()) refs.push_back({filter.tcp_proxy->cluster, base + ".cluster", true});
        add_weighted(filter.tcp_proxy->weighted, base, true);
        continue;
      }
      const auto& vhosts = filter.hcm->route_config.virtual_hosts;
      for (std::size_t v = 0; v < vhosts.size(); ++v) {
        for (std::size_t r = 0; r < vhosts[v].routes.size(); ++r) {
          const auto& action = vhosts[v].routes[r].route;
          if (!action) continue;
          const std::string at = base + ".route_config.virtual_hosts[" + std::to_string(v) + "].routes[" +
                                 std::to_string(r) + "].route";
          if (!action->cluster.empty()) refs.push_back({action->cluster, at + ".cluster"});
          add_weighted(action->weighted, at, false);
        }
      }
    }
  }
}

// Envoy refuses two listeners on one address, and names a listener that has
// no name itself (a UUID); here such a listener is named by its address, so
// a reload finds it again, with a suffix in the unlikely case that another
// listener is called that.
void check_and_name_listeners(Bootstrap& b) {
  std::map<std::string, std::size_t> addresses;
  std::set<std::string> names;
  for (std::size_t i = 0; i < b.listeners.size(); ++i) {
    const std::string at = "static_resources.listeners[" + std::to_string(i) + "]";
    const std::string key = b.listeners[i].address.key();
    if (auto [it, fresh] = addresses.emplace(key, i); !fresh)
      throw ConfigError(at + ".address", "duplicate address '" + key + "': listeners[" + std::to_string(it->second) +
                                             "] is there already");
    const std::string& name = b.listeners[i].name;
    if (!name.empty() && !names.insert(name).second)
      throw ConfigError(at + ".name", "duplicate listener name '" + name + "'");
  }
  for (Listener& l : b.listeners) {
    if (!l.name.empty()) continue;
    std::string name = l.address.key();
    for (int n = 2; names.contains(name); ++n) name = l.address.key() + "#" + std::to_string(n);
    names.insert(name);
    l.name = std::move(name);
  }
}

void cross_check(Bootstrap& b) {
  check_and_name_listeners(b);
  std::set<std::string> clusters;
  for (std::size_t i = 0; i < b.clusters.size(); ++i)
    if (!clusters.insert(b.clusters[i].name).second)
      throw ConfigError("static_resources.clusters[" + std::to_string(i) + "].name",
                        "duplicate cluster name '" + b.clusters[i].name + "'");
  std::vector<ClusterReference> refs;
  for (std::size_t i = 0; i < b.listeners.size(); ++i) collect_references(b.listeners[i], i, refs);
  for (const ClusterReference& ref : refs) {
    if (!clusters.contains(ref.name)) throw ConfigError(ref.path, "unknown cluster '" + ref.name + "'");
    if (!ref.tcp_proxy) continue;
    for (const Cluster& c : b.clusters)
      for (const Endpoint& e : c.endpoints)
        if (c.name == ref.name && e.address.shm_attach)
          throw ConfigError(ref.path, "cluster '" + ref.name +
                                          "' has endpoints attached over shm: tcp_proxy to them is not supported by "
                                          "dpukit-mesh (shared-memory attach serves HTTP routes)");
  }
}

// A secret pushed over ADS needs the ADS stream; one over gRPC, its cluster.
void check_pushed_secrets(const Bootstrap& b) {
  for_each_tls(b, [&](const CommonTlsContext& c) {
    for (const auto* sds : {&c.tls_certificate_sds, &c.validation_sds}) {
      if (!*sds || !(*sds)->pushed()) continue;
      const SdsSecret& s = **sds;
      if (s.source == SdsSecret::Source::kAds && !b.dynamic_resources)
        throw ConfigError(s.where, "secret '" + s.name + "' from ads, but there is no ADS stream (dynamic_resources.ads_config)");
      if (s.source == SdsSecret::Source::kGrpc) check_grpc_cluster(b, s.cluster, s.where);
    }
  });
}

void check_whole(Bootstrap& b) {
  cross_check(b);
  check_pushed_secrets(b);
  if (b.dynamic_resources) check_dynamic_resources(b);
}

Bootstrap parse_root(const At& root) {
  const Fields f =
      root.fields("envoy.config.bootstrap.v3.Bootstrap", {"node", "admin", "static_resources", "dynamic_resources"});
  Bootstrap b;
  if (f.has("node")) {
    const Fields node = f["node"].fields("envoy.config.core.v3.Node", {"id", "cluster"});
    b.node = Node{node["id"].str_or(""), node["cluster"].str_or("")};
  }
  if (f.has("admin")) {
    const Fields admin = f["admin"].fields("envoy.config.bootstrap.v3.Admin", {"address"});
    if (admin.has("address")) b.admin.address = parse_bind_address(admin["address"]);
  }
  if (f.has("static_resources")) {
    const Fields sr =
        f["static_resources"].fields("envoy.config.bootstrap.v3.Bootstrap.StaticResources", {"listeners", "clusters"});
    if (sr.has("listeners"))
      for (const At& item : sr["listeners"].items()) b.listeners.push_back(parse_listener(item));
    if (sr.has("clusters"))
      for (const At& item : sr["clusters"].items()) b.clusters.push_back(parse_cluster(item));
  }
  if (f.has("dynamic_resources")) b.dynamic_resources = parse_dynamic_resources(f["dynamic_resources"]);
  check_whole(b);
  return b;
}

// The first byte that breaks well-formed UTF-8 (RFC 3629: no overlong
// forms, surrogates or code points above U+10FFFF): a byte that cannot start
// a character, or the first of a character's bytes that cannot continue it;
// text.size() when the text ends inside a character; npos when it is well
// formed.
size_t first_invalid_utf8(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return i;
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n) return n;
      const unsigned d = b[i + k];
      if (k == 1 ? (d < lo || d > hi) : (d & 0xC0) != 0x80) return i + k;
    }
    i += len;
  }
  return std::string::npos;
}

}  // namespace

Bootstrap parse_bootstrap(const std::string& yaml_text) {
  // YAML is Unicode text, and Envoy's configuration is protobuf, whose
  // strings must be UTF-8: a name that is not would be refused there, and
  // could not be shown here (admin /config_dump, /stats/prometheus).
  if (yaml_text.starts_with("\xFF\xFE") || yaml_text.starts_with("\xFE\xFF") ||
      yaml_text.starts_with(std::string("\0\0\xFE\xFF", 4)))
    throw ConfigError("", 1, "the configuration is UTF-16 or UTF-32 (it starts with a byte-order mark): save it as UTF-8");
  if (size_t bad = first_invalid_utf8(yaml_text); bad != std::string::npos) {
    const int line = 1 + static_cast<int>(std::count(yaml_text.begin(), yaml_text.begin() + bad, '\n'));
    if (bad == yaml_text.size()) throw ConfigError("", line, "not UTF-8 text: the text ends inside a character");
    const size_t line_start = yaml_text.rfind('\n', bad == 0 ? 0 : bad - 1);
    const size_t column = bad - (line_start == std::string::npos || bad == 0 ? 0 : line_start + 1) + 1;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(yaml_text[bad]));
    throw ConfigError("", line, std::string("not UTF-8 text: byte ") + hex + " at column " + std::to_string(column) +
                                    " cannot start or continue a character here");
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("", e.mark.line + 1, "YAML syntax error: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) throw ConfigError("", "the configuration is empty");
  return parse_root(At(root, "", 0));
}

Bootstrap parse_bootstrap_node(const YAML::Node& root) { return parse_root(At(root, "", 0)); }

Cluster parse_cluster_resource(const At& at) { return parse_cluster(at); }
Listener parse_listener_resource(const At& at) { return parse_listener(at); }
RouteConfiguration parse_route_config_resource(const At& at) { return parse_route_config(at); }
Route parse_route_resource(const At& at) { return parse_route(at); }
void check_bootstrap(Bootstrap& b) { check_whole(b); }

void for_each_tls(const Bootstrap& b, const std::function<void(const CommonTlsContext&)>& fn) {
  for (const Listener& l : b.listeners)
    for (const FilterChain& fc : l.filter_chains)
      if (fc.tls) fn(fc.tls->common);
  for (const Cluster& c : b.clusters)
    if (c.tls) fn(c.tls->common);
}

void for_each_tls(Bootstrap& b, const std::function<void(CommonTlsContext&)>& fn) {
  for_each_tls(static_cast<const Bootstrap&>(b), [&](const CommonTlsContext& c) { fn(const_cast<CommonTlsContext&>(c)); });
}

std::map<std::string, std::set<std::string>> pushed_secret_names(const Bootstrap& b) {
  std::map<std::string, std::set<std::string>> out;
  for_each_tls(b, [&](const CommonTlsContext& c) {
    for (const auto* sds : {&c.tls_certificate_sds, &c.validation_sds})
      if (*sds && (*sds)->pushed()) out[(*sds)->stream()].insert((*sds)->name);
  });
  return out;
}

Bootstrap load_bootstrap(const std::string& file_path) {
  std::ifstream in(file_path);
  if (!in) throw ConfigError("", "cannot read " + file_path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("", "cannot read " + file_path + ": " + std::strerror(errno));
  return parse_bootstrap(text.str());
}

}  // namespace dpukit::mesh::config
