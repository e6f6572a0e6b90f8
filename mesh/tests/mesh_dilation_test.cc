// The proxy's loops at a dpu's speed (dataplane/loop_dilation.h): a reply's
// bytes leave only after the work they depend on is paid for, whichever
// stream carries them; the control plane's loop is dilated too; at host speed
// the loops run Asio's plain run() and nothing is dilated.
//
// No timing thresholds: each check is an ordering (what the loop had paid
// when the peer got the bytes) or a count.
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "config/bootstrap.h"
#include "control/control_plane.h"
#include "dataplane/downstream_stream.h"
#include "dataplane/loop_dilation.h"
#include "dataplane/service_stream.h"
#include "dataplane/worker.h"
#include "dpukit/core/accounting.h"
#include "admin_client.h"
#include "tls_test_pki.h"

namespace dpukit::mesh {
namespace {

using testing::Pki;

constexpr double kFactor = 0.25;                    // 3 ns of busy time added per ns of work
constexpr uint64_t kBurnNs = 2'000'000;             // the reply's own work, in thread CPU time
const std::string kReply = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

// Burns at least kBurnNs of the calling thread's CPU; returns how much.
uint64_t burn() {
  const uint64_t t0 = thread_cpu_ns();
  volatile uint64_t x = 0;
  while (thread_cpu_ns() - t0 < kBurnNs)
    for (int i = 0; i < 1000; ++i) x = x + i;
  return thread_cpu_ns() - t0;
}

// A loop as a worker runs it (run_loop at kFactor) on a thread of its own.
class Loop {
 public:
  Loop() : dilation_(DpuSpeed::parse(std::to_string(kFactor)), counters_) {}
  ~Loop() { stop(); }
  void start() {
    guard_.emplace(io_.get_executor());
    thread_ = std::thread([this] { run_loop(io_, dilation_, "test loop"); });
  }
  void stop() {
    guard_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  asio::io_context& io() { return io_; }
  const DilationCounters& counters() const { return counters_; }

  // Runs a handler on the loop that burns CPU and then issues `write` (the
  // reply). The peer's `receive` returns once the reply's bytes arrived; what
  // the loop had dilated by then is read, and only then may the handler
  // return, so the batch's own payment at its end cannot have come first.
  // Returns {busy time paid between the handler's start and the reply's
  // arrival, the handler's work}.
  std::pair<uint64_t, uint64_t> reply(std::function<void()> write, std::function<void()> receive) {
    std::promise<void> sampled;
    std::shared_future<void> sampled_f = sampled.get_future().share();
    std::atomic<uint64_t> before{0}, work{0};
    std::promise<void> started;
    asio::post(io_, [&, sampled_f] {
      before = counters_.dilated_ns.load(std::memory_order_acquire);
      work = burn();
      write();
      started.set_value();
      sampled_f.wait();
    });
    receive();
    const uint64_t paid = counters_.dilated_ns.load(std::memory_order_acquire);
    started.get_future().wait();  // `before` and `work` are set
    sampled.set_value();
    return {paid - before.load(), work.load()};
  }

 private:
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  DilationCounters counters_;
  LoopDilation dilation_;
  std::thread thread_;
};

// Reads exactly kReply.size() bytes from a blocking descriptor.
void read_reply(int fd) {
  std::string got(kReply.size(), '\0');
  size_t n = 0;
  while (n < got.size()) {
    ssize_t r = ::read(fd, got.data() + n, got.size() - n);
    ASSERT_GT(r, 0);
    n += static_cast<size_t>(r);
  }
  EXPECT_EQ(got, kReply);
}

// The reply's dilation is paid for before its bytes leave: at least
// (1/F - 1) x the handler's work had been paid when the peer got them.
void expect_paid_before(std::pair<uint64_t, uint64_t> paid_work) {
  const auto [paid, work] = paid_work;
  EXPECT_GE(paid, static_cast<uint64_t>(work * (1 / kFactor - 1))) << "paid " << paid << " ns for work " << work << " ns";
}

TEST(MeshDilation, ADownstreamReplyLeavesAfterItsWorkIsPaid) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Loop loop;
  DownstreamStream stream{Socket(loop.io(), Protocol(AF_UNIX, 0), fds[0])};
  WriteQueue out;  // the codecs' write path
  loop.start();
  expect_paid_before(loop.reply(
      [&] {
        out.pending = kReply;
        out.start(stream, [](const boost::system::error_code&) {});
      },
      [&] { read_reply(fds[1]); }));
  loop.stop();
  ::close(fds[1]);
}

TEST(MeshDilation, AnUpstreamWriteLeavesAfterItsWorkIsPaid) {
  asio::io_context accept_io;
  asio::ip::tcp::acceptor acceptor(accept_io, {asio::ip::make_address("127.0.0.1"), 0});
  config::Address address;
  address.ip = "127.0.0.1";
  address.port = acceptor.local_endpoint().port();
  Loop loop;
  ServiceStream stream(loop.io().get_executor());
  std::promise<boost::system::error_code> connected;
  stream.async_connect(address, [&](const boost::system::error_code& ec) { connected.set_value(ec); });
  loop.start();
  asio::ip::tcp::socket peer = acceptor.accept();
  ASSERT_FALSE(connected.get_future().get());
  expect_paid_before(loop.reply(
      [&] { asio::async_write(stream, asio::buffer(kReply), [](const boost::system::error_code&, size_t) {}); },
      [&] { read_reply(peer.native_handle()); }));
  loop.stop();
}

TEST(MeshDilation, ATlsRecordLeavesAfterItsWorkIsPaid) {
  Pki pki;
  pki.leaf("server", "DNS:localhost");
  SSL_CTX* server_ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_EQ(SSL_CTX_use_certificate_chain_file(server_ctx, pki.path("server.crt").c_str()), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(server_ctx, pki.path("server.key").c_str(), SSL_FILETYPE_PEM), 1);
  SSL* server = SSL_new(server_ctx);
  SSL_set_accept_state(server);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Loop loop;
  DownstreamStream stream{Socket(loop.io(), Protocol(AF_UNIX, 0), fds[0]), server};
  std::promise<boost::system::error_code> handshaken;
  stream.tls()->async_handshake([&](const boost::system::error_code& ec) { handshaken.set_value(ec); });
  loop.start();
  // The client: blocking OpenSSL on this thread.
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  SSL* client = SSL_new(client_ctx);
  SSL_set_fd(client, fds[1]);
  ASSERT_EQ(SSL_connect(client), 1);
  ASSERT_FALSE(handshaken.get_future().get());
  WriteQueue out;
  expect_paid_before(loop.reply(
      [&] {
        out.pending = kReply;
        out.start(stream, [](const boost::system::error_code&) {});
      },
      [&] {
        std::string got(kReply.size(), '\0');
        size_t n = 0;
        while (n < got.size()) {
          size_t r = 0;
          ASSERT_EQ(SSL_read_ex(client, got.data() + n, got.size() - n, &r), 1);
          n += r;
        }
        EXPECT_EQ(got, kReply);
      }));
  loop.stop();
  SSL_free(client);
  SSL_CTX_free(client_ctx);
  SSL_CTX_free(server_ctx);
  ::close(fds[1]);
}

// Handlers that each post the next, `n` in all, on a loop at `speed`;
// returns its counters and whether each handler saw the loop as its thread's current.
struct LoopRun {
  uint64_t work_ns, dilated_ns, batches;
  bool current_seen;
};
LoopRun run_handlers(const DpuSpeed& speed, int n) {
  asio::io_context io;
  DilationCounters counters;
  LoopDilation dilation(speed, counters);
  bool current_seen = true;
  std::function<void(int)> step = [&](int left) {
    current_seen = current_seen && LoopDilation::current() == &dilation;
    burn();
    if (left > 1) asio::post(io, [&, left] { step(left - 1); });
  };
  asio::post(io, [&] { step(n); });
  run_loop(io, dilation, "test loop");
  return {counters.work_ns.load(), counters.dilated_ns.load(), counters.batches.load(), current_seen};
}

TEST(MeshDilation, AtHostSpeedTheLoopIsAsiosPlainRun) {
  // Host speed: no batches (io.run(), no clock read per batch), nothing dilated, no current loop for the writes.
  const LoopRun host = run_handlers(DpuSpeed::parse("host"), 5);
  EXPECT_EQ(host.batches, 0u);
  EXPECT_EQ(host.work_ns, 0u);
  EXPECT_EQ(host.dilated_ns, 0u);
  EXPECT_TRUE(LoopDilation::current() == nullptr);
  // Half speed, the same handlers: paid in batches, dilated >= work x (1/F - 1), the loop current while it runs.
  const LoopRun half = run_handlers(DpuSpeed::parse("0.5"), 5);
  EXPECT_GE(half.batches, 1u);
  EXPECT_GE(half.work_ns, 5 * kBurnNs);
  EXPECT_GE(half.dilated_ns, half.work_ns);
  EXPECT_TRUE(half.current_seen);
  EXPECT_TRUE(LoopDilation::current() == nullptr);  // not after the loop
}

// A control plane with only its admin listener at `speed`, asked for /stats
// a few times; its dilation counters and the data plane's afterwards.
std::pair<LoopRun, LoopRun> control_plane_at(const std::string& speed) {
  const uint16_t port = testing::free_port();
  ProxyOptions options;
  options.dpu_speed = DpuSpeed::parse(speed);
  ControlPlane cp(options, {}, 1);
  cp.start(config::parse_bootstrap("admin: {address: {socket_address: {address: 127.0.0.1, port_value: " +
                                   std::to_string(port) + "}}}\nstatic_resources: {}\n"));
  std::thread loop([&] { cp.run(); });
  unsigned status = 0;
  for (int i = 0; i < 500 && (status = testing::admin_status(port, "/stats")) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(status, 200u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(testing::admin_status(port, "/stats"), 200u);
  cp.stop();
  loop.join();
  const auto counted = [](const DilationCounters& c) {
    return LoopRun{c.work_ns.load(), c.dilated_ns.load(), c.batches.load(), false};
  };
  return {counted(cp.control_plane_dilation()), counted(cp.data_plane_dilation())};
}

TEST(MeshDilation, TheControlPlanesLoopIsDilated) {
  const auto [control, data] = control_plane_at("0.5");
  EXPECT_GT(control.work_ns, 0u);
  EXPECT_GE(control.batches, 1u);
  EXPECT_GE(control.dilated_ns, control.work_ns);  // x (1/F - 1) = 1
  const auto [host_control, host_data] = control_plane_at("host");
  EXPECT_EQ(host_control.work_ns + host_control.dilated_ns + host_control.batches, 0u);
  EXPECT_EQ(host_data.work_ns + host_data.dilated_ns + host_data.batches, 0u);
}

}  // namespace
}  // namespace dpukit::mesh
