// HTTP/2 header blocks <-> the heads the processing modules work on
// (http/http1.h). Pure functions, no sockets: the request pseudo-header rules
// of RFC 9113 §8.2-8.3, the connection-specific fields HTTP/2 forbids, and the
// conversions in both directions for a proxy between HTTP/1.1 and HTTP/2.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/http1.h"

namespace dpukit::mesh::h2 {

// The client connection preface (RFC 9113 §3.4).
inline constexpr std::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// What the first bytes of a cleartext connection are (codec_type AUTO).
enum class Sniff { kHttp1, kHttp2, kNeedMore };
Sniff sniff_preface(std::string_view first_bytes);

// Fields HTTP/2 forbids (RFC 9113 §8.2.2); "te" is allowed only as "trailers".
bool is_connection_specific(std::string_view lower_case_name);

// Builds a request head from a request's header block (in the order
// received). `end_stream`: the HEADERS frame ended the stream (no body).
// Returns "" on success, else why the request is malformed (the stream is
// then reset with PROTOCOL_ERROR). The head is what the HTTP/1.1 parser
// would have made: host from :authority (or Host), target from :path, the
// body framing from content-length (chunked when the length is unknown and a
// body follows), cookies joined (§8.2.3).
std::string request_head_from_h2(const std::vector<http::Header>& block, bool end_stream, http::RequestHead& out);

// Request trailers: no pseudo-header, no connection-specific field. "" or why not.
std::string check_trailers(const std::vector<http::Header>& block);

// A request head as an HTTP/2 header block for an upstream: the pseudo-headers
// first, lower-case names, hop-by-hop fields (and those Connection names)
// dropped, "te: trailers" kept.
std::vector<http::Header> request_block(const http::RequestHead& head);

// A response head as an HTTP/2 header block for a client: ":status" first,
// lower-case names, hop-by-hop and framing fields dropped (content-length is
// written from the head's length when known).
std::vector<http::Header> response_block(const http::ResponseHead& head);

// A response header block from an upstream: "" or why it is malformed.
std::string response_head_from_h2(const std::vector<http::Header>& block, http::ResponseHead& out);

// gRPC (content-type application/grpc...): local replies become
// trailers-only gRPC responses, as Envoy sends them.
bool is_grpc(const http::RequestHead& head);
// Envoy's mapping of an HTTP status to a gRPC status code (Envoy's Grpc::Utility::httpToGrpcStatus).
unsigned grpc_status_for_http(unsigned http_status);

}  // namespace dpukit::mesh::h2
