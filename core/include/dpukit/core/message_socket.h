// Messages over a Unix stream socket: for control traffic that the channel's
// rings do not fit — a request whose answer comes back much later and can be
// of any size (a whole job handed to a worker process, and its result).
// Each message is one frame: a 16-byte header (magic, type, body length),
// then the body. The type means whatever the system using it says.
//
// Socket names: "@name" is in Linux's abstract namespace (no file, gone with
// the listener); anything else is a file path.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dpukit/core/channel.h"  // ChannelError: what every failure throws
#include "dpukit/core/shm.h"

namespace dpukit {

struct Message {
  uint32_t type = 0;
  std::string body;
};

class MessageSocket {
 public:
  static constexpr uint64_t kMaxBody = 1ull << 30;

  MessageSocket() = default;
  explicit MessageSocket(UniqueFd fd) : fd_(std::move(fd)) {}
  // Throws ChannelError(kSystem) naming `name` when nobody listens there.
  static MessageSocket connect(const std::string& name);

  // Throws ChannelError(kPeerGone) when the peer is gone.
  void send(uint32_t type, std::string_view body = {});
  // The next message, waiting up to `timeout` for all of it (negative:
  // forever); nullopt when it did not start in time. Throws ChannelError:
  // kPeerGone when the peer hung up or died, kProtocol on a frame that is
  // not a message or one cut short by the time-out.
  std::optional<Message> receive(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));

  explicit operator bool() const { return static_cast<bool>(fd_); }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

class MessageListener {
 public:
  explicit MessageListener(const std::string& name);  // a stale socket file is replaced
  ~MessageListener();                                 // removes the socket file
  MessageListener(const MessageListener&) = delete;
  MessageListener& operator=(const MessageListener&) = delete;

  // The next connection, waiting for it; nullopt once shutdown() was called.
  std::optional<MessageSocket> accept();
  // Takes no more connections and wakes accept(); safe from any thread.
  void shutdown();
  const std::string& name() const { return name_; }

 private:
  UniqueFd fd_;
  std::string name_;
  std::atomic<bool> stopped_{false};
};

}  // namespace dpukit
