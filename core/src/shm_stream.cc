#include "dpukit/core/shm_stream.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <utility>

#include "unix_socket.h"

namespace dpukit {
namespace detail {

constexpr uint64_t kStreamMagic = 0x6470756b69747373ull;  // "dpukitss"
constexpr uint32_t kStreamVersion = 1;
constexpr const char* kWho = "shm stream";
enum Want : uint32_t { kWantData = 1, kWantRoom = 2 };

// The first bytes of the mapping. side[i] is written by side i, except that
// the other side clears `waiting` bits when it rings.
struct alignas(kCacheLine) ShmStreamShared {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
  uint64_t ring_off[2];  // ring i carries side i's bytes to the other side
  uint64_t total_bytes;
  struct alignas(kCacheLine) Side {
    std::atomic<uint32_t> waiting;       // Want bits: what this side sleeps for
    std::atomic<uint32_t> write_closed;  // no more bytes from this side
    std::atomic<uint32_t> closed;        // this side closed in order
  } side[2];
};

struct StreamHello {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t total_bytes;
};
struct StreamAck {
  uint64_t magic;
  uint32_t ok;
  uint32_t reserved;
};

namespace {
size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// What a received descriptor points at ("anon_inode:[eventfd]", "/memfd:..."):
// a peer must not make this side write into one of its files.
bool fd_is(int fd, std::string_view prefix) {
  char link[PATH_MAX];
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(proc.c_str(), link, sizeof link);
  return n > 0 && std::string_view(link, static_cast<size_t>(n)).starts_with(prefix);
}

ChannelError protocol_error(const std::string& what) {
  return ChannelError(ChannelError::Kind::kProtocol, std::string(kWho) + ": " + what);
}
}  // namespace
}  // namespace detail

using detail::kWantData;
using detail::kWantRoom;

ShmStream::ShmStream(ShmStream&& o) noexcept { *this = std::move(o); }

ShmStream& ShmStream::operator=(ShmStream&& o) noexcept {
  if (this != &o) {
    close();
    mem_ = std::move(o.mem_);
    shared_ = std::exchange(o.shared_, nullptr);
    tx_ = o.tx_;
    rx_ = o.rx_;
    for (int i = 0; i < 4; ++i) bells_[i] = std::move(o.bells_[i]);
    sock_ = std::move(o.sock_);
    side_ = o.side_;
    peer_ = o.peer_;
    closed_ = o.closed_;
    gone_ = o.gone_;
  }
  return *this;
}

ShmStream::~ShmStream() { close(); }

ShmStream ShmStream::offer(UniqueFd sock, const ShmStreamConfig& config) {
  const size_t rb = config.ring_bytes;
  if (rb < 4096 || rb > (size_t{1} << 30) || (rb & (rb - 1)))
    throw std::invalid_argument("shm stream: ring_bytes must be a power of two from 4 KiB to 1 GiB");
  const size_t off0 = detail::align_up(sizeof(detail::ShmStreamShared), kCacheLine);
  const size_t off1 = detail::align_up(off0 + SpscRing<uint8_t>::bytes_needed(rb), kCacheLine);
  const size_t total = detail::align_up(off1 + SpscRing<uint8_t>::bytes_needed(rb), 4096);
  ShmStream s;
  s.mem_ = SharedMemory::create("dpukit-shm-stream", total);
  auto* base = static_cast<uint8_t*>(s.mem_.data());
  auto* h = new (base) detail::ShmStreamShared{};
  h->version = detail::kStreamVersion;
  h->ring_bytes = rb;
  h->ring_off[0] = off0;
  h->ring_off[1] = off1;
  h->total_bytes = total;
  s.tx_ = SpscRing<uint8_t>::create(base + off0, rb);
  s.rx_ = SpscRing<uint8_t>::create(base + off1, rb);
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = detail::kStreamMagic;
  s.shared_ = h;
  s.side_ = 0;
  // Each doorbell is a socket pair: this side keeps one end of each (the
  // sleeping end of its own two, the ringing end of the peer's two) and sends
  // the other ends, which the peer holds at the same indexes.
  UniqueFd sent[4];
  for (int i = 0; i < 4; ++i) {
    auto [kept, given] = detail::make_doorbell(detail::kWho);
    s.bells_[i] = std::move(kept);
    sent[i] = std::move(given);
  }
  s.sock_ = std::move(sock);
  detail::StreamHello hello{detail::kStreamMagic, detail::kStreamVersion, 0, total};
  // Descriptor order: the mapping, then the doorbell ends by index.
  int fds[5] = {s.mem_.fd()};
  for (int i = 0; i < 4; ++i) fds[1 + i] = sent[i].get();
  detail::send_with_fds(s.sock_.get(), &hello, sizeof hello, fds, 5, detail::kWho);
  return s;
}

void ShmStream::take_ack(std::chrono::milliseconds timeout) {
  detail::StreamAck ack{};
  detail::recv_with_fds(sock_.get(), &ack, sizeof ack, nullptr, 0, timeout, detail::kWho);
  if (ack.magic != detail::kStreamMagic || ack.ok != 1) throw detail::protocol_error("the peer refused the stream");
  peer_ = detail::peer_pid_of(sock_.get());
}

ShmStream ShmStream::connect(const std::string& path, const ShmStreamConfig& config,
                             std::chrono::milliseconds timeout) {
  ShmStream s = offer(detail::connect_seqpacket(path, detail::kWho, "service"), config);
  s.take_ack(timeout);
  return s;
}

ShmStream ShmStream::accept_offer(UniqueFd sock, std::chrono::milliseconds timeout) {
  detail::StreamHello hello{};
  UniqueFd fds[5];
  int got = detail::recv_with_fds(sock.get(), &hello, sizeof hello, fds, 5, timeout, detail::kWho);
  if (hello.magic != detail::kStreamMagic) throw detail::protocol_error("the peer sent no shm stream offer");
  if (hello.version != detail::kStreamVersion)
    throw detail::protocol_error("offer of version " + std::to_string(hello.version) + ", this side speaks " +
                                 std::to_string(detail::kStreamVersion));
  if (got != 5) throw detail::protocol_error("an offer carries 5 descriptors, this one " + std::to_string(got));
  bool kinds_ok = detail::fd_is(fds[0].get(), "/memfd:");
  for (int i = 1; i < 5; ++i) kinds_ok = kinds_ok && detail::is_doorbell(fds[i].get());
  if (!kinds_ok)
    throw detail::protocol_error("an offer carries a memfd and four datagram sockets, this one something else");
  // A mapping the peer could shrink would make this side's next access a SIGBUS.
  const int seals = ::fcntl(fds[0].get(), F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_SEAL))
    throw detail::protocol_error("the offered memfd is not sealed against shrinking");
  ShmStream s;
  try {
    s.mem_ = SharedMemory::map(std::move(fds[0]));
  } catch (const std::exception& e) {
    throw detail::protocol_error(std::string("cannot map the offered memory: ") + e.what());
  }
  auto* base = static_cast<uint8_t*>(s.mem_.data());
  if (s.mem_.size() < sizeof(detail::ShmStreamShared)) throw detail::protocol_error("the offered mapping is too small");
  auto* h = reinterpret_cast<detail::ShmStreamShared*>(base);
  // The layout is copied before it is checked: the peer could change the
  // shared copy between a check and its use.
  detail::ShmStreamShared layout;
  std::memcpy(static_cast<void*>(&layout), h, offsetof(detail::ShmStreamShared, side));
  const uint64_t size = s.mem_.size(), rb = layout.ring_bytes, off0 = layout.ring_off[0], off1 = layout.ring_off[1];
  const uint64_t need = SpscRing<uint8_t>::bytes_needed(4096);  // the smallest ring (its header included)
  if (layout.magic != detail::kStreamMagic || layout.version != detail::kStreamVersion || layout.total_bytes != size ||
      layout.total_bytes != hello.total_bytes || off0 < sizeof(detail::ShmStreamShared) || off1 <= off0 ||
      off1 > size || need > size - off1 || rb < 4096 || (rb & (rb - 1)) || off0 % kCacheLine || off1 % kCacheLine)
    throw detail::protocol_error("inconsistent layout of the offered mapping");
  try {
    s.rx_ = SpscRing<uint8_t>::attach(base + off0, off1 - off0);
    s.tx_ = SpscRing<uint8_t>::attach(base + off1, size - off1);
  } catch (const std::exception& e) {
    throw detail::protocol_error(e.what());
  }
  if (s.rx_.capacity() != rb || s.tx_.capacity() != rb) throw detail::protocol_error("ring sizes do not match the offer");
  s.shared_ = h;
  s.side_ = 1;
  for (int i = 0; i < 4; ++i) s.bells_[i] = std::move(fds[1 + i]);
  s.sock_ = std::move(sock);
  s.peer_ = detail::peer_pid_of(s.sock_.get());
  detail::StreamAck ack{detail::kStreamMagic, 1, 0};
  detail::send_with_fds(s.sock_.get(), &ack, sizeof ack, nullptr, 0, detail::kWho);
  return s;
}

size_t ShmStream::ring_bytes() const { return shared_ ? shared_->ring_bytes : 0; }

void ShmStream::wake_peer_if(Bell b) {
  // Pairs with the fence in prepare_wait_*: either the peer sees our bytes
  // (or room) on its second look, or we see its flag here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t what = b == kData ? kWantData : kWantRoom;
  auto& w = shared_->side[1 - side_].waiting;
  if (w.load(std::memory_order_relaxed) & what) {
    w.fetch_and(~what, std::memory_order_relaxed);
    detail::ring_doorbell(bells_[peers(b)].get());
  }
}

size_t ShmStream::try_read(void* out, size_t max) {
  if (!shared_) throw std::logic_error("shm stream: read on a stream that is not open");
  size_t n = rx_.try_pop(static_cast<uint8_t*>(out), max);
  if (n) wake_peer_if(kRoom);
  return n;
}

size_t ShmStream::try_write(const void* data, size_t len) {
  if (!shared_ || closed_ || shared_->side[side_].write_closed.load(std::memory_order_relaxed))
    throw std::logic_error("shm stream: write after shutdown or close");
  if (peer_closed_in_order())
    throw ChannelError(ChannelError::Kind::kPeerClosed, "shm stream: the peer closed the stream");
  if (gone_) throw_peer_gone();
  size_t n = tx_.try_push(static_cast<const uint8_t*>(data), len);
  if (n) wake_peer_if(kData);
  return n;
}

bool ShmStream::at_eof() const {
  if (!shared_) return true;
  // `closed` alone counts too: a peer that set it without write_closed must
  // not leave this side believing more bytes may come (and spinning).
  const auto& peer = shared_->side[1 - side_];
  bool shut = peer.write_closed.load(std::memory_order_acquire) != 0 || peer.closed.load(std::memory_order_acquire) != 0;
  return shut && rx_.empty();
}

bool ShmStream::peer_closed_in_order() const {
  return shared_ && shared_->side[1 - side_].closed.load(std::memory_order_acquire) != 0;
}

bool ShmStream::peer_gone() {
  if (gone_ || !sock_) return true;
  // After the handshake the peer sends nothing: readable means hung up.
  pollfd p{sock_.get(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) > 0 && p.revents) gone_ = true;
  return gone_;
}

[[noreturn]] void ShmStream::throw_peer_gone() const {
  std::string who = peer_ ? " (pid " + std::to_string(peer_) + ")" : "";
  throw ChannelError(ChannelError::Kind::kPeerGone,
                     "shm stream: the peer" + who + " is gone: it died or hung up without closing the stream");
}

bool ShmStream::prepare_wait_readable() {
  if (readable() || gone_) return false;
  auto& w = shared_->side[side_].waiting;
  w.fetch_or(kWantData, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (readable()) {
    w.fetch_and(~kWantData, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool ShmStream::prepare_wait_writable() {
  if (writable() || gone_) return false;
  auto& w = shared_->side[side_].waiting;
  w.fetch_or(kWantRoom, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (writable()) {
    w.fetch_and(~kWantRoom, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ShmStream::clear_bell(Bell b) { detail::clear_doorbell(bells_[mine(b)].get()); }

// Sleeps until `ready` holds (true) or the peer hangs up (false). The poll's
// time limit bounds what a lost wake-up could cost.
bool ShmStream::wait_until(Bell b) {
  for (;;) {
    if (b == kData ? readable() : writable()) return true;
    if (peer_gone()) return false;
    if (!(b == kData ? prepare_wait_readable() : prepare_wait_writable())) continue;
    pollfd fds[2] = {{bells_[mine(b)].get(), POLLIN, 0}, {sock_.get(), POLLIN | POLLRDHUP, 0}};
    int n = ::poll(fds, 2, 100);
    if (n < 0 && errno != EINTR) throw detail::sys_error("shm stream: poll");
    if (n > 0 && (fds[0].revents & POLLIN)) clear_bell(b);
    if (n > 0 && fds[1].revents) gone_ = true;
  }
}

size_t ShmStream::read(void* out, size_t max) {
  if (max == 0) return 0;
  for (;;) {
    if (size_t n = try_read(out, max)) return n;
    if (at_eof()) return 0;
    if (gone_) {
      if (peer_closed_in_order()) return 0;
      throw_peer_gone();
    }
    wait_until(kData);
  }
}

void ShmStream::write_all(const void* data, size_t len) {
  auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    size_t n = try_write(p, len);
    p += n;
    len -= n;
    if (len > 0 && n == 0 && !wait_until(kRoom) && !peer_closed_in_order()) throw_peer_gone();
  }
}

void ShmStream::shutdown_write() {
  if (!shared_ || closed_) return;
  shared_->side[side_].write_closed.store(1, std::memory_order_release);
  wake_peer_if(kData);
}

void ShmStream::close() {
  if (!shared_ || closed_) return;
  closed_ = true;
  shared_->side[side_].write_closed.store(1, std::memory_order_release);
  shared_->side[side_].closed.store(1, std::memory_order_release);
  // Whatever the peer waits for (bytes, room) has an answer now.
  wake_peer_if(kData);
  wake_peer_if(kRoom);
  sock_.reset();
}

// ---------------------------------------------------------------- listener

ShmStreamListener::ShmStreamListener(const std::string& path)
    : fd_(detail::listen_seqpacket(path, detail::kWho)), path_(path) {}

UniqueFd ShmStreamListener::accept_connection(std::chrono::milliseconds timeout) {
  return detail::accept_seqpacket(fd_.get(), path_, timeout, detail::kWho);
}

UniqueFd ShmStreamListener::try_accept(int& error) { return detail::try_accept_seqpacket(fd_.get(), error); }

void ShmStreamListener::close() {
  if (!fd_) return;
  fd_.reset();
  detail::remove_socket_file(path_);
}

ShmStream ShmStreamListener::accept(std::chrono::milliseconds timeout) {
  return ShmStream::accept_offer(accept_connection(timeout), std::chrono::seconds(10));
}

}  // namespace dpukit
