// The downstream HTTP/2 connection and its streams. Each stream is a
// request: its head goes through the filter and router modules
// (filter_and_route), the cluster's load balancer and circuit breakers pick
// a host, and the request is sent to an HTTP/1.1 upstream (UpstreamConn, the
// worker's keep-alive pool) or an HTTP/2 one (H2UpstreamConn, one connection
// per host). Flow control: request bytes are consumed (the client's window
// reopens) only once the upstream took them; response bytes wait in the
// stream's queue for nghttp2's data source, and the upstream is paused (or,
// for HTTP/2, its window left closed) while the client does not read.
//
// In the pipelined model the filter and router run inline here, on the
// worker, for HTTP/2 streams (the stage threads carry HTTP/1.1 requests).
#include "http2/h2_session.h"

#include <malloc.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <unordered_map>

#include "dataplane/l7_chain.h"
#include "dpukit/core/log.h"
#include "http2/h2_headers.h"
#include "http2/h2_upstream.h"
#include "http2/nghttp2_util.h"

namespace dpukit::mesh {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxWriteBatch = 256 * 1024;  // bytes taken from nghttp2 before a write starts
constexpr size_t kMinStreamShare = 64 * 1024;  // see H2Stream::share()

class H2Session;

// A connection that held this many streams at once gives the freed memory
// back when it has none left (give_back_freed_memory).
constexpr size_t kGiveBackAfterStreams = 256;

// glibc's free() returns memory to the system only from the top of a heap:
// the queues and read buffers of many streams, freed between small objects
// that live on (pooled upstream connections, Asio's recycled per-socket
// state), stay resident. Measured: after a client of 1,000 streams that did
// not read closed, the worker's arena kept 17-134 MB with 0.3 MB of it in use.
// malloc_trim returns the free pages inside the heaps too. It walks every
// arena, so a worker runs it at most once a second: a later request waits
// for the rest of that second (one at a time), it is not dropped.
void give_back_freed_memory(Worker& w) {
  static thread_local bool pending = false;
  static thread_local int64_t last_ns = 0;
  if (pending) return;
  pending = true;
  int64_t wait_ns = last_ns == 0 ? 0 : std::max<int64_t>(0, last_ns + 1000000000 - mono_ns());
  // A timer even for no wait: it runs after the handlers already queued, which let go of the streams.
  auto timer = std::make_shared<asio::steady_timer>(w.io(), std::chrono::nanoseconds(wait_ns));
  timer->async_wait([timer](const boost::system::error_code& ec) {
    if (ec) return;  // the worker is stopping
    pending = false;
    last_ns = mono_ns();
    malloc_trim(0);
    log_debug("mesh: worker gave freed memory back in " + std::to_string((mono_ns() - last_ns) / 1000) + " us");
  });
}

class H2Stream : public std::enable_shared_from_this<H2Stream>,
                 public UpstreamConn::User,
                 public H2UpstreamUser,
                 public http::ResponseEvents {
 public:
  H2Stream(H2Session& session, int32_t id);
  ~H2Stream() override { drop_upstream(); }

  // ---- from the session (nghttp2's events for this stream) ----
  std::vector<http::Header> block;  // the header block being received
  size_t block_bytes = 0;
  bool head_done = false;  // the request head arrived: a later block is the trailers
  void on_request_head(bool end_stream);
  void on_request_data(std::string_view d);
  void on_request_trailers();
  void on_request_end();
  void on_closed(uint32_t error_code);
  ssize_t read_response(uint8_t* buf, size_t length, uint32_t* flags);
  void on_end_stream_sent();
  void detach();  // the connection went away

 private:
  using Why = AttemptOutcome;
  using Failure = UpstreamConn::User::Failure;
  Worker& worker();
  size_t buffer_limit() const { return lr_->cfg->per_connection_buffer_limit_bytes; }
  size_t share() const;
  void start_attempt();
  void start_h1_attempt();
  void start_h2_attempt();
  bool may_retry(Why why, unsigned status);
  void retry();
  void attempt_failed(Why why, const char* reason, unsigned status);
  void release_host();
  void drop_upstream();
  void release_all();
  void consume_request(size_t n);
  void keep_for_replay(std::string_view d);
  void local_reply(unsigned status, std::string_view body, const http::HeaderList* extra = nullptr,
                   bool direct = false);
  void submit_response(const http::ResponseHead& h, bool no_body);
  void overflow_reply();  // a circuit breaker refused: 503 with x-envoy-overloaded, as Envoy
  void reset(uint32_t code);
  void count_downstream_status(unsigned status) { stats_->downstream_rq_xx[status_class(status)].inc(); }
  void arm_route_timer();
  void arm_try_timer();
  void arm_request_timer();
  void arm_idle_timer();
  void touch() { active_ns_ = mono_ns(); }  // stream activity, for stream_idle_timeout
  // The response, from either kind of upstream.
  void upstream_head(http::ResponseHead& h, bool end_stream);
  void upstream_data(std::string_view d);
  void upstream_end();

  // UpstreamConn::User (HTTP/1.1 upstream)
  void upstream_connected() override {}
  void upstream_failed(Failure f) override;
  void upstream_drained() override { consume_request(unconsumed_); }
  void upstream_response_complete() override;
  http::ResponseEvents& response_events() override { return *this; }
  // http::ResponseEvents (its parser)
  void on_head(http::ResponseHead& h) override { upstream_head(h, false); }
  void on_body(std::string_view d) override { upstream_data(d); }
  void on_complete() override { upstream_end(); }
  // H2UpstreamUser (HTTP/2 upstream)
  void h2up_head(http::ResponseHead& h, bool end_stream) override { upstream_head(h, end_stream); }
  void h2up_data(std::string_view d) override;
  void h2up_trailers(http::HeaderList& trailers) override;
  void h2up_end() override;
  void h2up_failed(Failure f) override { upstream_failed(f); }
  void h2up_sent(size_t n) override { consume_request(std::min(n, unconsumed_)); }

  H2Session* c_;  // null once detached
  const int32_t id_;
  std::shared_ptr<const Snapshot> snapshot_;
  const ListenerRuntime* lr_;
  const HcmRuntime* hcm_;
  HttpStats* stats_;
  http::RequestHead head_;
  RouteDecision decision_;
  ClusterRuntime* cluster_ = nullptr;
  std::shared_ptr<Host> host_;
  LbContext lb_;
  std::shared_ptr<UpstreamConn> h1up_;
  std::shared_ptr<H2UpstreamConn> h2up_;
  int32_t h2up_id_ = -1;
  http::BodyEncoder req_enc_;
  http::HeaderList trailers_;  // the request's, for an HTTP/2 upstream
  std::string replay_;         // the request body so far, kept for a retry
  bool replay_ok_ = true;
  size_t unconsumed_ = 0;           // request bytes received, not yet consumed (the upstream has not taken them)
  size_t upstream_unconsumed_ = 0;  // HTTP/2 upstream response bytes not yet passed to the client
  h2::BodyQueue resp_;
  asio::steady_timer route_timer_, try_timer_, request_timer_, idle_timer_;
  uint32_t attempts_ = 0;
  int64_t start_ns_ = 0, active_ns_ = 0;
  bool counted_ = false, grpc_ = false, req_end_ = false, local_reply_ = false, response_started_ = false,
       response_complete_ = false, holds_request_ = false, holds_retry_ = false, retrying_ = false,
       h1_paused_ = false, detached_ = false;
};

class H2Session : public std::enable_shared_from_this<H2Session> {
 public:
  H2Session(Worker& w, DownstreamStream sock, const ListenerRuntime& lr)
      : w_(w), sock_(std::move(sock)), snapshot_(w.snapshot()), lr_(&lr), hcm_(lr.hcm.get()),
        stats_(hcm_->stats[w.id()]), in_(kReadChunk), idle_timer_(w.io()) {
    stats_->downstream_cx_active.add(1);  // (downstream_cx_total: counted by the HTTP/1.1 session that took the connection)
    nghttp2_session_callbacks* cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_option* opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);  // the window opens as the upstream takes the bytes
    nghttp2_session_server_new2(&ng_, cbs, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    h2::submit_settings(ng_, hcm_->cfg->http2_protocol_options, hcm_->limits.max_header_bytes, true);
  }
  ~H2Session() {
    close();
    nghttp2_session_del(ng_);
    stats_->downstream_cx_active.add(-1);
  }

  void start(std::string_view first_bytes) {
    peer_ = peer_address(sock_.native_handle());
    last_activity_ns_ = mono_ns();
    arm_idle_timer();
    if (!first_bytes.empty() && !receive(first_bytes)) return;
    flush();
    do_read();
  }

  // ---- for the streams ----
  Worker& w_;
  nghttp2_session* ng_ = nullptr;
  const std::string& peer() const { return peer_; }
  // A new stream's configuration: the newest snapshot if its listener is still there.
  void current_config(std::shared_ptr<const Snapshot>& snap, const ListenerRuntime*& lr, const HcmRuntime*& hcm,
                      HttpStats*& stats) {
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
    snap = snapshot_;
    lr = lr_;
    hcm = hcm_;
    stats = stats_;
  }
  void consume(int32_t id, size_t n) {
    if (closed_ || n == 0) return;
    nghttp2_session_consume(ng_, id, n);
    want_flush();
  }
  // Runs flush() soon, outside whatever nghttp2 or upstream call is on the stack.
  void want_flush() {
    if (flush_posted_ || closed_) return;
    flush_posted_ = true;
    asio::post(w_.io(), [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->flush();
    });
  }
  bool closed() const { return closed_; }

 private:
  static H2Session& of(void* user_data) { return *static_cast<H2Session*>(user_data); }
  H2Stream* stream(int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }

  // ---- nghttp2 callbacks ----
  // RFC 9113 §5.1.1, which nghttp2 leaves to us: HEADERS on a stream id the
  // client skipped is a connection error (GOAWAY PROTOCOL_ERROR, from receive()).
  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
    H2Session& s = of(user_data);
    if (hd->type != NGHTTP2_HEADERS || hd->stream_id <= 0 || hd->stream_id % 2 == 0) return 0;
    if (s.ids_.on_headers(hd->stream_id)) return 0;
    log_debug("mesh: HTTP/2 client sent HEADERS on stream " + std::to_string(hd->stream_id) +
              ", lower than stream " + std::to_string(s.ids_.highest()) + " it opened");
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    H2Session& s = of(user_data);
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      s.streams_[frame->hd.stream_id] = std::make_shared<H2Stream>(s, frame->hd.stream_id);
      s.peak_streams_ = std::max(s.peak_streams_, s.streams_.size());
    }
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void* user_data) {
    H2Session& s = of(user_data);
    H2Stream* st = s.stream(frame->hd.stream_id);
    if (!st) return 0;
    // Envoy's limits: max_request_headers_kb for the block, max_headers_count fields; past them the stream is reset.
    st->block_bytes += namelen + valuelen;
    if (st->block_bytes > s.hcm_->limits.max_header_bytes || st->block.size() >= s.hcm_->limits.max_headers_count) {
      s.stats_->downstream_cx_protocol_error.inc();
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // RST_STREAM
    }
    st->block.push_back({std::string(h2::as_view(name, namelen)), std::string(h2::as_view(value, valuelen))});
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    H2Session& s = of(user_data);
    H2Stream* st = s.stream(frame->hd.stream_id);
    if (!st) return 0;
    auto keep = st->shared_from_this();
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (frame->hd.type == NGHTTP2_HEADERS) {
      if (!st->head_done) {
        st->head_done = true;
        st->on_request_head(end);
        return 0;
      }
      st->on_request_trailers();
    } else if (frame->hd.type == NGHTTP2_DATA && end) {
      st->on_request_end();
    }
    return 0;
  }

  static int on_data(nghttp2_session* ng, uint8_t, int32_t id, const uint8_t* data, size_t len, void* user_data) {
    H2Session& s = of(user_data);
    H2Stream* st = s.stream(id);
    if (!st) {
      nghttp2_session_consume(ng, id, len);  // a stream we reset: keep the connection window open
      return 0;
    }
    st->on_request_data(h2::as_view(data, len));
    return 0;
  }

  static int on_stream_close(nghttp2_session*, int32_t id, uint32_t error_code, void* user_data) {
    H2Session& s = of(user_data);
    auto it = s.streams_.find(id);
    if (it == s.streams_.end()) return 0;
    auto st = std::move(it->second);
    s.streams_.erase(it);
    st->on_closed(error_code);
    if (s.streams_.empty()) {
      s.last_activity_ns_ = mono_ns();
      s.maybe_give_back_memory();
    }
    return 0;
  }

  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    H2Session& s = of(user_data);
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
      if (H2Stream* st = s.stream(frame->hd.stream_id)) st->on_end_stream_sent();
    return 0;
  }

  // ---- the socket ----
  // Feeds received bytes to nghttp2; false when the connection is done for.
  bool receive(std::string_view bytes) {
    auto self = shared_from_this();
    in_ng_ = true;
    ssize_t r = nghttp2_session_mem_recv(ng_, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    in_ng_ = false;
    if (closed_) return false;
    if (r < 0) {
      // Not HTTP/2 (a bad preface) or a fatal connection error: GOAWAY, then close once it is written.
      log_debug(std::string("mesh: HTTP/2 client: ") + nghttp2_strerror(static_cast<int>(r)));
      stats_->downstream_cx_protocol_error.inc();
      nghttp2_session_terminate_session(ng_, NGHTTP2_PROTOCOL_ERROR);
      flush();
      return false;
    }
    return true;
  }

  void do_read() {
    if (reading_ || closed_) return;
    reading_ = true;
    sock_.async_read_some(in_.space(), [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
      self->reading_ = false;
      if (self->closed_) return;
      if (ec) {
        self->close();
        return;
      }
      self->last_activity_ns_ = mono_ns();
      if (!self->receive(std::string_view(self->in_.bytes.data(), n))) return;
      self->flush();
      if (nghttp2_session_want_read(self->ng_)) self->do_read();
    });
  }

  void flush() {
    if (closed_ || out_.writing || in_ng_) return;
    in_ng_ = true;
    while (out_.pending.size() < kMaxWriteBatch) {
      const uint8_t* data;
      ssize_t n = nghttp2_session_mem_send(ng_, &data);
      if (n <= 0) break;
      out_.pending.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    in_ng_ = false;
    if (closed_) return;
    if (out_.pending.empty()) {
      if (!nghttp2_session_want_read(ng_) && !nghttp2_session_want_write(ng_)) close();
      return;
    }
    out_.start(sock_, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (self->closed_) return;
      if (ec) {
        self->close();
        return;
      }
      self->last_activity_ns_ = mono_ns();
      self->flush();
    });
  }

  // The connection's idle_timeout: no stream for that long ends it with GOAWAY(NO_ERROR).
  void arm_idle_timer() {
    auto timeout = hcm_->cfg->idle_timeout;
    if (timeout.count() == 0) timeout = std::chrono::milliseconds(3600 * 1000);
    int64_t due = last_activity_ns_ + static_cast<int64_t>(timeout.count()) * 1000000;
    idle_timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, due - mono_ns())));
    idle_timer_.async_wait([self = shared_from_this(), timeout](const boost::system::error_code& ec) {
      if (ec || self->closed_) return;
      // A stream whose header block never ended does not keep the connection:
      // nghttp2 takes no other frame meanwhile, so the client would hold it forever.
      bool serving = std::any_of(self->streams_.begin(), self->streams_.end(),
                                 [](const auto& kv) { return kv.second->head_done; });
      if (!serving && mono_ns() - self->last_activity_ns_ >= static_cast<int64_t>(timeout.count()) * 1000000) {
        self->stats_->downstream_cx_idle_timeout.inc();
        nghttp2_session_terminate_session(self->ng_, NGHTTP2_NO_ERROR);
        self->flush();
        return;
      }
      self->arm_idle_timer();
    });
  }

  void maybe_give_back_memory() {
    if (peak_streams_ < kGiveBackAfterStreams) return;
    peak_streams_ = 0;
    give_back_freed_memory(w_);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    auto streams = std::move(streams_);
    streams_.clear();
    for (auto& [id, st] : streams) st->detach();
    maybe_give_back_memory();
    idle_timer_.cancel();
    boost::system::error_code ignored;
    sock_.shutdown(Socket::shutdown_both, ignored);
    sock_.close(ignored);
  }

  friend class H2Stream;
  DownstreamStream sock_;
  std::shared_ptr<const Snapshot> snapshot_;
  const ListenerRuntime* lr_;
  const HcmRuntime* hcm_;
  HttpStats* stats_;
  ReadBuffer in_;
  WriteQueue out_;
  std::string peer_;
  asio::steady_timer idle_timer_;
  std::unordered_map<int32_t, std::shared_ptr<H2Stream>> streams_;
  h2::RequestStreamIds ids_;
  int64_t last_activity_ns_ = 0;
  size_t peak_streams_ = 0;  // since the memory was last given back
  bool reading_ = false, closed_ = false, in_ng_ = false, flush_posted_ = false;
};

// ---- the stream ----

H2Stream::H2Stream(H2Session& session, int32_t id)
    : c_(&session), id_(id), route_timer_(session.w_.io()), try_timer_(session.w_.io()),
      request_timer_(session.w_.io()), idle_timer_(session.w_.io()) {
  session.current_config(snapshot_, lr_, hcm_, stats_);
  nghttp2_session_set_stream_user_data(session.ng_, id, this);
}

Worker& H2Stream::worker() { return c_->w_; }

// What one stream may hold of the bytes its client or an HTTP/1.1 upstream
// did not take yet: per_connection_buffer_limit_bytes split between the
// connection's open streams, so that all of them together hold about that
// limit, not a limit each (1,024 streams of a client that does not read:
// 1 GiB), and at least kMinStreamShare each, so that many streams still move.
// Each stream is paused and resumed on its own queue: none waits for another.
size_t H2Stream::share() const {
  size_t streams = std::max<size_t>(1, c_ ? c_->streams_.size() : 1);
  return std::min(buffer_limit(), std::max(kMinStreamShare, buffer_limit() / streams));
}

void H2Stream::on_request_head(bool end_stream) {
  Worker& w = worker();
  int64_t t0 = mono_ns();
  std::string bad = h2::request_head_from_h2(block, end_stream, head_);
  std::vector<http::Header>().swap(block);
  if (!bad.empty()) {
    log_debug("mesh: HTTP/2 stream " + std::to_string(id_) + " malformed: " + bad);
    reset(NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  int64_t t1 = mono_ns();
  w.modules().add(Module::kParser, static_cast<uint64_t>(t1 - t0));
  counted_ = true;
  stats_->downstream_rq_total.inc();
  stats_->downstream_rq_active.add(1);
  start_ns_ = t1;
  req_end_ = end_stream;
  touch();
  arm_idle_timer();
  if (!req_end_) arm_request_timer();
  grpc_ = h2::is_grpc(head_);
  req_enc_ = http::request_body_encoder(head_);
  Draws draws{w.random(), w.random(), w.random(), w.random(), w.random()};
  decision_ = filter_and_route(*hcm_, head_, c_->peer(), draws, t1);
  RouteDecision& d = decision_;
  w.modules().add(Module::kFilter, d.filter_ns);
  if (d.router_ns) w.modules().add(Module::kRouter, d.router_ns);
  count_decision(d, *stats_);
  if (d.kind == RouteDecision::Kind::kLocalReply) {
    local_reply(d.status, d.body, &d.extra, d.direct);
    return;
  }
  cluster_ = d.cluster;
  lb_ = d.lb;
  // The body is kept for another try only where the route may retry (Envoy's
  // rule too); else each of a connection's streams would hold up to the
  // buffer limit of its body after sending it (1,024 of them: 1 GiB).
  replay_ok_ = route_may_retry(d);
  if (!cluster_->try_acquire_request()) {
    cluster_->stats(w.id()).upstream_rq_pending_overflow.inc();
    overflow_reply();
    return;
  }
  holds_request_ = true;
  cluster_->stats(w.id()).upstream_rq_active.add(1);
  start_attempt();
  if (req_end_) arm_route_timer();
}

void H2Stream::keep_for_replay(std::string_view d) {
  if (!replay_ok_) return;
  if (replay_.size() + d.size() > buffer_limit()) {
    replay_ok_ = false;  // as Envoy: a request larger than the buffer limit is not retried
    std::string().swap(replay_);
    return;
  }
  replay_.append(d);
}

void H2Stream::on_request_data(std::string_view d) {
  if (local_reply_ || response_complete_ || detached_) {
    c_->consume(id_, d.size());  // nobody wants it
    return;
  }
  unconsumed_ += d.size();
  touch();
  if (h1up_) {
    keep_for_replay(d);
    std::string enc;
    req_enc_.data(d, enc);
    h1up_->send(enc);
    if (h1up_->queued() <= share()) consume_request(unconsumed_);
  } else if (h2up_) {
    keep_for_replay(d);
    h2up_->send_body(h2up_id_, d);
  } else {
    // Between attempts (a retry backing off): kept whole for the next one, and not
    // consumed, so the client's window bounds it.
    replay_.append(d);
    if (replay_.size() > buffer_limit()) replay_ok_ = false;
  }
}

void H2Stream::on_request_trailers() {
  std::string bad = h2::check_trailers(block);
  if (!bad.empty()) {
    reset(NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  trailers_.fields = std::move(block);
  block.clear();
  on_request_end();
}

void H2Stream::on_request_end() {
  if (req_end_ || detached_) return;
  req_end_ = true;
  request_timer_.cancel();
  if (local_reply_ || response_complete_) return;
  if (h1up_) {
    std::string enc;
    req_enc_.end(enc);  // (trailers do not go to an HTTP/1.1 upstream, as in the HTTP/1.1 path)
    if (!enc.empty()) h1up_->send(enc);
  } else if (h2up_) {
    h2up_->end_body(h2up_id_, &trailers_);
  }
  arm_route_timer();
  if (h1up_ || h2up_) arm_try_timer();
}

void H2Stream::consume_request(size_t n) {
  if (n == 0 || detached_) return;
  unconsumed_ -= std::min(n, unconsumed_);
  c_->consume(id_, n);
}

// ---- upstream attempts ----

void H2Stream::start_attempt() {
  Worker& w = worker();
  retrying_ = false;
  attempts_++;
  host_ = cluster_->choose(lb_.has_hash ? lb_ : LbContext{false, 0, w.random()}, mono_ns());
  if (!host_) {
    local_reply(503, "no healthy upstream");
    return;
  }
  cluster_->stats(w.id()).upstream_rq_total.inc();
  host_->active_requests.fetch_add(1, std::memory_order_relaxed);
  if (decision_.vhost->cfg->include_request_attempt_count && attempts_ > 1)
    head_.headers.set("x-envoy-attempt-count", std::to_string(attempts_));
  if (cluster_->config().http2) start_h2_attempt();
  else start_h1_attempt();
  if (local_reply_ || detached_) return;
  if (!replay_ok_) std::string().swap(replay_);  // sent once, cannot be kept for another try
  consume_request(unconsumed_ > 0 && h1up_ && h1up_->queued() <= share() ? unconsumed_ : 0);
  if (req_end_) arm_try_timer();
}

void H2Stream::start_h1_attempt() {
  Worker& w = worker();
  std::shared_ptr<UpstreamConn> up = w.take_idle(host_.get());
  bool fresh = !up;
  if (fresh) {
    if (!cluster_->try_acquire_connection()) {
      cluster_->stats(w.id()).upstream_cx_overflow.inc();
      release_host();
      overflow_reply();
      return;
    }
    up = std::make_shared<UpstreamConn>(w, snapshot_->clusters.at(cluster_->name()), host_);
  } else {
    up->attach(this);
  }
  h1up_ = up;
  up->parser().reset();
  up->parser().expect_no_body(head_.method == "HEAD");
  int64_t t0 = mono_ns();
  std::string bytes;
  http::write_request_head(head_, bytes);
  w.modules().add(Module::kDeparser, static_cast<uint64_t>(mono_ns() - t0));
  req_enc_.data(replay_, bytes);
  if (req_end_) req_enc_.end(bytes);
  up->send(bytes);
  if (fresh) up->connect(this);
}

void H2Stream::start_h2_attempt() {
  Worker& w = worker();
  bool overflow = false;
  auto conn = h2_upstream_pool(w).get(w, snapshot_->clusters.at(cluster_->name()), host_, overflow);
  if (!conn) {
    release_host();
    overflow_reply();
    return;
  }
  bool end = req_end_ && replay_.empty() && trailers_.fields.empty();
  int32_t id = conn->open_stream(head_, end, this);
  if (id < 0) {
    asio::post(w.io(), [self = shared_from_this()] {
      if (!self->detached_ && !self->response_started_) self->attempt_failed(Why::kReset, kReplyUpstreamReset, 503);
    });
    return;
  }
  h2up_ = std::move(conn);
  h2up_id_ = id;
  if (!replay_.empty()) h2up_->send_body(id, replay_);
  if (req_end_ && !end) h2up_->end_body(id, &trailers_);
}

bool H2Stream::may_retry(Why why, unsigned status) {
  if (!replay_ok_ || response_started_ || !retry_wanted(decision_, attempts_, why, status)) return false;
  if (!cluster_->try_acquire_retry()) {
    cluster_->stats(worker().id()).upstream_rq_retry_overflow.inc();
    return false;
  }
  holds_retry_ = true;
  return true;
}

void H2Stream::retry() {
  cluster_->stats(worker().id()).upstream_rq_retry.inc();
  retrying_ = true;
  try_timer_.cancel();
  try_timer_.expires_after(retry_backoff(attempts_, worker().random()));
  try_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->detached_ || !self->retrying_ || self->local_reply_) return;
    self->cluster_->release_retry();
    self->holds_retry_ = false;
    self->start_attempt();
  });
}

void H2Stream::attempt_failed(Why why, const char* reason, unsigned status) {
  if (host_) cluster_->report_status(*host_, status, mono_ns());
  drop_upstream();
  if (may_retry(why, status)) {
    retry();
    return;
  }
  if (response_started_) {
    reset(NGHTTP2_INTERNAL_ERROR);  // the client has part of a response: it can only see a reset
    return;
  }
  local_reply(status, reason);
}

void H2Stream::upstream_failed(UpstreamConn::User::Failure f) {
  if (detached_ || response_complete_) return;
  h1up_.reset();
  h2up_.reset();
  switch (f) {
    case Failure::kConnect: attempt_failed(Why::kConnect, kReplyConnectFailure, 503); break;
    case Failure::kConnectTimeout: attempt_failed(Why::kConnectTimeout, kReplyConnectTimeout, 503); break;
    case Failure::kReset:
      cluster_->stats(worker().id()).upstream_rq_rx_reset.inc();
      attempt_failed(Why::kReset, kReplyUpstreamReset, 503);
      break;
    case Failure::kProtocol: attempt_failed(Why::kProtocol, kReplyProtocolError, 502); break;
  }
}

void H2Stream::release_host() {
  if (host_) {
    host_->active_requests.fetch_sub(1, std::memory_order_relaxed);
    host_.reset();
  }
}

void H2Stream::drop_upstream() {
  if (h1up_) {
    h1up_->close();
    h1up_.reset();
  }
  if (h2up_) {
    if (upstream_unconsumed_) h2up_->consume(h2up_id_, std::exchange(upstream_unconsumed_, 0));
    h2up_->abandon(h2up_id_);
    h2up_.reset();
  }
  release_host();
}

// Gives back what the stream holds: the upstream, the circuit-breaker slots, the timers.
void H2Stream::release_all() {
  drop_upstream();
  if (holds_request_) {
    cluster_->release_request();
    cluster_->stats(worker().id()).upstream_rq_active.add(-1);
    holds_request_ = false;
  }
  if (holds_retry_) {
    cluster_->release_retry();
    holds_retry_ = false;
  }
  retrying_ = false;
  route_timer_.cancel();
  try_timer_.cancel();
  request_timer_.cancel();
}

// ---- the response ----

void H2Stream::upstream_head(http::ResponseHead& h, bool end_stream) {
  if (response_started_ || detached_) return;
  Worker& w = worker();
  unsigned status = h.status;
  auto& cs = cluster_->stats(w.id());
  if (status >= 500 && may_retry(Why::kStatus, status)) {
    cs.upstream_rq_xx[4].inc();
    cluster_->report_status(*host_, status, mono_ns());
    // Abandon this answer and try again (an HTTP/1.1 connection cannot be reused mid-response).
    drop_upstream();
    retry();
    return;
  }
  int64_t t0 = mono_ns();
  cluster_->report_status(*host_, status, t0);
  cs.upstream_rq_xx[status_class(status)].inc();
  cs.upstream_rq_completed.inc();
  response_started_ = true;
  route_timer_.cancel();
  try_timer_.cancel();
  request_timer_.cancel();  // request_timeout ends when the response starts
  touch();
  apply_response_rules(decision_, *hcm_, h.headers);
  h.headers.set("x-envoy-upstream-service-time", std::to_string((t0 - start_ns_) / 1000000));
  bool no_body = end_stream || head_.method == "HEAD" || status == 204 || status == 304 ||
                 (h1up_ && h.content_length == 0u);
  submit_response(h, no_body);
  w.modules().add(Module::kDeparser, static_cast<uint64_t>(mono_ns() - t0));
  count_downstream_status(status);
}

void H2Stream::submit_response(const http::ResponseHead& h, bool no_body) {
  auto block = h2::response_block(h);
  auto nv = h2::nv_of(block);
  nghttp2_data_provider body{};
  body.read_callback = [](nghttp2_session* ng, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source*, void*) -> ssize_t {
    auto* st = static_cast<H2Stream*>(nghttp2_session_get_stream_user_data(ng, id));
    if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return st->read_response(buf, length, flags);
  };
  if (no_body) resp_.ended = true;
  nghttp2_submit_response(c_->ng_, id_, nv.data(), nv.size(), no_body ? nullptr : &body);
  c_->want_flush();
}

void H2Stream::upstream_data(std::string_view d) {
  if (!response_started_ || response_complete_ || detached_ || resp_.ended) return;
  touch();
  resp_.append(d);
  if (resp_.deferred) {
    resp_.deferred = false;
    nghttp2_session_resume_data(c_->ng_, id_);
  }
  c_->want_flush();
  if (h1up_ && !h1_paused_ && resp_.size() > share()) {  // back-pressure: the client reads slower
    h1_paused_ = true;
    h1up_->pause_reading();
  }
}

ssize_t H2Stream::read_response(uint8_t* buf, size_t length, uint32_t* flags) {
  bool trailers_due = false;
  ssize_t n = resp_.read(buf, length, flags, &trailers_due);
  if (n > 0) touch();
  if (trailers_due) {
    auto nv = h2::nv_of(resp_.trailers);
    nghttp2_submit_trailer(c_->ng_, id_, nv.data(), nv.size());
  }
  if (n > 0) {
    if (h2up_) {
      size_t k = std::min(static_cast<size_t>(n), upstream_unconsumed_);
      upstream_unconsumed_ -= k;
      h2up_->consume(h2up_id_, k);
    }
    if (h1_paused_ && h1up_ && resp_.size() <= share() / 2) {
      h1_paused_ = false;
      auto up = h1up_;
      asio::post(worker().io(), [up] { up->resume_reading(); });  // not from inside nghttp2's send
    }
  }
  return n;
}

void H2Stream::upstream_end() {
  if (!response_started_ || response_complete_ || detached_) return;
  response_complete_ = true;
  resp_.ended = true;
  if (resp_.deferred) {
    resp_.deferred = false;
    nghttp2_session_resume_data(c_->ng_, id_);
  }
  c_->want_flush();
}

void H2Stream::upstream_response_complete() {
  if (!h1up_ || detached_) return;
  auto up = std::move(h1up_);
  h1_paused_ = false;
  release_host();
  if (up->reusable() && req_end_ && up->queued() == 0) worker().put_idle(std::move(up));
  else up->close();
  release_all();
}

void H2Stream::h2up_data(std::string_view d) {
  upstream_unconsumed_ += d.size();
  if (!response_started_ || resp_.ended) {  // nobody will read these: give the window back now
    size_t n = std::exchange(upstream_unconsumed_, 0);
    if (h2up_) h2up_->consume(h2up_id_, n);
    return;
  }
  upstream_data(d);
}

void H2Stream::h2up_trailers(http::HeaderList& trailers) {
  if (!response_started_ || resp_.ended) return;
  resp_.has_trailers = true;
  for (auto& f : trailers.fields)
    if (!h2::is_connection_specific(f.name) && f.name != "te") resp_.trailers.push_back(std::move(f));
  if (resp_.trailers.empty()) resp_.has_trailers = false;
}

void H2Stream::h2up_end() {
  upstream_end();
  if (h2up_) {
    // The upstream stream is done; bytes still queued for the client were consumed on its
    // connection now, so the connection's window does not shrink with this stream.
    h2up_->consume(h2up_id_, std::exchange(upstream_unconsumed_, 0));
    // The upstream may end its response before the request's body is all
    // sent: the connection must not call this stream again (it may be gone
    // by then). A request still arriving is cancelled upstream; one that
    // ended finishes sending on its own.
    h2up_->abandon(h2up_id_, /*cancel=*/!req_end_);
    h2up_.reset();
  }
  release_host();
  if (!detached_) release_all();
}

// ---- local replies, resets, the end ----

void H2Stream::local_reply(unsigned status, std::string_view body, const http::HeaderList* extra, bool direct) {
  if (detached_) return;
  local_reply_ = true;
  response_started_ = response_complete_ = true;
  route_timer_.cancel();
  try_timer_.cancel();
  http::ResponseHead h;
  h.status = status;
  if (extra) h.headers = *extra;
  bool no_body = body.empty() || head_.method == "HEAD";
  if (grpc_ && !direct) {
    // Envoy answers a gRPC request in gRPC: a trailers-only response with the mapped status.
    h.status = 200;
    h.headers.add("content-type", "application/grpc");
    h.headers.add("grpc-status", std::to_string(h2::grpc_status_for_http(status)));
    if (!body.empty()) h.headers.add("grpc-message", std::string(body));
    no_body = true;
  } else {
    if (!body.empty()) h.headers.add("content-type", "text/plain");
    h.content_length = body.size();
  }
  if (direct) apply_response_rules(decision_, *hcm_, h.headers);
  if (!no_body) resp_.append(body);
  resp_.ended = true;
  submit_response(h, no_body);
  count_downstream_status(h.status);
  consume_request(unconsumed_);
  release_all();
}

void H2Stream::overflow_reply() {
  http::HeaderList extra;
  extra.add("x-envoy-overloaded", "true");
  local_reply(503, kReplyOverflow, &extra);
}

void H2Stream::reset(uint32_t code) {
  if (detached_) return;
  nghttp2_submit_rst_stream(c_->ng_, NGHTTP2_FLAG_NONE, id_, code);
  c_->want_flush();
  release_all();
}

// Our END_STREAM went out: a request still arriving is cut short with
// RST_STREAM(NO_ERROR), which tells the client to stop sending (RFC 9113 §8.1).
void H2Stream::on_end_stream_sent() {
  if (!req_end_ && !detached_) nghttp2_submit_rst_stream(c_->ng_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_NO_ERROR);
}

void H2Stream::on_closed(uint32_t error_code) {
  if (detached_) return;
  // The client reset the stream before the response ended.
  if (counted_ && !response_complete_ && error_code != NGHTTP2_NO_ERROR) stats_->downstream_rq_rx_reset.inc();
  detach();
}

void H2Stream::detach() {
  if (detached_) return;
  release_all();
  idle_timer_.cancel();
  if (counted_) stats_->downstream_rq_active.add(-1);
  // Request bytes the upstream never took go back to the client's connection
  // window (no automatic window updates): else every reset stream with bytes
  // in flight would shrink the connection's window for good.
  if (unconsumed_ && c_) c_->consume(id_, std::exchange(unconsumed_, 0));
  detached_ = true;
  c_ = nullptr;
}

// ---- timers: the route's timeout and per_try_timeout, the connection manager's
// request_timeout and stream_idle_timeout, as in the HTTP/1.1 path ----

// request_timeout: from the head to the end of the request, unless the
// response starts first; then 408 (the client is told to stop sending).
void H2Stream::arm_request_timer() {
  auto timeout = hcm_->cfg->request_timeout;
  if (timeout.count() == 0) return;
  request_timer_.expires_after(timeout);
  request_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->detached_ || self->req_end_ || self->response_started_) return;
    self->stats_->downstream_rq_timeout.inc();
    self->drop_upstream();
    self->local_reply(408, "request timeout");
  });
}

// stream_idle_timeout: no bytes either way on this stream for that long:
// before the response started, 504 if the request was complete, else 408; a reset after. Checked lazily against the last activity.
void H2Stream::arm_idle_timer() {
  auto timeout = hcm_->cfg->stream_idle_timeout;
  if (timeout.count() == 0) return;
  auto ns = static_cast<int64_t>(timeout.count()) * 1000000;
  idle_timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, active_ns_ + ns - mono_ns())));
  idle_timer_.async_wait([self = shared_from_this(), ns](const boost::system::error_code& ec) {
    if (ec || self->detached_) return;
    if (mono_ns() - self->active_ns_ < ns) {
      self->arm_idle_timer();
      return;
    }
    self->stats_->downstream_rq_timeout.inc();
    if (self->response_started_) {
      self->reset(NGHTTP2_CANCEL);
      return;
    }
    self->drop_upstream();
    self->local_reply(self->req_end_ ? 504 : 408, "stream timeout");  // Envoy's maybeRequestTimeoutCode
  });
}

void H2Stream::arm_route_timer() {
  if (local_reply_ || response_started_ || detached_) return;
  const auto& a = *decision_.route->cfg->route;
  if (a.timeout.count() == 0) return;
  route_timer_.expires_after(a.timeout);
  route_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->detached_ || self->response_started_) return;
    self->cluster_->stats(self->worker().id()).upstream_rq_timeout.inc();
    self->stats_->downstream_rq_timeout.inc();
    if (self->host_) self->cluster_->report_status(*self->host_, 504, mono_ns());
    self->drop_upstream();
    self->local_reply(504, "upstream request timeout");
  });
}

void H2Stream::arm_try_timer() {
  const auto& a = *decision_.route->cfg->route;
  if (!a.retry_policy || a.retry_policy->per_try_timeout.count() == 0) return;
  try_timer_.expires_after(a.retry_policy->per_try_timeout);
  try_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->detached_ || self->response_started_ || self->retrying_) return;
    self->cluster_->stats(self->worker().id()).upstream_rq_per_try_timeout.inc();
    self->attempt_failed(Why::kPerTryTimeout, "upstream request timeout", 504);
  });
}

}  // namespace

void start_h2_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener, std::string_view first_bytes) {
  std::make_shared<H2Session>(w, std::move(sock), listener)->start(first_bytes);
}

}  // namespace dpukit::mesh
