// The router of one request, for either codec: Envoy's router filter and its
// UpstreamRequest. It owns the route decision (the filter and router modules,
// dataplane/l7_chain.h), the attempts (load balancing, circuit breakers,
// retries with back-off, the per-try timeout), the body kept for another try,
// the route's timeout and the cluster's statistics, and talks to an HTTP/1.1
// upstream (UpstreamConn) or a stream on an HTTP/2 one (H2UpstreamConn),
// both through one UpstreamRequest (dataplane/upstream_request.h).
// The codec's stream (HTTP/1.1 or HTTP/2) drives it with the request and
// hears the response through RouterDownstream, as Envoy's router does
// through the codec's StreamDecoderFilterCallbacks.
#pragma once

#include <memory>
#include <string>

#include "dataplane/l7_chain.h"
#include "dataplane/pipeline.h"
#include "dataplane/upstream_request.h"
#include "dataplane/worker.h"
#include "http2/h2_upstream.h"

namespace dpukit::mesh {

// What the router needs of the codec's stream.
struct RouterDownstream {
  virtual ~RouterDownstream() = default;
  // The upstream's response, the route's rules applied. `end_stream`: no body
  // follows (END_STREAM on the head, or content-length 0 from HTTP/1.1).
  virtual void encode_headers(http::ResponseHead& head, bool end_stream) = 0;
  virtual void encode_data(std::string_view data) = 0;
  virtual void encode_trailers(http::HeaderList& trailers) = 0;
  virtual void encode_end() = 0;
  // An answer made here (dataplane/active_stream.h's local_reply, the
  // route's response header rules applied to a direct_response): `head`,
  // then `body` if it is not empty, and the response ends.
  virtual void send_local_reply(http::ResponseHead& head, std::string_view body) = 0;
  // The response started and cannot be finished: the client can only see a reset.
  virtual void reset_stream() = 0;
  // The response ended and the upstream let go of the stream (its connection pooled or closed).
  virtual void response_done() = 0;
  // The pipelined model: the filter and router modules are done; the codec calls act().
  virtual void decided() = 0;
  // Request flow control. The codec takes more request bytes while the
  // upstream holds at most request_buffer_limit() of them unsent.
  virtual size_t request_buffer_limit() const = 0;
  virtual void request_sent(size_t) {}  // body bytes an HTTP/2 upstream took (in DATA frames)
  // The upstream holds no more than the limit (HTTP/1.1) or nothing (HTTP/2) unsent.
  // May come from inside decode_data(): the codec must not feed the router from it.
  virtual void request_drained() = 0;
};

// An access-log line for an answer the codec made outside any request's
// router (a malformed request, a head that never ended): `start_ns` is when
// its first byte came (0: now).
void log_codec_reply(const HcmRuntime& hcm, const DownstreamFacts* conn, std::string_view protocol, unsigned status,
                     size_t body_bytes, std::string_view details, uint32_t flags, int64_t start_ns);

class RouterStream : public std::enable_shared_from_this<RouterStream>,
                     public PipelineClient,
                     public UpstreamConn::User,
                     public H2UpstreamUser,
                     public http::ResponseEvents {
 public:
  // `head`: the parsed request; `conn`: what its connection says (the client's address for
  // x-forwarded-for and source_ip hashing; who it is and where it went, for RBAC).
  RouterStream(Worker& w, std::shared_ptr<const Snapshot> snapshot, const ListenerRuntime& lr, HttpStats& stats,
               http::RequestHead head, std::shared_ptr<const DownstreamFacts> conn, RouterDownstream& ds);
  ~RouterStream() override;
  RouterStream(const RouterStream&) = delete;
  RouterStream& operator=(const RouterStream&) = delete;

  // The request as routed (the route's rules and rewrites applied once decided).
  const http::RequestHead& head() const { return head_; }
  const RouteDecision& decision() const { return decision_; }

  // The filter and router modules and the deparser: on `pipeline`'s stage
  // threads when it has room (true: decided() follows on the worker), else
  // here, then act() (false).
  bool decide(Pipeline* pipeline);
  bool in_stage() const { return in_stage_; }
  // Back on the worker with the decision: its statistics, then a local reply or the first attempt.
  void act();

  // The request body and its end, from the codec. Bytes the router does not
  // want (wants_body() false: answered already) are the codec's to drop.
  bool wants_body() const { return ds_ && !local_reply_ && !response_complete_; }
  void decode_data(std::string_view data);
  void decode_end(http::HeaderList* trailers);
  // Request bytes waiting for the upstream (or, without one yet, for the next attempt).
  size_t request_queued() const;

  // Response back-pressure from the codec: pause stops reading an HTTP/1.1
  // upstream; an HTTP/2 upstream's window reopens by what was sent.
  void pause_response();
  void resume_response();
  void response_sent(size_t n);

  // An answer made here: the upstream and the circuit-breaker slots are given back first.
  // A gRPC request gets it in gRPC (local_reply), over either codec, as from Envoy.
  // `details` and `flags`: what the access log says of it (%RESPONSE_CODE_DETAILS%, %RESPONSE_FLAGS%).
  void send_local_reply(unsigned status, std::string_view body, std::string_view details, uint32_t flags = 0,
                        const http::HeaderList* extra = nullptr, bool direct = false);
  // What the access logs say of this request: the codec fills the protocol
  // and the start; the router the rest. The line is written at detach().
  StreamInfo& info() { return info_; }
  // The client went away before the response ended (DC).
  void downstream_disconnected();
  bool response_started() const { return response_started_; }
  bool response_complete() const { return response_complete_; }
  bool local_reply() const { return local_reply_; }
  // Gives back what the request holds: the upstream, the host's count, the slots, the timers.
  void release();
  // The codec's stream is gone: release(), and no more calls to it.
  void detach();

  // PipelineClient
  void stage_match_action() override;
  void stage_deparse() override;
  void stage_done(uint64_t generation) override;

 private:
  using Why = AttemptOutcome;
  using Failure = UpstreamConn::User::Failure;
  size_t buffer_limit() const { return lr_->cfg->per_connection_buffer_limit_bytes; }
  void start_attempt();
  void start_h1_attempt();
  void start_h2_attempt();
  void keep_for_replay(std::string_view d);
  bool may_retry(Why why, unsigned status);
  void retry();
  // An attempt ended without a usable response: another try, or `body` with
  // `status` (Envoy's local reply; `reset_reason` and `flag` for the log).
  void attempt_failed(Why why, const std::string& body, unsigned status, const std::string& reset_reason, uint32_t flag);
  void overflow_reply();  // a circuit breaker refused: 503 with x-envoy-overloaded, as Envoy
  void release_host();
  void drop_upstream();
  void arm_route_timer();
  void arm_try_timer();
  void on_route_timeout();
  void upstream_head(http::ResponseHead& h, bool end_stream);
  void upstream_data(std::string_view d);
  void upstream_end();
  void finish_response();
  void fail_attempt_log(const char* details, uint32_t flag, std::string failure_reason = {});
  void note_response_headers(const http::HeaderList& headers, bool trailers = false);
  void note_upstream_local_address();  // the access log's %UPSTREAM_LOCAL_ADDRESS%, once connected
  void write_log();

  // UpstreamConn::User (HTTP/1.1 upstream)
  void upstream_connected() override { note_upstream_local_address(); }
  void upstream_failed(Failure f) override;
  void upstream_drained() override;
  void upstream_response_complete() override;
  http::ResponseEvents& response_events() override { return *this; }
  // http::ResponseEvents (the HTTP/1.1 upstream's parser)
  void on_head(http::ResponseHead& h) override { upstream_head(h, h.content_length == 0u); }
  void on_body(std::string_view d) override { upstream_data(d); }
  void on_complete() override { upstream_end(); }
  // H2UpstreamUser (HTTP/2 upstream)
  void h2up_head(http::ResponseHead& h, bool end_stream) override { upstream_head(h, end_stream); }
  void h2up_data(std::string_view d) override;
  void h2up_trailers(http::HeaderList& trailers) override;
  void h2up_end() override;
  void h2up_failed(Failure f) override { upstream_failed(f); }
  void h2up_sent(size_t n) override;

  Worker& w_;
  std::shared_ptr<const Snapshot> snapshot_;
  const ListenerRuntime* lr_;
  const HcmRuntime* hcm_;
  HttpStats* stats_;
  RouterDownstream* ds_;  // null once detached
  std::shared_ptr<const DownstreamFacts> conn_;
  http::RequestHead head_;
  Draws draws_;
  RouteDecision decision_;
  ClusterRuntime* cluster_ = nullptr;
  std::shared_ptr<Host> host_;
  std::unique_ptr<UpstreamRequest> up_;  // this attempt's upstream: HTTP/1.1 or a stream on HTTP/2
  std::shared_ptr<RouterStream> in_stage_self_;  // alive while the stages have the request
  http::BodyEncoder framing_;     // the request body's framing for an HTTP/1.1 upstream
  http::HeaderList trailers_;     // the request's, for an HTTP/2 upstream
  std::string head_bytes_;        // the deparsed head for an HTTP/1.1 upstream
  std::string replay_;            // the body so far (unframed), kept for another try
  asio::steady_timer route_timer_, try_timer_;
  StreamInfo info_;
  // The response's headers and trailers that an access log names, kept only for it.
  std::optional<http::HeaderList> logged_headers_, logged_trailers_;
  uint64_t deparser_ns_ = 0;
  int64_t start_ns_;
  uint32_t attempts_ = 0;
  bool replay_ok_ = true;  // false once the request outgrew the buffer, or where the route does not retry
  bool in_stage_ = false, acted_ = false, request_ended_ = false, response_started_ = false,
       response_complete_ = false, local_reply_ = false, holds_request_ = false, holds_retry_ = false,
       retrying_ = false, resp_keep_alive_ = true, grpc_ = false, resp_paused_ = false, drain_posted_ = false, logged_ = false;
};

}  // namespace dpukit::mesh
