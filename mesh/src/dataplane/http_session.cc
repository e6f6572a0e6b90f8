// The L7 chain for one downstream connection, run to completion on its
// worker: connection -> parser -> filter (local rate limit) -> router and
// load balancer (Algorithm 1) -> deparser -> upstream, and the response back
// through the parser and deparser. HTTP/1.1 requests on a connection are
// served one at a time (pipelined requests wait in the read buffer); bodies
// stream in both directions with back-pressure and are never held whole.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "dataplane/l7_chain.h"
#include "dataplane/pipeline.h"
#include "dataplane/worker.h"
#include "dpukit/core/log.h"
#include "http2/h2_headers.h"
#include "http2/h2_session.h"
#include "http2/h2_upstream.h"

namespace dpukit::mesh {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

// Envoy's texts for its local replies (dataplane/l7_chain.h, shared with HTTP/2).
constexpr const char* kConnectFailure = kReplyConnectFailure;
constexpr const char* kConnectTimeout = kReplyConnectTimeout;
constexpr const char* kUpstreamReset = kReplyUpstreamReset;
constexpr const char* kOverflow = kReplyOverflow;
constexpr const char* kProtocolError = kReplyProtocolError;

class HttpSession : public std::enable_shared_from_this<HttpSession>,
                    public http::RequestEvents,
                    public UpstreamConn::User,
                    public PipelineClient {
 public:
  HttpSession(Worker& w, DownstreamStream sock, const ListenerRuntime& lr)
      : w_(w), sock_(std::move(sock)), snapshot_(w.snapshot()), lr_(&lr), hcm_(lr.hcm.get()),
        stats_(hcm_->stats[w.id()]), parser_(hcm_->limits), in_(kReadChunk), idle_timer_(w.io()), request_timer_(w.io()),
        stream_timer_(w.io()), try_timer_(w.io()), resp_events_(this) {
    stats_->downstream_cx_total.inc();
    stats_->downstream_cx_active.add(1);
  }
  ~HttpSession() override { stats_->downstream_cx_active.add(-1); }

  void start() {
    peer_ = mesh::peer_address(sock_.native_handle());  // once per connection: x-forwarded-for and source_ip hashing
    last_activity_ns_ = mono_ns();
    h2_sniff_ = hcm_->cfg->codec_type != config::HttpConnectionManager::Codec::kHttp1;
    arm_idle_timer();
    do_read();
  }

 private:
  // ---- the stream (one request and its response) ----
  struct Stream {
    http::RequestHead head;
    RouteDecision decision;  // what the filter and router modules chose
    ClusterRuntime* cluster = nullptr;
    std::shared_ptr<Host> host;
    std::shared_ptr<UpstreamConn> up;         // an HTTP/1.1 upstream
    std::shared_ptr<H2UpstreamExchange> h2;  // or a stream on an HTTP/2 one
    LbContext lb;
    std::string head_bytes;   // the deparsed head for an HTTP/1.1 upstream
    std::string body_bytes;   // the body so far (as received, unframed), kept for a retry
    bool replay_ok = true;    // false once the request outgrew the retry buffer
    bool in_stage = false;    // the head is away in the pipeline's stages
    Draws draws{};
    uint64_t deparser_ns = 0;
    http::BodyEncoder req_body, resp_body;
    bool request_complete = false, response_started = false, response_complete = false;
    bool local_reply = false;  // answered here; the request body is discarded
    bool keep_alive = true;
    bool holds_request = false;  // a circuit-breaker request slot
    bool holds_retry = false;    // a circuit-breaker retry slot, during the back-off
    bool retrying = false;
    uint32_t attempts = 0;
    int64_t start_ns = 0;
    unsigned status = 0;
  };

  // ---- downstream reading ----
  void do_read() {
    if (reading_ || read_paused_ || closed_) return;
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
                            self->in_.wpos += n;
                            if (self->h2_sniff_ && self->handed_to_h2()) return;
                            self->last_activity_ns_ = mono_ns();
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
    idle_timer_.cancel();
    start_h2_session(w_, std::move(sock_), *lr_, in_.unread());
    return true;
  }

  void process_input() {
    while (!in_.empty() && !closed_ && !read_paused_ && !close_after_write_) {
      if (stream_ && stream_->request_complete) break;  // a pipelined request waits for this response
      // The parser is reset here, never inside its own callbacks (a stream may end within feed()).
      if (!stream_ && parser_.done()) parser_.reset();
      if (!stream_ && !head_started_) {  // a request's first byte: its timeouts start
        head_started_ = true;
        request_start_ = std::chrono::steady_clock::now();
        arm_request_timer();
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
      if (stream_->request_complete || parser_.in_message()) stats_->downstream_cx_destroy_remote_active_rq.inc();
      if (!stream_->request_complete) stats_->downstream_rq_rx_reset.inc();
    }
    close();
  }

  // ---- RequestEvents (the parser module's output) ----
  void on_head(http::RequestHead& head) override {
    int64_t t_parsed = mono_ns();
    w_.modules().add(Module::kParser, static_cast<uint64_t>(t_parsed - feed_start_ns_));
    // A new request uses the newest configuration if its listener is still there.
    if (w_.snapshot() != snapshot_) {
      if (const ListenerRuntime* l = w_.snapshot()->listener(lr_->cfg->name); l && l->hcm) {
        snapshot_ = w_.snapshot();
        lr_ = l;
        hcm_ = l->hcm.get();
        stats_->downstream_cx_active.add(-1);
        stats_ = hcm_->stats[w_.id()];
        stats_->downstream_cx_active.add(1);
      }
    }
    if (head.version == 10 && !http10_allowed(head)) return;
    stream_.emplace();
    Stream& s = *stream_;
    arm_idle_timer();  // now stream_idle_timeout, not the connection's idle_timeout
    head_started_ = false;
    arm_request_timer();  // the head is in: request_headers_timeout ends, request_timeout goes on
    s.head = std::move(head);
    s.start_ns = t_parsed;
    // No upgrade is configured (the filter refuses it, 403): the bytes after
    // the request may be the other protocol's, so the connection closes after
    // the answer, as Envoy's does.
    s.keep_alive = s.head.keep_alive && !s.head.upgrade;
    answer_expect_continue(s.head);
    stats_->downstream_rq_total.inc();
    stats_->downstream_rq_active.add(1);
    s.draws = Draws{w_.random(), w_.random(), w_.random(), w_.random(), w_.random()};
    // The body framing is fixed by the head (routing never changes it): set here, before the
    // parser's body events of this same feed() and before any stage thread sees the stream.
    s.req_body = http::request_body_encoder(s.head);
    if (Pipeline* p = w_.pipeline()) {
      s.in_stage = true;
      in_stage_self_ = shared_from_this();  // alive until the stages hand the request back
      if (p->submit(StageItem{this, generation_})) return;
      s.in_stage = false;  // the first ring is full: run the modules here
      in_stage_self_.reset();
    }
    stage_match_action();
    stage_deparse();
    act_on_decision();
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
    if (!stream_ || stream_->local_reply) return;
    forward_body(data);
  }

  // Body bytes go to the upstream and, while a retry is still possible, are
  // kept. With no upstream (the head is in the pipeline, or a retry is
  // backing off) every byte is kept, and reading stops at the buffer limit.
  void forward_body(std::string_view data) {
    Stream& s = *stream_;
    size_t limit = lr_->cfg->per_connection_buffer_limit_bytes;
    if (!s.up && !s.h2) {
      s.body_bytes += data;
      if (s.body_bytes.size() > limit) read_paused_ = true;  // back-pressure until there is an upstream
      return;
    }
    keep_for_replay(data);
    if (s.h2) {
      s.h2->send(data);
    } else {
      std::string& enc = scratch_;
      enc.clear();
      s.req_body.data(data, enc);  // HTTP/1.1 framing (chunks) for the upstream
      s.up->send(enc);
    }
    if (upstream_queued() > limit) read_paused_ = true;  // back-pressure
  }

  size_t upstream_queued() const {
    const Stream& s = *stream_;
    return s.h2 ? s.h2->queued() : s.up ? s.up->queued() : 0;
  }

  void on_complete() override {
    if (!stream_) return;
    Stream& s = *stream_;
    s.request_complete = true;
    if (s.response_complete) {  // a local reply, or an upstream that answered before the body ended
      finish_stream();
      return;
    }
    if (s.local_reply) return;
    // Without an upstream yet, the attempt sends the end with the body (send_request).
    if (s.h2) {
      s.h2->end();
    } else if (s.up) {
      std::string& enc = scratch_;
      enc.clear();
      s.req_body.end(enc);
      if (!enc.empty()) s.up->send(enc);
    }
    if (!s.in_stage) arm_stream_timers();
  }

  void keep_for_replay(std::string_view data) {
    Stream& s = *stream_;
    if (!s.replay_ok) return;
    if (s.head_bytes.size() + s.body_bytes.size() + data.size() > lr_->cfg->per_connection_buffer_limit_bytes) {
      s.replay_ok = false;  // Envoy, too, does not retry a request larger than its buffer limit
      std::string().swap(s.body_bytes);
      return;
    }
    s.body_bytes += data;
  }

  // ---- filter and router modules (dataplane/l7_chain.h) and the deparser: PipelineClient ----
  // On a stage thread in the pipelined model: these touch only the stream's
  // head, draws and decision, never the connection.
  void stage_match_action() override {
    Stream& s = *stream_;
    s.decision = filter_and_route(*hcm_, s.head, peer_, s.draws, mono_ns());
  }

  void stage_deparse() override {
    Stream& s = *stream_;
    if (s.decision.kind != RouteDecision::Kind::kForward) return;
    int64_t t0 = mono_ns();
    http::write_request_head(s.head, s.head_bytes);
    s.deparser_ns = static_cast<uint64_t>(mono_ns() - t0);
  }

  void stage_done(uint64_t generation) override {
    auto self = std::move(in_stage_self_);
    if (!stream_ || generation != generation_) return;
    stream_->in_stage = false;
    if (closed_) {  // the connection went away while the request was in the stages
      release_stream();
      stream_.reset();
      return;
    }
    if (refused_in_stage_) {
      http::ParseFailure f = std::move(*refused_in_stage_);
      refused_in_stage_.reset();
      refuse(f);
      return;
    }
    act_on_decision();
    if (closed_ || !stream_) return;
    if (stream_->request_complete) arm_stream_timers();
    process_input();
    do_read();
  }

  // Back on the connection's thread: statistics, then a local reply or the upstream.
  void act_on_decision() {
    Stream& s = *stream_;
    RouteDecision& d = s.decision;
    w_.modules().add(Module::kFilter, d.filter_ns);
    if (d.router_ns) w_.modules().add(Module::kRouter, d.router_ns);
    count_decision(d, *stats_);
    if (d.kind == RouteDecision::Kind::kLocalReply) {
      local_reply(d.status, d.body, &d.extra, d.direct);
      return;
    }
    w_.modules().add(Module::kDeparser, s.deparser_ns);
    s.cluster = d.cluster;
    s.lb = d.lb;
    if (!s.cluster->try_acquire_request()) {
      s.cluster->stats(w_.id()).upstream_rq_pending_overflow.inc();
      overflow_reply();
      return;
    }
    s.holds_request = true;
    s.cluster->stats(w_.id()).upstream_rq_active.add(1);
    // The body is kept for another try only where the route may retry, and
    // only up to the buffer limit (Envoy's rules).
    if (!route_may_retry(d) || s.head_bytes.size() + s.body_bytes.size() > lr_->cfg->per_connection_buffer_limit_bytes)
      s.replay_ok = false;
    start_attempt();
  }

  // ---- upstream attempts (Algorithm 1, lines 4-10) ----
  void start_attempt() {
    Stream& s = *stream_;
    s.retrying = false;
    s.attempts++;
    int64_t now = mono_ns();
    s.host = s.cluster->choose(s.lb.has_hash ? s.lb : LbContext{false, 0, w_.random()}, now);
    if (!s.host) {
      finish_with_local_reply(503, "no healthy upstream");
      return;
    }
    auto& cs = s.cluster->stats(w_.id());
    cs.upstream_rq_total.inc();
    s.host->active_requests.fetch_add(1, std::memory_order_relaxed);
    if (s.cluster->config().http2) {
      start_h2_attempt();
      return;
    }
    std::shared_ptr<UpstreamConn> up = w_.take_idle(s.host.get());
    if (up) {
      up->attach(this);
      s.up = up;
      prepare_upstream(*up);
      send_request(*up);
      if (s.request_complete) arm_try_timer();
      return;
    }
    if (!s.cluster->try_acquire_connection()) {
      cs.upstream_cx_overflow.inc();
      release_host();
      overflow_reply();
      return;
    }
    up = std::make_shared<UpstreamConn>(w_, snapshot_->clusters.at(s.cluster->name()), s.host);
    s.up = up;
    prepare_upstream(*up);
    send_request(*up);  // queued until connected
    up->connect(this);
    if (s.request_complete) arm_try_timer();
  }

  // The head and the body so far; what cannot be kept for a retry is sent once and dropped.
  void send_request(UpstreamConn& up) {
    Stream& s = *stream_;
    if (s.decision.vhost->cfg->include_request_attempt_count && s.attempts > 1) {
      // x-envoy-attempt-count changes with each attempt: deparse the head again.
      s.head.headers.set("x-envoy-attempt-count", std::to_string(s.attempts));
      s.head_bytes.clear();
      http::write_request_head(s.head, s.head_bytes);
    }
    up.send(s.head_bytes);
    if (s.req_body.chunked) {  // the body so far as one chunk, and the last chunk if it ended
      std::string framed;
      s.req_body.data(s.body_bytes, framed);
      if (s.request_complete) s.req_body.end(framed);
      up.send(framed);
    } else {
      up.send(s.body_bytes);
    }
    body_sent();
  }

  // An HTTP/2 upstream: a stream on the host's connection (http2/h2_upstream.h), the body so far with it.
  void start_h2_attempt() {
    Stream& s = *stream_;
    if (s.decision.vhost->cfg->include_request_attempt_count && s.attempts > 1)
      s.head.headers.set("x-envoy-attempt-count", std::to_string(s.attempts));
    bool overflow = false;
    s.h2 = H2UpstreamExchange::open(w_, snapshot_->clusters.at(s.cluster->name()), s.host, s.head, s.body_bytes,
                                    s.request_complete, this, overflow);
    if (!s.h2) {
      release_host();
      overflow_reply();
      return;
    }
    body_sent();
    if (s.request_complete) arm_try_timer();
  }

  // The body so far went to a new attempt: what cannot be kept for a retry is
  // dropped, and reading resumes if it waited for an upstream.
  void body_sent() {
    Stream& s = *stream_;
    if (!s.replay_ok) std::string().swap(s.body_bytes);
    if (read_paused_ && !s.in_stage && upstream_queued() <= lr_->cfg->per_connection_buffer_limit_bytes) {
      read_paused_ = false;
      asio::post(w_.io(), [self = shared_from_this()] {
        self->process_input();
        self->do_read();
      });
    }
  }

  // The circuit breakers refused: 503 and x-envoy-overloaded, as Envoy.
  void overflow_reply() {
    http::HeaderList extra;
    extra.add("x-envoy-overloaded", "true");
    finish_with_local_reply(503, kOverflow, &extra);
  }

  void prepare_upstream(UpstreamConn& up) {
    up.parser().reset();
    up.parser().expect_no_body(stream_->head.method == "HEAD");
  }

  void release_host() {
    Stream& s = *stream_;
    if (s.host) {
      s.host->active_requests.fetch_sub(1, std::memory_order_relaxed);
      s.host.reset();
    }
  }

  void drop_upstream() {
    Stream& s = *stream_;
    if (s.up) {
      s.up->close();
      s.up.reset();
    }
    s.h2.reset();  // resets the upstream stream unless it ended
    release_host();
  }

  using Why = AttemptOutcome;

  // Whether retry_on covers this outcome, and a retry is left (num_retries, max_retries, the buffer).
  bool may_retry(Why why, unsigned status) {
    Stream& s = *stream_;
    if (!s.replay_ok || s.response_started || !retry_wanted(s.decision, s.attempts, why, status)) return false;
    if (!s.cluster->try_acquire_retry()) {
      s.cluster->stats(w_.id()).upstream_rq_retry_overflow.inc();
      return false;
    }
    s.holds_retry = true;
    return true;
  }

  void retry() {
    Stream& s = *stream_;
    s.cluster->stats(w_.id()).upstream_rq_retry.inc();
    s.retrying = true;
    try_timer_.cancel();
    try_timer_.expires_after(retry_backoff(s.attempts, w_.random()));
    try_timer_.async_wait([self = shared_from_this(), gen = generation_](const boost::system::error_code& ec) {
      if (ec || self->closed_ || !self->stream_ || gen != self->generation_ || !self->stream_->retrying ||
          self->stream_->local_reply)
        return;
      self->stream_->cluster->release_retry();
      self->stream_->holds_retry = false;
      self->start_attempt();
    });
  }

  void attempt_failed(Why why, const char* reason, unsigned status) {
    Stream& s = *stream_;
    if (s.host) s.cluster->report_status(*s.host, status, mono_ns());
    drop_upstream();
    if (may_retry(why, status)) {
      retry();
      return;
    }
    if (s.response_started) {
      close();  // the client already has part of a response: it can only see a reset
      return;
    }
    finish_with_local_reply(status, reason);
  }

  // ---- UpstreamConn::User ----
  void upstream_connected() override {}
  void upstream_drained() override {
    if (read_paused_ && stream_ && !stream_->local_reply) {
      read_paused_ = false;
      process_input();
      do_read();
    }
  }
  void upstream_failed(Failure f) override {
    if (!stream_) return;
    stream_->up.reset();
    stream_->h2.reset();
    switch (f) {
      case Failure::kConnect: attempt_failed(Why::kConnect, kConnectFailure, 503); break;
      case Failure::kConnectTimeout: attempt_failed(Why::kConnectTimeout, kConnectTimeout, 503); break;
      case Failure::kReset:
        stream_->cluster->stats(w_.id()).upstream_rq_rx_reset.inc();
        attempt_failed(Why::kReset, kUpstreamReset, 503);
        break;
      case Failure::kProtocol: attempt_failed(Why::kProtocol, kProtocolError, 502); break;
    }
  }
  http::ResponseEvents& response_events() override { return resp_events_; }

  void upstream_response_complete() override {
    if (!stream_ || (!stream_->up && !stream_->h2)) return;
    Stream& s = *stream_;
    if (s.h2) {
      s.h2.reset();  // the HTTP/2 connection stays in the worker's pool for other streams
    } else {
      auto up = std::move(s.up);
      // The connection goes back to the pool when both sides kept it alive and the whole request went out.
      if (up->reusable() && resp_keep_alive_ && s.request_complete && up->queued() == 0) w_.put_idle(std::move(up));
      else up->close();
    }
    release_host();
    s.response_complete = true;
    if (s.request_complete) {
      finish_stream();
    } else {
      close_after_write_ = true;  // answered before the request ended: the rest of it cannot be framed
      flush();
    }
  }

  // ---- the response (ResponseEvents, through an adapter: the names clash with RequestEvents) ----
  struct RespEvents : http::ResponseEvents {
    HttpSession* s;
    explicit RespEvents(HttpSession* session) : s(session) {}
    void on_head(http::ResponseHead& h) override { s->on_response_head(h); }
    void on_body(std::string_view d) override { s->on_response_body(d); }
    void on_complete() override { s->on_response_end(); }
  };

  void on_response_head(http::ResponseHead& h) {
    if (!stream_ || stream_->response_started) return;
    Stream& s = *stream_;
    unsigned status = h.status;
    auto& cs = s.cluster->stats(w_.id());
    if (status >= 500 && may_retry(Why::kStatus, status)) {
      cs.upstream_rq_xx[4].inc();
      s.cluster->report_status(*s.host, status, mono_ns());
      // Abandon this answer (an HTTP/1.1 connection cannot be reused mid-response) and try again.
      drop_upstream();
      retry();
      return;
    }
    int64_t t0 = mono_ns();
    s.cluster->report_status(*s.host, status, t0);
    cs.upstream_rq_xx[status_class(status)].inc();
    cs.upstream_rq_completed.inc();
    s.response_started = true;
    s.status = status;
    stream_timer_.cancel();
    try_timer_.cancel();
    resp_keep_alive_ = h.keep_alive && !h.body_until_close;
    apply_response_rules(s.decision, *hcm_, h.headers);
    h.headers.set("x-envoy-upstream-service-time", std::to_string((t0 - s.start_ns) / 1000000));
    bool head_req = s.head.method == "HEAD";
    // An HTTP/1.0 client reads a body of unknown length until we close.
    if (!head_req && s.head.version != 11 && !h.content_length) s.keep_alive = false;
    s.resp_body = head_req ? http::BodyEncoder{} : http::response_body_encoder(h, s.head.version);
    // A response that ends the connection closes it only once all of it was
    // written (finish_stream): its body may still be on its way from the upstream.
    http::write_response_head(h, s.keep_alive, s.head.version, out_.pending);
    w_.modules().add(Module::kDeparser, static_cast<uint64_t>(mono_ns() - t0));
    count_downstream_status(status);
    flush();
  }

  void on_response_body(std::string_view d) {
    // An abandoned answer (retried) still has body events in the parser's call: drop them.
    if (!stream_ || !stream_->response_started || stream_->response_complete) return;
    Stream& s = *stream_;
    s.resp_body.data(d, out_.pending);
    flush();
    if (out_.size() > lr_->cfg->per_connection_buffer_limit_bytes) {  // back-pressure
      if (s.up) s.up->pause_reading();
      if (s.h2) s.h2->pause_reading();
    }
  }

  void on_response_end() {
    if (!stream_ || !stream_->response_started || stream_->response_complete) return;
    stream_->resp_body.end(out_.pending);
    flush();
  }

  void count_downstream_status(unsigned status) {
    stats_->downstream_rq_xx[status_class(status)].inc();
  }

  // ---- local replies ----
  void local_reply(unsigned status, std::string_view body, const http::HeaderList* extra = nullptr,
                   bool direct = false) {
    Stream& s = *stream_;
    s.local_reply = true;
    http::ResponseHead h;
    h.status = status;
    if (extra) h.headers = *extra;
    if (!body.empty()) h.headers.add("content-type", "text/plain");
    h.content_length = body.size();
    if (direct) apply_response_rules(s.decision, *hcm_, h.headers);
    // A request whose body is still arriving cannot be followed by another on this connection.
    if (!s.request_complete && (s.head.content_length.value_or(0) > 0 || s.head.chunked)) s.keep_alive = false;
    if (!s.keep_alive) close_after_write_ = true;
    http::write_response_head(h, s.keep_alive, s.head.version, out_.pending);
    if (s.head.method != "HEAD") out_.pending.append(body);
    count_downstream_status(status);
    s.response_started = s.response_complete = true;
    s.status = status;
    flush();
    if (s.request_complete) finish_stream();
  }

  void finish_with_local_reply(unsigned status, std::string_view body, const http::HeaderList* extra = nullptr) {
    stream_timer_.cancel();
    try_timer_.cancel();
    local_reply(status, body, extra);
  }

  void protocol_error(const http::ParseFailure& f) {
    stats_->downstream_cx_protocol_error.inc();
    refuse(f);
  }

  // A request that cannot go on: its status and the connection closed. While
  // its head is away in the pipeline's stages the answer waits for it to come
  // back (stage_done), so the client gets it in either execution model.
  void refuse(const http::ParseFailure& f) {
    if (stream_ && stream_->in_stage) {
      refused_in_stage_ = f;
      read_paused_ = true;
      return;
    }
    if (stream_ && stream_->response_started) {
      close();
      return;
    }
    if (stream_) {
      release_stream();
      stream_.reset();
    }
    final_reply(f.status, http::reason_phrase(f.status));
  }

  // An answer outside any stream, after which the connection closes (a bad request, a slow client).
  void final_reply(unsigned status, std::string_view body) {
    http::ResponseHead h;
    h.status = status;
    h.headers.add("content-type", "text/plain");
    h.content_length = body.size();
    http::write_response_head(h, false, out_.pending);
    out_.pending.append(body);
    count_downstream_status(status);
    close_after_write_ = true;
    read_paused_ = true;
    request_timer_.cancel();  // answered: no 408 after it
    flush();
  }

  // Gives back what the stream holds: circuit-breaker slots, the upstream, the host's count.
  void release_stream() {
    Stream& s = *stream_;
    if (s.holds_request) {
      s.cluster->release_request();
      s.cluster->stats(w_.id()).upstream_rq_active.add(-1);
      s.holds_request = false;
    }
    if (s.holds_retry) {
      s.cluster->release_retry();
      s.holds_retry = false;
    }
    drop_upstream();
    stats_->downstream_rq_active.add(-1);
    request_timer_.cancel();
    stream_timer_.cancel();
    try_timer_.cancel();
  }

  void finish_stream() {
    release_stream();
    bool keep = stream_->keep_alive;
    stream_.reset();
    generation_++;
    if (!keep) {
      close_after_write_ = true;
      read_paused_ = true;  // nothing after a "Connection: close" request is served (RFC 9112 §9.6)
      flush();
      return;
    }
    if (read_paused_ && !close_after_write_) read_paused_ = false;
    // The next pipelined request, if it is already here.
    asio::post(w_.io(), [self = shared_from_this()] {
      if (self->closed_) return;
      self->process_input();
      self->do_read();
    });
  }

  // ---- timers ----
  void arm_stream_timers() {
    Stream& s = *stream_;
    if (s.local_reply || s.response_started) return;
    const auto& a = *s.decision.route->cfg->route;
    if (a.timeout.count() > 0) {
      stream_timer_.expires_after(a.timeout);
      stream_timer_.async_wait([self = shared_from_this(), gen = generation_](const boost::system::error_code& ec) {
        if (ec || self->closed_ || !self->stream_ || gen != self->generation_) return;
        self->on_route_timeout();
      });
    }
    if (s.up || s.h2) arm_try_timer();
  }

  // request_headers_timeout and request_timeout both run from a request's
  // first byte, as Envoy's (more bytes do not re-arm them): the first bounds
  // the head, the second the whole request, until it was all received or the
  // response started. A slow client gets 408 and the connection closes.
  void arm_request_timer() {
    const auto& cfg = *hcm_->cfg;
    std::optional<std::chrono::steady_clock::time_point> due;
    bool head_due = false;  // request_headers_timeout comes first
    if (!stream_ && cfg.request_headers_timeout.count() > 0) {
      due = request_start_ + cfg.request_headers_timeout;
      head_due = true;
    }
    if (cfg.request_timeout.count() > 0 && (!due || request_start_ + cfg.request_timeout < *due)) {
      due = request_start_ + cfg.request_timeout;
      head_due = false;
    }
    if (!due) {
      request_timer_.cancel();
      return;
    }
    request_timer_.expires_at(*due);
    request_timer_.async_wait([self = shared_from_this(), gen = generation_, head_due](
                                  const boost::system::error_code& ec) {
      if (ec || self->closed_ || gen != self->generation_) return;
      if (!self->stream_) {  // still in the head (Envoy's texts)
        self->stats_->downstream_rq_timeout.inc();
        self->final_reply(408, head_due ? "request header timeout" : "request timeout");
        return;
      }
      if (self->stream_->request_complete || self->stream_->response_started || self->stream_->in_stage) return;
      self->stats_->downstream_rq_timeout.inc();
      self->release_stream();
      self->stream_.reset();
      self->final_reply(408, "request timeout");
    });
  }

  void arm_try_timer() {
    Stream& s = *stream_;
    const auto& a = *s.decision.route->cfg->route;
    if (!a.retry_policy || a.retry_policy->per_try_timeout.count() == 0) return;
    try_timer_.expires_after(a.retry_policy->per_try_timeout);
    try_timer_.async_wait([self = shared_from_this(), gen = generation_](const boost::system::error_code& ec) {
      if (ec || self->closed_ || !self->stream_ || gen != self->generation_ || self->stream_->response_started ||
          self->stream_->retrying)
        return;
      self->stream_->cluster->stats(self->w_.id()).upstream_rq_per_try_timeout.inc();
      self->attempt_failed(Why::kPerTryTimeout, "upstream request timeout", 504);
    });
  }

  void on_route_timeout() {
    Stream& s = *stream_;
    s.cluster->stats(w_.id()).upstream_rq_timeout.inc();
    stats_->downstream_rq_timeout.inc();
    if (s.response_started) {
      close();
      return;
    }
    if (s.host) s.cluster->report_status(*s.host, 504, mono_ns());
    drop_upstream();
    finish_with_local_reply(504, "upstream request timeout");
  }

  // Idle and stream-idle timeouts, checked lazily against the last activity.
  void arm_idle_timer() {
    auto timeout = stream_ ? hcm_->cfg->stream_idle_timeout : hcm_->cfg->idle_timeout;
    if (timeout.count() == 0) timeout = std::chrono::milliseconds(3600 * 1000);
    int64_t due = last_activity_ns_ + static_cast<int64_t>(timeout.count()) * 1000000;
    idle_timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, due - mono_ns())));
    idle_timer_.async_wait([self = shared_from_this(), timeout](const boost::system::error_code& ec) {
      if (ec || self->closed_) return;
      auto now = mono_ns();
      if (self->stream_ && self->stream_->in_stage) {  // the stages have it: look again later
        self->arm_idle_timer();
        return;
      }
      if (now - self->last_activity_ns_ >= static_cast<int64_t>(timeout.count()) * 1000000 ) {
        if (self->stream_ && !self->stream_->response_started) {
          self->stats_->downstream_rq_timeout.inc();
          // As Envoy: 504 once the request was all received (the upstream is slow), else 408.
          self->finish_with_local_reply(self->stream_->request_complete ? 504 : 408, "stream timeout");
          self->close_after_write_ = true;
          return;
        }
        self->stats_->downstream_cx_idle_timeout.inc();
        self->close();
        return;
      }
      self->arm_idle_timer();
    });
  }

  // ---- downstream writing ----
  void flush() {
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
      self->last_activity_ns_ = mono_ns();
      if (self->stream_ && self->out_.size() <= self->lr_->cfg->per_connection_buffer_limit_bytes) {
        if (self->stream_->up) self->stream_->up->resume_reading();
        if (self->stream_->h2) self->stream_->h2->resume_reading();
      }
      self->flush();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (stream_ && !stream_->in_stage) {  // a request in the stages is released when it comes back
      release_stream();
      stream_.reset();
    }
    idle_timer_.cancel();
    request_timer_.cancel();
    stream_timer_.cancel();
    try_timer_.cancel();
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
  std::string scratch_, peer_;
  asio::steady_timer idle_timer_, request_timer_, stream_timer_, try_timer_;
  RespEvents resp_events_;
  std::optional<Stream> stream_;
  std::shared_ptr<HttpSession> in_stage_self_;
  std::optional<http::ParseFailure> refused_in_stage_;  // refuse() while the head was in the stages
  uint64_t generation_ = 0;  // which stream a timer belongs to
  int64_t feed_start_ns_ = 0, last_activity_ns_ = 0;
  bool reading_ = false, read_paused_ = false, closed_ = false, close_after_write_ = false;
  bool resp_keep_alive_ = true;
  bool head_started_ = false;  // a request's first byte came and its head did not end yet
  std::chrono::steady_clock::time_point request_start_{};  // when it came
  bool h2_sniff_ = false;  // the first bytes may be the HTTP/2 preface
};

}  // namespace

void start_http_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener) {
  std::make_shared<HttpSession>(w, std::move(sock), listener)->start();
}

}  // namespace dpukit::mesh
