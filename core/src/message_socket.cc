#include "dpukit/core/message_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "unix_socket.h"

namespace dpukit {

namespace {

constexpr uint32_t kMagic = 0x4d4b5044;  // "DPKM"
constexpr const char* kWho = "message socket";

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` for poll(): -1 for none, 0 once passed.
int poll_ms(const std::optional<Clock::time_point>& deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

[[noreturn]] void peer_gone(const char* what) {
  throw ChannelError(ChannelError::Kind::kPeerGone, std::string(kWho) + ": the peer is gone (" + what + ")");
}

// Reads exactly `n` bytes. False when nothing at all came before the
// deadline and `may_time_out` (the message had not started).
bool read_exact(int fd, char* p, size_t n, const std::optional<Clock::time_point>& deadline, bool may_time_out) {
  size_t got = 0;
  while (got < n) {
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, poll_ms(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw detail::sys_error(std::string(kWho) + ": poll");
    }
    if (r == 0) {
      if (may_time_out && got == 0) return false;
      throw ChannelError(ChannelError::Kind::kProtocol, std::string(kWho) + ": a message was cut short (timed out)");
    }
    ssize_t k = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (k == 0) peer_gone("hung up");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) peer_gone("connection reset");
      throw detail::sys_error(std::string(kWho) + ": receive");
    }
    got += static_cast<size_t>(k);
  }
  return true;
}

}  // namespace

MessageSocket MessageSocket::connect(const std::string& name) {
  return MessageSocket(detail::connect_stream(name, kWho, "listener"));
}

void MessageSocket::send(uint32_t type, std::string_view body) {
  char head[16];
  uint32_t magic = kMagic;
  uint64_t len = body.size();
  std::memcpy(head, &magic, 4);
  std::memcpy(head + 4, &type, 4);
  std::memcpy(head + 8, &len, 8);
  iovec iov[2] = {{head, sizeof(head)}, {const_cast<char*>(body.data()), body.size()}};
  int first = 0;
  while (first < 2) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = static_cast<size_t>(2 - first);
    ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);  // a dead peer must be an error, not SIGPIPE
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) peer_gone("broken pipe");
      throw detail::sys_error(std::string(kWho) + ": send");
    }
    auto left = static_cast<size_t>(w);
    while (first < 2 && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < 2) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
}

std::optional<Message> MessageSocket::receive(std::chrono::milliseconds timeout) {
  std::optional<Clock::time_point> deadline;
  if (timeout.count() >= 0) deadline = Clock::now() + timeout;
  char head[16];
  if (!read_exact(fd_.get(), head, sizeof(head), deadline, true)) return std::nullopt;
  uint32_t magic;
  uint64_t len;
  Message m;
  std::memcpy(&magic, head, 4);
  std::memcpy(&m.type, head + 4, 4);
  std::memcpy(&len, head + 8, 8);
  if (magic != kMagic || len > kMaxBody)
    throw ChannelError(ChannelError::Kind::kProtocol, std::string(kWho) + ": the peer sent something that is not a message");
  m.body.resize(len);
  read_exact(fd_.get(), m.body.data(), len, deadline, false);
  return m;
}

MessageListener::MessageListener(const std::string& name) : fd_(detail::listen_stream(name, kWho)), name_(name) {}

MessageListener::~MessageListener() {
  fd_.reset();
  detail::remove_socket_file(name_);
}

std::optional<MessageSocket> MessageListener::accept() {
  for (;;) {
    if (stopped_) return std::nullopt;
    UniqueFd sock(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (sock) return MessageSocket(std::move(sock));
    if (stopped_) return std::nullopt;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    throw detail::sys_error(std::string(kWho) + ": accept at " + name_);
  }
}

void MessageListener::shutdown() {
  stopped_ = true;
  ::shutdown(fd_.get(), SHUT_RDWR);  // wakes a thread blocked in accept()
}

}  // namespace dpukit
