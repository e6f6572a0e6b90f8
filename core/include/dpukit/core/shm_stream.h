// A byte stream over shared memory: two SPSC byte rings (one per direction)
// in one sealed memfd mapping, doorbells (datagram socket pairs), and a SOCK_SEQPACKET
// Unix socket that carries the handshake and then stays open so that each
// side learns at once when the other dies. It stands for the paper's
// "socket direct" (FlatProxy §IV): an SR-IOV queue bound to a socket's
// memory, so that bytes between a service and the node proxy never cross the
// kernel's TCP/IP stack.
//
// The connecting side (the proxy, reaching a service) lays out the mapping
// and the doorbells and offers them over the socket; the accepting side (the
// service) maps them and answers with an ack. Each side writes one ring and
// reads the other. A side that finds its ring empty (or full) sets its
// waiting flag, checks again, then sleeps on its doorbell; the other side
// rings the doorbell only when it sees the flag, so a busy stream makes no
// system call per transfer. Each side has two doorbells, one for bytes and
// one for room, so that a reader and a writer of one side never take each
// other's wake-ups.
//
// A stream is used by one thread at a time (a reader and a writer may be the
// same thread or two).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dpukit/core/channel.h"  // ChannelError: what every failure throws
#include "dpukit/core/ring.h"
#include "dpukit/core/shm.h"

namespace dpukit {

struct ShmStreamConfig {
  size_t ring_bytes = 256 * 1024;  // each direction; a power of two, 4 KiB .. 1 GiB
};

namespace detail {
struct ShmStreamShared;
}

class ShmStream {
 public:
  ShmStream() = default;
  ShmStream(ShmStream&&) noexcept;
  ShmStream& operator=(ShmStream&&) noexcept;
  ~ShmStream();  // close()

  // Connecting side, in two steps so that an event loop need not block:
  // offer() lays out the rings and sends them over `sock` (a connected
  // SOCK_SEQPACKET Unix socket); take_ack() reads the peer's answer, waiting
  // up to `timeout` (0: it must be there). The stream carries bytes after the ack.
  static ShmStream offer(UniqueFd sock, const ShmStreamConfig& config = {});
  void take_ack(std::chrono::milliseconds timeout);
  // Both steps, blocking: connects to a service's attach point at `path`.
  static ShmStream connect(const std::string& path, const ShmStreamConfig& config = {},
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // Accepting side: receives an offer on `sock` (waiting up to `timeout`),
  // checks it, maps it and acks. Throws ChannelError(kProtocol) on anything
  // that is not a valid offer; the caller's listener keeps serving.
  static ShmStream accept_offer(UniqueFd sock, std::chrono::milliseconds timeout);

  bool is_open() const { return shared_ != nullptr && !closed_; }

  // Non-blocking transfer. try_read: bytes read, 0 when the ring is empty
  // (then see at_eof() and peer_gone()). try_write: bytes taken, 0 when the
  // ring is full; throws ChannelError(kPeerClosed/kPeerGone) when nobody
  // will read them.
  size_t try_read(void* out, size_t max);
  size_t try_write(const void* data, size_t len);
  // The peer shut its sending side and everything it sent was read.
  bool at_eof() const;
  // The peer's socket hung up (it closed or died). Polls the socket.
  bool peer_gone();
  // The peer closed in order (shutdown_write()/close() ran before it went).
  bool peer_closed_in_order() const;

  // Before sleeping on readable_fd() / writable_fd(): announce what this
  // side waits for. They return false when the condition already holds (do
  // not sleep).
  bool prepare_wait_readable();
  bool prepare_wait_writable();
  // The doorbells to sleep on (readable when rung), and their clearing after a wake-up.
  int readable_fd() const { return bells_[mine(kData)].get(); }
  int writable_fd() const { return bells_[mine(kRoom)].get(); }
  void clear_readable() { clear_bell(kData); }
  void clear_writable() { clear_bell(kRoom); }
  // Readable (or hung up) once the peer is gone.
  int socket_fd() const { return sock_.get(); }

  // Blocking transfer for plain threaded services. read(): at least one
  // byte, or 0 at EOF; write_all(): every byte. Both throw
  // ChannelError(kPeerGone) when the peer died (read: once its bytes were taken).
  size_t read(void* out, size_t max);
  void write_all(const void* data, size_t len);

  // No more bytes from this side; the peer reads EOF after the last one.
  void shutdown_write();
  // shutdown_write() and hang up.
  void close();

  size_t ring_bytes() const;
  pid_t peer_pid() const { return peer_; }

 private:
  enum Bell { kData = 0, kRoom = 1 };
  int mine(Bell b) const { return side_ * 2 + b; }
  int peers(Bell b) const { return (1 - side_) * 2 + b; }
  void clear_bell(Bell b);
  void wake_peer_if(Bell b);
  bool wait_until(Bell b);
  bool readable() { return !rx_.empty() || at_eof() || peer_closed_in_order(); }
  bool writable() { return peer_closed_in_order() || tx_.free_slots() > 0; }  // a closed peer: the write fails
  [[noreturn]] void throw_peer_gone() const;

  SharedMemory mem_;
  detail::ShmStreamShared* shared_ = nullptr;
  SpscRing<uint8_t> tx_, rx_;
  UniqueFd bells_[4];  // [side * 2 + Bell]: the sleeping ends of this side's two, the ringing ends of the peer's
  UniqueFd sock_;
  int side_ = 0;  // 0: the connecting side, 1: the accepting side
  pid_t peer_ = 0;
  bool closed_ = false, gone_ = false;
};

// The accepting side's endpoint: a SOCK_SEQPACKET Unix socket at `path`.
class ShmStreamListener {
 public:
  explicit ShmStreamListener(const std::string& path);
  ShmStreamListener(ShmStreamListener&&) noexcept = default;
  ShmStreamListener& operator=(ShmStreamListener&&) noexcept = default;
  ~ShmStreamListener() { close(); }

  // A connection whose offer has not been read yet (for an event loop, which
  // then calls ShmStream::accept_offer when it is readable).
  UniqueFd accept_connection(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  // Without waiting: a connection, or none (`error` 0: nobody there, else
  // the errno of a real failure, such as running out of descriptors).
  UniqueFd try_accept(int& error);
  // Both steps, blocking.
  ShmStream accept(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  // Stops listening and removes the socket file (the destructor does it too).
  void close();
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  UniqueFd fd_;
  std::string path_;
};

}  // namespace dpukit
