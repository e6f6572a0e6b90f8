// HTTP/1.1 for the data plane: the parser processing module (requests from
// clients, responses from upstreams) and the deparser (heads and body framing
// for the other side).
//
// Parsing is Boost.Beast's basic_parser, fed incrementally; on top of it the
// RFC 9112 rules that stop request smuggling are enforced, and Envoy's
// limits. Bodies stream: the parser hands out decoded body bytes as they
// arrive and never holds a whole body.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dpukit::mesh::http {

struct Header {
  std::string name;  // as received (compare case-insensitively)
  std::string value;  // leading and trailing whitespace removed
};

// Case-insensitive ASCII comparison of header names.
bool iequals(std::string_view a, std::string_view b);

// Header list operations shared by requests and responses.
struct HeaderList {
  std::vector<Header> fields;
  // The first value of `name`, or nullopt.
  std::optional<std::string_view> get(std::string_view name) const;
  size_t count(std::string_view name) const;
  void remove(std::string_view name);  // every field with this name
  void add(std::string name, std::string value);
  void set(std::string name, std::string value);  // replace all with one
  // The field names that Connection fields list (hop-by-hop, RFC 9110
  // §7.6.1), as views into this list: "close" and "keep-alive" included.
  std::vector<std::string_view> connection_tokens() const;
  // Removes the fields that Connection names (not Connection itself).
  void remove_connection_named();
};

// The reason phrase for a status code ("Not Found"), for heads we write.
std::string_view reason_phrase(unsigned status);

struct Limits {
  uint32_t max_headers_count = 100;        // Envoy: common_http_protocol_options.max_headers_count
  uint32_t max_header_bytes = 60 * 1024;   // Envoy: max_request_headers_kb (start line + fields)
  uint32_t max_request_line = 60 * 1024;   // the request line alone (within max_header_bytes in Envoy)
  uint64_t max_body_bytes = 0;             // 0: unlimited (Envoy streams bodies without a limit)
};

struct RequestHead {
  std::string method;
  std::string target;   // as received (origin-form "/path?query", or absolute-form)
  std::string path;     // the target's path part, without the query
  unsigned version = 11;  // 10 or 11
  HeaderList headers;    // every field as received
  std::string host;      // the Host field (exactly one; required in HTTP/1.1)
  std::optional<uint64_t> content_length;
  bool chunked = false;  // Transfer-Encoding: chunked
  bool keep_alive = true;  // by version and Connection
  bool expect_continue = false;  // Expect: 100-continue
  bool upgrade = false;  // an Upgrade request (we refuse these: no upgrade_configs)
};

struct ResponseHead {
  unsigned status = 0;
  std::string reason;
  unsigned version = 11;
  HeaderList headers;
  std::optional<uint64_t> content_length;
  bool chunked = false;
  bool keep_alive = true;
  bool body_until_close = false;  // no framing: the body ends when the upstream closes
};

// What a failed parse means for the peer: the status to answer with (for a
// request) and a reason for logs and stats.
struct ParseFailure {
  unsigned status = 400;  // 400, 413 (body), 431 (headers), 414 (request line)
  std::string reason;     // e.g. "Content-Length with Transfer-Encoding"
  // Also 501 (a transfer coding other than chunked), 505 (an HTTP version
  // other than 1.0/1.1). ResponseParser failures are always 502: what the
  // proxy answers its client.
};

// Events of one message; body data is valid only during the call.
template <typename Head>
struct MessageEvents {
  virtual ~MessageEvents() = default;
  virtual void on_head(Head& head) = 0;
  virtual void on_body(std::string_view data) = 0;
  virtual void on_complete() = 0;  // the message ended (trailers, if any, are dropped)
};
using RequestEvents = MessageEvents<RequestHead>;
using ResponseEvents = MessageEvents<ResponseHead>;

// Incremental request parser. feed() consumes bytes and raises events; it
// stops right after a message completes (the rest of the input is the next
// pipelined request: call reset(), then feed the rest). The bytes the caller
// has to keep unconsumed are bounded: at most max_header_bytes (a head, a
// chunk line or the trailers; for the last two this is a bound on what is
// held, so a longer chunk line that arrives in one piece is accepted). Do not call reset() or feed() from an event.
class RequestParser {
 public:
  explicit RequestParser(const Limits& limits = {});
  ~RequestParser();
  RequestParser(RequestParser&&) noexcept;
  RequestParser& operator=(RequestParser&&) noexcept;

  // Returns the bytes used (possibly fewer than given: an incomplete token is
  // kept by the caller and fed again with more). After a failure, returns 0
  // and failure() says why.
  size_t feed(std::string_view data, RequestEvents& events);
  // The peer closed its side: a message in progress is a failure.
  void finish(RequestEvents& events);
  bool done() const;           // the current message completed
  bool in_message() const;     // some bytes of a message were consumed and it is not done
  const std::optional<ParseFailure>& failure() const;
  void reset();                // ready for the next message

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Incremental response parser. The caller says which request the response
// answers (a HEAD request, or a response to CONNECT, has no body).
class ResponseParser {
 public:
  explicit ResponseParser(const Limits& limits = {});
  ~ResponseParser();
  ResponseParser(ResponseParser&&) noexcept;
  ResponseParser& operator=(ResponseParser&&) noexcept;

  void expect_no_body(bool on);  // for a response to HEAD; set before feeding (reset() clears it)
  size_t feed(std::string_view data, ResponseEvents& events);
  // The upstream closed: completes a body_until_close message, otherwise a
  // message in progress is a failure.
  void finish(ResponseEvents& events);
  bool done() const;
  bool in_message() const;
  const std::optional<ParseFailure>& failure() const;
  void reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The deparser: appends a head in HTTP/1.1 to `out`. Hop-by-hop fields
// (Connection, Keep-Alive, Proxy-Connection, TE, Transfer-Encoding, Upgrade,
// Trailer, and the fields Connection names) and Content-Length are not
// copied; the framing is written from content_length / chunked instead:
// Content-Length when the length is known, otherwise Transfer-Encoding: chunked
// (for a request with a body, or a response that has one).
void write_request_head(const RequestHead& head, std::string& out);
// `keep_alive` false adds "Connection: close".
void write_response_head(const ResponseHead& head, bool keep_alive, std::string& out);
// The same for a client of `client_version` (10 or 11). An HTTP/1.0 client
// cannot read chunked: a body without a known length is sent as it is and
// ends at close ("Connection: close" is written; the caller must close after
// it). keep_alive with an HTTP/1.0 client writes "Connection: keep-alive".
void write_response_head(const ResponseHead& head, bool keep_alive, unsigned client_version, std::string& out);

// Body framing for a message whose head said chunked: each data() appends a
// chunk, end() the last chunk. With chunked = false they copy the bytes as they are.
struct BodyEncoder {
  bool chunked = false;
  void data(std::string_view bytes, std::string& out) const;
  void end(std::string& out) const;
};

// The encoder matching what write_request_head / write_response_head wrote
// for the same head (a body_until_close response is chunked for HTTP/1.1).
BodyEncoder request_body_encoder(const RequestHead& head);
BodyEncoder response_body_encoder(const ResponseHead& head, unsigned client_version = 11);

}  // namespace dpukit::mesh::http
