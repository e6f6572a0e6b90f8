// The dpu speed model on the node proxy's real loop (issue 31 §1): one
// worker of an in-process proxy (the same ControlPlane, worker and run_loop
// as dpukit-mesh run) answers a direct_response route under a pipelined
// HTTP/1.1 load, at F = 0.5 against F = 1, paired and interleaved (core's
// paired_speed_check_with_retry): throughput 0.47-0.53x and the worker
// thread's CPU per request 1.9-2.1x. With the model's own cost put back (its
// clock reads billed as work and dilated, and so a payment at every write)
// the worker spends 2.2-2.6x its full-speed CPU per request and is outside.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "admin_client.h"
#include "config/bootstrap.h"
#include "control/control_plane.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/speed_check.h"

namespace dpukit::mesh {
namespace {

// The load: kConnections keep-alive connections, each sending kDepth
// pipelined requests in one write and the next kDepth once all are answered
// (closed batches, so the worker's work per request does not depend on how
// the load's timing happens to batch it): 2,048 requests in flight, 3 ms of
// the worker's work at full speed, so that it does not run dry while another
// tenant holds the client's CPU (with 512, throughput ratios of 0.55-0.6 in
// some attempts). The client reads non-blocking
// sockets and naps kIdlePoll when none had bytes: it never waits in the
// kernel for the worker's sends, so they never pay its wake-up, and it
// touches the sockets the worker writes rarely.
constexpr int kConnections = 32, kDepth = 64;
constexpr auto kIdlePoll = std::chrono::microseconds(50);
// Nine short pairs, not three long ones: on this shared 2-CPU VM another
// tenant's spell moves a run's throughput by more than the 6 % bound, and
// the median of nine pairs outlasts more of them.
constexpr int kPairs = 9;
constexpr auto kWarmup = std::chrono::milliseconds(40), kMeasured = std::chrono::milliseconds(150);
const std::string kRequest = "GET /speed HTTP/1.1\r\nHost: test.local\r\n\r\n";

std::string bootstrap(uint16_t port) {
  return R"(
static_resources:
  listeners:
  - name: http
    address:
      socket_address: {address: 127.0.0.1, port_value: )" +
         std::to_string(port) + R"(}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
          generate_request_id: false
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /}
                direct_response: {status: 200, body: {inline_string: ok}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
)";
}

// A thread of this process by name: its CPU time on the kernel's schedstat clock (ns).
uint64_t thread_cpu_by_name(const std::string& comm) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream c(e.path() / "comm");
    std::string name;
    std::getline(c, name);
    if (name != comm) continue;
    std::ifstream s(e.path() / "schedstat");
    uint64_t ns = 0;
    s >> ns;
    return ns;
  }
  return 0;
}

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < 500; ++i) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(fd);
  return -1;
}

bool write_all(int fd, const std::string& bytes) {
  size_t n = 0;
  while (n < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + n, bytes.size() - n);
    if (w < 0 && errno == EAGAIN) continue;
    if (w <= 0) return false;
    n += static_cast<size_t>(w);
  }
  return true;
}

// One request on a blocking connection: the length of its whole response
// (the direct response is the same bytes every time).
size_t response_size(int fd) {
  if (!write_all(fd, kRequest)) return 0;
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) return 0;
    got.append(buf, static_cast<size_t>(r));
    const size_t head = got.find("\r\n\r\n");
    if (head == std::string::npos) continue;
    std::string lower = got.substr(0, head);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const size_t cl = lower.find("content-length: ");
    if (cl == std::string::npos) return 0;
    const size_t size = head + 4 + std::stoul(got.substr(cl + 16));
    if (got.size() >= size) return got.size() == size ? size : 0;
  }
}

// The proxy at `factor` (one worker on the last CPU of this process, the
// client on the first) under the load: requests answered per wall second and
// the worker thread's CPU per request, over kMeasured after kWarmup.
SpeedSample run_at(double factor) {
  const CpuSet cpus = available_cpus();
  const uint16_t port = testing::free_port();
  ProxyOptions options;
  options.dpu_speed = DpuSpeed::parse(factor >= 1 ? "host" : std::to_string(factor));
  ControlPlane cp(options, {cpus.cpus.back()}, 1);
  cp.start(config::parse_bootstrap(bootstrap(port)));
  std::thread control([&] { cp.run(); });

  SpeedSample sample;
  std::thread client([&] {
    if (cpus.cpus.size() > 1) pin_current_thread(CpuSet{{cpus.cpus.front()}});
    std::vector<int> fds;
    for (int i = 0; i < kConnections; ++i) fds.push_back(connect_to(port));
    for (int fd : fds) ASSERT_GE(fd, 0) << "the proxy did not accept on port " << port;
    const size_t response = response_size(fds[0]);
    ASSERT_GT(response, 0u) << "no well-formed direct response";
    std::string batch;
    for (int i = 0; i < kDepth; ++i) batch += kRequest;
    const size_t batch_bytes = response * kDepth;
    for (int fd : fds) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      ASSERT_TRUE(write_all(fd, batch));
    }
    std::vector<size_t> got(fds.size(), 0);
    uint64_t answered = 0, answered0 = 0, cpu0 = 0;
    const auto begin = std::chrono::steady_clock::now();
    auto t0 = begin, now = begin;
    bool measuring = false;
    char buf[65536];
    for (;;) {
      now = std::chrono::steady_clock::now();
      if (!measuring && now - begin >= kWarmup) {
        measuring = true;
        t0 = now;
        answered0 = answered;
        cpu0 = thread_cpu_by_name("mesh:w0");
      }
      if (measuring && now - t0 >= kMeasured) break;
      bool read_any = false;
      for (size_t i = 0; i < fds.size(); ++i) {
        const ssize_t r = ::read(fds[i], buf, sizeof buf);
        if (r == 0 || (r < 0 && errno != EAGAIN)) FAIL() << "the proxy closed a connection";
        if (r <= 0) continue;
        read_any = true;
        got[i] += static_cast<size_t>(r);
        if (got[i] < batch_bytes) continue;
        ASSERT_EQ(got[i], batch_bytes) << "responses of another length than the first";
        got[i] = 0;
        answered += kDepth;
        ASSERT_TRUE(write_all(fds[i], batch));
      }
      if (!read_any) std::this_thread::sleep_for(kIdlePoll);
    }
    const uint64_t cpu = thread_cpu_by_name("mesh:w0") - cpu0;
    const double seconds = std::chrono::duration<double>(now - t0).count();
    const uint64_t n = answered - answered0;
    sample.units_per_s = double(n) / seconds;
    sample.dpu_ns_per_unit = n ? double(cpu) / double(n) : 0;
    for (int fd : fds) ::close(fd);
  });
  client.join();
  cp.stop();
  control.join();
  return sample;
}

// Five attempts, as measure's: another tenant's busy spell costs the run at
// F = 0.5 more per request than the one at F = 1 (it spans twice the wall
// time, so twice the preemptions and cache refills a request, each dilated):
// with a CPU hog beside it, attempts gave 2.07-2.77x CPU per request while
// the quiet machine gives 2.02-2.03x. Such attempts are marked "the machine
// was busy" (SpeedCheck::quiet) and the next one waits a second.
TEST(MeshDpuSpeed, TheWorkerAtHalfSpeedKeepsTheModelsPromise) {
  if (available_cpus().cpus.size() < 2) GTEST_SKIP() << "needs two CPUs: the client and the worker apart";
  const SpeedCheck c = paired_speed_check_with_retry(run_at, 0.5, kPairs, 5);
  RecordProperty("throughput_ratio", std::to_string(c.median_throughput_ratio()));
  RecordProperty("cpu_ratio", std::to_string(c.median_cpu_ratio()));
  EXPECT_TRUE(c.within()) << c.describe();
}

}  // namespace
}  // namespace dpukit::mesh
