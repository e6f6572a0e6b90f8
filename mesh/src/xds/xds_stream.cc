#include "xds/xds_stream.h"

#include <grpcpp/channel.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/sync_stream.h>

#include <arpa/inet.h>

#include <chrono>
#include <random>

#include "dpukit/core/log.h"
#include "xds/xds_messages.h"

namespace dpukit::mesh::xds {

const XdsMethod kAdsMethod{"/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
                           "envoy.service.discovery.v3.DiscoveryRequest", "envoy.service.discovery.v3.DiscoveryResponse"};
const XdsMethod kDeltaAdsMethod{"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
                                "envoy.service.discovery.v3.DeltaDiscoveryRequest",
                                "envoy.service.discovery.v3.DeltaDiscoveryResponse"};
// Envoy's SdsApi over api_config_source GRPC, as istio-agent serves it: state of the world.
const XdsMethod kSdsMethod{"/envoy.service.secret.v3.SecretDiscoveryService/StreamSecrets",
                           "envoy.service.discovery.v3.DiscoveryRequest", "envoy.service.discovery.v3.DiscoveryResponse"};

namespace {

using Stream = grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

// Envoy's defaults for an xDS stream's retry: 500 ms doubling to 30 s, fully jittered.
constexpr std::chrono::milliseconds kBackoffBase{500};
constexpr std::chrono::milliseconds kBackoffMax{30000};

// HTTP/2 keepalive on the connection: a control plane host that vanishes
// without a reset (powered off, partitioned) is noticed within interval +
// timeout, and the stream is redialled; the stream is idle between
// updates, hence the pings without calls or data. The cluster's
// connection_keepalive sets them; without it, 30 s (go-control-plane's
// example server's enforcement MinTime and Istio's interval) and 10 s, where
// Envoy would send none. A server that enforces a longer interval answers
// GOAWAY too_many_pings and gRPC doubles the interval on this channel (kept
// across streams for that reason).
std::shared_ptr<grpc::Channel> xds_channel(const std::string& target,
                                          const config::Http2ProtocolOptions::Keepalive& keepalive) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // a snapshot of many clusters is one message
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(keepalive.interval.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(keepalive.timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // else pings stop after two on an idle stream
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

std::string grpc_target(const config::Cluster& cluster) {
  const config::Address& a = cluster.endpoints.at(0).address;
  if (a.is_pipe()) return "unix:" + a.pipe_path;
  unsigned char buf[16];
  if (inet_pton(AF_INET, a.ip.c_str(), buf) == 1) return "ipv4:" + a.ip + ":" + std::to_string(a.port);
  if (inet_pton(AF_INET6, a.ip.c_str(), buf) == 1) return "ipv6:[" + a.ip + "]:" + std::to_string(a.port);
  return "dns:///" + a.ip + ":" + std::to_string(a.port);
}

nlohmann::json request_node(const config::Node& node) {
  return {{"id", node.id}, {"cluster", node.cluster}, {"user_agent_name", "dpukit-mesh"},
          {"user_agent_version", DPUKIT_VERSION}};
}

XdsStream::XdsStream(std::string what, std::string target, const config::Http2ProtocolOptions::Keepalive& keepalive,
                     XdsMethod method, Handlers handlers)
    : what_(std::move(what)),
      target_(std::move(target)),
      keepalive_(keepalive),
      method_(method),
      handlers_(std::move(handlers)) {}

XdsStream::~XdsStream() { stop(); }

void XdsStream::start() {
  thread_ = std::thread([this] { run(); });
}

void XdsStream::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (ctx_) static_cast<grpc::ClientContext*>(ctx_)->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool XdsStream::write(const std::vector<nlohmann::json>& requests) {
  std::lock_guard write_lock(write_mu_);
  Stream* stream = nullptr;
  {
    std::lock_guard lock(mu_);
    stream = static_cast<Stream*>(stream_);
  }
  if (stream == nullptr) return false;
  const Messages& m = messages();
  for (const nlohmann::json& r : requests) {
    const grpc::ByteBuffer message = to_byte_buffer(m.to_binary(method_.request_type, r));
    pay_before_write();
    if (!stream->Write(message)) return false;
  }
  return true;
}

void XdsStream::run() {
  // Each response's work (its decoding, conversion and checks) is paid for before the ACK or NACK is written.
  DilationCounters unreported;
  LoopDilation dilation(speed_, dilation_ ? *dilation_ : unreported);
  LoopDilation::Current current(dilation);
  std::mt19937_64 rng(std::random_device{}());
  auto backoff = kBackoffBase;
  const auto channel = xds_channel(target_, keepalive_);
  while (!stopping_) {
    if (stream_once(channel)) backoff = kBackoffBase;  // a stream that worked starts the backoff over
    if (stopping_) break;
    // Fully jittered, as Envoy's JitteredExponentialBackOffStrategy: uniform
    // below the step, so that many nodes do not come back at once.
    std::uniform_int_distribution<int64_t> jitter(0, backoff.count() - 1);
    const auto delay = std::chrono::milliseconds(jitter(rng));
    log_warn("mesh xDS: serving the last good configuration; reconnecting " + what_ + " to " + target_ + " in " +
             std::to_string(delay.count()) + " ms");
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, delay, [this] { return stopping_.load(); });
    backoff = std::min(backoff * 2, kBackoffMax);
    // The stream's backoff is the one that counts (Envoy's): gRPC's own
    // reconnect backoff would stack on it and hold a redial for seconds
    // after the control plane is back.
    grpc::experimental::ChannelResetConnectionBackoff(channel.get());
  }
}

bool XdsStream::stream_once(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext ctx;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    ctx_ = &ctx;
  }
  const grpc::internal::RpcMethod method(method_.path, grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  std::unique_ptr<Stream> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(), method, &ctx));
  {
    std::lock_guard lock(mu_);
    stream_ = stream.get();
  }
  bool received = false;
  bool open = handlers_.on_open();
  grpc::ByteBuffer buffer;
  while (open && stream->Read(&buffer)) {
    if (!received) log_info("mesh xDS: " + what_ + " stream to " + target_ + " is up");
    received = true;
    open = handlers_.on_response(from_byte_buffer(buffer));
  }
  {
    std::lock_guard write_lock(write_mu_);  // no write from another thread is under way as the stream ends
    std::lock_guard lock(mu_);
    stream_ = nullptr;
  }
  const grpc::Status status = stream->Finish();
  {
    std::lock_guard lock(mu_);
    ctx_ = nullptr;
  }
  if (!stopping_)
    log_warn("mesh xDS: " + what_ + " stream to " + target_ + " ended: " + std::to_string(status.error_code()) + " " +
             status.error_message());
  return received;
}

}  // namespace dpukit::mesh::xds
