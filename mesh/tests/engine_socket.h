// The crypto_engine transport socket as the tests write it in Envoy's YAML:
// Envoy's TLS socket wrapped (as Envoy's tap socket wraps one), its records'
// crypto on the engine or the cores.
#pragma once

#include <algorithm>
#include <string>

namespace dpukit::mesh::testing {

// The fields of a `transport_socket:` at `indent` spaces: the crypto_engine
// socket with `record_crypto` (ENGINE or CORES) around Envoy's TLS socket,
// whose typed_config is a `context` (DownstreamTlsContext or
// UpstreamTlsContext) with `fields` (lines of YAML as at indent 0).
inline std::string engine_socket(size_t indent, const std::string& record_crypto, const std::string& context,
                                 const std::string& fields) {
  const auto at = [](size_t n, const std::string& line) { return std::string(n, ' ') + line + "\n"; };
  std::string text = at(indent, "name: dpukit.transport_sockets.crypto_engine") + at(indent, "typed_config:") +
                     at(indent + 2, "\"@type\": type.googleapis.com/dpukit.mesh.v1.CryptoEngineTransportSocket") +
                     at(indent + 2, "record_crypto: " + record_crypto) + at(indent + 2, "transport_socket:") +
                     at(indent + 4, "name: envoy.transport_sockets.tls") + at(indent + 4, "typed_config:") +
                     at(indent + 6, "\"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3." + context);
  for (size_t start = 0; start < fields.size();) {
    const size_t end = std::min(fields.find('\n', start), fields.size());
    text += at(indent + 6, fields.substr(start, end - start));
    start = end + 1;
  }
  return text;
}

}  // namespace dpukit::mesh::testing
