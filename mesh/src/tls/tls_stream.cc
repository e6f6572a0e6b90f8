#include "tls/tls_stream.h"

#include <openssl/err.h>
#include <sys/socket.h>

#include <boost/asio/ssl/error.hpp>

#include "dataplane/loop_dilation.h"
#include "tls/tls_context.h"

namespace dpukit::mesh {

namespace {
// One read from the socket: a full TLS record (16 KiB plus its overhead).
constexpr size_t kNetChunk = 16 * 1024 + 512;
// The most plaintext encrypted per write call: bounds the records queued for one write.
constexpr size_t kMaxWrite = 64 * 1024;
}  // namespace

TlsStream::TlsStream(Socket& sock, SSL* ssl) : sock_(sock), ssl_(ssl), net_in_(kNetChunk) {
  rbio_ = BIO_new(BIO_s_mem());
  wbio_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(rbio_, -1);  // empty means "wait for more", not the end
  SSL_set_bio(ssl_, rbio_, wbio_);
}

TlsStream::~TlsStream() {
  *alive_ = false;
  SSL_free(ssl_);  // frees both BIOs
}

void TlsStream::post(Handler h, boost::system::error_code ec, size_t n) {
  asio::post(sock_.get_executor(), [h = std::move(h), ec, n] { h(ec, n); });
}

boost::system::error_code TlsStream::ssl_error(int ret) {
  const int e = SSL_get_error(ssl_, ret);
  if (e == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  // A TCP end without close_notify: the end of the stream, as a socket says it.
  if (code == 0 || (e == SSL_ERROR_SSL && ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING))
    return net_eof_ ? boost::system::error_code(asio::error::eof) : boost::system::error_code(asio::error::connection_reset);
  return boost::system::error_code(static_cast<int>(code), asio::error::get_ssl_category());
}

void TlsStream::flush() {
  char* data = nullptr;
  const long pending = BIO_get_mem_data(wbio_, &data);
  if (pending > 0) {
    out_.append(data, static_cast<size_t>(pending));
    (void)BIO_reset(wbio_);
  }
  if (writing_) return;
  if (out_.empty()) {
    if (on_flushed_) std::exchange(on_flushed_, nullptr)(write_error_);
    if (shut_after_flush_) {
      shut_after_flush_ = false;
      boost::system::error_code ignored;
      sock_.shutdown(Socket::shutdown_send, ignored);
    }
    return;
  }
  if (write_error_) {  // the socket failed before: nothing more goes out
    out_.clear();
    if (on_flushed_) std::exchange(on_flushed_, nullptr)(write_error_);
    return;
  }
  writing_ = true;
  out_in_flight_.swap(out_);
  out_.clear();
  pay_before_write();  // the records' crypto and what they carry are paid for before they leave
  asio::async_write(sock_, asio::buffer(out_in_flight_),
                    [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec, size_t) {
                      if (alive.expired()) return;
                      writing_ = false;
                      out_in_flight_.clear();
                      if (ec) write_error_ = ec;
                      flush();
                    });
}

// Reads more records from the socket into OpenSSL, then `then(ec)`.
void TlsStream::fill_then(std::function<void(const boost::system::error_code&)> then) {
  if (net_eof_) {
    asio::post(sock_.get_executor(), [then = std::move(then)] { then(asio::error::eof); });
    return;
  }
  sock_.async_read_some(asio::buffer(net_in_), [this, then = std::move(then)](const boost::system::error_code& ec, size_t n) {
    if (ec == asio::error::eof) net_eof_ = true;
    if (n > 0) BIO_write(rbio_, net_in_.data(), static_cast<int>(n));
    // At the TCP end OpenSSL sees the BIO's end too, and tells a truncation from a close_notify.
    if (net_eof_) BIO_set_mem_eof_return(rbio_, 0);
    then(ec == asio::error::eof ? boost::system::error_code() : ec);
  });
}

void TlsStream::async_handshake(std::function<void(const boost::system::error_code&)> done) {
  handshake_done_ = std::move(done);
  do_handshake();
}

void TlsStream::do_handshake() {
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    flush();
    auto done = std::move(handshake_done_);
    asio::post(sock_.get_executor(), [done = std::move(done)] { done({}); });
    return;
  }
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ && !net_eof_) {
    flush();
    fill_then([this](const boost::system::error_code& ec) {
      if (ec) {
        std::exchange(handshake_done_, nullptr)(ec);
        return;
      }
      do_handshake();
    });
    return;
  }
  // Failed: the alert OpenSSL wrote goes out before the caller closes.
  const boost::system::error_code ec = ssl_error(r);
  on_flushed_ = [this, ec](const boost::system::error_code&) { std::exchange(handshake_done_, nullptr)(ec); };
  flush();
}

void TlsStream::read(void* data, size_t size, Handler h) {
  if (size == 0) {
    post(std::move(h), {}, 0);
    return;
  }
  size_t n = 0;
  ERR_clear_error();
  const int r = SSL_read_ex(ssl_, data, size, &n);
  flush();  // a KeyUpdate or a ticket may answer what was read
  if (r == 1) {
    post(std::move(h), {}, n);
    return;
  }
  if (SSL_get_error(ssl_, r) == SSL_ERROR_WANT_READ && !net_eof_) {
    fill_then([this, data, size, h = std::move(h)](const boost::system::error_code& ec) mutable {
      if (ec) {
        h(ec, 0);
        return;
      }
      read(data, size, std::move(h));
    });
    return;
  }
  post(std::move(h), ssl_error(r), 0);
}

void TlsStream::write(const void* data, size_t size, Handler h) {
  if (write_error_ || sent_close_) {
    post(std::move(h), write_error_ ? write_error_ : boost::system::error_code(asio::error::broken_pipe), 0);
    return;
  }
  if (size == 0) {
    post(std::move(h), {}, 0);
    return;
  }
  size = std::min(size, kMaxWrite);
  if (!wrote_) {
    wrote_ = true;
    send_deferred_tickets(ssl_);
  }
  size_t n = 0;
  ERR_clear_error();
  if (SSL_write_ex(ssl_, data, size, &n) != 1) {
    post(std::move(h), ssl_error(0), 0);
    return;
  }
  // Done once these records are on the socket: the caller's back-pressure, as with a socket.
  on_flushed_ = [h = std::move(h), n](const boost::system::error_code& ec) { h(ec, ec ? 0 : n); };
  flush();
}

void TlsStream::shutdown_send() {
  if (sent_close_) return;
  sent_close_ = true;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
  shut_after_flush_ = true;
  flush();
}

void TlsStream::shutdown_now() {
  if (!sent_close_ && SSL_is_init_finished(ssl_)) {
    sent_close_ = true;
    ERR_clear_error();
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  char* data = nullptr;
  const long pending = BIO_get_mem_data(wbio_, &data);
  // Only when no write is in flight: records must not interleave.
  if (!writing_ && out_.empty() && pending > 0 && sock_.is_open()) {
    pay_before_write();
    (void)::send(sock_.native_handle(), data, static_cast<size_t>(pending), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  (void)BIO_reset(wbio_);
}

}  // namespace dpukit::mesh
