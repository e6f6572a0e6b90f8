// The xDS client: one ADS stream (gRPC, v3, state of the world or delta) to the
// control plane that the bootstrap's dynamic_resources names, on a thread of
// its own (never a data-plane worker). Each response's resources are turned
// into proto-JSON (a resource whose bytes are those of the last response is
// not converted again: a state-of-the-world control plane resends them all),
// assembled with the bootstrap file into one bootstrap and checked by the
// same parser as a file, resource by resource (config/xds_assembly.h); a good set is
// installed through the control plane's reload path and ACKed, a bad one is
// NACKed with the parser's words and the last good one keeps running. When
// the control plane goes away the proxy keeps serving and reconnects with a
// capped, jittered exponential backoff (xds/xds_stream.h). Secrets that the
// configuration takes from ads (sds_config: {ads: {}}) are subscribed on the
// same stream and handed to the proxy's SDS secrets (tls/sds_secrets.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "config/bootstrap.h"
#include "config/xds_assembly.h"
#include "dataplane/loop_dilation.h"
#include "xds/xds_stream.h"

namespace dpukit::mesh::xds {

// The type URL of SDS's resources.
inline constexpr std::string_view kSecretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
// Installs secrets pushed on `stream` ("ads", "grpc:<cluster>") on the
// control plane's thread; "" when taken, else why not (the response is then NACKed).
using ApplySecrets = std::function<std::string(const std::string& stream, std::map<std::string, config::Secret>)>;
// The secrets of a response's resources (proto-JSON; delta: each wrapped in
// {name, version, resource}), each checked as a file's is. Throws
// ConfigError naming the resource ("resources[1] (Secret 'default'): ...").
std::map<std::string, config::Secret> read_secrets(const nlohmann::json& resources, bool delta);

// The state of one resource type on the stream.
struct TypeState {
  std::string version;          // of the last accepted response (state of the world)
  std::string nonce;            // of the last response on this stream
  std::set<std::string> names;  // subscribed; empty for LDS and CDS (wildcard)
  bool requested = false;       // a request went out (on some stream)
  bool received = false;        // a response was accepted
};

// One resource of a response, as read from it.
struct DeliveredResource {
  std::string type_url;          // its "@type" ("" when it has none)
  std::string name, version;     // delta: those of its Resource wrapper
  config::XdsResource resource;  // proto-JSON without "@type"
};
// A response's resource (proto-JSON: a google.protobuf.Any's; delta: a
// Resource's) as delivered; a RouteConfiguration's routes apart where given.
DeliveredResource read_resource(nlohmann::json element, bool delta,
                                std::optional<config::XdsResourceValue::Routes> routes = std::nullopt);

// A resource as accepted: what /config_dump shows.
struct ResourceRecord {
  config::XdsResource resource;  // proto-JSON without "@type" (shared with the running copy)
  std::string version;      // version_info of the response that last changed it
  std::string last_updated;  // RFC 3339, UTC
};

class AdsClient {
 public:
  // Installs a checked bootstrap on the control plane's thread; "" when it
  // runs, else why not (the response is then NACKed with that).
  using Apply = std::function<std::string(config::Bootstrap)>;

  // `base` is the bootstrap file (static resources, dynamic_resources,
  // node). Secrets from ads go to `apply_secrets` (none: such responses are NACKed).
  AdsClient(YAML::Node base, const config::Bootstrap& bootstrap, Apply apply, ApplySecrets apply_secrets = {});
  ~AdsClient();
  // The stream's thread runs at `speed` (it is the proxy's, on the dpu's
  // cores), adding what it dilates to `counters`; before start().
  void dilate(const DpuSpeed& speed, DilationCounters& counters) { stream_->dilate(speed, counters); }
  void start() { stream_->start(); }
  void stop() { stream_->stop(); }  // ends the stream and joins the thread

  // Envoy's /config_dump shape for what runs: `running` is to_json() of the
  // installed bootstrap (its static part is shown as static_*).
  nlohmann::json config_dump(const nlohmann::json& running) const;

  // Counters (read by tests and /stats): responses ACKed and NACKed, streams opened.
  uint64_t acks() const { return acks_.load(); }
  uint64_t nacks() const { return nacks_.load(); }
  // Routes converted from their bytes (a route the last RDS response had is not).
  uint64_t routes_read() const { return routes_read_.load(); }

  // One response (proto-JSON of a DiscoveryResponse): the requests to send
  // next (proto-JSON of DiscoveryRequests). Public for the unit tests, which
  // drive it without a stream.
  std::vector<nlohmann::json> on_response(const nlohmann::json& response);
  // on_response of a response's bytes, as the stream delivers it: what
  // on_message sends (nothing for bytes that do not parse).
  std::vector<nlohmann::json> on_response_bytes(const std::string& bytes);
  // A response whose resources do not convert (`why`): NACK it.
  std::vector<nlohmann::json> on_unreadable(const nlohmann::json& envelope, const std::string& why);
  // The requests that open a stream (every subscription, CDS first).
  std::vector<nlohmann::json> on_stream_start();

 private:
  // A response's bytes: decoded, taken or refused, answered.
  bool on_message(const std::string& bytes);
  // on_response of a response whose resources are read apart (`envelope`: the rest of it).
  std::vector<nlohmann::json> on_resources(const nlohmann::json& envelope, const std::vector<DeliveredResource>& resources);
  // A response's resources from their bytes: those seen in the type's last
  // response are taken as read then. Throws (protobuf's reason) when one does not convert.
  std::vector<DeliveredResource> read_resources(const std::string& type, const std::vector<std::string_view>& items);
  // A RouteConfiguration read route by route: a route whose bytes the last
  // configuration of its name had is not converted again.
  DeliveredResource read_route_configuration(const std::string& bytes);
  // A response of secrets: handed to apply_secrets_, ACKed or NACKed.
  std::vector<nlohmann::json> on_secrets(const nlohmann::json& response, const std::string& version);
  // An ACK (or, with `error`, a NACK) of the type's last response.
  nlohmann::json request(const std::string& type, const std::string& error = "") const;
  // A request for the type's subscription (its names now; delta: the change from `before`).
  nlohmann::json subscribe(const std::string& type, const std::set<std::string>& before) const;
  // Counts and logs a rejected response; the NACK to send.
  nlohmann::json nack(const std::string& type, const std::string& version, const std::string& why);

  config::Node node_;
  config::DynamicResources dynamic_;
  Apply apply_;
  ApplySecrets apply_secrets_;

  std::map<std::string, TypeState> types_;
  config::XdsResources accepted_;  // the last good set (what a NACK keeps)
  std::unique_ptr<config::XdsAssembler> assembler_;
  std::map<std::string, std::unordered_map<std::string, DeliveredResource>> last_read_;  // per type: by bytes
  // Each route configuration's routes as last read, by its name and their bytes.
  std::map<std::string, std::unordered_map<std::string, std::shared_ptr<const nlohmann::json>>> last_routes_;
  std::atomic<uint64_t> routes_read_{0};

  mutable std::mutex mu_;  // guards what config_dump reads
  // Accepted, and running (installed), by type and name; shared, so that an
  // install copies four pointers, not every record.
  using Records = std::map<std::string, ResourceRecord>;
  std::map<std::string, std::shared_ptr<const Records>> records_, active_;
  static const Records& records_of(const std::map<std::string, std::shared_ptr<const Records>>& by_type,
                                    std::string_view type);
  std::map<std::string, std::string> active_versions_;                    // per type, of what runs
  std::set<std::string> stand_ins_;  // clusters routes name that CDS did not deliver (not shown as static)

  std::atomic<uint64_t> acks_{0}, nacks_{0};
  std::unique_ptr<XdsStream> stream_;  // last: its thread calls into the members above
};

}  // namespace dpukit::mesh::xds
