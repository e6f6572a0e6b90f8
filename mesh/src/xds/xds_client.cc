#include "xds/xds_client.h"

#include <chrono>
#include <ctime>
#include <utility>

#include "config/checked_yaml.h"
#include "dpukit/core/log.h"
#include "xds/xds_messages.h"

namespace dpukit::mesh::xds {
namespace {

using json = nlohmann::json;
using config::kClusterType;
using config::kEndpointType;
using config::kListenerType;
using config::kRouteType;

constexpr int kGrpcInternal = 13;  // google.rpc.Code INTERNAL, as Envoy's NACKs carry

std::string now_rfc3339() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];  // room for any int the compiler cannot bound
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ms));
  return buf;
}

// This thread's CPU time (ns): what the checks of a response cost.
int64_t thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The name a resource is known by: ClusterLoadAssignment's is cluster_name.
std::string resource_name(const std::string& type, const json& resource) {
  const json& name = resource.value(type == kEndpointType ? "cluster_name" : "name", json());
  return name.is_string() ? name.get<std::string>() : "";
}


std::string short_type(const std::string& type) {
  if (type == kListenerType) return "LDS";
  if (type == kClusterType) return "CDS";
  if (type == kRouteType) return "RDS";
  if (type == kEndpointType) return "EDS";
  if (type == kSecretType) return "SDS";
  return type;
}

}  // namespace

std::map<std::string, config::Secret> read_secrets(const json& resources, bool delta) {
  std::map<std::string, config::Secret> out;
  for (std::size_t i = 0; i < resources.size(); ++i) {
    const json& resource = delta ? resources[i].value("resource", json()) : resources[i];
    std::string at = "resources[" + std::to_string(i) + "]";
    if (resource.is_object() && resource.value("name", json()).is_string())
      at += " (Secret '" + resource["name"].get<std::string>() + "')";
    if (resource.value("@type", "") != kSecretType)
      throw config::ConfigError(at, "a " + resource.value("@type", "resource without @type") + " in a Secret response");
    config::Secret secret = config::parse_secret(config::At(config::yaml_from_json(resource), at, 0));
    if (delta && resources[i].value("name", "") != secret.name)
      throw config::ConfigError(at + ".name", "'" + resources[i].value("name", "") + "' but the resource is named '" +
                                                  secret.name + "'");
    const std::string name = secret.name;
    if (!out.emplace(name, std::move(secret)).second) throw config::ConfigError(at, "duplicate secret '" + name + "'");
  }
  return out;
}

DeliveredResource read_resource(json element, bool delta, std::optional<config::XdsResourceValue::Routes> routes) {
  DeliveredResource d;
  json resource;
  if (delta) {
    d.name = config::json_member(element, "name").is_string() ? config::json_member(element, "name").get<std::string>() : "";
    d.version = config::json_member(element, "version").is_string() ? config::json_member(element, "version").get<std::string>() : "";
    if (element.is_object() && element.contains("resource")) resource = std::move(element["resource"]);
  } else {
    resource = std::move(element);
  }
  if (config::json_member(resource, "@type").is_string()) {
    d.type_url = resource["@type"].get<std::string>();
    resource.erase("@type");
  }
  auto value = std::make_shared<config::XdsResourceValue>();
  value->json = std::move(resource);
  value->routes = std::move(routes);
  d.resource = std::move(value);
  return d;
}

namespace {

// A RouteConfiguration resource (an Any; delta: a Resource around one)
// without its virtual hosts' routes, and those routes' bytes; the element
// as it is when it holds something else (its type is refused later).
struct RouteSplit {
  std::string element;
  std::vector<std::vector<std::string>> routes;
  bool split = false;
};

RouteSplit split_routes(const Messages& m, const std::string& element, bool delta) {
  constexpr const char* kAny = "google.protobuf.Any";
  constexpr const char* kResource = "envoy.service.discovery.v3.Resource";
  constexpr const char* kRouteConfiguration = "envoy.config.route.v3.RouteConfiguration";
  constexpr const char* kVirtualHost = "envoy.config.route.v3.VirtualHost";
  RouteSplit out{element, {}, false};
  Messages::Split resource;
  if (delta) {
    resource = m.split(kResource, element, "resource");
    if (resource.items.size() != 1) return out;
  }
  const std::string any(delta ? resource.items[0] : std::string_view(element));
  if (const auto url = m.split(kAny, any, "type_url").items; url.size() != 1 || url[0] != kRouteType) return out;
  const Messages::Split value = m.split(kAny, any, "value");
  if (value.items.size() != 1) return out;
  const std::string route_config(value.items[0]);
  const Messages::Split vhosts = m.split(kRouteConfiguration, route_config, "virtual_hosts");
  std::string bare = vhosts.rest;
  const int vhosts_number = m.field_number(kRouteConfiguration, "virtual_hosts");
  for (std::string_view vhost_bytes : vhosts.items) {
    const std::string vhost(vhost_bytes);
    const Messages::Split routes = m.split(kVirtualHost, vhost, "routes");
    bare += length_delimited(vhosts_number, routes.rest);
    out.routes.emplace_back(routes.items.begin(), routes.items.end());
  }
  std::string any_bare = value.rest + length_delimited(m.field_number(kAny, "value"), bare);
  out.element = delta ? resource.rest + length_delimited(m.field_number(kResource, "resource"), any_bare) : std::move(any_bare);
  out.split = true;
  return out;
}

}  // namespace

AdsClient::AdsClient(YAML::Node base, const config::Bootstrap& bootstrap, Apply apply, ApplySecrets apply_secrets)
    : node_(bootstrap.node),
      dynamic_(*bootstrap.dynamic_resources),
      apply_(std::move(apply)),
      apply_secrets_(std::move(apply_secrets)),
      assembler_(std::make_unique<config::XdsAssembler>(base)) {
  // The ADS connection's HTTP/2 PINGs: the ADS cluster's connection_keepalive, else these.
  config::Http2ProtocolOptions::Keepalive keepalive{std::chrono::seconds(30), std::chrono::seconds(10)};
  std::string target;
  for (const config::Cluster& c : bootstrap.clusters)
    if (c.name == dynamic_.ads_cluster) {
      target = grpc_target(c);
      if (const auto& k = c.http2_protocol_options.connection_keepalive) keepalive = *k;
    }
  // The secrets the bootstrap file takes from ads are asked for from the start.
  if (auto names = config::pushed_secret_names(bootstrap); names.contains("ads")) {
    TypeState& st = types_[std::string(kSecretType)];
    st.names = names["ads"];
    st.requested = true;
  }
  messages();  // the descriptor pool loads now: a broken build fails at start, not on the first response
  stream_ = std::make_unique<XdsStream>(
      "ADS", target, keepalive, dynamic_.delta ? kDeltaAdsMethod : kAdsMethod,
      XdsStream::Handlers{[this] { return stream_->write(on_stream_start()); },
                          [this](const std::string& bytes) { return on_message(bytes); }});
}

AdsClient::~AdsClient() { stop(); }

json AdsClient::request(const std::string& type, const std::string& error) const {
  const TypeState& st = types_.at(type);
  json r = {{"node", request_node(node_)},
            {"type_url", type},
            {"response_nonce", st.nonce}};
  if (!dynamic_.delta) {  // delta: an ACK is the nonce alone
    r["version_info"] = st.version;
    r["resource_names"] = st.names;
  }
  if (!error.empty()) r["error_detail"] = {{"code", kGrpcInternal}, {"message", error}};
  return r;
}

json AdsClient::subscribe(const std::string& type, const std::set<std::string>& before) const {
  if (!dynamic_.delta) return request(type);
  json r = request(type);
  r.erase("response_nonce");
  const std::set<std::string>& now = types_.at(type).names;
  json add = json::array(), remove = json::array();
  for (const std::string& name : now)
    if (!before.contains(name)) add.push_back(name);
  for (const std::string& name : before)
    if (!now.contains(name)) remove.push_back(name);
  r["resource_names_subscribe"] = add;
  r["resource_names_unsubscribe"] = remove;
  return r;
}

std::vector<json> AdsClient::on_stream_start() {
  // Clusters first: Envoy warms them before it takes listeners. On a later
  // stream every subscription is renewed with the versions accepted, so an
  // unchanged control plane has nothing to send.
  if (dynamic_.cds) types_[std::string(kClusterType)].requested = true;
  else if (dynamic_.lds) types_[std::string(kListenerType)].requested = true;
  std::vector<json> out;
  for (std::string_view type : {kClusterType, kEndpointType, kListenerType, kRouteType, kSecretType}) {
    auto it = types_.find(std::string(type));
    if (it == types_.end() || !it->second.requested) continue;
    it->second.nonce.clear();
    json r = subscribe(it->first, {});
    if (dynamic_.delta) {
      // Delta: no names is the wildcard (LDS, CDS); what is held is said with its versions.
      json versions = json::object();
      std::lock_guard lock(mu_);
      for (const auto& [name, record] : records_of(records_, it->first)) versions[name] = record.version;
      r["initial_resource_versions"] = versions;
    }
    out.push_back(r);
  }
  return out;
}

std::vector<json> AdsClient::on_unreadable(const json& envelope, const std::string& why) {
  const std::string type = envelope.value("type_url", "");
  TypeState& st = types_[type];
  st.nonce = envelope.value("nonce", "");
  return {nack(type, envelope.value(dynamic_.delta ? "system_version_info" : "version_info", ""), why)};
}

json AdsClient::nack(const std::string& type, const std::string& version, const std::string& why) {
  ++nacks_;
  log_warn("mesh xDS: " + short_type(type) + " version " + version + " rejected (NACK), keeping the last good: " + why);
  return request(type, why);
}

std::vector<json> AdsClient::on_response(const json& response) {
  if (response.value("type_url", "") == kSecretType && apply_secrets_) {
    types_[std::string(kSecretType)].nonce = response.value("nonce", "");
    return on_secrets(response, response.value(dynamic_.delta ? "system_version_info" : "version_info", ""));
  }
  std::vector<DeliveredResource> resources;
  for (const json& element : response.value("resources", json::array()))
    resources.push_back(read_resource(element, dynamic_.delta));
  return on_resources(response, resources);
}

std::vector<json> AdsClient::on_resources(const json& response, const std::vector<DeliveredResource>& resources) {
  const std::string type = response.value("type_url", "");
  const std::string version = response.value(dynamic_.delta ? "system_version_info" : "version_info", "");
  TypeState& st = types_[type];
  st.nonce = response.value("nonce", "");
  std::vector<json> out;
  const auto nack = [&](const std::string& why) {
    out.push_back(this->nack(type, version, why));
    return out;
  };
  if (type != kListenerType && type != kClusterType && type != kRouteType && type != kEndpointType)
    return nack("type " + type + " is not supported by dpukit-mesh (LDS, CDS, RDS, EDS and SDS are)");

  // The new set of this type: state of the world replaces the last one;
  // delta changes and removes resources of it by name.
  const std::map<std::string, config::XdsResource>& accepted = accepted_.of(type);
  std::map<std::string, config::XdsResource> set = dynamic_.delta ? accepted : std::map<std::string, config::XdsResource>();
  std::map<std::string, std::string> versions;  // delta: each resource's own version
  std::set<std::string> seen;
  for (std::size_t i = 0; i < resources.size(); ++i) {
    const std::string at = "resources[" + std::to_string(i) + "]";
    const DeliveredResource& d = resources[i];
    if (d.type_url != type)
      return nack(at + ": a " + (d.type_url.empty() ? std::string("resource without @type") : d.type_url) + " in a " +
                  type + " response");
    const std::string name = resource_name(type, d.resource->json);
    if (name.empty()) return nack(at + ": the resource has no name");
    if (!seen.insert(name).second) return nack(at + ": duplicate resource name '" + name + "'");
    if (dynamic_.delta) {
      if (d.name != name) return nack(at + ".name: '" + d.name + "' but the resource is named '" + name + "'");
      versions[name] = d.version;
    }
    // A resource equal to the one accepted is that one (the assembly knows it unchanged by its pointer).
    auto it = accepted.find(name);
    set[name] = it != accepted.end() && (it->second == d.resource || *it->second == *d.resource) ? it->second : d.resource;
  }
  for (const json& removed : response.value("removed_resources", json::array()))
    if (removed.is_string()) set.erase(removed.get<std::string>());
  // A control plane resends every type of a new snapshot: a set equal to the
  // one accepted changes nothing (no assembly, no parse, no install).
  if (st.received && set == accepted) {
    ++acks_;
    st.version = version;
    {
      std::lock_guard lock(mu_);
      if (active_versions_.contains(type)) active_versions_[type] = version;
    }
    out.push_back(request(type));
    return out;
  }
  // The set is tried in place (the other types are not copied), and put back
  // when it is refused.
  std::map<std::string, config::XdsResource>& slot = accepted_.by_type[type];
  std::map<std::string, config::XdsResource> previous = std::exchange(slot, std::move(set));
  const auto refuse = [&](const std::string& why) {
    slot = std::move(previous);
    return nack(why);
  };
  const auto t0 = thread_cpu();
  config::XdsAssembly assembly;
  try {
    assembly = assembler_->assemble(accepted_);
  } catch (const config::ConfigError& e) {
    return refuse(e.what());
  }
  config::Bootstrap& bootstrap = assembly.bootstrap;
  const auto t1 = thread_cpu();
  std::set<std::string> secret_names = config::pushed_secret_names(bootstrap)["ads"];
  const auto install_start = std::chrono::steady_clock::now();
  // Listeners wait for the clusters (and everything waits for what it names).
  const bool have_all = (!dynamic_.cds || types_[std::string(kClusterType)].received || type == kClusterType) &&
                        (!dynamic_.lds || types_[std::string(kListenerType)].received || type == kListenerType);
  const bool apply = assembly.complete() && have_all;
  if (apply) {
    if (std::string error = apply_(std::move(bootstrap)); !error.empty()) return refuse(error);
  }
  const auto install_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - install_start).count();

  // Accepted.
  ++acks_;
  st.version = version;
  st.received = true;
  {
    std::lock_guard lock(mu_);
    if (apply) stand_ins_ = assembly.missing_clusters;
    const Records& records = records_of(records_, type);
    Records next;
    const std::string now = now_rfc3339();
    for (const auto& [name, resource] : slot) {
      auto it = records.find(name);
      if (it != records.end() && it->second.resource == resource) {
        next.emplace(name, it->second);  // unchanged: its version and time stay
        continue;
      }
      next.emplace(name, ResourceRecord{resource, versions.contains(name) ? versions[name] : version, now});
    }
    records_[type] = std::make_shared<const Records>(std::move(next));
    if (apply) {
      active_ = records_;  // the records share their resources
      for (const auto& [t, s] : types_)
        if (s.received) active_versions_[t] = s.version;
    }
  }
  log_info("mesh xDS: " + short_type(type) + " version " + version + " accepted (" + std::to_string(slot.size()) +
           " resources, " + std::to_string(assembly.parsed) + " clusters and listeners parsed)" +
           (apply ? ", installed" : ", warming: waiting for what it names") + " (checks: " +
           std::to_string((t1 - t0) / 1000000) + " ms of CPU" +
           (apply ? ", install: " + std::to_string(install_ms) + " ms" : "") + ")");
  out.push_back(request(type));

  // Subscriptions follow what the resources name: the endpoints of EDS
  // clusters, the route configurations of HCMs; listeners after clusters.
  const auto follow = [&](std::string_view t, const std::set<std::string>& names) {
    TypeState& ts = types_[std::string(t)];
    if (names.empty() || (ts.requested && ts.names == names)) return;
    const std::set<std::string> before = ts.requested ? ts.names : std::set<std::string>();
    ts.names = names;
    ts.requested = true;
    out.push_back(subscribe(std::string(t), before));
  };
  follow(kEndpointType, assembly.endpoint_names);
  if (dynamic_.lds && !types_[std::string(kListenerType)].requested && (type == kClusterType || !dynamic_.cds)) {
    types_[std::string(kListenerType)].requested = true;
    out.push_back(subscribe(std::string(kListenerType), {}));
  }
  follow(kRouteType, assembly.route_names);
  if (apply_secrets_) follow(kSecretType, secret_names);
  return out;
}

std::vector<json> AdsClient::on_secrets(const json& response, const std::string& version) {
  const std::string type(kSecretType);
  std::string error;
  try {
    error = apply_secrets_("ads", read_secrets(response.value("resources", json::array()), dynamic_.delta));
  } catch (const config::ConfigError& e) {
    error = e.what();
  }
  if (!error.empty()) return {nack(type, version, error)};
  ++acks_;
  TypeState& st = types_[type];
  st.version = version;
  st.received = true;
  log_info("mesh xDS: SDS version " + version + " accepted (" +
           std::to_string(response.value("resources", json::array()).size()) + " secrets)");
  return {request(type)};
}

std::vector<DeliveredResource> AdsClient::read_resources(const std::string& type,
                                                         const std::vector<std::string_view>& items) {
  const Messages& m = messages();
  const char* element_type = dynamic_.delta ? "envoy.service.discovery.v3.Resource" : "google.protobuf.Any";
  std::unordered_map<std::string, DeliveredResource>& last = last_read_[type];
  std::unordered_map<std::string, DeliveredResource> now;
  std::vector<DeliveredResource> out;
  out.reserve(items.size());
  for (std::string_view item : items) {
    std::string bytes(item);
    auto it = last.find(bytes);
    DeliveredResource d;
    if (it != last.end()) {
      d = it->second;
    } else if (type == kRouteType) {
      d = read_route_configuration(bytes);
    } else {
      d = read_resource(m.to_json(element_type, bytes), dynamic_.delta);
    }
    out.push_back(d);
    now.emplace(std::move(bytes), std::move(d));
  }
  last = std::move(now);
  if (type == kRouteType) {
    // The routes of configurations no longer held are forgotten (delta: held until a response leaves them out).
    std::set<std::string> held;
    for (const DeliveredResource& d : out) held.insert(resource_name(type, d.resource->json));
    if (dynamic_.delta)
      for (const auto& [name, resource] : accepted_.of(type)) held.insert(name);
    std::erase_if(last_routes_, [&](const auto& e) { return !held.contains(e.first); });
  }
  return out;
}

DeliveredResource AdsClient::read_route_configuration(const std::string& bytes) {
  const Messages& m = messages();
  const char* element_type = dynamic_.delta ? "envoy.service.discovery.v3.Resource" : "google.protobuf.Any";
  RouteSplit split = split_routes(m, bytes, dynamic_.delta);
  if (!split.split) return read_resource(m.to_json(element_type, bytes), dynamic_.delta);
  json skeleton = m.to_json(element_type, split.element);
  const json& resource = dynamic_.delta ? config::json_member(skeleton, "resource") : skeleton;
  // Its routes: those of the last configuration of this name whose bytes are the same are taken as read.
  auto& last = last_routes_[config::json_member(resource, "name").is_string() ? resource["name"].get<std::string>() : ""];
  std::unordered_map<std::string, std::shared_ptr<const json>> now;
  config::XdsResourceValue::Routes routes;
  for (std::vector<std::string>& vhost : split.routes) {
    routes.emplace_back();
    for (std::string& route : vhost) {
      if (auto seen = now.find(route); seen != now.end()) {
        routes.back().push_back(seen->second);
      } else if (auto was = last.find(route); was != last.end()) {
        routes.back().push_back(was->second);
        now.insert(last.extract(was));  // moved over, not copied
      } else {
        auto read = std::make_shared<const json>(m.to_json("envoy.config.route.v3.Route", route));
        ++routes_read_;
        routes.back().push_back(read);
        now.emplace(std::move(route), std::move(read));
      }
    }
  }
  last = std::move(now);
  return read_resource(std::move(skeleton), dynamic_.delta, std::move(routes));
}

std::vector<json> AdsClient::on_response_bytes(const std::string& bytes) {
  const Messages& m = messages();
  const char* response_type = dynamic_.delta ? kDeltaAdsMethod.response_type : kAdsMethod.response_type;
  try {
    // The resources apart from the rest: only those not in the type's last response are converted.
    Messages::Split split = m.split(response_type, bytes, "resources");
    json envelope = m.to_json(response_type, split.rest);
    const std::string type = envelope.value("type_url", "");
    if (type == kSecretType && apply_secrets_) return on_response(m.to_json(response_type, bytes));
    std::vector<DeliveredResource> resources;
    try {
      resources = read_resources(type, split.items);
    } catch (const std::exception& e) {
      // A resource that does not convert (a typed_config whose type is not in
      // the descriptor set): NACK the response with protobuf's reason.
      return on_unreadable(envelope, std::string("a resource cannot be read (dpukit-mesh implements none of its "
                                                 "type): ") + e.what());
    }
    return on_resources(envelope, resources);
  } catch (const std::exception& e) {
    log_warn(std::string("mesh xDS: a response that does not parse: ") + e.what());
    return {};
  }
}

bool AdsClient::on_message(const std::string& bytes) {
  const std::vector<json> requests = on_response_bytes(bytes);
  return requests.empty() || stream_->write(requests);
}

const AdsClient::Records& AdsClient::records_of(const std::map<std::string, std::shared_ptr<const Records>>& by_type,
                                                std::string_view type) {
  static const Records kNone;
  auto it = by_type.find(std::string(type));
  return it == by_type.end() || !it->second ? kNone : *it->second;
}

json AdsClient::config_dump(const json& running) const {
  // A resource as the control plane sent it: with its "@type".
  const auto typed = [](std::string_view type, const ResourceRecord& r) {
    json j = {{"@type", type}};
    j.update(r.resource->whole());
    return j;
  };
  std::lock_guard lock(mu_);
  const auto records = [&](std::string_view type) -> const Records& { return records_of(active_, type); };
  const auto warming = [&](std::string_view type) {
    std::vector<const ResourceRecord*> out;
    const auto& active = records(type);
    for (const auto& [name, r] : records_of(records_, type)) {
      auto a = active.find(name);
      if (a == active.end() || a->second.version != r.version) out.push_back(&r);
    }
    return out;
  };
  const auto version = [&](std::string_view type) {
    auto it = active_versions_.find(std::string(type));
    return it == active_versions_.end() ? std::string() : it->second;
  };
  const auto dynamic_names = [&](std::string_view type) {
    std::set<std::string> names;
    for (const auto& [name, r] : records(type)) names.insert(name);
    return names;
  };

  json bootstrap = {{"node", {{"id", node_.id}, {"cluster", node_.cluster}}}};
  json ads_source = {{"ads", json::object()}, {"resource_api_version", "V3"}};
  bootstrap["dynamic_resources"] = {
      {"ads_config",
       {{"api_type", dynamic_.delta ? "DELTA_GRPC" : "GRPC"},
        {"transport_api_version", "V3"},
        {"grpc_services", {{{"envoy_grpc", {{"cluster_name", dynamic_.ads_cluster}}}}}}}}};
  if (dynamic_.lds) bootstrap["dynamic_resources"]["lds_config"] = ads_source;
  if (dynamic_.cds) bootstrap["dynamic_resources"]["cds_config"] = ads_source;
  if (running.contains("admin")) bootstrap["admin"] = running["admin"];

  const std::set<std::string> dyn_clusters = dynamic_names(kClusterType), dyn_listeners = dynamic_names(kListenerType);
  json clusters = {{"@type", "type.googleapis.com/envoy.admin.v3.ClustersConfigDump"},
                   {"version_info", version(kClusterType)},
                   {"static_clusters", json::array()},
                   {"dynamic_active_clusters", json::array()},
                   {"dynamic_warming_clusters", json::array()}};
  for (const json& c : running["static_resources"]["clusters"])
    if (!dyn_clusters.contains(c.value("name", "")) && !stand_ins_.contains(c.value("name", "")))
      clusters["static_clusters"].push_back({{"cluster", c}});
  for (const auto& [name, r] : records(kClusterType))
    clusters["dynamic_active_clusters"].push_back(
        {{"version_info", r.version}, {"cluster", typed(kClusterType, r)}, {"last_updated", r.last_updated}});
  for (const ResourceRecord* r : warming(kClusterType))
    clusters["dynamic_warming_clusters"].push_back(
        {{"version_info", r->version}, {"cluster", typed(kClusterType, *r)}, {"last_updated", r->last_updated}});

  json listeners = {{"@type", "type.googleapis.com/envoy.admin.v3.ListenersConfigDump"},
                    {"version_info", version(kListenerType)},
                    {"static_listeners", json::array()},
                    {"dynamic_listeners", json::array()}};
  for (const json& l : running["static_resources"]["listeners"])
    if (!dyn_listeners.contains(l.value("name", ""))) listeners["static_listeners"].push_back({{"listener", l}});
  std::map<std::string, json> dynamic_listeners;
  for (const auto& [name, r] : records(kListenerType))
    dynamic_listeners[name]["active_state"] = {
        {"version_info", r.version}, {"listener", typed(kListenerType, r)}, {"last_updated", r.last_updated}};
  for (const ResourceRecord* r : warming(kListenerType))
    dynamic_listeners[resource_name(std::string(kListenerType), r->resource->json)]["warming_state"] = {
        {"version_info", r->version}, {"listener", typed(kListenerType, *r)}, {"last_updated", r->last_updated}};
  for (auto& [name, l] : dynamic_listeners) {
    l["name"] = name;
    listeners["dynamic_listeners"].push_back(l);
  }

  json routes = {{"@type", "type.googleapis.com/envoy.admin.v3.RoutesConfigDump"}, {"dynamic_route_configs", json::array()}};
  for (const auto& [name, r] : records(kRouteType))
    routes["dynamic_route_configs"].push_back(
        {{"version_info", r.version}, {"route_config", typed(kRouteType, r)}, {"last_updated", r.last_updated}});
  json endpoints = {{"@type", "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump"},
                    {"dynamic_endpoint_configs", json::array()}};
  for (const auto& [name, r] : records(kEndpointType))
    endpoints["dynamic_endpoint_configs"].push_back(
        {{"version_info", r.version}, {"endpoint_config", typed(kEndpointType, r)}, {"last_updated", r.last_updated}});

  return {{"configs",
           {{{"@type", "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump"}, {"bootstrap", bootstrap}},
            clusters, listeners, routes, endpoints}}};
}

}  // namespace dpukit::mesh::xds
