// Envoy's tls_inspector listener filter: what a connection's first bytes say
// before any is consumed — TLS or not, and a ClientHello's SNI and ALPN list —
// for the filter chain match (transport_protocol, server_names,
// application_protocols).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpukit::mesh {

struct ClientHello {
  enum class Result { kNeedMore, kTls, kNotTls };
  std::string sni;                // server_name (host_name), lower-cased
  std::vector<std::string> alpn;  // application_layer_protocol_negotiation, in the client's order
};

// Envoy reads at most this much of a ClientHello (TlsInspector.max_client_hello_size's default).
inline constexpr size_t kMaxClientHello = 16 * 1024;

// Parses the bytes a connection has sent so far. kNeedMore: a TLS record
// began but the ClientHello is not complete yet. A malformed hello is kTls
// with what was read (the handshake then refuses it).
ClientHello::Result parse_client_hello(const uint8_t* data, size_t size, ClientHello& out);

}  // namespace dpukit::mesh
