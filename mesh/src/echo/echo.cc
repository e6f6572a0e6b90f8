// The echo service: the upstream of the mesh tests and benchmarks
// (dpukit-mesh echo). HTTP/1.1 with keep-alive and pipelining on Boost.Asio
// coroutines and Boost.Beast's parser; every request is answered with its
// name, and request headers change the answer (see answer_for()):
//
//   x-echo-status: NNN    answer with this status
//   x-echo-delay-ms: N    answer after N ms (a timer: the thread keeps serving)
//   x-echo-size: N        the body is exactly N bytes, streamed in pieces
//   x-echo-close: 1       answer, then close the connection
//   x-echo-pause-ms: N    write the head alone, then the body N ms later (as
//                         Python's http.server writes them apart)
//   x-echo-chunked: 1     the body in chunked framing, without Content-Length
//   x-echo-headers: a,b   echo request headers a and b as x-echo-req-a, x-echo-req-b
//
// Every answer carries x-served-by, x-echo-path (the request target as
// received) and x-echo-body-bytes / x-echo-body-hash (the byte count and
// CRC-32 of the request body, read streaming), so a test can check what a
// proxy sent upstream.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>  // before Asio: its awaitable.hpp (1.74) uses std::exchange without it

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/crc.hpp>
#include <charconv>
#include <limits>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/cli.h"
#include "dpukit/mesh.h"
#include "dpukit/mesh_attach.h"

namespace dpukit::mesh {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using unix_proto = asio::local::stream_protocol;

constexpr size_t kPiece = 64 * 1024;          // body bytes read or written per step
constexpr uint32_t kHeaderLimit = 256 * 1024;  // larger than any proxy lets through
constexpr uint64_t kMaxDelayMs = 600'000;

// 'x' bytes for streamed bodies: large answers are written from here piece by
// piece, never built whole.
const std::string& filler() {
  static const std::string x(kPiece, 'x');
  return x;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_u64(std::string_view s, uint64_t& out) {
  s = trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A request header's value, or "" when absent.
template <class Fields>
std::string_view field(const Fields& f, std::string_view name) {
  auto it = f.find(beast::string_view(name.data(), name.size()));
  if (it == f.end()) return {};
  auto v = it->value();
  return {v.data(), v.size()};
}

// What to send back, decided from the request head and the body's digest.
struct Answer {
  unsigned status = 200;
  std::string head;       // status line and header fields, up to and including the blank line
  std::string prefix;     // the first body bytes (the name line), sent with the head
  uint64_t filler_bytes = 0;  // 'x' bytes after the prefix, streamed
  uint64_t delay_ms = 0;
  uint64_t pause_ms = 0;  // between the head and the body
  bool chunked = false;
  bool keep_alive = true;
};

struct Digest {
  uint64_t bytes = 0;
  boost::crc_32_type crc;
};

template <class Request>
Answer answer_for(const EchoOptions& opt, const Request& req, const Digest& body) {
  Answer a;
  a.status = opt.status;
  std::string error;  // a malformed x-echo-* header is the client's fault: 400 naming it
  uint64_t n = 0;
  if (auto s = field(req, "x-echo-status"); !s.empty()) {
    if (parse_u64(s, n) && n >= 200 && n <= 599) a.status = static_cast<unsigned>(n);
    else error = "bad x-echo-status (200-599)";
  }
  if (auto s = field(req, "x-echo-delay-ms"); !s.empty()) {
    if (parse_u64(s, n) && n <= kMaxDelayMs) a.delay_ms = n;
    else error = "bad x-echo-delay-ms";
  }
  if (auto s = field(req, "x-echo-pause-ms"); !s.empty()) {
    if (parse_u64(s, n) && n <= kMaxDelayMs) a.pause_ms = n;
    else error = "bad x-echo-pause-ms";
  }
  a.chunked = trim(field(req, "x-echo-chunked")) == "1";
  a.prefix = opt.name + "\n";
  uint64_t total = a.prefix.size() + opt.body_bytes;
  if (auto s = field(req, "x-echo-size"); !s.empty()) {
    if (parse_u64(s, n)) total = n;
    else error = "bad x-echo-size";
  }
  a.keep_alive = req.keep_alive() && trim(field(req, "x-echo-close")) != "1";
  if (!error.empty()) {
    a.status = 400;
    a.delay_ms = a.pause_ms = 0;
    a.chunked = false;
    a.prefix = error + "\n";
    total = a.prefix.size();
  }
  // No body for HEAD, 204 and 304 (RFC 9110 §6.4.1); Content-Length still
  // tells a HEAD client what a GET would carry.
  bool no_body = req.method() == http::verb::head || a.status == 204 || a.status == 304;
  if (total < a.prefix.size()) a.prefix.resize(total);
  a.filler_bytes = total - a.prefix.size();
  if (no_body) {
    a.prefix.clear();
    a.filler_bytes = 0;
    a.chunked = false;
  }

  std::string& h = a.head;
  h.reserve(256);
  h += "HTTP/1.1 ";
  h += std::to_string(a.status);
  h += ' ';
  auto reason = http::obsolete_reason(static_cast<http::status>(a.status));
  h.append(reason.data(), reason.size());
  h += "\r\nx-served-by: ";
  h += opt.name;
  h += "\r\ncontent-type: text/plain\r\n";
  if (a.chunked) {
    h += "transfer-encoding: chunked\r\n";
  } else if (a.status != 204 && a.status != 304) {
    h += "content-length: ";
    h += std::to_string(total);
    h += "\r\n";
  }
  auto target = req.target();
  h += "x-echo-path: ";
  h.append(target.data(), target.size());
  h += "\r\nx-echo-method: ";
  auto method = req.method_string();
  h.append(method.data(), method.size());
  h += "\r\nx-echo-body-bytes: ";
  h += std::to_string(body.bytes);
  char hash[16];
  std::snprintf(hash, sizeof hash, "%08x", static_cast<unsigned>(body.crc.checksum()));
  h += "\r\nx-echo-body-hash: ";
  h += hash;
  h += "\r\n";
  // Echo the listed request headers (every occurrence, in order).
  std::string_view list = field(req, "x-echo-headers");
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string name = lower(trim(list.substr(0, comma)));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (name.empty()) continue;
    for (auto it = req.find(name); it != req.end() && beast::iequals(it->name_string(), name); ++it) {
      h += "x-echo-req-";
      h += name;
      h += ": ";
      h.append(it->value().data(), it->value().size());
      h += "\r\n";
    }
  }
  if (!a.keep_alive) h += "connection: close\r\n";
  else if (req.version() < 11) h += "connection: keep-alive\r\n";
  h += "\r\n";
  return a;
}

// An answer to a request that could not be parsed; the connection closes after it.
std::string error_answer(const EchoOptions& opt, unsigned status, std::string_view why) {
  std::string body = std::string(why) + "\n";
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) +
         "\r\nx-served-by: " + opt.name + "\r\ncontent-type: text/plain\r\ncontent-length: " +
         std::to_string(body.size()) + "\r\nconnection: close\r\n\r\n" + body;
}

template <class Socket>
void close_socket(Socket& s) {
  boost::system::error_code ec;
  s.shutdown(Socket::shutdown_both, ec);
  s.close(ec);
}
void close_socket(attach::ShmSocket& s) { s.close(); }

// x-echo-pause-ms / x-echo-chunked: the head in a write of its own, the
// pause, then the body (the prefix, then the filler piece by piece), each
// piece a chunk when chunked.
template <class Socket>
awaitable<void> write_apart(Socket& sock, const Answer& a, boost::system::error_code& ec) {
  auto redirect = asio::redirect_error(use_awaitable, ec);
  co_await asio::async_write(sock, asio::buffer(a.head), redirect);
  if (ec) co_return;
  if (a.pause_ms > 0) {
    asio::steady_timer timer(sock.get_executor(), std::chrono::milliseconds(a.pause_ms));
    co_await timer.async_wait(redirect);
    if (ec) co_return;
  }
  auto piece = [&](std::string_view bytes) -> awaitable<void> {
    if (bytes.empty()) co_return;
    if (!a.chunked) {
      co_await asio::async_write(sock, asio::buffer(bytes.data(), bytes.size()), redirect);
      co_return;
    }
    char size[20];
    int len = std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
    std::array<asio::const_buffer, 3> bufs{asio::buffer(size, static_cast<size_t>(len)),
                                           asio::buffer(bytes.data(), bytes.size()), asio::buffer("\r\n", 2)};
    co_await asio::async_write(sock, bufs, redirect);
  };
  co_await piece(a.prefix);
  for (uint64_t left = a.filler_bytes; !ec && left > 0;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(left, kPiece));
    co_await piece(std::string_view(filler().data(), n));
    left -= n;
  }
  if (!ec && a.chunked) co_await asio::async_write(sock, asio::buffer("0\r\n\r\n", 5), redirect);
}

// One connection: requests are read and answered in order (pipelined
// requests wait in `buf` until the answer before them is written).
template <class Socket>
awaitable<void> serve(Socket sock, const EchoOptions& opt) {
  beast::flat_buffer buf;
  std::vector<char> piece(kPiece);
  boost::system::error_code ec;
  auto redirect = asio::redirect_error(use_awaitable, ec);
  for (;;) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(kHeaderLimit);
    // Unlimited, but not as boost::none: Beast 1.74 compares a Content-Length
    // against an empty optional as "over the limit".
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    co_await http::async_read_header(sock, buf, parser, redirect);
    if (ec) {
      if (ec == http::error::header_limit) {
        co_await asio::async_write(sock, asio::buffer(error_answer(opt, 431, "header too large")), redirect);
      } else if (ec != http::error::end_of_stream && ec != asio::error::eof &&
                 ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
        co_await asio::async_write(sock, asio::buffer(error_answer(opt, 400, ec.message())), redirect);
      }
      break;
    }
    const auto& req = parser.get();
    if (lower(trim(field(req, "expect"))) == "100-continue") {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(sock, asio::buffer(kContinue.data(), kContinue.size()), redirect);
      if (ec) break;
    }
    // Stream the body through a fixed piece: count and hash it, keep nothing.
    Digest digest;
    while (!parser.is_done()) {
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      co_await http::async_read(sock, buf, parser, redirect);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      size_t got = piece.size() - parser.get().body().size;
      digest.bytes += got;
      digest.crc.process_bytes(piece.data(), got);
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != http::error::partial_message && ec != asio::error::eof &&
          ec != asio::error::connection_reset) {
        co_await asio::async_write(sock, asio::buffer(error_answer(opt, 400, ec.message())), redirect);
      }
      break;
    }
    Answer a = answer_for(opt, parser.get(), digest);
    if (a.delay_ms > 0) {
      asio::steady_timer timer(sock.get_executor(), std::chrono::milliseconds(a.delay_ms));
      co_await timer.async_wait(redirect);
    }
    if (a.pause_ms > 0 || a.chunked) {
      co_await write_apart(sock, a, ec);
      if (ec || !a.keep_alive) break;
      continue;
    }
    // Head and the start of the body in one write (one segment for small
    // answers), then the rest of the body piece by piece.
    uint64_t first = std::min<uint64_t>(a.filler_bytes, kPiece - std::min(kPiece, a.head.size()));
    std::array<asio::const_buffer, 3> bufs{asio::buffer(a.head), asio::buffer(a.prefix),
                                           asio::buffer(filler().data(), first)};
    co_await asio::async_write(sock, bufs, redirect);
    for (uint64_t left = a.filler_bytes - first; !ec && left > 0;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, kPiece));
      co_await asio::async_write(sock, asio::buffer(filler().data(), n), redirect);
      left -= n;
    }
    if (ec || !a.keep_alive) break;
  }
  close_socket(sock);
}

// A connection over shared-memory rings: the proxy's offer first, then HTTP
// as on any socket. A bad offer fails this connection only.
awaitable<void> serve_attached(attach::ShmSocket sock, const EchoOptions& opt) {
  boost::system::error_code ec;
  co_await sock.async_handshake(asio::redirect_error(use_awaitable, ec));
  if (ec) {
    std::fprintf(stderr, "dpukit-mesh echo: refused an attach: %s\n", ec.message().c_str());
    co_return;
  }
  co_await serve(std::move(sock), opt);
}

template <class Acceptor>
awaitable<void> accept_loop(Acceptor& acceptor, std::vector<asio::io_context*> loops, const EchoOptions& opt) {
  size_t next = 0;
  for (;;) {
    // Accepted connections are dealt round-robin to `loops` (every loop for
    // a unix socket; a TCP acceptor's own loop).
    auto& loop = *loops[next++ % loops.size()];
    boost::system::error_code ec;
    auto sock = co_await acceptor.async_accept(loop.get_executor(), asio::redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of descriptors or the like: back off rather than spin.
      std::fprintf(stderr, "dpukit-mesh echo: accept: %s\n", ec.message().c_str());
      asio::steady_timer t(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    if constexpr (std::is_same_v<Acceptor, attach::ShmAcceptor>) {
      asio::co_spawn(loop, serve_attached(std::move(sock), opt), asio::detached);
    } else {
      if constexpr (std::is_same_v<typename Acceptor::protocol_type, tcp>) sock.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(loop, serve(std::move(sock), opt), asio::detached);
    }
  }
}

struct Endpoint {
  bool is_unix = false;
  bool is_shm = false;  // attached over shared-memory rings; `path` is the attach point
  std::string path;  // unix, shm
  tcp::endpoint tcp_ep;
};

Endpoint parse_listen(const std::string& listen) {
  Endpoint e;
  if (listen.rfind("shm:", 0) == 0) {
    e.is_shm = true;
    e.path = listen.substr(4);
    if (e.path.empty()) throw InputError("--listen shm:PATH needs a path");
    return e;
  }
  if (listen.rfind("unix:", 0) == 0) {
    e.is_unix = true;
    e.path = listen.substr(5);
    if (e.path.empty()) throw InputError("--listen unix:PATH needs a path");
    return e;
  }
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size())
    throw InputError("--listen " + listen + ": expected HOST:PORT, unix:PATH or shm:PATH");
  std::string host = listen.substr(0, colon), port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "*") host = "0.0.0.0";
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(host, port, tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) throw InputError("--listen " + listen + ": cannot resolve: " + ec.message());
  e.tcp_ep = results.begin()->endpoint();
  return e;
}

using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

// Binds a TCP acceptor with SO_REUSEPORT, so that every loop accepts on the same port.
// With `probe`, binds without SO_REUSEPORT instead and is closed by the caller:
// SO_REUSEPORT would let us join another process's listener on the same port
// (same user) instead of failing, so the address is checked with a plain bind first.
std::unique_ptr<tcp::acceptor> bind_tcp(asio::io_context& io, const tcp::endpoint& ep, const std::string& listen,
                                        bool probe = false) {
  auto a = std::make_unique<tcp::acceptor>(io);
  boost::system::error_code ec;
  a->open(ep.protocol(), ec);
  if (!ec) a->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && !probe) a->set_option(reuse_port(true), ec);
  if (!ec) a->bind(ep, ec);
  if (!ec && !probe) a->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw InputError("cannot listen on " + listen + ": " + ec.message());
  return a;
}

// A socket file left by an earlier run would make bind fail: remove it,
// but never anything that is not a socket. A live one (something accepts on
// it) is another server's: refuse.
void refuse_live_socket(const std::string& path, const char* scheme) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) throw InputError(std::string("cannot listen on ") + scheme + path + ": not a socket");
  unix_proto::endpoint ep(path);
  for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {  // an echo's socket, or a shm attach point
    int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    bool live = fd >= 0 && ::connect(fd, ep.data(), static_cast<socklen_t>(ep.size())) == 0;
    if (fd >= 0) ::close(fd);
    if (live) throw InputError(std::string("cannot listen on ") + scheme + path + ": a server is listening there");
  }
  ::unlink(path.c_str());
}

std::unique_ptr<unix_proto::acceptor> bind_unix(asio::io_context& io, const std::string& path) {
  refuse_live_socket(path, "unix:");
  boost::system::error_code ec;
  ec = {};
  auto a = std::make_unique<unix_proto::acceptor>(io);
  a->open(unix_proto(), ec);
  if (!ec) a->bind(unix_proto::endpoint(path), ec);
  if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw InputError("cannot listen on unix:" + path + ": " + ec.message());
  return a;
}

}  // namespace

int run_echo(const EchoOptions& options) {
  const EchoOptions opt = options;
  if (opt.threads == 0) throw InputError("--threads must be at least 1");
  if (opt.status < 200 || opt.status > 599) throw InputError("--status must be 200-599");
  CpuSet cpus;
  if (!opt.cpus.empty()) {
    try {
      cpus = CpuSet::parse(opt.cpus);
    } catch (const std::invalid_argument& e) {
      throw InputError(std::string("--cpus: ") + e.what());
    }
  }
  Endpoint ep = parse_listen(opt.listen);

  // SIGINT/SIGTERM are taken by sigwait below; the loops never see them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<std::unique_ptr<asio::io_context>> loops;
  for (unsigned i = 0; i < opt.threads; ++i) loops.push_back(std::make_unique<asio::io_context>(1));

  // Bind everything before announcing: a bad address fails here (exit 2).
  std::vector<std::unique_ptr<tcp::acceptor>> tcp_acceptors;
  std::unique_ptr<unix_proto::acceptor> unix_acceptor;
  std::unique_ptr<attach::ShmAcceptor> shm_acceptor;
  std::string shown;
  if (ep.is_shm) {
    refuse_live_socket(ep.path, "shm:");
    try {
      shm_acceptor = std::make_unique<attach::ShmAcceptor>(loops[0]->get_executor(), ep.path);
    } catch (const std::exception& e) {
      throw InputError("cannot listen on shm:" + ep.path + ": " + e.what());
    }
    std::vector<asio::io_context*> all;
    for (auto& l : loops) all.push_back(l.get());
    asio::co_spawn(*loops[0], accept_loop(*shm_acceptor, std::move(all), opt), asio::detached);
    shown = "shm:" + ep.path;
  } else if (ep.is_unix) {
    unix_acceptor = bind_unix(*loops[0], ep.path);
    // One acceptor deals connections to every loop.
    std::vector<asio::io_context*> all;
    for (auto& l : loops) all.push_back(l.get());
    asio::co_spawn(*loops[0], accept_loop(*unix_acceptor, std::move(all), opt), asio::detached);
    shown = "unix:" + ep.path;
  } else {
    tcp::endpoint bound;
    {
      // Port 0: the probe chooses the port, the loops' acceptors join it.
      auto probe = bind_tcp(*loops[0], ep.tcp_ep, opt.listen, true);
      bound = probe->local_endpoint();
    }
    for (unsigned i = 0; i < opt.threads; ++i) tcp_acceptors.push_back(bind_tcp(*loops[i], bound, opt.listen));
    shown = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string()) +
            ":" + std::to_string(bound.port());
    // Each TCP loop serves what its own acceptor accepted: the kernel spreads
    // connections over the SO_REUSEPORT sockets.
    for (unsigned i = 0; i < opt.threads; ++i)
      asio::co_spawn(*loops[i], accept_loop(*tcp_acceptors[i], {loops[i].get()}, opt), asio::detached);
  }

  std::vector<std::thread> threads;
  std::atomic<bool> pin_warned{false};
  for (unsigned i = 0; i < opt.threads; ++i) {
    threads.emplace_back([&, i] {
      if (!cpus.empty()) {
        // Thread i on CPU i (mod the set): one loop per CPU when threads == CPUs.
        CpuSet one;
        one.cpus.push_back(cpus.cpus[i % cpus.cpus.size()]);
        std::string warning = pin_current_thread(one);
        if (!warning.empty() && !pin_warned.exchange(true))
          std::fprintf(stderr, "dpukit-mesh echo: %s\n", warning.c_str());
      }
      loops[i]->run();
    });
  }
  std::printf("echo %s listening on %s\n", opt.name.c_str(), shown.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  for (auto& l : loops) l->stop();
  for (auto& t : threads) t.join();
  tcp_acceptors.clear();
  unix_acceptor.reset();
  shm_acceptor.reset();  // removes its socket file
  if (ep.is_unix) ::unlink(ep.path.c_str());
  return 0;
}

}  // namespace dpukit::mesh
