// The connection manager's half of one request, for either codec: Envoy's
// ConnectionManagerImpl::ActiveStream, which keeps a stream's timers and its
// local replies once for HTTP/1.1 and HTTP/2 alike. The router's half (the
// route, the attempts, the route's and per-try timeouts) is the request's
// RouterStream (dataplane/router_stream.h). A codec makes one ActiveStream
// when a request begins (its first byte, or its first HEADERS frame), tells
// it what happens (the head, the end of the request, activity), and hears
// back through ActiveStreamCodec what the timers decided.
#pragma once

#include <memory>
#include <string_view>

#include "dataplane/worker.h"

namespace dpukit::mesh {

class RouterStream;

// Envoy's local reply (Http::Utility::sendLocalReply): `status` with `body`
// as text/plain, or, to a gRPC request (content-type application/grpc...),
// a trailers-only response: 200 with grpc-status mapped from `status` and
// the body, percent-encoded, as grpc-message; no body and no content-length.
struct LocalReply {
  http::ResponseHead head;
  std::string_view body;  // what follows the head (empty for gRPC)
};
LocalReply local_reply(unsigned status, std::string_view body, const http::HeaderList* extra, bool grpc);

// What the connection manager needs of the codec's stream.
struct ActiveStreamCodec {
  virtual ~ActiveStreamCodec() = default;
  // request_headers_timeout or request_timeout fell before the head ended:
  // there is no router yet, so the codec answers `status` with `body`, logs
  // it (`details`) and ends the request.
  virtual void timed_out_in_head(unsigned status, std::string_view body, std::string_view details) = 0;
  // A timeout after the head: the router's local reply follows at once
  // (`reset` false; the codec may end the connection after it), or the
  // response had started and the client can only see a reset.
  virtual void timed_out(bool reset) = 0;
};

// The connection manager's idle_timeout (Envoy's connection_idle_timer_),
// for either codec's connection: with no request in progress for that long,
// the connection ends. Checked lazily against the last activity, so that
// bytes need not re-arm it.
class ConnectionIdleTimer {
 public:
  struct Connection {
    virtual ~Connection() = default;
    virtual bool serving() const = 0;    // a request is in progress: the timer waits
    virtual bool closed() const = 0;
    virtual void idle_timed_out() = 0;   // idle for idle_timeout: the codec ends the connection
  };
  ConnectionIdleTimer(Worker& w, Connection& c) : timer_(w.io()), c_(c) {}
  void touch() { last_ns_ = mono_ns(); }
  // (Re)starts it from the last activity (idle_timeout 0: an hour). `owner`
  // (the connection) is kept alive while it waits.
  void arm(std::chrono::milliseconds idle_timeout, std::shared_ptr<void> owner);
  void cancel() { timer_.cancel(); }

 private:
  void wait(int64_t due_ns, int64_t timeout_ns, std::shared_ptr<void> owner);
  asio::steady_timer timer_;
  Connection& c_;
  int64_t last_ns_ = mono_ns();
};

class ActiveStream : public std::enable_shared_from_this<ActiveStream> {
 public:
  // Now is the request's start: request_headers_timeout and request_timeout
  // run from here, as Envoy's do from its stream's creation. Call start() once made.
  // `codec_owner`: kept alive until detach(), for a codec that nothing else
  // holds while its request waits (an HTTP/1.1 connection with reading paused).
  ActiveStream(Worker& w, const HcmRuntime& hcm, HttpStats& stats, ActiveStreamCodec& codec,
               std::shared_ptr<void> codec_owner = nullptr);
  ~ActiveStream();
  ActiveStream(const ActiveStream&) = delete;
  ActiveStream& operator=(const ActiveStream&) = delete;
  void start();

  // When the request began (monotonic ns).
  int64_t start_ns() const { return start_ns_; }
  // The head is in and `router` made for it (with the configuration it was
  // routed by): its access log starts at the request's start;
  // request_headers_timeout is over; stream_idle_timeout starts.
  void headers_done(std::shared_ptr<RouterStream> router, const HcmRuntime& hcm, HttpStats& stats);
  bool head_in() const { return router_ != nullptr; }
  // All of the request was received: request_timeout is over.
  void request_done();
  bool request_complete() const { return request_complete_; }
  // Bytes went either way: stream_idle_timeout counts again from now.
  void touch() { active_ns_ = mono_ns(); }
  // The pipelined model: the head is back from the stages. The router acts,
  // then a timeout that fell while the stages had the head is answered.
  void decided();
  // The codec lets go: no more timers, no more calls to it.
  void detach();

 private:
  void arm_request_timer();
  void on_request_timeout();
  void arm_idle_timer();
  void on_idle_timeout();
  bool in_stage() const;

  Worker& w_;
  const HcmRuntime* hcm_;
  HttpStats* stats_;
  ActiveStreamCodec* codec_;  // null once detached
  std::shared_ptr<void> codec_owner_;
  std::shared_ptr<RouterStream> router_;  // from the head on
  asio::steady_timer request_timer_, idle_timer_;
  int64_t start_ns_, active_ns_;
  bool request_complete_ = false;
  // A timer that fell while the stages had the head, answered in decided().
  bool request_timeout_waits_ = false, idle_timeout_waits_ = false;
};

}  // namespace dpukit::mesh
