// The downstream side of a connection, as the codecs (HTTP/1.1, HTTP/2) and
// the TCP proxy see it: a plain socket, or the TLS transport socket's stream
// over it (Envoy's envoy.transport_sockets.tls), whose handshake and record
// layer run on the worker's thread, in the dpu place (tls/tls_stream.h).
// Both answer the same calls: native_handle, get_executor, is_open,
// async_read_some, async_write_some, shutdown and close.
#pragma once

#include <memory>

#include "dataplane/service_stream.h"
#include "tls/tls_stream.h"

namespace dpukit::mesh {

class DownstreamStream {
 public:
  using executor_type = Socket::executor_type;

  DownstreamStream(Socket&& sock) : sock_(std::make_unique<Socket>(std::move(sock))) {}  // NOLINT: plaintext
  // TLS over `sock`: `ssl` is owned from here on (the handshake is the caller's, async_handshake).
  DownstreamStream(Socket&& sock, SSL* ssl)
      : sock_(std::make_unique<Socket>(std::move(sock))), tls_(std::make_unique<TlsStream>(*sock_, ssl)) {}
  DownstreamStream(DownstreamStream&&) = default;
  DownstreamStream& operator=(DownstreamStream&&) = default;
  ~DownstreamStream() {
    // The record layer refers to the socket: it goes first.
    tls_.reset();
  }

  Socket::native_handle_type native_handle() { return sock_->native_handle(); }
  executor_type get_executor() { return sock_->get_executor(); }
  bool is_open() const { return sock_ && sock_->is_open(); }
  TlsStream* tls() { return tls_.get(); }
  Socket& socket() { return *sock_; }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
    return sock_->async_read_some(buffers, std::forward<Token>(token));
  }
  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<Token>(token));  // pays before its records go out
    pay_before_write();
    return sock_->async_write_some(buffers, std::forward<Token>(token));
  }
  // A TLS stream sends its close_notify first (the TCP proxy's half-close, or
  // a codec's close), as Envoy's SSL socket does.
  void shutdown(Socket::shutdown_type what, boost::system::error_code& ec) {
    if (tls_) {
      if (what == Socket::shutdown_send) {
        tls_->shutdown_send();  // the TCP half-close follows once the records before it are out
        return;
      }
      tls_->shutdown_now();
    }
    if (what != Socket::shutdown_receive) pay_before_write();  // a FIN can end a response (one framed by the close)
    sock_->shutdown(what, ec);
  }
  void close(boost::system::error_code& ec) { sock_->close(ec); }

 private:
  std::unique_ptr<Socket> sock_;  // on the heap: the record layer keeps its address across moves
  std::unique_ptr<TlsStream> tls_;
};

}  // namespace dpukit::mesh
