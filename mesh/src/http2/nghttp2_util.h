// Small pieces both HTTP/2 endpoints (h2_session.cc, h2_upstream.cc) use with libnghttp2.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/bootstrap.h"
#include "http/http1.h"

namespace dpukit::mesh::h2 {

// nghttp2_nv views of a header block (valid while `block` lives).
inline std::vector<nghttp2_nv> nv_of(const std::vector<http::Header>& block) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(block.size());
  for (const auto& h : block)
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(), h.value.size(),
                  NGHTTP2_NV_FLAG_NONE});
  return nv;
}

inline std::string_view as_view(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

// Our SETTINGS (the stream limit, the stream window, and, for a server, the
// header list limit) and the connection window, queued on `session`.
inline void submit_settings(nghttp2_session* session, const config::Http2ProtocolOptions& o,
                            uint32_t max_header_list_bytes, bool server) {
  std::vector<nghttp2_settings_entry> iv = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, o.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, o.initial_stream_window_size},
  };
  if (server) iv.push_back({NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, max_header_list_bytes});
  else iv.push_back({NGHTTP2_SETTINGS_ENABLE_PUSH, 0});
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, iv.data(), iv.size());
  nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<int32_t>(o.initial_connection_window_size));
}

// Body bytes waiting for an nghttp2 data source, with an end and optional trailers.
struct BodyQueue {
  std::string bytes;
  size_t offset = 0;
  bool ended = false;
  bool deferred = false;  // the read callback returned NGHTTP2_ERR_DEFERRED: resume_data on new bytes
  bool has_trailers = false;
  std::vector<http::Header> trailers;
  size_t size() const { return bytes.size() - offset; }
  void append(std::string_view d) {
    if (offset > 0 && offset >= bytes.size() / 2) {  // reclaim what was sent
      bytes.erase(0, offset);
      offset = 0;
    }
    bytes.append(d);
  }
  // The read callback's work: copies up to `length` bytes, sets the flags; NGHTTP2_ERR_DEFERRED when empty and open.
  // Trailers are submitted by the caller when *trailers_due is set.
  ssize_t read(uint8_t* buf, size_t length, uint32_t* data_flags, bool* trailers_due) {
    size_t n = std::min(length, size());
    std::copy_n(bytes.data() + offset, n, buf);
    offset += n;
    if (offset == bytes.size()) bytes.clear(), offset = 0;
    *trailers_due = false;
    if (size() == 0 && ended) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      if (has_trailers) {
        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        *trailers_due = true;
      }
    } else if (n == 0) {
      deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    return static_cast<ssize_t>(n);
  }
};

// The client's stream identifiers a server has seen, for RFC 9113 §5.1.1: a
// new stream's id must be greater than every stream the client opened, and a
// HEADERS frame on a lower id that never opened a stream is a connection error
// (PROTOCOL_ERROR). nghttp2 only ignores such a block (it cannot tell it from
// trailers sent before our RST_STREAM reached the client); a lower id that did
// open a stream is left to nghttp2. The ids skipped so far are kept as ranges,
// at most kMaxSkipped of them (the lowest are forgotten first; a forgotten id is
// treated as opened, so a client never loses its connection by our forgetting).
class RequestStreamIds {
 public:
  static constexpr size_t kMaxSkipped = 16;
  // A HEADERS frame on client stream `id` (odd, > 0) is starting: false when it
  // is on an id the client skipped, which no stream may use any more.
  bool on_headers(int32_t id) {
    int32_t next = highest_ == 0 ? 1 : highest_ + 2;
    if (id >= next) {
      if (id > next) {
        if (skipped_.size() == kMaxSkipped) skipped_.erase(skipped_.begin());
        skipped_.push_back({next, id - 2});
      }
      highest_ = id;
      return true;
    }
    for (const auto& [lo, hi] : skipped_)
      if (id >= lo && id <= hi) return false;
    return true;
  }
  int32_t highest() const { return highest_; }

 private:
  int32_t highest_ = 0;
  std::vector<std::pair<int32_t, int32_t>> skipped_;  // [first, last] ids never used, ascending
};

}  // namespace dpukit::mesh::h2
