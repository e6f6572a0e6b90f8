// The downstream side of a connection, as the codecs (HTTP/1.1, HTTP/2) and
// the TCP proxy see it. Today a plain socket; the TLS transport socket
// (Envoy's envoy.transport_sockets.tls) makes it a stream that runs the
// handshake and record layer in the dpu place, behind the same calls:
// native_handle, async_read_some, async_write_some, shutdown and close.
#pragma once

#include "dataplane/service_stream.h"

namespace dpukit::mesh {

using DownstreamStream = Socket;

}  // namespace dpukit::mesh
