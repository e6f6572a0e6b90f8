// HTTP/2 (cleartext, prior knowledge) to upstream hosts: one connection per
// worker per host, as Envoy, with every stream to that host multiplexed on it.
// A cluster speaks it when its typed_extension_protocol_options choose
// explicit_http_config.http2_protocol_options.
#pragma once

#include <nghttp2/nghttp2.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "dataplane/worker.h"
#include "http2/nghttp2_util.h"

namespace dpukit::mesh {

// What an upstream stream reports to the downstream stream that opened it.
struct H2UpstreamUser {
  using Failure = UpstreamConn::User::Failure;
  virtual ~H2UpstreamUser() = default;
  // The response head (1xx heads are skipped); `end_stream`: no body or trailers follow.
  virtual void h2up_head(http::ResponseHead& head, bool end_stream) = 0;
  // Body bytes: the user calls H2UpstreamConn::consume once it passed them on (flow control).
  virtual void h2up_data(std::string_view data) = 0;
  virtual void h2up_trailers(http::HeaderList& trailers) = 0;
  virtual void h2up_end() = 0;  // the response ended
  virtual void h2up_failed(Failure f) = 0;
  virtual void h2up_sent(size_t n) = 0;  // n request body bytes left in DATA frames
};

class H2UpstreamConn : public std::enable_shared_from_this<H2UpstreamConn> {
 public:
  H2UpstreamConn(Worker& w, std::shared_ptr<ClusterRuntime> cluster, std::shared_ptr<Host> host);
  ~H2UpstreamConn();
  H2UpstreamConn(const H2UpstreamConn&) = delete;
  H2UpstreamConn& operator=(const H2UpstreamConn&) = delete;

  void connect();
  // Opens a stream for `head`; the body follows through send_body/end_body
  // unless `end_stream`. Returns the stream id, or -1 (the user gets nothing).
  int32_t open_stream(const http::RequestHead& head, bool end_stream, H2UpstreamUser* user);
  void send_body(int32_t id, std::string_view data);
  void end_body(int32_t id, const http::HeaderList* trailers);
  // Response bytes the user passed on: the window opens again.
  void consume(int32_t id, size_t n);
  // The user leaves: no more events, and RST_STREAM(CANCEL) when `cancel`
  // (without it, a stream that ended both ways just finishes sending).
  void abandon(int32_t id, bool cancel = true);
  // Takes new streams: not failed, no GOAWAY received.
  bool usable() const { return !closed_ && !goaway_; }
  Host& host() { return *host_; }
  // The connection's local address once connected, for the access log ("" before).
  std::string local_address();

 private:
  struct Stream {
    H2UpstreamUser* user = nullptr;
    std::vector<http::Header> block;  // the header block being received
    size_t block_bytes = 0;
    h2::BodyQueue out;                // request body for the data source
    bool head_seen = false, ended = false;
  };
  static int on_header(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t, const uint8_t*, size_t, uint8_t,
                       void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_data(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int on_stream_close(nghttp2_session*, int32_t, uint32_t, void*);
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*, nghttp2_data_source*, void*);
  Stream* stream(int32_t id);
  void do_read();
  void flush();
  void want_flush();
  void fail(H2UpstreamUser::Failure f);
  void close();
  // connection_keepalive: a PING after `interval` (jittered), the connection
  // failed when its ACK has not come within `timeout`, as Envoy's codec.
  void arm_keepalive();

  Worker& w_;
  std::shared_ptr<ClusterRuntime> cluster_;
  std::shared_ptr<Host> host_;
  ServiceStream sock_;  // TCP, a Unix socket, or shared-memory rings
  asio::steady_timer timer_;
  asio::steady_timer keepalive_;
  bool awaiting_ping_ack_ = false;
  nghttp2_session* ng_ = nullptr;
  std::unordered_map<int32_t, Stream> streams_;
  ReadBuffer in_;
  WriteQueue out_;
  std::string local_address_;  // read once, when first asked after connecting
  bool connected_ = false, closed_ = false, goaway_ = false, reading_ = false, flush_posted_ = false;
  bool in_ng_ = false;  // inside nghttp2 (mem_recv / mem_send): no re-entry
};

// The worker's HTTP/2 upstream connections, one per host.
class H2UpstreamPool {
 public:
  // The host's connection, or a new one (through the cluster's connection
  // circuit breaker: nullptr and `overflow` when it refuses).
  std::shared_ptr<H2UpstreamConn> get(Worker& w, const std::shared_ptr<ClusterRuntime>& cluster,
                                      const std::shared_ptr<Host>& host, bool& overflow);
  void forget(const H2UpstreamConn* conn);

 private:
  std::unordered_map<const Host*, std::shared_ptr<H2UpstreamConn>> conns_;
};

H2UpstreamPool& h2_upstream_pool(Worker& w);

}  // namespace dpukit::mesh
