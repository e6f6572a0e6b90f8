#include "dataplane/upstream_request.h"

#include <algorithm>
#include <utility>

namespace dpukit::mesh {

void H1UpstreamRequest::send_first(std::string_view head, std::string_view body, bool ended) {
  scratch_.assign(head);
  framing_.data(body, scratch_);
  if (ended) framing_.end(scratch_);
  conn_->send(scratch_);  // queued until connected
}

void H1UpstreamRequest::send_body(std::string_view data) {
  scratch_.clear();
  framing_.data(data, scratch_);
  conn_->send(scratch_);
}

void H1UpstreamRequest::end_body(const http::HeaderList*) {
  scratch_.clear();
  framing_.end(scratch_);  // (trailers do not go to an HTTP/1.1 upstream)
  if (!scratch_.empty()) conn_->send(scratch_);
}

void H1UpstreamRequest::finish(bool keep_alive, bool request_ended) {
  if (conn_->reusable() && keep_alive && request_ended && conn_->queued() == 0) w_.put_idle(std::move(conn_));
  else conn_->close();
}

void H2UpstreamRequest::send_body(std::string_view data) {
  queued_ += data.size();
  conn_->send_body(id_, data);
}

void H2UpstreamRequest::response_sent(size_t n) {
  const size_t k = std::min(n, unconsumed_);
  if (k == 0) return;
  unconsumed_ -= k;
  conn_->consume(id_, k);
}

void H2UpstreamRequest::response_dropped() {
  if (unconsumed_) conn_->consume(id_, std::exchange(unconsumed_, 0));
}

void H2UpstreamRequest::finish(bool, bool request_ended) {
  // Bytes still queued for the client are consumed on the connection now, so
  // its window does not shrink with this stream. The upstream may end its
  // response before the request's body is all sent: a request still arriving
  // is cancelled upstream; one that ended finishes sending on its own.
  response_dropped();
  conn_->abandon(id_, /*cancel=*/!request_ended);
}

void H2UpstreamRequest::drop() {
  response_dropped();
  conn_->abandon(id_);
}

}  // namespace dpukit::mesh
