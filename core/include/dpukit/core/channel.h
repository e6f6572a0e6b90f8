// The host<->dpu channel: a request ring and a completion ring with eventfd
// doorbells, plus a payload region that the dpu side copies out of itself (the
// "DMA read"), all in one shared mapping. It stands for DOCA Comch
// notifications plus DMA on a real DPU.
//
// The host side creates the mapping and the doorbells and hands them to the
// dpu side over a Unix socket (SCM_RIGHTS). The socket stays open for the life
// of the channel: its hang-up is how each side learns, at once, that the other
// died. A side that waits on a full ring or an empty one sleeps on its
// doorbell, and the other side rings it only when it saw the sleeper's flag.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dpukit {

struct ChannelConfig {
  size_t request_slots = 4096;       // power of two
  size_t completion_slots = 4096;    // power of two
  size_t payload_bytes = 32u << 20;  // power of two; the largest single payload
  uint32_t spin = 2000;              // polls of a ring before sleeping on the doorbell
};

// What the host asks for. `op` and `args` mean whatever the system using the
// channel says; the channel only moves them.
struct ChannelRequest {
  uint64_t id;
  uint32_t op;
  uint32_t payload_len;
  uint64_t payload_pos;  // absolute position in the payload region (internal)
  uint64_t args[5];
};
static_assert(sizeof(ChannelRequest) == 64);

struct ChannelCompletion {
  uint64_t id;
  int64_t result;
  uint32_t op;
  int32_t status;  // 0 = success, otherwise a negative errno
  uint64_t arg;
};
static_assert(sizeof(ChannelCompletion) == 32);

class ChannelError : public std::runtime_error {
 public:
  enum class Kind {
    kPeerGone,     // the other side died or dropped the connection
    kPeerClosed,   // the other side closed the channel in order
    kProtocol,     // the other side sent something that is not a channel
    kSystem,       // a system call failed
  };
  ChannelError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

namespace detail {
struct ChannelState;  // the mapping, the rings, the doorbells, the socket
}

// One thread submits (submit, try_submit, reserve/commit, close) and one
// thread — the same or another — takes completions.
class ChannelHost {
 public:
  // Connects to a dpu side listening at `socket_path` (see ChannelListener).
  static ChannelHost connect(const std::string& socket_path, const ChannelConfig& config = {});

  ChannelHost(ChannelHost&&) noexcept;
  ChannelHost& operator=(ChannelHost&&) noexcept;
  ~ChannelHost();  // closes in order

  // Posts one request, copying the payload into the shared region. Waits while
  // the request ring or the payload region is full (back-pressure). Throws
  // ChannelError if the dpu side is gone, std::invalid_argument if the payload
  // can never fit.
  void submit(uint32_t op, uint64_t id, std::span<const uint8_t> payload = {},
              std::initializer_list<uint64_t> args = {});
  // The same without waiting: false when there is no room now.
  bool try_submit(uint32_t op, uint64_t id, std::span<const uint8_t> payload = {},
                  std::initializer_list<uint64_t> args = {});

  // Zero-copy submission: reserve() waits for `len` contiguous bytes of the
  // payload region (and a request slot) and returns them; the caller fills
  // them in place and commit() posts the request with the first `len` bytes
  // of the reservation (the rest is given back). Nothing else may be
  // submitted between the two. cancel_reservation() gives it all back.
  std::span<uint8_t> reserve(size_t len);
  void commit(uint32_t op, uint64_t id, size_t len, std::initializer_list<uint64_t> args = {});
  void cancel_reservation();
  bool has_reservation() const { return reserved_; }

  // Completions posted so far, without waiting.
  size_t poll_completions(ChannelCompletion* out, size_t max);
  // Waits up to `timeout` for at least one completion; 0 on timeout. Throws
  // ChannelError when the dpu side is gone and nothing is left to read.
  size_t wait_completions(ChannelCompletion* out, size_t max, std::chrono::milliseconds timeout);

  // Tells the dpu side that no more requests come; it drains and stops.
  void close();

  pid_t peer_pid() const;
  size_t payload_capacity() const;

 private:
  friend std::pair<ChannelHost, class ChannelDpu> make_channel_pair(const ChannelConfig&);
  explicit ChannelHost(std::unique_ptr<detail::ChannelState> s);
  bool post(uint32_t op, uint64_t id, std::span<const uint8_t> payload,
            std::initializer_list<uint64_t> args, bool wait);
  std::optional<uint64_t> make_room(uint64_t len, bool wait);
  void push(uint32_t op, uint64_t id, uint64_t pos, uint64_t len, std::initializer_list<uint64_t> args);
  std::unique_ptr<detail::ChannelState> s_;
  uint64_t payload_head_ = 0;
  bool reserved_ = false;
  uint64_t reserved_pos_ = 0, reserved_len_ = 0;
};

class ChannelDpu {
 public:
  struct Message {
    ChannelRequest request;
    std::span<const uint8_t> payload;  // in the dpu side's own buffer, valid until the next receive
  };

  ChannelDpu(ChannelDpu&&) noexcept;
  ChannelDpu& operator=(ChannelDpu&&) noexcept;
  ~ChannelDpu();

  // Takes up to `max` requests, copying their payloads out of the shared
  // region into this side's buffer and releasing the region. Waits up to
  // `timeout` for the first one. Returns 0 on timeout, or once the host closed
  // in order and everything was drained (then closed() is true). Throws
  // ChannelError(kPeerGone) when the host died.
  size_t receive(std::vector<Message>& out, size_t max, std::chrono::milliseconds timeout);

  // Posts completions; waits while the completion ring is full.
  void complete(std::span<const ChannelCompletion> completions);
  void complete(const ChannelCompletion& c) { complete(std::span(&c, 1)); }

  bool closed() const { return closed_; }
  void close();
  pid_t peer_pid() const;

 private:
  friend class ChannelListener;
  friend std::pair<ChannelHost, ChannelDpu> make_channel_pair(const ChannelConfig&);
  explicit ChannelDpu(std::unique_ptr<detail::ChannelState> s);
  size_t pop_batch(size_t max);
  std::unique_ptr<detail::ChannelState> s_;
  std::vector<ChannelRequest> requests_;
  std::vector<uint8_t> buffer_;
  bool closed_ = false;
};

// The dpu side's endpoint: a listening Unix socket.
class ChannelListener {
 public:
  explicit ChannelListener(const std::string& socket_path);  // replaces a stale socket file
  ChannelListener(ChannelListener&&) noexcept;
  ChannelListener& operator=(ChannelListener&&) noexcept;
  ~ChannelListener();  // unlinks the socket file

  // Waits up to `timeout` (negative: forever) for a host; throws ChannelError on timeout.
  ChannelDpu accept(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Both ends in one process, for a host thread and a dpu thread.
std::pair<ChannelHost, ChannelDpu> make_channel_pair(const ChannelConfig& config = {});

}  // namespace dpukit
