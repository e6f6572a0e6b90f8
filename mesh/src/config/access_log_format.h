// Envoy's format language for access logs (SubstitutionFormatString): text
// with command operators such as %START_TIME%, %REQ(:METHOD)% or
// %RESPONSE_FLAGS%, read into pieces once, when the configuration is read.
// "%%" is a literal "%"; an operator Envoy has that dpukit-mesh does not
// fill is refused by name, as a misspelt one is.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dpukit::mesh::config {

struct FormatPiece {
  enum class Op {
    kText,
    kStartTime,  // text: a strftime format with Envoy's %s and %Nf ("": 2026-12-07T18:28:05.728Z)
    kReq,        // text: the request header (lowercase; ":method", ":path", ":authority", ":scheme"), alt: X?Y's Y
    kResp,       // the response header
    kTrailer,    // the response trailer
    kProtocol,
    kResponseCode,
    kResponseCodeDetails,
    kConnectionTerminationDetails,
    kResponseFlags,
    kResponseFlagsLong,
    kBytesReceived,
    kBytesSent,
    kDuration,
    kUpstreamHost,
    kUpstreamCluster,
    kUpstreamClusterRaw,
    kUpstreamLocalAddress,
    kUpstreamTransportFailureReason,
    kUpstreamRequestAttemptCount,
    kDownstreamRemoteAddress,
    kDownstreamRemoteAddressWithoutPort,
    kDownstreamRemotePort,
    kDownstreamDirectRemoteAddress,
    kDownstreamDirectRemoteAddressWithoutPort,
    kDownstreamLocalAddress,
    kDownstreamLocalAddressWithoutPort,
    kDownstreamLocalPort,
    kDownstreamPeerUriSan,
    kDownstreamPeerSubject,
    kDownstreamTlsVersion,
    kRequestedServerName,
    kRouteName,
  };
  Op op = Op::kText;
  std::string text;
  std::string alt;
  std::optional<size_t> max_length;  // :Z, for REQ, RESP and TRAILER
  // Whether the operator's value is a number (typed so in a json_format).
  bool numeric() const;
};

// Reads `format` into pieces. Throws std::invalid_argument with Envoy's
// reason ("Not supported field in StreamInfo: FOO", "REQ requires parameters", ...).
std::vector<FormatPiece> compile_format(std::string_view format);

// Envoy's line when no format is given (ending in a newline).
inline constexpr std::string_view kDefaultAccessLogFormat =
    "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% "
    "%RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "
    "\"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" "
    "\"%UPSTREAM_HOST%\"\n";

}  // namespace dpukit::mesh::config
