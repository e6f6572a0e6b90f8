// The assembly of ADS resources into a bootstrap, resource by resource.
#include "config/xds_assembly.h"

#include <atomic>

#include "config/checked_yaml.h"
#include "config/xds_config.h"

namespace dpukit::mesh::config {
namespace {

using json = nlohmann::json;
using Labels = std::vector<std::pair<std::string, std::string>>;  // (path prefix, what a fault there is called)

constexpr std::string_view kHcmName = "envoy.filters.network.http_connection_manager";
constexpr std::string_view kTcpProxyName = "envoy.filters.network.tcp_proxy";

std::atomic<uint64_t> next_revision{1};

std::string quoted(std::string_view kind, const std::string& name) { return std::string(kind) + " '" + name + "'"; }
std::string stand_in_label(const std::string& name) { return quoted("Cluster", name) + " (named by a route, not delivered)"; }

void add_name(const json& j, std::set<std::string>& out) {
  if (j.is_string()) out.insert(j.get<std::string>());
}

void add_weighted(const json& weighted, std::set<std::string>& out) {
  const json& clusters = json_member(weighted, "clusters");
  if (clusters.is_array())
    for (const json& c : clusters) add_name(json_member(c, "name"), out);
}

// The clusters a route names.
void route_clusters(const json& route, std::set<std::string>& out) {
  add_name(json_member(json_member(route, "route"), "cluster"), out);
  add_weighted(json_member(json_member(route, "route"), "weighted_clusters"), out);
}

// The clusters a route configuration names.
void route_references(const json& route_config, std::set<std::string>& out) {
  const json& vhosts = json_member(route_config, "virtual_hosts");
  if (!vhosts.is_array()) return;
  for (const json& vh : vhosts) {
    const json& routes = json_member(vh, "routes");
    if (!routes.is_array()) continue;
    for (const json& r : routes) route_clusters(r, out);
  }
}

// The clusters an HCM's inline route configuration or a tcp_proxy names.
void cluster_references(const json& typed_config, std::set<std::string>& out) {
  add_name(json_member(typed_config, "cluster"), out);  // tcp_proxy
  add_weighted(json_member(typed_config, "weighted_clusters"), out);
  route_references(json_member(typed_config, "route_config"), out);
}

// A route configuration read whole, apart as one read route by route is: its
// virtual hosts' routes (those that are a list: anything else stays, for
// the parser to refuse) taken out.
XdsResourceValue routes_apart(const json& route_config) {
  XdsResourceValue out;
  out.routes.emplace();
  out.json = json::object();
  for (const auto& [key, value] : route_config.items()) {
    if (key != "virtual_hosts" || !value.is_array()) {
      out.json[key] = value;
      continue;
    }
    json& vhosts = out.json[key] = json::array();
    for (const json& vh : value) {
      out.routes->emplace_back();
      if (!vh.is_object() || !json_member(vh, "routes").is_array()) {
        vhosts.push_back(vh);
        continue;
      }
      json bare = json::object();
      for (const auto& [k, v] : vh.items())
        if (k != "routes") bare[k] = v;
      vhosts.push_back(std::move(bare));
      for (const json& route : vh["routes"]) out.routes->back().push_back(std::make_shared<const json>(route));
    }
  }
  return out;
}

// Erases the entries of `parses` whose name is not in `delivered`: both are
// sorted by name, so one walk over both (at 10,000 clusters a lookup each was 5 % of an update).
template <typename Parses>
void forget_missing(Parses& parses, const std::map<std::string, XdsResource>& delivered) {
  auto d = delivered.begin();
  for (auto p = parses.begin(); p != parses.end();) {
    while (d != delivered.end() && d->first < p->first) ++d;
    if (d != delivered.end() && d->first == p->first) {
      ++p;
    } else {
      p = parses.erase(p);
    }
  }
}

// `e` again, named by the longest label whose path is where the fault is or
// contains it ("Listener 'web': filter_chains[0]...: reason"); unchanged when none is.
[[noreturn]] void relabel(const ConfigError& e, const Labels& labels) {
  const std::string& path = e.path();
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& label : labels) {
    const std::string& prefix = label.first;
    const bool inside = path == prefix || (path.starts_with(prefix) && (path[prefix.size()] == '.' || path[prefix.size()] == '['));
    if (inside && (!best || prefix.size() > best->first.size())) best = &label;
  }
  if (!best) throw e;
  const std::string what = e.what();
  const std::string head = e.line() > 0 ? path + " (line " + std::to_string(e.line()) + "): " : path + ": ";
  const std::string reason = what.starts_with(head) ? what.substr(head.size()) : what;
  std::string rest = path.substr(best->first.size());
  if (!rest.empty() && rest[0] == '.') rest.erase(0, 1);
  throw ConfigError(rest.empty() ? best->second : best->second + ": " + rest, reason);
}

// A resource parsed at the path `label` (so what its parse keeps, a secret's
// path say, names it wherever it lands), its faults named by `labels`.
template <typename Parse>
auto parse_labelled(const json& resource, const std::string& label, const Labels& labels, Parse parse) {
  try {
    return parse(At(yaml_from_json(resource), label, 0));
  } catch (const ConfigError& e) {
    relabel(e, labels);
  }
}

}  // namespace

const std::map<std::string, XdsResource>& XdsResources::of(std::string_view type_url) const {
  static const std::map<std::string, XdsResource> kNone;
  auto it = by_type.find(std::string(type_url));
  return it == by_type.end() ? kNone : it->second;
}

nlohmann::json XdsResourceValue::whole() const {
  if (!routes) return json;
  nlohmann::json out = json;
  nlohmann::json& vhosts = out["virtual_hosts"];
  for (std::size_t v = 0; v < routes->size() && vhosts.is_array() && v < vhosts.size(); ++v) {
    if ((*routes)[v].empty()) continue;
    nlohmann::json& list = vhosts[v]["routes"] = nlohmann::json::array();
    for (const auto& route : (*routes)[v]) list.push_back(*route);
  }
  return out;
}

bool XdsResourceValue::operator==(const XdsResourceValue& other) const {
  if (!routes || !other.routes) return whole() == other.whole();
  if (json != other.json || routes->size() != other.routes->size()) return false;
  for (std::size_t v = 0; v < routes->size(); ++v) {
    const auto &a = (*routes)[v], &b = (*other.routes)[v];
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && *a[i] != *b[i]) return false;
  }
  return true;
}

const json& json_member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

XdsResource xds_resource(json j) {
  auto v = std::make_shared<XdsResourceValue>();
  v->json = std::move(j);
  return v;
}

XdsAssembler::XdsAssembler(const YAML::Node& base) : base_(parse_bootstrap_node(base)) {}

XdsAssembler::ClusterParse& XdsAssembler::cluster(const std::string& name, const XdsResource& resource,
                                                  const XdsResources& r, size_t& parsed) {
  const auto& endpoints = r.of(kEndpointType);
  const auto endpoints_of = [&](const std::string& service) {
    auto it = endpoints.find(service);
    return it == endpoints.end() ? XdsResource() : it->second;
  };
  ClusterParse& p = clusters_[name];
  if (p.cluster == resource && (!p.eds || p.endpoints == endpoints_of(p.service))) return p;
  const std::string label = quoted("Cluster", name);
  ClusterParse next;
  next.cluster = resource;
  json c = resource->json;
  Labels labels{{label, label}};
  if (json_member(c, "type") == "EDS") {
    // EDS: the endpoints come as a ClusterLoadAssignment named by
    // service_name (default: the cluster's name); it becomes load_assignment.
    const Fields eds = At(yaml_from_json(json_member(c, "eds_cluster_config")), label + ": eds_cluster_config", 0)
                           .fields("envoy.config.cluster.v3.Cluster.EdsClusterConfig", {"eds_config", "service_name"});
    parse_ads_source(eds.required("eds_config"));
    next.eds = true;
    next.service = eds.has("service_name") ? eds["service_name"].nonempty_str() : name;
    next.endpoints = endpoints_of(next.service);
    c.erase("type");
    c.erase("eds_cluster_config");
    c["load_assignment"] = next.endpoints ? next.endpoints->json : json{{"cluster_name", next.service}};
    labels.emplace_back(label + ".load_assignment", quoted("ClusterLoadAssignment", next.service));
  }
  next.parsed = parse_labelled(c, label, labels, parse_cluster_resource);
  next.parsed.revision = next_revision++;
  ++parsed;
  p = std::move(next);
  return p;
}

XdsAssembler::ListenerParse& XdsAssembler::listener(const std::string& name, const XdsResource& resource,
                                                    size_t& parsed) {
  ListenerParse& p = listeners_[name];
  if (p.listener == resource) return p;
  const std::string label = quoted("Listener", name);
  ListenerParse next;
  next.listener = resource;
  json l = resource->json;
  Labels labels{{label, label}};
  json& chains = l["filter_chains"];
  for (std::size_t ci = 0; chains.is_array() && ci < chains.size(); ++ci) {
    json& filters = chains[ci]["filters"];
    for (std::size_t fi = 0; filters.is_array() && fi < filters.size(); ++fi) {
      json& filter = filters[fi];
      if (!filter.is_object() || !filter["typed_config"].is_object()) continue;
      json& tc = filter["typed_config"];
      const std::string where = "filter_chains[" + std::to_string(ci) + "].filters[" + std::to_string(fi) + "].typed_config";
      if (json_member(filter, "name") == kHcmName && tc.contains("rds")) {
        // RDS: a stand-in where the HCM names its route configuration, which
        // is parsed apart (route_config) and put in its place.
        const Fields rds = At(yaml_from_json(tc["rds"]), label + ": " + where + ".rds", 0)
                               .fields("envoy.extensions.filters.network.http_connection_manager.v3.Rds",
                                       {"config_source", "route_config_name"});
        parse_ads_source(rds.required("config_source"));
        const std::string route = rds.required("route_config_name").nonempty_str();
        if (tc.contains("route_config"))
          throw ConfigError(label + ": " + where, "rds and route_config both given (only one is allowed)");
        tc.erase("rds");
        tc["route_config"] = json{{"name", route}};
        next.rds.push_back({ci, route, where + ".route_config", quoted("RouteConfiguration", route)});
        labels.emplace_back(label + "." + next.rds.back().where, next.rds.back().label);
      }
      if (json_member(filter, "name") == kHcmName || json_member(filter, "name") == kTcpProxyName)
        cluster_references(tc, next.referenced);
    }
  }
  next.parsed = parse_labelled(l, label, labels, parse_listener_resource);
  ++parsed;
  p = std::move(next);
  return p;
}

XdsAssembler::RouteParse& XdsAssembler::route_config(const std::string& name, const XdsResource& resource,
                                                     size_t& parsed_routes) {
  RouteParse& p = routes_[name];
  if (p.resource == resource) return p;
  const std::string label = quoted("RouteConfiguration", name);
  const Labels labels{{label, label}};
  // Apart: the skeleton parsed as a whole, each route by itself.
  std::optional<XdsResourceValue> taken_apart;
  if (!resource->routes) taken_apart = routes_apart(resource->json);
  const XdsResourceValue& apart = taken_apart ? *taken_apart : *resource;
  RouteParse next;
  next.resource = resource;
  next.parsed = parse_labelled(apart.json, label, labels, parse_route_config_resource);
  // Each route: the one at the same place in the last parse where it is the
  // same, else parsed at its own path (so a fault names where it is).
  for (std::size_t v = 0; v < next.parsed.virtual_hosts.size(); ++v) {
    next.parts.emplace_back();
    if (v >= apart.routes->size()) continue;
    const auto& routes = (*apart.routes)[v];
    const std::vector<RouteParse::Part>* old = v < p.parts.size() ? &p.parts[v] : nullptr;
    const std::vector<Route>* old_parsed = v < p.parsed.virtual_hosts.size() ? &p.parsed.virtual_hosts[v].routes : nullptr;
    std::vector<Route>& out = next.parsed.virtual_hosts[v].routes;
    out.reserve(routes.size());
    next.parts.back().reserve(routes.size());
    for (std::size_t i = 0; i < routes.size(); ++i) {
      if (old && old_parsed && i < old->size() && i < old_parsed->size() &&
          ((*old)[i].route == routes[i] || *(*old)[i].route == *routes[i])) {
        out.push_back((*old_parsed)[i]);
        next.parts.back().push_back((*old)[i]);
        continue;
      }
      const std::string at = label + ".virtual_hosts[" + std::to_string(v) + "].routes[" + std::to_string(i) + "]";
      out.push_back(parse_labelled(*routes[i], at, labels, parse_route_resource));
      std::set<std::string> clusters;
      route_clusters(*routes[i], clusters);
      next.parts.back().push_back({routes[i], {clusters.begin(), clusters.end()}});
      ++parsed_routes;
    }
  }
  p = std::move(next);
  return p;
}

XdsAssembly XdsAssembler::assemble(const XdsResources& r) {
  const auto& clusters = r.of(kClusterType);
  const auto& endpoints = r.of(kEndpointType);
  const auto& listeners = r.of(kListenerType);
  const auto& routes = r.of(kRouteType);
  // What is no longer delivered is forgotten.
  forget_missing(clusters_, clusters);
  forget_missing(listeners_, listeners);
  forget_missing(routes_, routes);
  XdsAssembly a;
  Bootstrap& b = a.bootstrap;
  b = base_;
  b.clusters.reserve(base_.clusters.size() + clusters.size());
  b.listeners.reserve(base_.listeners.size() + listeners.size());
  for (const auto& [name, resource] : clusters) {
    const ClusterParse& p = cluster(name, resource, r, a.parsed);
    if (p.eds) {
      a.endpoint_names.insert(p.service);
      if (!endpoints.contains(p.service)) a.missing_endpoints.insert(p.service);
    }
    b.clusters.push_back(p.parsed);
  }
  std::set<std::string> referenced;
  for (const auto& [name, resource] : listeners) {
    const ListenerParse& p = listener(name, resource, a.parsed);
    b.listeners.push_back(p.parsed);
    referenced.insert(p.referenced.begin(), p.referenced.end());
    for (const ListenerParse::Rds& rds : p.rds) {
      a.route_names.insert(rds.route);
      auto delivered = routes.find(rds.route);
      if (delivered == routes.end()) {
        a.missing_routes.insert(rds.route);  // the stand-in stays
        continue;
      }
      const RouteParse& rc = route_config(rds.route, delivered->second, a.parsed_routes);
      for (const auto& vhost : rc.parts)
        for (const RouteParse::Part& part : vhost)
          for (const std::string& cluster : part.clusters)
            if (!clusters.contains(cluster)) referenced.insert(cluster);  // a stand-in, unless static
      for (NetworkFilter& f : b.listeners.back().filter_chains.at(rds.chain).filters)
        if (f.hcm) f.hcm->route_config = rc.parsed;
    }
  }
  // Routes to clusters not delivered: a cluster without endpoints stands in,
  // so the route answers 503 as Envoy's does (cluster not found).
  const auto is_static = [&](const std::string& name) {
    for (const Cluster& c : base_.clusters)
      if (c.name == name) return true;
    return false;
  };
  for (const std::string& name : referenced) {
    if (clusters.contains(name) || is_static(name)) continue;
    a.missing_clusters.insert(name);
    const std::string label = stand_in_label(name);
    b.clusters.push_back(parse_labelled(json{{"name", name}}, label, {{label, label}}, parse_cluster_resource));
  }
  try {
    check_bootstrap(b);
  } catch (const ConfigError& e) {
    relabel(e, labels(r, a));
  }
  return a;
}

std::vector<std::pair<std::string, std::string>> XdsAssembler::labels(const XdsResources& r, const XdsAssembly& a) const {
  // The cross-checks name a resource by its place in the bootstrap; what a
  // resource's parse keeps (a secret's path) by its label.
  Labels out;
  size_t index = base_.clusters.size();
  for (const auto& [name, resource] : r.of(kClusterType)) {
    const std::string at = "static_resources.clusters[" + std::to_string(index++) + "]", label = quoted("Cluster", name);
    if (auto p = clusters_.find(name); p != clusters_.end() && p->second.eds)
      out.emplace_back(at + ".load_assignment", quoted("ClusterLoadAssignment", p->second.service));
    out.emplace_back(at, label);
    out.emplace_back(label, label);
  }
  for (const std::string& name : a.missing_clusters)
    out.emplace_back("static_resources.clusters[" + std::to_string(index++) + "]", stand_in_label(name));
  index = base_.listeners.size();
  for (const auto& [name, resource] : r.of(kListenerType)) {
    const std::string at = "static_resources.listeners[" + std::to_string(index++) + "]", label = quoted("Listener", name);
    if (auto p = listeners_.find(name); p != listeners_.end())
      for (const ListenerParse::Rds& rds : p->second.rds) {
        out.emplace_back(at + "." + rds.where, rds.label);
        out.emplace_back(label + "." + rds.where, rds.label);
      }
    out.emplace_back(at, label);
    out.emplace_back(label, label);
  }
  return out;
}

}  // namespace dpukit::mesh::config
