#include "live/xsk_receiver.h"

#include <linux/if_xdp.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dpukit::measure {

namespace {

using Kind = LiveError::Kind;

std::string errno_text(int err) { return std::strerror(err); }

bool power_of_two(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

int libxdp_print(enum libxdp_print_level level, const char* format, va_list args) {
  if (!live_verbose() || level == LIBXDP_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

}  // namespace

const char* to_string(XskReceiver::BindMode m) {
  switch (m) {
    case XskReceiver::BindMode::kCopy: return "copy";
    case XskReceiver::BindMode::kZeroCopy: return "zero-copy";
    case XskReceiver::BindMode::kAuto: return "auto";
  }
  return "?";
}

// One receive queue: its UMEM (every frame is either in the fill ring, in the
// rx ring, or in the caller's hands during poll), the rings and the socket.
struct XskReceiver::Queue {
  unsigned index = 0;
  uint32_t frame_size = 0;
  void* area = MAP_FAILED;
  size_t area_size = 0;
  xsk_umem* umem = nullptr;
  xsk_socket* socket = nullptr;
  xsk_ring_prod fill{};
  xsk_ring_cons completion{};
  xsk_ring_cons rx{};
  int fd = -1;
  bool need_wakeup = false;
  std::atomic<uint64_t> frames{0}, bytes{0};

  ~Queue() { close(); }
  void close() {
    if (socket) xsk_socket__delete(socket);  // the kernel also drops it from the xsks map
    socket = nullptr;
    if (umem) xsk_umem__delete(umem);
    umem = nullptr;
    if (area != MAP_FAILED) ::munmap(area, area_size);
    area = MAP_FAILED;
    fd = -1;
  }

  // Returns 0 or a negative errno from the socket's creation (bind).
  int open(const std::string& interface, uint32_t ring_size, uint16_t bind_flags) {
    area_size = size_t(ring_size) * frame_size;
    area = ::mmap(nullptr, area_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) return -errno;
    xsk_umem_config umem_config{};
    umem_config.fill_size = ring_size;
    umem_config.comp_size = ring_size;  // required by the kernel; unused (no tx)
    umem_config.frame_size = frame_size;
    umem_config.frame_headroom = 0;
    umem_config.flags = 0;
    if (int err = xsk_umem__create(&umem, area, area_size, &fill, &completion, &umem_config); err != 0) {
      umem = nullptr;
      return err;
    }
    xsk_socket_config socket_config{};
    socket_config.rx_size = ring_size;
    socket_config.tx_size = 0;
    // The table's program is already attached; libxdp must not load its own.
    socket_config.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    socket_config.bind_flags = bind_flags;
    if (int err = xsk_socket__create(&socket, interface.c_str(), index, umem, &rx, nullptr, &socket_config);
        err != 0) {
      socket = nullptr;
      return err;
    }
    fd = xsk_socket__fd(socket);
    need_wakeup = bind_flags & XDP_USE_NEED_WAKEUP;
    // Fill ring kept full: every frame is the kernel's to write into.
    uint32_t at = 0;
    if (xsk_ring_prod__reserve(&fill, ring_size, &at) != ring_size) return -ENOSPC;
    for (uint32_t i = 0; i < ring_size; ++i) *xsk_ring_prod__fill_addr(&fill, at + i) = uint64_t(i) * frame_size;
    xsk_ring_prod__submit(&fill, ring_size);
    return 0;
  }

  void wake_if_needed() {
    if (need_wakeup && xsk_ring_prod__needs_wakeup(&fill)) ::recvfrom(fd, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  }
};

XskReceiver::XskReceiver(const XdpFlowTable& table) : XskReceiver(table, Options{}) {}

XskReceiver::XskReceiver(const XdpFlowTable& table, const Options& options) : options_(options) {
  if (options_.frame_size < 2048 || !power_of_two(options_.frame_size))
    throw std::invalid_argument("xsk receiver: frame size must be a power of two >= 2048");
  if (!power_of_two(options_.ring_size)) throw std::invalid_argument("xsk receiver: ring size must be a power of two");
  if (table.rx_queues() == 0)
    throw LiveError(Kind::kSystem, table.interface() + " lists no receive queues in sysfs");
  libxdp_set_print(libxdp_print);

  uint16_t mode_flag = options_.bind == BindMode::kCopy       ? XDP_COPY
                       : options_.bind == BindMode::kZeroCopy ? XDP_ZEROCOPY
                                                              : 0;
  zero_copy_ = true;
  need_wakeup_ = true;
  for (unsigned i = 0; i < table.rx_queues(); ++i) {
    auto q = std::make_unique<Queue>();
    q->index = i;
    q->frame_size = options_.frame_size;
    int err = q->open(table.interface(), options_.ring_size, mode_flag | XDP_USE_NEED_WAKEUP);
    if (err == -EINVAL) {  // kernels before 5.4 know no need_wakeup: bind without it
      q->close();
      err = q->open(table.interface(), options_.ring_size, mode_flag);
    }
    if (err != 0) {
      std::string call = "AF_XDP socket on " + table.interface() + " queue " + std::to_string(i) + " (" +
                         to_string(options_.bind) + " mode)";
      if (-err == EPERM) {
        throw LiveError(Kind::kPermission,
                        call + ": EPERM: " +
                            (::geteuid() != 0 ? "not root (needs root, or CAP_NET_RAW and CAP_NET_ADMIN)"
                                              : "CAP_NET_RAW or CAP_NET_ADMIN is missing"));
      }
      if (-err == EOPNOTSUPP || -err == EAFNOSUPPORT || -err == EPROTONOSUPPORT)
        throw LiveError(Kind::kXdpRefused,
                        call + ": " + errno_text(-err) +
                            (options_.bind == BindMode::kZeroCopy
                                 ? " (zero-copy needs native XDP and a driver with AF_XDP zero-copy)"
                                 : " (the kernel has no AF_XDP: CONFIG_XDP_SOCKETS)"));
      if (-err == EBUSY) throw LiveError(Kind::kXdpRefused, call + ": the queue already has an AF_XDP socket");
      throw LiveError(Kind::kSystem, call + ": " + errno_text(-err));
    }
    if (int e = xsk_socket__update_xskmap(q->socket, table.xsks_map_fd()); e != 0)
      throw LiveError(Kind::kSystem, "xsk_socket__update_xskmap(queue " + std::to_string(i) + "): " + errno_text(-e));
    xdp_options opts{};
    socklen_t len = sizeof opts;
    bool zc = ::getsockopt(q->fd, SOL_XDP, XDP_OPTIONS, &opts, &len) == 0 && (opts.flags & XDP_OPTIONS_ZEROCOPY);
    zero_copy_ = zero_copy_ && zc;
    need_wakeup_ = need_wakeup_ && q->need_wakeup;
    pollfds_.push_back({q->fd, POLLIN, 0});
    queues_.push_back(std::move(q));
  }
}

XskReceiver::~XskReceiver() = default;

size_t XskReceiver::drain(Queue& q, const FrameFn& fn) {
  uint32_t at_rx = 0;
  uint32_t n = xsk_ring_cons__peek(&q.rx, options_.ring_size, &at_rx);
  if (n == 0) {
    q.wake_if_needed();
    return 0;
  }
  // The fill ring holds every frame of the UMEM, so there is room for these
  // n once the kernel has published its fill-ring consumer, which it does
  // right after the rx descriptors (xsk_flush): at most a brief wait.
  uint32_t at_fill = 0;
  while (xsk_ring_prod__reserve(&q.fill, n, &at_fill) != n) {
    q.wake_if_needed();
    sched_yield();
  }
  uint64_t bytes = 0;
  auto give_back = [&](uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t addr = xsk_ring_cons__rx_desc(&q.rx, at_rx + i)->addr;
      *xsk_ring_prod__fill_addr(&q.fill, at_fill + i) = addr - addr % q.frame_size;  // the frame's start
    }
    xsk_ring_prod__submit(&q.fill, count);
    xsk_ring_cons__release(&q.rx, count);
  };
  try {
    for (uint32_t i = 0; i < n; ++i) {
      const xdp_desc* desc = xsk_ring_cons__rx_desc(&q.rx, at_rx + i);
      fn(static_cast<const uint8_t*>(xsk_umem__get_data(q.area, desc->addr)), desc->len, q.index);
      bytes += desc->len;
    }
  } catch (...) {
    give_back(n);  // no frame is lost to the UMEM, whatever the callback did
    throw;
  }
  give_back(n);
  q.frames.fetch_add(n, std::memory_order_relaxed);
  q.bytes.fetch_add(bytes, std::memory_order_relaxed);
  return n;
}

size_t XskReceiver::poll(const FrameFn& fn, int timeout_ms) {
  size_t total = 0;
  for (auto& q : queues_) total += drain(*q, fn);
  if (total != 0 || timeout_ms == 0) return total;
  if (::poll(pollfds_.data(), pollfds_.size(), timeout_ms) <= 0) return 0;
  for (auto& q : queues_) total += drain(*q, fn);
  return total;
}

size_t XskReceiver::poll_queue(unsigned queue, const FrameFn& fn, int timeout_ms) {
  if (queue >= queues_.size()) throw std::out_of_range("xsk receiver: no queue " + std::to_string(queue));
  Queue& q = *queues_[queue];
  size_t n = drain(q, fn);
  if (n != 0 || timeout_ms == 0) return n;
  pollfd p{q.fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return 0;
  return drain(q, fn);
}

XskReceiver::Stats XskReceiver::stats() const {
  Stats out;
  for (const auto& q : queues_) {
    QueueStats s;
    s.queue = q->index;
    s.frames = q->frames.load(std::memory_order_relaxed);
    s.bytes = q->bytes.load(std::memory_order_relaxed);
    xdp_statistics k{};
    socklen_t len = sizeof k;
    if (::getsockopt(q->fd, SOL_XDP, XDP_STATISTICS, &k, &len) != 0)
      throw LiveError(Kind::kSystem, "getsockopt(XDP_STATISTICS): " + errno_text(errno));
    s.rx_dropped = k.rx_dropped;
    s.rx_invalid_descs = k.rx_invalid_descs;
    s.rx_ring_full = k.rx_ring_full;
    s.rx_fill_ring_empty_descs = k.rx_fill_ring_empty_descs;
    out.total.frames += s.frames;
    out.total.bytes += s.bytes;
    out.total.rx_dropped += s.rx_dropped;
    out.total.rx_invalid_descs += s.rx_invalid_descs;
    out.total.rx_ring_full += s.rx_ring_full;
    out.total.rx_fill_ring_empty_descs += s.rx_fill_ring_empty_descs;
    out.queues.push_back(s);
  }
  return out;
}

}  // namespace dpukit::measure
