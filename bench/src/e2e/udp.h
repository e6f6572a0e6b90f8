// UDP sockets and batched receive/send (recvmmsg / sendmmsg) for the
// end-to-end client and server.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dpukit::bench::e2e {

// "10.0.0.1:9000" -> address; port 0 allowed. Throws std::invalid_argument.
sockaddr_in parse_endpoint(const std::string& host, uint16_t port);
std::string endpoint_str(const sockaddr_in& a);

class UdpSocket {
 public:
  UdpSocket();  // throws std::runtime_error with errno's text
  ~UdpSocket();
  UdpSocket(UdpSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  UdpSocket& operator=(UdpSocket&&) = delete;

  int fd() const { return fd_; }
  void bind(const sockaddr_in& at);
  void connect(const sockaddr_in& to);
  sockaddr_in local() const;
  // Asks for `bytes` of receive (send) buffer, beyond the sysctl limit when
  // allowed (SO_RCVBUFFORCE needs CAP_NET_ADMIN); returns what the kernel set.
  size_t set_rcvbuf(size_t bytes);
  size_t set_sndbuf(size_t bytes);
  // A blocking receive returns after `us` with nothing (EAGAIN), so that a
  // loop can look at its stop flag.
  void set_recv_timeout_us(uint64_t us);

 private:
  int fd_ = -1;
};

// Receive slots for recvmmsg; each slot's buffer is the caller's (so that a
// pipeline can receive straight into its own buffer pool).
class RecvBatch {
 public:
  explicit RecvBatch(unsigned slots);
  unsigned slots() const { return static_cast<unsigned>(msgs_.size()); }
  void set_buffer(unsigned i, uint8_t* data, size_t capacity, sockaddr_in* from);
  // recvmmsg into the first `n` slots: with `wait`, blocks for the first
  // datagram (up to the socket's receive timeout) and takes what else is
  // queued; without, returns at once. Returns the count, 0 on timeout or
  // nothing queued or a signal; throws std::runtime_error on other errors.
  unsigned receive(int fd, unsigned n, bool wait);
  size_t length(unsigned i) const { return msgs_[i].msg_len; }
  bool truncated(unsigned i) const { return msgs_[i].msg_hdr.msg_flags & MSG_TRUNC; }
  // ICMP port-unreachable errors reported to a connected socket (no server there yet, or any more).
  uint64_t refused() const { return refused_; }

 private:
  uint64_t refused_ = 0;
  std::vector<mmsghdr> msgs_;
  std::vector<iovec> iov_;
};

// Reads the kernel's UDP counters of this network namespace (/proc/net/snmp):
// datagrams dropped for a full receive buffer, and all receive errors.
struct UdpKernelCounters {
  uint64_t in_datagrams = 0, rcvbuf_errors = 0, in_errors = 0, sndbuf_errors = 0;
  bool available = false;
};
UdpKernelCounters read_udp_counters();

}  // namespace dpukit::bench::e2e
