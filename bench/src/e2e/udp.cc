#include "udp.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dpukit::bench::e2e {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

}  // namespace

sockaddr_in parse_endpoint(const std::string& host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    throw std::invalid_argument("'" + host + "' is not an IPv4 address");
  return a;
}

std::string endpoint_str(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

UdpSocket::UdpSocket() : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
  if (fd_ < 0) fail("socket(AF_INET, SOCK_DGRAM)");
}

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) ::close(fd_);
}

void UdpSocket::bind(const sockaddr_in& at) {
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) fail("bind " + endpoint_str(at));
}

void UdpSocket::connect(const sockaddr_in& to) {
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) fail("connect " + endpoint_str(to));
}

sockaddr_in UdpSocket::local() const {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) fail("getsockname");
  return a;
}

static size_t set_buffer(int fd, int force_opt, int opt, size_t bytes) {
  const int v = static_cast<int>(std::min<size_t>(bytes, 1u << 30));
  if (setsockopt(fd, SOL_SOCKET, force_opt, &v, sizeof v) != 0) setsockopt(fd, SOL_SOCKET, opt, &v, sizeof v);
  int got = 0;
  socklen_t len = sizeof got;
  getsockopt(fd, SOL_SOCKET, opt, &got, &len);
  return static_cast<size_t>(got);  // the kernel doubles the request for its bookkeeping, and reports that
}

size_t UdpSocket::set_rcvbuf(size_t bytes) { return set_buffer(fd_, SO_RCVBUFFORCE, SO_RCVBUF, bytes); }
size_t UdpSocket::set_sndbuf(size_t bytes) { return set_buffer(fd_, SO_SNDBUFFORCE, SO_SNDBUF, bytes); }

void UdpSocket::set_recv_timeout_us(uint64_t us) {
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) fail("setsockopt SO_RCVTIMEO");
}

RecvBatch::RecvBatch(unsigned slots) : msgs_(slots), iov_(slots) {
  for (unsigned i = 0; i < slots; ++i) {
    std::memset(&msgs_[i], 0, sizeof msgs_[i]);
    msgs_[i].msg_hdr.msg_iov = &iov_[i];
    msgs_[i].msg_hdr.msg_iovlen = 1;
  }
}

void RecvBatch::set_buffer(unsigned i, uint8_t* data, size_t capacity, sockaddr_in* from) {
  iov_[i] = {data, capacity};
  msgs_[i].msg_hdr.msg_name = from;
  msgs_[i].msg_hdr.msg_namelen = from ? sizeof(sockaddr_in) : 0;
}

unsigned RecvBatch::receive(int fd, unsigned n, bool wait) {
  n = std::min<unsigned>(n, slots());
  for (unsigned i = 0; i < n; ++i) {
    if (msgs_[i].msg_hdr.msg_name) msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    msgs_[i].msg_hdr.msg_flags = 0;
    msgs_[i].msg_len = 0;
  }
  const int r = recvmmsg(fd, msgs_.data(), n, wait ? MSG_WAITFORONE : MSG_DONTWAIT, nullptr);
  if (r >= 0) return static_cast<unsigned>(r);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  if (errno == ECONNREFUSED) {  // a connected socket's earlier datagram met a closed port (ICMP)
    ++refused_;
    return 0;
  }
  fail("recvmmsg");
}

UdpKernelCounters read_udp_counters() {
  UdpKernelCounters c;
  std::ifstream in("/proc/net/snmp");
  std::string names, values;
  while (std::getline(in, names)) {
    if (names.rfind("Udp:", 0) != 0) continue;
    if (!std::getline(in, values)) break;
    std::istringstream n(names), v(values);
    std::string key, val;
    n >> key;
    v >> val;
    while (n >> key && v >> val) {
      const uint64_t x = std::stoull(val);
      if (key == "InDatagrams") c.in_datagrams = x;
      else if (key == "RcvbufErrors") c.rcvbuf_errors = x;
      else if (key == "InErrors") c.in_errors = x;
      else if (key == "SndbufErrors") c.sndbuf_errors = x;
    }
    c.available = true;
    break;
  }
  return c;
}

}  // namespace dpukit::bench::e2e
