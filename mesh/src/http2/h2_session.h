// HTTP/2 cleartext (h2c, prior knowledge) for downstream clients: one
// nghttp2 server session per connection, each stream run through the same
// processing modules as an HTTP/1.1 request (dataplane/l7_chain.h) and sent
// to an HTTP/1.1 or HTTP/2 upstream, bodies streamed both ways under HTTP/2
// flow control.
#pragma once

#include <string_view>

#include "dataplane/worker.h"

namespace dpukit::mesh {

// Takes over a connection of a listener whose connection manager serves
// HTTP/2 (codec_type HTTP2, or AUTO and the client preface arrived).
// `first_bytes`: what the HTTP/1.1 session read before it handed the socket over.
void start_h2_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener, std::string_view first_bytes);

}  // namespace dpukit::mesh
