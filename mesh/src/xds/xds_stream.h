// One xDS stream: a bidirectional gRPC call of protobuf messages, given and
// taken as proto-JSON, to the first endpoint of a static cluster, on a thread
// of its own (never a data-plane worker). While the proxy runs it is
// redialled with Envoy's capped, jittered exponential backoff, and the
// connection is kept alive with HTTP/2 PINGs. The ADS client
// (xds/xds_client.h) and the SDS client (xds/sds_client.h) each run one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/bootstrap.h"
#include "dataplane/loop_dilation.h"

namespace grpc {
class Channel;
}

namespace dpukit::mesh::xds {

// The gRPC target of a cluster's first endpoint ("ipv4:127.0.0.1:18000",
// "ipv6:[::1]:18000", "unix:/path", "dns:///name:18000").
std::string grpc_target(const config::Cluster& cluster);

// The node as a request carries it (with the client's name and version).
nlohmann::json request_node(const config::Node& node);

// A streaming method and its message types.
struct XdsMethod {
  const char* path;           // "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
  const char* request_type;   // "envoy.service.discovery.v3.DiscoveryRequest"
  const char* response_type;  // "envoy.service.discovery.v3.DiscoveryResponse"
};
extern const XdsMethod kAdsMethod, kDeltaAdsMethod, kSdsMethod;

class XdsStream {
 public:
  struct Handlers {
    // A stream is open: write what opens it. False when a write failed.
    std::function<bool()> on_open;
    // A response (its bytes, `method.response_type`): answer with write(). False when a write failed.
    std::function<bool(const std::string& bytes)> on_response;
  };
  // `what` names the stream in logs ("ADS", "SDS"); `target` is grpc_target().
  XdsStream(std::string what, std::string target, const config::Http2ProtocolOptions::Keepalive& keepalive,
            XdsMethod method, Handlers handlers);
  ~XdsStream();
  // The stream's thread runs at `speed` (it is the proxy's, on the dpu's
  // cores), adding what it dilates to `counters`; before start().
  void dilate(const DpuSpeed& speed, DilationCounters& counters) {
    speed_ = speed;
    dilation_ = &counters;
  }
  void start();
  void stop();  // ends the stream and joins the thread
  // Writes requests on the open stream, from any thread (one at a time).
  // False when no stream is open (on_open then says what is needed) or a write failed.
  bool write(const std::vector<nlohmann::json>& requests);
  const std::string& target() const { return target_; }

 private:
  void run();
  // One stream on `channel`; true when a response was received.
  bool stream_once(const std::shared_ptr<grpc::Channel>& channel);

  std::string what_, target_;
  config::Http2ProtocolOptions::Keepalive keepalive_;
  XdsMethod method_;
  Handlers handlers_;
  std::mutex mu_;        // ctx_, stream_, stopping_'s wait
  std::mutex write_mu_;  // one write at a time
  void* ctx_ = nullptr;     // the stream's grpc::ClientContext, to cancel it
  void* stream_ = nullptr;  // its ClientReaderWriter, while open
  std::atomic<bool> stopping_{false};
  std::condition_variable cv_;
  std::thread thread_;
  DpuSpeed speed_;
  DilationCounters* dilation_ = nullptr;
};

}  // namespace dpukit::mesh::xds
