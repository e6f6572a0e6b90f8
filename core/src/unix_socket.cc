#include "unix_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace dpukit::detail {

namespace {
// "@name" is a name in Linux's abstract socket namespace (no file, gone with
// the listener); anything else is a file path.
sockaddr_un unix_address(const std::string& name, socklen_t& len, const char* who) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() >= sizeof(addr.sun_path))
    throw ChannelError(ChannelError::Kind::kSystem, std::string(who) + ": bad socket name (empty or too long): " + name);
  std::memcpy(addr.sun_path, name.c_str(), name.size() + 1);
  bool abstract = name[0] == '@';
  if (abstract) addr.sun_path[0] = '\0';
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 0 : 1));
  return addr;
}

UniqueFd listen_unix(const std::string& name, int type, const char* who) {
  socklen_t len;
  sockaddr_un addr = unix_address(name, len, who);
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) throw sys_error(std::string(who) + ": socket");
  remove_socket_file(name);  // a stale socket from a dead process
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd.get(), 128) != 0)
    throw sys_error(std::string(who) + ": cannot listen at " + name);
  return fd;
}

UniqueFd connect_unix(const std::string& name, int type, const char* who, const char* peer) {
  socklen_t len;
  sockaddr_un addr = unix_address(name, len, who);
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) throw sys_error(std::string(who) + ": socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    throw sys_error(std::string(who) + ": no " + peer + " listening at " + name);
  return fd;
}
}  // namespace

void remove_socket_file(const std::string& name) {
  if (!name.empty() && name[0] != '@') ::unlink(name.c_str());
}

ChannelError sys_error(const std::string& what) {
  return ChannelError(ChannelError::Kind::kSystem, what + ": " + std::strerror(errno));
}

pid_t peer_pid_of(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

void send_with_fds(int sock, const void* data, size_t len, const int* fds, int nfds, const char* who) {
  iovec iov{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 8) throw std::invalid_argument(std::string(who) + ": at most 8 descriptors per message");
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(len)) throw sys_error(std::string(who) + ": handshake send");
}

int recv_with_fds(int sock, void* data, size_t len, UniqueFd* fds, int nfds, std::chrono::milliseconds timeout,
                  const char* who) {
  pollfd p{sock, POLLIN, 0};
  int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (r < 0) throw sys_error(std::string(who) + ": handshake poll");
  if (r == 0) throw ChannelError(ChannelError::Kind::kProtocol, std::string(who) + ": handshake timed out");
  iovec iov{data, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == ECONNRESET) throw ChannelError(ChannelError::Kind::kPeerGone, std::string(who) + ": peer reset the handshake");
    throw sys_error(std::string(who) + ": handshake receive");
  }
  int got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got < nfds) fds[got++].reset(fd); else ::close(fd);
    }
  }
  if (n == 0) throw ChannelError(ChannelError::Kind::kPeerGone, std::string(who) + ": peer hung up during the handshake");
  if (static_cast<size_t>(n) != len || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
    throw ChannelError(ChannelError::Kind::kProtocol, std::string(who) + ": malformed handshake message");
  return got;
}

UniqueFd make_eventfd(const char* who) {
  UniqueFd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd) throw sys_error(std::string(who) + ": eventfd");
  return fd;
}

std::pair<UniqueFd, UniqueFd> make_doorbell(const char* who) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    throw sys_error(std::string(who) + ": doorbell socketpair");
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

void ring_doorbell(int ring_end) {
  const char one = 1;
  // EAGAIN: the sleeper's queue is full, so it is rung already.
  [[maybe_unused]] ssize_t r = ::send(ring_end, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void clear_doorbell(int wait_end) {
  char buf[64];
  // Bounded: a peer ringing without pause must not keep this loop going;
  // what is left keeps the doorbell readable, and the waiter looks again.
  for (int i = 0; i < 64 && ::recv(wait_end, buf, sizeof buf, MSG_DONTWAIT) > 0; ++i) {
  }
}

bool is_doorbell(int fd) {
  int type = 0, domain = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_DGRAM) return false;
  len = sizeof domain;
  return ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

UniqueFd try_accept_seqpacket(int listen_fd, int& error) {
  error = 0;
  UniqueFd sock(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!sock && errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR) error = errno;
  return sock;
}

UniqueFd listen_seqpacket(const std::string& path, const char* who) { return listen_unix(path, SOCK_SEQPACKET, who); }

UniqueFd connect_seqpacket(const std::string& path, const char* who, const char* peer) {
  return connect_unix(path, SOCK_SEQPACKET, who, peer);
}

UniqueFd listen_stream(const std::string& name, const char* who) { return listen_unix(name, SOCK_STREAM, who); }

UniqueFd connect_stream(const std::string& name, const char* who, const char* peer) {
  return connect_unix(name, SOCK_STREAM, who, peer);
}

UniqueFd accept_seqpacket(int listen_fd, const std::string& path, std::chrono::milliseconds timeout, const char* who) {
  pollfd p{listen_fd, POLLIN, 0};
  int r = ::poll(&p, 1, timeout.count() < 0 ? -1 : static_cast<int>(timeout.count()));
  if (r < 0) throw sys_error(std::string(who) + ": accept poll");
  if (r == 0) throw ChannelError(ChannelError::Kind::kSystem, std::string(who) + ": no peer connected to " + path + " in time");
  UniqueFd sock(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!sock) throw sys_error(std::string(who) + ": accept");
  return sock;
}

}  // namespace dpukit::detail
