// The TLS record layer over a socket, for one connection: OpenSSL reads and
// writes records through memory BIOs and this class moves the bytes between
// those BIOs and the socket on the worker's event loop. So the handshake and
// every record's crypto run on the worker's thread (the dpu place), and no
// other thread or kernel TLS is involved. Asio's stream calls (async_read_some,
// async_write_some) on top, so codecs take it as they take a socket; at most
// one read and one write may be outstanding, as for a socket.
#pragma once

#include <openssl/ssl.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dpukit::mesh {

namespace asio = boost::asio;

class TlsStream {
 public:
  using Socket = asio::generic::stream_protocol::socket;
  using Handler = std::function<void(const boost::system::error_code&, size_t)>;

  // Takes `ssl` (owned from here on); the socket must outlive this object.
  TlsStream(Socket& sock, SSL* ssl);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  SSL* ssl() const { return ssl_; }
  // Runs the handshake (SSL_accept or SSL_connect, as set on the SSL). A
  // failure's alert is sent before `done` runs.
  void async_handshake(std::function<void(const boost::system::error_code&)> done);
  // A TLS failure's error_code is in Asio's SSL category (the OpenSSL error);
  // the peer's close_notify, or a TCP end without one, is asio::error::eof.
  void read(void* data, size_t size, Handler h);
  void write(const void* data, size_t size, Handler h);
  // close_notify, then the TCP half-close once every record before it is out.
  void shutdown_send();
  // The same, at once and best effort (the connection closes next).
  void shutdown_now();

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          asio::mutable_buffer first = first_buffer<asio::mutable_buffer>(b);
          read(first.data(), first.size(), wrap(std::move(handler)));
        },
        token, buffers);
  }
  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          asio::const_buffer first = first_buffer<asio::const_buffer>(b);
          write(first.data(), first.size(), wrap(std::move(handler)));
        },
        token, buffers);
  }

 private:
  template <typename B, typename Seq>
  static B first_buffer(const Seq& seq) {
    for (auto it = asio::buffer_sequence_begin(seq); it != asio::buffer_sequence_end(seq); ++it)
      if (B b(*it); b.size() > 0) return b;
    return B();
  }
  // Asio's handlers may be move-only; std::function needs a copyable one.
  template <typename H>
  static Handler wrap(H handler) {
    auto p = std::make_shared<H>(std::move(handler));
    return [p](const boost::system::error_code& ec, size_t n) { (*p)(ec, n); };
  }

  void do_handshake();
  boost::system::error_code ssl_error(int ret);
  // Moves what OpenSSL wrote into the outgoing bytes and starts the socket write.
  void flush();
  void fill_then(std::function<void(const boost::system::error_code&)> then);
  void post(Handler h, boost::system::error_code ec, size_t n);

  Socket& sock_;
  SSL* ssl_;
  BIO* rbio_;  // records from the network, for OpenSSL
  BIO* wbio_;  // records from OpenSSL, for the network
  std::vector<char> net_in_;
  std::string out_, out_in_flight_;
  bool writing_ = false, net_eof_ = false, reading_net_ = false, shut_after_flush_ = false, sent_close_ = false;
  bool wrote_ = false;  // the first write sends the deferred session tickets (send_deferred_tickets)
  boost::system::error_code write_error_;
  std::function<void(const boost::system::error_code&)> on_flushed_;  // the write or handshake waiting for its bytes
  std::function<void(const boost::system::error_code&)> handshake_done_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dpukit::mesh
