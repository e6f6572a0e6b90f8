// The attach client library (dpukit/mesh_attach.h) as a service and the
// proxy use it: a test service on ShmAcceptor speaking HTTP through Beast,
// clients on ShmSocket, rings small enough to wrap and fill.
#include "dpukit/mesh_attach.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <random>
#include <thread>

namespace dpukit::mesh::attach {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;

std::string attach_path(const char* name) {
  return "/tmp/dpukit-attach-test-" + std::to_string(::getpid()) + "-" + name + ".sock";
}

// Runs `io` until `done` holds: an open ShmSocket always waits for its
// peer's hang-up, so io.run() would not return while one is open.
template <typename Done>
void run_until(asio::io_context& io, Done done) {
  io.restart();
  while (!done() && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  ASSERT_TRUE(done()) << "timed out";
}

// The test service: every request is answered with its body reversed.
struct TestService {
  asio::io_context io;
  ShmAcceptor acceptor;
  std::vector<std::shared_ptr<ShmSocket>> sockets;
  int refused = 0;
  explicit TestService(const std::string& path) : acceptor(io.get_executor(), path) { accept(); }
  void accept() {
    acceptor.async_accept([this](error_code ec, ShmSocket s) {
      if (ec) return;
      auto sock = std::make_shared<ShmSocket>(std::move(s));
      sockets.push_back(sock);
      sock->async_handshake([this, sock](error_code ec2) {
        if (ec2) {
          ++refused;
          return;
        }
        serve(sock);
      });
      accept();
    });
  }
  void serve(std::shared_ptr<ShmSocket> sock) {
    auto buf = std::make_shared<beast::flat_buffer>();
    auto parser = std::make_shared<bhttp::request_parser<bhttp::string_body>>();
    parser->body_limit(64 << 20);  // Beast's default (1 MiB) is below the largest test body
    bhttp::async_read(*sock, *buf, *parser, [this, sock, buf, parser](beast::error_code ec, size_t) {
      if (ec) {
        sock->close();
        return;
      }
      const auto& req = parser->get();
      auto res = std::make_shared<bhttp::response<bhttp::string_body>>(bhttp::status::ok, 11);
      res->body().assign(req.body().rbegin(), req.body().rend());
      res->set("x-target", req.target());
      res->prepare_payload();
      bhttp::async_write(*sock, *res, [this, sock, buf, res](beast::error_code ec2, size_t) {
        if (!ec2) serve(sock);
      });
    });
  }
};

TEST(Attach, AServiceOnTheClientLibraryAnswersHttpThroughSmallRings) {
  const std::string path = attach_path("http");
  TestService service(path);
  std::thread service_thread([&] { service.io.run_for(std::chrono::seconds(30)); });

  asio::io_context io;
  ShmSocket client(io.get_executor());
  error_code connect_ec = asio::error::would_block;
  client.async_connect(path, [&](error_code ec) { connect_ec = ec; }, ShmStreamConfig{4096});
  run_until(io, [&] { return connect_ec != asio::error::would_block; });
  ASSERT_FALSE(connect_ec) << connect_ec.message();
  ASSERT_TRUE(client.is_open());
  EXPECT_EQ(client.peer_pid(), ::getpid());

  std::mt19937 rng(7);
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{100000}, size_t{3} << 20}) {
    bhttp::request<bhttp::string_body> req(bhttp::verb::post, "/r" + std::to_string(size), 11);
    req.body().resize(size);
    for (auto& c : req.body()) c = static_cast<char>(rng());
    req.prepare_payload();
    bhttp::response<bhttp::string_body> res;
    beast::flat_buffer buf;
    beast::error_code ec = asio::error::would_block;
    bhttp::async_write(client, req, [&](beast::error_code e, size_t) {
      if (e) {
        ec = e;
        return;
      }
      bhttp::async_read(client, buf, res, [&](beast::error_code e2, size_t) { ec = e2; });
    });
    run_until(io, [&] { return ec != asio::error::would_block; });
    ASSERT_FALSE(ec) << size << ": " << ec.message();
    EXPECT_EQ(res.result_int(), 200u);
    EXPECT_EQ(res["x-target"], "/r" + std::to_string(size));
    std::string expect(req.body().rbegin(), req.body().rend());
    EXPECT_TRUE(res.body() == expect) << "body of " << size << " bytes differs";
  }
  client.close();
  service.io.stop();
  service_thread.join();
}

TEST(Attach, ADeadServiceIsAResetAndAnOrderlyCloseIsEof) {
  const std::string path = attach_path("death");
  // The child _exits without its listener's destructor, which would remove the attach point.
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() { ::unlink(path.c_str()); }
  } remove_at_end{path};
  for (bool orderly : {true, false}) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // A service that takes one connection, sends "partial", and then
      // closes in order or dies.
      ShmStreamListener listener(path);
      ShmStream s = listener.accept(std::chrono::seconds(10));
      s.write_all("partial", 7);
      if (orderly) s.close();
      ::_exit(0);
    }
    // Wait for the child's attach point.
    asio::io_context io;
    ShmSocket client(io.get_executor());
    error_code ec = asio::error::would_block;
    for (int i = 0; i < 200; ++i) {
      ec = asio::error::would_block;
      client = ShmSocket(io.get_executor());
      client.async_connect(path, [&](error_code e) { ec = e; });
      run_until(io, [&] { return ec != asio::error::would_block; });
      if (!ec) break;
      ::usleep(10 * 1000);
    }
    ASSERT_FALSE(ec) << ec.message();
    std::string got(64, '\0');
    size_t total = 0;
    error_code read_ec;
    bool read_done = false;
    std::function<void()> read_more = [&] {
      client.async_read_some(asio::buffer(got.data() + total, got.size() - total), [&](error_code e, size_t n) {
        total += n;
        read_ec = e;
        if (!e) read_more();
        else read_done = true;
      });
    };
    read_more();
    run_until(io, [&] { return read_done; });
    EXPECT_EQ(got.substr(0, total), "partial");
    if (orderly) EXPECT_EQ(read_ec, asio::error::eof) << read_ec.message();
    else EXPECT_EQ(read_ec, asio::error::connection_reset) << read_ec.message();
    // Writing to a service that is gone fails instead of filling the ring forever.
    std::string big(1 << 20, 'x');
    error_code write_ec = asio::error::would_block;
    asio::async_write(client, asio::buffer(big), [&](error_code e, size_t) { write_ec = e; });
    run_until(io, [&] { return write_ec != asio::error::would_block; });
    EXPECT_TRUE(write_ec) << "1 MiB written to a service that is gone";
    ::waitpid(child, nullptr, 0);
  }
}

TEST(Attach, ABadOfferFailsOneConnectionAndTheServiceGoesOn) {
  const std::string path = attach_path("bad");
  TestService service(path);
  // Something that is not the proxy: a plain message without descriptors.
  int raw = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  ASSERT_EQ(::connect(raw, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::send(raw, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
  for (int i = 0; i < 100 && service.refused == 0; ++i) service.io.run_for(std::chrono::milliseconds(10));
  EXPECT_EQ(service.refused, 1);
  char c;
  EXPECT_EQ(::recv(raw, &c, 1, 0), 0) << "the refused connection is closed";
  ::close(raw);
  // A real client still gets served.
  std::thread service_thread([&] { service.io.run_for(std::chrono::seconds(10)); });
  asio::io_context io;
  ShmSocket client(io.get_executor());
  bhttp::request<bhttp::string_body> req(bhttp::verb::post, "/after", 11);
  req.body() = "abc";
  req.prepare_payload();
  bhttp::response<bhttp::string_body> res;
  beast::flat_buffer buf;
  beast::error_code ec = asio::error::would_block;
  client.async_connect(path, [&](error_code e) {
    if (e) {
      ec = e;
      return;
    }
    bhttp::async_write(client, req, [&](beast::error_code e2, size_t) {
      if (e2) {
        ec = e2;
        return;
      }
      bhttp::async_read(client, buf, res, [&](beast::error_code e3, size_t) { ec = e3; });
    });
  });
  run_until(io, [&] { return ec != asio::error::would_block; });
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(res.body(), "cba");
  client.close();
  service.io.stop();
  service_thread.join();
}

TEST(Attach, ConnectingWhereNoServiceIsFails) {
  asio::io_context io;
  ShmSocket client(io.get_executor());
  error_code ec;
  client.async_connect(attach_path("nobody"), [&](error_code e) { ec = e; });
  io.run();
  EXPECT_TRUE(ec);
  EXPECT_FALSE(client.is_open());
}

}  // namespace
}  // namespace dpukit::mesh::attach
