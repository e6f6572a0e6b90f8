// Configuration from xDS: dynamic_resources is read and what is not
// implemented is refused by path; ADS resources (proto-JSON) assemble into a
// bootstrap that the same parser checks, and a fault names the resource and
// the path inside it.
#include <gtest/gtest.h>

#include <string>

#include "config/bootstrap.h"
#include "config/xds_assembly.h"
#include "xds_bootstrap.h"

namespace dpukit::mesh::config {
namespace {

using json = nlohmann::json;

using xds_test::kXdsBootstrap;

std::string edit(const std::string& from, const std::string& to, std::string text = kXdsBootstrap) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string fault(const std::string& yaml) {
  try {
    parse_bootstrap(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigXds, DynamicResourcesParse) {
  const Bootstrap b = parse_bootstrap(kXdsBootstrap);
  ASSERT_TRUE(b.dynamic_resources);
  EXPECT_EQ(b.dynamic_resources->ads_cluster, "xds_cluster");
  EXPECT_TRUE(b.dynamic_resources->lds);
  EXPECT_TRUE(b.dynamic_resources->cds);
  EXPECT_EQ(b.node.id, "node-a");
  EXPECT_EQ(b.node.cluster, "mesh");
}

TEST(ConfigXds, InitialFetchTimeout) {
  using std::chrono::milliseconds;
  EXPECT_EQ(parse_bootstrap(kXdsBootstrap).dynamic_resources->initial_fetch_timeout, milliseconds(15000));
  EXPECT_EQ(parse_bootstrap(edit("cds_config: {ads: {}, resource_api_version: V3}",
                                 "cds_config: {ads: {}, initial_fetch_timeout: 0s}"))
                .dynamic_resources->initial_fetch_timeout,
            milliseconds(0));  // 0: wait for ever
  EXPECT_EQ(parse_bootstrap(edit("lds_config: {ads: {}, resource_api_version: V3}",
                                 "lds_config: {ads: {}, initial_fetch_timeout: 30s}"))
                .dynamic_resources->initial_fetch_timeout,
            milliseconds(30000));
}

TEST(ConfigXds, DeltaIsTakenToo) {
  const Bootstrap b = parse_bootstrap(edit("api_type: GRPC", "api_type: DELTA_GRPC"));
  EXPECT_TRUE(b.dynamic_resources->delta);
  EXPECT_FALSE(parse_bootstrap(kXdsBootstrap).dynamic_resources->delta);
}

TEST(ConfigXds, RefusalsNameThePath) {
  EXPECT_EQ(fault(edit("api_type: GRPC", "api_type: AGGREGATED_DELTA_GRPC")),
            "dynamic_resources.ads_config.api_type (line 7): AGGREGATED_DELTA_GRPC is not supported by dpukit-mesh");
  EXPECT_EQ(fault(edit("api_type: GRPC", "api_type: REST")),
            "dynamic_resources.ads_config.api_type (line 7): REST is not supported by dpukit-mesh");
  EXPECT_EQ(fault(edit("transport_api_version: V3", "transport_api_version: V2")),
            "dynamic_resources.ads_config.transport_api_version (line 8): V2 is not supported by dpukit-mesh");
  EXPECT_EQ(fault(edit("- envoy_grpc: {cluster_name: xds_cluster}", "- google_grpc: {target_uri: x, stat_prefix: x}")),
            "dynamic_resources.ads_config.grpc_services[0].google_grpc (line 10): google_grpc is not supported by dpukit-mesh");
  EXPECT_EQ(fault(edit("lds_config: {ads: {}, resource_api_version: V3}", "lds_config: {path: /etc/lds.yaml}")),
            "dynamic_resources.lds_config.path (line 11): path is not supported by dpukit-mesh");
  EXPECT_EQ(fault(edit("cds_config: {ads: {}, resource_api_version: V3}", "cds_config: {}")),
            "dynamic_resources.cds_config (line 12): only ads: {} is supported by dpukit-mesh (every resource comes over the ADS "
            "stream)");
  EXPECT_EQ(fault(edit("cluster_name: xds_cluster}", "cluster_name: nowhere}")),
            "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name: unknown cluster 'nowhere' (it must "
            "be a static cluster)");
  EXPECT_EQ(fault(edit("explicit_http_config:\n          http2_protocol_options: {}",
                       "explicit_http_config:\n          http_protocol_options: {}")),
            "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name: cluster 'xds_cluster' must speak "
            "HTTP/2 (gRPC): give it typed_extension_protocol_options envoy.extensions.upstreams.http.v3."
            "HttpProtocolOptions with explicit_http_config.http2_protocol_options");
  EXPECT_EQ(fault(edit("node: {id: node-a, cluster: mesh}", "node: {cluster: mesh}")),
            "node.id: required with dynamic_resources (a control plane tells nodes apart by it)");
}

// connection_keepalive on the ADS cluster sets the ADS connection's PINGs
// (on another HTTP/2 cluster, its connections': docs/mesh.md).
TEST(ConfigXds, KeepaliveOnTheAdsCluster) {
  const std::string keepalive =
      "http2_protocol_options: {connection_keepalive: {interval: 2s, timeout: 1.5s}}";
  const Bootstrap b = parse_bootstrap(edit("http2_protocol_options: {}", keepalive));
  const auto& k = b.clusters[0].http2_protocol_options.connection_keepalive;
  ASSERT_TRUE(k);
  EXPECT_EQ(k->interval, std::chrono::milliseconds(2000));
  EXPECT_EQ(k->timeout, std::chrono::milliseconds(1500));
  EXPECT_FALSE(parse_bootstrap(kXdsBootstrap).clusters[0].http2_protocol_options.connection_keepalive);
  // The JSON dump (the admin's config_dump) carries it.
  const json dumped = to_json(b)["static_resources"]["clusters"][0]["typed_extension_protocol_options"]
                                ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
                                ["http2_protocol_options"]["connection_keepalive"];
  EXPECT_EQ(dumped, json({{"interval", "2s"}, {"timeout", "1.500s"}})) << dumped.dump();

  EXPECT_EQ(fault(edit("http2_protocol_options: {}", "http2_protocol_options: {connection_keepalive: {interval: 2s}}")),
            "static_resources.clusters[0].typed_extension_protocol_options.envoy.extensions.upstreams.http.v3."
            "HttpProtocolOptions.explicit_http_config.http2_protocol_options.connection_keepalive.timeout (line 20): "
            "missing required field");
  EXPECT_EQ(fault(edit("http2_protocol_options: {}",
                       "http2_protocol_options: {connection_keepalive: {interval: 2s, timeout: 1s, "
                       "interval_jitter: {value: 15}}}")),
            "static_resources.clusters[0].typed_extension_protocol_options.envoy.extensions.upstreams.http.v3."
            "HttpProtocolOptions.explicit_http_config.http2_protocol_options.connection_keepalive.interval_jitter "
            "(line 20): interval_jitter is not supported by dpukit-mesh");
}

const json kRouter = {{"name", "envoy.filters.http.router"},
                      {"typed_config", {{"@type", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}};

json listener(const std::string& name, int port, const json& hcm_routes) {
  json hcm = {{"@type",
               "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"},
              {"stat_prefix", name},
              {"http_filters", json::array({kRouter})}};
  hcm.update(hcm_routes);
  return {{"name", name},
          {"address", {{"socket_address", {{"address", "127.0.0.1"}, {"port_value", port}}}}},
          {"filter_chains",
           {{{"filters", {{{"name", "envoy.filters.network.http_connection_manager"}, {"typed_config", hcm}}}}}}}};
}

json rds(const std::string& route) {
  return {{"rds", {{"config_source", {{"ads", json::object()}, {"resource_api_version", "V3"}}}, {"route_config_name", route}}}};
}

json route_config(const std::string& name, const std::string& cluster) {
  return {{"name", name},
          {"virtual_hosts",
           {{{"name", "all"}, {"domains", {"*"}}, {"routes", {{{"match", {{"prefix", "/"}}}, {"route", {{"cluster", cluster}}}}}}}}}};
}

json eds_cluster(const std::string& name) {
  return {{"name", name},
          {"type", "EDS"},
          {"connect_timeout", "1s"},
          {"eds_cluster_config", {{"eds_config", {{"ads", json::object()}, {"resource_api_version", "V3"}}}}}};
}

json load_assignment(const std::string& name, int port) {
  return {{"cluster_name", name},
          {"endpoints",
           {{{"lb_endpoints",
              {{{"endpoint", {{"address", {{"socket_address", {{"address", "127.0.0.1"}, {"port_value", port}}}}}}}}}}}}}};
}

// A test's resources, as JSON to edit; shared() is what an assembly takes.
struct JsonSet {
  std::map<std::string, std::map<std::string, json>> by_type;
};

XdsResources shared(const JsonSet& set) {
  XdsResources r;
  for (const auto& [type, resources] : set.by_type)
    for (const auto& [name, resource] : resources) r.by_type[type][name] = xds_resource(resource);
  return r;
}

XdsAssembly assemble(const JsonSet& set) { return XdsAssembler(YAML::Load(kXdsBootstrap)).assemble(shared(set)); }

JsonSet full_set() {
  JsonSet r;
  r.by_type[std::string(kListenerType)]["web"] = listener("web", 10000, rds("web-routes"));
  r.by_type[std::string(kRouteType)]["web-routes"] = route_config("web-routes", "backend");
  r.by_type[std::string(kClusterType)]["backend"] = eds_cluster("backend");
  r.by_type[std::string(kEndpointType)]["backend"] = load_assignment("backend", 18080);
  return r;
}

std::string xds_fault(const JsonSet& r) {
  try {
    (void)assemble(r);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigXds, ResourcesAssembleIntoTheBootstrap) {
  const XdsAssembly a = assemble(full_set());
  EXPECT_TRUE(a.complete());
  EXPECT_EQ(a.endpoint_names, std::set<std::string>{"backend"});
  EXPECT_EQ(a.route_names, std::set<std::string>{"web-routes"});
  const Bootstrap b = a.bootstrap;
  ASSERT_EQ(b.listeners.size(), 1u);
  EXPECT_EQ(b.listeners[0].name, "web");
  EXPECT_EQ(b.listeners[0].address.port, 10000);
  // RDS inlined where the HCM names it.
  const json rc = to_json(b)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"];
  EXPECT_EQ(rc["name"], "web-routes");
  ASSERT_EQ(rc["virtual_hosts"].size(), 1u);
  EXPECT_EQ(rc["virtual_hosts"][0]["routes"][0]["route"]["cluster"], "backend");
  // EDS as the cluster's load_assignment; the static ADS cluster stays.
  ASSERT_EQ(b.clusters.size(), 2u);
  EXPECT_EQ(b.clusters[0].name, "xds_cluster");
  EXPECT_EQ(b.clusters[1].name, "backend");
  EXPECT_EQ(b.clusters[1].connect_timeout, std::chrono::milliseconds(1000));
  ASSERT_EQ(b.clusters[1].endpoints.size(), 1u);
  EXPECT_EQ(b.clusters[1].endpoints[0].address.port, 18080);
}

TEST(ConfigXds, WhatIsNamedButNotDeliveredIsWaitedFor) {
  JsonSet r = full_set();
  r.by_type[std::string(kEndpointType)].clear();
  r.by_type[std::string(kRouteType)].clear();
  XdsAssembly a = assemble(r);
  EXPECT_FALSE(a.complete());
  EXPECT_EQ(a.missing_endpoints, std::set<std::string>{"backend"});
  EXPECT_EQ(a.missing_routes, std::set<std::string>{"web-routes"});
  // (The stand-ins parsed: nothing is wrong yet.)
  // A route to a cluster CDS did not deliver is taken, as Envoy takes it
  // (and answers 503): a cluster without endpoints stands in.
  r = full_set();
  r.by_type[std::string(kRouteType)]["web-routes"] = route_config("web-routes", "elsewhere");
  a = assemble(r);
  EXPECT_EQ(a.missing_clusters, std::set<std::string>{"elsewhere"});
  EXPECT_TRUE(a.complete());
  const Bootstrap b = a.bootstrap;
  ASSERT_EQ(b.clusters.size(), 3u);
  EXPECT_EQ(b.clusters[2].name, "elsewhere");
  EXPECT_TRUE(b.clusters[2].endpoints.empty());
  // So does a tcp_proxy's, weighted or not.
  r = full_set();
  json tcp = listener("tcp", 10001, json::object());
  const json weighted = {{"clusters", json::array({{{"name", "backend"}, {"weight", 1}}, {{"name", "spare"}, {"weight", 1}}})}};
  const json tcp_proxy = {{"@type", "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"},
                          {"stat_prefix", "tcp"},
                          {"weighted_clusters", weighted}};
  tcp["filter_chains"][0]["filters"][0] = {{"name", "envoy.filters.network.tcp_proxy"}, {"typed_config", tcp_proxy}};
  r.by_type[std::string(kListenerType)]["tcp"] = tcp;
  a = assemble(r);
  EXPECT_EQ(a.missing_clusters, std::set<std::string>{"spare"});
  EXPECT_EQ(a.bootstrap.listeners.size(), 2u);
}

TEST(ConfigXds, FaultsNameTheResourceAndThePath) {
  JsonSet r = full_set();
  r.by_type[std::string(kRouteType)]["web-routes"]["virtual_hosts"][0]["routes"][0]["match"] = {
      {"safe_regex", {{"regex", "(unclosed"}}}};
  const std::string regex = xds_fault(r);
  EXPECT_TRUE(regex.starts_with(
      "RouteConfiguration 'web-routes': virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex '(unclosed'"))
      << regex;

  r = full_set();
  r.by_type[std::string(kClusterType)]["backend"]["lb_policy"] = "MAGLEV";
  EXPECT_EQ(xds_fault(r), "Cluster 'backend': lb_policy: MAGLEV is not supported by dpukit-mesh");

  r = full_set();
  r.by_type[std::string(kEndpointType)]["backend"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
           ["socket_address"]["port_value"] = 0;
  EXPECT_EQ(xds_fault(r),
            "ClusterLoadAssignment 'backend': endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: "
            "must be between 1 and 65535, got 0");

  r = full_set();
  r.by_type[std::string(kListenerType)]["web"]["per_connection_buffer_limit_byte"] = 5;
  EXPECT_EQ(xds_fault(r), "Listener 'web': per_connection_buffer_limit_byte: unknown field");

  r = full_set();
  r.by_type[std::string(kListenerType)]["web"]["filter_chains"][0]["filters"][0]["typed_config"]["rds"]["config_source"] = {
      {"path", "/etc/rds.yaml"}};
  EXPECT_EQ(xds_fault(r),
            "Listener 'web': filter_chains[0].filters[0].typed_config.rds.config_source.path: path is not supported by "
            "dpukit-mesh");

  r = full_set();
  r.by_type[std::string(kClusterType)]["backend"]["eds_cluster_config"]["eds_config"]["initial_fetch_timeout"] = "1s";
  EXPECT_EQ(xds_fault(r),
            "Cluster 'backend': eds_cluster_config.eds_config.initial_fetch_timeout: not supported by dpukit-mesh here "
            "(it is taken on dynamic_resources.lds_config and cds_config)");

  r = full_set();
  r.by_type[std::string(kListenerType)]["other"] = listener("other", 10000, rds("web-routes"));
  EXPECT_EQ(xds_fault(r), "Listener 'web': address: duplicate address '127.0.0.1:10000': listeners[0] is there already");

  r = full_set();
  r.by_type[std::string(kClusterType)]["xds_cluster"] = eds_cluster("xds_cluster");
  EXPECT_EQ(xds_fault(r), "Cluster 'xds_cluster': name: duplicate cluster name 'xds_cluster'");
}

TEST(ConfigXds, OnlyWhatChangedIsParsedAgain) {
  XdsAssembler assembler(YAML::Load(kXdsBootstrap));
  XdsResources r = shared(full_set());
  const XdsAssembly first = assembler.assemble(r);
  EXPECT_EQ(first.parsed, 2u);  // the cluster "backend" and the listener "web"
  EXPECT_EQ(first.parsed_routes, 1u);
  EXPECT_EQ(first.bootstrap.clusters[0].revision, 0u);  // the bootstrap file's
  const uint64_t backend = first.bootstrap.clusters[1].revision;
  EXPECT_NE(backend, 0u);
  // The same resources again: nothing is parsed, the revision stays.
  const XdsAssembly same = assembler.assemble(r);
  EXPECT_EQ(same.parsed, 0u);
  EXPECT_EQ(same.bootstrap.clusters[1].revision, backend);
  EXPECT_EQ(same.parsed_routes, 0u);
  // A new route configuration: only its route that changed is parsed, the listener and the cluster are not.
  r.by_type[std::string(kRouteType)]["web-routes"] = xds_resource(route_config("web-routes", "elsewhere"));
  const XdsAssembly routes = assembler.assemble(r);
  EXPECT_EQ(routes.parsed, 0u);
  EXPECT_EQ(routes.parsed_routes, 1u);
  EXPECT_EQ(routes.bootstrap.clusters[1].revision, backend);
  EXPECT_EQ(routes.missing_clusters, std::set<std::string>{"elsewhere"});
  EXPECT_EQ(to_json(routes.bootstrap)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
                                    ["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["cluster"],
            "elsewhere");
  // New endpoints: the EDS cluster that takes them is parsed, with a new revision.
  r.by_type[std::string(kEndpointType)]["backend"] = xds_resource(load_assignment("backend", 18081));
  const XdsAssembly endpoints = assembler.assemble(r);
  EXPECT_EQ(endpoints.parsed, 1u);
  EXPECT_NE(endpoints.bootstrap.clusters[1].revision, backend);
  ASSERT_EQ(endpoints.bootstrap.clusters[1].endpoints.size(), 1u);
  EXPECT_EQ(endpoints.bootstrap.clusters[1].endpoints[0].address.port, 18081);
  // A fault is named as by a whole parse, and the next good set assembles.
  json maglev = eds_cluster("backend");
  maglev["lb_policy"] = "MAGLEV";
  XdsResources bad = r;
  bad.by_type[std::string(kClusterType)]["backend"] = xds_resource(maglev);
  try {
    assembler.assemble(bad);
    ADD_FAILURE() << "a MAGLEV cluster was taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "Cluster 'backend': lb_policy: MAGLEV is not supported by dpukit-mesh");
  }
  EXPECT_EQ(assembler.assemble(r).bootstrap.clusters[1].endpoints[0].address.port, 18081);
  // Three routes, then the middle one changed: it alone is parsed; a fault in it names its place.
  json three = route_config("web-routes", "backend");
  json& list = three["virtual_hosts"][0]["routes"];
  list = json::array({list[0], list[0], list[0]});
  list[0]["match"] = {{"prefix", "/a"}};
  list[1]["match"] = {{"prefix", "/b"}};
  r.by_type[std::string(kRouteType)]["web-routes"] = xds_resource(three);
  EXPECT_EQ(assembler.assemble(r).parsed_routes, 3u);
  list[1]["match"] = {{"prefix", "/c"}};
  r.by_type[std::string(kRouteType)]["web-routes"] = xds_resource(three);
  const XdsAssembly middle = assembler.assemble(r);
  EXPECT_EQ(middle.parsed_routes, 1u);
  const auto& parsed_routes = middle.bootstrap.listeners[0].filter_chains[0].filters[0].hcm->route_config.virtual_hosts[0].routes;
  ASSERT_EQ(parsed_routes.size(), 3u);
  EXPECT_EQ(parsed_routes[0].match.value, "/a");
  EXPECT_EQ(parsed_routes[1].match.value, "/c");
  EXPECT_EQ(parsed_routes[2].match.value, "/");
  list[2]["match"] = {{"safe_regex", {{"regex", "(unclosed"}}}};
  r.by_type[std::string(kRouteType)]["web-routes"] = xds_resource(three);
  try {
    assembler.assemble(r);
    ADD_FAILURE() << "an invalid regex was taken";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(
        "RouteConfiguration 'web-routes': virtual_hosts[0].routes[2].match.safe_regex.regex: invalid regex '(unclosed'"))
        << e.what();
  }
  list[2]["match"] = {{"prefix", "/"}};
  r.by_type[std::string(kRouteType)]["web-routes"] = xds_resource(three);
  // A listener that comes later is named by its place in the cross-checks too.
  r.by_type[std::string(kListenerType)]["other"] = xds_resource(listener("other", 10000, rds("web-routes")));
  try {
    assembler.assemble(r);
    ADD_FAILURE() << "two listeners on one address were taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "Listener 'web': address: duplicate address '127.0.0.1:10000': listeners[0] is there already");
  }
}

TEST(ConfigXds, ProtoJsonStringsStayStrings) {
  // A name that looks like a number is a string in proto-JSON; so it stays.
  JsonSet r = full_set();
  r.by_type[std::string(kClusterType)]["backend"]["name"] = "8080";
  r.by_type[std::string(kClusterType)]["8080"] = r.by_type[std::string(kClusterType)]["backend"];
  r.by_type[std::string(kClusterType)].erase("backend");
  r.by_type[std::string(kClusterType)]["8080"]["eds_cluster_config"]["service_name"] = "backend";
  r.by_type[std::string(kRouteType)]["web-routes"] = route_config("web-routes", "8080");
  const Bootstrap b = assemble(r).bootstrap;
  EXPECT_EQ(b.clusters[1].name, "8080");
  EXPECT_EQ(b.clusters[1].endpoints.size(), 1u);
}

}  // namespace
}  // namespace dpukit::mesh::config
