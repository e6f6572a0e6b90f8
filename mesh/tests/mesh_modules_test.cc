// The match-action processing modules against Envoy's semantics: the router's
// RouteTable (virtual hosts, routes, header matchers, weighted clusters,
// header rules), the ClusterRuntime (load balancers, panic threshold, outlier
// detection, circuit breakers, host sets) and the local rate limit's token
// bucket. Configurations are parsed from YAML, as the proxy gets them. Where
// Envoy 1.40 was run to settle a behaviour, the test says so.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "config/bootstrap.h"
#include "hcm_bootstrap.h"
#include "http/http1.h"
#include "modules/cluster.h"
#include "modules/filter.h"
#include "modules/router.h"
#include "stats.h"

namespace dpukit::mesh {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000 * kMs;

// A bootstrap with one HCM listener whose route_config is `virtual_hosts`
// (YAML indented for its place), `http_filters` before the router, and `clusters`.
std::string bootstrap_yaml(const std::string& virtual_hosts, const std::string& clusters,
                           const std::string& http_filters = "") {
  return testing::hcm_bootstrap(virtual_hosts, clusters, http_filters);
}

// A STATIC cluster named `name` with endpoints 127.0.0.1:<port> (weight w), and `extra` cluster fields.
std::string cluster_yaml(const std::string& name, const std::vector<std::pair<int, int>>& ports_weights,
                         const std::string& extra = "") {
  std::string s = "  - name: " + name + "\n" + extra + "    load_assignment:\n      cluster_name: " + name +
                  "\n      endpoints:\n      - lb_endpoints:\n";
  for (auto [port, weight] : ports_weights)
    s += "        - endpoint:\n            address:\n              socket_address: {address: 127.0.0.1, port_value: " +
         std::to_string(port) + "}\n          load_balancing_weight: " + std::to_string(weight) + "\n";
  return s;
}

http::RequestHead request(const std::string& host, const std::string& target,
                          std::vector<std::pair<std::string, std::string>> headers = {},
                          const std::string& method = "GET") {
  http::RequestHead h;
  h.method = method;
  h.target = target;
  if (target.front() == '/') {
    h.path = target.substr(0, target.find('?'));
  } else {  // absolute-form, as the parser splits it
    size_t start = target.find("://") + 3;
    size_t end = std::min(target.find_first_of("/?", start), target.size());
    std::string p = target.substr(end, target.find('?', end) - end);
    h.path = p.empty() ? "/" : p;
  }
  h.host = host;
  h.headers.add("Host", host);
  for (auto& [n, v] : headers) h.headers.add(n, v);
  return h;
}

// A parsed bootstrap with its clusters' runtimes and the first listener's RouteTable.
struct Fixture {
  explicit Fixture(const std::string& yaml, unsigned workers = 1) : store(workers) {
    boot = config::parse_bootstrap(yaml);
    for (const auto& c : boot.clusters) clusters[c.name] = std::make_unique<ClusterRuntime>(c, store.cluster(c.name));
    table = std::make_unique<RouteTable>(hcm().route_config,
                                         [this](const std::string& n) { return clusters.at(n).get(); });
  }
  const config::HttpConnectionManager& hcm() const { return *boot.listeners.at(0).filter_chains.at(0).filters.at(0).hcm; }
  // The name of the virtual host matched for `host` ("" for none).
  std::string vhost(const std::string& host) const {
    auto m = table->match(request(host, "/"));
    return m.vhost ? m.vhost->cfg->name : "";
  }
  // The name of the route matched ("" for none), or "<no vhost>".
  std::string route(const http::RequestHead& head) const {
    auto m = table->match(head);
    if (!m.vhost) return "<no vhost>";
    return m.route ? m.route->cfg->name : "";
  }
  ClusterRuntime& cluster(const std::string& n) { return *clusters.at(n); }

  StatsStore store;
  config::Bootstrap boot;
  std::map<std::string, std::unique_ptr<ClusterRuntime>> clusters;
  std::unique_ptr<RouteTable> table;
};

const std::string kBackend = cluster_yaml("backend", {{18080, 1}});

std::string vh(const std::string& name, const std::string& domains) {
  return "            - name: " + name + "\n              domains: " + domains +
         "\n              routes:\n              - match: {prefix: /}\n                route: {cluster: backend}\n";
}

// ---------------------------------------------------------------------------
// RouteTable: virtual hosts

TEST(RouteTableDomains, EnvoySearchOrder) {
  Fixture f(bootstrap_yaml(vh("exact", "[\"foo.com\", \"bar.com\"]") + vh("suffix", "[\"*.foo.com\"]") +
                               vh("suffix_bar", "[\"*-bar.foo.com\"]") + vh("prefix", "[\"foo.*\"]") +
                               vh("prefix_long", "[\"foo.bar.*\"]") + vh("port", "[\"port.com:8080\"]") +
                               vh("any", "[\"*\"]"),
                           kBackend));
  // The same table, Host by Host, as Envoy 1.40 answered it (one direct_response per virtual host).
  const std::vector<std::pair<std::string, std::string>> expect = {
      {"foo.com", "exact"},          {"FOO.Com", "exact"},         {"bar.com", "exact"},
      {"x.foo.com", "suffix"},       {"a-bar.foo.com", "suffix_bar"}, {"-bar.foo.com", "suffix"},
      {".foo.com", "any"},           {"foo.", "any"},              {"foo.x", "prefix"},
      {"foo.bar.x", "prefix_long"},  {"foo.bar.com", "prefix_long"}, {"port.com:8080", "port"},
      {"port.com", "any"},           {"x.foo.com:8080", "any"},
      // The port is part of the Host (no stripping by default): not "exact".
      {"bar.com:8080", "any"},       {"foo.com:8080", "prefix"},   {"unknown.org", "any"},
  };
  for (const auto& [host, name] : expect) EXPECT_EQ(f.vhost(host), name) << host;
}

TEST(RouteTableDomains, NoCatchAllMeansNoVirtualHost) {
  Fixture f(bootstrap_yaml(vh("exact", "[\"foo.com\"]") + vh("suffix", "[\"*.foo.com\"]"), kBackend));
  EXPECT_EQ(f.vhost("foo.com"), "exact");
  EXPECT_EQ(f.vhost("a.foo.com"), "suffix");
  EXPECT_EQ(f.vhost("foo.com:80"), "");
  EXPECT_EQ(f.vhost("xfoo.com"), "");
  auto m = f.table->match(request("other.com", "/"));
  EXPECT_EQ(m.vhost, nullptr);
  EXPECT_EQ(m.route, nullptr);
}

// ---------------------------------------------------------------------------
// RouteTable: routes

std::string routes_vh(const std::string& routes) {
  return "            - name: r\n              domains: [\"*\"]\n              routes:\n" + routes;
}
std::string rt(const std::string& name, const std::string& match, const std::string& cluster = "backend") {
  return "              - name: " + name + "\n                match: " + match + "\n                route: {cluster: " +
         cluster + "}\n";
}

TEST(RouteTableRoutes, PathMatchers) {
  Fixture f(bootstrap_yaml(
      routes_vh(rt("prefix_query", R"({prefix: "/search?q=1"})") + rt("api", "{prefix: /api}") +
                rt("exact", R"({path: "/Exact", case_sensitive: false})") +
                rt("exact_cs", R"({path: "/CS"})") + rt("regex", R"({safe_regex: {regex: "/re/[0-9]+"}})") +
                rt("ci", R"({prefix: "/e/", case_sensitive: false})")),
      kBackend));
  // As Envoy 1.40 answered: a prefix is matched against the path without the
  // query, so a prefix with '?' never matches.
  EXPECT_EQ(f.route(request("h", "/search?q=1")), "");
  EXPECT_EQ(f.route(request("h", "/search?q=1&z")), "");
  EXPECT_EQ(f.route(request("h", "/apix?y")), "api");
  EXPECT_EQ(f.route(request("h", "/api")), "api");
  EXPECT_EQ(f.route(request("h", "/API")), "");
  EXPECT_EQ(f.route(request("h", "/ap")), "");
  EXPECT_EQ(f.route(request("h", "/exact")), "exact");
  EXPECT_EQ(f.route(request("h", "/EXACT?x=1")), "exact");
  EXPECT_EQ(f.route(request("h", "/Exact/")), "");
  EXPECT_EQ(f.route(request("h", "/CS")), "exact_cs");
  EXPECT_EQ(f.route(request("h", "/cs")), "");
  EXPECT_EQ(f.route(request("h", "/re/12")), "regex");
  EXPECT_EQ(f.route(request("h", "/re/12?x")), "regex");
  EXPECT_EQ(f.route(request("h", "/re/1a")), "");
  EXPECT_EQ(f.route(request("h", "/x/re/1")), "");
  EXPECT_EQ(f.route(request("h", "/E/x?Q")), "ci");
  EXPECT_EQ(f.route(request("h", "/e")), "");
  // Absolute-form targets match by their path, as Envoy 1.40 does.
  EXPECT_EQ(f.route(request("routes.com", "http://routes.com/api?x")), "api");
  EXPECT_EQ(f.route(request("routes.com", "http://routes.com/re/5?x")), "regex");
}

TEST(RouteTableRoutes, FirstMatchWinsAndNoMatchKeepsTheVirtualHost) {
  Fixture f(bootstrap_yaml(routes_vh(rt("first", "{prefix: /a}") + rt("second", "{prefix: /a/b}") +
                                     rt("third", "{path: /a/b}")),
                           kBackend));
  EXPECT_EQ(f.route(request("h", "/a/b")), "first");
  auto m = f.table->match(request("h", "/zzz"));
  ASSERT_NE(m.vhost, nullptr);
  EXPECT_EQ(m.vhost->cfg->name, "r");
  EXPECT_EQ(m.route, nullptr);
}

std::string hdr_rt(const std::string& name, const std::string& matcher) {
  return rt(name, "{prefix: /, headers: [" + matcher + "]}");
}

TEST(RouteTableRoutes, HeaderMatchers) {
  Fixture f(bootstrap_yaml(routes_vh(hdr_rt("exact", R"({name: x-a, string_match: {exact: "v"}})") +
                                     hdr_rt("exact_ic", R"({name: x-b, string_match: {exact: "vAl", ignore_case: true}})") +
                                     hdr_rt("prefix", R"({name: x-c, string_match: {prefix: "pre"}})") +
                                     hdr_rt("suffix", R"({name: x-d, string_match: {suffix: "fix"}})") +
                                     hdr_rt("contains", R"({name: x-e, string_match: {contains: "mid"}})") +
                                     hdr_rt("regex", R"({name: x-f, string_match: {safe_regex: {regex: "[0-9]+"}}})") +
                                     hdr_rt("present", R"({name: x-g, present_match: true})") +
                                     hdr_rt("inv_exact", R"({name: x-h, string_match: {exact: "v"}, invert_match: true})") +
                                     hdr_rt("method", R"({name: ":method", string_match: {exact: "POST"}})")),
                           kBackend));
  auto r = [&](std::vector<std::pair<std::string, std::string>> h, const std::string& method = "GET") {
    return f.route(request("h", "/", std::move(h), method));
  };
  EXPECT_EQ(r({{"X-A", "v"}}), "exact");
  EXPECT_EQ(r({{"x-a", "V"}}), "");
  EXPECT_EQ(r({{"x-a", "vv"}}), "");
  EXPECT_EQ(r({{"x-b", "VAL"}}), "exact_ic");
  EXPECT_EQ(r({{"x-b", "vale"}}), "");
  EXPECT_EQ(r({{"x-c", "prefix"}}), "prefix");
  EXPECT_EQ(r({{"x-c", "Prefix"}}), "");
  EXPECT_EQ(r({{"x-d", "suffix"}}), "suffix");
  EXPECT_EQ(r({{"x-d", "fixed"}}), "");
  EXPECT_EQ(r({{"x-e", "amidst"}}), "contains");
  EXPECT_EQ(r({{"x-f", "123"}}), "regex");
  EXPECT_EQ(r({{"x-f", "12a"}}), "");  // a full match
  EXPECT_EQ(r({{"x-g", ""}}), "present");
  EXPECT_EQ(r({{"x-h", "w"}}), "inv_exact");
  EXPECT_EQ(r({{"x-h", "v"}}), "");
  EXPECT_EQ(r({}), "");  // an absent header never matches a string matcher, inverted or not
  EXPECT_EQ(r({}, "POST"), "method");  // Envoy 1.40 matches :method
}

TEST(RouteTableRoutes, RepeatedHeadersMatchByAnyValue) {
  // Envoy 1.40 with `x-m: a` and `x-m: b` (two fields): exact "a" and exact "b"
  // match, exact "a,b" and the regex "a,b" do not; one field "a,b" matches
  // only the latter two. Inverted: exact "a" and regex "b" do not match, exact "c" does.
  Fixture f(bootstrap_yaml(
      routes_vh(rt("a", R"({path: /a, headers: [{name: x-m, string_match: {exact: "a"}}]})") +
                rt("b", R"({path: /b, headers: [{name: x-m, string_match: {exact: "b"}}]})") +
                rt("ab", R"({path: /ab, headers: [{name: x-m, string_match: {exact: "a,b"}}]})") +
                rt("re", R"({path: /re, headers: [{name: x-m, string_match: {safe_regex: {regex: "a,b"}}}]})") +
                rt("sfx", R"({path: /sfx, headers: [{name: x-m, string_match: {suffix: "b"}}]})") +
                rt("inv_a", R"({path: /inv_a, headers: [{name: x-m, string_match: {exact: "a"}, invert_match: true}]})") +
                rt("inv_c", R"({path: /inv_c, headers: [{name: x-m, string_match: {exact: "c"}, invert_match: true}]})") +
                rt("inv_re", R"({path: /inv_re, headers: [{name: x-m, string_match: {safe_regex: {regex: "b"}}, invert_match: true}]})")),
      kBackend));
  auto two = [&](const std::string& path) { return f.route(request("h", path, {{"x-m", "a"}, {"x-m", "b"}})); };
  auto one = [&](const std::string& path) { return f.route(request("h", path, {{"x-m", "a,b"}})); };
  EXPECT_EQ(two("/a"), "a");
  EXPECT_EQ(two("/b"), "b");
  EXPECT_EQ(two("/ab"), "");
  EXPECT_EQ(two("/re"), "");
  EXPECT_EQ(two("/sfx"), "sfx");
  EXPECT_EQ(two("/inv_a"), "");
  EXPECT_EQ(two("/inv_c"), "inv_c");
  EXPECT_EQ(two("/inv_re"), "");
  EXPECT_EQ(one("/a"), "");
  EXPECT_EQ(one("/ab"), "ab");
  EXPECT_EQ(one("/re"), "re");
  EXPECT_EQ(one("/sfx"), "sfx");
}

TEST(RouteTableRoutes, AbsentHeaderAndPresentMatch) {
  Fixture f(bootstrap_yaml(
      routes_vh(rt("p_true", R"({path: /pt, headers: [{name: x-p, present_match: true}]})") +
                rt("p_false", R"({path: /pf, headers: [{name: x-p, present_match: false}]})") +
                rt("p_true_inv", R"({path: /pi, headers: [{name: x-p, present_match: true, invert_match: true}]})") +
                rt("p_false_inv", R"({path: /pn, headers: [{name: x-p, present_match: false, invert_match: true}]})") +
                rt("bare", R"({path: /bare, headers: [{name: x-p}]})")),
      kBackend));
  auto absent = [&](const std::string& p) { return f.route(request("h", p)); };
  auto present = [&](const std::string& p) { return f.route(request("h", p, {{"x-p", "1"}})); };
  EXPECT_EQ(absent("/pt"), "");
  EXPECT_EQ(present("/pt"), "p_true");
  EXPECT_EQ(absent("/pf"), "p_false");
  EXPECT_EQ(present("/pf"), "");
  EXPECT_EQ(absent("/pi"), "p_true_inv");
  EXPECT_EQ(present("/pi"), "");
  EXPECT_EQ(absent("/pn"), "");
  EXPECT_EQ(present("/pn"), "p_false_inv");
  EXPECT_EQ(absent("/bare"), "");  // no specifier: presence
  EXPECT_EQ(present("/bare"), "bare");
}

TEST(RouteTableRoutes, AllHeaderMatchersMustHold) {
  Fixture f(bootstrap_yaml(
      routes_vh(rt("both", R"({prefix: /, headers: [{name: x-a, string_match: {exact: "1"}}, {name: x-b, present_match: true}]})")),
      kBackend));
  EXPECT_EQ(f.route(request("h", "/", {{"x-a", "1"}, {"x-b", ""}})), "both");
  EXPECT_EQ(f.route(request("h", "/", {{"x-a", "1"}})), "");
  EXPECT_EQ(f.route(request("h", "/", {{"x-b", "1"}})), "");
}

TEST(RouteTableRoutes, WeightedClustersSplitByWeight) {
  Fixture f(bootstrap_yaml(routes_vh(R"(              - name: split
                match: {prefix: /}
                route:
                  weighted_clusters:
                    clusters:
                    - {name: a, weight: 10}
                    - {name: b, weight: 30}
                    - {name: c, weight: 60}
)"),
                           cluster_yaml("a", {{1, 1}}) + cluster_yaml("b", {{2, 1}}) + cluster_yaml("c", {{3, 1}})));
  const CompiledRoute* r = f.table->match(request("h", "/")).route;
  ASSERT_NE(r, nullptr);
  // Envoy: random % 100 walks the cumulative weights [0,10) a, [10,40) b, [40,100) c.
  EXPECT_EQ(r->pick_cluster(0)->name(), "a");
  EXPECT_EQ(r->pick_cluster(9)->name(), "a");
  EXPECT_EQ(r->pick_cluster(10)->name(), "b");
  EXPECT_EQ(r->pick_cluster(39)->name(), "b");
  EXPECT_EQ(r->pick_cluster(40)->name(), "c");
  EXPECT_EQ(r->pick_cluster(99)->name(), "c");
  EXPECT_EQ(r->pick_cluster(109)->name(), "a");
  std::mt19937_64 rng(42);
  std::map<std::string, int> n;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) ++n[r->pick_cluster(rng())->name()];
  // Binomial sd <= 155 for 100000 draws: +-1000 is > 6 sd.
  EXPECT_NEAR(n["a"], 10000, 1000);
  EXPECT_NEAR(n["b"], 30000, 1000);
  EXPECT_NEAR(n["c"], 60000, 1000);
}

TEST(RouteTableRoutes, DirectResponseRouteHasNoCluster) {
  Fixture f(bootstrap_yaml(routes_vh(R"(              - name: dr
                match: {prefix: /}
                direct_response: {status: 204}
)"),
                           kBackend));
  const CompiledRoute* r = f.table->match(request("h", "/")).route;
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->cfg->direct_response);
  EXPECT_EQ(r->pick_cluster(12345), nullptr);
}

// ---------------------------------------------------------------------------
// Header rules

std::vector<std::string> values(const http::HeaderList& h, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& f : h.fields)
    if (http::iequals(f.name, name)) out.push_back(f.value);
  return out;
}

TEST(HeaderRules, AppendActionsAsEnvoy) {
  Fixture f(bootstrap_yaml(routes_vh(R"(              - name: r
                match: {prefix: /}
                route: {cluster: backend}
                request_headers_to_remove: [x-gone, X-Gone2]
                request_headers_to_add:
                - {header: {key: x-append, value: "2"}, append_action: APPEND_IF_EXISTS_OR_ADD}
                - {header: {key: x-new, value: "n"}}
                - {header: {key: x-absent, value: "a"}, append_action: ADD_IF_ABSENT}
                - {header: {key: x-present, value: "p2"}, append_action: ADD_IF_ABSENT}
                - {header: {key: x-ow, value: "o2"}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}
                - {header: {key: x-ow-new, value: "o"}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}
                - {header: {key: x-oie, value: "i2"}, append_action: OVERWRITE_IF_EXISTS}
                - {header: {key: x-oie-absent, value: "i"}, append_action: OVERWRITE_IF_EXISTS}
                - {header: {key: x-legacy-true, value: "t2"}, append: true}
                - {header: {key: x-legacy-false, value: "f2"}, append: false}
                - {header: {key: x-gone, value: "back"}}
)"),
                           kBackend));
  const auto& rules = f.hcm().route_config.virtual_hosts[0].routes[0].headers;
  http::HeaderList h;
  for (auto [n, v] : std::vector<std::pair<std::string, std::string>>{
           {"x-append", "1"}, {"x-present", "p1"}, {"x-ow", "o1"}, {"x-ow", "o1b"}, {"x-oie", "i1"},
           {"x-legacy-true", "t1"}, {"x-legacy-false", "f1"}, {"x-gone", "old"}, {"x-gone2", "old"}, {"keep", "k"}})
    h.add(n, v);
  apply_header_rules_request(rules, h);
  EXPECT_EQ(values(h, "x-append"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(values(h, "x-new"), (std::vector<std::string>{"n"}));
  EXPECT_EQ(values(h, "x-absent"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(values(h, "x-present"), (std::vector<std::string>{"p1"}));
  EXPECT_EQ(values(h, "x-ow"), (std::vector<std::string>{"o2"}));
  EXPECT_EQ(values(h, "x-ow-new"), (std::vector<std::string>{"o"}));
  EXPECT_EQ(values(h, "x-oie"), (std::vector<std::string>{"i2"}));
  EXPECT_EQ(values(h, "x-oie-absent"), (std::vector<std::string>{}));
  EXPECT_EQ(values(h, "x-legacy-true"), (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(values(h, "x-legacy-false"), (std::vector<std::string>{"f2"}));
  EXPECT_EQ(values(h, "x-gone"), (std::vector<std::string>{"back"}));  // removed first, then added
  EXPECT_EQ(values(h, "x-gone2"), (std::vector<std::string>{}));
  EXPECT_EQ(values(h, "keep"), (std::vector<std::string>{"k"}));
}

TEST(HeaderRules, OneListIsDecidedOnTheHeadersBeforeIt) {
  // Envoy 1.40, response_headers_to_add on a direct_response: [x-a APPEND 1,
  // x-a ADD_IF_ABSENT 2, x-e APPEND "", x-o APPEND a, x-o OVERWRITE_IF_EXISTS_OR_ADD b,
  // x-i OVERWRITE_IF_EXISTS i] gave x-o: b, x-a: 1, x-a: 2, x-o: a (no x-e, no x-i).
  std::vector<config::HeaderValueOption> adds;
  using A = config::HeaderValueOption::Action;
  adds.push_back({"x-a", "1", A::kAppendIfExistsOrAdd});
  adds.push_back({"x-a", "2", A::kAddIfAbsent});
  adds.push_back({"x-e", "", A::kAppendIfExistsOrAdd});
  adds.push_back({"x-o", "a", A::kAppendIfExistsOrAdd});
  adds.push_back({"x-o", "b", A::kOverwriteIfExistsOrAdd});
  adds.push_back({"x-i", "i", A::kOverwriteIfExists});
  http::HeaderList h;
  apply_header_adds(adds, h);
  ASSERT_EQ(h.fields.size(), 4u);
  EXPECT_EQ(h.fields[0].name + "=" + h.fields[0].value, "x-o=b");
  EXPECT_EQ(h.fields[1].name + "=" + h.fields[1].value, "x-a=1");
  EXPECT_EQ(h.fields[2].name + "=" + h.fields[2].value, "x-a=2");
  EXPECT_EQ(h.fields[3].name + "=" + h.fields[3].value, "x-o=a");
}

TEST(HeaderRules, ResponseRules) {
  config::HeaderRules rules;
  rules.response_headers_to_remove = {"server"};
  rules.response_headers_to_add = {{"x-r", "1", config::HeaderValueOption::Action::kOverwriteIfExistsOrAdd}};
  http::HeaderList h;
  h.add("Server", "upstream");
  h.add("x-r", "0");
  apply_header_rules_response(rules, h);
  EXPECT_EQ(values(h, "server"), (std::vector<std::string>{}));
  EXPECT_EQ(values(h, "x-r"), (std::vector<std::string>{"1"}));
}

// ---------------------------------------------------------------------------
// ClusterRuntime

std::string lb(const std::string& policy) { return "    lb_policy: " + policy + "\n"; }

std::string port_of(const std::shared_ptr<Host>& h) { return h ? std::to_string(h->address.port) : "null"; }

TEST(ClusterLb, RoundRobinOrder) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("rr", {{1, 1}, {2, 1}, {3, 1}}, lb("ROUND_ROBIN"))));
  auto& c = f.cluster("rr");
  std::string seq;
  for (int i = 0; i < 7; ++i) seq += port_of(c.choose({}, 0));
  EXPECT_EQ(seq, "1231231");
  EXPECT_EQ(c.stats(0).upstream_rq_total.get(), 0u);  // the stats block exists per worker
}

TEST(ClusterLb, RoundRobinWeights) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("rr", {{1, 3}, {2, 1}, {3, 2}}, lb("ROUND_ROBIN"))));
  auto& c = f.cluster("rr");
  // Every window of total weight (6) picks holds each host exactly its weight times.
  std::vector<uint16_t> picks;
  for (int i = 0; i < 60; ++i) picks.push_back(c.choose({}, 0)->address.port);
  for (size_t start = 0; start + 6 <= picks.size(); ++start) {
    std::map<uint16_t, int> n;
    for (size_t k = start; k < start + 6; ++k) ++n[picks[k]];
    EXPECT_EQ(n[1], 3) << start;
    EXPECT_EQ(n[2], 1) << start;
    EXPECT_EQ(n[3], 2) << start;
  }
}

TEST(ClusterLb, RandomCoversAllHosts) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("rnd", {{1, 1}, {2, 1}, {3, 1}, {4, 1}}, lb("RANDOM"))));
  auto& c = f.cluster("rnd");
  std::mt19937_64 rng(7);
  std::map<uint16_t, int> n;
  for (int i = 0; i < 40000; ++i) ++n[c.choose({false, 0, rng()}, 0)->address.port];
  ASSERT_EQ(n.size(), 4u);
  for (auto [port, count] : n) EXPECT_NEAR(count, 10000, 600) << port;  // sd ~87
}

TEST(ClusterLb, WeightedLeastRequestSharesByWeightOverActiveRequests) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("w", {{1, 1}, {2, 3}}, lb("LEAST_REQUEST"))));
  auto& c = f.cluster("w");
  std::mt19937_64 rng(5);
  constexpr int kDraws = 40000;
  auto share_of_first = [&] {
    int first = 0;
    for (int i = 0; i < kDraws; ++i) first += c.choose({false, 0, rng()}, 0)->address.port == 1;
    return first;
  };
  // Idle: by weight, 1 : 3.
  EXPECT_NEAR(share_of_first(), kDraws / 4, 600);  // sd ~87
  // The heavy host busy with 5 requests: 1 / (3 / 6) = 2 : 1 for the light one.
  c.hosts()->hosts[1]->active_requests = 5;
  EXPECT_NEAR(share_of_first(), kDraws * 2 / 3, 600);
}

TEST(ClusterLb, LeastRequestPrefersFewerActiveRequests) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("lr2", {{1, 1}, {2, 1}}, lb("LEAST_REQUEST")) +
                               cluster_yaml("lr4", {{1, 1}, {2, 1}, {3, 1}, {4, 1}},
                                            lb("LEAST_REQUEST") + "    least_request_lb_config: {choice_count: 4}\n")));
  std::mt19937_64 rng(11);
  {
    auto& c = f.cluster("lr2");
    c.hosts()->hosts[0]->active_requests = 5;
    // Two independent draws (Envoy's P2C, with replacement): the busy host only
    // when both land on it, 1/4 of the time.
    int busy = 0;
    constexpr int kDraws = 40000;
    for (int i = 0; i < kDraws; ++i) busy += c.choose({false, 0, rng()}, 0)->address.port == 1;
    EXPECT_NEAR(busy, kDraws / 4, 600);  // sd ~87
  }
  {
    auto& c = f.cluster("lr4");
    auto set = c.hosts();
    set->hosts[0]->active_requests = 3;
    set->hosts[1]->active_requests = 1;
    set->hosts[2]->active_requests = 0;
    set->hosts[3]->active_requests = 2;
    // With 4 draws of 4 hosts, the idle host wins unless no draw hits it: (3/4)^4 = 31.6 %.
    int idle = 0;
    constexpr int kDraws = 40000;
    for (int i = 0; i < kDraws; ++i) idle += c.choose({false, 0, rng()}, 0)->address.port == 3;
    EXPECT_NEAR(idle, kDraws * (1 - 0.31640625), 700);  // sd ~93
    // All equal: everyone gets a share.
    for (auto& h : set->hosts) h->active_requests = 0;
    std::map<uint16_t, int> n;
    for (int i = 0; i < 4000; ++i) ++n[c.choose({false, 0, rng()}, 0)->address.port];
    EXPECT_EQ(n.size(), 4u);
  }
}

TEST(ClusterLb, RingHashConsistency) {
  const std::string ring = lb("RING_HASH");
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("ring", {{1, 1}, {2, 1}, {3, 2}}, ring)));
  auto& c = f.cluster("ring");
  // The same hash, the same host; the random value does not matter when a hash is given.
  for (uint64_t k = 0; k < 200; ++k) {
    uint64_t hash = lb_hash("key" + std::to_string(k));
    auto a = c.choose({true, hash, 1}, 0);
    auto b = c.choose({true, hash, 999}, 0);
    ASSERT_EQ(a, b);
  }
  // Weights 1:1:2 roughly respected over many keys.
  std::map<uint16_t, int> n;
  std::map<uint64_t, uint16_t> owner;
  constexpr int kKeys = 20000;
  for (int k = 0; k < kKeys; ++k) {
    uint64_t hash = lb_hash("user-" + std::to_string(k));
    uint16_t port = c.choose({true, hash, 0}, 0)->address.port;
    ++n[port];
    owner[hash] = port;
  }
  EXPECT_NEAR(n[1], kKeys / 4, kKeys / 20);
  EXPECT_NEAR(n[2], kKeys / 4, kKeys / 20);
  EXPECT_NEAR(n[3], kKeys / 2, kKeys / 20);

  // An unavailable host is skipped to the next on the ring: its keys move, nobody else's.
  auto set = c.hosts();
  set->hosts[0]->healthy = false;  // port 1 (2 of 3 available: no panic)
  int moved = 0;
  for (auto [hash, port] : owner) {
    uint16_t now = c.choose({true, hash, 0}, 0)->address.port;
    if (port == 1) {
      EXPECT_NE(now, 1);
      ++moved;
    } else {
      EXPECT_EQ(now, port);
    }
  }
  EXPECT_EQ(moved, n[1]);
  set->hosts[0]->healthy = true;

  // Removing a host remaps about its share of keys: all of its keys move, and
  // few others (as in Envoy, the survivors' point counts are recomputed for the
  // new total weight, 256+512 -> 342+684 here, which moves some keys between them).
  c.set_hosts({f.boot.clusters[1].endpoints[0], f.boot.clusters[1].endpoints[2]});
  int remapped = 0;
  for (auto [hash, port] : owner) {
    uint16_t now = c.choose({true, hash, 0}, 0)->address.port;
    ASSERT_NE(now, 2);
    if (now != port) ++remapped;
    if (port == 2) EXPECT_NE(now, port);
  }
  EXPECT_GE(remapped, n[2]);
  EXPECT_LT(remapped, n[2] + kKeys / 10);  // a modulo hash would move about 2/3 of all keys
}

TEST(ClusterLb, PanicThreshold) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("p", {{1, 1}, {2, 1}, {3, 1}, {4, 1}}, lb("ROUND_ROBIN"))));
  auto& c = f.cluster("p");
  auto set = c.hosts();
  auto ports = [&](int n) {
    std::map<uint16_t, int> m;
    for (int i = 0; i < n; ++i) ++m[c.choose({}, 0)->address.port];
    return m;
  };
  // 2 of 4 available (50 %): not below the threshold, only the available ones.
  set->hosts[0]->healthy = false;
  set->hosts[1]->healthy = false;
  auto m = ports(8);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m[3], 4);
  EXPECT_EQ(m[4], 4);
  // 1 of 4 (25 %): panic, every host is a candidate.
  set->hosts[2]->ejected_until_ns = 10 * kSec;
  m = ports(8);
  EXPECT_EQ(m.size(), 4u);
  for (auto [p, n] : m) EXPECT_EQ(n, 2) << p;
  // After the ejection time the host counts again.
  m.clear();
  for (int i = 0; i < 8; ++i) ++m[c.choose({}, 10 * kSec)->address.port];
  EXPECT_EQ(m.size(), 2u);
  // None available: still panic over all, never nullptr.
  for (auto& h : set->hosts) h->healthy = false;
  EXPECT_NE(c.choose({}, 0), nullptr);
}

std::string od(const std::string& fields) { return "    outlier_detection: {" + fields + "}\n"; }

TEST(ClusterOutlier, Consecutive5xxEjectsWithBackoff) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("o", {{1, 1}, {2, 1}, {3, 1}, {4, 1}},
                                                   od("consecutive_5xx: 3, base_ejection_time: 30s, interval: 10s, "
                                                      "max_ejection_percent: 100"))));
  auto& c = f.cluster("o");
  Host& h = *c.hosts()->hosts[0];
  int64_t t = 100 * kSec;
  c.report_status(h, 500, t);
  c.report_status(h, 503, t);
  c.report_status(h, 200, t);  // a 2xx resets the count
  c.report_status(h, 500, t);
  c.report_status(h, 502, t);
  EXPECT_TRUE(h.available(t));
  c.report_connect_failure(h, t);  // the third consecutive
  EXPECT_FALSE(h.available(t));
  EXPECT_EQ(h.ejections.load(), 1u);
  EXPECT_EQ(h.ejected_until_ns.load(), t + 30 * kSec);
  EXPECT_FALSE(h.available(t + 30 * kSec - 1));
  EXPECT_TRUE(h.available(t + 30 * kSec));
  // Failing again right after coming back: 2 x base.
  t += 30 * kSec;
  for (int i = 0; i < 3; ++i) c.report_status(h, 500, t);
  EXPECT_EQ(h.ejections.load(), 2u);
  EXPECT_EQ(h.ejected_until_ns.load(), t + 60 * kSec);
  // 5xx while ejected do not extend the ejection.
  for (int i = 0; i < 6; ++i) c.report_status(h, 500, t + kSec);
  EXPECT_EQ(h.ejections.load(), 2u);
  EXPECT_EQ(h.ejected_until_ns.load(), t + 60 * kSec);
  // Two intervals in service bring the backoff from 2 down to 0: the next is 1 x base.
  t += 60 * kSec + 20 * kSec;
  for (int i = 0; i < 3; ++i) c.report_status(h, 500, t);
  EXPECT_EQ(h.ejections.load(), 3u);
  EXPECT_EQ(h.ejected_until_ns.load(), t + 30 * kSec);
  // Other hosts are untouched.
  for (size_t i = 1; i < 4; ++i) EXPECT_TRUE(c.hosts()->hosts[i]->available(t));
}

TEST(ClusterOutlier, EjectionTimeIsCappedAtMaxEjectionTime) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("o", {{1, 1}, {2, 1}},
                                                   od("consecutive_5xx: 1, base_ejection_time: 100s, interval: 1000s, "
                                                      "max_ejection_percent: 50"))));
  auto& c = f.cluster("o");
  Host& h = *c.hosts()->hosts[0];
  // Envoy: min(base x backoff, max_ejection_time), max_ejection_time = max(300 s, base).
  int64_t t = kSec;
  std::vector<int64_t> got;
  for (int i = 0; i < 6; ++i) {
    c.report_status(h, 500, t);
    got.push_back((h.ejected_until_ns.load() - t) / kSec);
    t = h.ejected_until_ns.load();
  }
  EXPECT_EQ(got, (std::vector<int64_t>{100, 200, 300, 300, 300, 300}));
}

TEST(ClusterOutlier, MaxEjectionPercentIsStrict) {
  // Envoy 1.40, two hosts both answering 500, consecutive_5xx: 1: with the
  // default 10 % nothing was ejected (ejections_overflow counted every
  // detection); with 50 % exactly one host was ejected.
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend +
                               cluster_yaml("o10", {{1, 1}, {2, 1}}, od("consecutive_5xx: 1, base_ejection_time: 30s")) +
                               cluster_yaml("o50", {{1, 1}, {2, 1}},
                                            od("consecutive_5xx: 1, base_ejection_time: 30s, max_ejection_percent: 50")) +
                               cluster_yaml("o34", {{1, 1}, {2, 1}, {3, 1}},
                                            od("consecutive_5xx: 1, base_ejection_time: 30s, max_ejection_percent: 34"))));
  const int64_t t = kSec;
  auto ejected = [&](ClusterRuntime& c) {
    int n = 0;
    for (auto& h : c.hosts()->hosts) n += !h->available(t);
    return n;
  };
  for (auto* name : {"o10", "o50", "o34"}) {
    auto& c = f.cluster(name);
    for (int round = 0; round < 3; ++round)
      for (auto& h : c.hosts()->hosts) c.report_status(*h, 500, t);
  }
  EXPECT_EQ(ejected(f.cluster("o10")), 0);
  EXPECT_EQ(ejected(f.cluster("o50")), 1);
  EXPECT_EQ(ejected(f.cluster("o34")), 1);  // 1/3 = 33 % <= 34 %, 2/3 > 34 %
}

TEST(ClusterOutlier, EnforcingConsecutive5xxIsTheShareOfDetectionsThatEject) {
  // Each detection (consecutive_5xx: 1, so each 500) ejects with probability
  // enforcing_consecutive_5xx %; the host comes back before the next one.
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend +
                               cluster_yaml("e0", {{1, 1}, {2, 1}},
                                            od("consecutive_5xx: 1, base_ejection_time: 1s, max_ejection_percent: 50, "
                                               "enforcing_consecutive_5xx: 0")) +
                               cluster_yaml("e30", {{1, 1}, {2, 1}},
                                            od("consecutive_5xx: 1, base_ejection_time: 1s, max_ejection_percent: 50, "
                                               "enforcing_consecutive_5xx: 30"))));
  auto detections_that_eject = [&](ClusterRuntime& c) {
    Host& h = *c.hosts()->hosts[0];
    int64_t t = kSec;
    for (int i = 0; i < 10000; ++i) {
      c.report_status(h, 500, t);
      t += 400 * kSec;  // past any ejection (capped at 300 s), and the backoff decays
    }
    return h.ejections.load();
  };
  EXPECT_EQ(detections_that_eject(f.cluster("e0")), 0u);
  uint32_t n = detections_that_eject(f.cluster("e30"));
  EXPECT_GT(n, 2700u);  // 3000 expected; 46 is one standard deviation
  EXPECT_LT(n, 3300u);
}

TEST(ClusterOutlier, NoOutlierDetectionNoEjection) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")), kBackend));
  auto& c = f.cluster("backend");
  Host& h = *c.hosts()->hosts[0];
  for (int i = 0; i < 100; ++i) c.report_status(h, 500, 0);
  EXPECT_TRUE(h.available(0));
  EXPECT_EQ(h.ejections.load(), 0u);
}

TEST(ClusterCircuitBreakers, ThresholdsAndRelease) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("cb", {{1, 1}},
                                                   "    circuit_breakers:\n      thresholds:\n      - {max_connections: 2, "
                                                   "max_pending_requests: 1, max_requests: 3, max_retries: 0}\n")));
  auto& c = f.cluster("cb");
  EXPECT_TRUE(c.try_acquire_request());
  EXPECT_TRUE(c.try_acquire_request());
  EXPECT_TRUE(c.try_acquire_request());
  EXPECT_FALSE(c.try_acquire_request());
  EXPECT_FALSE(c.try_acquire_request());  // a refusal does not count
  c.release_request();
  EXPECT_TRUE(c.try_acquire_request());
  EXPECT_FALSE(c.try_acquire_request());
  EXPECT_TRUE(c.try_acquire_connection());
  EXPECT_TRUE(c.try_acquire_connection());
  EXPECT_FALSE(c.try_acquire_connection());
  c.release_connection();
  EXPECT_TRUE(c.try_acquire_connection());
  EXPECT_TRUE(c.try_acquire_pending());
  EXPECT_FALSE(c.try_acquire_pending());
  c.release_pending();
  EXPECT_TRUE(c.try_acquire_pending());
  EXPECT_FALSE(c.try_acquire_retry());  // max_retries: 0
  // Envoy's defaults: 1024 requests, 3 retries.
  auto& d = f.cluster("backend");
  for (int i = 0; i < 1024; ++i) ASSERT_TRUE(d.try_acquire_request()) << i;
  EXPECT_FALSE(d.try_acquire_request());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(d.try_acquire_retry());
  EXPECT_FALSE(d.try_acquire_retry());
}

TEST(ClusterHosts, SetHostsKeepsStateOfUnchangedAddresses) {
  Fixture f(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")),
                           kBackend + cluster_yaml("dns", {{1, 1}, {2, 1}},
                                                   od("consecutive_5xx: 1, max_ejection_percent: 100"))));
  auto& c = f.cluster("dns");
  auto before = c.hosts();
  std::shared_ptr<Host> h1 = before->hosts[0], h2 = before->hosts[1];
  c.report_status(*h1, 500, kSec);
  ASSERT_FALSE(h1->available(kSec));
  h2->active_requests = 4;
  config::Endpoint e1 = f.boot.clusters[1].endpoints[0];
  config::Endpoint e3 = e1;
  e3.address.port = 3;
  e1.load_balancing_weight = 5;
  c.set_hosts({e3, e1});
  auto after = c.hosts();
  ASSERT_EQ(after->hosts.size(), 2u);
  EXPECT_EQ(after->hosts[0]->label, "127.0.0.1:3");
  EXPECT_NE(after->hosts[0], h2);
  EXPECT_TRUE(after->hosts[0]->available(kSec));
  EXPECT_EQ(after->hosts[1], h1);  // the same object: its ejection survives
  EXPECT_FALSE(after->hosts[1]->available(kSec));
  EXPECT_EQ(after->weights[1], 5u);
  EXPECT_EQ(before->hosts.size(), 2u);  // a published set is not changed
}

TEST(ClusterHosts, AdoptHostsAfterReload) {
  const std::string yaml = bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")), kBackend + cluster_yaml("c", {{1, 1}, {2, 1}}));
  Fixture old_cfg(yaml);
  auto old_set = old_cfg.cluster("c").hosts();
  old_set->hosts[1]->healthy = false;
  old_set->hosts[1]->ejections = 7;
  Fixture new_cfg(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")), kBackend + cluster_yaml("c", {{2, 1}, {9, 1}})));
  auto& c = new_cfg.cluster("c");
  c.adopt_hosts(*old_set);
  auto set = c.hosts();
  ASSERT_EQ(set->hosts.size(), 2u);
  EXPECT_EQ(set->hosts[0], old_set->hosts[1]);
  EXPECT_FALSE(set->hosts[0]->healthy.load());
  EXPECT_EQ(set->hosts[0]->ejections.load(), 7u);
  EXPECT_EQ(set->hosts[1]->label, "127.0.0.1:9");
  EXPECT_TRUE(set->hosts[1]->healthy.load());
}

// ---------------------------------------------------------------------------
// Local rate limit

TEST(TokenBucket, MaxTokensThenRefusal) {
  TokenBucket b(5, 5, 1000 * kMs, 0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.try_take(0)) << i;
  EXPECT_FALSE(b.try_take(0));
  EXPECT_FALSE(b.try_take(0));
}

TEST(TokenBucket, RefillsContinuouslyAtTheFillRate) {
  // Envoy 1.40 (max 20, 20 per 20 s, drained, 5 s later): 5 requests passed.
  // The bucket refills at tokens_per_fill / fill_interval, in whole tokens.
  TokenBucket b(20, 20, 20 * kSec, 0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(b.try_take(0));
  ASSERT_FALSE(b.try_take(0));
  int n = 0;
  while (b.try_take(5 * kSec)) ++n;
  EXPECT_EQ(n, 5);
  EXPECT_FALSE(b.try_take(6 * kSec - 1));
  EXPECT_TRUE(b.try_take(6 * kSec));
  EXPECT_FALSE(b.try_take(6 * kSec));
  // Never beyond max_tokens, however long it rests.
  n = 0;
  while (b.try_take(1000 * kSec)) ++n;
  EXPECT_EQ(n, 20);
}

TEST(TokenBucket, TokensPerFillPerInterval) {
  TokenBucket b(10, 4, 100 * kMs, 0);  // 4 tokens per 100 ms: one per 25 ms
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(b.try_take(0));
  EXPECT_FALSE(b.try_take(24 * kMs));
  int n = 0;
  while (b.try_take(100 * kMs)) ++n;
  EXPECT_EQ(n, 4);
  n = 0;
  while (b.try_take(250 * kMs)) ++n;
  EXPECT_EQ(n, 6);
  n = 0;
  while (b.try_take(10 * kSec)) ++n;
  EXPECT_EQ(n, 10);
}

TEST(TokenBucket, ConcurrentTakesNeverExceedMaxTokens) {
  constexpr uint32_t kMax = 100000;
  TokenBucket b(kMax, 1, 1000 * kSec, 0);
  std::atomic<uint32_t> taken{0};
  auto worker = [&] {
    uint32_t mine = 0;
    for (uint32_t i = 0; i < kMax; ++i) mine += b.try_take(kSec);  // 1 ms of refill: < 1 token
    taken += mine;
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  EXPECT_EQ(taken.load(), kMax);
}

std::string rl_filter(const std::string& enabled, const std::string& enforced) {
  std::string s = R"(          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: rl
              token_bucket: {max_tokens: 2, tokens_per_fill: 1, fill_interval: 1s}
)";
  if (!enabled.empty()) s += "              filter_enabled: {default_value: " + enabled + "}\n";
  if (!enforced.empty()) s += "              filter_enforced: {default_value: " + enforced + "}\n";
  return s;
}

config::LocalRateLimit parse_rl(const std::string& enabled, const std::string& enforced) {
  auto boot = config::parse_bootstrap(bootstrap_yaml(routes_vh(rt("r", "{prefix: /}")), kBackend, rl_filter(enabled, enforced)));
  for (const auto& f : boot.listeners[0].filter_chains[0].filters[0].hcm->http_filters)
    if (f.local_ratelimit) return *f.local_ratelimit;
  ADD_FAILURE() << "no local_ratelimit";
  return {};
}

TEST(LocalRateLimit, EnabledAndEnforcedFractions) {
  using V = LocalRateLimit::Verdict;
  const std::string all = "{numerator: 100, denominator: HUNDRED}";
  const std::string none = "{numerator: 0, denominator: HUNDRED}";
  std::mt19937_64 rng(3);
  {
    LocalRateLimit rl(parse_rl("", ""), 0);  // Envoy's default: 0 % enabled
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(rl.check(0, rng()), V::kNotEnabled);
  }
  {
    LocalRateLimit rl(parse_rl(none, all), 0);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(rl.check(0, rng()), V::kNotEnabled);
  }
  {
    LocalRateLimit rl(parse_rl(all, all), 0);
    EXPECT_EQ(rl.check(0, rng()), V::kAllowed);
    EXPECT_EQ(rl.check(0, rng()), V::kAllowed);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(rl.check(0, rng()), V::kLimited);
    EXPECT_EQ(rl.check(kSec, rng()), V::kAllowed);  // one token per second
    EXPECT_EQ(rl.check(kSec, rng()), V::kLimited);
  }
  {
    LocalRateLimit rl(parse_rl(all, ""), 0);  // enabled, enforced 0 % (the default)
    EXPECT_EQ(rl.check(0, rng()), V::kAllowed);
    EXPECT_EQ(rl.check(0, rng()), V::kAllowed);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(rl.check(0, rng()), V::kLimitedNotEnforced);
  }
  {
    // 25 % enabled (TEN_THOUSAND), 50 % enforced: the shares over many draws.
    LocalRateLimit rl(parse_rl("{numerator: 2500, denominator: TEN_THOUSAND}", "{numerator: 50}"), 0);
    std::map<V, int> n;
    constexpr int kDraws = 40000;
    for (int i = 0; i < kDraws; ++i) ++n[rl.check(0, rng())];
    EXPECT_EQ(n[V::kAllowed], 2);
    EXPECT_NEAR(n[V::kNotEnabled], kDraws * 3 / 4, 600);   // sd ~87
    EXPECT_NEAR(n[V::kLimited], kDraws / 8, 500);          // sd ~66
    EXPECT_NEAR(n[V::kLimitedNotEnforced], kDraws / 8, 500);
  }
}

}  // namespace
}  // namespace dpukit::mesh

namespace dpukit::mesh {
namespace {

// The exposition sums the workers' blocks under Envoy's names, each family
// typed and described once, the code classes as a label, and a gauge that
// went below zero on one worker summed as a signed value.
TEST(StatsExposition, SumsWorkersUnderEnvoyNames) {
  StatsStore store(2);
  auto c = store.cluster("backend");
  c[0]->upstream_rq_total.inc(3);
  c[1]->upstream_rq_total.inc(4);
  c[1]->upstream_rq_xx[1].inc(5);  // 2xx
  c[0]->upstream_cx_active.add(2);
  c[1]->upstream_cx_active.add(-1);
  auto h = store.http("ingress");
  h[1]->rl_rate_limited.inc(7);
  store.modules(0).add(Module::kRouter, 100);
  store.modules(1).add(Module::kRouter, 50);
  const std::string text = store.prometheus({{"backend", "10.0.0.1:80", true, false, 0},
                                             {"backend", "10.0.0.2:80", false, false, 2}});
  auto has = [&](const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("envoy_cluster_upstream_rq_total{envoy_cluster_name=\"backend\"} 7")) << text;
  EXPECT_TRUE(has("envoy_cluster_upstream_rq_xx{envoy_response_code_class=\"2\",envoy_cluster_name=\"backend\"} 5"));
  EXPECT_TRUE(has("envoy_cluster_upstream_rq_xx{envoy_response_code_class=\"5\",envoy_cluster_name=\"backend\"} 0"));
  EXPECT_TRUE(has("envoy_cluster_upstream_cx_active{envoy_cluster_name=\"backend\"} 1"));
  EXPECT_TRUE(has("envoy_cluster_membership_healthy{envoy_cluster_name=\"backend\"} 1"));
  EXPECT_TRUE(has("envoy_cluster_membership_total{envoy_cluster_name=\"backend\"} 2"));
  EXPECT_TRUE(has("envoy_cluster_outlier_detection_ejections_enforced_total{envoy_cluster_name=\"backend\"} 2"));
  EXPECT_TRUE(has("envoy_http_local_rate_limit_rate_limited{envoy_local_http_ratelimit_prefix=\"ingress\"} 7"));
  EXPECT_TRUE(has("dpukit_mesh_module_ns_total{module=\"router\"} 150"));
  EXPECT_TRUE(has("dpukit_mesh_module_calls_total{module=\"router\"} 2"));
  EXPECT_TRUE(has("# TYPE envoy_cluster_upstream_cx_active gauge"));
  size_t types = 0;
  for (size_t at = 0; (at = text.find("# TYPE envoy_cluster_upstream_rq_xx ", at)) != std::string::npos; ++at) ++types;
  EXPECT_EQ(types, 1u);
}

}  // namespace
}  // namespace dpukit::mesh
