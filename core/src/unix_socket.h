// Unix-socket plumbing shared by the channel, the shared-memory stream and
// the message socket (private to core): passing descriptors (SCM_RIGHTS),
// eventfd doorbells, and the listening and connecting of SOCK_SEQPACKET
// sockets (whose message boundaries keep a handshake in one piece) and of
// SOCK_STREAM ones.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>

#include "dpukit/core/channel.h"
#include "dpukit/core/shm.h"

namespace dpukit::detail {

// ChannelError(kSystem) with errno's text: "what: strerror(errno)".
ChannelError sys_error(const std::string& what);

pid_t peer_pid_of(int sock);

// Sends `len` bytes and `nfds` descriptors (at most 8) in one message. `who` prefixes errors.
void send_with_fds(int sock, const void* data, size_t len, const int* fds, int nfds, const char* who);

// Receives one message of exactly `len` bytes and up to `nfds` descriptors,
// waiting up to `timeout` (0: only what is there now); returns how many
// descriptors came. Throws ChannelError: kPeerGone on a hang-up, kProtocol on
// a message of another size or a time-out.
int recv_with_fds(int sock, void* data, size_t len, UniqueFd* fds, int nfds, std::chrono::milliseconds timeout,
                  const char* who);

UniqueFd make_eventfd(const char* who);  // non-blocking, close-on-exec

// A doorbell shared with a peer that may misbehave: a SOCK_DGRAM socket pair
// (first: the end that sleeps and clears, second: the end that rings). Every
// call on it passes MSG_DONTWAIT, so neither side depends on a file flag the
// other could clear (an eventfd's O_NONBLOCK is shared with the peer).
std::pair<UniqueFd, UniqueFd> make_doorbell(const char* who);
void ring_doorbell(int ring_end);
void clear_doorbell(int wait_end);
bool is_doorbell(int fd);  // an AF_UNIX SOCK_DGRAM socket

// Socket names: "@name" is in Linux's abstract namespace, anything else a path.
// Removes the socket file at `name` (nothing for an abstract name).
void remove_socket_file(const std::string& name);

// A SOCK_SEQPACKET Unix socket listening at `path` (a stale socket file is replaced).
UniqueFd listen_seqpacket(const std::string& path, const char* who);
// A SOCK_SEQPACKET Unix socket connected to `path` (blocking); `peer` names
// what should listen there, for the error.
UniqueFd connect_seqpacket(const std::string& path, const char* who, const char* peer);
// The same for SOCK_STREAM sockets (message_socket.h frames messages on them).
UniqueFd listen_stream(const std::string& name, const char* who);
UniqueFd connect_stream(const std::string& name, const char* who, const char* peer);
// Accepts one connection, waiting up to `timeout` (negative: forever).
UniqueFd accept_seqpacket(int listen_fd, const std::string& path, std::chrono::milliseconds timeout, const char* who);
// Without waiting: a connection, or none (`error` 0: nobody there; else the errno of a real failure).
UniqueFd try_accept_seqpacket(int listen_fd, int& error);

}  // namespace dpukit::detail
