// The non-template half of the attach client library (dpukit/mesh_attach.h).
#include "dpukit/mesh_attach.h"

namespace dpukit::mesh::attach {

namespace detail {

ShmSocketState::ShmSocketState(const asio::any_io_executor& ex)
    : executor(ex), readable(ex), writable(ex), socket(ex), connecting(ex) {}  // opened only to connect

namespace {
int dup_or_throw(int fd) {
  int d = ::dup(fd);
  if (d < 0) throw_errno("attach: dup");
  return d;
}
}  // namespace

void ShmSocketState::start(ShmStream s, const std::shared_ptr<ShmSocketState>& self) {
  stream.emplace(std::move(s));
  readable.assign(dup_or_throw(stream->readable_fd()));
  writable.assign(dup_or_throw(stream->writable_fd()));
  socket.assign(dup_or_throw(stream->socket_fd()));
  open = true;
  // After the handshake the peer sends nothing on the socket: readable means
  // it hung up. Waiting operations are woken to report it.
  socket.async_wait(asio::posix::descriptor_base::wait_read,
                    [weak = std::weak_ptr<ShmSocketState>(self)](const error_code& ec) {
                      auto st = weak.lock();
                      if (ec || !st || st->closed) return;
                      st->peer_gone = true;
                      error_code ignored;
                      st->readable.cancel(ignored);
                      st->writable.cancel(ignored);
                    });
}

void ShmSocketState::close() {
  if (closed) return;
  closed = true;
  open = false;
  error_code ignored;
  readable.close(ignored);
  writable.close(ignored);
  socket.close(ignored);
  connecting.close(ignored);
  if (stream) stream->close();
}

error_code error_of(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const ChannelError*>(&e)) {
    switch (ce->kind()) {
      case ChannelError::Kind::kPeerClosed: return asio::error::broken_pipe;
      case ChannelError::Kind::kPeerGone: return asio::error::connection_reset;
      case ChannelError::Kind::kProtocol: return asio::error::connection_refused;
      case ChannelError::Kind::kSystem: return asio::error::fault;
    }
  }
  if (const auto* se = dynamic_cast<const std::system_error*>(&e))
    return error_code(se->code().value(), boost::system::generic_category());
  return asio::error::invalid_argument;
}

}  // namespace detail

ShmAcceptor::ShmAcceptor(const asio::any_io_executor& ex, const std::string& path)
    : ex_(ex), listener_(path), lfd_(ex, ::dup(listener_.fd())) {
  lfd_.non_blocking(true);
}

void ShmAcceptor::close() {
  error_code ignored;
  lfd_.close(ignored);
  listener_.close();  // a proxy connecting now is refused at once, not left waiting for an ack
}

}  // namespace dpukit::mesh::attach
