// The deparser processing module: heads in HTTP/1.1 and body framing for the
// other side of the proxy. Framing is never copied from the received fields:
// it is written from content_length / chunked, so what the peer reads is what
// this proxy parsed.
#include <algorithm>
#include <boost/beast/http/status.hpp>
#include <charconv>

#include "http/http1.h"

namespace dpukit::mesh::http {

namespace {

// Not copied: hop-by-hop fields (RFC 9110 §7.6.1) and the framing, which is
// written from the head's own fields.
constexpr std::string_view kNotCopied[] = {"connection",        "keep-alive", "proxy-connection", "te",
                                           "transfer-encoding", "upgrade",    "trailer",          "content-length"};

// `connection` is the head's connection_tokens(), read once per head.
bool copied(const std::vector<std::string_view>& connection, const Header& h) {
  for (std::string_view n : kNotCopied) {
    if (iequals(h.name, n)) return false;
  }
  for (std::string_view t : connection)
    if (iequals(t, h.name)) return false;
  return true;
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

void append_number(std::string& out, uint64_t v, int base = 10) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v, base);
  out.append(buf, r.ptr);
}

void append_content_length(std::string& out, uint64_t length) {
  out.append("Content-Length: ");
  append_number(out, length);
  out.append("\r\n");
}

// Appends the request-target for an origin server: absolute-form becomes
// origin-form (RFC 9112 §3.2.1), "/" when its path is empty; the other forms
// are kept.
void append_origin_form(std::string& out, std::string_view target) {
  size_t scheme_end = target.find("://");
  if (target.empty() || target.front() == '/' || scheme_end == std::string_view::npos) {
    out.append(target);  // origin-form, asterisk-form, authority-form (CONNECT)
    return;
  }
  size_t path = std::min(target.find_first_of("/?", scheme_end + 3), target.size());
  if (path == target.size() || target[path] == '?') out.push_back('/');
  out.append(target.substr(path));
}

// 1xx, 204 and 304 responses end with their head (RFC 9112 §6.3).
bool bodiless_status(unsigned status) { return status / 100 == 1 || status == 204 || status == 304; }

// Does a response body go out chunked to a client of this version?
bool response_chunked(const ResponseHead& head, unsigned client_version) {
  return !bodiless_status(head.status) && !head.content_length && (head.chunked || head.body_until_close) &&
         client_version >= 11;
}

}  // namespace

void write_request_head(const RequestHead& head, std::string& out) {
  out.append(head.method).append(" ");
  append_origin_form(out, head.target);
  out.append(" HTTP/1.1\r\n");
  // Host first (RFC 9112 §3.2), from head.host: the parser put the
  // absolute-form's authority there, and routing may rewrite it.
  append_field(out, "Host", head.host);
  const auto connection = head.headers.connection_tokens();
  for (const Header& h : head.headers.fields) {
    if (!iequals(h.name, "host") && copied(connection, h)) append_field(out, h.name, h.value);
  }
  if (head.content_length) {
    append_content_length(out, *head.content_length);
  } else if (head.chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  } else if (head.method == "POST" || head.method == "PUT" || head.method == "PATCH") {
    // Methods that define a meaning for content state its absence (RFC 9110
    // §8.6 SHOULD; some servers answer 411 otherwise). Others get no field.
    append_content_length(out, 0);
  }
  out.append("\r\n");
}

void write_response_head(const ResponseHead& head, bool keep_alive, std::string& out) {
  write_response_head(head, keep_alive, 11, out);
}

void write_response_head(const ResponseHead& head, bool keep_alive, unsigned client_version, std::string& out) {
  out.append("HTTP/1.1 ");
  append_number(out, head.status);
  out.append(" ");
  if (!head.reason.empty()) {
    out.append(head.reason);
  } else {
    out.append(reason_phrase(head.status));
  }
  out.append("\r\n");
  const auto connection = head.headers.connection_tokens();
  for (const Header& h : head.headers.fields) {
    if (copied(connection, h)) append_field(out, h.name, h.value);
  }
  // A body that is neither chunked nor length-delimited for this client ends
  // when the connection closes.
  bool ends_at_close = false;
  if (head.status / 100 == 1 || head.status == 204) {
    // no framing fields (RFC 9110 §8.6: none in 1xx and 204)
  } else if (head.content_length) {
    append_content_length(out, *head.content_length);  // for HEAD and 304 too: the selected representation's
  } else if (response_chunked(head, client_version)) {
    out.append("Transfer-Encoding: chunked\r\n");
  } else if (head.status != 304 && (head.chunked || head.body_until_close)) {
    ends_at_close = true;  // an HTTP/1.0 client: no chunked
  }
  if (!keep_alive || ends_at_close) {
    out.append("Connection: close\r\n");
  } else if (client_version < 11) {
    out.append("Connection: keep-alive\r\n");
  }
  out.append("\r\n");
}

BodyEncoder request_body_encoder(const RequestHead& head) {
  return BodyEncoder{!head.content_length && head.chunked};
}

BodyEncoder response_body_encoder(const ResponseHead& head, unsigned client_version) {
  return BodyEncoder{response_chunked(head, client_version)};
}

void BodyEncoder::data(std::string_view bytes, std::string& out) const {
  if (!chunked) {
    out.append(bytes);
    return;
  }
  if (bytes.empty()) return;  // an empty chunk would be the last chunk
  append_number(out, bytes.size(), 16);
  out.append("\r\n").append(bytes).append("\r\n");
}

void BodyEncoder::end(std::string& out) const {
  if (chunked) out.append("0\r\n\r\n");
}

}  // namespace dpukit::mesh::http
