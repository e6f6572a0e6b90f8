#include "config/access_log_format.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>
#include <utility>

namespace dpukit::mesh::config {

namespace {

using Op = FormatPiece::Op;

// The operators filled here, by Envoy's names.
constexpr std::array<std::pair<std::string_view, Op>, 32> kOperators{{
    {"START_TIME", Op::kStartTime},
    {"REQ", Op::kReq},
    {"RESP", Op::kResp},
    {"TRAILER", Op::kTrailer},
    {"PROTOCOL", Op::kProtocol},
    {"RESPONSE_CODE", Op::kResponseCode},
    {"RESPONSE_CODE_DETAILS", Op::kResponseCodeDetails},
    {"CONNECTION_TERMINATION_DETAILS", Op::kConnectionTerminationDetails},
    {"RESPONSE_FLAGS", Op::kResponseFlags},
    {"RESPONSE_FLAGS_LONG", Op::kResponseFlagsLong},
    {"BYTES_RECEIVED", Op::kBytesReceived},
    {"BYTES_SENT", Op::kBytesSent},
    {"DURATION", Op::kDuration},
    {"UPSTREAM_HOST", Op::kUpstreamHost},
    {"UPSTREAM_CLUSTER", Op::kUpstreamCluster},
    {"UPSTREAM_CLUSTER_RAW", Op::kUpstreamClusterRaw},
    {"UPSTREAM_LOCAL_ADDRESS", Op::kUpstreamLocalAddress},
    {"UPSTREAM_TRANSPORT_FAILURE_REASON", Op::kUpstreamTransportFailureReason},
    {"UPSTREAM_REQUEST_ATTEMPT_COUNT", Op::kUpstreamRequestAttemptCount},
    {"DOWNSTREAM_REMOTE_ADDRESS", Op::kDownstreamRemoteAddress},
    {"DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT", Op::kDownstreamRemoteAddressWithoutPort},
    {"DOWNSTREAM_REMOTE_PORT", Op::kDownstreamRemotePort},
    {"DOWNSTREAM_DIRECT_REMOTE_ADDRESS", Op::kDownstreamDirectRemoteAddress},
    {"DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT", Op::kDownstreamDirectRemoteAddressWithoutPort},
    {"DOWNSTREAM_LOCAL_ADDRESS", Op::kDownstreamLocalAddress},
    {"DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT", Op::kDownstreamLocalAddressWithoutPort},
    {"DOWNSTREAM_LOCAL_PORT", Op::kDownstreamLocalPort},
    {"DOWNSTREAM_PEER_URI_SAN", Op::kDownstreamPeerUriSan},
    {"DOWNSTREAM_PEER_SUBJECT", Op::kDownstreamPeerSubject},
    {"DOWNSTREAM_TLS_VERSION", Op::kDownstreamTlsVersion},
    {"REQUESTED_SERVER_NAME", Op::kRequestedServerName},
    {"ROUTE_NAME", Op::kRouteName},
}};

// Envoy's other operators: refused by name as not implemented (a name in
// neither list is refused as Envoy refuses it).
constexpr std::array<std::string_view, 44> kEnvoyOnly{
    "REQUEST_DURATION", "REQUEST_TX_DURATION", "RESPONSE_DURATION", "RESPONSE_TX_DURATION",
    "DOWNSTREAM_HANDSHAKE_DURATION", "ROUNDTRIP_DURATION", "COMMON_DURATION", "START_TIME_LOCAL", "EMIT_TIME",
    "UPSTREAM_WIRE_BYTES_SENT", "UPSTREAM_WIRE_BYTES_RECEIVED", "UPSTREAM_HEADER_BYTES_SENT",
    "UPSTREAM_HEADER_BYTES_RECEIVED", "DOWNSTREAM_WIRE_BYTES_SENT", "DOWNSTREAM_WIRE_BYTES_RECEIVED",
    "DOWNSTREAM_HEADER_BYTES_SENT", "DOWNSTREAM_HEADER_BYTES_RECEIVED", "GRPC_STATUS", "GRPC_STATUS_NUMBER",
    "UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT", "UPSTREAM_LOCAL_PORT", "UPSTREAM_REMOTE_ADDRESS",
    "UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT", "UPSTREAM_REMOTE_PORT", "UPSTREAM_CONNECTION_ID", "CONNECTION_ID",
    "DOWNSTREAM_LOCAL_URI_SAN", "DOWNSTREAM_LOCAL_SUBJECT", "DOWNSTREAM_PEER_ISSUER", "DOWNSTREAM_PEER_CERT",
    "DOWNSTREAM_PEER_FINGERPRINT_256", "DOWNSTREAM_PEER_SERIAL", "DOWNSTREAM_TLS_CIPHER", "DOWNSTREAM_TLS_SESSION_ID",
    "DYNAMIC_METADATA", "CLUSTER_METADATA", "UPSTREAM_METADATA", "FILTER_STATE", "HOSTNAME", "LOCAL_REPLY_BODY",
    "FILTER_CHAIN_NAME", "VIRTUAL_CLUSTER_NAME", "TRACE_ID", "REQ_WITHOUT_QUERY"};

bool is_token_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void bad(const std::string& reason) { throw std::invalid_argument(reason); }

// REQ(X?Y):Z's parameters into the piece.
void header_operator(FormatPiece& p, std::string_view name, std::string_view param, bool has_param) {
  if (!has_param || param.empty()) bad(std::string(name) + " requires parameters");
  size_t q = param.find('?');
  if (q != std::string_view::npos && param.find('?', q + 1) != std::string_view::npos)
    bad("More than 1 alternative header specified in token: " + std::string(param));
  p.text = lower(param.substr(0, q));
  if (q != std::string_view::npos) p.alt = lower(param.substr(q + 1));
  // Envoy's header map keeps Host as :authority.
  if (p.text == "host") p.text = ":authority";
  if (p.alt == "host") p.alt = ":authority";
}

}  // namespace

bool FormatPiece::numeric() const {
  switch (op) {
    case Op::kResponseCode:
    case Op::kBytesReceived:
    case Op::kBytesSent:
    case Op::kDuration:
    case Op::kUpstreamRequestAttemptCount:
    case Op::kDownstreamRemotePort:
    case Op::kDownstreamLocalPort: return true;
    default: return false;
  }
}

std::vector<FormatPiece> compile_format(std::string_view format) {
  std::vector<FormatPiece> pieces;
  std::string text;
  auto flush_text = [&] {
    if (text.empty()) return;
    pieces.push_back(FormatPiece{Op::kText, std::move(text), {}, std::nullopt});
    text.clear();
  };
  size_t i = 0;
  while (i < format.size()) {
    char c = format[i];
    if (c != '%') {
      text += c;
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      text += '%';
      i += 2;
      continue;
    }
    // %NAME(param):len%
    const size_t start = i;
    size_t j = i + 1;
    while (j < format.size() && is_token_char(format[j])) ++j;
    std::string_view name = format.substr(i + 1, j - i - 1);
    std::string_view param;
    bool has_param = false, has_len = false;
    size_t len = 0;
    if (!name.empty() && j < format.size() && format[j] == '(') {
      size_t close = format.find(')', j + 1);
      if (close == std::string_view::npos) j = format.size();  // no command here
      else {
        param = format.substr(j + 1, close - j - 1);
        has_param = true;
        j = close + 1;
      }
    }
    if (!name.empty() && j < format.size() && format[j] == ':') {
      size_t k = j + 1;
      while (k < format.size() && std::isdigit(static_cast<unsigned char>(format[k]))) ++k;
      if (k > j + 1) {
        len = std::stoul(std::string(format.substr(j + 1, k - j - 1)));
        has_len = true;
        j = k;
      }
    }
    if (name.empty() || j >= format.size() || format[j] != '%')
      bad("Incorrect configuration: " + std::string(format) + ". Couldn't find valid command at position " +
          std::to_string(start));
    i = j + 1;
    auto known = std::find_if(kOperators.begin(), kOperators.end(), [&](const auto& e) { return e.first == name; });
    if (known == kOperators.end()) {
      if (std::find(kEnvoyOnly.begin(), kEnvoyOnly.end(), name) != kEnvoyOnly.end())
        bad("%" + std::string(name) + "% is not supported by dpukit-mesh");
      bad("Not supported field in StreamInfo: " + std::string(name));
    }
    FormatPiece p;
    p.op = known->second;
    if (p.op == Op::kReq || p.op == Op::kResp || p.op == Op::kTrailer) {
      header_operator(p, name, param, has_param);
      if (has_len) p.max_length = len;
    } else if (p.op == Op::kStartTime) {
      if (has_len) bad("START_TIME does not take any length");
      p.text = std::string(param);
    } else if (has_param || has_len) {
      bad(std::string(name) + " does not take any parameters or length");
    }
    flush_text();
    pieces.push_back(std::move(p));
  }
  flush_text();
  return pieces;
}

}  // namespace dpukit::mesh::config
