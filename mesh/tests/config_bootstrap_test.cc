// The configuration plane: the shipped examples parse to the expected values,
// Envoy's defaults apply, and every kind of fault names its exact path.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "config/access_log_format.h"
#include "config/bootstrap.h"
#include "hcm_bootstrap.h"

namespace dpukit::mesh::config {
namespace {

using namespace std::chrono_literals;

const std::string kExamples = MESH_EXAMPLES_DIR;

Bootstrap example(const std::string& name) { return load_bootstrap(kExamples + "/" + name); }

// One listener, one cluster: the base that the fault tests edit.
const std::string kMinimal = testing::hcm_bootstrap(
    testing::all_to("backend"), testing::one_endpoint_cluster("backend", 18080, "    lb_policy: ROUND_ROBIN"));

// kMinimal with `from` replaced by `to` (which must be there).
std::string edit(const std::string& from, const std::string& to, std::string text = kMinimal) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// An access_log list (in the HCM) of one stdout logger with text format `format`.
std::string access_log(const std::string& format) {
  return "          access_log:\n          - name: envoy.access_loggers.stdout\n            typed_config:\n"
         "              \"@type\": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog\n"
         "              log_format: {text_format_source: {inline_string: \"" + format + "\"}}";
}

// kMinimal's listener again: a second one named like the first, on the same address.
const std::string kListenerOnSamePort =
    kMinimal.substr(kMinimal.find("  - name: http"), kMinimal.find("  clusters:") - kMinimal.find("  - name: http"));

constexpr const char* kHcm = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config";
constexpr const char* kRoute0 =
    "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0]";

std::string hcm(const std::string& rest) { return std::string(kHcm) + rest; }
std::string route0(const std::string& rest) { return std::string(kRoute0) + rest; }

struct Fault {
  std::string name, yaml, path, reason;  // reason: the end of what()
};

void PrintTo(const Fault& f, std::ostream* os) { *os << f.name; }

class Faults : public ::testing::TestWithParam<Fault> {};

TEST_P(Faults, NameTheirPath) {
  const Fault& f = GetParam();
  try {
    parse_bootstrap(f.yaml);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), f.path);
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with(f.path)) << what;
    EXPECT_TRUE(what.ends_with(f.reason)) << what;
  }
}

const std::string kCluster = R"(
  - name: backend
    lb_policy: ROUND_ROBIN
)";

INSTANTIATE_TEST_SUITE_P(
    Config, Faults,
    ::testing::Values(
        // Unknown fields, at several depths.
        Fault{"UnknownTop", kMinimal + "stats_sinkz: []\n", "stats_sinkz", "unknown field"},
        Fault{"UnknownClusterField", edit("lb_policy: ROUND_ROBIN", "lb_polcy: ROUND_ROBIN"),
              "static_resources.clusters[0].lb_polcy", "unknown field"},
        Fault{"UnknownDeep", edit("route: {cluster: backend}", "route: {cluster: backend, timout: 1s}"),
              route0(".route.timout"), "unknown field"},
        Fault{"UnknownSocketAddress", edit("port_value: 18080", "port: 18080"),
              "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address."
              "socket_address.port",
              "unknown field"},
        Fault{"CamelCase", edit("stat_prefix: http", "statPrefix: http"), hcm(".statPrefix"),
              "unknown field (write stat_prefix)"},
        // Envoy's fields that we do not implement, refused by name.
        Fault{"Tracing", edit("stat_prefix: http", "stat_prefix: http\n          tracing: {}"),
              hcm(".tracing"), "tracing is not supported by dpukit-mesh"},
        // Access logs: operators Envoy lacks or we do not fill, filters and other loggers, refused by name.
        Fault{"AccessLogUnknownOperator", edit("stat_prefix: http", "stat_prefix: http\n" + access_log("%FOO%")),
              hcm(".access_log[0].typed_config.log_format.text_format_source.inline_string"),
              "Not supported field in StreamInfo: FOO"},
        Fault{"AccessLogEnvoyOnlyOperator",
              edit("stat_prefix: http", "stat_prefix: http\n" + access_log("[%GRPC_STATUS%]")),
              hcm(".access_log[0].typed_config.log_format.text_format_source.inline_string"),
              "%GRPC_STATUS% is not supported by dpukit-mesh"},
        Fault{"AccessLogLoneParameter",
              edit("stat_prefix: http", "stat_prefix: http\n" + access_log("%DURATION:2%")),
              hcm(".access_log[0].typed_config.log_format.text_format_source.inline_string"),
              "DURATION does not take any parameters or length"},
        Fault{"AccessLogStrayPercent", edit("stat_prefix: http", "stat_prefix: http\n" + access_log("100 % done")),
              hcm(".access_log[0].typed_config.log_format.text_format_source.inline_string"),
              "Couldn't find valid command at position 4"},
        Fault{"AccessLogFilter",
              edit("stat_prefix: http",
                   "stat_prefix: http\n          access_log:\n          - name: f\n            filter: {}\n"
                   "            typed_config: {\"@type\": type.googleapis.com/envoy.extensions.access_loggers.stream.v3."
                   "StdoutAccessLog}"),
              hcm(".access_log[0].filter"), "filter is not supported by dpukit-mesh"},
        Fault{"AccessLogOtherLogger",
              edit("stat_prefix: http",
                   "stat_prefix: http\n          access_log:\n          - name: g\n            typed_config: "
                   "{\"@type\": type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig}"),
              hcm(".access_log[0].typed_config"),
              "is not supported by dpukit-mesh (FileAccessLog, StdoutAccessLog and StderrAccessLog are)"},
        Fault{"Rds", edit("stat_prefix: http", "stat_prefix: http\n          rds: {}"), hcm(".rds"),
              "rds is not supported by dpukit-mesh"},
        Fault{"TransportSocket",
              edit(kCluster, kCluster + "    transport_socket: {name: envoy.transport_sockets.raw_buffer}\n"),
              "static_resources.clusters[0].transport_socket.name",
              "envoy.transport_sockets.raw_buffer is not supported by dpukit-mesh (only envoy.transport_sockets.tls)"},
        Fault{"FilterChainMatch",
              edit("    - filters:", "    - filter_chain_match: {destination_port: 80}\n      filters:"),
              "static_resources.listeners[0].filter_chains[0].filter_chain_match.destination_port",
              "destination_port is not supported by dpukit-mesh"},
        Fault{"LayeredRuntime", kMinimal + "layered_runtime: {}\n", "layered_runtime",
              "layered_runtime is not supported by dpukit-mesh"},
        Fault{"Redirect", edit("route: {cluster: backend}", "redirect: {path_redirect: /x}"), route0(".redirect"),
              "redirect is not supported by dpukit-mesh"},
        Fault{"RuntimeFraction", edit("match: {prefix: /}", "match: {prefix: /, runtime_fraction: {}}"),
              route0(".match.runtime_fraction"), "runtime_fraction is not supported by dpukit-mesh"},
        Fault{"QueryParameterAbsentMatch",
              edit("match: {prefix: /}", "match: {prefix: /, query_parameters: [{name: a, present_match: false}]}"),
              route0(".match.query_parameters[0].present_match"), "present_match: false matches nothing in Envoy"},
        Fault{"Maglev", edit("lb_policy: ROUND_ROBIN", "lb_policy: MAGLEV"), "static_resources.clusters[0].lb_policy",
              "MAGLEV is not supported by dpukit-mesh"},
        Fault{"LogicalDns", edit(kCluster, kCluster + "    type: LOGICAL_DNS\n"), "static_resources.clusters[0].type",
              "LOGICAL_DNS is not supported by dpukit-mesh"},
        Fault{"UnknownHttpFilter", edit("- name: envoy.filters.http.router", "- name: envoy.filters.http.cors"),
              hcm(".http_filters[0].name"), "envoy.filters.http.cors is not supported by dpukit-mesh"},
        Fault{"UnknownNetworkFilter",
              edit("- name: envoy.filters.network.http_connection_manager", "- name: envoy.filters.network.redis_proxy"),
              "static_resources.listeners[0].filter_chains[0].filters[0].name",
              "envoy.filters.network.redis_proxy is not supported by dpukit-mesh"},
        Fault{"RetryOn", edit("route: {cluster: backend}", "route: {cluster: backend, retry_policy: {retry_on: \"5xx,refused-stream\"}}"),
              route0(".route.retry_policy.retry_on"), "'refused-stream' is not supported by dpukit-mesh"},
        Fault{"HighPriority",
              edit(kCluster, kCluster + "    circuit_breakers: {thresholds: [{priority: HIGH, max_connections: 1}]}\n"),
              "static_resources.clusters[0].circuit_breakers.thresholds[0].priority",
              "HIGH is not supported by dpukit-mesh"},
        Fault{"OtherExtensionProtocolOptions",
              edit(kCluster, kCluster + "    typed_extension_protocol_options: {envoy.extensions.upstreams.tcp.v3.TcpProtocolOptions: {}}\n"),
              "static_resources.clusters[0].typed_extension_protocol_options.envoy.extensions.upstreams.tcp.v3.TcpProtocolOptions",
              "envoy.extensions.upstreams.tcp.v3.TcpProtocolOptions is not supported by dpukit-mesh"},
        // Wrong types.
        Fault{"ListForMap", edit("route: {cluster: backend}", "route: [backend]"), route0(".route"),
              "expected a mapping, got a list"},
        Fault{"TextForNumber", edit("port_value: 10000", "port_value: ten"),
              "static_resources.listeners[0].address.socket_address.port_value", "expected an integer, got 'ten'"},
        Fault{"NumberForString", edit("name: all", "name: 7"), hcm(".route_config.virtual_hosts[0].name"),
              "expected a string, got '7' (quote it)"},
        Fault{"PortRange", edit("port_value: 10000", "port_value: 0"),
              "static_resources.listeners[0].address.socket_address.port_value", "must be between 1 and 65535, got 0"},
        Fault{"WrongAnyType", edit("v3.Router", "v3.Rooter"), hcm(".http_filters[0].typed_config.@type"),
              "expected type.googleapis.com/envoy.extensions.filters.http.router.v3.Router, got "
              "'type.googleapis.com/envoy.extensions.filters.http.router.v3.Rooter'"},
        // Durations.
        Fault{"NegativeDuration", edit("route: {cluster: backend}", "route: {cluster: backend, timeout: -1s}"),
              route0(".route.timeout"), "a duration must not be negative, got '-1s'"},
        Fault{"DurationWithoutUnit", edit("route: {cluster: backend}", "route: {cluster: backend, timeout: 5}"),
              route0(".route.timeout"), "expected a duration such as \"5s\" or \"0.25s\", got '5'"},
        Fault{"DurationNanos", edit("route: {cluster: backend}", "route: {cluster: backend, timeout: {nanos: 1000000000}}"),
              route0(".route.timeout.nanos"), "must be between 0 and 999999999, got 1000000000"},
        // Missing required fields.
        Fault{"MissingClusterName", edit("- name: backend\n    lb_policy", "- lb_policy"), "static_resources.clusters[0].name",
              "missing required field"},
        Fault{"MissingStatPrefix", edit("stat_prefix: http", "codec_type: AUTO"), hcm(".stat_prefix"),
              "missing required field"},
        Fault{"MissingMatch", edit("- match: {prefix: /}\n                route", "- route"), route0(".match"),
              "missing required field"},
        // Oneofs.
        Fault{"RouteAndDirectResponse",
              edit("route: {cluster: backend}", "route: {cluster: backend}\n                direct_response: {status: 200}"),
              kRoute0, "route and direct_response both given (only one is allowed)"},
        Fault{"NoPathSpecifier", edit("match: {prefix: /}", "match: {case_sensitive: true}"), route0(".match"),
              "one of prefix, path, safe_regex is required"},
        Fault{"PrefixAndPath", edit("match: {prefix: /}", "match: {prefix: /, path: /a}"), route0(".match"),
              "prefix and path both given (only one is allowed)"},
        Fault{"AppendAndAppendAction",
              edit("route: {cluster: backend}", "route: {cluster: backend}\n                request_headers_to_add: "
                                                "[{header: {key: a, value: b}, append: true, append_action: ADD_IF_ABSENT}]"),
              route0(".request_headers_to_add[0]"), "append and append_action both given"},
        // Cross-checks.
        Fault{"UnknownClusterReference", edit("route: {cluster: backend}", "route: {cluster: backnd}"), route0(".route.cluster"),
              "unknown cluster 'backnd'"},
        Fault{"UnknownWeightedCluster",
              edit("route: {cluster: backend}",
                   "route: {weighted_clusters: {clusters: [{name: backend, weight: 1}, {name: other, weight: 1}]}}"),
              route0(".route.weighted_clusters.clusters[1].name"), "unknown cluster 'other'"},
        Fault{"ZeroWeight",
              edit("route: {cluster: backend}", "route: {weighted_clusters: {clusters: [{name: backend, weight: 0}]}}"),
              route0(".route.weighted_clusters.clusters[0].weight"), "must be between 1 and 4294967295, got 0"},
        // Two listeners on one address: Envoy refuses it ("has duplicate address").
        Fault{"DuplicateListenerAddress", edit("  clusters:\n", kListenerOnSamePort + "  clusters:\n"),
              "static_resources.listeners[1].address",
              "duplicate address '127.0.0.1:10000': listeners[0] is there already"},
        Fault{"DuplicateListenerName",
              edit("  clusters:\n", edit("port_value: 10000", "port_value: 10001", kListenerOnSamePort) + "  clusters:\n"),
              "static_resources.listeners[1].name", "duplicate listener name 'http'"},
        // Http1ProtocolOptions: what is not carried out is refused by name.
        Fault{"Http1OptionNotCarriedOut",
              edit("stat_prefix: http", "stat_prefix: http\n          http_protocol_options: {allow_absolute_url: true}"),
              hcm(".http_protocol_options.allow_absolute_url"), "allow_absolute_url is not supported by dpukit-mesh"},
        Fault{"DuplicateCluster", edit(kCluster, kCluster + kCluster.substr(1)),
              "static_resources.clusters[1].name", "duplicate cluster name 'backend'"},
        Fault{"DuplicateDomain", edit("domains: [\"*\"]", "domains: [\"a.com\", \"A.com\"]"),
              hcm(".route_config.virtual_hosts[0]"), "domain 'a.com' is given twice (domains are unique across virtual hosts)"},
        Fault{"BadRegex", edit("match: {prefix: /}", "match: {safe_regex: {regex: \"/a(b\"}}"),
              route0(".match.safe_regex.regex"), ""},
        Fault{"RouterNotLast",
              edit("          http_filters:\n", "          http_filters:\n          - name: envoy.filters.http.router\n"
                                                "            typed_config: {\"@type\": type.googleapis.com/envoy."
                                                "extensions.filters.http.router.v3.Router}\n"),
              hcm(".http_filters[1]"), "envoy.filters.http.router must be the last HTTP filter"},
        Fault{"NoRouter", edit("http.router.v3.Router", "http.local_ratelimit.v3.LocalRateLimit\n              stat_prefix: rl\n              "
                                            "token_bucket: {max_tokens: 1, fill_interval: 1s}",
                               edit("- name: envoy.filters.http.router", "- name: envoy.filters.http.local_ratelimit")),
              hcm(".http_filters"), "the last HTTP filter must be envoy.filters.http.router"},
        Fault{"FillInterval", edit("http.router.v3.Router", "http.local_ratelimit.v3.LocalRateLimit\n              stat_prefix: rl\n              "
                                                "token_bucket: {max_tokens: 1, fill_interval: 0.01s}",
                                   edit("- name: envoy.filters.http.router", "- name: envoy.filters.http.local_ratelimit")),
              hcm(".http_filters[0].typed_config.token_bucket.fill_interval"), "fill_interval must be at least 50ms (as in Envoy)"},
        Fault{"StaticDnsName", edit("address: 127.0.0.1, port_value: 18080", "address: backend.local, port_value: 18080"),
              "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address",
              "a STATIC cluster needs IP addresses, got 'backend.local' (use STRICT_DNS)"},
        Fault{"EmptyFilterChain", edit("    - filters:", "    - filters: []\n      filter_chain_match: {transport_protocol: tls}\n    - filters:"),
              "static_resources.listeners[0].filter_chains[0].filters",
              "the filter chain must end with http_connection_manager or tcp_proxy"},
        Fault{"DuplicateKey", edit("stat_prefix: http", "stat_prefix: http\n          stat_prefix: web"),
              hcm(".stat_prefix"), "duplicate field (first on line 12)"},
        Fault{"RegexIgnoreCase",
              edit("match: {prefix: /}",
                   "match: {prefix: /, headers: [{name: x, string_match: {safe_regex: {regex: a}, ignore_case: true}}]}"),
              route0(".match.headers[0].string_match.ignore_case"), "ignore_case has no effect for safe_regex"}),
    [](const ::testing::TestParamInfo<Fault>& info) { return info.param.name; });

TEST(Config, ErrorsCarryTheYamlLine) {
  try {
    parse_bootstrap(edit("lb_policy: ROUND_ROBIN", "lb_polcy: ROUND_ROBIN"));
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "static_resources.clusters[0].lb_polcy (line 26): unknown field");
    EXPECT_EQ(e.path(), "static_resources.clusters[0].lb_polcy");
    EXPECT_EQ(e.line(), 26);
  }
}

TEST(Config, BadRegexIsNamed) {
  try {
    parse_bootstrap(edit("match: {prefix: /}", "match: {safe_regex: {regex: \"/a(b\"}}"));
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid regex '/a(b'"), std::string::npos) << e.what();
  }
}

TEST(Config, YamlSyntaxErrorHasTheLine) {
  try {
    parse_bootstrap("static_resources:\n  listeners: [\n  clusters: {\n");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "");
    EXPECT_GT(e.line(), 0);
    EXPECT_TRUE(std::string(e.what()).starts_with("line " + std::to_string(e.line()) + ": YAML syntax error: "))
        << e.what();
  }
}

// Envoy's configuration is protobuf, whose strings are UTF-8: a name that is
// not would be refused by Envoy, and could not be shown by the admin pages.
TEST(Config, TextThatIsNotUtf8IsRefusedWithItsLineAndColumn) {
  // The cluster's name is on line 25, from column 11; each case names the byte that breaks it.
  const struct {
    const char* name;
    const char* byte;
    int column;
  } cases[] = {
      {"back\xff", "0xFF", 15},            // never in UTF-8
      {"back\x80", "0x80", 15},            // a continuation with nothing to continue
      {"back\xc3x", "0x78", 16},           // a character cut short
      {"back\xc0\xaf", "0xC0", 15},        // overlong '/'
      {"back\xe0\x80\x80", "0x80", 16},    // overlong, three bytes
      {"back\xed\xa0\x80", "0xA0", 16},    // a surrogate
      {"back\xf0\x80\x80\x80", "0x80", 16},  // overlong, four bytes
      {"back\xf4\x90\x80\x80", "0x90", 16},  // above U+10FFFF
      {"back\xf5\x80\x80\x80", "0xF5", 15},  // above U+10FFFF
  };
  for (const auto& c : cases) {
    try {
      parse_bootstrap(edit("- name: backend", std::string("- name: ") + c.name));
      FAIL() << "accepted " << c.byte;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.line(), 25) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("not UTF-8 text: byte ") + c.byte + " at column " +
                                           std::to_string(c.column)),
                std::string::npos)
          << e.what();
    }
  }
  // Cut short by the end of the text, and UTF-16 with its byte-order mark.
  const std::pair<std::string, std::string> whole[] = {
      {kMinimal + "# caf\xc3", "not UTF-8 text: the text ends inside a character"},
      {std::string("\xff\xfe") + "s\0t\0", "the configuration is UTF-16 or UTF-32"}};
  for (const auto& [text, reason] : whole) {
    try {
      parse_bootstrap(text);
      FAIL() << "accepted: " << reason;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
  // Characters beyond ASCII are fine, up to U+10FFFF.
  const Bootstrap b =
      parse_bootstrap(edit("- name: backend\n", "- name: backend\n    # caf\xc3\xa9 \xe6\x97\xa5 \xf4\x8f\xbf\xbf\n"));
  EXPECT_EQ(b.clusters.size(), 1u);
}

TEST(Config, UnreadableFileHasAnEmptyPathAndTheReason) {
  try {
    load_bootstrap("/nonexistent/mesh.yaml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "");
    EXPECT_STREQ(e.what(), "cannot read /nonexistent/mesh.yaml: No such file or directory");
  }
}

TEST(Config, EnvoyDefaultsApply) {
  const Bootstrap b = parse_bootstrap(kMinimal);
  EXPECT_FALSE(b.admin.address);
  ASSERT_EQ(b.listeners.size(), 1u);
  const Listener& l = b.listeners[0];
  EXPECT_EQ(l.per_connection_buffer_limit_bytes, 1024u * 1024);
  ASSERT_EQ(l.filter_chains[0].filters.size(), 1u);
  const HttpConnectionManager& h = *l.filter_chains[0].filters[0].hcm;
  EXPECT_EQ(h.codec_type, HttpConnectionManager::Codec::kAuto);
  EXPECT_EQ(h.max_request_headers_kb, 60u);
  EXPECT_EQ(h.max_headers_count, 100u);
  EXPECT_EQ(h.idle_timeout, 1h);
  EXPECT_EQ(h.stream_idle_timeout, 5min);
  EXPECT_EQ(h.request_timeout, 0ms);
  EXPECT_TRUE(h.generate_request_id);
  EXPECT_FALSE(h.use_remote_address);
  const Route& r = h.route_config.virtual_hosts[0].routes[0];
  EXPECT_TRUE(r.match.case_sensitive);
  EXPECT_EQ(r.route->timeout, 15s);
  EXPECT_FALSE(r.route->retry_policy);
  const Cluster& c = b.clusters[0];
  EXPECT_EQ(c.type, Cluster::Type::kStatic);
  EXPECT_EQ(c.connect_timeout, 5s);
  EXPECT_EQ(c.lb_policy, Cluster::LbPolicy::kRoundRobin);
  EXPECT_EQ(c.circuit_breakers.max_connections, 1024u);
  EXPECT_EQ(c.circuit_breakers.max_retries, 3u);
  EXPECT_FALSE(c.outlier_detection);
  EXPECT_FALSE(c.http2);
  ASSERT_EQ(c.endpoints.size(), 1u);
  EXPECT_EQ(c.endpoints[0].address.ip, "127.0.0.1");
  EXPECT_EQ(c.endpoints[0].address.port, 18080);
  EXPECT_EQ(c.endpoints[0].load_balancing_weight, 1u);
}

TEST(Config, Http10IsRefusedUnlessAccepted) {
  // Envoy's default: accept_http_10 false (HTTP/1.0 requests get 426).
  const HttpConnectionManager& off = *parse_bootstrap(kMinimal).listeners[0].filter_chains[0].filters[0].hcm;
  EXPECT_FALSE(off.accept_http_10);
  EXPECT_EQ(off.default_host_for_http_10, "");
  const Bootstrap b = parse_bootstrap(edit(
      "stat_prefix: http",
      "stat_prefix: http\n          http_protocol_options: {accept_http_10: true, default_host_for_http_10: old.test}"));
  const HttpConnectionManager& on = *b.listeners[0].filter_chains[0].filters[0].hcm;
  EXPECT_TRUE(on.accept_http_10);
  EXPECT_EQ(on.default_host_for_http_10, "old.test");
  const nlohmann::json j = to_json(b)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
  EXPECT_EQ(j["http_protocol_options"]["accept_http_10"], true);
  EXPECT_EQ(j["http_protocol_options"]["default_host_for_http_10"], "old.test");
}

TEST(Config, AListenerWithoutANameIsNamedByItsAddress) {
  // Envoy accepts a listener with no name (proto3: absent and "" are the
  // same) and names it itself; here its address is its name, so a reload
  // finds it again.
  const Bootstrap b = parse_bootstrap(edit("  - name: http\n    address:", "  - address:"));
  EXPECT_EQ(b.listeners[0].name, "127.0.0.1:10000");
  EXPECT_EQ(parse_bootstrap(edit("  - name: http\n", "  - name: \"\"\n")).listeners[0].name, "127.0.0.1:10000");
  // Another listener already called that: the generated name steps aside.
  const std::string named_like_an_address =
      edit("port_value: 10000", "port_value: 10001", edit("- name: http", "- name: \"127.0.0.1:10000\"", kListenerOnSamePort));
  const Bootstrap both =
      parse_bootstrap(edit("  clusters:\n", named_like_an_address + "  clusters:\n", edit("  - name: http\n    address:", "  - address:")));
  ASSERT_EQ(both.listeners.size(), 2u);
  EXPECT_EQ(both.listeners[0].name, "127.0.0.1:10000#2");
  EXPECT_EQ(both.listeners[1].name, "127.0.0.1:10000");
}

TEST(Config, EnvoysOwnFrontProxyExample) {
  const Bootstrap b = example("envoy-front-proxy.yaml");
  ASSERT_EQ(b.listeners.size(), 1u);
  EXPECT_EQ(b.listeners[0].name, "0.0.0.0:8080");
  ASSERT_EQ(b.clusters.size(), 2u);
  EXPECT_EQ(b.clusters[0].type, Cluster::Type::kStrictDns);
  EXPECT_EQ(b.clusters[0].connect_timeout, 5s);
}

TEST(Config, RetryPolicyAndRateLimitDefaults) {
  const Bootstrap b = parse_bootstrap(
      edit("route: {cluster: backend}", "route: {cluster: backend, retry_policy: {retry_on: gateway-error}}",
           edit("          http_filters:\n",
                "          http_filters:\n          - name: envoy.filters.http.local_ratelimit\n"
                "            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions."
                "filters.http.local_ratelimit.v3.LocalRateLimit\n              stat_prefix: rl\n"
                "              token_bucket: {max_tokens: \"10\", fill_interval: {seconds: 2, nanos: 500000000}}\n"
                "              filter_enabled: {default_value: {numerator: 25}}\n")));
  const HttpConnectionManager& h = *b.listeners[0].filter_chains[0].filters[0].hcm;
  const RetryPolicy& p = *h.route_config.virtual_hosts[0].routes[0].route->retry_policy;
  EXPECT_TRUE(p.on_gateway_error);
  EXPECT_FALSE(p.on_5xx);
  EXPECT_EQ(p.num_retries, 1u);
  EXPECT_EQ(p.per_try_timeout, 0ms);
  ASSERT_EQ(h.http_filters.size(), 2u);
  const LocalRateLimit& rl = *h.http_filters[0].local_ratelimit;
  EXPECT_EQ(rl.max_tokens, 10u);  // a numeric string, as proto-JSON allows
  EXPECT_EQ(rl.tokens_per_fill, 1u);
  EXPECT_EQ(rl.fill_interval, 2500ms);
  EXPECT_DOUBLE_EQ(rl.enabled_fraction, 0.25);  // denominator defaults to HUNDRED
  EXPECT_DOUBLE_EQ(rl.enforced_fraction, 0.0);  // absent: Envoy's 0 %
}

TEST(Config, SubMillisecondDurationsRoundUp) {
  const Bootstrap b = parse_bootstrap(edit("route: {cluster: backend}", "route: {cluster: backend, timeout: 1.000340s}"));
  EXPECT_EQ(b.listeners[0].filter_chains[0].filters[0].hcm->route_config.virtual_hosts[0].routes[0].route->timeout, 1001ms);
}

TEST(Config, FrontProxyExample) {
  const Bootstrap b = example("front-proxy.yaml");
  EXPECT_EQ(b.node.id, "front-proxy-0");
  EXPECT_EQ(b.node.cluster, "front-proxy");
  ASSERT_TRUE(b.admin.address);
  EXPECT_EQ(b.admin.address->ip, "127.0.0.1");
  EXPECT_EQ(b.admin.address->port, 19901);

  ASSERT_EQ(b.listeners.size(), 1u);
  const Listener& l = b.listeners[0];
  EXPECT_EQ(l.name, "ingress_http");
  EXPECT_EQ(l.address.port, 10000);
  EXPECT_EQ(l.per_connection_buffer_limit_bytes, 65536u);
  ASSERT_EQ(l.filter_chains[0].filters.size(), 1u);
  EXPECT_EQ(l.filter_chains[0].filters[0].kind, NetworkFilter::Kind::kHttpConnectionManager);
  const HttpConnectionManager& h = *l.filter_chains[0].filters[0].hcm;
  EXPECT_EQ(h.stat_prefix, "ingress_http");
  EXPECT_TRUE(h.use_remote_address);
  EXPECT_EQ(h.max_request_headers_kb, 32u);
  EXPECT_EQ(h.stream_idle_timeout, 60s);
  EXPECT_EQ(h.request_headers_timeout, 10s);
  EXPECT_EQ(h.idle_timeout, 300s);
  EXPECT_EQ(h.max_headers_count, 64u);

  const RouteConfiguration& rc = h.route_config;
  EXPECT_EQ(rc.name, "front");
  ASSERT_EQ(rc.headers.response_headers_to_add.size(), 1u);
  EXPECT_EQ(rc.headers.response_headers_to_add[0].key, "x-served-by");
  EXPECT_EQ(rc.headers.response_headers_to_add[0].action, HeaderValueOption::Action::kOverwriteIfExistsOrAdd);
  ASSERT_EQ(rc.virtual_hosts.size(), 2u);
  const VirtualHost& shop = rc.virtual_hosts[0];
  EXPECT_EQ(shop.domains, (std::vector<std::string>{"shop.example.com", "shop.example.com:10000"}));
  EXPECT_EQ(shop.headers.request_headers_to_remove, std::vector<std::string>{"x-debug"});
  ASSERT_EQ(shop.routes.size(), 6u);

  const Route& canary = shop.routes[0];
  EXPECT_EQ(canary.match.kind, RouteMatch::Kind::kPrefix);
  EXPECT_EQ(canary.match.value, "/api/");
  ASSERT_EQ(canary.match.headers.size(), 1u);
  EXPECT_EQ(canary.match.headers[0].name, "x-canary");
  EXPECT_EQ(canary.match.headers[0].kind, HeaderMatcher::Kind::kExact);
  EXPECT_EQ(canary.match.headers[0].value, "true");
  EXPECT_EQ(canary.route->cluster, "api_v2");
  EXPECT_EQ(canary.route->timeout, 2s);

  const Route& api = shop.routes[1];
  ASSERT_EQ(api.route->weighted.size(), 2u);
  EXPECT_EQ(api.route->weighted[0].name, "api_v1");
  EXPECT_EQ(api.route->weighted[0].weight, 90u);
  EXPECT_EQ(api.route->weighted[1].weight, 10u);
  const RetryPolicy& retry = *api.route->retry_policy;
  EXPECT_TRUE(retry.on_5xx && retry.on_connect_failure && retry.on_reset);
  EXPECT_FALSE(retry.on_gateway_error || retry.on_retriable_4xx);
  EXPECT_EQ(retry.num_retries, 2u);
  EXPECT_EQ(retry.per_try_timeout, 1s);
  ASSERT_EQ(api.headers.request_headers_to_add.size(), 1u);
  EXPECT_EQ(api.headers.request_headers_to_add[0].value, "api");
  EXPECT_EQ(api.headers.request_headers_to_add[0].action, HeaderValueOption::Action::kAppendIfExistsOrAdd);

  const Route& products = shop.routes[2];
  EXPECT_EQ(products.match.kind, RouteMatch::Kind::kSafeRegex);
  EXPECT_EQ(products.match.value, "^/products/[0-9]+$");
  ASSERT_EQ(products.route->hash_policy.size(), 2u);
  EXPECT_EQ(products.route->hash_policy[0].kind, HashPolicy::Kind::kHeader);
  EXPECT_EQ(products.route->hash_policy[0].header_name, "x-user-id");
  EXPECT_TRUE(products.route->hash_policy[0].terminal);
  EXPECT_EQ(products.route->hash_policy[1].kind, HashPolicy::Kind::kSourceIp);

  EXPECT_FALSE(shop.routes[3].match.case_sensitive);
  EXPECT_EQ(shop.routes[3].route->prefix_rewrite, "/ui/");
  EXPECT_EQ(shop.routes[4].match.kind, RouteMatch::Kind::kPath);
  ASSERT_TRUE(shop.routes[4].direct_response);
  EXPECT_EQ(shop.routes[4].direct_response->body, "User-agent: *\nDisallow: /api/\n");

  const VirtualHost& status = rc.virtual_hosts[1];
  const HeaderMatcher& ua = status.routes[1].match.headers[0];
  EXPECT_EQ(ua.kind, HeaderMatcher::Kind::kContains);
  EXPECT_TRUE(ua.ignore_case);
  EXPECT_TRUE(ua.invert);
  EXPECT_EQ(status.routes[1].direct_response->status, 403u);
  EXPECT_EQ(status.routes[2].route->timeout, 500ms);

  ASSERT_EQ(h.http_filters.size(), 2u);
  EXPECT_EQ(h.http_filters[1].kind, HttpFilter::Kind::kRouter);
  const LocalRateLimit& rl = *h.http_filters[0].local_ratelimit;
  EXPECT_EQ(rl.stat_prefix, "ingress_ratelimit");
  EXPECT_EQ(rl.max_tokens, 200u);
  EXPECT_EQ(rl.tokens_per_fill, 100u);
  EXPECT_EQ(rl.fill_interval, 1s);
  EXPECT_DOUBLE_EQ(rl.enabled_fraction, 1.0);
  EXPECT_DOUBLE_EQ(rl.enforced_fraction, 1.0);
  ASSERT_EQ(rl.response_headers_to_add.size(), 1u);
  EXPECT_EQ(rl.response_headers_to_add[0].key, "x-local-rate-limit");

  ASSERT_EQ(b.clusters.size(), 4u);
  const Cluster& web = b.clusters[0];
  EXPECT_EQ(web.connect_timeout, 250ms);
  EXPECT_EQ(web.endpoints.size(), 2u);
  EXPECT_EQ(web.circuit_breakers.max_connections, 512u);
  EXPECT_EQ(web.circuit_breakers.max_pending_requests, 256u);
  EXPECT_EQ(web.circuit_breakers.max_requests, 1024u);
  EXPECT_EQ(web.circuit_breakers.max_retries, 8u);
  ASSERT_TRUE(web.outlier_detection);
  EXPECT_EQ(web.outlier_detection->consecutive_5xx, 3u);
  EXPECT_EQ(web.outlier_detection->interval, 5s);
  EXPECT_EQ(web.outlier_detection->base_ejection_time, 15s);
  EXPECT_EQ(web.outlier_detection->max_ejection_percent, 50u);
  EXPECT_EQ(web.outlier_detection->enforcing_consecutive_5xx, 100u);
  const Cluster& api_v1 = b.clusters[1];
  EXPECT_EQ(api_v1.lb_policy, Cluster::LbPolicy::kLeastRequest);
  EXPECT_EQ(api_v1.least_request_choice_count, 3u);
  EXPECT_EQ(api_v1.endpoints[0].load_balancing_weight, 2u);
  EXPECT_EQ(api_v1.outlier_detection->interval, 10s);  // Envoy's default
  EXPECT_TRUE(b.clusters[2].http2);
  const Cluster& cache = b.clusters[3];
  EXPECT_EQ(cache.lb_policy, Cluster::LbPolicy::kRingHash);
  EXPECT_EQ(cache.ring_hash_minimum_ring_size, 1024u);
  EXPECT_EQ(cache.ring_hash_maximum_ring_size, 65536u);
  EXPECT_EQ(cache.endpoints.size(), 3u);
}

TEST(Config, TcpProxyExample) {
  const Bootstrap b = example("tcp-proxy.yaml");
  ASSERT_EQ(b.listeners.size(), 2u);
  const TcpProxy& pg = *b.listeners[0].filter_chains[0].filters[0].tcp_proxy;
  EXPECT_EQ(b.listeners[0].filter_chains[0].filters[0].kind, NetworkFilter::Kind::kTcpProxy);
  EXPECT_EQ(pg.stat_prefix, "postgres");
  EXPECT_TRUE(pg.cluster.empty());
  ASSERT_EQ(pg.weighted.size(), 2u);
  EXPECT_EQ(pg.weighted[1].name, "postgres_new");
  EXPECT_EQ(pg.weighted[1].weight, 3u);
  EXPECT_EQ(pg.idle_timeout, 30min);
  EXPECT_EQ(pg.max_connect_attempts, 3u);
  const TcpProxy& redis = *b.listeners[1].filter_chains[0].filters[0].tcp_proxy;
  EXPECT_EQ(redis.cluster, "redis");
  EXPECT_EQ(redis.idle_timeout, 1h);
  EXPECT_EQ(redis.max_connect_attempts, 1u);
  EXPECT_EQ(b.clusters[2].lb_policy, Cluster::LbPolicy::kRandom);
  EXPECT_EQ(b.clusters[2].circuit_breakers.max_connections, 10000u);
  EXPECT_EQ(b.clusters[2].circuit_breakers.max_pending_requests, 1024u);
}

TEST(Config, HealthChecksExample) {
  const Bootstrap b = example("health-checks.yaml");
  EXPECT_EQ(b.listeners[0].filter_chains[0].filters[0].hcm->codec_type, HttpConnectionManager::Codec::kHttp1);
  EXPECT_EQ(b.listeners[0].filter_chains[0].filters[0].hcm->request_timeout, 30s);
  const Cluster& catalog = b.clusters[0];
  ASSERT_EQ(catalog.health_checks.size(), 1u);
  const HealthCheck& hc = catalog.health_checks[0];
  EXPECT_EQ(hc.timeout, 1s);
  EXPECT_EQ(hc.interval, 5s);
  EXPECT_EQ(hc.unhealthy_threshold, 3u);
  EXPECT_EQ(hc.healthy_threshold, 2u);
  EXPECT_EQ(hc.path, "/healthz");
  EXPECT_EQ(hc.host, "catalog.internal");
  EXPECT_EQ(hc.expected_statuses, (std::vector<std::pair<uint32_t, uint32_t>>{{200, 205}, {304, 305}}));
  const Cluster& search = b.clusters[1];
  EXPECT_EQ(search.type, Cluster::Type::kStrictDns);
  EXPECT_EQ(search.dns_refresh_rate, 30s);
  EXPECT_EQ(search.endpoints[0].address.ip, "localhost");
  EXPECT_EQ(search.health_checks[0].host, "search");  // defaults to the cluster's name
  EXPECT_EQ(search.health_checks[0].expected_statuses, (std::vector<std::pair<uint32_t, uint32_t>>{{200, 201}}));
}

TEST(Config, UdsExample) {
  const Bootstrap b = example("uds.yaml");
  EXPECT_FALSE(b.listeners[0].filter_chains[0].filters[0].hcm->generate_request_id);
  const Endpoint& e = b.clusters[0].endpoints.at(0);
  EXPECT_TRUE(e.address.is_pipe());
  EXPECT_EQ(e.address.pipe_path, "/tmp/dpukit-mesh-exporter.sock");
  EXPECT_EQ(b.listeners[0].filter_chains[0].filters[0].hcm->route_config.virtual_hosts[0].routes[1].direct_response->status, 404u);
}

// Every shipped example parses, and to_json gives back a bootstrap that
// parses to the same JSON.
TEST(Config, EveryExampleRoundTripsThroughJson) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kExamples)) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    SCOPED_TRACE(entry.path().filename().string());
    const nlohmann::json once = to_json(load_bootstrap(entry.path()));
    // An inline private key is shown as Envoy's config_dump shows it, "[redacted]": no second parse.
    if (once.dump().find("[redacted]") != std::string::npos) continue;
    EXPECT_EQ(to_json(parse_bootstrap(once.dump())), once);
  }
  EXPECT_GE(count, 5);
}

TEST(Config, ToJsonUsesEnvoysNames) {
  const nlohmann::json j = to_json(example("front-proxy.yaml"));
  EXPECT_EQ(j["admin"]["address"]["socket_address"]["port_value"], 19901);
  const auto& listener = j["static_resources"]["listeners"][0];
  EXPECT_EQ(listener["name"], "ingress_http");
  const auto& hcm_json = listener["filter_chains"][0]["filters"][0]["typed_config"];
  EXPECT_EQ(hcm_json["@type"],
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager");
  EXPECT_EQ(hcm_json["stream_idle_timeout"], "60s");
  const auto& api = hcm_json["route_config"]["virtual_hosts"][0]["routes"][1]["route"];
  EXPECT_EQ(api["timeout"], "3s");
  EXPECT_EQ(api["retry_policy"]["retry_on"], "5xx,connect-failure,reset");
  EXPECT_EQ(api["weighted_clusters"]["clusters"][0]["weight"], 90);
  const auto& web = j["static_resources"]["clusters"][0];
  EXPECT_EQ(web["connect_timeout"], "0.250s");
  EXPECT_EQ(web["lb_policy"], "ROUND_ROBIN");
  EXPECT_EQ(web["circuit_breakers"]["thresholds"][0]["max_connections"], 512);
  EXPECT_EQ(j["static_resources"]["clusters"][2]["typed_extension_protocol_options"]
             ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
                 .contains("http2_protocol_options"),
            true);
}

TEST(AccessLogConfig, FileAndStreamLoggersWithTheirFormats) {
  const Bootstrap b = parse_bootstrap(edit("stat_prefix: http", R"(stat_prefix: http
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: /dev/null
          - name: json
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog
              log_format:
                omit_empty_values: true
                json_format:
                  code: "%RESPONSE_CODE%"
                  nested: {path: "%REQ(:PATH)%"})"));
  const auto& logs = b.listeners[0].filter_chains[0].filters[0].hcm->access_log;
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs[0].sink, AccessLog::Sink::kFile);
  EXPECT_EQ(logs[0].path, "/dev/null");
  EXPECT_EQ(*logs[0].text_format, std::string(kDefaultAccessLogFormat));  // Envoy's default line
  EXPECT_EQ(logs[1].sink, AccessLog::Sink::kStderr);
  EXPECT_TRUE(logs[1].omit_empty_values);
  ASSERT_TRUE(logs[1].json_format);
  EXPECT_EQ((*logs[1].json_format)["nested"]["path"], "%REQ(:PATH)%");
  // The config dump carries them back.
  const auto dumped = to_json(b)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
  EXPECT_EQ(dumped["access_log"][0]["typed_config"]["path"], "/dev/null");
}

}  // namespace
}  // namespace dpukit::mesh::config
