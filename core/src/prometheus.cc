#include "dpukit/core/prometheus.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "dpukit/core/log.h"

namespace dpukit {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// ---- exposition text ----

MetricValue::MetricValue(double v) {
  if (std::isnan(v)) {
    text_ = "NaN";
    nan_ = true;
  } else if (std::isinf(v)) {
    text_ = v > 0 ? "+Inf" : "-Inf";
    negative_ = v < 0;
  } else {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
    text_.assign(buf, end);
    negative_ = v < 0;
  }
}

namespace {

bool valid_metric_name(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Label names may not hold ':', and names starting with "__" are Prometheus's own.
bool valid_label_name(std::string_view s) {
  if (s.empty() || s.starts_with("__")) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// HELP text escapes backslash and newline; label values also the double quote.
std::string escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

}  // namespace

void MetricsWriter::counter(std::string_view name, std::string_view help, MetricValue value,
                            const MetricLabels& labels) {
  if (value.negative() || value.is_nan())
    throw std::invalid_argument("counter " + std::string(name) + " cannot be " + value.text());
  add("counter", name, help, value, labels);
}

void MetricsWriter::gauge(std::string_view name, std::string_view help, MetricValue value,
                          const MetricLabels& labels) {
  add("gauge", name, help, value, labels);
}

void MetricsWriter::add(const char* type, std::string_view name, std::string_view help, const MetricValue& value,
                        const MetricLabels& labels) {
  if (!valid_metric_name(name)) throw std::invalid_argument("not a Prometheus metric name: '" + std::string(name) + "'");
  std::vector<std::pair<std::string_view, std::string_view>> sorted;
  for (const auto& [k, v] : labels) {
    if (!valid_label_name(k))
      throw std::invalid_argument("metric " + std::string(name) + ": not a label name: '" + k + "'");
    sorted.emplace_back(k, v);
  }
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first)
      throw std::invalid_argument("metric " + std::string(name) + ": label '" + std::string(sorted[i].first) +
                                  "' given twice");

  auto it = index_.find(name);
  if (it == index_.end()) {
    it = index_.emplace(std::string(name), families_.size()).first;
    families_.push_back(Family{std::string(name), std::string(help), type, {}, {}});
  }
  Family& family = families_[it->second];
  if (std::string_view(family.type) != type)
    throw std::invalid_argument("metric " + family.name + " is a " + family.type + ", not a " + type);

  // The series identity: label set independent of the order it was given in.
  std::string series;
  for (const auto& [k, v] : sorted) {
    series += k;
    series += '\0';
    series += v;
    series += '\0';
  }
  if (!family.series.insert(std::move(series)).second)
    throw std::invalid_argument("metric " + family.name + ": the same label set given twice");

  std::string& line = family.samples;
  line += family.name;
  if (!labels.empty()) {
    line += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) line += ',';
      line += labels[i].first;
      line += "=\"";
      line += escape(labels[i].second, true);
      line += '"';
    }
    line += '}';
  }
  line += ' ';
  line += value.text();
  line += '\n';
}

std::string MetricsWriter::text() const {
  std::string out;
  for (const auto& f : families_) {
    if (!f.help.empty()) out += "# HELP " + f.name + " " + escape(f.help, false) + "\n";
    out += "# TYPE " + f.name + " " + f.type + "\n";
    out += f.samples;
  }
  return out;
}

// ---- the HTTP endpoint ----

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(30);
constexpr size_t kMaxConnections = 64;
// After refusing a request, read (and drop) what the client is still sending
// before closing: closing with unread input makes the kernel send a reset,
// which can destroy the error response before the client reads it.
constexpr size_t kDrainLimit = 1 << 20;
constexpr auto kDrainTimeout = std::chrono::seconds(5);
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

tcp::endpoint parse_bind(const std::string& bind, asio::io_context& ioc) {
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error("metrics endpoint '" + bind + "': " + why);
  };
  size_t colon = bind.rfind(':');
  if (colon == std::string::npos) throw fail("expected address:port (e.g. 127.0.0.1:9464 or :9464)");
  std::string host = bind.substr(0, colon);
  std::string port_text = bind.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535)
    throw fail("the port '" + port_text + "' is not a number from 0 to 65535");
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string::npos) throw fail("an IPv6 address goes in brackets: [::1]:9464");
  if (host.empty()) return tcp::endpoint(tcp::v4(), static_cast<uint16_t>(port));

  boost::system::error_code error;
  asio::ip::address address = asio::ip::make_address(host, error);
  if (!error) return tcp::endpoint(address, static_cast<uint16_t>(port));
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, port_text, error);
  if (error || results.empty()) throw fail("cannot resolve '" + host + "': " + error.message());
  return results.begin()->endpoint();
}

}  // namespace

struct MetricsEndpoint::Server {
  struct Connection;

  // Declared before the io_context: destroying it destroys the connections, which count themselves out.
  size_t connections = 0;  // touched only on the server thread
  std::atomic<uint64_t> scrapes{0};
  uint16_t port = 0;  // read by the owner's thread, so not asked of the acceptor the server thread uses
  std::function<std::string()> render;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  std::thread thread;

  void accept();
  void run();
};

struct MetricsEndpoint::Server::Connection : std::enable_shared_from_this<Connection> {
  Server& server;
  beast::tcp_stream stream;
  beast::flat_buffer buffer{kHeaderLimit + kBodyLimit};
  std::optional<http::request_parser<http::string_body>> parser;
  http::response<http::string_body> response;
  std::array<char, 16 * 1024> drain_buffer;
  size_t drained = 0;

  Connection(Server& s, tcp::socket socket) : server(s), stream(std::move(socket)) { ++server.connections; }
  ~Connection() { --server.connections; }

  void read_request() {
    parser.emplace();
    parser->header_limit(kHeaderLimit);
    parser->body_limit(kBodyLimit);
    stream.expires_after(kIdleTimeout);
    http::async_read(stream, buffer, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_request(ec);
    });
  }

  void on_request(beast::error_code ec) {
    if (!ec) {
      answer(parser->get());
    } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      refuse(http::status::request_header_fields_too_large, "request header too large\n");
    } else if (ec == http::error::body_limit) {
      refuse(http::status::payload_too_large, "request body too large\n");
    } else if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
               ec.category() != http::make_error_code(http::error::bad_target).category()) {
      close();  // the client went away, was idle too long, or the server is stopping
    } else {
      refuse(http::status::bad_request, "malformed request: " + ec.message() + "\n");
    }
  }

  void answer(const http::request<http::string_body>& request) {
    response = {};
    response.version(request.version());
    response.keep_alive(request.keep_alive());
    std::string_view target(request.target().data(), request.target().size());
    std::string_view path = target.substr(0, target.find('?'));
    bool head = request.method() == http::verb::head;
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    if (request.method() != http::verb::get && !head) {
      response.result(http::status::method_not_allowed);
      response.set(http::field::allow, "GET, HEAD");
      response.body() = "only GET and HEAD are served\n";
    } else if (path != "/metrics") {
      response.result(http::status::not_found);
      response.body() = "not found; metrics are at /metrics\n";
    } else {
      try {
        response.body() = server.render();
        response.result(http::status::ok);
        response.set(http::field::content_type, kContentType);
        server.scrapes.fetch_add(1, std::memory_order_relaxed);
      } catch (const std::exception& e) {
        response.result(http::status::internal_server_error);
        response.body() = std::string("rendering the metrics failed: ") + e.what() + "\n";
      }
    }
    response.prepare_payload();
    if (head) response.body().clear();  // Content-Length stays that of the GET answer
    write_response(false);
  }

  void refuse(http::status status, std::string text) {
    response = {};
    response.version(11);
    response.result(status);
    response.keep_alive(false);
    response.set(http::field::content_type, "text/plain; charset=utf-8");
    response.body() = std::move(text);
    response.prepare_payload();
    write_response(true);
  }

  void write_response(bool refused) {
    stream.expires_after(kIdleTimeout);
    http::async_write(stream, response, [self = shared_from_this(), refused](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (refused) return self->drain();
      if (self->response.keep_alive()) return self->read_request();
      self->close();
    });
  }

  // Half-close, then read until the client closes too (or enough was dropped).
  void drain() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream.expires_after(kDrainTimeout);
    drain_more();
  }
  void drain_more() {
    stream.async_read_some(asio::buffer(drain_buffer), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained += n;
      if (ec || self->drained >= kDrainLimit) return self->close();
      self->drain_more();
    });
  }

  void close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
  }
};

void MetricsEndpoint::Server::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors, most likely: wait a little instead of spinning on accept.
      log_warn("metrics endpoint: accept failed: " + ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    if (connections >= kMaxConnections) {
      boost::system::error_code ignored;
      socket.close(ignored);  // a scraper needs one connection; this many is a client gone wrong
    } else {
      std::make_shared<Connection>(*this, std::move(socket))->read_request();
    }
    accept();
  });
}

void MetricsEndpoint::Server::run() {
  // A handler that throws must not end the endpoint: report it and go on.
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      log_error(std::string("metrics endpoint: ") + e.what());
    }
  }
}

MetricsEndpoint::MetricsEndpoint(const std::string& bind, std::function<std::string()> render)
    : server_(std::make_unique<Server>()) {
  server_->render = std::move(render);
  tcp::endpoint endpoint = parse_bind(bind, server_->ioc);
  boost::system::error_code ec;
  auto& acceptor = server_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) server_->port = acceptor.local_endpoint(ec).port();
  if (ec) throw std::runtime_error("metrics endpoint '" + bind + "': cannot listen: " + ec.message());
  server_->accept();
  server_->thread = std::thread([s = server_.get()] { s->run(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  server_->ioc.stop();
  if (server_->thread.joinable()) server_->thread.join();
  // Destroying the io_context (with server_) destroys the pending handlers
  // and with them every connection.
}

uint16_t MetricsEndpoint::port() const { return server_->port; }

uint64_t MetricsEndpoint::scrapes() const { return server_->scrapes.load(std::memory_order_relaxed); }

}  // namespace dpukit
