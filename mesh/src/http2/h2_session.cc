// The downstream HTTP/2 connection and its streams. Each stream is a
// request driven through a router stream (dataplane/router_stream.h: the
// filter and router modules, the cluster's load balancer and circuit
// breakers, an HTTP/1.1 or HTTP/2 upstream, retries and timeouts), as the
// HTTP/1.1 codec's requests are. Flow control: request bytes are consumed
// (the client's window reopens) only once the upstream took them; response
// bytes wait in the stream's queue for nghttp2's data source, and the
// upstream is paused (or, for HTTP/2, its window left closed) while the
// client does not read. A stream's timers and local replies are its
// ActiveStream's (dataplane/active_stream.h), as an HTTP/1.1 request's are.
#include "http2/h2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <unordered_map>

#include "dataplane/active_stream.h"
#include "dataplane/l7_chain.h"
#include "dataplane/router_stream.h"
#include "dpukit/core/log.h"
#include "http2/freed_memory.h"
#include "http2/h2_headers.h"
#include "http2/h2_upstream.h"
#include "http2/nghttp2_util.h"

namespace dpukit::mesh {

namespace {

// The read buffer: kSmallReadChunk, doubled up to kReadChunk while reads
// fill it, and back after a small read (an idle connection holds little).
constexpr size_t kSmallReadChunk = 4 * 1024;
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxWriteBatch = 256 * 1024;  // bytes taken from nghttp2 before a write starts
constexpr size_t kMinStreamShare = 64 * 1024;  // see H2Stream::share()

class H2Session;

// A connection that held this many streams at once gives the freed memory
// back when it has none left (give_back_freed_memory).
constexpr size_t kGiveBackAfterStreams = 256;


class H2Stream : public std::enable_shared_from_this<H2Stream>, public RouterDownstream, public ActiveStreamCodec {
 public:
  H2Stream(H2Session& session, int32_t id);
  ~H2Stream() override {
    if (router_) router_->detach();
    if (active_) active_->detach();
  }

  // ---- from the session (nghttp2's events for this stream) ----
  std::vector<http::Header> block;  // the header block being received
  size_t block_bytes = 0;
  bool head_done = false;  // the request head arrived: a later block is the trailers
  void on_request_head(bool end_stream);
  void on_request_data(std::string_view d);
  void on_request_trailers();
  void on_request_end();
  void on_closed(uint32_t error_code);
  void begin();  // once the stream is the session's: its timers start
  ssize_t read_response(uint8_t* buf, size_t length, uint32_t* flags);
  void on_end_stream_sent();
  void detach();  // the connection went away

 private:
  Worker& worker();
  size_t share() const;
  void consume_request(size_t n);
  void submit_response(const http::ResponseHead& h, bool no_body);
  void response_data_ready();
  void reset(uint32_t code);
  void count_downstream_status(unsigned status) { stats_->downstream_rq_xx[status_class(status)].inc(); }
  void touch() { active_->touch(); }  // stream activity, for stream_idle_timeout

  // RouterDownstream
  void encode_headers(http::ResponseHead& h, bool end_stream) override;
  void encode_data(std::string_view d) override;
  void encode_trailers(http::HeaderList& trailers) override;
  void encode_end() override;
  void send_local_reply(http::ResponseHead& head, std::string_view body) override;
  void reset_stream() override { reset(NGHTTP2_INTERNAL_ERROR); }
  void response_done() override {}
  void decided() override;
  size_t request_buffer_limit() const override { return share(); }
  void request_sent(size_t n) override { consume_request(std::min(n, unconsumed_)); }
  void request_drained() override { consume_request(unconsumed_); }
  // ActiveStreamCodec
  void timed_out_in_head(unsigned status, std::string_view body, std::string_view details) override;
  void timed_out(bool reset) override {
    if (reset) this->reset(NGHTTP2_CANCEL);
  }

  H2Session* c_;  // null once detached
  const int32_t id_;
  std::shared_ptr<const Snapshot> snapshot_;
  const ListenerRuntime* lr_;
  const HcmRuntime* hcm_;
  HttpStats* stats_;
  std::shared_ptr<ActiveStream> active_;  // from the first HEADERS frame on
  std::shared_ptr<RouterStream> router_;  // from the request head on
  http::HeaderList trailers_;  // the request's
  size_t unconsumed_ = 0;      // request bytes received, not yet consumed (the upstream has not taken them)
  h2::BodyQueue resp_;
  bool counted_ = false, req_end_ = false, resp_paused_ = false, detached_ = false;
};

class H2Session : public std::enable_shared_from_this<H2Session>,
                  public ConnectionIdleTimer::Connection,
                  public DrainableConnection {
 public:
  H2Session(Worker& w, DownstreamStream sock, const ListenerRuntime& lr)
      : w_(w), sock_(std::move(sock)), snapshot_(w.snapshot()), lr_(&lr), hcm_(lr.hcm.get()),
        stats_(hcm_->stats[w.id()]), in_(kSmallReadChunk), idle_(w, *this) {
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
    drain_id_ = w_.track(this);
  }
  ~H2Session() override {
    w_.untrack(drain_id_);
    close();
    nghttp2_session_del(ng_);
    stats_->downstream_cx_active.add(-1);
  }

  // ---- DrainableConnection ----
  const ListenerRuntime& served() const override { return *lr_; }
  bool served_by(const ListenerRuntime& successor) const override { return successor.hcm != nullptr; }
  // Envoy's drain of an HTTP/2 connection: GOAWAY(NO_ERROR) naming the last
  // stream taken, so the streams in flight finish and no new one starts; the
  // connection closes when they are done (flush: nghttp2 then wants neither read nor write).
  void start_drain() override {
    if (closed_) return;
    auto self = shared_from_this();
    stats_->downstream_cx_drain_close.inc();
    nghttp2_submit_goaway(ng_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(ng_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
    flush();
  }
  void drain_close() override {
    if (closed_) return;
    auto self = shared_from_this();
    close();
  }

  void start(std::string_view first_bytes) {
    conn_ = downstream_facts(sock_, lr_->cfg->tls_inspector, hcm_->reads_identity);
    arm_idle_timer();
    if (!first_bytes.empty() && !receive(first_bytes)) return;
    flush();
    do_read();
  }

  // ---- for the streams ----
  Worker& w_;
  nghttp2_session* ng_ = nullptr;
  // What the connection says, with its identity when `hcm` (a stream's configuration, perhaps
  // newer than the connection) has an RBAC filter.
  const std::shared_ptr<const DownstreamFacts>& conn(const HcmRuntime& hcm) {
    if (!conn_->identity && hcm.reads_identity) conn_ = downstream_facts(sock_, lr_->cfg->tls_inspector, true);
    return conn_;
  }
  // A new stream's configuration: the newest snapshot's successor of its listener or filter chain (take_newest_config).
  void current_config(std::shared_ptr<const Snapshot>& snap, const ListenerRuntime*& lr, const HcmRuntime*& hcm,
                      HttpStats*& stats) {
    take_newest_config(w_.snapshot(), w_.id(), snapshot_, lr_, hcm_, stats_);
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
  bool closed() const override { return closed_; }

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
      auto st = std::make_shared<H2Stream>(s, frame->hd.stream_id);
      s.streams_[frame->hd.stream_id] = st;
      st->begin();
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
    if (s.streams_.empty()) s.maybe_give_back_memory();
    if (!s.closed_ && !s.serving()) {  // the connection's idle_timeout, from now
      s.idle_.touch();
      s.arm_idle_timer();
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
      self->idle_.touch();
      if (!self->receive(std::string_view(self->in_.bytes.data(), n))) return;
      // Every read is taken whole (wpos stays 0).
      if (n < kSmallReadChunk) self->in_.shrink_if_empty(kSmallReadChunk);
      else self->in_.grow_if_filled(n, kReadChunk);
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
      self->idle_.touch();
      self->flush();
    });
  }

  // ---- ConnectionIdleTimer::Connection: idle_timeout ends the connection with GOAWAY(NO_ERROR) ----
  void arm_idle_timer() { idle_.arm(hcm_->cfg->idle_timeout, shared_from_this()); }
  // A stream whose header block never ended does not keep the connection:
  // nghttp2 takes no other frame meanwhile, so the client would hold it forever.
  bool serving() const override {
    return std::any_of(streams_.begin(), streams_.end(), [](const auto& kv) { return kv.second->head_done; });
  }
  void idle_timed_out() override {
    stats_->downstream_cx_idle_timeout.inc();
    nghttp2_session_terminate_session(ng_, NGHTTP2_NO_ERROR);
    flush();
  }

  void maybe_give_back_memory() {
    if (peak_streams_ < kGiveBackAfterStreams) return;
    peak_streams_ = 0;
    give_back_freed_memory(w_.io());
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    auto streams = std::move(streams_);
    streams_.clear();
    for (auto& [id, st] : streams) st->detach();
    maybe_give_back_memory();
    idle_.cancel();
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
  std::shared_ptr<const DownstreamFacts> conn_;
  ConnectionIdleTimer idle_;
  std::unordered_map<int32_t, std::shared_ptr<H2Stream>> streams_;
  h2::RequestStreamIds ids_;
  size_t peak_streams_ = 0;  // since the memory was last given back
  bool reading_ = false, closed_ = false, in_ng_ = false, flush_posted_ = false;
  uint64_t drain_id_ = 0;  // with the worker's drain manager
};

// ---- the stream ----

H2Stream::H2Stream(H2Session& session, int32_t id)
    : c_(&session), id_(id) {
  session.current_config(snapshot_, lr_, hcm_, stats_);
  nghttp2_session_set_stream_user_data(session.ng_, id, this);
}

Worker& H2Stream::worker() { return c_->w_; }

void H2Stream::begin() {
  active_ = std::make_shared<ActiveStream>(worker(), *hcm_, *stats_, *this);
  active_->start();
}

// What one stream may hold of the bytes its client or an HTTP/1.1 upstream
// did not take yet: per_connection_buffer_limit_bytes split between the
// connection's open streams, so that all of them together hold about that
// limit, not a limit each (1,024 streams of a client that does not read:
// 1 GiB), and at least kMinStreamShare each, so that many streams still move.
// Each stream is paused and resumed on its own queue: none waits for another.
size_t H2Stream::share() const {
  size_t limit = lr_->cfg->per_connection_buffer_limit_bytes;
  size_t streams = std::max<size_t>(1, c_ ? c_->streams_.size() : 1);
  return std::min(limit, std::max(kMinStreamShare, limit / streams));
}

void H2Stream::on_request_head(bool end_stream) {
  Worker& w = worker();
  int64_t t0 = mono_ns();
  http::RequestHead head;
  std::string bad = h2::request_head_from_h2(block, end_stream, head);
  std::vector<http::Header>().swap(block);
  if (resp_.ended) return;  // answered already: request_headers_timeout
  if (!bad.empty()) {
    log_debug("mesh: HTTP/2 stream " + std::to_string(id_) + " malformed: " + bad);
    reset(NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  w.modules().add(Module::kParser, static_cast<uint64_t>(mono_ns() - t0));
  counted_ = true;
  stats_->downstream_rq_total.inc();
  stats_->downstream_rq_active.add(1);
  req_end_ = end_stream;
  router_ = std::make_shared<RouterStream>(w, snapshot_, *lr_, *stats_, std::move(head), c_->conn(*hcm_), *this);
  router_->info().protocol = "HTTP/2";
  active_->headers_done(router_, *hcm_, *stats_);
  if (req_end_) {
    active_->request_done();
    router_->decode_end(nullptr);
  }
  // In the pipelined model the head goes round the stages (decided() when
  // back); the body that comes meanwhile waits in the router stream,
  // unconsumed, so the client's window bounds it.
  router_->decide(worker().pipeline());
}

void H2Stream::decided() {
  if (!detached_) active_->decided();
}

void H2Stream::on_request_data(std::string_view d) {
  if (detached_ || !router_ || !router_->wants_body()) {
    if (c_) c_->consume(id_, d.size());  // nobody wants it
    return;
  }
  unconsumed_ += d.size();
  touch();
  // Taken by the upstream (request_drained, request_sent) or, between attempts, kept
  // for the next one and not consumed: the client's window bounds it.
  router_->decode_data(d);
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
  active_->request_done();
  if (router_) router_->decode_end(&trailers_);
}

void H2Stream::consume_request(size_t n) {
  if (n == 0 || detached_) return;
  unconsumed_ -= std::min(n, unconsumed_);
  c_->consume(id_, n);
}

// ---- the response ----

void H2Stream::encode_headers(http::ResponseHead& h, bool end_stream) {
  touch();
  int64_t t0 = mono_ns();
  unsigned status = h.status;
  bool no_body = end_stream || router_->head().method == "HEAD" || status == 204 || status == 304;
  submit_response(h, no_body);
  worker().modules().add(Module::kDeparser, static_cast<uint64_t>(mono_ns() - t0));
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

void H2Stream::encode_data(std::string_view d) {
  if (detached_ || resp_.ended) {  // nobody will read these: the upstream's window back now
    router_->response_sent(d.size());
    return;
  }
  touch();
  resp_.append(d);
  response_data_ready();
  if (!resp_paused_ && resp_.size() > share()) {  // back-pressure: the client reads slower
    resp_paused_ = true;
    router_->pause_response();
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
  if (n > 0 && router_) {
    router_->response_sent(static_cast<size_t>(n));
    if (resp_paused_ && resp_.size() <= share() / 2) {
      resp_paused_ = false;
      asio::post(worker().io(), [r = router_] { r->resume_response(); });  // not from inside nghttp2's send
    }
  }
  return n;
}

void H2Stream::encode_trailers(http::HeaderList& trailers) {
  if (resp_.ended) return;
  resp_.has_trailers = true;
  for (auto& f : trailers.fields)
    if (!h2::is_connection_specific(f.name) && f.name != "te") resp_.trailers.push_back(std::move(f));
  if (resp_.trailers.empty()) resp_.has_trailers = false;
}

void H2Stream::encode_end() {
  if (detached_) return;
  resp_.ended = true;
  response_data_ready();
}

// New response bytes or the end: nghttp2's data source, if it waits, goes on.
void H2Stream::response_data_ready() {
  if (resp_.deferred) {
    resp_.deferred = false;
    nghttp2_session_resume_data(c_->ng_, id_);
  }
  c_->want_flush();
}

// ---- local replies, resets, the end ----

void H2Stream::send_local_reply(http::ResponseHead& h, std::string_view body) {
  if (detached_) return;
  if (!body.empty()) resp_.append(body);
  resp_.ended = true;
  submit_response(h, body.empty());
  count_downstream_status(h.status);
  consume_request(unconsumed_);
}

// The header block did not end in time: there is no router to answer, so the reply is made here.
void H2Stream::timed_out_in_head(unsigned status, std::string_view body, std::string_view details) {
  if (detached_) return;
  LocalReply reply = local_reply(status, body, nullptr, false);
  send_local_reply(reply.head, reply.body);
  log_codec_reply(*hcm_, c_->conn(*hcm_).get(), "HTTP/2", status, reply.body.size(), details, 0, active_->start_ns());
}

void H2Stream::reset(uint32_t code) {
  if (detached_) return;
  nghttp2_submit_rst_stream(c_->ng_, NGHTTP2_FLAG_NONE, id_, code);
  c_->want_flush();
  if (router_) router_->release();
  active_->detach();
}

// Our END_STREAM went out: a request still arriving is cut short with
// RST_STREAM(NO_ERROR), which tells the client to stop sending (RFC 9113 §8.1).
void H2Stream::on_end_stream_sent() {
  if (!req_end_ && !detached_) nghttp2_submit_rst_stream(c_->ng_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_NO_ERROR);
}

void H2Stream::on_closed(uint32_t error_code) {
  if (detached_) return;
  // The client reset the stream before the response ended.
  if (counted_ && !(router_ && router_->response_complete()) && error_code != NGHTTP2_NO_ERROR) {
    stats_->downstream_rq_rx_reset.inc();
    if (router_) router_->downstream_disconnected();
  }
  detach();
}

void H2Stream::detach() {
  if (detached_) return;
  if (router_) router_->detach();
  active_->detach();
  if (counted_) stats_->downstream_rq_active.add(-1);
  // Request bytes the upstream never took go back to the client's connection
  // window (no automatic window updates): else every reset stream with bytes
  // in flight would shrink the connection's window for good.
  if (unconsumed_ && c_) c_->consume(id_, std::exchange(unconsumed_, 0));
  detached_ = true;
  c_ = nullptr;
}

}  // namespace

void start_h2_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener, std::string_view first_bytes) {
  std::make_shared<H2Session>(w, std::move(sock), listener)->start(first_bytes);
}

}  // namespace dpukit::mesh
