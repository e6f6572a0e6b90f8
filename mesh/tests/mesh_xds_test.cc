// The xDS client without a network: the descriptor pool (Envoy's messages
// from the pinned go-control-plane module) loads, resources packed in Any
// come out as proto-JSON, and an ADS exchange — every message through
// protobuf's binary form — ACKs with version and nonce, warms clusters before
// listeners, installs once everything named has arrived, and NACKs a bad
// resource with the parser's path while the last good set stays.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/method_handler.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "config/bootstrap.h"
#include "control/control_plane.h"
#include "dataplane/snapshot.h"
#include "admin_client.h"
#include "xds_bootstrap.h"
#include "config_refusal.h"
#include "tls_test_pki.h"
#include "xds/sds_client.h"
#include "xds/xds_client.h"
#include "xds/xds_messages.h"

namespace dpukit::mesh::xds {
namespace {

using json = nlohmann::json;

constexpr const char* kRequest = "envoy.service.discovery.v3.DiscoveryRequest";
constexpr const char* kResponse = "envoy.service.discovery.v3.DiscoveryResponse";

const std::string& kBootstrap = xds_test::kXdsBootstrap;

TEST(MeshXds, DescriptorPoolHasEveryMessageTheClientReads) {
  const Messages& m = messages();
  EXPECT_GT(m.file_count(), 50u);
  for (const char* type :
       {kRequest, kResponse, "google.rpc.Status", "envoy.config.listener.v3.Listener", "envoy.config.cluster.v3.Cluster",
        "envoy.config.route.v3.RouteConfiguration", "envoy.config.endpoint.v3.ClusterLoadAssignment",
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy", "envoy.extensions.filters.http.router.v3.Router",
        "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
        "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
        "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector",
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"})
    EXPECT_TRUE(m.has_message(type)) << type;
  // The well-known types are libprotobuf's own (Go's copies do not replace them).
  EXPECT_TRUE(m.has_message("google.protobuf.Duration"));
}

const json kRouter = {{"name", "envoy.filters.http.router"},
                      {"typed_config", {{"@type", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}};

json listener() {
  const json hcm = {
      {"@type", "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"},
      {"stat_prefix", "web"},
      {"rds", {{"config_source", {{"ads", json::object()}}}, {"route_config_name", "web-routes"}}},
      {"http_filters", json::array({kRouter})}};
  const json filter = {{"name", "envoy.filters.network.http_connection_manager"}, {"typed_config", hcm}};
  return {{"@type", "type.googleapis.com/envoy.config.listener.v3.Listener"},
          {"name", "web"},
          {"address", {{"socket_address", {{"address", "127.0.0.1"}, {"port_value", 10000}}}}},
          {"filter_chains", json::array({{{"filters", json::array({filter})}}})}};
}

json route_config(const std::string& regex_or_prefix, bool regex = false) {
  json match = regex ? json{{"safe_regex", {{"regex", regex_or_prefix}}}} : json{{"prefix", regex_or_prefix}};
  return {{"@type", "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"},
          {"name", "web-routes"},
          {"virtual_hosts",
           {{{"name", "all"}, {"domains", {"*"}}, {"routes", {{{"match", match}, {"route", {{"cluster", "backend"}}}}}}}}}};
}

json cluster() {
  return {{"@type", "type.googleapis.com/envoy.config.cluster.v3.Cluster"},
          {"name", "backend"},
          {"type", "EDS"},
          {"connect_timeout", "0.250s"},
          {"eds_cluster_config", {{"eds_config", {{"ads", json::object()}}}}}};
}

json load_assignment(int port) {
  return {{"@type", "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"},
          {"cluster_name", "backend"},
          {"endpoints",
           {{{"lb_endpoints",
              {{{"endpoint", {{"address", {{"socket_address", {{"address", "127.0.0.1"}, {"port_value", port}}}}}}}}}}}}}};
}

// A DiscoveryResponse as a control plane sends it: encoded by protobuf, then
// read back as the client reads it.
json response(std::string_view type, const std::string& version, const std::string& nonce, const json& resources) {
  const json r = {{"version_info", version}, {"type_url", type}, {"nonce", nonce}, {"resources", resources}};
  return messages().to_json(kResponse, messages().to_binary(kResponse, r));
}

// What the client sends, through protobuf's binary form (it must encode).
std::vector<json> sent(const std::vector<json>& requests) {
  std::vector<json> out;
  for (const json& r : requests) out.push_back(messages().to_json(kRequest, messages().to_binary(kRequest, r)));
  return out;
}

TEST(MeshXds, AnyResourcesComeOutAsProtoJson) {
  const json r = response(config::kListenerType, "1", "n1", {listener()});
  ASSERT_EQ(r["resources"].size(), 1u);
  const json& l = r["resources"][0];
  EXPECT_EQ(l["@type"], "type.googleapis.com/envoy.config.listener.v3.Listener");
  // Envoy's snake_case names (not proto-JSON's lowerCamelCase), the nested Any resolved.
  EXPECT_EQ(l["address"]["socket_address"]["port_value"], 10000);
  EXPECT_EQ(l["filter_chains"][0]["filters"][0]["typed_config"]["rds"]["route_config_name"], "web-routes");
  EXPECT_EQ(l, listener());
  // A field the message does not have is protobuf's error, not a silent drop.
  json bad = listener();
  bad["nmae"] = "x";
  EXPECT_THROW(messages().to_binary(kResponse, {{"resources", {bad}}}), std::runtime_error);
}

struct Exchange {
  explicit Exchange(const std::string& text = kBootstrap) : text(text) {}
  std::string text;
  std::vector<config::Bootstrap> installed;
  std::string install_error;  // what apply answers
  config::Bootstrap bootstrap = config::parse_bootstrap(text);
  AdsClient client{YAML::Load(text), bootstrap, [this](config::Bootstrap b) {
                     if (!install_error.empty()) return install_error;
                     installed.push_back(std::move(b));
                     return std::string();
                   }};
};

// type_url of each request, with its version and nonce.
std::vector<std::string> summary(const std::vector<json>& requests) {
  std::vector<std::string> out;
  for (const json& r : requests) {
    std::string s = r.value("type_url", "");
    s = s.substr(s.rfind('.') + 1) + " v=" + r.value("version_info", "") + " n=" + r.value("response_nonce", "");
    if (r.contains("resource_names")) s += " " + r["resource_names"].dump();
    if (r.contains("error_detail")) s += " NACK";
    out.push_back(s);
  }
  return out;
}

// The stream opened and one whole set (a cluster, its endpoints, a listener,
// its routes) accepted at `version`: one install.
void install_first_set(Exchange& x, const std::string& version) {
  x.client.on_stream_start();
  x.client.on_response(response(config::kClusterType, version, "c" + version, {cluster()}));
  x.client.on_response(response(config::kEndpointType, version, "e" + version, {load_assignment(18080)}));
  x.client.on_response(response(config::kListenerType, version, "l" + version, {listener()}));
  x.client.on_response(response(config::kRouteType, version, "r" + version, {route_config("/")}));
}

// An update that changes a route leaves the clusters' runtimes as they are
// (their hosts, breakers and TLS contexts); one that changes a cluster's
// endpoints gives it a new runtime whose unchanged hosts keep their state.
TEST(MeshXds, AnUnchangedClusterKeepsItsRuntime) {
  Exchange x;
  install_first_set(x, "1");
  ASSERT_EQ(x.installed.size(), 1u);
  StatsStore stats(1);
  const auto first = Snapshot::build(x.installed.back(), stats, nullptr, 1, 0);
  const std::shared_ptr<Host> host = first->clusters.at("backend")->hosts()->hosts.at(0);

  x.client.on_response(response(config::kRouteType, "2", "r2", {route_config("/api")}));
  ASSERT_EQ(x.installed.size(), 2u);
  const auto routes = Snapshot::build(x.installed.back(), stats, first.get(), 2, 0);
  EXPECT_EQ(routes->clusters.at("backend"), first->clusters.at("backend"));
  EXPECT_NE(routes->clusters.at("xds_cluster"), first->clusters.at("xds_cluster"));  // the file's: built again

  // The same endpoints resent (a state-of-the-world snapshot): nothing to install.
  x.client.on_response(response(config::kEndpointType, "3", "e3", {load_assignment(18080)}));
  EXPECT_EQ(x.installed.size(), 2u);
  json two = load_assignment(18080);
  two["endpoints"][0]["lb_endpoints"].push_back(load_assignment(18081)["endpoints"][0]["lb_endpoints"][0]);
  x.client.on_response(response(config::kEndpointType, "5", "e5", {two}));
  ASSERT_EQ(x.installed.size(), 3u);
  const auto endpoints = Snapshot::build(x.installed.back(), stats, routes.get(), 3, 0);
  EXPECT_NE(endpoints->clusters.at("backend"), routes->clusters.at("backend"));
  ASSERT_EQ(endpoints->clusters.at("backend")->hosts()->hosts.size(), 2u);
  EXPECT_EQ(endpoints->clusters.at("backend")->hosts()->hosts[0], host);
}

// Connections follow their listener into an update that gives it new routes;
// one that changes the listener in place (its filter chain, or the listener
// itself) has no successor for them: they drain, as Envoy's do.
TEST(MeshXds, AListenerChangedInPlaceDrainsItsConnections) {
  Exchange x;
  install_first_set(x, "1");
  StatsStore stats(1);
  const auto first = Snapshot::build(x.installed.back(), stats, nullptr, 1, 0);

  x.client.on_response(response(config::kRouteType, "2", "r2", {route_config("/api")}));
  const auto routes = Snapshot::build(x.installed.back(), stats, first.get(), 2, 0);
  EXPECT_EQ(routes->successor(*first->listener("web")), routes->listener("web"));

  json chain = listener();
  chain["filter_chains"][0]["filters"][0]["typed_config"]["stat_prefix"] = "changed";
  x.client.on_response(response(config::kListenerType, "3", "l3", {chain}));
  const auto chain_changed = Snapshot::build(x.installed.back(), stats, routes.get(), 3, 0);
  ASSERT_NE(chain_changed->listener("web"), nullptr);
  EXPECT_EQ(chain_changed->successor(*routes->listener("web")), nullptr);

  json whole = chain;
  whole["per_connection_buffer_limit_bytes"] = 65536;
  x.client.on_response(response(config::kListenerType, "4", "l4", {whole}));
  const auto listener_changed = Snapshot::build(x.installed.back(), stats, chain_changed.get(), 4, 0);
  EXPECT_EQ(listener_changed->successor(*chain_changed->listener("web")), nullptr);
  EXPECT_EQ(listener_changed->successor(*listener_changed->listener("web")), listener_changed->listener("web"));
}

TEST(MeshXds, AckWarmInstallNack) {
  Exchange x;
  // The stream opens with CDS alone (clusters warm first), with the node.
  const std::vector<json> open = sent(x.client.on_stream_start());
  ASSERT_EQ(summary(open), std::vector<std::string>{"Cluster v= n="});
  EXPECT_EQ(open[0]["node"]["id"], "node-a");
  EXPECT_EQ(open[0]["node"]["cluster"], "mesh");

  // CDS: ACKed; EDS subscribed for the EDS cluster; then LDS.
  EXPECT_EQ(summary(sent(x.client.on_response(response(config::kClusterType, "1", "c1", {cluster()})))),
            (std::vector<std::string>{"Cluster v=1 n=c1", "ClusterLoadAssignment v= n= [\"backend\"]",
                                      "Listener v= n="}));
  EXPECT_EQ(summary(sent(x.client.on_response(response(config::kEndpointType, "1", "e1", {load_assignment(18080)})))),
            std::vector<std::string>{"ClusterLoadAssignment v=1 n=e1 [\"backend\"]"});
  EXPECT_TRUE(x.installed.empty());  // no listeners yet
  // LDS names a route configuration: RDS subscribed, nothing installed until it arrives.
  EXPECT_EQ(summary(sent(x.client.on_response(response(config::kListenerType, "1", "l1", {listener()})))),
            (std::vector<std::string>{"Listener v=1 n=l1", "RouteConfiguration v= n= [\"web-routes\"]"}));
  EXPECT_TRUE(x.installed.empty());
  EXPECT_EQ(summary(sent(x.client.on_response(response(config::kRouteType, "1", "r1", {route_config("/")})))),
            std::vector<std::string>{"RouteConfiguration v=1 n=r1 [\"web-routes\"]"});
  ASSERT_EQ(x.installed.size(), 1u);
  const config::Bootstrap& b = x.installed[0];
  ASSERT_EQ(b.listeners.size(), 1u);
  EXPECT_EQ(b.listeners[0].name, "web");
  ASSERT_EQ(b.clusters.size(), 2u);
  EXPECT_EQ(b.clusters[1].endpoints.at(0).address.port, 18080);
  EXPECT_EQ(x.client.acks(), 4u);

  // A bad route: NACK with the path of the fault, the version stays 1, nothing installed.
  const std::vector<json> nack =
      sent(x.client.on_response(response(config::kRouteType, "2", "r2", {route_config("(unclosed", true)})));
  ASSERT_EQ(summary(nack), std::vector<std::string>{"RouteConfiguration v=1 n=r2 [\"web-routes\"] NACK"});
  EXPECT_EQ(nack[0]["error_detail"]["code"], 13);
  const std::string message = nack[0]["error_detail"]["message"];
  EXPECT_TRUE(message.starts_with(
      "RouteConfiguration 'web-routes': virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex '(unclosed'"))
      << message;
  EXPECT_EQ(x.installed.size(), 1u);
  EXPECT_EQ(x.client.nacks(), 1u);

  // The last good set stays: new endpoints install with the old, good routes.
  EXPECT_EQ(summary(sent(x.client.on_response(response(config::kEndpointType, "3", "e3", {load_assignment(18081)})))),
            std::vector<std::string>{"ClusterLoadAssignment v=3 n=e3 [\"backend\"]"});
  ASSERT_EQ(x.installed.size(), 2u);
  EXPECT_EQ(x.installed[1].clusters[1].endpoints.at(0).address.port, 18081);
  EXPECT_EQ(config::to_json(x.installed[1])["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
                                           ["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["match"]["prefix"],
            "/");

  // The same set again (a control plane resends every type of a snapshot): ACKed, not installed again.
  x.client.on_response(response(config::kEndpointType, "4", "e4", {load_assignment(18081)}));
  EXPECT_EQ(x.installed.size(), 2u);

  // A set that cannot be installed (the address is taken): NACKed with why.
  x.install_error = "cannot listen at 127.0.0.1:10000: Address already in use";
  const std::vector<json> refused =
      sent(x.client.on_response(response(config::kEndpointType, "5", "e5", {load_assignment(18082)})));
  ASSERT_EQ(summary(refused), std::vector<std::string>{"ClusterLoadAssignment v=4 n=e5 [\"backend\"] NACK"});
  EXPECT_EQ(refused[0]["error_detail"]["message"], x.install_error);
}

// A Secret as SDS sends it: the certificate and key inline, as istio-agent does.
json secret(const testing::Pki& pki, const std::string& cert, const std::string& key) {
  return {{"@type", std::string(kSecretType)},
          {"name", "default"},
          {"tls_certificate",
           {{"certificate_chain", {{"inline_string", testing::Pki::read(pki.path(cert + ".crt"))}}},
            {"private_key", {{"inline_string", testing::Pki::read(pki.path(key + ".key"))}}}}}};
}

// Secrets over ADS (sds_config: {ads: {}}) and over a SecretDiscoveryService
// stream: subscribed by name, handed over checked, ACKed; a secret whose key
// is not its certificate's is NACKed and never handed over.
TEST(MeshXds, SecretsOnTheAdsStreamAndOverGrpc) {
  testing::Pki pki;
  pki.leaf("server", "URI:spiffe://cluster.local/ns/default/sa/backend");
  pki.leaf("client", "URI:spiffe://cluster.local/ns/default/sa/frontend");
  const std::string text = config::replaced_once(kBootstrap, "static_resources:\n", R"(static_resources:
  listeners:
  - name: inbound
    address: {socket_address: {address: 127.0.0.1, port_value: 15006}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs: [{name: default, sds_config: {ads: {}}}]
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: in, cluster: xds_cluster}
)");
  const config::Bootstrap bootstrap = config::parse_bootstrap(text);
  std::vector<std::pair<std::string, std::map<std::string, config::Secret>>> taken;
  const ApplySecrets take = [&](const std::string& stream, std::map<std::string, config::Secret> secrets) {
    taken.emplace_back(stream, std::move(secrets));
    return std::string();
  };
  AdsClient ads{YAML::Load(text), bootstrap, [](config::Bootstrap) { return std::string(); }, take};
  // The secret the bootstrap names is asked for from the first request on.
  EXPECT_EQ(summary(sent(ads.on_stream_start())),
            (std::vector<std::string>{"Cluster v= n=", "Secret v= n= [\"default\"]"}));
  EXPECT_EQ(summary(sent(ads.on_response(response(kSecretType, "1", "s1", {secret(pki, "server", "server")})))),
            std::vector<std::string>{"Secret v=1 n=s1 [\"default\"]"});
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first, "ads");
  EXPECT_EQ(taken[0].second.at("default").tls_certificate->certificate_chain.bytes,
            testing::Pki::read(pki.path("server.crt")));
  const std::vector<json> nack = sent(ads.on_response(response(kSecretType, "2", "s2", {secret(pki, "server", "client")})));
  ASSERT_EQ(summary(nack), std::vector<std::string>{"Secret v=1 n=s2 [\"default\"] NACK"});
  EXPECT_NE(nack[0]["error_detail"]["message"].get<std::string>().find("the private key does not match"), std::string::npos)
      << nack[0];
  EXPECT_EQ(taken.size(), 1u);
  EXPECT_EQ(ads.nacks(), 1u);

  // SecretDiscoveryService/StreamSecrets: the same, on a stream of its own.
  SdsClient sds{bootstrap.clusters.at(0), bootstrap.node, take};
  sds.subscribe({"default"});  // no stream is open: the first one asks
  const json ack = sds.on_response(response(kSecretType, "7", "n7", {secret(pki, "server", "server")}));
  EXPECT_EQ(summary(sent({ack})), std::vector<std::string>{"Secret v=7 n=n7 [\"default\"]"});
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[1].first, "grpc:xds_cluster");
  const json refused = sds.on_response(response(kSecretType, "8", "n8", {secret(pki, "client", "server")}));
  EXPECT_EQ(summary(sent({refused})), std::vector<std::string>{"Secret v=7 n=n8 [\"default\"] NACK"});
  EXPECT_EQ(taken.size(), 2u);
  // What the proxy refuses is NACKed with its words.
  const ApplySecrets refuse = [](const std::string&, std::map<std::string, config::Secret>) {
    return std::string("secret 'default' has no validation_context");
  };
  SdsClient picky{bootstrap.clusters.at(0), bootstrap.node, refuse};
  const json no = picky.on_response(response(kSecretType, "1", "n1", {secret(pki, "server", "server")}));
  EXPECT_EQ(no["error_detail"]["message"], "secret 'default' has no validation_context");
  EXPECT_EQ(picky.nacks(), 1u);
}

// A DeltaDiscoveryResponse: each resource with its name and version, and names removed.
json delta_response(std::string_view type, const std::string& nonce, const std::vector<json>& resources,
                    const std::vector<std::string>& removed = {}) {
  json r = {{"system_version_info", nonce}, {"type_url", type}, {"nonce", nonce}, {"removed_resources", removed}};
  for (const json& resource : resources) {
    const std::string name = resource.value("name", resource.value("cluster_name", ""));
    r["resources"].push_back({{"name", name}, {"version", name + "-" + nonce}, {"resource", resource}});
  }
  const char* type_name = "envoy.service.discovery.v3.DeltaDiscoveryResponse";
  return messages().to_json(type_name, messages().to_binary(type_name, r));
}

std::vector<json> delta_sent(const std::vector<json>& requests) {
  const char* type_name = "envoy.service.discovery.v3.DeltaDiscoveryRequest";
  std::vector<json> out;
  for (const json& r : requests) out.push_back(messages().to_json(type_name, messages().to_binary(type_name, r)));
  return out;
}

// type_url of each delta request: its nonce, what it subscribes to, a NACK.
std::vector<std::string> delta_summary(const std::vector<json>& requests) {
  std::vector<std::string> out;
  for (const json& r : requests) {
    std::string s = r.value("type_url", "");
    s = s.substr(s.rfind('.') + 1) + " n=" + r.value("response_nonce", "");
    if (r.contains("resource_names_subscribe")) s += " +" + r["resource_names_subscribe"].dump();
    if (r.contains("resource_names_unsubscribe")) s += " -" + r["resource_names_unsubscribe"].dump();
    if (r.contains("initial_resource_versions")) s += " held " + r["initial_resource_versions"].dump();
    if (r.contains("error_detail")) s += " NACK";
    out.push_back(s);
  }
  return out;
}

// A route configuration of three routes, the second's prefix `middle`.
json three_routes(const std::string& middle) {
  json rc = route_config("/a");
  json& routes = rc["virtual_hosts"][0]["routes"];
  routes.push_back(routes[0]);
  routes.push_back(routes[0]);
  routes[1]["match"]["prefix"] = middle;
  routes[2]["match"]["prefix"] = "/";
  return rc;
}

// The prefixes of the installed configuration's routes, in order.
std::vector<std::string> installed_prefixes(const Exchange& x) {
  std::vector<std::string> out;
  for (const config::Route& r :
       x.installed.back().listeners.at(0).filter_chains.at(0).filters.at(0).hcm->route_config.virtual_hosts.at(0).routes)
    out.push_back(r.match.value);
  return out;
}

// From its bytes, a route configuration is read route by route: a route the
// last response had is not converted again, and the configuration installed
// and dumped is the whole one, in order. Over state of the world and delta.
TEST(MeshXds, RoutesAreReadRouteByRoute) {
  for (const bool delta : {false, true}) {
    SCOPED_TRACE(delta ? "delta" : "state of the world");
    std::string text = kBootstrap;
    if (delta) text.replace(text.find("api_type: GRPC"), 14, "api_type: DELTA_GRPC");
    Exchange x(text);
    const auto bytes = [&](std::string_view type, const std::string& version, const json& resource) {
      const char* type_name = delta ? "envoy.service.discovery.v3.DeltaDiscoveryResponse" : kResponse;
      const json r = delta ? delta_response(type, version, {resource}) : response(type, version, "n" + version, {resource});
      return messages().to_binary(type_name, r);
    };
    x.client.on_stream_start();
    x.client.on_response_bytes(bytes(config::kClusterType, "1", cluster()));
    x.client.on_response_bytes(bytes(config::kEndpointType, "1", load_assignment(18080)));
    x.client.on_response_bytes(bytes(config::kListenerType, "1", listener()));
    x.client.on_response_bytes(bytes(config::kRouteType, "1", three_routes("/b")));
    ASSERT_EQ(x.installed.size(), 1u);
    EXPECT_EQ(x.client.routes_read(), 3u);
    EXPECT_EQ(installed_prefixes(x), (std::vector<std::string>{"/a", "/b", "/"}));

    x.client.on_response_bytes(bytes(config::kRouteType, "2", three_routes("/c")));
    ASSERT_EQ(x.installed.size(), 2u);
    EXPECT_EQ(x.client.routes_read(), 4u);  // the middle one alone
    EXPECT_EQ(installed_prefixes(x), (std::vector<std::string>{"/a", "/c", "/"}));
    json dumped = x.client.config_dump(config::to_json(x.installed.back()))["configs"][3]["dynamic_route_configs"][0]["route_config"];
    EXPECT_EQ(dumped, three_routes("/c")) << dumped.dump();

    // Resent unchanged (a state-of-the-world control plane does, for another type's change), then changed again:
    // the one route that changed is read.
    x.client.on_response_bytes(bytes(config::kRouteType, "3", three_routes("/c")));
    x.client.on_response_bytes(bytes(config::kRouteType, "4", three_routes("/d")));
    EXPECT_EQ(x.client.routes_read(), 5u);
    EXPECT_EQ(installed_prefixes(x), (std::vector<std::string>{"/a", "/d", "/"}));

    // A fault in a route read apart is named where it is, and the last good set stays.
    json bad = three_routes("/d");
    bad["virtual_hosts"][0]["routes"][2]["match"] = {{"safe_regex", {{"regex", "(x"}}}};
    const size_t installs = x.installed.size();
    const std::vector<json> nack = x.client.on_response_bytes(bytes(config::kRouteType, "5", bad));
    ASSERT_EQ(nack.size(), 1u);
    EXPECT_NE(nack[0]["error_detail"]["message"].get<std::string>().find(
                  "RouteConfiguration 'web-routes': virtual_hosts[0].routes[2].match.safe_regex.regex"),
              std::string::npos)
        << nack[0];
    EXPECT_EQ(x.installed.size(), installs);
    EXPECT_EQ(x.client.nacks(), 1u);
  }
}

TEST(MeshXds, DeltaXds) {
  std::string text = kBootstrap;
  text.replace(text.find("api_type: GRPC"), 14, "api_type: DELTA_GRPC");
  Exchange x(text);
  EXPECT_EQ(delta_summary(delta_sent(x.client.on_stream_start())), std::vector<std::string>{"Cluster n="});
  EXPECT_EQ(delta_summary(delta_sent(x.client.on_response(delta_response(config::kClusterType, "c1", {cluster()})))),
            (std::vector<std::string>{"Cluster n=c1", "ClusterLoadAssignment n= +[\"backend\"]", "Listener n="}));
  x.client.on_response(delta_response(config::kEndpointType, "e1", {load_assignment(18080)}));
  x.client.on_response(delta_response(config::kListenerType, "l1", {listener()}));
  x.client.on_response(delta_response(config::kRouteType, "r1", {route_config("/")}));
  ASSERT_EQ(x.installed.size(), 1u);
  // Only what changed comes; the rest is kept.
  EXPECT_EQ(delta_summary(delta_sent(x.client.on_response(delta_response(config::kEndpointType, "e2", {load_assignment(18081)})))),
            std::vector<std::string>{"ClusterLoadAssignment n=e2"});
  ASSERT_EQ(x.installed.size(), 2u);
  EXPECT_EQ(x.installed[1].clusters.at(1).endpoints.at(0).address.port, 18081);
  EXPECT_EQ(x.installed[1].listeners.size(), 1u);
  // A bad change is NACKed; the route keeps working.
  EXPECT_EQ(delta_summary(delta_sent(x.client.on_response(delta_response(config::kRouteType, "r2", {route_config("(x", true)})))),
            std::vector<std::string>{"RouteConfiguration n=r2 NACK"});
  EXPECT_EQ(x.installed.size(), 2u);
  // The cluster removed while a route names it: installed, the route's cluster
  // without endpoints (it answers 503, as Envoy's cluster-not-found does).
  x.client.on_response(delta_response(config::kClusterType, "c2", {}, {"backend"}));
  ASSERT_EQ(x.installed.size(), 3u);
  ASSERT_EQ(x.installed[2].clusters.size(), 2u);
  EXPECT_EQ(x.installed[2].clusters[1].name, "backend");
  EXPECT_TRUE(x.installed[2].clusters[1].endpoints.empty());
  // /config_dump does not show the stand-in as a static cluster.
  const json dump = x.client.config_dump(config::to_json(x.installed[2]));
  EXPECT_EQ(dump["configs"][1]["static_clusters"].size(), 1u);
  EXPECT_EQ(dump["configs"][1]["dynamic_active_clusters"].size(), 0u);
  // A new stream says what is held, with each resource's version.
  const std::vector<std::string> again = delta_summary(delta_sent(x.client.on_stream_start()));
  ASSERT_EQ(again.size(), 4u);
  EXPECT_EQ(again[0], "Cluster n=");  // the backend cluster was removed: nothing held
  EXPECT_EQ(again[1], "ClusterLoadAssignment n= +[\"backend\"] held {\"backend\":\"backend-e2\"}");
  EXPECT_EQ(again[2], "Listener n= held {\"web\":\"web-l1\"}");
  EXPECT_EQ(again[3], "RouteConfiguration n= +[\"web-routes\"] held {\"web-routes\":\"web-routes-r1\"}");
}

TEST(MeshXds, ConfigDumpShowsDynamicResourcesWithVersions) {
  Exchange x;
  install_first_set(x, "7");
  ASSERT_EQ(x.installed.size(), 1u);
  const json dump = x.client.config_dump(config::to_json(x.installed[0]));
  const json& configs = dump["configs"];
  ASSERT_EQ(configs.size(), 5u);
  EXPECT_EQ(configs[0]["bootstrap"]["dynamic_resources"]["ads_config"]["grpc_services"][0]["envoy_grpc"]["cluster_name"],
            "xds_cluster");
  EXPECT_EQ(configs[1]["@type"], "type.googleapis.com/envoy.admin.v3.ClustersConfigDump");
  EXPECT_EQ(configs[1]["version_info"], "7");
  ASSERT_EQ(configs[1]["static_clusters"].size(), 1u);
  EXPECT_EQ(configs[1]["static_clusters"][0]["cluster"]["name"], "xds_cluster");
  ASSERT_EQ(configs[1]["dynamic_active_clusters"].size(), 1u);
  EXPECT_EQ(configs[1]["dynamic_active_clusters"][0]["version_info"], "7");
  EXPECT_EQ(configs[1]["dynamic_active_clusters"][0]["cluster"], cluster());
  EXPECT_FALSE(configs[1]["dynamic_active_clusters"][0]["last_updated"].get<std::string>().empty());
  ASSERT_EQ(configs[2]["dynamic_listeners"].size(), 1u);
  EXPECT_EQ(configs[2]["dynamic_listeners"][0]["name"], "web");
  EXPECT_EQ(configs[2]["dynamic_listeners"][0]["active_state"]["version_info"], "7");
  EXPECT_EQ(configs[2]["static_listeners"].size(), 0u);
  EXPECT_EQ(configs[3]["dynamic_route_configs"][0]["route_config"]["name"], "web-routes");
  EXPECT_EQ(configs[4]["dynamic_endpoint_configs"][0]["endpoint_config"]["cluster_name"], "backend");
}

// The admin's /ready status (0 when it does not answer).
unsigned ready_status(uint16_t port) { return testing::admin_status(port, "/ready"); }

TEST(MeshXds, NotReadyUntilTheFirstSetThenLiveAfterInitialFetchTimeout) {
  // A control plane that is not there (nothing listens on its port): the
  // proxy is PRE_INITIALIZING, then after initial_fetch_timeout LIVE with its
  // static part, as Envoy is.
  const uint16_t admin = testing::free_port();
  std::string text = kBootstrap;
  text.replace(text.find("port_value: 9901"), 16, "port_value: " + std::to_string(admin));
  text.replace(text.find("port_value: 18000"), 17, "port_value: " + std::to_string(testing::free_port()));
  text.replace(text.find("cds_config: {ads: {}, resource_api_version: V3}"), 47,
               "cds_config: {ads: {}, resource_api_version: V3, initial_fetch_timeout: 3s}");
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mesh_xds_test_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  config::Bootstrap b = config::load_bootstrap(path.string());
  ASSERT_EQ(b.dynamic_resources->initial_fetch_timeout, std::chrono::seconds(15));  // lds_config keeps the default
  text.replace(text.find("lds_config: {ads: {}, resource_api_version: V3}"), 47,
               "lds_config: {ads: {}, resource_api_version: V3, initial_fetch_timeout: 2s}");
  std::ofstream(path) << text;
  b = config::load_bootstrap(path.string());
  ASSERT_EQ(b.dynamic_resources->initial_fetch_timeout, std::chrono::seconds(3));  // the longer of the two

  ProxyOptions options;
  options.config_path = path.string();
  ControlPlane cp(options, {}, 1);
  cp.start(std::move(b));
  std::thread loop([&] { cp.run(); });
  EXPECT_EQ(ready_status(admin), 503u);
  unsigned status = 0;
  for (int i = 0; i < 3000 && (status = ready_status(admin)) != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(status, 200u);
  cp.stop();
  loop.join();
  std::filesystem::remove(path);
}

// An ADS server in this process (gRPC++, the service as generated code
// registers one), whose stream handler the test writes step by step.
class AdsServer : public grpc::Service {
 public:
  using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
  explicit AdsServer(std::function<grpc::Status(Stream&)> handler) : handler_(std::move(handler)) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
        grpc::internal::RpcMethod::BIDI_STREAMING,
        new grpc::internal::BidiStreamingHandler<AdsServer, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](AdsServer* self, grpc::ServerContext*, Stream* stream) { return self->handler_(*stream); }, this)));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~AdsServer() override { server_->Shutdown(std::chrono::system_clock::now()); }
  int port() const { return port_; }

  static json read(Stream& s) {
    grpc::ByteBuffer buffer;
    if (!s.Read(&buffer)) return nullptr;
    return messages().to_json(kRequest, from_byte_buffer(buffer));
  }
  static void write(Stream& s, std::string_view type, const std::string& version, const std::string& nonce,
                    const json& resources) {
    const json r = {{"version_info", version}, {"type_url", type}, {"nonce", nonce}, {"resources", resources}};
    s.Write(to_byte_buffer(messages().to_binary(kResponse, r)));
  }

 private:
  std::function<grpc::Status(Stream&)> handler_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(MeshXds, AdsStreamOverGrpcAndReconnect) {
  std::vector<json> first, second;  // what the server read on each stream
  std::promise<void> second_stream;
  int streams = 0;
  AdsServer server([&](AdsServer::Stream& s) {
    if (++streams == 1) {
      // CDS, EDS, LDS, RDS, each ACKed; then the stream fails.
      first.push_back(AdsServer::read(s));                                     // CDS
      AdsServer::write(s, config::kClusterType, "1", "c1", {cluster()});
      for (int i = 0; i < 3; ++i) first.push_back(AdsServer::read(s));         // CDS ACK, EDS, LDS
      AdsServer::write(s, config::kEndpointType, "1", "e1", {load_assignment(18080)});
      first.push_back(AdsServer::read(s));                                     // EDS ACK
      AdsServer::write(s, config::kListenerType, "1", "l1", {listener()});
      for (int i = 0; i < 2; ++i) first.push_back(AdsServer::read(s));         // LDS ACK, RDS
      AdsServer::write(s, config::kRouteType, "1", "r1", {route_config("/")});
      first.push_back(AdsServer::read(s));                                     // RDS ACK
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "control plane restarting");
    }
    // The client comes back and renews every subscription with what it holds.
    for (int i = 0; i < 4; ++i) second.push_back(AdsServer::read(s));
    second_stream.set_value();
    while (AdsServer::read(s) != nullptr) {
    }
    return grpc::Status::OK;
  });
  std::string text = kBootstrap;
  text.replace(text.find("port_value: 18000"), 17, "port_value: " + std::to_string(server.port()));
  std::vector<config::Bootstrap> installed;
  {
    config::Bootstrap b = config::parse_bootstrap(text);
    AdsClient client(YAML::Load(text), b, [&](config::Bootstrap applied) {
      installed.push_back(std::move(applied));
      return std::string();
    });
    client.start();
    ASSERT_EQ(second_stream.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
    client.stop();
  }
  EXPECT_EQ(summary(first), (std::vector<std::string>{"Cluster v= n=", "Cluster v=1 n=c1",
                                                      "ClusterLoadAssignment v= n= [\"backend\"]", "Listener v= n=",
                                                      "ClusterLoadAssignment v=1 n=e1 [\"backend\"]",
                                                      "Listener v=1 n=l1", "RouteConfiguration v= n= [\"web-routes\"]",
                                                      "RouteConfiguration v=1 n=r1 [\"web-routes\"]"}));
  EXPECT_EQ(first[0]["node"]["id"], "node-a");
  ASSERT_EQ(installed.size(), 1u);
  EXPECT_EQ(installed[0].listeners.at(0).name, "web");
  EXPECT_EQ(summary(second), (std::vector<std::string>{"Cluster v=1 n=", "ClusterLoadAssignment v=1 n= [\"backend\"]",
                                                       "Listener v=1 n=", "RouteConfiguration v=1 n= [\"web-routes\"]"}));
}

TEST(MeshXds, GrpcTargets) {
  config::Cluster c;
  c.endpoints.push_back({});
  c.endpoints[0].address.ip = "127.0.0.1";
  c.endpoints[0].address.port = 18000;
  EXPECT_EQ(grpc_target(c), "ipv4:127.0.0.1:18000");
  c.endpoints[0].address.ip = "::1";
  EXPECT_EQ(grpc_target(c), "ipv6:[::1]:18000");
  c.endpoints[0].address.ip = "istiod.istio-system.svc";
  c.endpoints[0].address.port = 15010;
  EXPECT_EQ(grpc_target(c), "dns:///istiod.istio-system.svc:15010");
  c.endpoints[0].address = {};
  c.endpoints[0].address.pipe_path = "/run/xds.sock";
  EXPECT_EQ(grpc_target(c), "unix:/run/xds.sock");
}

}  // namespace
}  // namespace dpukit::mesh::xds
