#include "http2/h2_upstream.h"

#include <random>

#include "dataplane/l7_chain.h"
#include "dpukit/core/log.h"
#include "http2/h2_headers.h"

namespace dpukit::mesh {

namespace {
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxWriteBatch = 256 * 1024;  // bytes taken from nghttp2 before a write starts

H2UpstreamConn* self_of(void* user_data) { return static_cast<H2UpstreamConn*>(user_data); }
}  // namespace

H2UpstreamConn::H2UpstreamConn(Worker& w, std::shared_ptr<ClusterRuntime> cluster, std::shared_ptr<Host> host)
    : w_(w), cluster_(std::move(cluster)), host_(std::move(host)), sock_(w.io().get_executor()), timer_(w.io()), keepalive_(w.io()), in_(kReadChunk) {
  cluster_->stats(w_.id()).upstream_cx_total.inc();
  cluster_->stats(w_.id()).upstream_cx_active.add(1);
  nghttp2_session_callbacks* cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_option* opt;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);  // the window opens as the client takes the bytes
  nghttp2_session_client_new2(&ng_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  h2::submit_settings(ng_, cluster_->config().http2_protocol_options, 0, false);
}

H2UpstreamConn::~H2UpstreamConn() {
  nghttp2_session_del(ng_);
  cluster_->stats(w_.id()).upstream_cx_active.add(-1);
  cluster_->stats(w_.id()).upstream_cx_destroy.inc();
  cluster_->release_connection();
}

void H2UpstreamConn::connect() {
  // TCP (with TCP_NODELAY), a Unix socket, or the service's shared-memory attach point.
  connect_upstream(shared_from_this(), sock_, timer_, *cluster_, w_.id(), *host_, [this](ConnectOutcome o,
                                                                                        const std::string&) {
    if (closed_ || connected_) return;
    if (o == ConnectOutcome::kTimedOut) {
      cluster_->stats(w_.id()).upstream_cx_connect_timeout.inc();
      fail(H2UpstreamUser::Failure::kConnectTimeout);
    } else if (o == ConnectOutcome::kFailed) {
      fail(H2UpstreamUser::Failure::kConnect);
    } else {
      connected_ = true;
      arm_keepalive();
      do_read();
      flush();
    }
  });
}

std::string H2UpstreamConn::local_address() {
  if (local_address_.empty() && connected_) local_address_ = local_address_of(sock_.native_handle());
  return local_address_;
}

int32_t H2UpstreamConn::open_stream(const http::RequestHead& head, bool end_stream, H2UpstreamUser* user) {
  if (!usable()) return -1;
  auto block = h2::request_block(head);
  auto nv = h2::nv_of(block);
  nghttp2_data_provider body{};
  body.read_callback = read_body;
  int32_t id = nghttp2_submit_request(ng_, nullptr, nv.data(), nv.size(), end_stream ? nullptr : &body, nullptr);
  if (id < 0) return -1;
  Stream& s = streams_[id];
  s.user = user;
  s.out.ended = end_stream;
  want_flush();
  return id;
}

void H2UpstreamConn::send_body(int32_t id, std::string_view data) {
  Stream* s = stream(id);
  if (!s || data.empty()) return;
  s->out.append(data);
  if (s->out.deferred) {
    s->out.deferred = false;
    nghttp2_session_resume_data(ng_, id);
  }
  want_flush();
}

void H2UpstreamConn::end_body(int32_t id, const http::HeaderList* trailers) {
  Stream* s = stream(id);
  if (!s || s->out.ended) return;
  s->out.ended = true;
  if (trailers && !trailers->fields.empty()) {
    s->out.has_trailers = true;
    s->out.trailers = trailers->fields;
  }
  if (s->out.deferred) {
    s->out.deferred = false;
    nghttp2_session_resume_data(ng_, id);
  }
  want_flush();
}

void H2UpstreamConn::consume(int32_t id, size_t n) {
  if (closed_ || n == 0) return;
  nghttp2_session_consume(ng_, id, n);
  want_flush();
}

void H2UpstreamConn::abandon(int32_t id, bool cancel) {
  Stream* s = stream(id);
  if (!s) return;
  s->user = nullptr;
  if (cancel && !closed_) {
    nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    want_flush();
  }
}

H2UpstreamConn::Stream* H2UpstreamConn::stream(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : &it->second;
}

// ---- nghttp2 callbacks (inside mem_recv / mem_send) ----

int H2UpstreamConn::on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                              const uint8_t* value, size_t valuelen, uint8_t, void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto* self = self_of(user_data);
  Stream* s = self->stream(frame->hd.stream_id);
  if (!s) return 0;
  // The upstream's header block has the HTTP/1.1 response parser's limits: HPACK
  // lets a few bytes on the wire expand to megabytes of fields.
  static const http::Limits kLimits;
  s->block_bytes += namelen + valuelen + 4;  // ": " and CRLF, as HTTP/1.1 counts it
  if (s->block.size() >= kLimits.max_headers_count || s->block_bytes > kLimits.max_header_bytes) {
    self->cluster_->stats(self->w_.id()).upstream_cx_protocol_error.inc();
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // nghttp2 resets the stream; its user hears h2up_failed
  }
  s->block.push_back({std::string(h2::as_view(name, namelen)), std::string(h2::as_view(value, valuelen))});
  return 0;
}

void H2UpstreamConn::arm_keepalive() {
  const auto& ka = cluster_->config().http2_protocol_options.connection_keepalive;
  if (!ka || closed_) return;
  // Envoy's default interval_jitter: up to 15 % more, so that a worker's connections do not ping together.
  thread_local std::mt19937 rng(std::random_device{}());
  const auto interval = ka->interval + std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(
                                           0, ka->interval.count() * 15 / 100)(rng));
  keepalive_.expires_after(awaiting_ping_ack_ ? ka->timeout : interval);
  keepalive_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_) return;
    if (self->awaiting_ping_ack_) {  // no ACK within the timeout: the host is gone without a reset
      self->cluster_->stats(self->w_.id()).http2_keepalive_timeout.inc();
      log_warn("mesh: HTTP/2 upstream " + self->host_->label + ": no PING ACK within connection_keepalive.timeout, closing");
      self->fail(H2UpstreamUser::Failure::kReset);
      return;
    }
    self->awaiting_ping_ack_ = true;
    nghttp2_submit_ping(self->ng_, NGHTTP2_FLAG_NONE, nullptr);
    self->want_flush();
    self->arm_keepalive();
  });
}

int H2UpstreamConn::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  auto* self = self_of(user_data);
  if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) && self->awaiting_ping_ack_) {
    self->awaiting_ping_ack_ = false;
    self->arm_keepalive();  // the next PING after the interval
    return 0;
  }
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    self->goaway_ = true;  // streams above last_stream_id close with REFUSED_STREAM; no new ones here
    h2_upstream_pool(self->w_).forget(self);
    return 0;
  }
  Stream* s = self->stream(frame->hd.stream_id);
  if (!s) return 0;
  bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS) {
    auto block = std::move(s->block);
    s->block.clear();
    if (!s->user) return 0;
    if (!s->head_seen) {
      http::ResponseHead head;
      std::string bad = h2::response_head_from_h2(block, head);
      if (!bad.empty()) {
        self->cluster_->stats(self->w_.id()).upstream_cx_protocol_error.inc();
        nghttp2_submit_rst_stream(self->ng_, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_PROTOCOL_ERROR);
        auto* u = std::exchange(s->user, nullptr);
        u->h2up_failed(H2UpstreamUser::Failure::kProtocol);
        return 0;
      }
      if (head.status < 200) return 0;  // 1xx: the final head follows
      s->head_seen = true;
      if (end) s->ended = true;
      s->user->h2up_head(head, end);
    } else {
      http::HeaderList trailers;
      trailers.fields = std::move(block);
      s->ended = true;
      s->user->h2up_trailers(trailers);
    }
  } else if (frame->hd.type == NGHTTP2_DATA && end) {
    s->ended = true;
  } else {
    return 0;
  }
  if (end && s->user) s->user->h2up_end();
  return 0;
}

int H2UpstreamConn::on_data(nghttp2_session* ng, uint8_t, int32_t id, const uint8_t* data, size_t len,
                            void* user_data) {
  Stream* s = self_of(user_data)->stream(id);
  if (!s || !s->user) {
    nghttp2_session_consume(ng, id, len);  // nobody reads it: keep the connection window open
    return 0;
  }
  s->user->h2up_data(h2::as_view(data, len));
  return 0;
}

int H2UpstreamConn::on_stream_close(nghttp2_session*, int32_t id, uint32_t, void* user_data) {
  auto* self = self_of(user_data);
  auto it = self->streams_.find(id);
  if (it == self->streams_.end()) return 0;
  H2UpstreamUser* u = it->second.user;
  bool ended = it->second.ended;
  self->streams_.erase(it);
  if (u && !ended) {  // reset, refused, or the connection went away before the response ended
    // (upstream_rq_rx_reset is counted by the user's upstream_failed.)
    u->h2up_failed(H2UpstreamUser::Failure::kReset);
  }
  return 0;
}

ssize_t H2UpstreamConn::read_body(nghttp2_session* ng, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                                  nghttp2_data_source*, void* user_data) {
  Stream* s = self_of(user_data)->stream(id);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  bool trailers_due = false;
  ssize_t n = s->out.read(buf, length, flags, &trailers_due);
  if (trailers_due) {
    auto nv = h2::nv_of(s->out.trailers);
    nghttp2_submit_trailer(ng, id, nv.data(), nv.size());
  }
  if (n > 0 && s->user) s->user->h2up_sent(static_cast<size_t>(n));
  return n;
}

// ---- the socket ----

void H2UpstreamConn::do_read() {
  if (reading_ || closed_) return;
  in_.make_room(kReadChunk);
  reading_ = true;
  sock_.async_read_some(in_.space(), [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
    self->reading_ = false;
    if (self->closed_) return;
    if (ec) {
      self->fail(H2UpstreamUser::Failure::kReset);
      return;
    }
    self->in_ng_ = true;
    ssize_t r = nghttp2_session_mem_recv(self->ng_, reinterpret_cast<const uint8_t*>(self->in_.bytes.data()), n);
    self->in_ng_ = false;
    if (r < 0) {
      log_warn("mesh: HTTP/2 upstream " + self->host_->label + ": " + nghttp2_strerror(static_cast<int>(r)));
      self->cluster_->stats(self->w_.id()).upstream_cx_protocol_error.inc();
      self->fail(H2UpstreamUser::Failure::kProtocol);
      return;
    }
    self->flush();
    self->do_read();
  });
}

void H2UpstreamConn::want_flush() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  asio::post(w_.io(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->flush();
  });
}

void H2UpstreamConn::flush() {
  if (closed_ || !connected_ || out_.writing || in_ng_) return;
  in_ng_ = true;
  while (out_.pending.size() < kMaxWriteBatch) {
    const uint8_t* data;
    ssize_t n = nghttp2_session_mem_send(ng_, &data);
    if (n <= 0) {
      if (n < 0) log_warn(std::string("mesh: HTTP/2 upstream: ") + nghttp2_strerror(static_cast<int>(n)));
      break;
    }
    out_.pending.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  in_ng_ = false;
  if (out_.pending.empty()) {
    if (!nghttp2_session_want_read(ng_) && !nghttp2_session_want_write(ng_)) fail(H2UpstreamUser::Failure::kReset);
    return;
  }
  out_.start(sock_, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (self->closed_) return;
    if (ec) {
      self->fail(H2UpstreamUser::Failure::kReset);
      return;
    }
    self->flush();
  });
}

void H2UpstreamConn::fail(H2UpstreamUser::Failure f) {
  if (closed_) return;
  auto self = shared_from_this();
  close();
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, s] : streams)
    if (s.user && !s.ended) s.user->h2up_failed(f);
}

void H2UpstreamConn::close() {
  if (closed_) return;
  closed_ = true;
  h2_upstream_pool(w_).forget(this);
  timer_.cancel();
  keepalive_.cancel();
  sock_.close();
}

// ---- the pool ----

std::shared_ptr<H2UpstreamConn> H2UpstreamPool::get(Worker& w, const std::shared_ptr<ClusterRuntime>& cluster,
                                                    const std::shared_ptr<Host>& host, bool& overflow) {
  overflow = false;
  auto it = conns_.find(host.get());
  if (it != conns_.end() && it->second->usable()) return it->second;
  if (!cluster->try_acquire_connection()) {
    cluster->stats(w.id()).upstream_cx_overflow.inc();
    overflow = true;
    return nullptr;
  }
  auto conn = std::make_shared<H2UpstreamConn>(w, cluster, host);
  conns_[host.get()] = conn;
  conn->connect();
  return conn;
}

void H2UpstreamPool::forget(const H2UpstreamConn* conn) {
  for (auto it = conns_.begin(); it != conns_.end(); ++it)
    if (it->second.get() == conn) {
      conns_.erase(it);
      return;
    }
}

H2UpstreamPool& h2_upstream_pool(Worker& w) {
  if (!w.h2_upstreams) w.h2_upstreams = std::make_shared<H2UpstreamPool>();
  return *w.h2_upstreams;
}

}  // namespace dpukit::mesh
