#include "dataplane/active_stream.h"

#include <algorithm>
#include <optional>

#include "dataplane/router_stream.h"
#include "http2/h2_headers.h"

namespace dpukit::mesh {

namespace {

// Envoy's PercentEncoding::encode for grpc-message (gRPC's rule): bytes
// outside printable ASCII, and '%', as %XX.
std::string grpc_message(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c < ' ' || c > '~' || c == '%') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int64_t ns_of(std::chrono::milliseconds ms) { return static_cast<int64_t>(ms.count()) * 1000000; }

}  // namespace

LocalReply local_reply(unsigned status, std::string_view body, const http::HeaderList* extra, bool grpc) {
  LocalReply r;
  r.head.status = status;
  if (extra) r.head.headers = *extra;
  if (grpc) {
    r.head.status = 200;
    r.head.headers.add("content-type", "application/grpc");
    r.head.headers.add("grpc-status", std::to_string(h2::grpc_status_for_http(status)));
    if (!body.empty()) r.head.headers.add("grpc-message", grpc_message(body));
    return r;
  }
  if (!body.empty()) r.head.headers.add("content-type", "text/plain");
  r.head.content_length = body.size();
  r.body = body;
  return r;
}

void ConnectionIdleTimer::arm(std::chrono::milliseconds idle_timeout, std::shared_ptr<void> owner) {
  const int64_t timeout = idle_timeout.count() ? ns_of(idle_timeout) : ns_of(std::chrono::hours(1));
  wait(last_ns_ + timeout, timeout, std::move(owner));
}

void ConnectionIdleTimer::wait(int64_t due_ns, int64_t timeout_ns, std::shared_ptr<void> owner) {
  timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, due_ns - mono_ns())));
  timer_.async_wait([this, timeout_ns, owner = std::move(owner)](const boost::system::error_code& ec) mutable {
    if (ec || c_.closed()) return;
    const int64_t now = mono_ns();
    if (c_.serving()) {  // looked at again a timeout later (the end of the last request arms it anew)
      wait(now + timeout_ns, timeout_ns, std::move(owner));
    } else if (now - last_ns_ < timeout_ns) {
      wait(last_ns_ + timeout_ns, timeout_ns, std::move(owner));
    } else {
      c_.idle_timed_out();
    }
  });
}

ActiveStream::ActiveStream(Worker& w, const HcmRuntime& hcm, HttpStats& stats, ActiveStreamCodec& codec,
                           std::shared_ptr<void> codec_owner)
    : w_(w), hcm_(&hcm), stats_(&stats), codec_(&codec), codec_owner_(std::move(codec_owner)),
      request_timer_(w.io()), idle_timer_(w.io()),
      start_ns_(mono_ns()), active_ns_(start_ns_) {}

ActiveStream::~ActiveStream() = default;

void ActiveStream::start() { arm_request_timer(); }

void ActiveStream::headers_done(std::shared_ptr<RouterStream> router, const HcmRuntime& hcm, HttpStats& stats) {
  hcm_ = &hcm;
  stats_ = &stats;
  router_ = std::move(router);
  // The request began with its first byte (or frame), not with its parsed head.
  StreamInfo& info = router_->info();
  const int64_t age = info.start_ns - start_ns_;
  info.start_ns = start_ns_;
  info.start_time -= std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(age));
  touch();
  arm_request_timer();
  arm_idle_timer();
}

void ActiveStream::request_done() {
  if (request_complete_) return;
  request_complete_ = true;
  request_timer_.cancel();
}

void ActiveStream::decided() {
  if (!codec_ || !router_) return;
  auto keep = shared_from_this();
  router_->act();
  if (codec_ && std::exchange(request_timeout_waits_, false)) on_request_timeout();
  if (codec_ && std::exchange(idle_timeout_waits_, false)) on_idle_timeout();
}

void ActiveStream::detach() {
  codec_ = nullptr;
  router_.reset();
  request_timer_.cancel();
  idle_timer_.cancel();
  // The codec may be inside a call of its own that led here: it is let go of from the loop.
  if (codec_owner_) asio::post(w_.io(), [owner = std::move(codec_owner_)] {});
}

bool ActiveStream::in_stage() const { return router_ && router_->in_stage(); }

// request_headers_timeout bounds the head, request_timeout the whole request
// (until it was all received or the response started); both run from the
// request's start, as Envoy's (more bytes do not re-arm them). The earlier
// one is armed.
void ActiveStream::arm_request_timer() {
  const auto& cfg = *hcm_->cfg;
  std::optional<int64_t> due;
  if (!head_in() && cfg.request_headers_timeout.count() > 0) due = start_ns_ + ns_of(cfg.request_headers_timeout);
  if (!request_complete_ && cfg.request_timeout.count() > 0)
    due = std::min(due.value_or(INT64_MAX), start_ns_ + ns_of(cfg.request_timeout));
  if (!due) {
    request_timer_.cancel();
    return;
  }
  request_timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, *due - mono_ns())));
  request_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_request_timeout();
  });
}

void ActiveStream::on_request_timeout() {
  if (!codec_ || request_complete_) return;
  auto keep = shared_from_this();
  if (!head_in()) {  // still in the head: Envoy's texts for whichever timeout fell
    const auto& cfg = *hcm_->cfg;
    const bool header = cfg.request_headers_timeout.count() > 0 &&
                        (cfg.request_timeout.count() == 0 || cfg.request_headers_timeout <= cfg.request_timeout);
    stats_->downstream_rq_timeout.inc();
    codec_->timed_out_in_head(408, header ? "request header timeout" : "request timeout",
                              header ? "request_header_timeout" : "request_overall_timeout");
    return;
  }
  if (router_->response_started()) return;
  if (in_stage()) {  // the stages have the head: answered once it is back (decided)
    request_timeout_waits_ = true;
    return;
  }
  stats_->downstream_rq_timeout.inc();
  codec_->timed_out(false);
  router_->send_local_reply(408, "request timeout", "request_overall_timeout");
}

// stream_idle_timeout: no bytes either way for that long. Checked lazily
// against the last activity, so that bytes need not re-arm the timer.
void ActiveStream::arm_idle_timer() {
  const int64_t timeout = ns_of(hcm_->cfg->stream_idle_timeout);
  if (timeout == 0) return;
  idle_timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, active_ns_ + timeout - mono_ns())));
  idle_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_idle_timeout();
  });
}

void ActiveStream::on_idle_timeout() {
  if (!codec_ || !router_) return;
  auto keep = shared_from_this();
  if (mono_ns() - active_ns_ < ns_of(hcm_->cfg->stream_idle_timeout)) {
    arm_idle_timer();
    return;
  }
  if (in_stage()) {  // answered once the head is back (decided)
    idle_timeout_waits_ = true;
    return;
  }
  stats_->downstream_rq_timeout.inc();
  if (router_->response_started()) {
    codec_->timed_out(true);
    return;
  }
  codec_->timed_out(false);
  // Envoy's maybeRequestTimeoutCode: 504 once the request was all received (the upstream is slow), else 408.
  router_->send_local_reply(request_complete_ ? 504 : 408, "stream timeout", "stream_idle_timeout",
                            response_flag::kStreamIdleTimeout);
}

}  // namespace dpukit::mesh
