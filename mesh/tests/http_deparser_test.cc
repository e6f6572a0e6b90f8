// The deparser processing module: heads and body framing, byte for byte.
#include <gtest/gtest.h>

#include <string>

#include "http/http1.h"

namespace dpukit::mesh::http {
namespace {

RequestHead request(std::string method, std::string target, std::string host, HeaderList headers) {
  RequestHead h;
  h.method = std::move(method);
  h.target = std::move(target);
  h.host = std::move(host);
  h.headers = std::move(headers);
  return h;
}

TEST(HttpDeparser, RequestDropsHopByHopAndWritesHostFirst) {
  HeaderList fields;
  fields.add("User-Agent", "t");
  fields.add("Host", "client-said");
  fields.add("Connection", "keep-alive, X-Hop");
  fields.add("Keep-Alive", "timeout=5");
  fields.add("Proxy-Connection", "keep-alive");
  fields.add("TE", "trailers");
  fields.add("Transfer-Encoding", "chunked");
  fields.add("Upgrade", "websocket");
  fields.add("Trailer", "X-T");
  fields.add("x-hop", "1");
  fields.add("Content-Length", "99");
  fields.add("Accept", "*/*");
  RequestHead h = request("GET", "/a?b=c", "routed.example", fields);
  h.version = 10;
  std::string out;
  write_request_head(h, out);
  EXPECT_EQ(out,
            "GET /a?b=c HTTP/1.1\r\n"
            "Host: routed.example\r\n"
            "User-Agent: t\r\n"
            "Accept: */*\r\n"
            "\r\n");
}

TEST(HttpDeparser, RequestFraming) {
  RequestHead post = request("POST", "/up", "h", {});
  post.content_length = 5;
  std::string out;
  write_request_head(post, out);
  EXPECT_EQ(out, "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n");
  EXPECT_FALSE(request_body_encoder(post).chunked);

  RequestHead chunked = request("PUT", "/up", "h", {});
  chunked.chunked = true;
  out.clear();
  write_request_head(chunked, out);
  EXPECT_EQ(out, "PUT /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(request_body_encoder(chunked).chunked);

  // No body: Content-Length: 0 for POST, PUT, PATCH only.
  const std::pair<const char*, const char*> empty[] = {
      {"POST", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
      {"PATCH", "PATCH / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
      {"PUT", "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
      {"GET", "GET / HTTP/1.1\r\nHost: h\r\n\r\n"},
      {"DELETE", "DELETE / HTTP/1.1\r\nHost: h\r\n\r\n"},
      {"HEAD", "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"},
  };
  for (const auto& [method, want] : empty) {
    out.clear();
    write_request_head(request(method, "/", "h", {}), out);
    EXPECT_EQ(out, want);
  }
}

TEST(HttpDeparser, RequestTargetForms) {
  const std::pair<const char*, const char*> forms[] = {
      {"http://a.example:8080/p/q?x=1", "GET /p/q?x=1 HTTP/1.1\r\n"},
      {"http://a.example", "GET / HTTP/1.1\r\n"},
      {"https://a.example?x", "GET /?x HTTP/1.1\r\n"},
      {"/plain?x", "GET /plain?x HTTP/1.1\r\n"},
      {"*", "GET * HTTP/1.1\r\n"},
      {"a.example:443", "GET a.example:443 HTTP/1.1\r\n"},
  };
  for (const auto& [target, line] : forms) {
    std::string out;
    write_request_head(request("GET", target, "a.example", {}), out);
    EXPECT_EQ(out, std::string(line) + "Host: a.example\r\n\r\n");
  }
}

ResponseHead response(unsigned status, std::string reason, HeaderList headers = {}) {
  ResponseHead h;
  h.status = status;
  h.reason = std::move(reason);
  h.headers = std::move(headers);
  return h;
}

TEST(HttpDeparser, ResponseFramingAndConnection) {
  HeaderList fields;
  fields.add("Server", "up");
  fields.add("Connection", "close");
  fields.add("Transfer-Encoding", "chunked");
  ResponseHead cl = response(200, "OK", fields);
  cl.content_length = 12;
  std::string out;
  write_response_head(cl, true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nServer: up\r\nContent-Length: 12\r\n\r\n");
  out.clear();
  write_response_head(cl, false, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nServer: up\r\nContent-Length: 12\r\nConnection: close\r\n\r\n");

  ResponseHead chunked = response(404, "Not Found");
  chunked.chunked = true;
  out.clear();
  write_response_head(chunked, true, out);
  EXPECT_EQ(out, "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(response_body_encoder(chunked).chunked);
}

TEST(HttpDeparser, BodyUntilCloseIsRechunkedForHttp11Clients) {
  ResponseHead h = response(200, "OK");
  h.body_until_close = true;
  h.keep_alive = false;
  std::string out;
  write_response_head(h, true, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(response_body_encoder(h).chunked);
  // An HTTP/1.0 client reads it until close.
  out.clear();
  write_response_head(h, true, 10, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
  EXPECT_FALSE(response_body_encoder(h, 10).chunked);
  // A length-delimited response keeps an HTTP/1.0 client's connection.
  ResponseHead cl = response(200, "OK");
  cl.content_length = 0;
  out.clear();
  write_response_head(cl, true, 10, out);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n");
}

TEST(HttpDeparser, BodilessStatusesAndReasons) {
  ResponseHead no_content = response(204, "No Content");
  no_content.content_length = 0;
  std::string out;
  write_response_head(no_content, true, out);
  EXPECT_EQ(out, "HTTP/1.1 204 No Content\r\n\r\n");
  EXPECT_FALSE(response_body_encoder(no_content).chunked);

  ResponseHead not_modified = response(304, "Not Modified");
  not_modified.content_length = 42;  // the representation's, as received
  out.clear();
  write_response_head(not_modified, true, out);
  EXPECT_EQ(out, "HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\n\r\n");

  ResponseHead chunked_304 = response(304, "Not Modified");
  chunked_304.chunked = true;
  out.clear();
  write_response_head(chunked_304, true, out);
  EXPECT_EQ(out, "HTTP/1.1 304 Not Modified\r\n\r\n");
  EXPECT_FALSE(response_body_encoder(chunked_304).chunked);

  ResponseHead unnamed = response(503, "");
  unnamed.content_length = 0;
  out.clear();
  write_response_head(unnamed, true, out);
  EXPECT_EQ(out, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
}

TEST(HttpDeparser, BodyEncoder) {
  BodyEncoder chunked{true};
  std::string out;
  chunked.data("hello", out);
  chunked.data("", out);  // nothing: an empty chunk would end the body
  chunked.data(std::string(300, 'x'), out);
  chunked.end(out);
  EXPECT_EQ(out, "5\r\nhello\r\n12c\r\n" + std::string(300, 'x') + "\r\n0\r\n\r\n");

  BodyEncoder plain{false};
  out.clear();
  plain.data("hello", out);
  plain.data("", out);
  plain.end(out);
  EXPECT_EQ(out, "hello");
}

struct Collect : RequestEvents {
  RequestHead head;
  std::string body;
  bool complete = false;
  void on_head(RequestHead& h) override { head = h; }
  void on_body(std::string_view d) override { body.append(d); }
  void on_complete() override { complete = true; }
};

TEST(HttpDeparser, OutputParsesBackToTheSameRequest) {
  std::string in =
      "POST http://svc.local/api?x=1 HTTP/1.1\r\nHost: ignored\r\nConnection: close\r\n"
      "Transfer-Encoding: chunked\r\nX-Id: 7\r\n\r\n3;e=1\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n";
  RequestParser p;
  Collect first;
  ASSERT_EQ(p.feed(in, first), in.size());
  ASSERT_TRUE(first.complete);

  std::string wire;
  write_request_head(first.head, wire);
  BodyEncoder enc = request_body_encoder(first.head);
  enc.data(first.body, wire);
  enc.end(wire);
  EXPECT_EQ(wire,
            "POST /api?x=1 HTTP/1.1\r\nHost: svc.local\r\nX-Id: 7\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nabcde\r\n0\r\n\r\n");

  RequestParser again;
  Collect second;
  ASSERT_EQ(again.feed(wire, second), wire.size());
  ASSERT_TRUE(second.complete);
  EXPECT_EQ(second.head.method, "POST");
  EXPECT_EQ(second.head.path, "/api");
  EXPECT_EQ(second.head.host, "svc.local");
  EXPECT_TRUE(second.head.keep_alive);
  EXPECT_EQ(second.body, "abcde");
}

}  // namespace
}  // namespace dpukit::mesh::http
