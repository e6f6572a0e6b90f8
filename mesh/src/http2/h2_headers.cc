#include "http2/h2_headers.h"

#include <algorithm>
#include <charconv>

namespace dpukit::mesh::h2 {

namespace {

bool has_upper(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::optional<uint64_t> parse_length(std::string_view v) {
  uint64_t n = 0;
  if (v.empty()) return std::nullopt;
  auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size()) return std::nullopt;
  return n;
}

// Not copied into the other protocol: hop-by-hop and framing fields.
bool hop_by_hop(std::string_view lower_name) {
  return is_connection_specific(lower_name) || lower_name == "te" || lower_name == "trailer" ||
         lower_name == "content-length" || lower_name == "host";
}

// The names Connection lists, lower-cased.
std::vector<std::string> connection_named(const http::HeaderList& headers) {
  std::vector<std::string> out;
  for (std::string_view t : headers.connection_tokens()) out.push_back(lower(t));
  return out;
}

}  // namespace

Sniff sniff_preface(std::string_view first_bytes) {
  size_t n = std::min(first_bytes.size(), kClientPreface.size());
  if (first_bytes.substr(0, n) != kClientPreface.substr(0, n)) return Sniff::kHttp1;
  return n == kClientPreface.size() ? Sniff::kHttp2 : Sniff::kNeedMore;
}

bool is_connection_specific(std::string_view n) {
  return n == "connection" || n == "keep-alive" || n == "proxy-connection" || n == "transfer-encoding" ||
         n == "upgrade";
}

std::string request_head_from_h2(const std::vector<http::Header>& block, bool end_stream, http::RequestHead& out) {
  out = http::RequestHead{};
  std::optional<std::string> method, scheme, authority, path;
  std::string cookies;
  bool regular_seen = false;
  for (const http::Header& h : block) {
    if (h.name.empty()) return "empty field name";
    if (has_upper(h.name)) return "upper-case field name " + h.name;
    if (h.name[0] == ':') {
      if (regular_seen) return "pseudo-header " + h.name + " after a regular field";
      std::optional<std::string>* slot = h.name == ":method"      ? &method
                                         : h.name == ":scheme"    ? &scheme
                                         : h.name == ":authority" ? &authority
                                         : h.name == ":path"      ? &path
                                                                  : nullptr;
      if (!slot) return "unknown pseudo-header " + h.name;
      if (*slot) return "repeated pseudo-header " + h.name;
      *slot = h.value;
      continue;
    }
    regular_seen = true;
    if (is_connection_specific(h.name)) return "connection-specific field " + h.name;
    if (h.name == "te" && h.value != "trailers") return "te other than trailers";
    if (h.name == "cookie") {
      cookies += (cookies.empty() ? "" : "; ") + h.value;
      continue;
    }
    if (h.name == "content-length") {
      auto n = parse_length(h.value);
      if (!n) return "invalid content-length";
      if (out.content_length && *out.content_length != *n) return "conflicting content-length";
      if (out.content_length) continue;  // the same value twice: keep one
      out.content_length = n;
    }
    out.headers.add(h.name, h.value);
  }
  if (!method || method->empty()) return "missing :method";
  if (*method == "CONNECT") return "CONNECT is not supported (no upgrade_configs)";
  if (!scheme || scheme->empty()) return "missing :scheme";
  if (!path || path->empty()) return "missing :path";
  if ((*path)[0] != '/' && !(*path == "*" && *method == "OPTIONS")) return "invalid :path";
  auto host_field = out.headers.get("host");
  if (authority && authority->empty()) authority.reset();
  if (authority && host_field && *host_field != *authority) return "host differs from :authority";
  if (!authority && !host_field) return "missing :authority";
  if (end_stream && out.content_length.value_or(0) != 0) return "content-length without a body";
  out.method = *method;
  out.target = *path;
  out.path = out.target.substr(0, out.target.find('?'));
  out.version = 11;
  out.host = authority ? *authority : std::string(*host_field);
  if (!host_field) out.headers.fields.insert(out.headers.fields.begin(), http::Header{"host", out.host});
  if (!cookies.empty()) out.headers.add("cookie", cookies);
  out.chunked = !end_stream && !out.content_length;
  out.keep_alive = true;
  return "";
}

std::string check_trailers(const std::vector<http::Header>& block) {
  for (const http::Header& h : block) {
    if (h.name.empty() || h.name[0] == ':') return "pseudo-header in trailers";
    if (has_upper(h.name)) return "upper-case field name " + h.name;
    if (is_connection_specific(h.name)) return "connection-specific field " + h.name;
  }
  return "";
}

std::vector<http::Header> request_block(const http::RequestHead& head) {
  std::vector<http::Header> out;
  out.push_back({":method", head.method});
  out.push_back({":scheme", "http"});
  out.push_back({":authority", head.host});
  std::string path = head.target;
  if (size_t s = path.find("://"); path.empty() || (path[0] != '/' && path != "*" && s != std::string::npos)) {
    size_t p = path.find_first_of("/?", s == std::string::npos ? 0 : s + 3);  // absolute-form to origin-form
    path = p == std::string::npos ? "/" : (path[p] == '?' ? "/" : "") + path.substr(p);
  }
  out.push_back({":path", path});
  auto named = connection_named(head.headers);
  bool te_trailers = false;
  for (const http::Header& h : head.headers.fields) {
    std::string n = lower(h.name);
    if (n == "te") {
      te_trailers = te_trailers || lower(h.value).find("trailers") != std::string::npos;
      continue;
    }
    if (hop_by_hop(n) || std::find(named.begin(), named.end(), n) != named.end()) continue;
    out.push_back({std::move(n), h.value});
  }
  if (te_trailers) out.push_back({"te", "trailers"});
  if (head.content_length) out.push_back({"content-length", std::to_string(*head.content_length)});
  return out;
}

std::vector<http::Header> response_block(const http::ResponseHead& head) {
  std::vector<http::Header> out;
  out.push_back({":status", std::to_string(head.status)});
  auto named = connection_named(head.headers);
  for (const http::Header& h : head.headers.fields) {
    std::string n = lower(h.name);
    if (hop_by_hop(n) || std::find(named.begin(), named.end(), n) != named.end()) continue;
    out.push_back({std::move(n), h.value});
  }
  if (head.content_length) out.push_back({"content-length", std::to_string(*head.content_length)});
  return out;
}

std::string response_head_from_h2(const std::vector<http::Header>& block, http::ResponseHead& out) {
  out = http::ResponseHead{};
  bool status_seen = false;
  for (const http::Header& h : block) {
    if (!h.name.empty() && h.name[0] == ':') {
      if (h.name != ":status" || status_seen) return "unexpected pseudo-header " + h.name;
      auto n = parse_length(h.value);
      if (!n || h.value.size() != 3 || *n < 100) return "invalid :status";
      out.status = static_cast<unsigned>(*n);
      status_seen = true;
      continue;
    }
    if (h.name == "content-length") {
      auto n = parse_length(h.value);
      if (!n || (out.content_length && *out.content_length != *n)) return "invalid content-length";
      out.content_length = n;
    }
    out.headers.add(h.name, h.value);
  }
  if (!status_seen) return "missing :status";
  out.version = 11;
  out.reason = std::string(http::reason_phrase(out.status));
  out.chunked = !out.content_length;
  return "";
}

bool is_grpc(const http::RequestHead& head) {
  auto ct = head.headers.get("content-type");
  return ct && ct->substr(0, 16) == "application/grpc" && (ct->size() == 16 || (*ct)[16] == '+' || (*ct)[16] == ';');
}

unsigned grpc_status_for_http(unsigned s) {
  switch (s) {
    case 400: return 13;  // INTERNAL
    case 401: return 16;  // UNAUTHENTICATED
    case 403: return 7;   // PERMISSION_DENIED
    case 404: return 12;  // UNIMPLEMENTED
    case 429:
    case 502:
    case 503:
    case 504: return 14;  // UNAVAILABLE
    default: return 2;    // UNKNOWN
  }
}

}  // namespace dpukit::mesh::h2
