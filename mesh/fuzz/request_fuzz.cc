// Fuzz target for the request path: the parser processing module
// (RequestParser) and, for every request it accepts, the deparser.
//
// Input: the first byte selects the limits (low 2 bits) and seeds the split
// points; the rest is what a client sends on one connection. The bytes are
// parsed whole and again in small pieces the way the data plane feeds them
// (unconsumed bytes are kept and fed again with more; reset() after each
// message). Invariants:
//  - feed() never consumes more than it is given, and returns 0 once the
//    message is done or failed; a failure is sticky until reset();
//  - events come in order (one on_head, on_body only after it, one
//    on_complete), body data is non-empty and points into the fed bytes (no
//    copy), a completed Content-Length message delivered exactly that many;
//  - an accepted head obeys the rules (version, one Host in HTTP/1.1, never
//    both Content-Length and chunked, the limits);
//  - split or whole, the same messages with the same bodies (but for where
//    the split run may wait longer, or reach a limit first);
//  - the deparser's head and body framing parse back to the same request.
// Built with clang's libFuzzer by scripts/fuzz-mesh.sh; built with GCC into
// mesh_fuzz_seeds (core/fuzz/run_seeds.cc), which runs the corpus as a test.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "dpukit/core/random.h"
#include "http/http1.h"

namespace {

using namespace dpukit::mesh::http;

void check(bool ok) {
  if (!ok) std::abort();
}

Limits limits_for(uint8_t selector) {
  switch (selector & 3) {
    case 0:
      return Limits{};
    case 1:
      return Limits{.max_headers_count = 4, .max_header_bytes = 256, .max_request_line = 64, .max_body_bytes = 100};
    case 2:  // the head limit binds before the request-line limit
      return Limits{.max_headers_count = 100, .max_header_bytes = 128, .max_request_line = 200, .max_body_bytes = 0};
    default:
      return Limits{.max_headers_count = 1, .max_header_bytes = 1024, .max_request_line = 24, .max_body_bytes = 1};
  }
}

constexpr Limits kRoomy{.max_headers_count = 1000, .max_header_bytes = 1 << 20, .max_request_line = 1 << 20,
                        .max_body_bytes = 0};

bool has_ctl(std::string_view s) {
  for (char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return true;
  }
  return false;
}

// What the deparser's output parses back to.
struct Reparsed : RequestEvents {
  bool head = false, complete = false;
  RequestHead h;
  std::string body;
  void on_head(RequestHead& head_in) override {
    head = true;
    h = head_in;
  }
  void on_body(std::string_view data) override { body.append(data); }
  void on_complete() override { complete = true; }
};

struct Message {
  uint64_t body = 0;
  bool complete = false;
  bool operator==(const Message&) const = default;
};

// Records one connection's events and checks each as it comes.
struct Recorder : RequestEvents {
  explicit Recorder(const Limits& l) : limits(l) {}

  Limits limits;
  std::string_view fed;  // the bytes of the current feed() call
  std::vector<Message> messages;
  std::optional<uint64_t> content_length;
  std::string wire;  // the deparser's output for the current message
  BodyEncoder encoder;
  uint64_t events = 0;
  int state = 0;  // 0: before the head, 1: in the body, 2: complete

  void start() {
    state = 0;
    messages.push_back({});
  }

  void on_head(RequestHead& h) override {
    ++events;
    check(state == 0);
    state = 1;
    content_length = h.content_length;
    check(h.version == 10 || h.version == 11);
    check(!(h.content_length && h.chunked));
    check(!h.chunked || h.version == 11);
    check(h.headers.fields.size() <= limits.max_headers_count);
    check(h.headers.count("host") <= 1);
    check(h.version == 10 || h.headers.count("host") == 1);
    check(h.method.size() + h.target.size() + 10 <= limits.max_request_line);
    check(!h.method.empty() && !h.target.empty());
    if (limits.max_body_bytes != 0 && h.content_length) check(*h.content_length <= limits.max_body_bytes);
    for (const Header& f : h.headers.fields) check(!f.name.empty() && !has_ctl(f.name) && !has_ctl(f.value));

    wire.clear();
    write_request_head(h, wire);
    encoder = request_body_encoder(h);
    // The head alone parses back to the same request.
    RequestParser again(kRoomy);
    Reparsed r;
    size_t n = again.feed(wire, r);
    check(!again.failure() && r.head && n == wire.size());
    check(r.h.method == h.method && r.h.path == h.path && r.h.host == h.host && r.h.version == 11);
    check(r.h.headers.count("host") == 1 && r.h.headers.count("connection") == 0 &&
          r.h.headers.count("upgrade") == 0);
    if (h.content_length) {
      check(r.h.content_length == h.content_length && !r.h.chunked);
    } else if (h.chunked) {
      check(r.h.chunked && !r.h.content_length);
    } else {
      bool says_empty = h.method == "POST" || h.method == "PUT" || h.method == "PATCH";
      check(r.h.content_length == (says_empty ? std::optional<uint64_t>(0) : std::nullopt) && !r.h.chunked);
      check(r.complete);
    }
  }

  void on_body(std::string_view data) override {
    ++events;
    check(state == 1 && !data.empty());
    check(data.data() >= fed.data() && data.data() + data.size() <= fed.data() + fed.size());
    messages.back().body += data.size();
    if (content_length) check(messages.back().body <= *content_length);
    if (limits.max_body_bytes != 0) check(messages.back().body <= limits.max_body_bytes);
    encoder.data(data, wire);
  }

  void on_complete() override {
    ++events;
    check(state == 1);
    state = 2;
    messages.back().complete = true;
    if (content_length) check(messages.back().body == *content_length);
    // Head and body framing parse back to a complete message with the body.
    encoder.end(wire);
    RequestParser again(kRoomy);
    Reparsed r;
    check(again.feed(wire, r) == wire.size() && r.complete && r.body.size() == messages.back().body);
  }
};

struct Outcome {
  std::vector<Message> messages;
  std::optional<ParseFailure> failure;
};

// Feeds `stream` in pieces whose sizes `next_piece` chooses, the way the data
// plane does; stops at the first failure.
template <typename NextPiece>
Outcome run(std::string_view stream, const Limits& limits, NextPiece next_piece) {
  RequestParser parser(limits);
  Recorder rec(limits);
  rec.start();
  std::string pending;
  size_t offered = 0;
  while (true) {
    if (offered < stream.size()) {
      size_t piece = std::min(next_piece(), stream.size() - offered);
      pending.append(stream.substr(offered, piece));
      offered += piece;
    }
    // Feed until no progress: several pipelined messages may be pending.
    while (!pending.empty()) {
      rec.fed = pending;
      uint64_t events_before = rec.events;
      size_t n = parser.feed(pending, rec);
      check(n <= pending.size());
      if (parser.failure()) {
        check(n == 0);
        // Sticky: no progress and no events until reset().
        ParseFailure f = *parser.failure();
        uint64_t events_after = rec.events;
        check(parser.feed(pending, rec) == 0 && rec.events == events_after);
        check(parser.failure() && parser.failure()->status == f.status && !parser.done());
        check(f.status == 400 || f.status == 413 || f.status == 414 || f.status == 431 || f.status == 501 ||
              f.status == 505);
        check(!f.reason.empty());
        parser.reset();
        check(!parser.failure() && !parser.done() && !parser.in_message());
        return {std::move(rec.messages), f};
      }
      pending.erase(0, n);
      if (parser.done()) {
        check(rec.state == 2 && !parser.in_message());
        check(parser.feed(pending, rec) == 0);
        parser.reset();
        rec.start();
        continue;
      }
      check(rec.state != 2);
      if (n == 0) {
        check(rec.events == events_before);
        break;
      }
    }
    if (offered == stream.size()) break;
  }
  bool was_in_message = parser.in_message();
  parser.finish(rec);
  check(was_in_message == parser.failure().has_value());
  check(!parser.failure() || parser.failure()->status == 400);
  return {std::move(rec.messages), std::nullopt};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Limits limits = limits_for(data[0]);
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);

  Outcome whole = run(stream, limits, [&] { return stream.size(); });
  dpukit::SplitMix64 rng(data[0] * 0x9e3779b97f4a7c15ull + size);
  const uint64_t max_piece = 1 + (data[0] >> 2) % 16;
  Outcome split = run(stream, limits, [&] { return 1 + rng.below(max_piece); });

  // The same messages however the bytes arrive. Only a failed message may
  // differ: Beast waits for the end of a head it saw in pieces before
  // checking it, so the split run may still wait, or hit a limit first, where
  // the whole run failed at once. And the chunk-line and trailer bound is on
  // the bytes the caller must hold: a long chunk line that arrives at once
  // passes where, trickling in, it fails.
  if (split.failure && split.failure->reason == "chunk line or trailer section larger than max_header_bytes") {
    check(split.messages.size() <= whole.messages.size());
    for (size_t i = 0; i + 1 < split.messages.size(); ++i) check(split.messages[i] == whole.messages[i]);
    return 0;
  }
  check(split.messages.size() == whole.messages.size());
  for (size_t i = 0; i + 1 < whole.messages.size(); ++i) check(split.messages[i] == whole.messages[i]);
  if (!whole.failure) {
    check(!split.failure && split.messages.back() == whole.messages.back());
  } else if (split.failure) {
    auto limit = [](unsigned s) { return s == 414 || s == 431; };
    check(split.failure->status == whole.failure->status || limit(split.failure->status) ||
          limit(whole.failure->status));
  }
  return 0;
}
