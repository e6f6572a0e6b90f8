#include "dataplane/router_stream.h"

#include <algorithm>

#include "dataplane/active_stream.h"
#include "http2/h2_headers.h"

namespace dpukit::mesh {

void log_codec_reply(const HcmRuntime& hcm, const DownstreamFacts* conn, std::string_view protocol, unsigned status,
                     size_t body_bytes, std::string_view details, uint32_t flags, int64_t start_ns) {
  if (hcm.access_logs.empty()) return;
  StreamInfo info;
  const int64_t now = mono_ns();
  info.start_ns = start_ns ? start_ns : now;
  info.start_time -= std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::nanoseconds(now - info.start_ns));
  info.protocol = protocol;
  info.response_code = status;
  info.response_code_details = details;
  info.response_flags = flags;
  info.bytes_sent = body_bytes;
  info.downstream = conn;
  hcm.log(info);
}

RouterStream::RouterStream(Worker& w, std::shared_ptr<const Snapshot> snapshot, const ListenerRuntime& lr,
                           HttpStats& stats, http::RequestHead head, std::shared_ptr<const DownstreamFacts> conn,
                           RouterDownstream& ds)
    : w_(w), snapshot_(std::move(snapshot)), lr_(&lr), hcm_(lr.hcm.get()), stats_(&stats), ds_(&ds),
      conn_(std::move(conn)), head_(std::move(head)),
      draws_{w.random(), w.random(), w.random(), w.random(), w.random()}, route_timer_(w.io()), try_timer_(w.io()),
      start_ns_(mono_ns()) {
  // The body's framing is fixed by the head (routing never changes it): set
  // here, before any body arrives and before a stage thread sees the request.
  framing_ = http::request_body_encoder(head_);
  grpc_ = h2::is_grpc(head_);
  info_.start_ns = start_ns_;
  info_.request = &head_;
  info_.downstream = conn_.get();
}

RouterStream::~RouterStream() { drop_upstream(); }

// ---- the route decision ----

bool RouterStream::decide(Pipeline* pipeline) {
  if (pipeline) {
    in_stage_ = true;
    in_stage_self_ = shared_from_this();
    if (pipeline->submit(StageItem{this, 0})) return true;
    in_stage_ = false;  // the first ring is full: run the modules here
    in_stage_self_.reset();
  }
  stage_match_action();
  stage_deparse();
  act();
  return false;
}

// On a stage thread in the pipelined model: these touch only the head, the draws and the decision.
void RouterStream::stage_match_action() { decision_ = filter_and_route(*hcm_, head_, *conn_, draws_, mono_ns()); }

void RouterStream::stage_deparse() {
  if (decision_.kind != RouteDecision::Kind::kForward || decision_.cluster->config().http2) return;
  int64_t t0 = mono_ns();
  http::write_request_head(head_, head_bytes_);
  deparser_ns_ = static_cast<uint64_t>(mono_ns() - t0);
}

void RouterStream::stage_done(uint64_t) {
  auto self = std::move(in_stage_self_);
  in_stage_ = false;
  if (ds_) ds_->decided();
}

void RouterStream::act() {
  if (!ds_) return;
  auto keep = shared_from_this();  // the codec may let go of this stream when it is answered
  acted_ = true;
  RouteDecision& d = decision_;
  w_.modules().add(Module::kFilter, d.filter_ns);
  if (d.router_ns) w_.modules().add(Module::kRouter, d.router_ns);
  count_decision(d, *stats_);
  if (d.route) info_.route_name = d.route->cfg->name;
  if (d.kind == RouteDecision::Kind::kLocalReply) {
    info_.upstream_cluster = d.routed_cluster;
    send_local_reply(d.status, d.body, d.details, d.flags, &d.extra, d.direct);
    return;
  }
  if (deparser_ns_) w_.modules().add(Module::kDeparser, deparser_ns_);
  cluster_ = d.cluster;
  info_.upstream_cluster = cluster_->name();
  if (!cluster_->try_acquire_request()) {
    cluster_->stats(w_.id()).upstream_rq_pending_overflow.inc();
    overflow_reply();
    return;
  }
  holds_request_ = true;
  cluster_->stats(w_.id()).upstream_rq_active.add(1);
  // The body is kept for another try only where the route may retry, and
  // only up to the buffer limit (Envoy's rules): else each request would
  // hold up to the limit of its body after sending it.
  if (!route_may_retry(d) || head_bytes_.size() + replay_.size() > buffer_limit()) replay_ok_ = false;
  start_attempt();
  if (request_ended_) arm_route_timer();
}

// ---- the request ----

void RouterStream::decode_data(std::string_view data) {
  info_.bytes_received += data.size();
  if (!wants_body()) return;
  auto keep = shared_from_this();
  if (!up_) {
    // No upstream yet (the head is in the stages, or a retry backs off): kept
    // whole for the next attempt; the codec stops reading past the limit.
    replay_.append(data);
    if (head_bytes_.size() + replay_.size() > buffer_limit()) replay_ok_ = false;
    return;
  }
  keep_for_replay(data);
  up_->send_body(data);
  if (!up_->http2() && up_->taken(ds_->request_buffer_limit())) ds_->request_drained();  // HTTP/2: h2up_sent says
}

void RouterStream::decode_end(http::HeaderList* trailers) {
  if (request_ended_) return;
  request_ended_ = true;
  if (trailers) trailers_ = std::move(*trailers);
  // Without an upstream yet, the attempt sends the end with the body.
  if (!acted_ || !wants_body()) return;
  auto keep = shared_from_this();
  if (up_) up_->end_body(&trailers_);
  arm_route_timer();
  if (up_) arm_try_timer();
}

size_t RouterStream::request_queued() const { return up_ ? up_->queued() : replay_.size(); }

void RouterStream::keep_for_replay(std::string_view d) {
  if (!replay_ok_) return;
  if (head_bytes_.size() + replay_.size() + d.size() > buffer_limit()) {
    replay_ok_ = false;  // Envoy, too, does not retry a request larger than its buffer limit
    std::string().swap(replay_);
    return;
  }
  replay_.append(d);
}

// ---- attempts (Algorithm 1, lines 4-10) ----

void RouterStream::start_attempt() {
  retrying_ = false;
  attempts_++;
  host_ = cluster_->choose(decision_.lb.has_hash ? decision_.lb : LbContext{false, 0, w_.random()}, mono_ns());
  if (!host_) {
    send_local_reply(503, "no healthy upstream", "no_healthy_upstream", response_flag::kNoHealthyUpstream);
    return;
  }
  info_.upstream_host = host_->label;
  info_.attempt_count = attempts_;
  cluster_->stats(w_.id()).upstream_rq_total.inc();
  host_->active_requests.fetch_add(1, std::memory_order_relaxed);
  if (decision_.vhost->cfg->include_request_attempt_count && attempts_ > 1) {
    // x-envoy-attempt-count changes with each attempt: the head is deparsed again.
    head_.headers.set("x-envoy-attempt-count", std::to_string(attempts_));
    head_bytes_.clear();
  }
  if (cluster_->config().http2) start_h2_attempt();
  else start_h1_attempt();
  if (!ds_ || !up_) return;  // answered (an overflow), or a failure comes as an event
  if (!replay_ok_) std::string().swap(replay_);  // sent once, cannot be kept for another try
  // The body so far went out: the codec may take more.
  if (up_->taken(ds_->request_buffer_limit())) ds_->request_drained();
  if (request_ended_) arm_try_timer();
}

void RouterStream::start_h1_attempt() {
  std::shared_ptr<UpstreamConn> up = w_.take_idle(host_.get());
  bool fresh = !up;
  if (fresh) {
    if (!cluster_->try_acquire_connection()) {
      cluster_->stats(w_.id()).upstream_cx_overflow.inc();
      release_host();
      overflow_reply();
      return;
    }
    up = std::make_shared<UpstreamConn>(w_, snapshot_->clusters.at(cluster_->name()), host_);
  } else {
    up->attach(this);
  }
  auto h1 = std::make_unique<H1UpstreamRequest>(w_, up, framing_);
  H1UpstreamRequest& request = *h1;
  up_ = std::move(h1);
  if (!fresh) upstream_connected();  // a pooled connection: connected already
  up->parser().reset();
  up->parser().expect_no_body(head_.method == "HEAD");
  if (head_bytes_.empty()) {
    int64_t t0 = mono_ns();
    http::write_request_head(head_, head_bytes_);
    w_.modules().add(Module::kDeparser, static_cast<uint64_t>(mono_ns() - t0));
  }
  request.send_first(head_bytes_, replay_, request_ended_);  // the body so far as one chunk
  if (fresh) up->connect(this);
}

// A stream on the host's HTTP/2 connection (http2/h2_upstream.h), the body so far with it.
void RouterStream::start_h2_attempt() {
  bool overflow = false;
  auto conn = h2_upstream_pool(w_).get(w_, snapshot_->clusters.at(cluster_->name()), host_, overflow);
  if (!conn) {
    release_host();
    overflow_reply();
    return;
  }
  bool end = request_ended_ && replay_.empty() && trailers_.fields.empty();
  int32_t id = conn->open_stream(head_, end, this);
  if (id < 0) {  // the connection stopped taking streams: a reset, reported as events are
    asio::post(w_.io(), [self = shared_from_this(), attempt = attempts_] {
      if (self->ds_ && self->attempts_ == attempt && !self->response_started_) self->upstream_failed(Failure::kReset);
    });
    return;
  }
  up_ = std::make_unique<H2UpstreamRequest>(std::move(conn), id);
  if (!replay_.empty()) up_->send_body(replay_);
  if (request_ended_ && !end) up_->end_body(&trailers_);
}

// Whether retry_on covers this outcome, and a retry is left (num_retries, max_retries, the buffer).
bool RouterStream::may_retry(Why why, unsigned status) {
  if (!replay_ok_ || response_started_) return false;
  if (!retry_wanted(decision_, attempts_, why, status)) {
    const auto& policy = decision_.route->cfg->route->retry_policy;
    if (policy && attempts_ > 1 && retry_on_covers(*policy, why, status))  // the retries were used up
      info_.response_flags |= response_flag::kUpstreamRetryLimitExceeded;
    return false;
  }
  if (!cluster_->try_acquire_retry()) {
    cluster_->stats(w_.id()).upstream_rq_retry_overflow.inc();
    return false;
  }
  holds_retry_ = true;
  return true;
}

void RouterStream::retry() {
  cluster_->stats(w_.id()).upstream_rq_retry.inc();
  retrying_ = true;
  try_timer_.cancel();
  try_timer_.expires_after(retry_backoff(attempts_, w_.random()));
  try_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->ds_ || !self->retrying_ || self->local_reply_) return;
    self->cluster_->release_retry();
    self->holds_retry_ = false;
    self->start_attempt();
  });
}

void RouterStream::attempt_failed(Why why, const std::string& body, unsigned status, const std::string& reset_reason,
                                  uint32_t flag) {
  if (host_) cluster_->report_status(*host_, status, mono_ns());
  drop_upstream();
  if (may_retry(why, status)) {
    retry();
    return;
  }
  if (response_started_) {
    info_.response_flags |= flag;
    info_.response_code_details = "upstream_reset_after_response_started{" + reset_reason + "}";
    release();
    ds_->reset_stream();  // the client has part of a response: it can only see a reset
    return;
  }
  // A per-try timeout that ends the request is Envoy's upstream_per_try_timeout, the others its reset reasons.
  send_local_reply(status, body,
                   why == Why::kPerTryTimeout ? std::string("upstream_per_try_timeout")
                                              : "upstream_reset_before_response_started{" + reset_reason + "}",
                   flag);
}

void RouterStream::upstream_failed(Failure f) {
  if (!ds_ || response_complete_) return;
  auto keep = shared_from_this();
  const bool h2 = up_ && up_->http2();
  std::string transport = up_ ? up_->failure_reason() : std::string();
  up_.reset();  // the connection or stream is gone: nothing to close, consume or reset
  switch (f) {
    case Failure::kConnect: {
      // Envoy's texts: the log names the transport's reason, with underscores for spaces.
      std::string logged = transport;
      std::replace(logged.begin(), logged.end(), ' ', '_');
      info_.upstream_transport_failure_reason = logged;
      attempt_failed(Why::kConnect, kReplyConnectFailure, 503,
                     "remote_connection_failure" + (logged.empty() ? "" : "|" + logged),
                     response_flag::kUpstreamConnectionFailure);
      break;
    }
    case Failure::kConnectTimeout:
      attempt_failed(Why::kConnectTimeout, kReplyConnectTimeout, 503, "connection_timeout",
                     response_flag::kUpstreamConnectionFailure);
      break;
    case Failure::kReset:
      cluster_->stats(w_.id()).upstream_rq_rx_reset.inc();
      // A stream reset by an HTTP/2 upstream (UR); an HTTP/1.1 upstream that closed its connection (UC).
      if (h2) attempt_failed(Why::kReset, kReplyUpstreamReset, 503, "remote_reset", response_flag::kUpstreamRemoteReset);
      else
        attempt_failed(Why::kReset, kReplyUpstreamReset, 503, "connection_termination",
                       response_flag::kUpstreamConnectionTermination);
      break;
    case Failure::kProtocol:
      attempt_failed(Why::kProtocol, kReplyProtocolError, 502, "protocol_error", response_flag::kUpstreamProtocolError);
      break;
  }
}

void RouterStream::upstream_drained() {
  auto keep = shared_from_this();
  if (ds_ && !local_reply_) ds_->request_drained();
}

// Called from inside nghttp2's send: the codec hears of the drain afterwards.
void RouterStream::h2up_sent(size_t n) {
  if (up_) up_->request_sent(n);
  if (!ds_) return;
  ds_->request_sent(n);
  if ((up_ && up_->queued() > 0) || drain_posted_) return;
  drain_posted_ = true;
  asio::post(w_.io(), [self = shared_from_this()] {
    self->drain_posted_ = false;
    if (self->ds_ && self->up_ && self->up_->queued() == 0) self->ds_->request_drained();
  });
}

void RouterStream::overflow_reply() {
  http::HeaderList extra;
  extra.add("x-envoy-overloaded", "true");
  send_local_reply(503, kReplyOverflow, "upstream_reset_before_response_started{overflow}",
                   response_flag::kUpstreamOverflow, &extra);
}

void RouterStream::release_host() {
  if (host_) {
    host_->active_requests.fetch_sub(1, std::memory_order_relaxed);
    host_.reset();
  }
}

void RouterStream::drop_upstream() {
  if (up_) {
    up_->drop();
    up_.reset();
  }
  release_host();
}

void RouterStream::release() {
  drop_upstream();
  if (holds_request_) {
    cluster_->release_request();
    cluster_->stats(w_.id()).upstream_rq_active.add(-1);
    holds_request_ = false;
  }
  if (holds_retry_) {
    cluster_->release_retry();
    holds_retry_ = false;
  }
  retrying_ = false;
  route_timer_.cancel();
  try_timer_.cancel();
}

void RouterStream::detach() {
  release();
  if (ds_) write_log();
  ds_ = nullptr;
}

void RouterStream::send_local_reply(unsigned status, std::string_view body, std::string_view details, uint32_t flags,
                                    const http::HeaderList* extra, bool direct) {
  if (!ds_) return;
  auto keep = shared_from_this();
  local_reply_ = true;
  response_started_ = response_complete_ = true;
  LocalReply reply = mesh::local_reply(status, body, extra, grpc_);
  if (direct) apply_response_rules(decision_, *hcm_, reply.head.headers);
  if (head_.method == "HEAD") reply.body = {};  // its content-length stays the body's
  // The log says what the client was sent: a gRPC reply's 200 and no body, as Envoy's.
  info_.response_code = reply.head.status;
  info_.response_code_details = details;
  info_.response_flags |= flags;
  info_.bytes_sent += reply.body.size();
  if (!hcm_->access_logs.empty()) {  // for %RESP(...)%
    http::HeaderList h = reply.head.headers;
    if (reply.head.content_length) h.add("content-length", std::to_string(*reply.head.content_length));
    note_response_headers(h);
  }
  release();
  ds_->send_local_reply(reply.head, reply.body);
}

void RouterStream::downstream_disconnected() {
  if (response_complete_) return;
  info_.response_flags |= response_flag::kDownstreamConnectionTermination;
  if (!response_started_) info_.response_code_details = "downstream_remote_disconnect";
}

void RouterStream::note_response_headers(const http::HeaderList& headers, bool trailers) {
  if (hcm_->logged_response_headers.empty()) return;
  auto& kept = trailers ? logged_trailers_ : logged_headers_;
  kept.emplace();  // only the fields a format names
  for (const auto& f : headers.fields)
    for (const auto& name : hcm_->logged_response_headers)
      if (http::iequals(f.name, name)) kept->fields.push_back(f);
}

void RouterStream::note_upstream_local_address() {
  if (up_ && !hcm_->access_logs.empty()) info_.upstream_local_address = up_->local_address();
}

void RouterStream::write_log() {
  if (logged_ || hcm_->access_logs.empty()) return;
  logged_ = true;
  info_.response_headers = logged_headers_ ? &*logged_headers_ : nullptr;
  info_.response_trailers = logged_trailers_ ? &*logged_trailers_ : nullptr;
  hcm_->log(info_);
}

// ---- the response ----

void RouterStream::upstream_head(http::ResponseHead& h, bool end_stream) {
  if (response_started_ || !ds_) return;
  auto keep = shared_from_this();
  unsigned status = h.status;
  auto& cs = cluster_->stats(w_.id());
  if (status >= 500 && may_retry(Why::kStatus, status)) {
    cs.upstream_rq_xx[4].inc();
    cluster_->report_status(*host_, status, mono_ns());
    // Abandon this answer (an HTTP/1.1 connection cannot be reused mid-response) and try again.
    drop_upstream();
    retry();
    return;
  }
  int64_t now = mono_ns();
  cluster_->report_status(*host_, status, now);
  cs.upstream_rq_xx[status_class(status)].inc();
  cs.upstream_rq_completed.inc();
  response_started_ = true;
  route_timer_.cancel();
  try_timer_.cancel();
  resp_keep_alive_ = h.keep_alive && !h.body_until_close;
  apply_response_rules(decision_, *hcm_, h.headers);
  h.headers.set("x-envoy-upstream-service-time", std::to_string((now - start_ns_) / 1000000));
  info_.response_code = status;
  info_.response_code_details = "via_upstream";
  note_upstream_local_address();  // an HTTP/2 upstream's connection is up once it answers
  if (!hcm_->access_logs.empty()) note_response_headers(h.headers);
  ds_->encode_headers(h, end_stream);
}

void RouterStream::upstream_data(std::string_view d) {
  // An abandoned answer (retried) still has body events in the parser's call: dropped.
  if (!response_started_ || response_complete_ || !ds_) return;
  auto keep = shared_from_this();
  info_.bytes_sent += d.size();
  ds_->encode_data(d);
}

void RouterStream::upstream_end() {
  if (!response_started_ || response_complete_ || !ds_) return;
  auto keep = shared_from_this();
  response_complete_ = true;
  ds_->encode_end();
}

void RouterStream::upstream_response_complete() {
  if (!up_ || !ds_) return;
  auto keep = shared_from_this();
  std::exchange(up_, nullptr)->finish(resp_keep_alive_, request_ended_);
  release_host();
  finish_response();
}

void RouterStream::h2up_data(std::string_view d) {
  if (!up_) return;
  up_->response_arrived(d.size());
  if (!response_started_ || response_complete_ || !ds_) {  // nobody will read these: the window back now
    up_->response_dropped();
    return;
  }
  upstream_data(d);
}

void RouterStream::h2up_trailers(http::HeaderList& trailers) {
  if (!response_started_ || response_complete_ || !ds_) return;
  auto keep = shared_from_this();
  note_response_headers(trailers, /*trailers=*/true);
  ds_->encode_trailers(trailers);
}

void RouterStream::h2up_end() {
  auto keep = shared_from_this();
  upstream_end();
  if (up_) std::exchange(up_, nullptr)->finish(true, request_ended_);
  release_host();
  if (ds_) finish_response();
}

void RouterStream::finish_response() {
  release();
  ds_->response_done();
}

void RouterStream::pause_response() {
  if (up_ && !resp_paused_) up_->pause_response();
  resp_paused_ = true;
}

void RouterStream::resume_response() {
  if (!resp_paused_) return;
  resp_paused_ = false;
  if (up_) up_->resume_response();
}

void RouterStream::response_sent(size_t n) {
  if (up_) up_->response_sent(n);
}

// ---- timers: the route's timeout and per_try_timeout ----

void RouterStream::arm_route_timer() {
  if (local_reply_ || response_started_ || !ds_) return;
  const auto& a = *decision_.route->cfg->route;
  if (a.timeout.count() == 0) return;
  route_timer_.expires_after(a.timeout);
  route_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->ds_ || self->response_started_) return;
    self->on_route_timeout();
  });
}

void RouterStream::on_route_timeout() {
  cluster_->stats(w_.id()).upstream_rq_timeout.inc();
  stats_->downstream_rq_timeout.inc();
  if (host_) cluster_->report_status(*host_, 504, mono_ns());
  drop_upstream();
  send_local_reply(504, "upstream request timeout", "response_timeout", response_flag::kUpstreamRequestTimeout);
}

void RouterStream::arm_try_timer() {
  if (response_started_) return;
  const auto& a = *decision_.route->cfg->route;
  if (!a.retry_policy || a.retry_policy->per_try_timeout.count() == 0) return;
  try_timer_.expires_after(a.retry_policy->per_try_timeout);
  try_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->ds_ || self->response_started_ || self->retrying_) return;
    self->cluster_->stats(self->w_.id()).upstream_rq_per_try_timeout.inc();
    self->attempt_failed(Why::kPerTryTimeout, "upstream request timeout", 504, "per_try_timeout",
                         response_flag::kUpstreamRequestTimeout);
  });
}

}  // namespace dpukit::mesh
