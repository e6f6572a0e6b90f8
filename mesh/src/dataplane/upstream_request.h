// One attempt's upstream as the router stream (dataplane/router_stream.h)
// sees it, whatever the protocol: the request on an HTTP/1.1 connection
// (UpstreamConn, from the worker's pool or new) or a stream on the host's
// HTTP/2 connection (H2UpstreamConn), as Envoy's router sees each attempt
// through one GenericUpstream. The events come back through the
// connections' own user interfaces (UpstreamConn::User, H2UpstreamUser).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>

#include "dataplane/worker.h"
#include "http/http1.h"
#include "http2/h2_upstream.h"

namespace dpukit::mesh {

class UpstreamRequest {
 public:
  virtual ~UpstreamRequest() = default;
  // Request body bytes (unframed) and the request's end.
  virtual void send_body(std::string_view data) = 0;
  virtual void end_body(const http::HeaderList* trailers) = 0;  // trailers go to an HTTP/2 upstream only
  // Request bytes the upstream did not take yet.
  virtual size_t queued() const = 0;
  // Whether the codec may take more of the request: an HTTP/1.1 upstream
  // holds at most `limit` unsent, an HTTP/2 one nothing (its window bounds the rest).
  virtual bool taken(size_t limit) const = 0;
  // Request bytes an HTTP/2 upstream put in DATA frames.
  virtual void request_sent(size_t) {}
  // Response back-pressure: an HTTP/1.1 upstream stops being read; an
  // HTTP/2 one's window opens only by what the client was sent.
  virtual void pause_response() {}
  virtual void resume_response() {}
  virtual void response_arrived(size_t) {}  // response body bytes, not yet passed on
  virtual void response_sent(size_t) {}     // ... passed on to the client
  virtual void response_dropped() {}        // nobody will pass on what arrived: the window back now
  // The response ended: an HTTP/1.1 connection goes back to the pool when
  // both sides keep it alive and the whole request went out; an HTTP/2
  // stream finishes (cancelled if the request is still arriving).
  virtual void finish(bool keep_alive, bool request_ended) = 0;
  // The attempt is given up: the connection closed, or the stream reset.
  virtual void drop() = 0;
  // For the access log: the local address, and why a connection could not be made.
  virtual std::string local_address() { return ""; }
  virtual std::string failure_reason() const { return ""; }
  virtual bool http2() const = 0;
};

// The request on an HTTP/1.1 connection: its body framed as the head said (chunks or not).
class H1UpstreamRequest : public UpstreamRequest {
 public:
  H1UpstreamRequest(Worker& w, std::shared_ptr<UpstreamConn> conn, http::BodyEncoder framing)
      : w_(w), conn_(std::move(conn)), framing_(framing) {}
  // The attempt's first bytes in one write: the deparsed head, the body so far, and its end if it ended.
  void send_first(std::string_view head, std::string_view body, bool ended);
  void send_body(std::string_view data) override;
  void end_body(const http::HeaderList*) override;
  size_t queued() const override { return conn_->queued(); }
  bool taken(size_t limit) const override { return conn_->queued() <= limit; }
  void pause_response() override { conn_->pause_reading(); }
  void resume_response() override { conn_->resume_reading(); }
  void finish(bool keep_alive, bool request_ended) override;
  void drop() override { conn_->close(); }
  std::string local_address() override { return conn_->local_address(); }
  std::string failure_reason() const override { return conn_->failure_reason(); }
  bool http2() const override { return false; }

 private:
  Worker& w_;
  std::shared_ptr<UpstreamConn> conn_;
  http::BodyEncoder framing_;
  std::string scratch_;
};

// A stream on the host's HTTP/2 connection, with its flow control: request
// bytes queued until they leave in DATA frames, response bytes consumed
// (the window reopened) once the client was sent them.
class H2UpstreamRequest : public UpstreamRequest {
 public:
  H2UpstreamRequest(std::shared_ptr<H2UpstreamConn> conn, int32_t id) : conn_(std::move(conn)), id_(id) {}
  void send_body(std::string_view data) override;
  void end_body(const http::HeaderList* trailers) override { conn_->end_body(id_, trailers); }
  size_t queued() const override { return queued_; }
  bool taken(size_t) const override { return queued_ == 0; }
  void request_sent(size_t n) override { queued_ -= std::min(n, queued_); }
  void response_arrived(size_t n) override { unconsumed_ += n; }
  void response_sent(size_t n) override;
  void response_dropped() override;
  void finish(bool keep_alive, bool request_ended) override;
  void drop() override;
  std::string local_address() override { return conn_->local_address(); }
  bool http2() const override { return true; }

 private:
  std::shared_ptr<H2UpstreamConn> conn_;
  int32_t id_;
  size_t queued_ = 0;      // request bytes the connection did not put in DATA frames yet
  size_t unconsumed_ = 0;  // response bytes not yet passed on
};

}  // namespace dpukit::mesh
