// The dpu side's receive path on a real interface (issue 11 §1): one AF_XDP
// socket per receive queue of the interface, so that the NIC's own RSS picks
// the dpu worker (Algorithm 1, line 6). Each socket has its own UMEM and sits
// in the `xsks` map of the XdpFlowTable's program, which redirects every
// packet the hardware flow table missed to the socket of its queue.
//
// The receiver must be destroyed before the table it was opened on. Frames are
// raw Ethernet; parse them with parse_frame(1 /* DLT_EN10MB */, ...) of
// measure/src/trace/parse.h.
#pragma once

#include <poll.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "live/xdp_flow_table.h"

namespace dpukit::measure {

class XskReceiver {
 public:
  // How the sockets bind: copy mode works with generic XDP and on every
  // driver; zero-copy needs native XDP and driver support.
  enum class BindMode { kCopy, kZeroCopy, kAuto };

  struct Options {
    uint32_t frame_size = 2048;  // UMEM frame: 2048 or 4096 (a frame holds one packet)
    uint32_t ring_size = 2048;   // rx and fill ring entries per queue, and the UMEM's frames (a power of two)
    BindMode bind = BindMode::kCopy;
  };

  struct QueueStats {
    unsigned queue = 0;
    uint64_t frames = 0, bytes = 0;  // handed to the callback
    // The kernel's XDP_STATISTICS for this socket.
    uint64_t rx_dropped = 0;                // e.g. a frame larger than a UMEM frame
    uint64_t rx_invalid_descs = 0;          // bad addresses given in the fill ring
    uint64_t rx_ring_full = 0;              // the rx ring was full: the consumer is too slow
    uint64_t rx_fill_ring_empty_descs = 0;  // no free frame in the fill ring
  };
  struct Stats {
    QueueStats total;  // summed (its queue field is meaningless)
    std::vector<QueueStats> queues;
  };

  using FrameFn = std::function<void(const uint8_t* frame, uint32_t len, unsigned queue)>;

  // Opens a socket on every rx queue of table.interface() and puts each into
  // the table's `xsks` map. Throws LiveError.
  explicit XskReceiver(const XdpFlowTable& table);  // default Options
  XskReceiver(const XdpFlowTable& table, const Options& options);
  ~XskReceiver();
  XskReceiver(const XskReceiver&) = delete;
  XskReceiver& operator=(const XskReceiver&) = delete;

  unsigned queue_count() const { return static_cast<unsigned>(queues_.size()); }
  bool zero_copy() const { return zero_copy_; }      // every socket bound in zero-copy mode
  bool need_wakeup() const { return need_wakeup_; }  // the kernel took XDP_USE_NEED_WAKEUP

  // Drains every queue's rx ring, calling `fn` per frame (the frame is valid
  // during the call only) and giving the frames back to the fill ring. When
  // nothing was waiting, sleeps up to `timeout_ms` (0: not at all, -1: until
  // a frame comes) for one. Returns the frames handed to `fn`. One thread at
  // a time per queue: poll() from one thread, or poll_queue() from one
  // thread per queue (a dpu worker each).
  size_t poll(const FrameFn& fn, int timeout_ms);
  size_t poll_queue(unsigned queue, const FrameFn& fn, int timeout_ms);

  // From any thread.
  Stats stats() const;

 private:
  struct Queue;
  size_t drain(Queue& q, const FrameFn& fn);

  Options options_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<pollfd> pollfds_;  // one per queue, for poll()
  bool zero_copy_ = false;
  bool need_wakeup_ = false;
};

const char* to_string(XskReceiver::BindMode);

}  // namespace dpukit::measure
