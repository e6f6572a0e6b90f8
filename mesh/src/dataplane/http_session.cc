// The HTTP/1.1 codec for one downstream connection, run to completion on
// its worker: connection -> parser -> the router stream (filter, router and
// load balancer, Algorithm 1; dataplane/router_stream.h) -> deparser ->
// upstream, and the response back through the parser and deparser. Requests
// on a connection are served one at a time (pipelined requests wait in the
// read buffer); bodies stream in both directions with back-pressure and are
// never held whole. In the pipelined model the router stream's modules run
// on the pipeline's stage threads. A request's timers and local replies are
// its ActiveStream's (dataplane/active_stream.h), as an HTTP/2 stream's are.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "dataplane/active_stream.h"
#include "dataplane/l7_chain.h"
#include "dataplane/pipeline.h"
#include "dataplane/router_stream.h"
#include "dataplane/worker.h"
#include "dpukit/core/log.h"
#include "http2/h2_headers.h"
#include "http2/h2_session.h"

namespace dpukit::mesh {

namespace {

// The read buffer starts at kSmallReadChunk (a request head), doubles up to
// kReadChunk while reads fill it (a large body), and goes back between
// requests (ReadBuffer: an idle connection holds little).
constexpr size_t kSmallReadChunk = 4 * 1024;
constexpr size_t kReadChunk = 64 * 1024;

class HttpSession : public std::enable_shared_from_this<HttpSession>,
                    public http::RequestEvents,
                    public RouterDownstream,
                    public ActiveStreamCodec,
                    public ConnectionIdleTimer::Connection,
                    public DrainableConnection {
 public:
  HttpSession(Worker& w, DownstreamStream sock, const ListenerRuntime& lr)
      : w_(w), sock_(std::move(sock)), snapshot_(w.snapshot()), lr_(&lr), hcm_(lr.hcm.get()),
        stats_(hcm_->stats[w.id()]), parser_(hcm_->limits), in_(kSmallReadChunk), idle_(w, *this) {
    stats_->downstream_cx_total.inc();
    stats_->downstream_cx_active.add(1);
    drain_id_ = w_.track(this);
  }
  ~HttpSession() override {
    w_.untrack(drain_id_);
    if (stream_) stream_->router->detach();
    if (active_) active_->detach();
    stats_->downstream_cx_active.add(-1);
  }

  // ---- DrainableConnection ----
  const ListenerRuntime& served() const override { return *lr_; }
  bool served_by(const ListenerRuntime& successor) const override { return successor.hcm != nullptr; }
  // Envoy's drain of an HTTP/1.1 connection: the response in flight (or the
  // next one: on_head sees draining()) says Connection: close and the
  // connection closes after it. An idle one is left until the drain time
  // ends, as Envoy 1.40 leaves it: closing it now could cross a request already on the wire.
  void start_drain() override {
    if (!closed_ && stream_) stream_->keep_alive = false;
  }
  void drain_close() override {
    if (closed_) return;
    auto self = shared_from_this();
    close();
  }

  void start() {
    conn_ = downstream_facts(sock_, lr_->cfg->tls_inspector, hcm_->reads_identity);  // once per connection: x-forwarded-for, source_ip hashing, RBAC
    h2_sniff_ = hcm_->cfg->codec_type != config::HttpConnectionManager::Codec::kHttp1;
    arm_idle_timer();
    do_read();
  }

 private:
  // ---- the stream (one request and its response) ----
  struct Stream {
    std::shared_ptr<RouterStream> router;  // the request, its route and its upstream
    http::BodyEncoder resp_body;
    size_t resp_unreported = 0;  // response bytes taken over the buffer limit, reported sent once it drains
    bool request_complete = false, response_complete = false;
    bool keep_alive = true;
  };

  // ---- downstream reading ----
  void do_read() {
    if (reading_ || read_paused_ || closed_) return;
    if (!stream_) in_.shrink_if_empty(kSmallReadChunk);  // between requests
    // A head may need more than one read's room, up to the header limit (past it the parser fails).
    if (!in_.make_room(hcm_->limits.max_header_bytes + kReadChunk)) return;
    reading_ = true;
    sock_.async_read_some(in_.space(),
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                            self->reading_ = false;
                            if (self->closed_) return;
                            if (ec) {
                              self->on_downstream_closed();
                              return;
                            }
                            self->in_.grow_if_filled(n, kReadChunk);
                            self->in_.wpos += n;
                            if (self->h2_sniff_ && self->handed_to_h2()) return;
                            self->touch();
                            self->process_input();
                            self->do_read();
                          });
  }

  // codec_type HTTP2, or AUTO and the client preface (RFC 9113 §3.4): the
  // connection goes to the HTTP/2 session (http2/h2_session.h) with what was read.
  bool handed_to_h2() {
    auto sniff = h2::sniff_preface(in_.unread());
    if (sniff == h2::Sniff::kNeedMore) {
      do_read();
      return true;
    }
    bool h2_only = hcm_->cfg->codec_type == config::HttpConnectionManager::Codec::kHttp2;
    h2_sniff_ = false;
    if (sniff == h2::Sniff::kHttp1 && !h2_only) return false;
    closed_ = true;
    idle_.cancel();
    start_h2_session(w_, std::move(sock_), *lr_, in_.unread());
    return true;
  }

  void process_input() {
    while (!in_.empty() && !closed_ && !read_paused_ && !close_after_write_) {
      if (stream_ && stream_->request_complete) break;  // a pipelined request waits for this response
      // The parser is reset here, never inside its own callbacks (a stream may end within feed()).
      if (!stream_ && parser_.done()) parser_.reset();
      if (!active_) {  // a request's first byte: its timeouts start
        active_ = std::make_shared<ActiveStream>(w_, *hcm_, *stats_, *this, shared_from_this());
        active_->start();
      }
      if (!stream_) feed_start_ns_ = mono_ns();
      size_t used = parser_.feed(in_.unread(), *this);
      in_.consume(used);
      if (parser_.failure()) {
        protocol_error(*parser_.failure());
        return;
      }
      if (used == 0) break;
    }
  }

  void on_downstream_closed() {
    if (stream_ && !stream_->response_complete) {
      stream_->router->downstream_disconnected();
      if (stream_->request_complete || parser_.in_message()) stats_->downstream_cx_destroy_remote_active_rq.inc();
      if (!stream_->request_complete) stats_->downstream_rq_rx_reset.inc();
    }
    close();
  }

  // ---- RequestEvents (the parser module's output) ----
  void on_head(http::RequestHead& head) override {
    int64_t t_parsed = mono_ns();
    w_.modules().add(Module::kParser, static_cast<uint64_t>(t_parsed - feed_start_ns_));
    take_newest_config(w_.snapshot(), w_.id(), snapshot_, lr_, hcm_, stats_);
    if (head.version == 10 && !http10_allowed(head)) return;
    stream_.emplace();
    Stream& s = *stream_;
    // No upgrade is configured (the filter refuses it, 403): the bytes after
    // the request may be the other protocol's, so the connection closes after
    // the answer, as Envoy's does.
    s.keep_alive = head.keep_alive && !head.upgrade && !w_.draining(drain_id_);
    answer_expect_continue(head);
    stats_->downstream_rq_total.inc();
    stats_->downstream_rq_active.add(1);
    // A configuration that arrived after the connection opened may have brought an RBAC filter.
    if (!conn_->identity && hcm_->reads_identity) conn_ = downstream_facts(sock_, lr_->cfg->tls_inspector, true);
    const std::string_view protocol = head.version == 10 ? "HTTP/1.0" : "HTTP/1.1";
    s.router = std::make_shared<RouterStream>(w_, snapshot_, *lr_, *stats_, std::move(head), conn_, *this);
    s.router->info().protocol = protocol;
    active_->headers_done(s.router, *hcm_, *stats_);
    // In the pipelined model the head goes round the stages (decided() when
    // back); the connection stays alive meanwhile.
    if (s.router->decide(w_.pipeline())) in_stage_self_ = shared_from_this();
  }

  // http_protocol_options: an HTTP/1.0 request is 426 unless accept_http_10,
  // and one without a Host takes default_host_for_http_10 or is 400 (Envoy's
  // codec rules). False when the connection was answered and closes.
  bool http10_allowed(http::RequestHead& head) {
    const auto& cfg = *hcm_->cfg;
    if (!cfg.accept_http_10) {
      protocol_error({426, "HTTP/1.0 without http_protocol_options.accept_http_10"});
      return false;
    }
    if (head.host.empty()) {
      if (cfg.default_host_for_http_10.empty()) {
        protocol_error({400, "HTTP/1.0 without Host or default_host_for_http_10"});
        return false;
      }
      head.host = cfg.default_host_for_http_10;
    }
    return true;
  }

  // Expect: 100-continue is answered here and not forwarded: Envoy's default
  // (proxy_100_continue false), so a client that waits for the 100 sends its
  // body at once. An HTTP/1.0 client gets no 1xx (RFC 9110 §15.2), and its
  // expectation is not passed on either (§10.1.1: ignored).
  void answer_expect_continue(http::RequestHead& head) {
    bool removed = false;
    std::erase_if(head.headers.fields, [&](const http::Header& h) {
      bool hit = http::iequals(h.name, "expect") && http::iequals(h.value, "100-continue");
      removed = removed || hit;
      return hit;
    });
    if (!removed || !head.expect_continue) return;
    out_.pending.append("HTTP/1.1 100 Continue\r\n\r\n");
    count_downstream_status(100);
    flush();
  }

  void on_body(std::string_view data) override {
    if (!stream_ || !stream_->router->wants_body()) return;
    RouterStream& r = *stream_->router;
    r.decode_data(data);
    // Back-pressure: the upstream (or, without one yet, the router's buffer) holds enough.
    if (r.request_queued() > lr_->cfg->per_connection_buffer_limit_bytes) read_paused_ = true;
  }

  void on_complete() override {
    if (!stream_) return;
    Stream& s = *stream_;
    s.request_complete = true;
    active_->request_done();
    if (s.response_complete) {  // a local reply, or an upstream that answered before the body ended
      finish_stream();
      return;
    }
    s.router->decode_end(nullptr);
  }

  // ---- RouterDownstream: the router stream's calls ----
  void decided() override {
    auto self = std::move(in_stage_self_);
    if (closed_ || !stream_) return;
    if (refused_in_stage_) {
      http::ParseFailure f = std::move(*refused_in_stage_);
      refused_in_stage_.reset();
      refuse(f);
      return;
    }
    active_->decided();
    if (closed_ || !stream_) return;
    process_input();
    do_read();
  }

  size_t request_buffer_limit() const override { return lr_->cfg->per_connection_buffer_limit_bytes; }

  // The upstream took the body so far: reading resumes if it waited (from a
  // posted handler: this may come from inside the parser's feed).
  void request_drained() override {
    if (!read_paused_ || !stream_ || stream_->router->in_stage() || stream_->router->local_reply()) return;
    read_paused_ = false;
    read_more_soon();
  }

  // Parses what is buffered and reads on, from a handler of its own.
  void read_more_soon() {
    asio::post(w_.io(), [self = shared_from_this()] {
      if (self->closed_) return;
      self->process_input();
      self->do_read();
    });
  }

  void encode_headers(http::ResponseHead& h, bool) override {
    Stream& s = *stream_;
    const http::RequestHead& req = s.router->head();
    int64_t t0 = mono_ns();
    bool head_req = req.method == "HEAD";
    // An HTTP/1.0 client reads a body of unknown length until we close.
    if (!head_req && req.version != 11 && !h.content_length) s.keep_alive = false;
    s.resp_body = head_req ? http::BodyEncoder{} : http::response_body_encoder(h, req.version);
    // A response that ends the connection closes it only once all of it was
    // written (finish_stream): its body may still be on its way from the upstream.
    http::write_response_head(h, s.keep_alive, req.version, out_.pending);
    w_.modules().add(Module::kDeparser, static_cast<uint64_t>(mono_ns() - t0));
    count_downstream_status(h.status);
    flush();
  }

  void encode_data(std::string_view d) override {
    Stream& s = *stream_;
    s.resp_body.data(d, out_.pending);
    flush();
    if (out_.size() > lr_->cfg->per_connection_buffer_limit_bytes) {  // back-pressure
      s.router->pause_response();
      s.resp_unreported += d.size();
    } else {
      s.router->response_sent(d.size());
    }
  }

  void encode_trailers(http::HeaderList&) override {}  // an HTTP/1.1 client gets no trailers (as from HTTP/1.1 upstreams)

  void encode_end() override {
    stream_->resp_body.end(out_.pending);
    flush();
  }

  void reset_stream() override { close(); }

  void response_done() override {
    Stream& s = *stream_;
    s.response_complete = true;
    if (s.request_complete) {
      finish_stream();
    } else {
      close_after_write_ = true;  // answered before the request ended: the rest of it cannot be framed
      flush();
    }
  }

  void count_downstream_status(unsigned status) {
    stats_->downstream_rq_xx[status_class(status)].inc();
  }

  // ---- local replies ----
  void send_local_reply(http::ResponseHead& h, std::string_view body) override {
    Stream& s = *stream_;
    const http::RequestHead& req = s.router->head();
    if (!h.content_length) h.content_length = body.size();  // a gRPC reply: framed as having no body
    // A request whose body is still arriving cannot be followed by another on this connection.
    if (!s.request_complete && (req.content_length.value_or(0) > 0 || req.chunked)) s.keep_alive = false;
    if (!s.keep_alive) close_after_write_ = true;
    http::write_response_head(h, s.keep_alive, req.version, out_.pending);
    out_.pending.append(body);
    count_downstream_status(h.status);
    s.response_complete = true;
    flush();
    if (s.request_complete) finish_stream();
  }

  void protocol_error(const http::ParseFailure& f) {
    stats_->downstream_cx_protocol_error.inc();
    refuse(f);
  }

  // A request that cannot go on: its status and the connection closed. While
  // its head is away in the pipeline's stages the answer waits for it to come
  // back (stage_done), so the client gets it in either execution model.
  void refuse(const http::ParseFailure& f) {
    if (stream_ && stream_->router->in_stage()) {
      refused_in_stage_ = f;
      read_paused_ = true;
      return;
    }
    if (stream_ && stream_->router->response_started()) {
      close();
      return;
    }
    final_reply(f.status, http::reason_phrase(f.status), "http1.codec_error", response_flag::kDownstreamProtocolError);
  }

  // An answer that ends the stream, if any, and then the connection (a bad
  // request, a slow client); `details` and `flags` for the access log.
  void final_reply(unsigned status, std::string_view body, std::string_view details, uint32_t flags) {
    LocalReply reply = local_reply(status, body, nullptr, false);
    if (stream_) {
      StreamInfo& info = stream_->router->info();
      info.response_code = status;
      info.response_code_details = details;
      info.response_flags |= flags;
      info.bytes_sent += reply.body.size();
      release_stream();
      stream_.reset();
    } else {
      log_codec_reply(*hcm_, conn_.get(), "HTTP/1.1", status, reply.body.size(), details, flags,
                      active_ ? active_->start_ns() : 0);
      end_active();
    }
    http::write_response_head(reply.head, false, out_.pending);
    out_.pending.append(reply.body);
    count_downstream_status(status);
    close_after_write_ = true;
    read_paused_ = true;
    flush();
  }

  // Gives back what the stream holds (the router stream's upstream and slots, its timers) and ends it.
  void release_stream() {
    stream_->router->detach();
    stats_->downstream_rq_active.add(-1);
    end_active();
  }

  void end_active() {
    if (active_) std::exchange(active_, nullptr)->detach();
  }

  void finish_stream() {
    release_stream();
    bool keep = stream_->keep_alive;
    stream_.reset();
    if (!keep && w_.draining(drain_id_)) stats_->downstream_cx_drain_close.inc();
    if (!keep) {
      close_after_write_ = true;
      read_paused_ = true;  // nothing after a "Connection: close" request is served (RFC 9112 §9.6)
      flush();
      return;
    }
    if (read_paused_ && !close_after_write_) read_paused_ = false;
    arm_idle_timer();  // the connection's idle_timeout again
    read_more_soon();  // the next pipelined request, if it is already here
  }

  // ---- ActiveStreamCodec: what a request's timers decided ----
  void timed_out_in_head(unsigned status, std::string_view body, std::string_view details) override {
    final_reply(status, body, details, 0);
  }
  void timed_out(bool reset) override {
    if (reset) {
      close();
      return;
    }
    close_after_write_ = true;  // the local reply that follows is the connection's last response
  }

  void touch() {
    idle_.touch();
    if (active_) active_->touch();
  }

  // ---- ConnectionIdleTimer::Connection ----
  void arm_idle_timer() { idle_.arm(hcm_->cfg->idle_timeout, shared_from_this()); }
  bool serving() const override { return stream_.has_value(); }  // a head in progress is not (as before)
  bool closed() const override { return closed_; }
  void idle_timed_out() override {
    stats_->downstream_cx_idle_timeout.inc();
    close();
  }

  // ---- downstream writing ----
  // Writes what is pending once the handler that queued it is done: a
  // response's head and body (often one upstream read) go out in one send,
  // as Envoy writes a connection's buffer once per event, and what the
  // handler does after them (the access log line) is not between the two.
  void flush() {
    if (closed_ || out_.writing || write_posted_) return;
    if (out_.pending.empty()) {
      if (close_after_write_) close();
      return;
    }
    write_posted_ = true;
    asio::post(w_.io(), [self = shared_from_this()] {
      self->write_posted_ = false;
      self->write_pending();
    });
  }

  void write_pending() {
    if (closed_ || out_.writing) return;
    if (out_.pending.empty()) {
      if (close_after_write_) close();
      return;
    }
    out_.start(sock_, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (self->closed_) return;
      if (ec) {
        self->on_downstream_closed();
        return;
      }
      self->touch();
      if (self->stream_ && self->out_.size() <= self->lr_->cfg->per_connection_buffer_limit_bytes) {
        Stream& s = *self->stream_;
        if (s.resp_unreported) s.router->response_sent(std::exchange(s.resp_unreported, 0));
        s.router->resume_response();
      }
      self->flush();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    auto self = std::move(in_stage_self_);  // a request in the stages: the router stream drops it when back
    if (stream_) {
      release_stream();
      stream_.reset();
    }
    end_active();
    idle_.cancel();
    boost::system::error_code ignored;
    sock_.shutdown(Socket::shutdown_both, ignored);
    sock_.close(ignored);
  }

  Worker& w_;
  DownstreamStream sock_;
  std::shared_ptr<const Snapshot> snapshot_;
  const ListenerRuntime* lr_;
  const HcmRuntime* hcm_;
  HttpStats* stats_;
  http::RequestParser parser_;
  ReadBuffer in_;
  WriteQueue out_;
  std::shared_ptr<const DownstreamFacts> conn_;
  ConnectionIdleTimer idle_;
  std::shared_ptr<ActiveStream> active_;  // from a request's first byte to its end
  std::optional<Stream> stream_;          // from its head
  std::shared_ptr<HttpSession> in_stage_self_;
  std::optional<http::ParseFailure> refused_in_stage_;  // refuse() while the head was in the stages
  int64_t feed_start_ns_ = 0;
  bool reading_ = false, read_paused_ = false, closed_ = false, close_after_write_ = false;
  bool write_posted_ = false;  // flush() posted the write of what is pending
  bool h2_sniff_ = false;  // the first bytes may be the HTTP/2 preface
  uint64_t drain_id_ = 0;  // with the worker's drain manager
};

}  // namespace

void start_http_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener) {
  std::make_shared<HttpSession>(w, std::move(sock), listener)->start();
}

}  // namespace dpukit::mesh
