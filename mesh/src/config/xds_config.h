// Configuration from an xDS control plane: the bootstrap's dynamic_resources
// (ADS over gRPC, v3, state of the world or delta) and the config sources
// that name it. The resources the stream delivers are assembled by
// config/xds_assembly.h.
#pragma once

#include <chrono>
#include <string>

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

// A ConfigSource that is the ADS stream: {ads: {}} (resource_api_version V3
// if given); its initial_fetch_timeout into `timeout` where one is taken
// (lds_config, cds_config), refused elsewhere. Throws ConfigError.
void parse_ads_source(const At& at, std::chrono::milliseconds* timeout = nullptr);

// Reads dynamic_resources; other api_types (REST), other transports and non-ADS sources are
// refused by path. Throws ConfigError.
DynamicResources parse_dynamic_resources(const At& at);
// Once the static clusters are read: the ADS cluster is one of them, with
// HTTP/2 (gRPC needs it) and one endpoint; node.id is set (a control plane
// tells nodes apart by it).
void check_dynamic_resources(const Bootstrap& b);

// Parses a bootstrap given as a YAML node (the xDS assembly's base); the
// same parser and cross-checks as parse_bootstrap. Defined in bootstrap.cc.
Bootstrap parse_bootstrap_node(const YAML::Node& root);

// The type URLs of the resources an ADS stream carries.
inline constexpr std::string_view kListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener";
inline constexpr std::string_view kClusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
inline constexpr std::string_view kRouteType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
inline constexpr std::string_view kEndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

// YAML from proto-JSON: strings stay strings (tagged as quoted), numbers and
// booleans plain, as the parser reads Envoy's YAML.
YAML::Node yaml_from_json(const nlohmann::json& j);

}  // namespace dpukit::mesh::config
