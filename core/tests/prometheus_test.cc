#include "dpukit/core/prometheus.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cctype>
#include <memory>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace dpukit {
namespace {

// ---- a checker for the text exposition format, independent of the writer ----

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  std::string value;
};

// Parses `text` by the 0.0.4 grammar; every violation is a test failure.
std::vector<Sample> parse_exposition(const std::string& text) {
  std::vector<Sample> samples;
  if (text.empty()) return samples;
  EXPECT_EQ(text.back(), '\n') << "the last line must end with a newline";
  static const std::regex metric_name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex label_name("[a-zA-Z_][a-zA-Z0-9_]*");
  static const std::regex value_re("NaN|[+-]Inf|[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?");
  std::map<std::string, std::string> types;  // family -> TYPE
  std::set<std::string> helped, finished;    // families with HELP; families whose group has ended
  std::string current;                       // family of the group being read
  auto enter_family = [&](const std::string& name, const std::string& line) {
    if (name == current) return;
    EXPECT_FALSE(finished.count(name)) << "family " << name << " is split into two groups at: " << line;
    if (!current.empty()) finished.insert(current);
    current = name;
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    EXPECT_FALSE(line.empty()) << "empty line in the exposition";
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::smatch m;
      static const std::regex help_re("# HELP ([^ ]+) (.*)");
      static const std::regex type_re("# TYPE ([^ ]+) (counter|gauge|histogram|summary|untyped)");
      if (std::regex_match(line, m, help_re)) {
        EXPECT_TRUE(std::regex_match(m[1].str(), metric_name)) << line;
        EXPECT_TRUE(helped.insert(m[1]).second) << "second HELP: " << line;
        enter_family(m[1], line);
      } else if (line.starts_with("# TYPE")) {
        if (!std::regex_match(line, m, type_re)) {
          ADD_FAILURE() << "bad TYPE line: " << line;
          continue;
        }
        EXPECT_TRUE(types.emplace(m[1], m[2]).second) << "second TYPE: " << line;
        enter_family(m[1], line);
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    EXPECT_TRUE(std::regex_match(s.name, metric_name)) << line;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) {
          ADD_FAILURE() << "label without '=': " << line;
          return samples;
        }
        std::string key = line.substr(i, eq - i);
        EXPECT_TRUE(std::regex_match(key, label_name)) << "label name '" << key << "' in " << line;
        i = eq + 1;
        if (i >= line.size() || line[i] != '"') {
          ADD_FAILURE() << "label value not quoted: " << line;
          return samples;
        }
        ++i;
        std::string value;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            if (i >= line.size()) break;
            if (line[i] == 'n') value += '\n';
            else if (line[i] == '\\' || line[i] == '"') value += line[i];
            else ADD_FAILURE() << "unknown escape \\" << line[i] << " in " << line;
          } else {
            value += line[i];
          }
        }
        if (i >= line.size()) {
          ADD_FAILURE() << "unterminated label value: " << line;
          return samples;
        }
        ++i;  // closing quote
        EXPECT_TRUE(s.labels.emplace(key, value).second) << "label " << key << " twice: " << line;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) {
        ADD_FAILURE() << "no closing brace: " << line;
        return samples;
      }
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') {
      ADD_FAILURE() << "no value: " << line;
      return samples;
    }
    std::string rest = line.substr(i + 1);
    size_t space = rest.find(' ');
    s.value = rest.substr(0, space);
    EXPECT_TRUE(std::regex_match(s.value, value_re)) << "value '" << s.value << "' in " << line;
    if (space != std::string::npos) {
      EXPECT_TRUE(std::regex_match(rest.substr(space + 1), std::regex("-?[0-9]+"))) << "timestamp in " << line;
    }
    EXPECT_TRUE(types.count(s.name)) << "sample before its TYPE: " << line;
    enter_family(s.name, line);
    samples.push_back(std::move(s));
  }
  return samples;
}

// ---- MetricsWriter ----

TEST(MetricsWriter, WritesHelpAndTypeOncePerFamilyAndGroupsInterleavedSamples) {
  MetricsWriter w;
  w.counter("dpukit_packets_total", "Packets counted, by place.", uint64_t{10}, {{"place", "hw"}});
  w.gauge("dpukit_table_entries", "Entries in the hardware flow table.", 3);
  w.counter("dpukit_packets_total", "ignored: the first help stays", uint64_t{20}, {{"place", "dpu"}});
  std::string text = w.text();
  EXPECT_EQ(text,
            "# HELP dpukit_packets_total Packets counted, by place.\n"
            "# TYPE dpukit_packets_total counter\n"
            "dpukit_packets_total{place=\"hw\"} 10\n"
            "dpukit_packets_total{place=\"dpu\"} 20\n"
            "# HELP dpukit_table_entries Entries in the hardware flow table.\n"
            "# TYPE dpukit_table_entries gauge\n"
            "dpukit_table_entries 3\n");
  EXPECT_EQ(parse_exposition(text).size(), 3u);
}

TEST(MetricsWriter, EscapesLabelValuesAndHelpSoTheyReadBack) {
  MetricsWriter w;
  std::string nasty = "a\\b\"c\nd}e,f=g";
  w.gauge("dpukit_estimate", "line one\nback\\slash \"quotes\" stay", 1.5, {{"flow", nasty}, {"k", ""}});
  std::string text = w.text();
  EXPECT_NE(text.find("# HELP dpukit_estimate line one\\nback\\\\slash \"quotes\" stay\n"), std::string::npos) << text;
  auto samples = parse_exposition(text);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].labels.at("flow"), nasty);
  EXPECT_EQ(samples[0].labels.at("k"), "");
  EXPECT_EQ(samples[0].value, "1.5");
}

TEST(MetricsWriter, FormatsValuesExactly) {
  MetricsWriter w;
  w.counter("c_total", "", std::numeric_limits<uint64_t>::max(), {{"v", "max"}});
  w.gauge("g", "", std::numeric_limits<int64_t>::min(), {{"v", "min"}});
  w.gauge("g", "", 0.1, {{"v", "tenth"}});
  w.gauge("g", "", 1e300, {{"v", "big"}});
  w.gauge("g", "", 2.0, {{"v", "two"}});
  w.gauge("g", "", std::numeric_limits<double>::quiet_NaN(), {{"v", "nan"}});
  w.gauge("g", "", std::numeric_limits<double>::infinity(), {{"v", "inf"}});
  w.gauge("g", "", -std::numeric_limits<double>::infinity(), {{"v", "-inf"}});
  w.counter("c_total", "", std::numeric_limits<double>::infinity(), {{"v", "inf"}});
  std::map<std::string, std::string> got;
  for (const auto& s : parse_exposition(w.text())) got[s.name + "/" + s.labels.at("v")] = s.value;
  EXPECT_EQ(got["c_total/max"], "18446744073709551615");
  EXPECT_EQ(got["g/min"], "-9223372036854775808");
  EXPECT_EQ(got["g/tenth"], "0.1");
  EXPECT_EQ(std::stod(got["g/big"]), 1e300);
  EXPECT_EQ(got["g/two"], "2");
  EXPECT_EQ(got["g/nan"], "NaN");
  EXPECT_EQ(got["g/inf"], "+Inf");
  EXPECT_EQ(got["g/-inf"], "-Inf");
  EXPECT_EQ(got["c_total/inf"], "+Inf");
}

TEST(MetricsWriter, RefusesWhatPrometheusWouldReject) {
  MetricsWriter w;
  EXPECT_THROW(w.gauge("0starts_with_digit", "", 1), std::invalid_argument);
  EXPECT_THROW(w.gauge("has-dash", "", 1), std::invalid_argument);
  EXPECT_THROW(w.gauge("", "", 1), std::invalid_argument);
  EXPECT_THROW(w.gauge("g", "", 1, {{"bad:label", "x"}}), std::invalid_argument);
  EXPECT_THROW(w.gauge("g", "", 1, {{"__reserved", "x"}}), std::invalid_argument);
  EXPECT_THROW(w.gauge("g", "", 1, {{"a", "x"}, {"a", "y"}}), std::invalid_argument);
  EXPECT_THROW(w.counter("c_total", "", -1), std::invalid_argument);
  EXPECT_THROW(w.counter("c_total", "", -0.5), std::invalid_argument);
  EXPECT_THROW(w.counter("c_total", "", std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);

  w.gauge("g", "", 1, {{"a", "1"}, {"b", "2"}});
  EXPECT_THROW(w.gauge("g", "", 2, {{"b", "2"}, {"a", "1"}}), std::invalid_argument);  // same series, other order
  EXPECT_THROW(w.counter("g", "", 2, {{"a", "9"}}), std::invalid_argument);            // gauge, then counter
  w.gauge("g", "", 3, {{"a", "1"}, {"b", "3"}});                                      // another series is fine
  w.gauge("colon:ok_name", "", 1);
  EXPECT_EQ(parse_exposition(w.text()).size(), 3u);
}

TEST(MetricsWriter, EmptyWriterGivesEmptyText) { EXPECT_EQ(MetricsWriter().text(), ""); }

// ---- MetricsEndpoint over a plain TCP socket ----

struct HttpAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    // A guard against a hang, not a measurement: no answer in this long is a failure.
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
  }
  ~Client() { ::close(fd_); }

  // Sends all of `bytes`; false when the server closed before taking them all.
  bool send_all(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // True when the server closed the connection without answering (a reset
  // counts: a connection the server had not accepted yet is reset).
  bool closed_without_answer() {
    char buf[256];
    ssize_t n;
    do n = ::recv(fd_, buf, sizeof buf, 0);
    while (n < 0 && errno == EINTR);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  // Everything until the server closes the connection.
  std::string read_to_end() {
    std::string out;
    char buf[16384];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
      if (n == 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
};

// Splits a byte stream of HTTP/1.1 responses (each with Content-Length).
std::vector<HttpAnswer> parse_answers(const std::string& bytes, bool head = false) {
  std::vector<HttpAnswer> answers;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t header_end = bytes.find("\r\n\r\n", pos);
    if (header_end == std::string::npos) {
      ADD_FAILURE() << "truncated response header: " << bytes.substr(pos, 200);
      break;
    }
    HttpAnswer a;
    std::string head_text = bytes.substr(pos, header_end - pos);
    size_t line_end = head_text.find("\r\n");
    std::string status_line = head_text.substr(0, line_end);
    std::smatch m;
    static const std::regex status_re("HTTP/1\\.[01] ([0-9]{3}) .*");
    if (!std::regex_match(status_line, m, status_re)) {
      ADD_FAILURE() << "bad status line: " << status_line;
      break;
    }
    a.status = std::stoi(m[1]);
    size_t p = line_end == std::string::npos ? head_text.size() : line_end + 2;
    while (p < head_text.size()) {
      size_t e = head_text.find("\r\n", p);
      if (e == std::string::npos) e = head_text.size();
      std::string field = head_text.substr(p, e - p);
      size_t colon = field.find(':');
      std::string name = field.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = field.find_first_not_of(' ', colon + 1);
      a.headers[name] = v == std::string::npos ? "" : field.substr(v);
      p = e + 2;
    }
    size_t length = a.headers.count("content-length") ? std::stoul(a.headers["content-length"]) : 0;
    size_t body_start = header_end + 4;
    if (head) length = 0;
    if (body_start + length > bytes.size()) {
      ADD_FAILURE() << "body shorter than Content-Length " << length;
      break;
    }
    a.body = bytes.substr(body_start, length);
    answers.push_back(std::move(a));
    pos = body_start + length;
  }
  return answers;
}

HttpAnswer request(uint16_t port, const std::string& method, const std::string& target) {
  Client c(port);
  EXPECT_TRUE(c.send_all(method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  auto answers = parse_answers(c.read_to_end(), method == "HEAD");
  if (answers.size() != 1) {
    ADD_FAILURE() << method << " " << target << ": " << answers.size() << " answers";
    return {};
  }
  return answers[0];
}

std::string example_metrics() {
  MetricsWriter w;
  w.counter("dpukit_packets_total", "Packets counted, by place.", uint64_t{123456789012345}, {{"place", "hw"}});
  w.counter("dpukit_packets_total", "Packets counted, by place.", 42, {{"place", "dpu"}});
  w.gauge("dpukit_hw_table_entries", "Entries in the hardware flow table.", 17);
  w.gauge("dpukit_topk_estimate_packets", "Estimated packets of a heavy flow.", 99.5,
          {{"flow", "10.0.0.1:53->10.0.0.2:1234/17"}, {"rank", "1"}});
  return w.text();
}

TEST(MetricsEndpoint, ServesMetricsThatParseByTheExpositionGrammar) {
  std::string text = example_metrics();
  MetricsEndpoint endpoint("127.0.0.1:0", [&] { return text; });
  ASSERT_NE(endpoint.port(), 0);
  HttpAnswer a = request(endpoint.port(), "GET", "/metrics");
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.headers["content-type"].starts_with("text/plain; version=0.0.4")) << a.headers["content-type"];
  EXPECT_EQ(a.body, text);
  auto samples = parse_exposition(a.body);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].value, "123456789012345");
  EXPECT_EQ(samples[3].labels["flow"], "10.0.0.1:53->10.0.0.2:1234/17");
  EXPECT_EQ(endpoint.scrapes(), 1u);

  // A query string (Prometheus may add one) still reaches /metrics; HEAD gives the headers only.
  EXPECT_EQ(request(endpoint.port(), "GET", "/metrics?name[]=x").status, 200);
  HttpAnswer head = request(endpoint.port(), "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-length"], std::to_string(text.size()));
  EXPECT_EQ(head.body, "");
}

TEST(MetricsEndpoint, RendersAfreshOnEveryScrape) {
  int scrape = 0;
  MetricsEndpoint endpoint("127.0.0.1:0", [&] {
    MetricsWriter w;
    w.counter("scrapes_total", "", ++scrape);
    return w.text();
  });
  EXPECT_EQ(request(endpoint.port(), "GET", "/metrics").body, "# TYPE scrapes_total counter\nscrapes_total 1\n");
  EXPECT_EQ(request(endpoint.port(), "GET", "/metrics").body, "# TYPE scrapes_total counter\nscrapes_total 2\n");
}

TEST(MetricsEndpoint, AnswersOtherPathsAndMethodsWithErrors) {
  MetricsEndpoint endpoint("127.0.0.1:0", [] { return std::string("x 1\n"); });
  EXPECT_EQ(request(endpoint.port(), "GET", "/other").status, 404);
  EXPECT_EQ(request(endpoint.port(), "GET", "/").status, 404);
  EXPECT_EQ(request(endpoint.port(), "GET", "/metricsx").status, 404);
  HttpAnswer post = request(endpoint.port(), "POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["allow"], "GET, HEAD");
  EXPECT_EQ(request(endpoint.port(), "DELETE", "/metrics").status, 405);
  EXPECT_EQ(endpoint.scrapes(), 0u);
}

TEST(MetricsEndpoint, KeepsAConnectionOpenForSeveralRequests) {
  MetricsEndpoint endpoint("127.0.0.1:0", [] { return std::string("# TYPE x gauge\nx 1\n"); });
  Client c(endpoint.port());
  // Pipelined: the server answers in order and closes after the one that asks it to.
  ASSERT_TRUE(c.send_all("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
                         "GET /nope HTTP/1.1\r\nHost: a\r\n\r\n"
                         "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"));
  auto answers = parse_answers(c.read_to_end());
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[0].status, 200);
  EXPECT_EQ(answers[1].status, 404);
  EXPECT_EQ(answers[2].status, 200);
  EXPECT_EQ(answers[2].body, "# TYPE x gauge\nx 1\n");
  EXPECT_EQ(endpoint.scrapes(), 2u);
}

TEST(MetricsEndpoint, RefusesAnOversizedHeaderAndStaysUp) {
  MetricsEndpoint endpoint("127.0.0.1:0", [] { return std::string("# TYPE x gauge\nx 1\n"); });
  {
    Client c(endpoint.port());
    std::string huge(100 * 1024, 'a');
    // The server may answer and close before all of it is sent; what it answers is what counts.
    c.send_all("GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: " + huge + "\r\n\r\n");
    auto answers = parse_answers(c.read_to_end());
    ASSERT_EQ(answers.size(), 1u);
    EXPECT_EQ(answers[0].status, 431);
  }
  {
    Client c(endpoint.port());
    c.send_all("GET /metrics HTTP/1.1\r\nHost: a\r\nX-Pad: " + std::string(100 * 1024, 'b') + "\r\n\r\n");
    c.read_to_end();
  }
  HttpAnswer a = request(endpoint.port(), "GET", "/metrics");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "# TYPE x gauge\nx 1\n");
}

TEST(MetricsEndpoint, RefusesAnOversizedBodyAndMalformedRequests) {
  MetricsEndpoint endpoint("127.0.0.1:0", [] { return std::string("# TYPE x gauge\nx 1\n"); });
  {
    Client c(endpoint.port());
    std::string body(100 * 1024, 'z');
    c.send_all("GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    auto answers = parse_answers(c.read_to_end());
    ASSERT_EQ(answers.size(), 1u);
    EXPECT_EQ(answers[0].status, 413);
  }
  {
    Client c(endpoint.port());
    c.send_all("THIS IS NOT HTTP\r\n\r\n");
    auto answers = parse_answers(c.read_to_end());
    ASSERT_EQ(answers.size(), 1u);
    EXPECT_EQ(answers[0].status, 400);
  }
  EXPECT_EQ(request(endpoint.port(), "GET", "/metrics").status, 200);
}

TEST(MetricsEndpoint, ARenderThatThrowsGives500AndTheServerStaysUp) {
  std::atomic<bool> fail{true};
  MetricsEndpoint endpoint("127.0.0.1:0", [&]() -> std::string {
    if (fail) throw std::runtime_error("sketch not ready");
    return "# TYPE x gauge\nx 1\n";
  });
  HttpAnswer a = request(endpoint.port(), "GET", "/metrics");
  EXPECT_EQ(a.status, 500);
  EXPECT_NE(a.body.find("sketch not ready"), std::string::npos) << a.body;
  fail = false;
  EXPECT_EQ(request(endpoint.port(), "GET", "/metrics").status, 200);
}

TEST(MetricsEndpoint, BadBindAddressesAreClearErrors) {
  auto message = [](const std::string& bind) -> std::string {
    try {
      MetricsEndpoint e(bind, [] { return std::string(); });
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  };
  for (std::string bind : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:12x", "::1:9464",
                           "192.0.2.1:0" /* TEST-NET-1: not an address of this machine */}) {
    std::string m = message(bind);
    EXPECT_NE(m.find("'" + bind + "'"), std::string::npos) << bind << " -> " << m;
  }
  // A port already taken.
  MetricsEndpoint first("127.0.0.1:0", [] { return std::string(); });
  std::string taken = "127.0.0.1:" + std::to_string(first.port());
  EXPECT_NE(message(taken).find("'" + taken + "'"), std::string::npos) << message(taken);
}

TEST(MetricsEndpoint, StopsWithAConnectionStillOpen) {
  auto endpoint = std::make_unique<MetricsEndpoint>("127.0.0.1:0", [] { return std::string(); });
  Client idle(endpoint->port());
  ASSERT_TRUE(idle.send_all("GET /metr"));  // half a request
  endpoint.reset();                         // must not wait for the client
  EXPECT_TRUE(idle.closed_without_answer());
}

}  // namespace
}  // namespace dpukit
