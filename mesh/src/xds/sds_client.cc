#include "xds/sds_client.h"

#include "dpukit/core/log.h"
#include "xds/xds_messages.h"

namespace dpukit::mesh::xds {

namespace {
using json = nlohmann::json;
constexpr int kGrpcInternal = 13;  // google.rpc.Code INTERNAL, as Envoy's NACKs carry
}  // namespace

SdsClient::SdsClient(const config::Cluster& cluster, const config::Node& node, ApplySecrets apply)
    : stream_name_("grpc:" + cluster.name), node_(node), apply_(std::move(apply)) {
  config::Http2ProtocolOptions::Keepalive keepalive{std::chrono::seconds(30), std::chrono::seconds(10)};
  if (const auto& k = cluster.http2_protocol_options.connection_keepalive) keepalive = *k;
  messages();  // the descriptor pool loads now: a broken build fails at start, not on the first response
  stream_ = std::make_unique<XdsStream>("SDS", grpc_target(cluster), keepalive, kSdsMethod,
                                        XdsStream::Handlers{[this] {
                                                              // A new stream asks for every name again.
                                                              std::lock_guard lock(mu_);
                                                              nonce_.clear();
                                                              return names_.empty() || stream_->write({request()});
                                                            },
                                                            [this](const std::string& bytes) { return on_message(bytes); }});
}

SdsClient::~SdsClient() { stop(); }

json SdsClient::request(const std::string& error) const {
  json r = {{"node", request_node(node_)},
            {"type_url", kSecretType},
            {"version_info", version_},
            {"resource_names", names_},
            {"response_nonce", nonce_}};
  if (!error.empty()) r["error_detail"] = {{"code", kGrpcInternal}, {"message", error}};
  return r;
}

void SdsClient::subscribe(std::set<std::string> names) {
  std::lock_guard lock(mu_);
  if (names == names_) return;
  names_ = std::move(names);
  stream_->write({request()});  // no stream open: the next one asks
}

std::string SdsClient::take(const json& response) {
  if (response.value("type_url", "") != kSecretType)
    return "type " + response.value("type_url", "") + " on a SecretDiscoveryService stream";
  try {
    return apply_(stream_name_, read_secrets(response.value("resources", json::array()), false));
  } catch (const config::ConfigError& e) {
    return e.what();
  }
}

json SdsClient::answer(const json& response, const std::string& error) {
  const std::string version = response.value("version_info", "");
  nonce_ = response.value("nonce", "");
  if (!error.empty()) {
    ++nacks_;
    log_warn("mesh SDS (" + stream_name_ + "): version " + version + " rejected (NACK), keeping the secrets in use: " +
             error);
    return request(error);
  }
  ++acks_;
  version_ = version;
  log_info("mesh SDS (" + stream_name_ + "): version " + version + " accepted (" +
           std::to_string(response.value("resources", json::array()).size()) + " secrets)");
  return request();
}

json SdsClient::on_response(const json& response) {
  const std::string error = take(response);  // waits for the control plane's thread: without mu_
  std::lock_guard lock(mu_);
  return answer(response, error);
}

bool SdsClient::on_message(const std::string& bytes) {
  json response;
  try {
    response = messages().to_json(kSdsMethod.response_type, bytes);
  } catch (const std::exception& e) {
    log_warn(std::string("mesh SDS: a response that does not parse: ") + e.what());
    return true;
  }
  const std::string error = take(response);
  // Answered and written under mu_: a subscription changed meanwhile went out
  // already, and this answer carries the same names, not older ones.
  std::lock_guard lock(mu_);
  return stream_->write({answer(response, error)});
}

}  // namespace dpukit::mesh::xds
