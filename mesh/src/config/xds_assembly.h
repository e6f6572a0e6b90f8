// The resources an ADS stream delivers (Listener, Cluster,
// RouteConfiguration, ClusterLoadAssignment, as proto-JSON) assembled with
// the bootstrap file into one bootstrap, checked by the same parser and
// cross-checks as a file. Resource by resource: a cluster whose Cluster and
// ClusterLoadAssignment are the ones of the last assembly, or a listener
// whose Listener is, is not parsed again, and a changed RouteConfiguration
// parses only the routes that changed (Envoy applies only the resources that
// changed; so does this, down to the data plane, which keeps an unchanged
// cluster's runtime by its revision).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "config/bootstrap.h"

namespace dpukit::mesh::config {

class At;

// One resource as delivered: proto-JSON without "@type". A
// RouteConfiguration may come read route by route: `json` without its
// virtual hosts' routes, and `routes` each virtual host's, each shared with
// the last response's where its bytes are the same (xds/xds_client.h).
struct XdsResourceValue {
  nlohmann::json json;
  using Routes = std::vector<std::vector<std::shared_ptr<const nlohmann::json>>>;
  std::optional<Routes> routes;
  nlohmann::json whole() const;  // with the routes put back
  bool operator==(const XdsResourceValue& other) const;
};
// Shared (by the xDS client's records and this assembly's parses): the same
// pointer is the same resource, which is how an unchanged one is known
// without comparing it.
using XdsResource = std::shared_ptr<const XdsResourceValue>;
XdsResource xds_resource(nlohmann::json json);  // a whole one
// The member `key` of a JSON object, or null when it has none or is not an
// object (the parser then reports the wrong shape with its path).
const nlohmann::json& json_member(const nlohmann::json& j, const char* key);

// The resources last accepted, per type URL, by name.
struct XdsResources {
  std::map<std::string, std::map<std::string, XdsResource>> by_type;
  const std::map<std::string, XdsResource>& of(std::string_view type_url) const;
};

// What an assembly needs and has.
struct XdsAssembly {
  Bootstrap bootstrap;  // the bootstrap file's static resources, then the dynamic ones; checked
  // Resources named but not (yet) delivered: EDS service names and RDS
  // route names (Envoy warms a cluster until its endpoints come, a listener
  // until its routes come); none missing: complete, it can be applied. In
  // the meantime a stand-in is parsed in its place (a load_assignment
  // without endpoints, a route_config without virtual hosts), so that a
  // fault is found as soon as the resource that has it arrives.
  std::set<std::string> missing_endpoints, missing_routes;
  // Clusters that routes name but CDS did not deliver: as in Envoy (RDS's
  // validate_clusters is false by default) the routes are taken and answer
  // 503; here a cluster without endpoints stands in for each.
  std::set<std::string> missing_clusters;
  // The names of the ClusterLoadAssignments and RouteConfigurations the
  // resources name, to subscribe to them.
  std::set<std::string> endpoint_names, route_names;
  size_t parsed = 0;         // dynamic clusters and listeners parsed by this assembly (the others were unchanged)
  size_t parsed_routes = 0;  // routes parsed (of changed RouteConfigurations: the routes that changed)
  bool complete() const { return missing_endpoints.empty() && missing_routes.empty(); }
};

class XdsAssembler {
 public:
  // `base`: the bootstrap file (static resources, dynamic_resources, node),
  // parsed once here. Throws ConfigError.
  explicit XdsAssembler(const YAML::Node& base);

  // The bootstrap of `resources`. A fault is a ConfigError whose text names
  // the resource and the path inside it ("Listener 'web': filter_chains[0]
  // .filters[0]...: reason"; "Cluster 'web': eds_cluster_config.eds_config:
  // ..." for what the assembly itself reads: an EDS or RDS config source
  // must be ADS). What was parsed is kept for the next call, whether or not
  // this one is refused.
  XdsAssembly assemble(const XdsResources& resources);

 private:
  struct ClusterParse {
    XdsResource cluster, endpoints;  // what it was parsed from (endpoints: EDS, or null)
    bool eds = false;
    std::string service;  // EDS: the ClusterLoadAssignment it takes
    Cluster parsed;
  };
  struct ListenerParse {
    XdsResource listener;
    // RDS: each filter chain's route configuration by name (parsed with a
    // stand-in in its place), where it is inside the listener, and its label.
    struct Rds {
      size_t chain;
      std::string route, where, label;
    };
    std::vector<Rds> rds;
    std::set<std::string> referenced;  // the clusters its inline routes and tcp_proxies name (RDS: RouteParse's)
    Listener parsed;
  };
  struct RouteParse {
    XdsResource resource;
    RouteConfiguration parsed;
    // Each virtual host's routes as parsed from, with the clusters each names.
    struct Part {
      std::shared_ptr<const nlohmann::json> route;
      std::vector<std::string> clusters;
    };
    std::vector<std::vector<Part>> parts;
  };
  // The parse of a delivered resource: the last one while it is unchanged
  // (a cluster: with its ClusterLoadAssignment), else a new one (counted in `parsed`).
  ClusterParse& cluster(const std::string& name, const XdsResource& resource, const XdsResources& r, size_t& parsed);
  ListenerParse& listener(const std::string& name, const XdsResource& resource, size_t& parsed);
  // A changed one parses only the routes that are not those at the same place in its last parse.
  RouteParse& route_config(const std::string& name, const XdsResource& resource, size_t& parsed_routes);
  // What names each place of an assembly in a fault of the whole (only
  // built for one: at 10,000 clusters they are 30,000 strings).
  std::vector<std::pair<std::string, std::string>> labels(const XdsResources& r, const XdsAssembly& a) const;

  Bootstrap base_;
  std::map<std::string, ClusterParse> clusters_;
  std::map<std::string, ListenerParse> listeners_;
  std::map<std::string, RouteParse> routes_;
};

// The bootstrap parser's pieces that an assembly runs one by one (defined in
// bootstrap.cc): a cluster, a listener, and the checks of the whole
// (cross-references, names, secrets' sources, dynamic_resources).
Cluster parse_cluster_resource(const At& at);
Listener parse_listener_resource(const At& at);
RouteConfiguration parse_route_config_resource(const At& at);
Route parse_route_resource(const At& at);
void check_bootstrap(Bootstrap& b);

}  // namespace dpukit::mesh::config
