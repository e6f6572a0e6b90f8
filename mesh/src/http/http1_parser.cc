// The parser processing module: Boost.Beast's basic_parser, fed incrementally,
// with the RFC 9112 request-smuggling rules and Envoy's limits on top.
//
// What Beast 1.74 already rejects (tested in http_parser_test.cc): bare CR
// and bare LF in the start line and fields (once the head's end has come:
// this module makes it fail at once), whitespace between a field name and
// the colon and any non-token byte in a name, CTLs other than HTAB (and
// DEL) in values, differing Content-Length values and malformed or
// overflowing ones, a Content-Length after "Transfer-Encoding: ...chunked"
// and a Transfer-Encoding after a Content-Length, chunk sizes that overflow or
// are not hex, malformed chunk extensions, and versions other than 1.0/1.1.
// What it lets through and this module adds: obs-fold (Beast unfolds it),
// duplicate Content-Length fields and lists ("5, 5"), Transfer-Encoding codings
// other than a single final chunked (Beast treats "gzip" as no body at all:
// the body would be read as the next request), Transfer-Encoding in HTTP/1.0,
// Transfer-Encoding then Content-Length when the coding is not chunked, Host
// rules, request-target forms, control bytes in chunk extensions, the head
// and request-line limits (Beast's header_limit bounds the part of the head
// it has not consumed yet, not the whole head), a bound on chunk lines
// and trailers (Beast has none), and a bare LF in a head or a chunk line
// that Beast waits on (it would wait for a CRLF that does not come).
#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <cstring>
#include <limits>

#include "http/http1.h"

namespace dpukit::mesh::http {

namespace {

namespace bhttp = boost::beast::http;
using boost::beast::error_code;

std::string_view sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The transfer codings of every Transfer-Encoding field, in order.
struct Codings {
  unsigned chunked = 0;  // how many times "chunked" appears
  unsigned others = 0;   // codings other than chunked (we decode none)
  bool last_chunked = false;

  void add(std::string_view list) {
    // Empty list elements are allowed and ignored (RFC 9110 §5.6.1).
    for (size_t at = 0; at <= list.size();) {
      size_t comma = std::min(list.find(',', at), list.size());
      std::string_view coding = trim_ows(list.substr(at, comma - at));
      if (!coding.empty()) {
        last_chunked = iequals(coding, "chunked");
        (last_chunked ? chunked : others) += 1;
      }
      at = comma + 1;
    }
  }
};

// uri-host [ ":" port ] of RFC 3986: reg-name, IP-literal or IPv4 characters.
bool valid_host(std::string_view host) {
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::strchr("-._~!$&'()*+,;=:[]%", c) != nullptr;
    if (!ok || c == '\0') return false;
  }
  return true;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

template <bool isRequest>
class Machine;

// Beast's parser with its callbacks forwarded to the Machine.
template <bool isRequest>
class BeastParser final : public bhttp::basic_parser<isRequest> {
 public:
  explicit BeastParser(Machine<isRequest>& m) : m_(m) {}

 private:
  void on_request_impl(bhttp::verb, boost::beast::string_view method, boost::beast::string_view target,
                       int version, error_code& ec) override {
    if constexpr (isRequest) m_.on_request_line(sv(method), sv(target), version, ec);
  }
  void on_response_impl(int code, boost::beast::string_view reason, int version, error_code& ec) override {
    if constexpr (!isRequest) m_.on_status_line(code, sv(reason), version, ec);
  }
  void on_field_impl(bhttp::field f, boost::beast::string_view name, boost::beast::string_view value,
                     error_code& ec) override {
    m_.on_field(f, sv(name), sv(value), ec);
  }
  void on_header_impl(error_code& ec) override { m_.on_header(ec); }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override {
    m_.on_body_until_close(sv(body), ec);
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t size, boost::beast::string_view ext, error_code& ec) override {
    m_.on_chunk_header(size, sv(ext), ec);
  }
  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code&) override {
    m_.on_body(sv(body));
    return body.size();
  }
  void on_finish_impl(error_code&) override { m_.on_finish(); }

  Machine<isRequest>& m_;
};

// One direction's parser: the Beast parser of the current message and what
// this module checks on top of it.
template <bool isRequest>
class Machine {
 public:
  using Head = std::conditional_t<isRequest, RequestHead, ResponseHead>;
  using Events = MessageEvents<Head>;

  explicit Machine(const Limits& limits) : limits_(limits) {
    head_.headers.fields.reserve(32);
    start_message();
  }

  size_t feed(std::string_view data, Events& events) {
    if (failure_ || done_) return 0;
    events_ = &events;
    size_t used = 0;
    if constexpr (isRequest) {
      // Empty lines before a request line are ignored (RFC 9112 §2.2; Envoy
      // does too): a client may end a body with an extra CRLF on a keep-alive
      // connection. A lone CR at the end waits for the byte after it.
      while (!consumed_any_ && used < data.size() && (data[used] == '\r' || data[used] == '\n')) {
        if (data[used] == '\r') {
          if (used + 1 == data.size()) return used;
          if (data[used + 1] != '\n') break;  // a bare CR: Beast refuses the line
          ++used;
        }
        ++used;
      }
    }
    while (used < data.size()) {
      std::string_view rest = data.substr(used);
      const bool in_head = !header_done_;
      // The head may not outgrow max_header_bytes, however it is split:
      // Beast sees at most what is left of the allowance.
      const size_t allowance = limits_.max_header_bytes - head_bytes_;
      const size_t window = in_head ? std::min(rest.size(), allowance) : rest.size();
      window_end_ = rest.data() + window;
      // Beast asserts that a chunk line it waits on is fed again with at
      // least the 5 bytes of a last chunk ("0\r\n\r\n"); a chunked body has
      // that many left from any chunk line, so waiting for them changes nothing.
      const bool starved = window == 0 || (chunk_wait_ && window < 5);
      error_code ec = bhttp::error::need_more;
      size_t n = starved ? 0 : parser_->put(boost::asio::const_buffer(rest.data(), window), ec);
      chunk_wait_ = header_done_ && ec == bhttp::error::need_more;
      used += n;
      if (n > 0) consumed_any_ = true;
      if (!header_done_) head_bytes_ += n;
      if (n > 0) lf_clean_ = 0;  // what Beast waits on starts somewhere else now
      if (failure_ || (ec && ec != bhttp::error::need_more)) {
        if (!failure_) fail_from(ec, rest);
        if (head_delivered_ && head_.chunked) {  // a chunk line failed: at its start, after what Beast took
          lf_clean_ = 0;
          bare_lf_in_chunk_lines(rest.substr(n));
        }
        break;
      }
      if (ec == bhttp::error::need_more) {
        if (!header_done_) {
          stuck_in_head(rest, window, allowance);
          if (!failure_ && bare_lf_in_head(rest.substr(n, window - n))) fail_at_bare_lf(rest.substr(n, window - n), events);
        } else if (window < rest.size()) {
          continue;  // the head ended in a window cut at the head limit: offer the rest
        } else if (head_delivered_ && head_.chunked && bare_lf_in_chunk_lines(rest.substr(n))) {
          break;
        } else if (window - n > limits_.max_header_bytes) {
          // What Beast keeps waiting on is a chunk line or the trailers,
          // which the caller must hold: bound them like a head.
          fail(431, "chunk line or trailer section larger than max_header_bytes");
        }
        break;
      }
      if (parser_->is_done()) {
        if (interim_) {  // a 1xx response before the final one: skip it
          bool no_body = no_body_;
          start_message();
          expect_no_body(no_body);
          consumed_any_ = true;
          continue;
        }
        done_ = true;
        break;
      }
      if (n == 0) break;
    }
    events_ = nullptr;
    return failure_ ? 0 : used;
  }

  void finish(Events& events) {
    if (failure_ || done_ || !consumed_any_) return;
    if constexpr (!isRequest) {
      if (header_done_ && parser_->need_eof()) {
        events_ = &events;
        error_code ec;
        parser_->put_eof(ec);
        events_ = nullptr;
        if (!ec) {
          done_ = true;
          return;
        }
      }
    }
    fail(400, "connection closed in the middle of a message");
  }

  bool done() const { return done_; }
  bool in_message() const { return consumed_any_ && !done_; }
  const std::optional<ParseFailure>& failure() const { return failure_; }
  void reset() { start_message(); }

  void expect_no_body(bool on) {
    no_body_ = on;
    if (!parser_->got_some()) parser_->skip(on);
  }

  // Callbacks from BeastParser.

  void on_request_line(std::string_view method, std::string_view target, int version, error_code& ec) {
    // method SP request-target SP HTTP-version
    if (method.size() + target.size() + 10 > limits_.max_request_line) {
      return fail(414, "request line longer than max_request_line", ec);
    }
    head_.method.assign(method);
    head_.target.assign(target);
    head_.version = static_cast<unsigned>(version);
    request_line_done_ = true;
    if (target.find('#') != std::string_view::npos) return fail(400, "fragment in the request-target", ec);
    if (method == "CONNECT") {  // authority-form, uri-host ":" port, and only for CONNECT
      if (!valid_host(target) || target.find(':') == std::string_view::npos) {
        return fail(400, "CONNECT without an authority-form request-target", ec);
      }
      head_.path.clear();
    } else if (target.front() == '/') {  // origin-form
      head_.path.assign(target.substr(0, target.find('?')));
    } else if (target == "*") {  // asterisk-form
      if (method != "OPTIONS") return fail(400, "asterisk-form request-target without OPTIONS", ec);
      head_.path.assign(target);
    } else {  // absolute-form: scheme "://" authority path-abempty [ "?" query ]
      size_t colon = target.find("://");
      bool scheme_ok = colon != std::string_view::npos && colon > 0 &&
                       std::all_of(target.begin(), target.begin() + static_cast<std::ptrdiff_t>(colon), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                c == '+' || c == '-' || c == '.';
                       });
      if (!scheme_ok) return fail(400, "invalid request-target", ec);
      size_t start = colon + 3;
      size_t end = std::min(target.find_first_of("/?", start), target.size());
      std::string_view authority = target.substr(start, end - start);
      // valid_host also refuses userinfo ("user@host"): deprecated and a known
      // way to fool routing (RFC 9110 §4.2.4).
      if (authority.empty() || !valid_host(authority)) {
        return fail(400, "invalid authority in the request-target", ec);
      }
      authority_at_ = start;
      authority_len_ = authority.size();
      std::string_view path = target.substr(end, target.find('?', end) - end);
      if (path.empty()) {
        head_.path.assign("/");
      } else {
        head_.path.assign(path);
      }
    }
  }

  void on_status_line(int code, std::string_view reason, int version, error_code&) {
    head_.status = static_cast<unsigned>(code);
    head_.reason.assign(reason);
    head_.version = static_cast<unsigned>(version);
    interim_ = code / 100 == 1 && code != 101;
  }

  void on_field(bhttp::field f, std::string_view name, std::string_view value, error_code& ec) {
    if (header_done_) return;  // a trailer field: dropped
    if (++field_count_ > limits_.max_headers_count) return fail(431, "more than max_headers_count fields", ec);
    if constexpr (isRequest) {
      // Beast unfolds obs-fold; a request must not use it (RFC 9112 §5.2).
      // The field line ends at its first CR (Beast accepts no bare CR), and
      // Beast has already looked at the byte after its CRLF.
      const char* cr = static_cast<const char*>(std::memchr(name.data(), '\r', window_end_ - name.data()));
      if (cr != nullptr && cr + 2 < window_end_ && (cr[2] == ' ' || cr[2] == '\t')) {
        return fail(400, "obs-fold in a field", ec);
      }
    }
    switch (f) {
      case bhttp::field::content_length:
        // Beast allows repeated equal values and lists; a request may not
        // (RFC 9110 §8.6 permits either answer: we reject). Upstreams are
        // held to Beast's rule only.
        if constexpr (isRequest) {
          if (cl_seen_) return fail(400, "duplicate Content-Length", ec);
          if (!all_digits(value)) return fail(400, "invalid Content-Length", ec);
        }
        cl_seen_ = true;
        break;
      case bhttp::field::transfer_encoding:
        te_seen_ = true;
        codings_.add(value);
        break;
      case bhttp::field::host:
        if constexpr (isRequest) {
          if (host_count_++ == 0) head_.host.assign(value);
        }
        break;
      case bhttp::field::expect:
        expect_continue_ = iequals(value, "100-continue");
        break;
      case bhttp::field::upgrade:
        upgrade_field_ = true;
        upgrade_other_than_h2c_ = upgrade_other_than_h2c_ || !iequals(trim_ows(value), "h2c");
        break;
      default:
        break;
    }
    head_.headers.fields.push_back(Header{std::string(name), std::string(value)});
  }

  void on_header(error_code& ec) {
    header_done_ = true;
    if constexpr (!isRequest) {
      if (interim_) return;
    }
    if (te_seen_) {
      if (cl_seen_) return fail(400, "Content-Length with Transfer-Encoding", ec);
      if (head_.version == 10) return fail(400, "Transfer-Encoding in HTTP/1.0", ec);
      if (codings_.chunked > 1) return fail(400, "chunked applied more than once", ec);
      // RFC 9112 §6.3: a request whose final coding is not chunked has no
      // determinable length: 400. A coding we do not implement: 501 (§6.1).
      // Responses get 502 either way: Transfer-Encoding is hop-by-hop, so a
      // coding we cannot remove cannot be forwarded.
      if (!codings_.last_chunked) return fail(400, "final transfer coding is not chunked", ec);
      if (codings_.others > 0) return fail(501, "transfer coding other than chunked", ec);
    }
    head_.content_length.reset();
    if (auto cl = parser_->content_length()) head_.content_length = *cl;
    bool has_body = true;
    if constexpr (!isRequest) {
      has_body = !no_body_ && head_.status != 204 && head_.status != 304;
    }
    if (has_body && head_.content_length && over_body_limit(*head_.content_length)) {
      return fail(413, "body larger than max_body_bytes", ec);
    }
    head_.chunked = parser_->chunked();
    head_.keep_alive = parser_->keep_alive();
    if constexpr (isRequest) {
      if (host_count_ > 1) return fail(400, "more than one Host", ec);
      if (host_count_ == 0 && head_.version == 11) return fail(400, "missing Host", ec);
      if (!valid_host(head_.host)) return fail(400, "invalid Host", ec);
      // RFC 9112 §3.2.2: the absolute-form's authority replaces Host.
      if (authority_len_ > 0) head_.host.assign(head_.target, authority_at_, authority_len_);
      // RFC 9110 §10.1.1 and §7.8: HTTP/1.0 requests cannot expect or upgrade.
      head_.expect_continue = expect_continue_ && head_.version == 11;
      // An upgrade to h2c only is not one: HTTP/2 dropped it (RFC 9113 §3.1),
      // and Envoy serves such a request as HTTP/1.1 (the deparser drops
      // Upgrade and the fields Connection names).
      head_.upgrade = upgrade_field_ && upgrade_other_than_h2c_ && parser_->upgrade() && head_.version == 11;
    } else {
      head_.body_until_close = parser_->need_eof();
    }
    head_delivered_ = true;
    events_->on_head(head_);
  }

  void on_body(std::string_view data) {
    if (!data.empty()) events_->on_body(data);
  }

  // Content-Length bodies too (their length was checked with the head).
  void on_body_until_close(std::string_view data, error_code& ec) {
    if (!head_.content_length) {
      body_bytes_ += data.size();
      if (over_body_limit(body_bytes_)) return fail(413, "body larger than max_body_bytes", ec);
    }
    on_body(data);
  }

  void on_chunk_header(uint64_t size, std::string_view ext, error_code& ec) {
    // Counted here, once the chunk line is complete.
    if (size > std::numeric_limits<uint64_t>::max() - body_bytes_ || over_body_limit(body_bytes_ + size)) {
      return fail(413, "body larger than max_body_bytes", ec);
    }
    body_bytes_ += size;
    // Beast lets any byte through inside a quoted extension value; a bare LF
    // there is a chunk line end to lenient peers.
    for (char c : ext) {
      auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return fail(400, "control character in a chunk extension", ec);
    }
  }

  void on_finish() {
    if (!interim_) events_->on_complete();
  }

 private:
  void start_message() {
    parser_.emplace(*this);
    parser_->eager(true);
    parser_->header_limit(limits_.max_header_bytes);
    // max_body_bytes is enforced here, not by Beast's body_limit: Beast 1.74
    // charges a chunk against it before the chunk line is complete, again on
    // every re-read of that line (a spurious 413 when it arrives in pieces),
    // and boost::none (no limit) rejects every Content-Length. The largest
    // value turns it off.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    if constexpr (isRequest) {
      head_.method.clear();
      head_.target.clear();
      head_.path.clear();
      head_.host.clear();
      head_.expect_continue = false;
      head_.upgrade = false;
    } else {
      head_.status = 0;
      head_.reason.clear();
      head_.body_until_close = false;
    }
    head_.version = 11;
    head_.headers.fields.clear();
    head_.content_length.reset();
    head_.chunked = false;
    head_.keep_alive = true;
    failure_.reset();
    codings_ = {};
    head_bytes_ = 0;
    body_bytes_ = 0;
    field_count_ = 0;
    host_count_ = 0;
    authority_at_ = authority_len_ = 0;
    lf_clean_ = 0;
    head_delivered_ = false;
    request_line_done_ = header_done_ = done_ = consumed_any_ = chunk_wait_ = false;
    cl_seen_ = te_seen_ = expect_continue_ = upgrade_field_ = upgrade_other_than_h2c_ = interim_ = no_body_ = false;
  }

  bool over_body_limit(uint64_t bytes) const { return limits_.max_body_bytes != 0 && bytes > limits_.max_body_bytes; }

  // Beast finds a chunk line's end by its CR and skips a bare LF as an
  // ordinary byte, so a chunk line ended by one ("0\n\n" as the last chunk)
  // would keep it waiting for a CRLF that never comes, with the head already
  // forwarded. `lines` is what Beast has not consumed of a chunked body: the
  // CRLF after the last chunk's data, if any, then the chunk line it works on
  // and, for the last chunk, the trailer section. An LF there that does not
  // follow a CR is bare (RFC 9112 §2.2 lets a recipient refuse it): 400,
  // whether Beast waits or has already refused the line for another fault,
  // so that every split of the same bytes gets the same answer. The clean
  // prefix is remembered: lines sent a byte at a time are scanned once.
  bool bare_lf_in_chunk_lines(std::string_view lines) {
    const size_t start = lines.starts_with("\r\n") ? 2 : 0;
    const size_t line_end = std::min(lines.find('\r', start), lines.size());
    const size_t digits = std::min(lines.find_first_not_of("0123456789abcdefABCDEF", start), lines.size());
    const bool last_chunk = digits > start && lines.find_first_not_of('0', start) >= digits;
    const size_t trailers_end = std::min(lines.find("\r\n\r\n", line_end), lines.size());
    const size_t end = last_chunk ? trailers_end : line_end;
    for (size_t i = std::max(start, lf_clean_); i < end; ++i) {
      if (lines[i] == '\n' && (i == 0 || lines[i - 1] != '\r')) {
        failure_ = ParseFailure{isRequest ? 400u : 502u, "bare LF in a chunk line"};
        return true;
      }
    }
    lf_clean_ = end;
    return false;
  }

  // In the head Beast, once it has seen part of it, waits for CRLF CRLF
  // before it parses on, so a head whose lines end in a bare LF and arrives
  // in pieces would wait for ever (or for request_headers_timeout). `waiting`
  // is the part of the head Beast has not consumed, from a line's start: an
  // LF there that does not follow a CR is bare.
  bool bare_lf_in_head(std::string_view waiting) {
    for (size_t i = lf_clean_; i < waiting.size(); ++i)
      if (waiting[i] == '\n' && (i == 0 || waiting[i - 1] != '\r')) return true;
    lf_clean_ = waiting.size();
    return false;
  }

  // The head fails now, as it would once its end arrived: Beast parses what
  // it waits on with a CRLF CRLF added and stops at the first fault, which is
  // at the bare LF or before it (the bytes before it are the same either
  // way), so every split of the same bytes gets the same answer. Its events
  // go nowhere: the message has failed.
  void fail_at_bare_lf(std::string_view waiting, Events& events) {
    struct Nowhere : Events {
      void on_head(Head&) override {}
      void on_body(std::string_view) override {}
      void on_complete() override {}
    } nowhere;
    std::string ended(waiting);
    ended += "\r\n\r\n";
    window_end_ = ended.data() + ended.size();
    events_ = &nowhere;
    error_code ec;
    parser_->put(boost::asio::const_buffer(ended.data(), ended.size()), ec);
    events_ = &events;
    if (failure_) return;
    if (ec && ec != bhttp::error::need_more) return fail_from(ec, ended);
    fail(400, "bare LF");
  }

  // Beast wants more bytes of the head than it was given.
  void stuck_in_head(std::string_view rest, size_t window, size_t allowance) {
    if constexpr (isRequest) {
      // The request line is not complete: it is too long once more than
      // max_request_line bytes came without its CR.
      if (!request_line_done_ && window > limits_.max_request_line &&
          std::memchr(rest.data(), '\r', limits_.max_request_line + size_t{1}) == nullptr) {
        return fail(414, "request line longer than max_request_line");
      }
    }
    if (window == allowance) fail(431, "head larger than max_header_bytes");
  }

  void fail(unsigned status, std::string reason) {
    // Whatever an upstream got wrong, the client gets a 502.
    failure_ = ParseFailure{isRequest ? status : 502u, std::move(reason)};
  }
  void fail(unsigned status, std::string reason, error_code& ec) {
    fail(status, std::move(reason));
    ec = bhttp::error::bad_value;  // stops Beast; failure_ says why
  }

  // A Beast error, in the words of the rule that was broken.
  void fail_from(error_code ec, std::string_view rest) {
    using E = bhttp::error;
    if (ec == E::header_limit) return fail(431, "head larger than max_header_bytes");
    if (ec == E::bad_content_length) {
      return fail(400, te_seen_  ? "Content-Length with Transfer-Encoding"
                       : cl_seen_ ? "duplicate Content-Length"
                                  : "invalid Content-Length");
    }
    if (ec == E::bad_transfer_encoding) {
      return fail(400, cl_seen_ ? "Content-Length with Transfer-Encoding" : "chunked applied more than once");
    }
    if (ec == E::bad_version && isRequest && !request_line_done_) {
      // HTTP-version is the token after method SP target SP (neither holds a
      // space). Beast rejects it once its 8 bytes are there, whatever
      // follows: a well-formed version other than 1.0 and 1.1 is 505.
      size_t target_end = rest.find(' ', rest.find(' ') + 1);
      std::string_view v = target_end == std::string_view::npos ? "" : rest.substr(target_end + 1, 8);
      if (v.size() == 8 && v.starts_with("HTTP/") && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' &&
          v[7] <= '9' && v != "HTTP/1.0" && v != "HTTP/1.1") {
        return fail(505, "HTTP version not supported");
      }
      return fail(400, "invalid HTTP version");
    }
    if (ec == E::bad_field) return fail(400, "invalid field name");
    if (ec == E::bad_value) return fail(400, "invalid field value");
    if (ec == E::bad_line_ending) return fail(400, "bare CR");
    fail(400, ec.message());
  }

  Limits limits_;
  std::optional<BeastParser<isRequest>> parser_;
  Head head_;
  Events* events_ = nullptr;
  std::optional<ParseFailure> failure_;
  const char* window_end_ = nullptr;  // end of the bytes Beast is parsing
  Codings codings_;
  uint64_t head_bytes_ = 0;     // bytes of the head consumed so far
  uint64_t body_bytes_ = 0;     // chunk sizes, or bytes until close, so far
  size_t lf_clean_ = 0;         // bytes of the chunk lines Beast waits on found free of a bare LF
  uint32_t field_count_ = 0;
  unsigned host_count_ = 0;
  size_t authority_at_ = 0, authority_len_ = 0;  // absolute-form authority in head_.target
  bool request_line_done_ = false, header_done_ = false, done_ = false, consumed_any_ = false;
  bool cl_seen_ = false, te_seen_ = false, expect_continue_ = false, upgrade_field_ = false;
  bool upgrade_other_than_h2c_ = false;  // an Upgrade field names a protocol other than h2c
  bool chunk_wait_ = false;  // Beast waits on a chunk line or the trailers
  bool head_delivered_ = false;  // on_head was raised: what follows is the body
  bool interim_ = false;  // a 1xx response (not 101): skipped
  bool no_body_ = false;  // the response answers HEAD (or CONNECT)
};

}  // namespace

struct RequestParser::Impl : Machine<true> {
  using Machine::Machine;
};
struct ResponseParser::Impl : Machine<false> {
  using Machine::Machine;
};

RequestParser::RequestParser(const Limits& limits) : impl_(std::make_unique<Impl>(limits)) {}
RequestParser::~RequestParser() = default;
RequestParser::RequestParser(RequestParser&&) noexcept = default;
RequestParser& RequestParser::operator=(RequestParser&&) noexcept = default;
size_t RequestParser::feed(std::string_view data, RequestEvents& events) { return impl_->feed(data, events); }
void RequestParser::finish(RequestEvents& events) { impl_->finish(events); }
bool RequestParser::done() const { return impl_->done(); }
bool RequestParser::in_message() const { return impl_->in_message(); }
const std::optional<ParseFailure>& RequestParser::failure() const { return impl_->failure(); }
void RequestParser::reset() { impl_->reset(); }

ResponseParser::ResponseParser(const Limits& limits) : impl_(std::make_unique<Impl>(limits)) {}
ResponseParser::~ResponseParser() = default;
ResponseParser::ResponseParser(ResponseParser&&) noexcept = default;
ResponseParser& ResponseParser::operator=(ResponseParser&&) noexcept = default;
void ResponseParser::expect_no_body(bool on) { impl_->expect_no_body(on); }
size_t ResponseParser::feed(std::string_view data, ResponseEvents& events) { return impl_->feed(data, events); }
void ResponseParser::finish(ResponseEvents& events) { impl_->finish(events); }
bool ResponseParser::done() const { return impl_->done(); }
bool ResponseParser::in_message() const { return impl_->in_message(); }
const std::optional<ParseFailure>& ResponseParser::failure() const { return impl_->failure(); }
void ResponseParser::reset() { impl_->reset(); }

}  // namespace dpukit::mesh::http
