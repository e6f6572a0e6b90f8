#include "dpukit/core/channel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "channel_peer.h"
#include "dpukit/core/process.h"

namespace dpukit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string socket_path(const char* tag) {
  return (std::filesystem::temp_directory_path() /
          ("dpukit-test-" + std::string(tag) + "-" + std::to_string(getpid()) + ".sock"))
      .string();
}

ChildProcess spawn_tool(std::vector<std::string> args) {
  args.insert(args.begin(), DPUKIT_CORE_TOOL);
  return ChildProcess::spawn(args);
}

ChannelHost connect_retry(const std::string& path, const ChannelConfig& cfg = {}) {
  for (int i = 0;; ++i) {
    try {
      return ChannelHost::connect(path, cfg);
    } catch (const ChannelError&) {
      if (i > 500) throw;
      std::this_thread::sleep_for(10ms);
    }
  }
}

TEST(Channel, PayloadsArriveIntactAndInOrderBetweenThreads) {
  ChannelConfig cfg;
  cfg.request_slots = 64;
  cfg.completion_slots = 64;
  cfg.payload_bytes = 64 * 1024;  // small: forces wrap-around and back-pressure
  auto [host, dpu] = make_channel_pair(cfg);
  std::thread t([d = std::move(dpu)]() mutable { peer::run_dpu(d, true); });
  peer::Totals sent = peer::run_host(host, 200'000, 3000, true, true);
  t.join();
  EXPECT_EQ(sent.messages, 200'000u);
}

TEST(Channel, DpuSideSeesTheExactBytesAndArguments) {
  auto [host, dpu] = make_channel_pair({});
  std::vector<uint8_t> data = {9, 8, 7, 6, 5};
  host.submit(42, 7, data, {11, 22, 33});
  host.submit(43, 8);
  std::vector<ChannelDpu::Message> got;
  ASSERT_EQ(dpu.receive(got, 16, 1000ms), 2u);
  EXPECT_EQ(got[0].request.op, 42u);
  EXPECT_EQ(got[0].request.id, 7u);
  EXPECT_EQ(std::vector<uint8_t>(got[0].payload.begin(), got[0].payload.end()), data);
  EXPECT_EQ(got[0].request.args[1], 22u);
  EXPECT_EQ(got[1].payload.size(), 0u);
  dpu.complete({7, -5, 42, -28, 99});
  ChannelCompletion c{};
  ASSERT_EQ(host.wait_completions(&c, 1, 1000ms), 1u);
  EXPECT_EQ(c.id, 7u);
  EXPECT_EQ(c.result, -5);
  EXPECT_EQ(c.status, -28);
  EXPECT_EQ(c.arg, 99u);
}

TEST(Channel, BackPressureRefusesWhenFullAndResumesWhenDrained) {
  ChannelConfig cfg;
  cfg.request_slots = 4;
  cfg.payload_bytes = 4096;
  auto [host, dpu] = make_channel_pair(cfg);
  std::vector<uint8_t> chunk(1500, 1);
  EXPECT_TRUE(host.try_submit(1, 0, chunk));
  EXPECT_TRUE(host.try_submit(1, 1, chunk));
  EXPECT_FALSE(host.try_submit(1, 2, chunk)) << "the payload region holds only two such chunks";
  EXPECT_TRUE(host.try_submit(1, 2, {})) << "an empty payload needs only a slot";
  EXPECT_TRUE(host.try_submit(1, 3, {}));
  EXPECT_FALSE(host.try_submit(1, 4, {})) << "all four slots are taken";
  std::vector<ChannelDpu::Message> got;
  EXPECT_EQ(dpu.receive(got, 16, 0ms), 4u);
  EXPECT_TRUE(host.try_submit(1, 4, chunk));
  EXPECT_THROW(host.submit(1, 5, std::vector<uint8_t>(8192)), std::invalid_argument);
}

TEST(Channel, ReservedPayloadIsSentInPlaceAndTheUnusedRestIsGivenBack) {
  ChannelConfig cfg;
  cfg.request_slots = 8;
  cfg.payload_bytes = 4096;
  auto [host, dpu] = make_channel_pair(cfg);
  auto room = host.reserve(3000);
  ASSERT_EQ(room.size(), 3000u);
  for (size_t i = 0; i < 100; ++i) room[i] = static_cast<uint8_t>(i);
  EXPECT_THROW(host.submit(1, 9), std::logic_error) << "nothing else while a reservation is open";
  host.commit(5, 1, 100, {77});
  EXPECT_FALSE(host.has_reservation());
  // Only 100 of the 3000 bytes were used: 3900 are free again (as one run up to the end).
  EXPECT_TRUE(host.try_submit(6, 2, std::vector<uint8_t>(3900, 0xee)));
  std::vector<ChannelDpu::Message> got;
  ASSERT_EQ(dpu.receive(got, 8, 1000ms), 2u);
  EXPECT_EQ(got[0].request.op, 5u);
  EXPECT_EQ(got[0].request.args[0], 77u);
  ASSERT_EQ(got[0].payload.size(), 100u);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(got[0].payload[i], i);
  EXPECT_EQ(got[1].payload.size(), 3900u);
  EXPECT_THROW(host.commit(1, 1, 10), std::logic_error) << "commit needs a reservation";
  host.reserve(10);
  EXPECT_THROW(host.commit(1, 1, 11), std::invalid_argument);
  host.cancel_reservation();
  EXPECT_TRUE(host.try_submit(1, 3));
}

// A submitting thread and a completion reaper on the host side at once: both
// sleep on the same doorbell, and neither may miss its wake-up for long.
TEST(Channel, HostSubmitterAndReaperThreadsBothMakeProgress) {
  ChannelConfig cfg;
  cfg.request_slots = 16;
  cfg.completion_slots = 16;
  cfg.payload_bytes = 16 * 1024;
  cfg.spin = 0;  // sleep at once: the doorbell protocol is what is tested
  auto [host, dpu] = make_channel_pair(cfg);
  constexpr uint64_t kMessages = 20000;
  std::thread dpu_side([d = std::move(dpu)]() mutable {
    std::vector<ChannelDpu::Message> got;
    for (;;) {
      got.clear();
      size_t n = d.receive(got, 8, 1000ms);
      if (n == 0 && d.closed()) break;
      for (auto& m : got) d.complete({m.request.id, static_cast<int64_t>(m.payload.size()), m.request.op, 0, 0});
    }
  });
  std::atomic<uint64_t> reaped{0};
  std::thread reaper([&] {
    ChannelCompletion c[8];
    uint64_t expect = 0;
    while (expect < kMessages) {
      size_t n = host.wait_completions(c, 8, 1000ms);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(c[i].id, expect++);
      reaped = expect;
    }
  });
  auto t0 = Clock::now();
  std::vector<uint8_t> chunk(3000, 7);
  for (uint64_t i = 0; i < kMessages; ++i) host.submit(1, i, chunk);
  reaper.join();
  host.close();
  dpu_side.join();
  EXPECT_EQ(reaped.load(), kMessages);
  // A lost wake-up costs up to 100 ms (the poll timeout); 20,000 round trips
  // with a few lost would take seconds.
  EXPECT_LT(Clock::now() - t0, 20s);
}

TEST(Channel, ReceiveTimesOutWhenIdleAndReportsOrderlyClose) {
  auto [host, dpu] = make_channel_pair({});
  std::vector<ChannelDpu::Message> got;
  auto t0 = Clock::now();
  EXPECT_EQ(dpu.receive(got, 8, 50ms), 0u);
  EXPECT_GE(Clock::now() - t0, 45ms);
  EXPECT_FALSE(dpu.closed());
  host.submit(1, 0);
  host.close();
  EXPECT_EQ(dpu.receive(got, 8, 1000ms), 1u) << "requests before close are still delivered";
  EXPECT_EQ(dpu.receive(got, 8, 1000ms), 0u);
  EXPECT_TRUE(dpu.closed());
}

TEST(Channel, HostLearnsAtOnceWhenTheDpuThreadDropsTheChannel) {
  auto [host, dpu] = make_channel_pair({});
  std::thread t([d = std::move(dpu)]() mutable { std::this_thread::sleep_for(100ms); });  // d dies with the thread
  ChannelCompletion c;
  auto t0 = Clock::now();
  try {
    host.wait_completions(&c, 1, 10s);
    FAIL() << "expected a ChannelError";
  } catch (const ChannelError& e) {
    EXPECT_LT(Clock::now() - t0, 1s);
    EXPECT_NE(std::string(e.what()).find("dpu side"), std::string::npos) << e.what();
  }
  t.join();
}

// The acceptance test: 10 million messages with payloads between a host (this
// process) and a dpu process (dpukit-core channel-peer), each payload checked.
TEST(ChannelProcesses, TenMillionMessagesArriveIntactAndInOrder) {
  std::string path = socket_path("10m");
  ChildProcess peer = spawn_tool({"channel-peer", "--listen", path, "--verify"});
  ChannelHost host = connect_retry(path);
  EXPECT_GT(host.peer_pid(), 0);
  peer::Totals t = peer::run_host(host, 10'000'000, 64, true, true);
  EXPECT_EQ(t.messages, 10'000'000u);
  peer.wait();
  EXPECT_TRUE(peer.succeeded()) << "the dpu peer found a lost, reordered or corrupt message";
}

TEST(ChannelProcesses, KillingTheDpuProcessFailsTheHostWithinASecond) {
  std::string path = socket_path("killdpu");
  // A killed peer leaves its listening socket's file behind.
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() { ::unlink(path.c_str()); }
  } remove_at_end{path};
  ChildProcess peer = spawn_tool({"channel-peer", "--listen", path});
  ChannelHost host = connect_retry(path);
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    peer.kill(SIGKILL);
  });
  Clock::time_point killed_by = Clock::now() + 200ms;
  try {
    peer::run_host(host, UINT64_MAX / 2, 512, false, false);
    FAIL() << "the host kept going after its dpu peer was killed";
  } catch (const ChannelError& e) {
    EXPECT_EQ(e.kind(), ChannelError::Kind::kPeerGone);
    EXPECT_LT(Clock::now() - killed_by, 1s) << "took too long to notice";
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
  killer.join();
  peer.wait();
}

TEST(ChannelProcesses, KillingTheHostProcessFailsTheDpuWithinASecond) {
  std::string path = socket_path("killhost");
  ChannelListener listener(path);
  ChildProcess host = spawn_tool({"channel-host", "--connect", path, "--messages", "1000000000000", "--payload", "512"});
  ChannelDpu dpu = listener.accept(10s);
  EXPECT_EQ(dpu.peer_pid(), host.pid());
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    host.kill(SIGKILL);
  });
  Clock::time_point killed_by = Clock::now() + 200ms;
  try {
    peer::run_dpu(dpu, false);
    FAIL() << "the dpu side kept going after its host was killed";
  } catch (const ChannelError& e) {
    EXPECT_EQ(e.kind(), ChannelError::Kind::kPeerGone);
    EXPECT_LT(Clock::now() - killed_by, 1s) << "took too long to notice";
  }
  killer.join();
  host.wait();
}

TEST(ChannelProcesses, ConnectingToNobodyIsAClearError) {
  try {
    ChannelHost::connect(socket_path("nobody"));
    FAIL();
  } catch (const ChannelError& e) {
    EXPECT_NE(std::string(e.what()).find("no dpu side listening"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpukit
