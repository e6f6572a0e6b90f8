// dynamic_resources, and the assembly of ADS resources into a bootstrap that
// the bootstrap parser checks as it checks a file.
#include "config/xds_config.h"

#include <algorithm>

#include "config/bootstrap.h"
#include "config/checked_yaml.h"

namespace dpukit::mesh::config {

using json = nlohmann::json;

void parse_ads_source(const At& at, std::chrono::milliseconds* timeout) {
  const Fields f =
      at.fields("envoy.config.core.v3.ConfigSource", {"ads", "resource_api_version", "initial_fetch_timeout"});
  if (f.has("initial_fetch_timeout")) {
    if (!timeout)
      f["initial_fetch_timeout"].fail(
          "not supported by dpukit-mesh here (it is taken on dynamic_resources.lds_config and cds_config)");
    *timeout = f["initial_fetch_timeout"].duration();
  }
  if (!f.has("ads"))
    f.self().fail("only ads: {} is supported by dpukit-mesh (every resource comes over the ADS stream)");
  f["ads"].fields("envoy.config.core.v3.AggregatedConfigSource", {});
  if (f.has("resource_api_version")) f["resource_api_version"].choice<int>({{"V3", 3}}, {"AUTO", "V2"});
}

GrpcApiSource parse_grpc_api_source(const At& at, bool delta_allowed) {
  const Fields f = at.fields("envoy.config.core.v3.ApiConfigSource", {"api_type", "transport_api_version",
                                                                      "grpc_services", "set_node_on_first_message_only"});
  // gRPC, state of the world or incremental (delta); REST polling is not implemented.
  GrpcApiSource s;
  const At api_type = f.required("api_type");
  s.delta = api_type.choice<bool>({{"GRPC", false}, {"DELTA_GRPC", true}},
                                  {"AGGREGATED_GRPC", "AGGREGATED_DELTA_GRPC", "REST", "UNSUPPORTED_REST_LEGACY"});
  if (s.delta && !delta_allowed) api_type.fail("DELTA_GRPC is not supported by dpukit-mesh here (GRPC is)");
  if (f.has("transport_api_version")) f["transport_api_version"].choice<int>({{"V3", 3}}, {"AUTO", "V2"});
  if (f.has("set_node_on_first_message_only")) f["set_node_on_first_message_only"].boolean_or(false);
  const At services = f.required("grpc_services");
  const std::vector<At> items = services.items();
  if (items.size() != 1) services.fail("exactly one gRPC service is supported, got " + std::to_string(items.size()));
  const Fields service = items[0].fields("envoy.config.core.v3.GrpcService", {"envoy_grpc"});
  const Fields envoy_grpc =
      service.required("envoy_grpc").fields("envoy.config.core.v3.GrpcService.EnvoyGrpc", {"cluster_name"});
  s.cluster = envoy_grpc.required("cluster_name").nonempty_str();
  s.cluster_where = envoy_grpc["cluster_name"].path();
  return s;
}

DynamicResources parse_dynamic_resources(const At& at) {
  const Fields f =
      at.fields("envoy.config.bootstrap.v3.Bootstrap.DynamicResources", {"ads_config", "lds_config", "cds_config"});
  DynamicResources d;
  const GrpcApiSource ads = parse_grpc_api_source(f.required("ads_config"), true);
  d.delta = ads.delta;
  d.ads_cluster = ads.cluster;
  std::chrono::milliseconds lds_timeout{15000}, cds_timeout{15000};
  if (f.has("lds_config")) {
    parse_ads_source(f["lds_config"], &lds_timeout);
    d.lds = true;
  }
  if (f.has("cds_config")) {
    parse_ads_source(f["cds_config"], &cds_timeout);
    d.cds = true;
  }
  // The proxy is ready when both have their set or have timed out: the longer wait (0 never ends).
  using std::chrono::milliseconds;
  const milliseconds lds = d.lds ? lds_timeout : milliseconds(0), cds = d.cds ? cds_timeout : milliseconds(0);
  d.initial_fetch_timeout = (d.lds && lds.count() == 0) || (d.cds && cds.count() == 0) ? milliseconds(0) : std::max(lds, cds);
  if (!d.lds && !d.cds) f.self().fail("lds_config or cds_config is required (ADS alone names no resources)");
  return d;
}

void check_grpc_cluster(const Bootstrap& b, const std::string& name, const std::string& at) {
  const Cluster* cluster = nullptr;
  for (const Cluster& c : b.clusters)
    if (c.name == name) cluster = &c;
  if (cluster == nullptr) throw ConfigError(at, "unknown cluster '" + name + "' (it must be a static cluster)");
  if (!cluster->http2)
    throw ConfigError(at, "cluster '" + name +
                              "' must speak HTTP/2 (gRPC): give it typed_extension_protocol_options "
                              "envoy.extensions.upstreams.http.v3.HttpProtocolOptions with "
                              "explicit_http_config.http2_protocol_options");
  if (cluster->endpoints.empty()) throw ConfigError(at, "cluster '" + name + "' has no endpoints");
}

void check_dynamic_resources(const Bootstrap& b) {
  check_grpc_cluster(b, b.dynamic_resources->ads_cluster,
                     "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name");
  if (b.node.id.empty()) throw ConfigError("node.id", "required with dynamic_resources (a control plane tells nodes apart by it)");
}

namespace {

// Fills `node` in place, so that every node is made in one yaml-cpp memory
// (a Node made apart and then attached merges its memory into the parent's:
// for 1,000 clusters that merging was most of the time of an update's checks).
void fill_yaml(YAML::Node node, const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      node = YAML::Node(YAML::NodeType::Map);
      for (const auto& [key, value] : j.items()) fill_yaml(node[key], value);
      return;
    case json::value_t::array: {
      node = YAML::Node(YAML::NodeType::Sequence);
      std::size_t i = 0;
      for (const json& value : j) {
        node.push_back(YAML::Node(YAML::NodeType::Null));
        fill_yaml(node[i++], value);
      }
      return;
    }
    case json::value_t::string:
      node = j.get_ref<const std::string&>();
      node.SetTag("!");  // as if quoted: "8080" stays a string
      return;
    case json::value_t::boolean: node = j.get<bool>() ? "true" : "false"; return;
    case json::value_t::null: node = YAML::Node(YAML::NodeType::Null); return;
    default: node = j.dump(); return;  // a number
  }
}

}  // namespace

YAML::Node yaml_from_json(const json& j) {
  YAML::Node root(YAML::NodeType::Null);  // a node of its own (a default Node has none, and a copy would not share it)
  fill_yaml(root, j);
  return root;
}

}  // namespace dpukit::mesh::config
