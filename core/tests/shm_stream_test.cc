// The shared-memory byte stream: bytes arrive whole and in order through
// small rings that wrap and fill, EOF and death are told apart, and a bad
// offer is refused without taking the listener down.
#include "dpukit/core/shm_stream.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "dpukit/core/shm.h"

namespace dpukit {
namespace {

std::string socket_path(const char* name) {
  return "/tmp/dpukit-shm-stream-test-" + std::to_string(::getpid()) + "-" + name + ".sock";
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint8_t> read_to_eof(ShmStream& s) {
  std::vector<uint8_t> got;
  uint8_t buf[3000];  // not a divisor of the ring: reads straddle the wrap
  for (;;) {
    size_t n = s.read(buf, sizeof buf);
    if (n == 0) return got;
    got.insert(got.end(), buf, buf + n);
  }
}

// Connected pair through a listener, with small rings.
std::pair<ShmStream, ShmStream> connected_pair(const std::string& path, size_t ring_bytes = 4096) {
  ShmStreamListener listener(path);
  ShmStream accepted;
  std::thread t([&] { accepted = listener.accept(std::chrono::seconds(10)); });
  ShmStream connected = ShmStream::connect(path, ShmStreamConfig{ring_bytes});
  t.join();
  return {std::move(connected), std::move(accepted)};
}

TEST(ShmStream, BothDirectionsCarryEveryByteInOrderThroughASmallRing) {
  auto [a, b] = connected_pair(socket_path("both"));
  EXPECT_EQ(a.ring_bytes(), 4096u);
  const auto to_b = random_bytes(3 << 20, 1), to_a = random_bytes(2 << 20, 2);
  std::vector<uint8_t> got_b, got_a;
  // Each side writes and reads at once: a full ring in one direction must not
  // stop the other (the writers sleep on room, the readers on bytes).
  std::thread wa([&] { a.write_all(to_b.data(), to_b.size()); a.shutdown_write(); });
  std::thread wb([&] { b.write_all(to_a.data(), to_a.size()); b.shutdown_write(); });
  std::thread rb([&] { got_b = read_to_eof(b); });
  got_a = read_to_eof(a);
  wa.join();
  wb.join();
  rb.join();
  EXPECT_TRUE(got_b == to_b);
  EXPECT_TRUE(got_a == to_a);
}

TEST(ShmStream, NonBlockingCallsReportEmptyAndFull) {
  auto [a, b] = connected_pair(socket_path("nb"));
  uint8_t buf[8192];
  EXPECT_EQ(b.try_read(buf, sizeof buf), 0u);
  EXPECT_TRUE(b.prepare_wait_readable());  // empty: the reader should sleep
  std::vector<uint8_t> big(10000, 7);
  size_t n = a.try_write(big.data(), big.size());
  EXPECT_EQ(n, 4096u);  // the ring holds exactly its capacity
  EXPECT_EQ(a.try_write(big.data(), 1), 0u);
  EXPECT_TRUE(a.prepare_wait_writable());  // full: the writer should sleep
  // The writer rang b's doorbell because b announced it was waiting.
  pollfd p{b.readable_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 1000), 1);
  b.clear_readable();
  EXPECT_EQ(b.try_read(buf, sizeof buf), 4096u);
  EXPECT_FALSE(b.at_eof());
  a.shutdown_write();
  EXPECT_TRUE(b.at_eof());
  EXPECT_FALSE(b.prepare_wait_readable());  // EOF: nothing to wait for
}

TEST(ShmStream, ReadsEveryByteThenEofAfterAnOrderlyClose) {
  auto [a, b] = connected_pair(socket_path("eof"));
  const auto data = random_bytes(3000, 3);
  a.write_all(data.data(), data.size());
  a.close();
  EXPECT_TRUE(read_to_eof(b) == data);
  EXPECT_TRUE(b.peer_closed_in_order());
  EXPECT_THROW(b.write_all(data.data(), 1), ChannelError);  // nobody will read it
}

TEST(ShmStream, APeerThatDiesIsReportedAsGoneAfterItsBytes) {
  const std::string path = socket_path("death");
  ShmStreamListener listener(path);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Connect, send 100 bytes, and die without closing.
    ShmStream s = ShmStream::connect(path);
    std::vector<uint8_t> hundred(100, 42);
    s.write_all(hundred.data(), hundred.size());
    ::_exit(0);
  }
  ShmStream s = listener.accept(std::chrono::seconds(10));
  uint8_t buf[256];
  size_t got = 0;
  try {
    for (;;) {
      size_t n = s.read(buf, sizeof buf);
      ASSERT_NE(n, 0u) << "a death must not look like an orderly EOF";
      got += n;
    }
  } catch (const ChannelError& e) {
    EXPECT_EQ(e.kind(), ChannelError::Kind::kPeerGone) << e.what();
  }
  EXPECT_EQ(got, 100u);
  EXPECT_TRUE(s.peer_gone());
  int status = 0;
  ::waitpid(child, &status, 0);
}

TEST(ShmStream, AWriterBlockedOnAFullRingLearnsThatTheReaderDied) {
  const std::string path = socket_path("blocked");
  ShmStreamListener listener(path);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ShmStream s = ShmStream::connect(path);
    ::usleep(200 * 1000);
    ::_exit(0);  // never reads
  }
  ShmStream s = listener.accept(std::chrono::seconds(10));
  std::vector<uint8_t> big(1 << 20, 1);
  try {
    s.write_all(big.data(), big.size());
    ADD_FAILURE() << "1 MiB fit into a 256 KiB ring nobody reads";
  } catch (const ChannelError& e) {
    EXPECT_EQ(e.kind(), ChannelError::Kind::kPeerGone) << e.what();
  }
  ::waitpid(child, nullptr, 0);
}

// A raw SOCK_SEQPACKET connection to the listener, for hand-made offers.
UniqueFd raw_connect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

void send_fds(int sock, const void* data, size_t len, std::vector<int> fds) {
  iovec iov{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ASSERT_EQ(::sendmsg(sock, &msg, 0), static_cast<ssize_t>(len));
}

TEST(ShmStream, BadOffersAreRefusedAndTheListenerGoesOn) {
  const std::string path = socket_path("bad");
  ShmStreamListener listener(path);
  auto refused = [&](auto send) {
    UniqueFd c = raw_connect(path);
    send(c.get());
    try {
      ShmStream::accept_offer(listener.accept_connection(std::chrono::seconds(5)), std::chrono::milliseconds(500));
      return std::string("accepted");
    } catch (const ChannelError& e) {
      return std::string(e.what());
    }
  };
  // Too short.
  EXPECT_NE(refused([](int s) { ASSERT_EQ(::send(s, "hello", 5, 0), 5); }), "accepted");
  // The right size, the wrong magic.
  uint64_t words[3] = {0x1234, 1, 4096};
  EXPECT_NE(refused([&](int s) { send_fds(s, words, sizeof words, {}); }), "accepted");
  // The right magic and version, but a regular file where a doorbell belongs:
  // the service would write into it.
  const uint64_t magic = 0x6470756b69747373ull;
  uint64_t hello[3] = {magic, 1, 8192};
  FILE* tmp = std::tmpfile();
  SharedMemory m = SharedMemory::create("test", 8192);
  std::string r = refused([&](int s) { send_fds(s, hello, sizeof hello, {m.fd(), ::fileno(tmp), ::fileno(tmp), ::fileno(tmp), ::fileno(tmp)}); });
  EXPECT_NE(r.find("memfd and four datagram sockets"), std::string::npos) << r;
  // The right kinds, but a memfd the proxy could shrink under the service (a SIGBUS there).
  UniqueFd unsealed(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(unsealed.get(), 8192), 0);
  int pairs[4][2];
  for (auto& p : pairs) ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, p), 0);
  r = refused([&](int s) {
    send_fds(s, hello, sizeof hello, {unsealed.get(), pairs[0][1], pairs[1][1], pairs[2][1], pairs[3][1]});
  });
  EXPECT_NE(r.find("not sealed"), std::string::npos) << r;
  for (auto& p : pairs) ::close(p[0]), ::close(p[1]);
  std::fclose(tmp);
  // Nobody speaks: a time-out, not a hang.
  EXPECT_NE(refused([](int) {}), "accepted");
  // A good offer still works afterwards.
  ShmStream good;
  std::thread t([&] { good = listener.accept(std::chrono::seconds(10)); });
  ShmStream c = ShmStream::connect(path);
  t.join();
  c.write_all("ok", 2);
  char buf[2];
  EXPECT_EQ(good.read(buf, 2), 2u);
}

TEST(ShmStream, ConnectingToNothingSaysSo) {
  try {
    ShmStream::connect(socket_path("nothing"));
    ADD_FAILURE() << "connected to nothing";
  } catch (const ChannelError& e) {
    EXPECT_NE(std::string(e.what()).find("no service listening at"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ShmStream::offer(UniqueFd(), ShmStreamConfig{1000}), std::invalid_argument);
}

}  // namespace
}  // namespace dpukit
