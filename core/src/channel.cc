#include "dpukit/core/channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "dpukit/core/copy.h"
#include "dpukit/core/ring.h"
#include "dpukit/core/shm.h"
#include "unix_socket.h"

namespace dpukit {
namespace detail {
namespace {

constexpr uint64_t kChannelMagic = 0x6470756b69746368ull;  // "dpukitch"
constexpr uint32_t kChannelVersion = 2;
using Clock = std::chrono::steady_clock;


size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

bool pow2(size_t v) { return v && !(v & (v - 1)); }

// The first bytes of the shared mapping.
struct alignas(kCacheLine) ChannelShared {
  uint64_t magic;
  uint32_t version;
  uint32_t spin;
  uint64_t request_slots, completion_slots, payload_bytes;
  uint64_t request_ring_off, completion_ring_off, payload_off, total_bytes;
  // Sleepers per doorbell (see Bell), indexed [side * 2 + bell], each on a
  // line of its own: a side writes its own and reads the other's.
  struct alignas(kCacheLine) Sleepers {
    std::atomic<uint32_t> n;
  } sleeping[4];
  alignas(kCacheLine) std::atomic<uint64_t> payload_tail;  // released by the dpu side
  alignas(kCacheLine) std::atomic<uint32_t> host_closed;
  std::atomic<uint32_t> dpu_closed;
};

struct Hello {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t total_bytes;
};
struct Ack {
  uint64_t magic;
  uint32_t ok;
  uint32_t reserved;
};

}  // namespace

// Each side has two doorbells, so that two threads of one side can wait at
// once without taking each other's wake-ups: kArrival (host: completions
// arrived; dpu: requests arrived or the host closed) and kRoom (host: room in
// the request ring and payload region; dpu: room in the completion ring).
enum Bell { kArrival = 0, kRoom = 1 };
constexpr int kBells = 4;  // [side * 2 + bell], side 0 = host, 1 = dpu

// Cache-line aligned: the two ends of an in-process pair must not share a line.
struct alignas(kCacheLine) ChannelState {
  SharedMemory shm;
  ChannelShared* hdr = nullptr;
  SpscRing<ChannelRequest> requests;
  SpscRing<ChannelCompletion> completions;
  uint8_t* payload = nullptr;
  UniqueFd bells[kBells];  // eventfds: a side sleeps on its own, the other side rings them
  UniqueFd sock;       // liveness: its hang-up means the peer is gone
  pid_t peer = 0;
  bool is_host = false;
  std::atomic<bool> peer_hung_up{false};  // a host may wait in two threads (submitter, completion reaper)

  int mine(Bell b) const { return (is_host ? 0 : 2) + b; }
  int peers(Bell b) const { return (is_host ? 2 : 0) + b; }
  const char* peer_name() const { return is_host ? "dpu" : "host"; }

  // After making progress the peer may wait for: wake it if it sleeps.
  void ring_peer(Bell b) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (hdr->sleeping[peers(b)].n.load(std::memory_order_relaxed)) ring_peer_always(b);
  }
  void ring_peer_always(Bell b) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(bells[peers(b)].get(), &one, sizeof(one));
  }

  // Waits until ready() holds (true), the deadline passes or the peer hangs up (false).
  template <class Ready>
  bool wait(Bell bell, Ready ready, Clock::time_point deadline) {
    for (uint32_t i = 0; i < hdr->spin; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    for (;;) {
      if (ready()) return true;
      if (peer_hung_up) return false;
      int timeout_ms = 100;  // also bounds how long a lost wake-up could cost
      if (deadline != Clock::time_point::max()) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return false;
        timeout_ms = static_cast<int>(std::min<int64_t>(left, timeout_ms));
      }
      // A count: two threads may wait for the same thing (rare, but then
      // neither may hide the other from the ringer).
      auto& me = hdr->sleeping[mine(bell)].n;
      me.fetch_add(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (ready()) {
        me.fetch_sub(1, std::memory_order_relaxed);
        return true;
      }
      pollfd fds[2] = {{bells[mine(bell)].get(), POLLIN, 0}, {sock.get(), POLLIN | POLLRDHUP, 0}};
      int n = ::poll(fds, 2, timeout_ms);
      me.fetch_sub(1, std::memory_order_relaxed);
      if (n < 0 && errno != EINTR) throw sys_error("channel: poll");
      if (n > 0 && (fds[0].revents & POLLIN)) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(bells[mine(bell)].get(), &v, sizeof(v));
      }
      if (n > 0 && fds[1].revents) peer_hung_up = true;
    }
  }

  bool peer_closed_in_order() const {
    return (is_host ? hdr->dpu_closed : hdr->host_closed).load(std::memory_order_acquire) != 0;
  }

  [[noreturn]] void throw_peer_gone() const {
    std::string who = std::string("the ") + peer_name() + " side" + (peer ? " (pid " + std::to_string(peer) + ")" : "");
    if (peer_closed_in_order())
      throw ChannelError(ChannelError::Kind::kPeerClosed, "channel: " + who + " closed the channel");
    throw ChannelError(ChannelError::Kind::kPeerGone,
                       "channel: " + who + " is gone: it died or dropped the connection without closing the channel");
  }

  // Lays out the mapping for `cfg` (host side).
  void create(const ChannelConfig& cfg) {
    if (!pow2(cfg.request_slots) || !pow2(cfg.completion_slots) || !pow2(cfg.payload_bytes))
      throw std::invalid_argument("channel: slots and payload bytes must be powers of two");
    size_t req_off = align_up(sizeof(ChannelShared), kCacheLine);
    size_t cmp_off = align_up(req_off + SpscRing<ChannelRequest>::bytes_needed(cfg.request_slots), kCacheLine);
    size_t pay_off = align_up(cmp_off + SpscRing<ChannelCompletion>::bytes_needed(cfg.completion_slots), 4096);
    size_t total = pay_off + cfg.payload_bytes;
    shm = SharedMemory::create("dpukit-channel", total);
    auto* base = static_cast<uint8_t*>(shm.data());
    hdr = new (base) ChannelShared{};
    hdr->version = kChannelVersion;
    hdr->spin = cfg.spin;
    hdr->request_slots = cfg.request_slots;
    hdr->completion_slots = cfg.completion_slots;
    hdr->payload_bytes = cfg.payload_bytes;
    hdr->request_ring_off = req_off;
    hdr->completion_ring_off = cmp_off;
    hdr->payload_off = pay_off;
    hdr->total_bytes = total;
    requests = SpscRing<ChannelRequest>::create(base + req_off, cfg.request_slots);
    completions = SpscRing<ChannelCompletion>::create(base + cmp_off, cfg.completion_slots);
    payload = base + pay_off;
    std::atomic_thread_fence(std::memory_order_release);
    hdr->magic = kChannelMagic;
    for (auto& b : bells) b = make_eventfd("channel");
    is_host = true;
  }

  // Maps what the host laid out (dpu side), checking every offset against the mapping.
  void attach(SharedMemory m) {
    shm = std::move(m);
    auto* base = static_cast<uint8_t*>(shm.data());
    if (shm.size() < sizeof(ChannelShared)) throw ChannelError(ChannelError::Kind::kProtocol, "channel: mapping too small");
    hdr = reinterpret_cast<ChannelShared*>(base);
    if (hdr->magic != kChannelMagic || hdr->version != kChannelVersion)
      throw ChannelError(ChannelError::Kind::kProtocol, "channel: the mapping is not a dpukit channel of this version");
    if (hdr->total_bytes != shm.size() || !pow2(hdr->payload_bytes) ||
        hdr->payload_off + hdr->payload_bytes > shm.size() || hdr->request_ring_off >= hdr->completion_ring_off ||
        hdr->completion_ring_off >= hdr->payload_off)
      throw ChannelError(ChannelError::Kind::kProtocol, "channel: inconsistent layout");
    requests = SpscRing<ChannelRequest>::attach(base + hdr->request_ring_off,
                                                hdr->completion_ring_off - hdr->request_ring_off);
    completions = SpscRing<ChannelCompletion>::attach(base + hdr->completion_ring_off,
                                                      hdr->payload_off - hdr->completion_ring_off);
    payload = base + hdr->payload_off;
    is_host = false;
  }
};

}  // namespace detail

using detail::ChannelState;
using detail::Clock;

namespace {
Clock::time_point deadline_after(std::chrono::milliseconds t) {
  return t.count() < 0 ? Clock::time_point::max() : Clock::now() + t;
}
}  // namespace

// ---------------------------------------------------------------- host side

ChannelHost::ChannelHost(std::unique_ptr<ChannelState> s) : s_(std::move(s)) {}
ChannelHost::ChannelHost(ChannelHost&&) noexcept = default;
ChannelHost& ChannelHost::operator=(ChannelHost&& o) noexcept {
  if (this != &o) {
    close();
    s_ = std::move(o.s_);
    payload_head_ = o.payload_head_;
    reserved_ = o.reserved_;
    reserved_pos_ = o.reserved_pos_;
    reserved_len_ = o.reserved_len_;
  }
  return *this;
}
ChannelHost::~ChannelHost() { close(); }

ChannelHost ChannelHost::connect(const std::string& socket_path, const ChannelConfig& config) {
  auto s = std::make_unique<ChannelState>();
  s->create(config);
  s->sock = detail::connect_seqpacket(socket_path, "channel", "dpu side");
  detail::Hello hello{detail::kChannelMagic, detail::kChannelVersion, 0, s->hdr->total_bytes};
  int fds[1 + detail::kBells] = {s->shm.fd()};
  for (int i = 0; i < detail::kBells; ++i) fds[1 + i] = s->bells[i].get();
  detail::send_with_fds(s->sock.get(), &hello, sizeof(hello), fds, 1 + detail::kBells, "channel");
  detail::Ack ack{};
  detail::recv_with_fds(s->sock.get(), &ack, sizeof(ack), nullptr, 0, std::chrono::seconds(10), "channel");
  if (ack.magic != detail::kChannelMagic || ack.ok != 1)
    throw ChannelError(ChannelError::Kind::kProtocol, "channel: the dpu side at " + socket_path + " refused the channel");
  s->peer = detail::peer_pid_of(s->sock.get());
  return ChannelHost(std::move(s));
}

// Finds room for `len` payload bytes and a request slot; the position, or
// nullopt when !wait and there is no room now.
[[gnu::always_inline]] inline std::optional<uint64_t> ChannelHost::make_room(uint64_t len, bool wait) {
  ChannelState& s = *s_;
  const uint64_t size = s.hdr->payload_bytes;
  if (len > size)
    throw std::invalid_argument("channel: payload of " + std::to_string(len) + " bytes exceeds the region (" +
                                std::to_string(size) + ")");
  if (len > UINT32_MAX) throw std::invalid_argument("channel: a payload is at most 4 GiB - 1 bytes");
  if (s.hdr->host_closed.load(std::memory_order_relaxed)) throw std::logic_error("channel: submit after close");
  if (reserved_) throw std::logic_error("channel: a reservation is open; commit it first");
  // A payload never wraps: if it would cross the end, it starts at the beginning.
  uint64_t pos = payload_head_;
  uint64_t phys = pos & (size - 1);
  if (len && phys + len > size) pos += size - phys;
  auto fits = [&] {
    return pos + len - s.hdr->payload_tail.load(std::memory_order_acquire) <= size && s.requests.free_slots() > 0;
  };
  if (!fits()) {
    if (!wait) return std::nullopt;
    if (!s.wait(detail::kRoom, fits, Clock::time_point::max())) s.throw_peer_gone();
  }
  return pos;
}

[[gnu::always_inline]] inline void ChannelHost::push(uint32_t op, uint64_t id, uint64_t pos, uint64_t len,
                                                   std::initializer_list<uint64_t> args) {
  ChannelState& s = *s_;
  ChannelRequest r{};
  r.id = id;
  r.op = op;
  r.payload_len = static_cast<uint32_t>(len);
  r.payload_pos = pos;
  std::copy(args.begin(), args.end(), r.args);
  s.requests.try_push(r);  // make_room saw a free slot, and only this thread pushes
  payload_head_ = pos + len;
  s.ring_peer(detail::kArrival);
}

bool ChannelHost::post(uint32_t op, uint64_t id, std::span<const uint8_t> payload,
                       std::initializer_list<uint64_t> args, bool wait) {
  if (args.size() > 5) throw std::invalid_argument("channel: at most 5 request arguments");
  auto pos = make_room(payload.size(), wait);
  if (!pos) return false;
  const uint64_t size = s_->hdr->payload_bytes;
  if (!payload.empty()) copy_bytes(s_->payload + (*pos & (size - 1)), payload.data(), payload.size());
  push(op, id, *pos, payload.size(), args);
  return true;
}

std::span<uint8_t> ChannelHost::reserve(size_t len) {
  uint64_t pos = *make_room(len, true);
  reserved_ = true;
  reserved_pos_ = pos;
  reserved_len_ = len;
  return {s_->payload + (pos & (s_->hdr->payload_bytes - 1)), len};
}

void ChannelHost::commit(uint32_t op, uint64_t id, size_t len, std::initializer_list<uint64_t> args) {
  if (!reserved_) throw std::logic_error("channel: commit without a reservation");
  if (len > reserved_len_) throw std::invalid_argument("channel: commit beyond the reservation");
  if (args.size() > 5) throw std::invalid_argument("channel: at most 5 request arguments");
  reserved_ = false;
  // The request slot make_room saw is still free: only this thread pushes.
  push(op, id, reserved_pos_, len, args);
}

void ChannelHost::cancel_reservation() { reserved_ = false; }

void ChannelHost::submit(uint32_t op, uint64_t id, std::span<const uint8_t> payload,
                         std::initializer_list<uint64_t> args) {
  post(op, id, payload, args, true);
}

bool ChannelHost::try_submit(uint32_t op, uint64_t id, std::span<const uint8_t> payload,
                             std::initializer_list<uint64_t> args) {
  if (s_->peer_hung_up) s_->throw_peer_gone();
  return post(op, id, payload, args, false);
}

size_t ChannelHost::poll_completions(ChannelCompletion* out, size_t max) {
  size_t n = s_->completions.try_pop(out, max);
  if (n) s_->ring_peer(detail::kRoom);  // the dpu side may wait for room
  return n;
}

size_t ChannelHost::wait_completions(ChannelCompletion* out, size_t max, std::chrono::milliseconds timeout) {
  if (size_t n = poll_completions(out, max)) return n;
  ChannelState& s = *s_;
  if (!s.wait(detail::kArrival, [&] { return !s.completions.empty(); }, deadline_after(timeout))) {
    if (s.peer_hung_up) s.throw_peer_gone();
    return 0;
  }
  return poll_completions(out, max);
}

void ChannelHost::close() {
  if (!s_ || s_->hdr->host_closed.load(std::memory_order_relaxed)) return;
  s_->hdr->host_closed.store(1, std::memory_order_seq_cst);
  s_->ring_peer_always(detail::kArrival);
}

pid_t ChannelHost::peer_pid() const { return s_->peer; }
size_t ChannelHost::payload_capacity() const { return s_->hdr->payload_bytes; }

// ----------------------------------------------------------------- dpu side

ChannelDpu::ChannelDpu(std::unique_ptr<ChannelState> s) : s_(std::move(s)) {}
ChannelDpu::ChannelDpu(ChannelDpu&&) noexcept = default;
ChannelDpu& ChannelDpu::operator=(ChannelDpu&& o) noexcept {
  if (this != &o) {
    close();
    s_ = std::move(o.s_);
    requests_ = std::move(o.requests_);
    buffer_ = std::move(o.buffer_);
    closed_ = o.closed_;
  }
  return *this;
}
ChannelDpu::~ChannelDpu() { close(); }

size_t ChannelDpu::receive(std::vector<Message>& out, size_t max, std::chrono::milliseconds timeout) {
  out.clear();
  if (closed_ || max == 0) return 0;
  ChannelState& s = *s_;
  if (requests_.size() < max) requests_.resize(max);
  size_t n = pop_batch(max);
  if (n == 0) {
    auto host_closed = [&] { return s.hdr->host_closed.load(std::memory_order_acquire) != 0; };
    bool ok = s.wait(detail::kArrival, [&] { return !s.requests.empty() || host_closed(); }, deadline_after(timeout));
    n = pop_batch(max);
    if (n == 0) {
      if (host_closed()) {
        closed_ = true;
        return 0;
      }
      if (!ok && s.peer_hung_up) s.throw_peer_gone();
      return 0;
    }
  }
  // The "DMA read": copy every payload out of the shared region, then release it.
  const uint64_t mask = s.hdr->payload_bytes - 1;
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (requests_[i].payload_len > s.hdr->payload_bytes)
      throw ChannelError(ChannelError::Kind::kProtocol, "channel: request payload larger than the region");
    total += requests_[i].payload_len;
  }
  if (buffer_.size() < total) buffer_.resize(total);
  size_t off = 0;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const ChannelRequest& r = requests_[i];
    uint64_t phys = r.payload_pos & mask;
    if (phys + r.payload_len > s.hdr->payload_bytes)
      throw ChannelError(ChannelError::Kind::kProtocol, "channel: request payload crosses the region's end");
    copy_bytes(buffer_.data() + off, s.payload + phys, r.payload_len);
    out.push_back({r, std::span<const uint8_t>(buffer_.data() + off, r.payload_len)});
    off += r.payload_len;
  }
  const ChannelRequest& last = requests_[n - 1];
  s.hdr->payload_tail.store(last.payload_pos + last.payload_len, std::memory_order_release);
  s.ring_peer(detail::kRoom);  // the host may wait for room
  return n;
}

// Pops up to `max` requests, stopping early once their payloads pass
// kBatchBytes: a batch that stays in the dpu core's cache copies faster.
size_t ChannelDpu::pop_batch(size_t max) {
  constexpr size_t kStep = 32, kBatchBytes = 512 * 1024;
  size_t n = 0, bytes = 0;
  while (n < max && bytes < kBatchBytes) {
    size_t k = s_->requests.try_pop(requests_.data() + n, std::min(kStep, max - n));
    if (k == 0) break;
    for (size_t i = n; i < n + k; ++i) bytes += requests_[i].payload_len;
    n += k;
  }
  return n;
}

void ChannelDpu::complete(std::span<const ChannelCompletion> completions) {
  ChannelState& s = *s_;
  size_t done = 0;
  while (done < completions.size()) {
    size_t k = s.completions.try_push(completions.data() + done, completions.size() - done);
    if (k) {
      done += k;
      s.ring_peer(detail::kArrival);
      continue;
    }
    if (!s.wait(detail::kRoom, [&] { return s.completions.free_slots() > 0; }, Clock::time_point::max()))
      s.throw_peer_gone();
  }
}

void ChannelDpu::close() {
  if (!s_ || s_->hdr->dpu_closed.load(std::memory_order_relaxed)) return;
  s_->hdr->dpu_closed.store(1, std::memory_order_seq_cst);
  s_->ring_peer_always(detail::kArrival);
  s_->ring_peer_always(detail::kRoom);
}

pid_t ChannelDpu::peer_pid() const { return s_->peer; }

// ----------------------------------------------------------------- listener

ChannelListener::ChannelListener(const std::string& socket_path)
    : fd_(detail::listen_seqpacket(socket_path, "channel").release()), path_(socket_path) {}

ChannelListener::ChannelListener(ChannelListener&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}
ChannelListener& ChannelListener::operator=(ChannelListener&& o) noexcept {
  if (this != &o) {
    this->~ChannelListener();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}
ChannelListener::~ChannelListener() {
  if (fd_ >= 0) {
    ::close(fd_);
    detail::remove_socket_file(path_);
  }
}

ChannelDpu ChannelListener::accept(std::chrono::milliseconds timeout) {
  UniqueFd sock = detail::accept_seqpacket(fd_, path_, timeout, "channel");
  detail::Hello hello{};
  UniqueFd fds[1 + detail::kBells];
  int got = detail::recv_with_fds(sock.get(), &hello, sizeof(hello), fds, 1 + detail::kBells, std::chrono::seconds(10), "channel");
  if (hello.magic != detail::kChannelMagic || hello.version != detail::kChannelVersion || got != 1 + detail::kBells)
    throw ChannelError(ChannelError::Kind::kProtocol, "channel: a peer at " + path_ + " sent no valid channel handshake");
  auto s = std::make_unique<ChannelState>();
  s->attach(SharedMemory::map(std::move(fds[0])));
  for (int i = 0; i < detail::kBells; ++i) s->bells[i] = std::move(fds[1 + i]);
  s->peer = detail::peer_pid_of(sock.get());
  s->sock = std::move(sock);
  detail::Ack ack{detail::kChannelMagic, 1, 0};
  detail::send_with_fds(s->sock.get(), &ack, sizeof(ack), nullptr, 0, "channel");
  return ChannelDpu(std::move(s));
}

std::pair<ChannelHost, ChannelDpu> make_channel_pair(const ChannelConfig& config) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) throw detail::sys_error("channel: socketpair");
  auto h = std::make_unique<ChannelState>();
  h->create(config);
  h->sock = UniqueFd(sv[0]);
  h->peer = ::getpid();
  auto d = std::make_unique<ChannelState>();
  UniqueFd shm_fd(::dup(h->shm.fd()));
  if (!shm_fd) throw detail::sys_error("channel: dup");
  d->attach(SharedMemory::map(std::move(shm_fd)));
  for (int i = 0; i < detail::kBells; ++i) {
    d->bells[i] = UniqueFd(::dup(h->bells[i].get()));
    if (!d->bells[i]) throw detail::sys_error("channel: dup");
  }
  d->sock = UniqueFd(sv[1]);
  d->peer = ::getpid();
  return {ChannelHost(std::move(h)), ChannelDpu(std::move(d))};
}

}  // namespace dpukit
