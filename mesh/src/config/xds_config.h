// Configuration from an xDS control plane: the bootstrap's dynamic_resources
// (ADS over gRPC, v3, state of the world), and the resources an ADS stream
// delivers (Listener, Cluster, RouteConfiguration, ClusterLoadAssignment, as
// proto-JSON) assembled into one static_resources bootstrap, so that they
// pass the same parser and checks as a bootstrap file.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace dpukit::mesh::config {

class At;
struct Bootstrap;

// dynamic_resources: {ads_config: {api_type: GRPC or DELTA_GRPC, transport_api_version: V3,
// grpc_services: [{envoy_grpc: {cluster_name}}]}, lds_config: {ads: {}},
// cds_config: {ads: {}}}.
struct DynamicResources {
  std::string ads_cluster;  // ads_config.grpc_services[0].envoy_grpc.cluster_name
  bool delta = false;       // api_type DELTA_GRPC (incremental xDS), else GRPC (state of the world)
  bool lds = false;         // lds_config: {ads: {}}
  bool cds = false;         // cds_config: {ads: {}}
  // initial_fetch_timeout of lds_config/cds_config (Envoy's default 15 s; the
  // longer of the two; 0: wait for ever): with no complete set from the
  // control plane by then, the proxy goes LIVE with its static part, as Envoy does.
  std::chrono::milliseconds initial_fetch_timeout{15000};
};

// A ConfigSource's api_config_source: gRPC to one cluster (envoy_grpc).
struct GrpcApiSource {
  std::string cluster, cluster_where;
  bool delta = false;  // api_type DELTA_GRPC
};
// Refuses other api_types (REST), google_grpc and several services by path;
// DELTA_GRPC unless `delta_allowed`. Throws ConfigError.
GrpcApiSource parse_grpc_api_source(const At& at, bool delta_allowed);
// `name` is a static cluster that speaks HTTP/2 and has an endpoint; else a
// ConfigError at `at` (the config path that names it).
void check_grpc_cluster(const Bootstrap& b, const std::string& name, const std::string& at);

// Reads dynamic_resources; other api_types (REST), other transports and non-ADS sources are
// refused by path. Throws ConfigError.
DynamicResources parse_dynamic_resources(const At& at);
// Once the static clusters are read: the ADS cluster is one of them, with
// HTTP/2 (gRPC needs it) and one endpoint; node.id is set (a control plane
// tells nodes apart by it).
void check_dynamic_resources(const Bootstrap& b);

// Parses a bootstrap given as a YAML node (the xDS assembly builds one); the
// same parser and cross-checks as parse_bootstrap. Defined in bootstrap.cc.
Bootstrap parse_bootstrap_node(const YAML::Node& root);

// The type URLs of the resources an ADS stream carries.
inline constexpr std::string_view kListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener";
inline constexpr std::string_view kClusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
inline constexpr std::string_view kRouteType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
inline constexpr std::string_view kEndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

// The resources last accepted, per type URL, by name: proto-JSON without "@type".
struct XdsResources {
  std::map<std::string, std::map<std::string, nlohmann::json>> by_type;
  const std::map<std::string, nlohmann::json>& of(std::string_view type_url) const;
};

// What an assembly needs and has.
struct XdsAssembly {
  YAML::Node bootstrap;  // the bootstrap file plus the dynamic resources, as static_resources
  // Resources named but not (yet) delivered: EDS service names and RDS
  // route names (Envoy warms a cluster until its endpoints come, a listener
  // until its routes come); none missing: complete, it can be applied.
  std::set<std::string> missing_endpoints, missing_routes;
  // Clusters that routes name but CDS did not deliver: as in Envoy (RDS's
  // validate_clusters is false by default) the routes are taken and answer
  // 503; here a cluster without endpoints stands in for each.
  std::set<std::string> missing_clusters;
  // The names of the ClusterLoadAssignments and RouteConfigurations the
  // resources name, to subscribe to them.
  std::set<std::string> endpoint_names, route_names;
  // Where each dynamic resource landed in `bootstrap` ("static_resources.
  // listeners[3]") and what names it in a NACK ("Listener 'web'").
  std::vector<std::pair<std::string, std::string>> labels;
  bool complete() const { return missing_endpoints.empty() && missing_routes.empty(); }
};

// `base`: the bootstrap file (it is not changed). Where a resource is still
// missing, a stand-in is put in its place (a load_assignment without
// endpoints, a route_config without virtual hosts, a cluster without
// endpoints), so that a fault is found as soon as the resource that has it
// arrives. Throws ConfigError naming the resource ("Cluster 'web':
// eds_cluster_config.eds_config: ...") for what the assembly itself reads
// (an EDS or RDS config source must be ADS).
XdsAssembly assemble_xds(const YAML::Node& base, const XdsResources& resources);

// Parses an assembly with the bootstrap parser. A fault is a ConfigError
// whose text names the resource and the path inside it:
// "Listener 'web': filter_chains[0].filters[0]...: reason".
Bootstrap parse_xds_assembly(const XdsAssembly& assembly);

// YAML from proto-JSON: strings stay strings (tagged as quoted), numbers and
// booleans plain, as the parser reads Envoy's YAML.
YAML::Node yaml_from_json(const nlohmann::json& j);

}  // namespace dpukit::mesh::config
