// The xDS client: one ADS stream (gRPC, v3, state of the world or delta) to the
// control plane that the bootstrap's dynamic_resources names, on a thread of
// its own (never a data-plane worker). Each response's resources are turned
// into proto-JSON, assembled with the bootstrap file into one bootstrap and
// checked by the same parser as a file (config/xds_config.h); a good set is
// installed through the control plane's reload path and ACKed, a bad one is
// NACKed with the parser's words and the last good one keeps running. When
// the control plane goes away the proxy keeps serving and reconnects with a
// capped, jittered exponential backoff.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "config/bootstrap.h"
#include "dataplane/loop_dilation.h"

namespace grpc {
class Channel;
}

namespace dpukit::mesh::xds {

// The gRPC target of a cluster's first endpoint ("ipv4:127.0.0.1:18000",
// "ipv6:[::1]:18000", "unix:/path", "dns:///name:18000").
std::string grpc_target(const config::Cluster& cluster);

// The state of one resource type on the stream.
struct TypeState {
  std::string version;          // of the last accepted response (state of the world)
  std::string nonce;            // of the last response on this stream
  std::set<std::string> names;  // subscribed; empty for LDS and CDS (wildcard)
  bool requested = false;       // a request went out (on some stream)
  bool received = false;        // a response was accepted
};

// A resource as accepted: what /config_dump shows.
struct ResourceRecord {
  std::shared_ptr<const nlohmann::json> resource;  // proto-JSON with "@type" (shared by the running copy)
  std::string version;      // version_info of the response that last changed it
  std::string last_updated;  // RFC 3339, UTC
};

class AdsClient {
 public:
  // Installs a checked bootstrap on the control plane's thread; "" when it
  // runs, else why not (the response is then NACKed with that).
  using Apply = std::function<std::string(config::Bootstrap)>;

  // `base` is the bootstrap file (static resources, dynamic_resources, node).
  AdsClient(YAML::Node base, const config::Bootstrap& bootstrap, Apply apply);
  ~AdsClient();
  // The stream's thread runs at `speed` (it is the proxy's, on the dpu's
  // cores), adding what it dilates to `counters`; before start().
  void dilate(const DpuSpeed& speed, DilationCounters& counters) {
    speed_ = speed;
    dilation_ = &counters;
  }
  void start();
  void stop();  // ends the stream and joins the thread

  // Envoy's /config_dump shape for what runs: `running` is to_json() of the
  // installed bootstrap (its static part is shown as static_*).
  nlohmann::json config_dump(const nlohmann::json& running) const;

  // Counters (read by tests and /stats): responses ACKed and NACKed, streams opened.
  uint64_t acks() const { return acks_.load(); }
  uint64_t nacks() const { return nacks_.load(); }

  // One response (proto-JSON of a DiscoveryResponse): the requests to send
  // next (proto-JSON of DiscoveryRequests). Public for the unit tests, which
  // drive it without a stream.
  std::vector<nlohmann::json> on_response(const nlohmann::json& response);
  // A response whose resources do not convert (`why`): NACK it.
  std::vector<nlohmann::json> on_unreadable(const nlohmann::json& envelope, const std::string& why);
  // The requests that open a stream (every subscription, CDS first).
  std::vector<nlohmann::json> on_stream_start();

 private:
  void run();
  // One ADS stream on `channel`; true when a response was received.
  bool stream_once(const std::shared_ptr<grpc::Channel>& channel);
  // An ACK (or, with `error`, a NACK) of the type's last response.
  nlohmann::json request(const std::string& type, const std::string& error = "") const;
  // A request for the type's subscription (its names now; delta: the change from `before`).
  nlohmann::json subscribe(const std::string& type, const std::set<std::string>& before) const;
  // Counts and logs a rejected response; the NACK to send.
  nlohmann::json nack(const std::string& type, const std::string& version, const std::string& why);

  YAML::Node base_;
  config::Node node_;
  config::DynamicResources dynamic_;
  std::string target_;
  // The ADS connection's HTTP/2 PINGs: the ADS cluster's connection_keepalive, else these.
  config::Http2ProtocolOptions::Keepalive keepalive_{std::chrono::seconds(30), std::chrono::seconds(10)};
  Apply apply_;

  std::map<std::string, TypeState> types_;
  config::XdsResources accepted_;  // the last good set (what a NACK keeps)

  mutable std::mutex mu_;  // guards what config_dump reads, and ctx_
  std::map<std::string, std::map<std::string, ResourceRecord>> records_;  // accepted, by type and name
  std::map<std::string, std::map<std::string, ResourceRecord>> active_;   // running (installed)
  std::map<std::string, std::string> active_versions_;                    // per type, of what runs
  std::set<std::string> stand_ins_;  // clusters routes name that CDS did not deliver (not shown as static)
  void* ctx_ = nullptr;  // the stream's grpc::ClientContext, to cancel it

  std::atomic<bool> stopping_{false};
  std::condition_variable cv_;
  std::atomic<uint64_t> acks_{0}, nacks_{0};
  std::thread thread_;
  DpuSpeed speed_;
  DilationCounters* dilation_ = nullptr;
};

}  // namespace dpukit::mesh::xds
