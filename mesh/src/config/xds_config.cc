// dynamic_resources, and the assembly of ADS resources into a bootstrap that
// the bootstrap parser checks as it checks a file.
#include "config/xds_config.h"

#include <algorithm>

#include "config/bootstrap.h"
#include "config/checked_yaml.h"

namespace dpukit::mesh::config {
namespace {

using json = nlohmann::json;

constexpr std::string_view kHcmName = "envoy.filters.network.http_connection_manager";
constexpr std::string_view kTcpProxyName = "envoy.filters.network.tcp_proxy";

// A ConfigSource that is the ADS stream: {ads: {}} (resource_api_version V3
// if given); its initial_fetch_timeout into `timeout` where one is taken
// (lds_config, cds_config).
void parse_ads_source(const At& at, std::chrono::milliseconds* timeout = nullptr) {
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

std::string quoted(std::string_view kind, const std::string& name) { return std::string(kind) + " '" + name + "'"; }

// The members of a JSON object or array, or nothing when it is not one (the
// parser reports the wrong shape with its path).
const json& member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

void add_name(const json& j, std::set<std::string>& out) {
  if (j.is_string()) out.insert(j.get<std::string>());
}

void add_weighted(const json& weighted, std::set<std::string>& out) {
  const json& clusters = member(weighted, "clusters");
  if (clusters.is_array())
    for (const json& c : clusters) add_name(member(c, "name"), out);
}

// The clusters an HCM's route configuration or a tcp_proxy names.
void cluster_references(const json& typed_config, std::set<std::string>& out) {
  add_name(member(typed_config, "cluster"), out);  // tcp_proxy
  add_weighted(member(typed_config, "weighted_clusters"), out);
  const json& vhosts = member(member(typed_config, "route_config"), "virtual_hosts");
  if (!vhosts.is_array()) return;
  for (const json& vh : vhosts) {
    const json& routes = member(vh, "routes");
    if (!routes.is_array()) continue;
    for (const json& r : routes) {
      add_name(member(member(r, "route"), "cluster"), out);
      add_weighted(member(member(r, "route"), "weighted_clusters"), out);
    }
  }
}

YAML::Node sequence(YAML::Node parent, const char* key) {
  if (!parent[key] || parent[key].IsNull()) parent[key] = YAML::Node(YAML::NodeType::Sequence);
  return parent[key];
}

}  // namespace

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

const std::map<std::string, json>& XdsResources::of(std::string_view type_url) const {
  static const std::map<std::string, json> kNone;
  auto it = by_type.find(std::string(type_url));
  return it == by_type.end() ? kNone : it->second;
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

XdsAssembly assemble_xds(const YAML::Node& base, const XdsResources& r) {
  XdsAssembly a;
  a.bootstrap = YAML::Clone(base);
  YAML::Node sr = a.bootstrap["static_resources"];
  if (!sr || sr.IsNull()) a.bootstrap["static_resources"] = sr = YAML::Node(YAML::NodeType::Map);
  YAML::Node listeners = sequence(sr, "listeners");
  YAML::Node clusters = sequence(sr, "clusters");
  std::set<std::string> known_clusters;
  for (const auto& c : clusters)
    if (c.IsMap() && c["name"] && c["name"].IsScalar()) known_clusters.insert(c["name"].Scalar());

  const auto& endpoints = r.of(kEndpointType);
  for (const auto& [name, resource] : r.of(kClusterType)) {
    const std::string label = quoted("Cluster", name);
    const std::string at = "static_resources.clusters[" + std::to_string(clusters.size()) + "]";
    json c = resource;
    if (member(c, "type") == "EDS") {
      // EDS: the endpoints come as a ClusterLoadAssignment named by
      // service_name (default: the cluster's name); it becomes load_assignment.
      const Fields eds = At(yaml_from_json(member(c, "eds_cluster_config")), label + ": eds_cluster_config", 0)
                             .fields("envoy.config.cluster.v3.Cluster.EdsClusterConfig", {"eds_config", "service_name"});
      parse_ads_source(eds.required("eds_config"));
      const std::string service = eds.has("service_name") ? eds["service_name"].nonempty_str() : name;
      a.endpoint_names.insert(service);
      c.erase("type");
      c.erase("eds_cluster_config");
      if (auto it = endpoints.find(service); it != endpoints.end()) {
        c["load_assignment"] = it->second;
      } else {
        a.missing_endpoints.insert(service);
        c["load_assignment"] = {{"cluster_name", service}};
      }
      a.labels.emplace_back(at + ".load_assignment", quoted("ClusterLoadAssignment", service));
    }
    a.labels.emplace_back(at, label);
    clusters.push_back(yaml_from_json(c));
    known_clusters.insert(name);
  }

  const auto& routes = r.of(kRouteType);
  std::set<std::string> referenced;
  for (const auto& [name, resource] : r.of(kListenerType)) {
    const std::string label = quoted("Listener", name);
    const std::string at = "static_resources.listeners[" + std::to_string(listeners.size()) + "]";
    json l = resource;
    json& chains = l["filter_chains"];
    for (std::size_t ci = 0; chains.is_array() && ci < chains.size(); ++ci) {
      json& filters = chains[ci]["filters"];
      for (std::size_t fi = 0; filters.is_array() && fi < filters.size(); ++fi) {
        json& filter = filters[fi];
        if (!filter.is_object() || !filter["typed_config"].is_object()) continue;
        json& tc = filter["typed_config"];
        const std::string where = "filter_chains[" + std::to_string(ci) + "].filters[" + std::to_string(fi) + "].typed_config";
        if (member(filter, "name") == kHcmName && tc.contains("rds")) {
          // RDS: the route configuration is inlined where the HCM names it.
          const Fields rds = At(yaml_from_json(tc["rds"]), label + ": " + where + ".rds", 0)
                                 .fields("envoy.extensions.filters.network.http_connection_manager.v3.Rds",
                                         {"config_source", "route_config_name"});
          parse_ads_source(rds.required("config_source"));
          const std::string route = rds.required("route_config_name").nonempty_str();
          a.route_names.insert(route);
          if (tc.contains("route_config"))
            throw ConfigError(label + ": " + where, "rds and route_config both given (only one is allowed)");
          tc.erase("rds");
          if (auto it = routes.find(route); it != routes.end()) {
            tc["route_config"] = it->second;
          } else {
            a.missing_routes.insert(route);
            tc["route_config"] = {{"name", route}};
          }
          a.labels.emplace_back(at + "." + where + ".route_config", quoted("RouteConfiguration", route));
        }
        if (member(filter, "name") == kHcmName || member(filter, "name") == kTcpProxyName)
          cluster_references(tc, referenced);
      }
    }
    a.labels.emplace_back(at, label);
    listeners.push_back(yaml_from_json(l));
  }
  // Routes to clusters not delivered: a cluster without endpoints stands in,
  // so the route answers 503 as Envoy's does (cluster not found).
  for (const std::string& name : referenced) {
    if (known_clusters.contains(name)) continue;
    a.missing_clusters.insert(name);
    a.labels.emplace_back("static_resources.clusters[" + std::to_string(clusters.size()) + "]",
                          quoted("Cluster", name) + " (named by a route, not delivered)");
    clusters.push_back(yaml_from_json({{"name", name}}));
  }
  return a;
}

Bootstrap parse_xds_assembly(const XdsAssembly& a) {
  try {
    return parse_bootstrap_node(a.bootstrap);
  } catch (const ConfigError& e) {
    // The longest label whose path is where the fault is, or contains it.
    const std::string& path = e.path();
    const std::pair<std::string, std::string>* best = nullptr;
    for (const auto& label : a.labels) {
      const std::string& prefix = label.first;
      const bool inside = path == prefix || (path.starts_with(prefix) && (path[prefix.size()] == '.' || path[prefix.size()] == '['));
      if (inside && (!best || prefix.size() > best->first.size())) best = &label;
    }
    if (!best) throw;
    const std::string what = e.what();
    const std::string head = e.line() > 0 ? path + " (line " + std::to_string(e.line()) + "): " : path + ": ";
    const std::string reason = what.starts_with(head) ? what.substr(head.size()) : what;
    std::string rest = path.substr(best->first.size());
    if (!rest.empty() && rest[0] == '.') rest.erase(0, 1);
    throw ConfigError(rest.empty() ? best->second : best->second + ": " + rest, reason);
  }
}

}  // namespace dpukit::mesh::config
