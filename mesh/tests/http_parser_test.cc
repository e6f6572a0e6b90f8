// The parser processing module: RFC 9112 smuggling rules, limits, valid
// requests and responses, every split position, streaming bodies.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "http/http1.h"

namespace dpukit::mesh::http {
namespace {

template <typename Head>
struct Recorder : MessageEvents<Head> {
  std::vector<Head> heads;
  std::vector<std::string> bodies;
  int completes = 0;
  std::string_view fed;          // the bytes of the current feed() call
  size_t largest_body_piece = 0;
  bool body_outside_input = false;

  void on_head(Head& h) override {
    heads.push_back(h);
    bodies.emplace_back();
  }
  void on_body(std::string_view data) override {
    EXPECT_FALSE(heads.empty());
    bodies.back().append(data);
    largest_body_piece = std::max(largest_body_piece, data.size());
    if (data.data() < fed.data() || data.data() + data.size() > fed.data() + fed.size()) body_outside_input = true;
  }
  void on_complete() override { ++completes; }
};

template <typename Head>
struct Outcome {
  std::vector<Head> heads;
  std::vector<std::string> bodies;
  int completes = 0;
  std::optional<ParseFailure> failure;
};

// Feeds `stream` cut at `cuts` as the data plane does: unconsumed bytes are
// kept and fed again with the next piece, reset() after each message; stops
// at a failure. `finish` says the peer closed after the last byte.
template <typename Parser, typename Head>
Outcome<Head> parse(Parser& parser, std::string_view stream, const std::vector<size_t>& cuts, bool finish = false,
                    bool no_body = false) {
  Recorder<Head> rec;
  std::string pending;
  size_t from = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(stream.size());
  for (size_t end : ends) {
    pending.append(stream.substr(from, end - from));
    from = end;
    while (!pending.empty() && !parser.failure()) {
      rec.fed = pending;
      size_t n = parser.feed(pending, rec);
      EXPECT_LE(n, pending.size());
      pending.erase(0, n);
      if (parser.done()) {
        parser.reset();
        if constexpr (std::is_same_v<Parser, ResponseParser>) parser.expect_no_body(no_body);
      } else if (n == 0) {
        break;
      }
    }
    if (parser.failure()) break;
  }
  if (finish && !parser.failure()) parser.finish(rec);
  return {rec.heads, rec.bodies, rec.completes, parser.failure()};
}

Outcome<RequestHead> parse_request(std::string_view stream, const Limits& limits = {}, std::vector<size_t> cuts = {},
                                   bool finish = false) {
  RequestParser p(limits);
  return parse<RequestParser, RequestHead>(p, stream, cuts, finish);
}

Outcome<ResponseHead> parse_response(std::string_view stream, bool no_body = false, std::vector<size_t> cuts = {},
                                     bool finish = false) {
  ResponseParser p;
  p.expect_no_body(no_body);
  return parse<ResponseParser, ResponseHead>(p, stream, cuts, finish, no_body);
}

// The same outcome when the bytes arrive in two pieces cut anywhere, and one
// byte at a time.
template <typename Parse>
void expect_split_invariant(std::string_view stream, Parse parse_with_cuts) {
  auto whole = parse_with_cuts(std::vector<size_t>{});
  std::vector<std::vector<size_t>> ways;
  for (size_t cut = 1; cut < stream.size(); ++cut) ways.push_back({cut});
  std::vector<size_t> every;
  for (size_t cut = 1; cut < stream.size(); ++cut) every.push_back(cut);
  ways.push_back(every);
  for (const auto& cuts : ways) {
    auto split = parse_with_cuts(cuts);
    SCOPED_TRACE(cuts.size() == 1 ? "cut at " + std::to_string(cuts[0]) : std::string("byte by byte"));
    ASSERT_EQ(split.heads.size(), whole.heads.size());
    EXPECT_EQ(split.bodies, whole.bodies);
    EXPECT_EQ(split.completes, whole.completes);
    ASSERT_EQ(split.failure.has_value(), whole.failure.has_value());
    if (whole.failure) {
      EXPECT_EQ(split.failure->status, whole.failure->status);
      EXPECT_EQ(split.failure->reason, whole.failure->reason);
    }
  }
}

void expect_request_split_invariant(std::string_view stream, const Limits& limits = {}) {
  expect_split_invariant(stream, [&](std::vector<size_t> cuts) { return parse_request(stream, limits, cuts); });
}

// --- Smuggling and malformed requests -------------------------------------

struct Bad {
  const char* name;
  std::string request;
  unsigned status;
  std::string reason;
  size_t heads = 0;  // a body error comes after on_head
};

std::string post(std::string fields, std::string body = "") {
  return "POST /p HTTP/1.1\r\nHost: a\r\n" + fields + "\r\n" + body;
}

const std::vector<Bad>& bad_requests() {
  static const std::vector<Bad> cases = {
      // Content-Length and Transfer-Encoding together, in either order
      {"cl_then_te", post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), 400,
       "Content-Length with Transfer-Encoding"},
      {"te_then_cl", post("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", "0\r\n\r\n"), 400,
       "Content-Length with Transfer-Encoding"},
      {"te_gzip_then_cl", post("Transfer-Encoding: gzip\r\nContent-Length: 4\r\n", "abcd"), 400,
       "Content-Length with Transfer-Encoding"},
      // Content-Length: duplicates, lists, malformed
      {"cl_duplicate_equal", post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"), 400,
       "duplicate Content-Length"},
      {"cl_duplicate_differing", post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"), 400,
       "duplicate Content-Length"},
      {"cl_list", post("Content-Length: 5, 5\r\n", "hello"), 400, "invalid Content-Length"},
      {"cl_plus", post("Content-Length: +5\r\n", "hello"), 400, "invalid Content-Length"},
      {"cl_minus", post("Content-Length: -1\r\n"), 400, "invalid Content-Length"},
      {"cl_inner_space", post("Content-Length: 1 2\r\n"), 400, "invalid Content-Length"},
      {"cl_hex", post("Content-Length: 0x5\r\n"), 400, "invalid Content-Length"},
      {"cl_empty", post("Content-Length: \r\n"), 400, "invalid Content-Length"},
      {"cl_overflow", post("Content-Length: 18446744073709551616\r\n"), 400, "invalid Content-Length"},
      // Transfer-Encoding
      {"te_gzip", post("Transfer-Encoding: gzip\r\n", "abc"), 400, "final transfer coding is not chunked"},
      {"te_identity", post("Transfer-Encoding: identity\r\n"), 400, "final transfer coding is not chunked"},
      {"te_chunked_then_gzip", post("Transfer-Encoding: chunked, gzip\r\n"), 400,
       "final transfer coding is not chunked"},
      {"te_empty", post("Transfer-Encoding: ,\r\n"), 400, "final transfer coding is not chunked"},
      {"te_chunked_twice_list", post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n"), 400,
       "chunked applied more than once"},
      {"te_chunked_twice_fields", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
       400, "chunked applied more than once"},
      {"te_gzip_chunked", post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"), 501,
       "transfer coding other than chunked"},
      {"te_gzip_field_then_chunked", post("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
       501, "transfer coding other than chunked"},
      {"te_in_http10", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
       "Transfer-Encoding in HTTP/1.0"},
      // Whitespace and line endings in the head
      {"space_before_colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "invalid field name"},
      {"tab_before_colon", "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400, "invalid field name"},
      {"obs_fold_space", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400, "obs-fold in a field"},
      {"obs_fold_tab", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n", 400, "obs-fold in a field"},
      {"obs_fold_empty_first_line", "GET / HTTP/1.1\r\nHost: a\r\nX-A:\r\n c\r\n\r\n", 400, "obs-fold in a field"},
      {"obs_fold_into_host", "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", 400, "obs-fold in a field"},
      {"first_field_starts_with_space", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400, "invalid field name"},
      {"bare_lf_everywhere", "GET / HTTP/1.1\nHost: a\n\n", 400, "invalid HTTP version"},
      {"bare_lf_after_field", "GET / HTTP/1.1\r\nHost: a\n\r\n", 400, "invalid field value"},
      {"bare_lf_inside_value", "GET / HTTP/1.1\r\nHost: a\r\nX: b\nY: c\r\n\r\n", 400, "invalid field value"},
      {"bare_lf_end_of_head", "GET / HTTP/1.1\r\nHost: a\r\n\n\n", 400, "invalid field name"},
      {"bare_cr_request_line", "GET / HTTP/1.1\rHost: a\r\n\r\n", 400, "invalid HTTP version"},
      {"bare_cr_inside_value", "GET / HTTP/1.1\r\nHost: a\r\nX: b\rc\r\n\r\n", 400, "bare CR"},
      {"bare_cr_end_of_head", "GET / HTTP/1.1\r\nHost: a\r\n\rX", 400, "bare CR"},
      // Invalid characters
      {"nul_in_value", std::string("GET / HTTP/1.1\r\nHost: a\r\nX: b\0c\r\n\r\n", 38), 400, "invalid field value"},
      {"ctl_in_value", "GET / HTTP/1.1\r\nHost: a\r\nX: b\x01\r\n\r\n", 400, "invalid field value"},
      {"del_in_value", "GET / HTTP/1.1\r\nHost: a\r\nX: b\x7f\r\n\r\n", 400, "invalid field value"},
      {"ctl_in_name", "GET / HTTP/1.1\r\nHost: a\r\nX\x01Y: b\r\n\r\n", 400, "invalid field name"},
      {"separator_in_name", "GET / HTTP/1.1\r\nHost: a\r\nX(Y): b\r\n\r\n", 400, "invalid field name"},
      {"empty_name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400, "invalid field name"},
      // Host
      {"missing_host", "GET / HTTP/1.1\r\nX: a\r\n\r\n", 400, "missing Host"},
      {"two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, "more than one Host"},
      {"two_hosts_http10", "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host"},
      {"host_with_space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid Host"},
      {"host_with_slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, "invalid Host"},
      {"host_with_userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400, "invalid Host"},
      // Versions and request lines
      {"http12", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505, "HTTP version not supported"},
      {"http20", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "HTTP version not supported"},
      {"http09", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505, "HTTP version not supported"},
      {"httx", "GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400, "invalid HTTP version"},
      {"http_1_10", "GET / HTTP/1.10\r\nHost: a\r\n\r\n", 400, "invalid HTTP version"},
      {"lowercase_http", "GET / http/1.1\r\nHost: a\r\n\r\n", 400, "invalid HTTP version"},
      {"two_spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bad target"},
      {"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400, "fragment in the request-target"},
      {"relative_target", "GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", 400, "invalid request-target"},
      {"asterisk_without_options", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400,
       "asterisk-form request-target without OPTIONS"},
      {"connect_origin_form", "CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", 400,
       "CONNECT without an authority-form request-target"},
      {"absolute_userinfo", "GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400,
       "invalid authority in the request-target"},
      {"absolute_empty_authority", "GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400,
       "invalid authority in the request-target"},
      // Chunked bodies (the head is fine: on_head, then the failure)
      {"chunk_size_overflow", post("Transfer-Encoding: chunked\r\n", "10000000000000000\r\nx\r\n0\r\n\r\n"), 400,
       "bad chunk", 1},
      {"chunk_size_junk", post("Transfer-Encoding: chunked\r\n", "zz\r\nx\r\n0\r\n\r\n"), 400, "bad chunk", 1},
      {"chunk_size_negative", post("Transfer-Encoding: chunked\r\n", "-1\r\nx\r\n0\r\n\r\n"), 400, "bad chunk", 1},
      {"chunk_size_space", post("Transfer-Encoding: chunked\r\n", "5 \r\nhello\r\n0\r\n\r\n"), 400,
       "bad chunk extension", 1},
      {"chunk_data_too_long", post("Transfer-Encoding: chunked\r\n", "2\r\nabc\r\n0\r\n\r\n"), 400, "bad chunk", 1},
      // A bare LF in a chunk line: refused as soon as it is seen, with no
      // CRLF after it (Beast would wait for one), and the same when Beast
      // refuses the line for another reason once a CRLF came.
      {"chunk_size_bare_lf", post("Transfer-Encoding: chunked\r\n", "5\nhello\r\n0\r\n\r\n"), 400,
       "bare LF in a chunk line", 1},
      {"chunk_ext_lf", post("Transfer-Encoding: chunked\r\n", "5;a=\"x\ny\"\r\nhello\r\n0\r\n\r\n"), 400,
       "bare LF in a chunk line", 1},
      {"last_chunk_bare_lf", post("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\n\n"), 400,
       "bare LF in a chunk line", 1},
      {"only_chunk_bare_lf", post("Transfer-Encoding: chunked\r\n", "0\n\n"), 400, "bare LF in a chunk line", 1},
      {"chunk_data_end_bare_lf", post("Transfer-Encoding: chunked\r\n", "3\r\nabc\n0\n\n"), 400,
       "bare LF in a chunk line", 1},
      {"last_chunk_crlf_bare_lf", post("Transfer-Encoding: chunked\r\n", "0\r\n\n"), 400,
       "bare LF in a chunk line", 1},
      {"trailer_bare_lf", post("Transfer-Encoding: chunked\r\n", "0\r\nx-t: 1\n\n"), 400,
       "bare LF in a chunk line", 1},
  };
  return cases;
}

TEST(HttpRequestParser, RejectsEverySmugglingAndMalformedCase) {
  for (const Bad& c : bad_requests()) {
    SCOPED_TRACE(c.name);
    auto out = parse_request(c.request);
    ASSERT_TRUE(out.failure.has_value());
    EXPECT_EQ(out.failure->status, c.status);
    EXPECT_EQ(out.failure->reason, c.reason);
    EXPECT_EQ(out.heads.size(), c.heads);
    EXPECT_EQ(out.completes, 0);
  }
}

TEST(HttpRequestParser, RejectsTheSameAtEverySplitPosition) {
  // Once Beast has seen part of a head it checks it again only when the end
  // of the head (CRLF CRLF) is there (its guard against re-scanning): with a
  // head end after each case, every split gives the same answer.
  for (const Bad& c : bad_requests()) {
    SCOPED_TRACE(c.name);
    expect_request_split_invariant(c.request + "\r\n\r\n");
  }
}

TEST(HttpRequestParser, ABrokenHeadSeenInPiecesFailsWhenItsEndArrives) {
  // A fault Beast finds only when it parses the head again: nothing is raised
  // until the head's end (CRLF CRLF) is there.
  std::string bad = "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n";
  auto partial = parse_request(bad, {}, {6});
  EXPECT_FALSE(partial.failure);  // waiting, nothing raised
  EXPECT_TRUE(partial.heads.empty());
  auto ended = parse_request(bad + "\r\n", {}, {6});
  ASSERT_TRUE(ended.failure);
  EXPECT_EQ(ended.failure->reason, "invalid Content-Length");
  EXPECT_TRUE(ended.heads.empty());
}

TEST(HttpRequestParser, ABareLfInAHeadSeenInPiecesFailsAtOnce) {
  // Beast would wait for a CRLF CRLF that a client ending its lines in LF
  // never sends; the answer is the one the whole head gets.
  for (std::string bad : {"GET / HTTP/1.1\nHost: a\n", "GET / HTTP/1.1\r\nHost: a\r\nX: y\n\n",
                          "GET / HTTP/1.1\r\nHost: a\n"}) {
    SCOPED_TRACE(bad);
    auto whole = parse_request(bad + "\r\n\r\n");
    ASSERT_TRUE(whole.failure);
    for (size_t cut = 1; cut < bad.size(); ++cut) {
      auto partial = parse_request(bad, {}, {cut});
      ASSERT_TRUE(partial.failure) << "cut at " << cut;
      EXPECT_EQ(partial.failure->status, 400u);
      EXPECT_EQ(partial.failure->reason, whole.failure->reason) << "cut at " << cut;
      EXPECT_TRUE(partial.heads.empty());
    }
  }
}

TEST(HttpRequestParser, FailureIsStickyUntilReset) {
  RequestParser p;
  Recorder<RequestHead> rec;
  std::string bad = "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
  EXPECT_EQ(p.feed(bad, rec), 0u);
  ASSERT_TRUE(p.failure());
  std::string good = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
  EXPECT_EQ(p.feed(good, rec), 0u);
  EXPECT_TRUE(rec.heads.empty());
  EXPECT_EQ(p.failure()->reason, "more than one Host");
  p.reset();
  EXPECT_FALSE(p.failure());
  EXPECT_EQ(p.feed(good, rec), good.size());
  EXPECT_TRUE(p.done());
  EXPECT_EQ(rec.heads.size(), 1u);
  EXPECT_EQ(rec.completes, 1);
}

// --- Limits -----------------------------------------------------------------

TEST(HttpRequestParser, HeaderCountAtTheLimitAndOnePast) {
  Limits limits;
  limits.max_headers_count = 3;
  std::string three = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
  std::string four = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
  auto ok = parse_request(three, limits);
  EXPECT_FALSE(ok.failure);
  EXPECT_EQ(ok.completes, 1);
  auto bad = parse_request(four, limits);
  ASSERT_TRUE(bad.failure);
  EXPECT_EQ(bad.failure->status, 431u);
  EXPECT_EQ(bad.failure->reason, "more than max_headers_count fields");
  EXPECT_TRUE(bad.heads.empty());
  expect_request_split_invariant(four, limits);
}

TEST(HttpRequestParser, HeadBytesAtTheLimitAndOnePast) {
  std::string head = "GET /x HTTP/1.1\r\nHost: a\r\nX-Pad: " + std::string(100, 'p') + "\r\n\r\n";
  Limits limits;
  limits.max_header_bytes = static_cast<uint32_t>(head.size());
  auto ok = parse_request(head + "GET / HTTP/1.1\r\nHost: a\r\n\r\n", limits);
  EXPECT_FALSE(ok.failure);
  EXPECT_EQ(ok.completes, 2);
  expect_request_split_invariant(head, limits);

  limits.max_header_bytes -= 1;
  auto bad = parse_request(head, limits);
  ASSERT_TRUE(bad.failure);
  EXPECT_EQ(bad.failure->status, 431u);
  EXPECT_EQ(bad.failure->reason, "head larger than max_header_bytes");
  EXPECT_TRUE(bad.heads.empty());
  expect_request_split_invariant(head, limits);
}

TEST(HttpRequestParser, HeadLimitCountsTheWholeHeadHoweverItArrives) {
  // Beast's own header_limit applies to one put(); fed field by field, the
  // head must still be bounded.
  Limits limits;
  limits.max_header_bytes = 1024;
  std::string head = "GET / HTTP/1.1\r\nHost: a\r\n";
  std::vector<size_t> cuts;
  for (int i = 0; i < 100; ++i) {
    head += "X-F" + std::to_string(i) + ": v\r\n";
    cuts.push_back(head.size());
  }
  auto out = parse_request(head + "\r\n", limits, cuts);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->status, 431u);
}

TEST(HttpRequestParser, RequestLineAtTheLimitAndOnePast) {
  std::string line = "GET /" + std::string(50, 'a') + " HTTP/1.1";
  std::string request = line + "\r\nHost: a\r\n\r\n";
  Limits limits;
  limits.max_request_line = static_cast<uint32_t>(line.size());
  auto ok = parse_request(request, limits);
  EXPECT_FALSE(ok.failure);
  EXPECT_EQ(ok.completes, 1);
  expect_request_split_invariant(request, limits);

  limits.max_request_line -= 1;
  auto bad = parse_request(request, limits);
  ASSERT_TRUE(bad.failure);
  EXPECT_EQ(bad.failure->status, 414u);
  EXPECT_EQ(bad.failure->reason, "request line longer than max_request_line");
  expect_request_split_invariant(request, limits);
  // Without its end yet: too long already once past the limit.
  auto unfinished = parse_request("GET /" + std::string(line.size() - 5, 'a'), limits);
  ASSERT_TRUE(unfinished.failure);
  EXPECT_EQ(unfinished.failure->status, 414u);
  auto short_so_far = parse_request("GET /" + std::string(line.size() - 6, 'a'), limits);
  EXPECT_FALSE(short_so_far.failure);
}

TEST(HttpRequestParser, BodyAtTheLimitAndOnePast) {
  Limits limits;
  limits.max_body_bytes = 5;
  auto ok = parse_request(post("Content-Length: 5\r\n", "hello"), limits);
  EXPECT_FALSE(ok.failure);
  EXPECT_EQ(ok.bodies, std::vector<std::string>{"hello"});
  auto bad = parse_request(post("Content-Length: 6\r\n", "hello!"), limits);
  ASSERT_TRUE(bad.failure);
  EXPECT_EQ(bad.failure->status, 413u);
  EXPECT_EQ(bad.failure->reason, "body larger than max_body_bytes");
  EXPECT_TRUE(bad.heads.empty());  // known from the head: refused before on_head

  auto chunked_ok = parse_request(post("Transfer-Encoding: chunked\r\n", "3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"), limits);
  EXPECT_FALSE(chunked_ok.failure);
  EXPECT_EQ(chunked_ok.bodies, std::vector<std::string>{"hello"});
  std::string over = post("Transfer-Encoding: chunked\r\n", "3\r\nhel\r\n3\r\nlo!\r\n0\r\n\r\n");
  auto chunked_bad = parse_request(over, limits);
  ASSERT_TRUE(chunked_bad.failure);
  EXPECT_EQ(chunked_bad.failure->status, 413u);
  EXPECT_EQ(chunked_bad.heads.size(), 1u);
  EXPECT_EQ(chunked_bad.bodies[0], "hel");
  EXPECT_EQ(chunked_bad.completes, 0);
}

TEST(HttpRequestParser, AChunkLineReadAgainIsChargedOnce) {
  // Beast charges a chunk against its body_limit each time it re-reads an
  // unfinished chunk line (here a quoted extension still open): fed byte by
  // byte that used to be a 413. It waits instead, and a complete line counts once.
  Limits limits;
  limits.max_body_bytes = 10;
  std::string open = post("Transfer-Encoding: chunked\r\n", "5;a=\"x\r\nhello\r\n");
  std::vector<size_t> every;
  for (size_t cut = 1; cut < open.size(); ++cut) every.push_back(cut);
  auto out = parse_request(open, limits, every);
  EXPECT_FALSE(out.failure);
  EXPECT_EQ(out.bodies, std::vector<std::string>{""});
  std::string ok = post("Transfer-Encoding: chunked\r\n", "5;a=\"x\"\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
  expect_request_split_invariant(ok, limits);
  EXPECT_EQ(parse_request(ok, limits).bodies, std::vector<std::string>{"helloworld"});
}

TEST(HttpRequestParser, ABodyAfterAHeadNearTheLimitIsNotCountedAsHead) {
  // The first put() sees at most max_header_bytes; the chunks after a short
  // head in that window must not count against the chunk-line bound.
  Limits limits;
  limits.max_header_bytes = 64;
  std::string req = post("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n" + std::string(100, ';'));
  // The window ends at byte 64, inside the chunk line "10\r\n".
  std::string tail = "10\r\n" + std::string(16, 'b') + "\r\n40\r\n" + std::string(64, 'c') + "\r\n0\r\n\r\n";
  std::string ok = post("Transfer-Encoding: chunked\r\n", "1\r\nx\r\n" + tail);
  ASSERT_EQ(ok.find("10\r\n"), 63u);
  auto out = parse_request(ok, limits);
  ASSERT_FALSE(out.failure);
  EXPECT_EQ(out.bodies, std::vector<std::string>{"x" + std::string(16, 'b') + std::string(64, 'c')});
  expect_request_split_invariant(ok, limits);
  auto bad = parse_request(req, limits);
  ASSERT_TRUE(bad.failure);  // 100 bytes of a chunk line that never ends
  EXPECT_EQ(bad.failure->status, 431u);
}

TEST(HttpRequestParser, UnlimitedBodyByDefault) {
  // Beast's default request body limit is 1 MB (and boost::none rejects any
  // Content-Length in 1.74): 0 must mean unlimited.
  std::string body(3 << 20, 'b');
  auto out = parse_request(post("Content-Length: " + std::to_string(body.size()) + "\r\n", body));
  EXPECT_FALSE(out.failure);
  ASSERT_EQ(out.bodies.size(), 1u);
  EXPECT_EQ(out.bodies[0].size(), body.size());
}

TEST(HttpRequestParser, ChunkLineAndTrailersAreBounded) {
  Limits limits;
  limits.max_header_bytes = 256;
  std::string ext = "5;" + std::string(300, 'e');
  auto out = parse_request(post("Transfer-Encoding: chunked\r\n", ext), limits);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->status, 431u);
  EXPECT_EQ(out.failure->reason, "chunk line or trailer section larger than max_header_bytes");
  auto trailers = parse_request(post("Transfer-Encoding: chunked\r\n", "0\r\nX: " + std::string(300, 't')), limits);
  ASSERT_TRUE(trailers.failure);
  EXPECT_EQ(trailers.failure->status, 431u);
}

// --- Valid requests -----------------------------------------------------------

TEST(HttpRequestParser, KeepAliveGetWithQuery) {
  std::string req = "GET /search/a?q=1&r=%20 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent:  t/1 \r\nX-Empty:\r\n\r\n";
  auto out = parse_request(req);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 1u);
  const RequestHead& h = out.heads[0];
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/search/a?q=1&r=%20");
  EXPECT_EQ(h.path, "/search/a");
  EXPECT_EQ(h.version, 11u);
  EXPECT_EQ(h.host, "example.com:8080");
  EXPECT_TRUE(h.keep_alive);
  EXPECT_FALSE(h.content_length);
  EXPECT_FALSE(h.chunked);
  EXPECT_FALSE(h.expect_continue);
  EXPECT_FALSE(h.upgrade);
  ASSERT_EQ(h.headers.fields.size(), 3u);
  EXPECT_EQ(h.headers.fields[1].name, "User-Agent");
  EXPECT_EQ(h.headers.fields[1].value, "t/1");
  EXPECT_EQ(h.headers.fields[2].value, "");
  EXPECT_EQ(out.completes, 1);
  expect_request_split_invariant(req);
}

TEST(HttpRequestParser, PipelinedRequestsInOneBuffer) {
  std::string a = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
  std::string b = "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
  std::string c = "GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
  std::string all = a + b + c;
  RequestParser p;
  Recorder<RequestHead> rec;
  size_t n = p.feed(all, rec);
  EXPECT_EQ(n, a.size());  // stops right after the first message
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.feed(std::string_view(all).substr(n), rec), 0u);  // done until reset
  p.reset();
  EXPECT_EQ(p.feed(std::string_view(all).substr(n), rec), b.size());
  p.reset();
  EXPECT_EQ(p.feed(std::string_view(all).substr(n + b.size()), rec), c.size());
  ASSERT_EQ(rec.heads.size(), 3u);
  EXPECT_EQ(rec.heads[1].content_length, 5u);
  EXPECT_EQ(rec.bodies[1], "hello");
  EXPECT_TRUE(rec.heads[0].keep_alive);
  EXPECT_FALSE(rec.heads[2].keep_alive);
  EXPECT_EQ(rec.completes, 3);
  expect_request_split_invariant(all);
}

// RFC 9112 §2.2: empty lines before a request line are ignored (Envoy 1.40
// answers "GET /1 ...\r\n\r\n\r\nGET /2 ..." twice on one connection).
TEST(HttpRequestParser, EmptyLinesBeforeTheRequestLineAreIgnored) {
  std::string a = "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n";
  std::string b = "\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
  RequestParser p;
  Recorder<RequestHead> rec;
  std::string all = a + b;
  size_t n = p.feed(all, rec);
  ASSERT_EQ(n, a.size());
  p.reset();
  // A CR alone at the end of what has arrived waits for the byte after it.
  EXPECT_EQ(p.feed(std::string_view(all).substr(n, 3), rec), 2u);
  EXPECT_FALSE(p.in_message());
  EXPECT_EQ(p.feed(std::string_view(all).substr(n + 2), rec), b.size() - 2);
  ASSERT_FALSE(p.failure());
  ASSERT_EQ(rec.heads.size(), 2u);
  EXPECT_EQ(rec.heads[1].path, "/2");
  // A bare CR is not an empty line: still refused.
  RequestParser q;
  Recorder<RequestHead> rec2;
  q.feed("\rGET / HTTP/1.1\r\nHost: h\r\n\r\n", rec2);
  EXPECT_TRUE(q.failure());
  expect_request_split_invariant(b);
}

TEST(HttpRequestParser, ChunkedWithExtensionsAndTrailers) {
  std::string req = post("Transfer-Encoding: Chunked\r\n",
                         "5;name=\"v;x\"\r\nhello\r\n6 ; a=b;c\r\n world\r\nA\r\n0123456789\r\n0;last\r\n"
                         "X-Trailer: t\r\nChecksum: 1\r\n\r\n") +
                    "GET /next HTTP/1.1\r\nHost: a\r\n\r\n";
  auto out = parse_request(req);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 2u);
  EXPECT_TRUE(out.heads[0].chunked);
  EXPECT_FALSE(out.heads[0].content_length);
  EXPECT_EQ(out.bodies[0], "hello world0123456789");
  EXPECT_EQ(out.heads[0].headers.count("x-trailer"), 0u);  // trailers are dropped
  EXPECT_EQ(out.heads[1].path, "/next");
  EXPECT_EQ(out.completes, 2);
  expect_request_split_invariant(req);
}

TEST(HttpRequestParser, Http10WithAndWithoutKeepAlive) {
  std::string req = "GET /a HTTP/1.0\r\n\r\nGET /b HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: h\r\n\r\n";
  auto out = parse_request(req);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 2u);
  EXPECT_EQ(out.heads[0].version, 10u);
  EXPECT_FALSE(out.heads[0].keep_alive);
  EXPECT_EQ(out.heads[0].host, "");
  EXPECT_TRUE(out.heads[1].keep_alive);
  EXPECT_EQ(out.heads[1].host, "h");
  expect_request_split_invariant(req);
}

TEST(HttpRequestParser, RequestTargetForms) {
  std::string req =
      "GET http://Example.com:8080?x=1 HTTP/1.1\r\nHost: other\r\n\r\n"
      "GET https://e.org/p/q?r HTTP/1.1\r\nHost: e.org\r\n\r\n"
      "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"
      "CONNECT e.org:443 HTTP/1.1\r\nHost: e.org:443\r\n\r\n";
  auto out = parse_request(req);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 4u);
  EXPECT_EQ(out.heads[0].target, "http://Example.com:8080?x=1");
  EXPECT_EQ(out.heads[0].host, "Example.com:8080");  // RFC 9112 §3.2.2: not "other"
  EXPECT_EQ(out.heads[0].path, "/");
  EXPECT_EQ(out.heads[1].host, "e.org");
  EXPECT_EQ(out.heads[1].path, "/p/q");
  EXPECT_EQ(out.heads[2].path, "*");
  EXPECT_EQ(out.heads[3].method, "CONNECT");
  EXPECT_EQ(out.heads[3].target, "e.org:443");
  EXPECT_EQ(out.heads[3].path, "");
  expect_request_split_invariant(req);
}

TEST(HttpRequestParser, ExpectContinueAndUpgrade) {
  std::string req = post("Expect: 100-Continue\r\nContent-Length: 3\r\n", "abc") +
                    "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"
                    "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                    "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"
                    "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                    "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
                    "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nUpgrade: websocket\r\n\r\n";
  auto out = parse_request(req);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 6u);
  EXPECT_TRUE(out.heads[0].expect_continue);
  EXPECT_FALSE(out.heads[1].expect_continue);  // ignored in HTTP/1.0
  EXPECT_TRUE(out.heads[2].upgrade);
  EXPECT_FALSE(out.heads[3].upgrade);  // Upgrade without Connection: upgrade
  EXPECT_FALSE(out.heads[4].upgrade);  // h2c only: served as HTTP/1.1, as Envoy does
  EXPECT_TRUE(out.heads[5].upgrade);
}

TEST(HttpRequestParser, ObsTextAndTabsInValuesAreAllowed) {
  std::string req = "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\tau\tlait\r\n\r\n";
  auto out = parse_request(req);
  ASSERT_FALSE(out.failure);
  EXPECT_EQ(out.heads[0].headers.get("x"), "caf\xc3\xa9\tau\tlait");
}

TEST(HttpRequestParser, FinishAndInMessage) {
  RequestParser p;
  Recorder<RequestHead> rec;
  p.finish(rec);  // idle close: no failure
  EXPECT_FALSE(p.failure());
  EXPECT_FALSE(p.in_message());
  std::string part = post("Content-Length: 10\r\n", "hel");
  EXPECT_EQ(p.feed(part, rec), part.size());
  EXPECT_TRUE(p.in_message());
  EXPECT_FALSE(p.done());
  p.finish(rec);
  ASSERT_TRUE(p.failure());
  EXPECT_EQ(p.failure()->status, 400u);
  EXPECT_EQ(p.failure()->reason, "connection closed in the middle of a message");
  EXPECT_EQ(rec.completes, 0);
}

TEST(HttpRequestParser, LargeBodyStreamsWithoutBuffering) {
  constexpr size_t kBody = 50u << 20, kPiece = 64u << 10;
  std::string piece(kPiece, 'z');
  for (int chunked = 0; chunked < 2; ++chunked) {
    SCOPED_TRACE(chunked ? "chunked" : "content-length");
    RequestParser p;
    Recorder<RequestHead> rec;
    struct Counter : RequestEvents {
      Recorder<RequestHead>* rec;
      uint64_t bytes = 0;
      void on_head(RequestHead& h) override { rec->on_head(h); }
      void on_body(std::string_view d) override {
        bytes += d.size();
        rec->largest_body_piece = std::max(rec->largest_body_piece, d.size());
        if (d.data() < rec->fed.data() || d.data() + d.size() > rec->fed.data() + rec->fed.size()) {
          rec->body_outside_input = true;
        }
      }
      void on_complete() override { rec->on_complete(); }
    } counter;
    counter.rec = &rec;
    std::string head = chunked ? post("Transfer-Encoding: chunked\r\n")
                               : post("Content-Length: " + std::to_string(kBody) + "\r\n");
    ASSERT_EQ(p.feed(head, counter), head.size());
    // Chunked: one 1 MiB chunk per 16 pieces, its line sent with the first.
    std::string line = "100000\r\n";
    size_t kept_most = 0;
    for (size_t sent = 0; sent < kBody; sent += kPiece) {
      std::string input;
      if (chunked && sent % (1u << 20) == 0) input = (sent == 0 ? "" : "\r\n") + line;
      input += piece;
      rec.fed = input;
      size_t n = p.feed(input, counter);
      kept_most = std::max(kept_most, input.size() - n);
      ASSERT_FALSE(p.failure());
    }
    if (chunked) {
      std::string end = "\r\n0\r\n\r\n";
      rec.fed = end;
      ASSERT_EQ(p.feed(end, counter), end.size());
    }
    EXPECT_TRUE(p.done());
    EXPECT_EQ(counter.bytes, kBody);
    EXPECT_EQ(rec.completes, 1);
    EXPECT_EQ(kept_most, 0u);                     // every byte consumed as it came
    EXPECT_LE(rec.largest_body_piece, kPiece);    // never more than one piece
    EXPECT_FALSE(rec.body_outside_input);         // a view into the input, not a copy
  }
}

// --- Responses ---------------------------------------------------------------

void expect_response_split_invariant(std::string_view stream, bool no_body = false, bool finish = false) {
  expect_split_invariant(stream,
                         [&](std::vector<size_t> cuts) { return parse_response(stream, no_body, cuts, finish); });
}

TEST(HttpResponseParser, ContentLengthChunkedAndPipelined) {
  std::string resp =
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\nhello"
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n";
  auto out = parse_response(resp);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 2u);
  EXPECT_EQ(out.heads[0].status, 200u);
  EXPECT_EQ(out.heads[0].reason, "OK");
  EXPECT_EQ(out.heads[0].content_length, 5u);
  EXPECT_TRUE(out.heads[0].keep_alive);
  EXPECT_FALSE(out.heads[0].body_until_close);
  EXPECT_EQ(out.bodies[0], "hello");
  EXPECT_EQ(out.heads[1].status, 404u);
  EXPECT_TRUE(out.heads[1].chunked);
  EXPECT_EQ(out.bodies[1], "abc");
  EXPECT_EQ(out.completes, 2);
  expect_response_split_invariant(resp);
}

TEST(HttpResponseParser, BodyUntilClose) {
  std::string resp = "HTTP/1.1 200 OK\r\nServer: s\r\n\r\nabc";
  auto open = parse_response(resp);
  ASSERT_FALSE(open.failure);
  EXPECT_EQ(open.completes, 0);
  auto closed = parse_response(resp, false, {}, true);
  ASSERT_FALSE(closed.failure);
  ASSERT_EQ(closed.heads.size(), 1u);
  EXPECT_TRUE(closed.heads[0].body_until_close);
  EXPECT_FALSE(closed.heads[0].keep_alive);
  EXPECT_EQ(closed.bodies[0], "abc");
  EXPECT_EQ(closed.completes, 1);
  expect_response_split_invariant(resp, false, true);
}

TEST(HttpResponseParser, HeadResponsesAnd204And304HaveNoBody) {
  auto head = parse_response("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", true);
  ASSERT_FALSE(head.failure);
  EXPECT_EQ(head.heads[0].content_length, 100u);
  EXPECT_EQ(head.bodies[0], "");
  EXPECT_EQ(head.completes, 1);

  std::string resp =
      "HTTP/1.1 204 No Content\r\n\r\n"
      "HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  auto out = parse_response(resp);
  ASSERT_FALSE(out.failure);
  ASSERT_EQ(out.heads.size(), 3u);
  EXPECT_EQ(out.heads[1].content_length, 42u);
  EXPECT_EQ(out.bodies, (std::vector<std::string>{"", "", "ok"}));
  EXPECT_EQ(out.completes, 3);
  expect_response_split_invariant(resp);

  // reset() clears expect_no_body: the next response has its body.
  ResponseParser p;
  Recorder<ResponseHead> rec;
  p.expect_no_body(true);
  std::string r = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(p.feed(r, rec), r.size());
  EXPECT_TRUE(p.done());
  p.reset();
  std::string r2 = r + "ok";
  EXPECT_EQ(p.feed(r2, rec), r2.size());
  EXPECT_EQ(rec.bodies[1], "ok");
}

TEST(HttpResponseParser, InterimResponsesAreSkipped) {
  std::string resp =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
      "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
  ResponseParser p;
  Recorder<ResponseHead> rec;
  EXPECT_EQ(p.feed(resp, rec), resp.size());
  EXPECT_TRUE(p.done());
  ASSERT_EQ(rec.heads.size(), 1u);
  EXPECT_EQ(rec.heads[0].status, 201u);
  ASSERT_EQ(rec.heads[0].headers.fields.size(), 1u);
  EXPECT_EQ(rec.heads[0].headers.fields[0].name, "Content-Length");
  EXPECT_EQ(rec.bodies[0], "ok");
  EXPECT_EQ(rec.completes, 1);
  expect_response_split_invariant(resp);

  // A HEAD response after a 100 keeps expect_no_body.
  auto head = parse_response("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true);
  ASSERT_FALSE(head.failure);
  EXPECT_EQ(head.completes, 1);

  // 101 is a final response.
  auto switching = parse_response("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n");
  ASSERT_EQ(switching.heads.size(), 1u);
  EXPECT_EQ(switching.heads[0].status, 101u);
  EXPECT_EQ(switching.completes, 1);
}

TEST(HttpResponseParser, FramingErrorsAre502) {
  const std::pair<std::string, std::string> cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       "Content-Length with Transfer-Encoding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
       "Content-Length with Transfer-Encoding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
       "Content-Length with Transfer-Encoding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc", "final transfer coding is not chunked"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "transfer coding other than chunked"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "duplicate Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "invalid Content-Length"},
      {"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Transfer-Encoding in HTTP/1.0"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk"},
      // An upstream's last chunk line ended by a bare LF: 502 at once, not a wait for a CRLF.
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\n\n", "bare LF in a chunk line"},
      {"HTTP/2.0 200 OK\r\n\r\n", "bad version"},
  };
  for (const auto& [resp, reason] : cases) {
    SCOPED_TRACE(resp);
    auto out = parse_response(resp);
    ASSERT_TRUE(out.failure);
    EXPECT_EQ(out.failure->status, 502u);
    EXPECT_EQ(out.failure->reason, reason);
    EXPECT_EQ(out.completes, 0);
  }
  auto cut = parse_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe", false, {}, true);
  ASSERT_TRUE(cut.failure);
  EXPECT_EQ(cut.failure->status, 502u);
}

TEST(HttpResponseParser, LenientWhereTheRfcAllows) {
  // Equal Content-Length values (RFC 9110 §8.6) and obs-fold, unfolded
  // (RFC 9112 §5.2), from an upstream.
  auto out = parse_response(
      "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\nX: a\r\n b\r\n\r\nok");
  ASSERT_FALSE(out.failure);
  EXPECT_EQ(out.heads[0].content_length, 2u);
  EXPECT_EQ(out.heads[0].headers.get("x"), "a b");
  EXPECT_EQ(out.bodies[0], "ok");
}

// --- Header lists -------------------------------------------------------------

TEST(HttpHeaderList, Operations) {
  HeaderList h;
  h.add("Host", "a");
  h.add("X-A", "1");
  h.add("x-a", "2");
  EXPECT_EQ(h.get("HOST"), "a");
  EXPECT_EQ(h.get("x-A"), "1");
  EXPECT_EQ(h.get("none"), std::nullopt);
  EXPECT_EQ(h.count("X-a"), 2u);
  h.set("X-A", "3");
  EXPECT_EQ(h.count("x-a"), 1u);
  EXPECT_EQ(h.get("x-a"), "3");
  h.remove("host");
  ASSERT_EQ(h.fields.size(), 1u);
  EXPECT_EQ(h.fields[0].name, "X-A");
  EXPECT_TRUE(iequals("Content-Length", "content-LENGTH"));
  EXPECT_FALSE(iequals("Content-Length", "Content-Lengt"));
  EXPECT_FALSE(iequals("a", "b"));
}

}  // namespace
}  // namespace dpukit::mesh::http
