#include "dpukit/core/message_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

namespace dpukit {
namespace {

using namespace std::chrono_literals;

std::string unique_name(const std::string& tag) {
  static int n = 0;
  return "@dpukit-msg-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(++n);
}

ChannelError::Kind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ChannelError& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no ChannelError";
  return ChannelError::Kind::kSystem;
}

// The server echoes every message back with its type plus one.
TEST(MessageSocket, CarriesMessagesOfAnySizeBothWays) {
  MessageListener l(unique_name("echo"));
  std::thread server([&] {
    std::optional<MessageSocket> s = l.accept();
    ASSERT_TRUE(s);
    try {
      while (auto m = s->receive()) s->send(m->type + 1, m->body);
    } catch (const ChannelError& e) {
      EXPECT_EQ(e.kind(), ChannelError::Kind::kPeerGone);
    }
  });
  {
    MessageSocket c = MessageSocket::connect(l.name());
    std::string big(3 << 20, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
    for (const std::string& body : {std::string(), std::string("x"), big}) {
      c.send(41, body);
      auto m = c.receive(10s);
      ASSERT_TRUE(m);
      EXPECT_EQ(m->type, 42u);
      EXPECT_TRUE(m->body == body) << "a body of " << body.size() << " bytes came back changed";
    }
  }
  server.join();
}

TEST(MessageSocket, ReceiveTimesOutWhenNothingComes) {
  MessageListener l(unique_name("quiet"));
  MessageSocket c = MessageSocket::connect(l.name());
  std::optional<MessageSocket> s = l.accept();
  ASSERT_TRUE(s);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.receive(100ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 90ms);
  EXPECT_FALSE(c.receive(0ms));
  s->send(7, "late");
  auto m = c.receive(1s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body, "late");
}

// A peer that goes away ends a wait at once, with kPeerGone.
TEST(MessageSocket, APeerThatIsGoneIsAnErrorNotAHang) {
  MessageListener l(unique_name("gone"));
  MessageSocket c = MessageSocket::connect(l.name());
  {
    std::optional<MessageSocket> s = l.accept();
    ASSERT_TRUE(s);
  }  // closed
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(kind_of([&] { c.receive(10s); }), ChannelError::Kind::kPeerGone);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(kind_of([&] { c.send(1, "x"); }), ChannelError::Kind::kPeerGone);
}

TEST(MessageSocket, BytesThatAreNotAMessageAreAProtocolError) {
  MessageListener l(unique_name("garbage"));
  MessageSocket c = MessageSocket::connect(l.name());
  std::optional<MessageSocket> s = l.accept();
  ASSERT_TRUE(s);
  const char junk[] = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(s->fd(), junk, sizeof(junk), 0), static_cast<ssize_t>(sizeof(junk)));
  EXPECT_EQ(kind_of([&] { c.receive(1s); }), ChannelError::Kind::kProtocol);
}

// A message whose body never finishes arriving is not taken for "no message".
TEST(MessageSocket, AMessageCutShortByTheTimeOutIsAProtocolError) {
  MessageListener l(unique_name("short"));
  MessageSocket c = MessageSocket::connect(l.name());
  std::optional<MessageSocket> s = l.accept();
  ASSERT_TRUE(s);
  char head[16] = {};
  uint32_t magic = 0x4d4b5044, type = 1;
  uint64_t len = 100;
  std::memcpy(head, &magic, 4);
  std::memcpy(head + 4, &type, 4);
  std::memcpy(head + 8, &len, 8);
  ASSERT_EQ(::send(s->fd(), head, sizeof(head), 0), 16);
  EXPECT_EQ(kind_of([&] { c.receive(100ms); }), ChannelError::Kind::kProtocol);
}

TEST(MessageSocket, ConnectingToNobodyNamesTheSocket) {
  std::string name = unique_name("nobody");
  try {
    MessageSocket::connect(name);
    FAIL() << "connected to nobody";
  } catch (const ChannelError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(MessageSocket, ShutdownWakesAnAcceptFromAnotherThread) {
  MessageListener l(unique_name("stop"));
  std::optional<MessageSocket> got;
  std::thread t([&] { got = l.accept(); });
  std::this_thread::sleep_for(50ms);
  l.shutdown();
  t.join();
  EXPECT_FALSE(got);
  EXPECT_FALSE(l.accept());
}

TEST(MessageSocket, APathListenerReplacesAStaleFileAndRemovesItsOwn) {
  auto path = std::filesystem::temp_directory_path() / ("dpukit-msg-" + std::to_string(::getpid()) + ".sock");
  std::ofstream(path) << "left by a dead process";
  {
    MessageListener l(path.string());
    MessageSocket c = MessageSocket::connect(path.string());
    EXPECT_TRUE(l.accept());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace dpukit
