// SDS over gRPC: the secrets a configuration takes from an api_config_source
// (sds_config: {api_config_source: {api_type: GRPC, grpc_services:
// [{envoy_grpc: {cluster_name}}]}}), as Envoy's SdsApi asks istio-agent for
// them on its Unix socket. One state-of-the-world stream
// (SecretDiscoveryService/StreamSecrets) per cluster, subscribed to the names
// the running configuration takes from it; each response is checked, handed
// to the proxy's SDS secrets on the control plane's thread (tls/sds_secrets.h)
// and ACKed, or NACKed with why, the secrets in use kept.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/bootstrap.h"
#include "xds/xds_client.h"
#include "xds/xds_stream.h"

namespace dpukit::mesh::xds {

class SdsClient {
 public:
  // `cluster` is the static cluster the secrets come from (grpc_target()).
  SdsClient(const config::Cluster& cluster, const config::Node& node, ApplySecrets apply);
  ~SdsClient();
  void dilate(const DpuSpeed& speed, DilationCounters& counters) { stream_->dilate(speed, counters); }
  void start() { stream_->start(); }
  void stop() { stream_->stop(); }
  // The names to subscribe to (from the control plane's thread, after each
  // install); a change is sent on the open stream at once.
  void subscribe(std::set<std::string> names);

  uint64_t acks() const { return acks_.load(); }
  uint64_t nacks() const { return nacks_.load(); }

  // One response (proto-JSON of a DiscoveryResponse): the ACK or NACK to send.
  // Public for the unit tests, which drive it without a stream.
  nlohmann::json on_response(const nlohmann::json& response);

 private:
  nlohmann::json request(const std::string& error = "") const;  // with mu_ held
  bool on_message(const std::string& bytes);
  // A response's secrets checked and handed over: "" or why not.
  std::string take(const nlohmann::json& response);
  // The ACK or NACK of `response` (with mu_ held: the names are today's).
  nlohmann::json answer(const nlohmann::json& response, const std::string& error);

  std::string stream_name_;  // "grpc:<cluster>", as SdsSecret::stream()
  config::Node node_;
  ApplySecrets apply_;
  std::mutex mu_;  // what follows: the stream's thread answers, the control plane's subscribes
  std::set<std::string> names_;
  std::string version_, nonce_;
  std::atomic<uint64_t> acks_{0}, nacks_{0};
  std::unique_ptr<XdsStream> stream_;  // last: its thread calls into the members above
};

}  // namespace dpukit::mesh::xds
