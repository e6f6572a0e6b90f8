// Metrics in Prometheus's text exposition format (version 0.0.4) and an HTTP
// endpoint that serves them at /metrics, so the Prometheus server an operator
// already runs can scrape any dpukit system (docs/architecture.md §6). Nothing
// here knows what the metrics mean: each system renders its own.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpukit {

// Label name/value pairs of one sample, printed in the order given.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// One sample value as the exposition prints it. Integers are printed exactly
// (a 64-bit counter above 2^53 would lose digits as a double); floating
// point in the shortest text that reads back to the same double, and NaN,
// +Inf, -Inf as Prometheus spells them.
class MetricValue {
 public:
  template <std::integral T>
  MetricValue(T v) : MetricValue(integer_tag{}, static_cast<long double>(v), std::to_string(v)) {}
  template <std::floating_point T>
  MetricValue(T v) : MetricValue(static_cast<double>(v)) {}
  MetricValue(double v);

  const std::string& text() const { return text_; }
  bool negative() const { return negative_; }
  bool is_nan() const { return nan_; }

 private:
  struct integer_tag {};
  MetricValue(integer_tag, long double v, std::string text) : text_(std::move(text)), negative_(v < 0) {}
  std::string text_;
  bool negative_ = false;
  bool nan_ = false;
};

// Builds one exposition. The format wants all lines of a metric family
// together, its HELP and TYPE once before the first sample; the writer keeps
// families in the order they were first seen and groups their samples, so a
// caller may add samples in any order. Misuse that would give Prometheus a
// text it rejects (a bad metric or label name, one name as both counter and
// gauge, the same series twice, a negative or NaN counter) throws
// std::invalid_argument.
class MetricsWriter {
 public:
  // A value that only goes up (packets, drops). By convention its name ends in _total.
  void counter(std::string_view name, std::string_view help, MetricValue value, const MetricLabels& labels = {});
  // A value that goes up and down (table entries, an estimate).
  void gauge(std::string_view name, std::string_view help, MetricValue value, const MetricLabels& labels = {});

  std::string text() const;  // empty when nothing was added

 private:
  struct Family {
    std::string name;
    std::string help;
    const char* type;
    std::string samples;              // finished sample lines
    std::set<std::string> series;     // label sets already present, sorted by label name
  };
  void add(const char* type, std::string_view name, std::string_view help, const MetricValue& value,
           const MetricLabels& labels);

  std::vector<Family> families_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> families_ position
};

// HTTP/1.1 server for Prometheus scrapes, on a thread of its own.
//
// GET (or HEAD) /metrics answers 200 with render()'s text as
// "text/plain; version=0.0.4; charset=utf-8"; another path is 404, another
// method 405. A request whose header passes 16 KiB is refused with 431, a
// body over 16 KiB with 413, a malformed one with 400; the connection is then
// closed and the server goes on serving others. render() throwing answers
// 500 with its message. Connections idle for 30 s are closed.
class MetricsEndpoint {
 public:
  // `bind` is "address:port": "127.0.0.1:9464", "[::1]:9464", "localhost:9464",
  // or ":9464" for every IPv4 interface; port 0 takes a free port (see port()).
  // render() runs on the endpoint's thread, once per scrape, so what it reads
  // must be safe to read from there (atomics, or under the owner's lock).
  // Throws std::runtime_error naming `bind` when it is malformed or cannot be bound.
  MetricsEndpoint(const std::string& bind, std::function<std::string()> render);
  ~MetricsEndpoint();  // stops listening, closes every connection, joins the thread
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  uint16_t port() const;        // the bound port (the one picked when asked for 0)
  uint64_t scrapes() const;     // /metrics requests answered with 200

  static constexpr size_t kHeaderLimit = 16 * 1024;
  static constexpr size_t kBodyLimit = 16 * 1024;

 private:
  struct Server;
  std::unique_ptr<Server> server_;
};

}  // namespace dpukit
