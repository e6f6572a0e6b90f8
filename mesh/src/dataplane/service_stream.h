// A connection to a service (an upstream host): a socket (TCP or a Unix
// socket), or socket direct — the service's attach point reached over
// shared-memory rings (dpukit/mesh_attach.h); over a socket, the cluster's
// TLS transport socket may run on top (start_tls). The HTTP upstream
// connections, the TCP proxy and the health checker use it, so none knows
// which one it has.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <optional>

#include "config/bootstrap.h"
#include "dataplane/loop_dilation.h"
#include "dpukit/mesh_attach.h"
#include "tls/tls_stream.h"

namespace dpukit::mesh {

namespace asio = boost::asio;
using Protocol = asio::generic::stream_protocol;
using Socket = Protocol::socket;

// The socket address of a host (throws for a STRICT_DNS name not resolved yet).
Protocol::endpoint endpoint_of(const config::Address& a);

class ServiceStream {
 public:
  using executor_type = asio::any_io_executor;

  explicit ServiceStream(const executor_type& ex) : sock_(ex) {}

  executor_type get_executor() { return sock_.get_executor(); }
  bool is_open() const { return shm_ ? shm_->is_open() : sock_.is_open(); }
  bool attached() const { return shm_.has_value(); }
  void close() {
    boost::system::error_code ignored;
    if (tls_) tls_->shutdown_now();
    sock_.close(ignored);
    if (shm_) shm_->close();
  }
  // TLS over the connected socket: `ssl` is owned from here on; the caller runs tls()->async_handshake.
  void start_tls(SSL* ssl) { tls_ = std::make_unique<TlsStream>(sock_, ssl); }
  TlsStream* tls() { return tls_.get(); }
  // The half-close (the TCP proxy passes one on): close_notify first over TLS.
  void shutdown_send() {
    boost::system::error_code ignored;
    if (tls_) {
      tls_->shutdown_send();
    } else if (!shm_) {
      pay_before_write();
      sock_.shutdown(Socket::shutdown_send, ignored);
    }
  }
  int native_handle() { return sock_.native_handle(); }

  // Connects to `a`; completion void(error_code). TCP gets TCP_NODELAY.
  template <typename Token>
  auto async_connect(const config::Address& a, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler, const config::Address& addr) {
          if (addr.shm_attach) {
            // Made only here: a socket connection carries no shared-memory state.
            shm_.emplace(sock_.get_executor());
            shm_->async_connect(addr.pipe_path, std::move(handler));
            return;
          }
          Protocol::endpoint ep;
          try {
            ep = endpoint_of(addr);
          } catch (const std::exception&) {
            // A STRICT_DNS name that did not resolve to an address yet.
            asio::post(sock_.get_executor(), [h = std::move(handler)]() mutable { h(asio::error::host_not_found); });
            return;
          }
          sock_.async_connect(ep, [this, tcp = !addr.is_pipe(), h = std::move(handler)](
                                      const boost::system::error_code& ec) mutable {
            if (!ec && tcp) {
              int one = 1;
              ::setsockopt(sock_.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            }
            h(ec);
          });
        },
        token, a);
  }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (shm_) shm_->async_read_some(b, std::move(handler));
          else if (tls_) tls_->async_read_some(b, std::move(handler));
          else sock_.async_read_some(b, std::move(handler));
        },
        token, buffers);
  }

  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (!tls_) pay_before_write();  // TLS pays before its records go out
          if (shm_) shm_->async_write_some(b, std::move(handler));
          else if (tls_) tls_->async_write_some(b, std::move(handler));
          else sock_.async_write_some(b, std::move(handler));
        },
        token, buffers);
  }

 private:
  Socket sock_;
  std::optional<attach::ShmSocket> shm_;  // socket direct: the service's attach point
  std::unique_ptr<TlsStream> tls_;        // after sock_: it refers to it
};

}  // namespace dpukit::mesh
