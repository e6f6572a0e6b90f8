// Socket direct (FlatProxy §IV): the client library with which a service
// attaches to the node proxy over shared-memory rings instead of a socket.
// An attach point is a Unix socket path; the proxy connects to it (an
// endpoint `pipe: {path}` whose lb_endpoint carries the metadata
// `filter_metadata: {dpukit.mesh: {attach: shm}}`), offers two byte rings in
// shared memory and their doorbells, and from then on the bytes of that
// connection move through the rings (core's ShmStream).
//
// For an Asio service, ShmAcceptor and ShmSocket stand where a TCP acceptor
// and socket stood: ShmSocket is an AsyncReadStream and AsyncWriteStream, so
// Boost.Beast and asio::async_read/async_write work on it unchanged. A plain
// threaded service uses core's ShmStreamListener and ShmStream::read/write_all.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "dpukit/core/shm_stream.h"

namespace dpukit::mesh::attach {

namespace asio = boost::asio;
using boost::system::error_code;

namespace detail {

// What a ShmSocket's operations share; every operation in flight keeps it alive.
struct ShmSocketState {
  explicit ShmSocketState(const asio::any_io_executor& ex);
  asio::any_io_executor executor;
  std::optional<ShmStream> stream;
  asio::posix::stream_descriptor readable, writable, socket;  // the stream's doorbells and socket (duplicates)
  asio::generic::seq_packet_protocol::socket connecting;     // the proxy side, until the offer is sent
  bool open = false, closed = false, peer_gone = false;

  // Takes the stream: duplicates its descriptors into the Asio ones and
  // watches the socket for the peer's hang-up.
  void start(ShmStream s, const std::shared_ptr<ShmSocketState>& self);
  void close();
  // Bytes into / from an Asio buffer sequence, without waiting.
  template <typename Buffers>
  size_t read_into(const Buffers& buffers) {
    size_t total = 0;
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
      asio::mutable_buffer b(*it);
      size_t n = stream->try_read(b.data(), b.size());
      total += n;
      if (n < b.size()) break;
    }
    return total;
  }
  template <typename Buffers>
  size_t write_from(const Buffers& buffers) {
    size_t total = 0;
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
      asio::const_buffer b(*it);
      size_t n = stream->try_write(b.data(), b.size());
      total += n;
      if (n < b.size()) break;
    }
    return total;
  }
};

// A ChannelError (or another exception of the stream) as an Asio error code.
error_code error_of(const std::exception& e);

// Completes an operation: posted when it would otherwise run inside the
// initiating call (Asio's rule), direct after a wait.
template <typename Self, typename... Args>
void finish(Self& self, bool waited, const asio::any_io_executor& ex, error_code ec, Args... args) {
  if (waited) {
    self.complete(ec, args...);
    return;
  }
  asio::post(ex, [self = std::move(self), ec, args...]() mutable { self.complete(ec, args...); });
}

// async_read_some (kRead) or async_write_some: moves what the ring allows
// now, else announces the wait and sleeps on the matching doorbell.
template <typename Buffers, bool kRead>
struct TransferOp {
  std::shared_ptr<ShmSocketState> st;
  Buffers buffers;
  bool waited = false;

  template <typename Self>
  void operator()(Self& self, error_code ec = {}) {
    auto done = [&](error_code e, size_t n) { finish(self, waited, st->executor, e, n); };
    if (waited) kRead ? st->stream->clear_readable() : st->stream->clear_writable();
    for (;;) {
      if (!st->open) return done(asio::error::bad_descriptor, 0);
      if (ec && ec != asio::error::operation_aborted) return done(ec, 0);
      // A peer that died (not one that closed in order) takes no more bytes.
      if (!kRead && st->peer_gone && !st->stream->peer_closed_in_order()) return done(asio::error::connection_reset, 0);
      size_t n = 0;
      try {
        if constexpr (kRead) n = st->read_into(buffers);
        else n = st->write_from(buffers);
      } catch (const std::exception& e) {
        return done(error_of(e), 0);
      }
      if (n > 0 || asio::buffer_size(buffers) == 0) return done({}, n);
      if (kRead && (st->stream->at_eof() || (st->peer_gone && st->stream->peer_closed_in_order())))
        return done(asio::error::eof, 0);
      if (kRead && st->peer_gone) return done(asio::error::connection_reset, 0);
      if (ec == asio::error::operation_aborted) return done(ec, 0);
      if (!(kRead ? st->stream->prepare_wait_readable() : st->stream->prepare_wait_writable())) continue;
      waited = true;
      // Both doorbells are eventfds: rung means readable.
      (kRead ? st->readable : st->writable).async_wait(asio::posix::descriptor_base::wait_read, std::move(self));
      return;
    }
  }
};

// The proxy side: connect the Unix socket, send the offer, wait for the ack.
struct ConnectOp {
  std::shared_ptr<ShmSocketState> st;
  std::string path;
  ShmStreamConfig config;
  int step = 0;

  template <typename Self>
  void operator()(Self& self, error_code ec = {});
};

// The service side: read the offer of an accepted connection, ack it.
struct HandshakeOp {
  std::shared_ptr<ShmSocketState> st;
  bool waited = false;

  template <typename Self>
  void operator()(Self& self, error_code ec = {});
};

}  // namespace detail

// One attached connection. While open it keeps one wait outstanding on its
// socket (to learn of the peer's hang-up at once), so io_context::run() does
// not return while a ShmSocket is open: close it, or run until a condition.
class ShmSocket {
 public:
  using executor_type = asio::any_io_executor;

  explicit ShmSocket(const executor_type& ex) : st_(std::make_shared<detail::ShmSocketState>(ex)) {}
  ShmSocket(ShmSocket&&) noexcept = default;
  ShmSocket& operator=(ShmSocket&&) noexcept = default;
  ~ShmSocket() {
    if (st_) st_->close();
  }

  executor_type get_executor() const { return st_->executor; }
  bool is_open() const { return st_ && st_->open; }
  // Closes in order: the peer reads EOF after the bytes already sent.
  void close() {
    if (st_) st_->close();
  }
  void shutdown_send() {
    if (is_open()) st_->stream->shutdown_write();
  }
  // The peer's process, as the kernel reported it at the handshake.
  pid_t peer_pid() const { return is_open() ? st_->stream->peer_pid() : 0; }

  // The proxy side: attach to the service at `path`. Completion: void(error_code).
  template <typename Token>
  auto async_connect(const std::string& path, Token&& token, const ShmStreamConfig& config = {}) {
    return asio::async_compose<Token, void(error_code)>(detail::ConnectOp{st_, path, config}, token, st_->executor);
  }
  // The service side, on a socket from ShmAcceptor: take the proxy's offer.
  // Completion: void(error_code); a bad offer fails this connection only.
  template <typename Token>
  auto async_handshake(Token&& token) {
    return asio::async_compose<Token, void(error_code)>(detail::HandshakeOp{st_}, token, st_->executor);
  }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_compose<Token, void(error_code, size_t)>(detail::TransferOp<MutableBuffers, true>{st_, buffers},
                                                                token, st_->executor);
  }
  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_compose<Token, void(error_code, size_t)>(detail::TransferOp<ConstBuffers, false>{st_, buffers},
                                                                token, st_->executor);
  }

 private:
  friend class ShmAcceptor;
  std::shared_ptr<detail::ShmSocketState> st_;
};

// The service's attach point: listens at a Unix socket path (a stale socket
// file there is replaced; the file is removed when the acceptor goes).
class ShmAcceptor {
 public:
  ShmAcceptor(const asio::any_io_executor& ex, const std::string& path);
  const std::string& path() const { return listener_.path(); }
  asio::any_io_executor get_executor() const { return ex_; }
  void close();

  // Completion: void(error_code, ShmSocket); call async_handshake on the
  // socket next. The socket runs on `socket_ex` (another loop's, say).
  template <typename Token>
  auto async_accept(const asio::any_io_executor& socket_ex, Token&& token) {
    return asio::async_compose<Token, void(error_code, ShmSocket)>(AcceptOp{this, socket_ex}, token, ex_);
  }
  template <typename Token>
  auto async_accept(Token&& token) {
    return async_accept(ex_, std::forward<Token>(token));
  }

 private:
  struct AcceptOp {
    ShmAcceptor* acceptor;
    asio::any_io_executor socket_ex;
    bool waited = false;
    template <typename Self>
    void operator()(Self& self, error_code ec = {}) {
      if (ec) return self.complete(ec, ShmSocket(socket_ex));
      if (waited) {
        int error = 0;
        UniqueFd fd = acceptor->listener_.try_accept(error);
        if (fd) {
          ShmSocket sock(socket_ex);
          sock.st_->socket.assign(fd.release());
          return self.complete(error_code{}, std::move(sock));
        }
        // A real failure (out of descriptors, say) goes to the caller, who
        // backs off; waiting again would spin on the same pending connection.
        if (error != 0) return self.complete(error_code(error, boost::system::generic_category()), ShmSocket(socket_ex));
      }
      waited = true;
      acceptor->lfd_.async_wait(asio::posix::descriptor_base::wait_read, std::move(self));
    }
  };
  asio::any_io_executor ex_;
  ShmStreamListener listener_;
  asio::posix::stream_descriptor lfd_;
};

// ---- operations that need ShmSocketState complete ----

template <typename Self>
void detail::ConnectOp::operator()(Self& self, error_code ec) {
  switch (step) {
    case 0: {
      step = 1;
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      if (path.empty() || path.size() >= sizeof sa.sun_path)
        return finish(self, false, st->executor, error_code(asio::error::invalid_argument));
      std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
      asio::generic::seq_packet_protocol::endpoint ep(&sa, sizeof sa);
      error_code open_ec;
      st->connecting.open(asio::generic::seq_packet_protocol(AF_UNIX, 0), open_ec);
      if (open_ec) return finish(self, false, st->executor, open_ec);
      st->connecting.async_connect(ep, std::move(self));
      return;
    }
    case 1: {
      if (ec) return self.complete(ec);
      step = 2;
      try {
        UniqueFd fd(::dup(st->connecting.native_handle()));
        st->connecting.close(ec);
        st->stream.emplace(ShmStream::offer(std::move(fd), config));
        st->socket.assign(::dup(st->stream->socket_fd()));
      } catch (const std::exception& e) {
        return self.complete(error_of(e));
      }
      st->socket.async_wait(asio::posix::descriptor_base::wait_read, std::move(self));  // the ack
      return;
    }
    default: {
      if (ec) return self.complete(ec);
      try {
        st->stream->take_ack(std::chrono::milliseconds(0));
        ShmStream s = std::move(*st->stream);
        st->stream.reset();
        st->socket.close(ec);
        st->start(std::move(s), st);
      } catch (const std::exception& e) {
        return self.complete(error_of(e));
      }
      return self.complete(error_code{});
    }
  }
}

template <typename Self>
void detail::HandshakeOp::operator()(Self& self, error_code ec) {
  if (ec) return self.complete(ec);
  if (!st->socket.is_open()) return finish(self, waited, st->executor, error_code(asio::error::bad_descriptor));
  if (!waited) {
    waited = true;
    st->socket.async_wait(asio::posix::descriptor_base::wait_read, std::move(self));  // the offer
    return;
  }
  try {
    UniqueFd fd(::dup(st->socket.native_handle()));
    st->socket.close(ec);
    st->start(ShmStream::accept_offer(std::move(fd), std::chrono::milliseconds(0)), st);
  } catch (const std::exception& e) {
    return self.complete(error_of(e));
  }
  self.complete(error_code{});
}

}  // namespace dpukit::mesh::attach
