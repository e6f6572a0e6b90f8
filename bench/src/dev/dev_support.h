// What the cryptodev and compressdev kernels share (private to src/dev):
// data buffers a device can reach (mbufs, DPDK heap memory), how many
// operations a kernel keeps in flight, and the deadline a device is given.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <rte_memory.h>

#include "operator.h"

struct rte_mempool;

namespace dpukit::bench::dev {

// A name for a DPDK object (mempool, ring) that no other object of this
// process has: `prefix` + a counter. Mempool names hold 25 characters.
std::string unique_name(const char* prefix);

// One kernel's packet buffers: `chains` packets from a mempool of their
// own, each holding up to `capacity` bytes in one segment when an mbuf can
// (data room is 16-bit), else in a chain of segments. Freed with the
// kernel, so making and destroying kernels does not exhaust memory.
class MbufChain {
 public:
  explicit MbufChain(size_t capacity, size_t chains = 1);
  ~MbufChain();
  MbufChain(const MbufChain&) = delete;
  MbufChain& operator=(const MbufChain&) = delete;

  // Whether `capacity` bytes need more than one segment.
  static bool needs_chain(size_t capacity);

  size_t capacity() const { return capacity_; }
  size_t segments_for(size_t bytes) const;
  // Links the segments of packet `chain` that `bytes` needs and sets the
  // data lengths (the packet then holds `bytes` bytes, contents unchanged);
  // returns the head.
  rte_mbuf* shape(size_t bytes, size_t chain = 0);
  // shape(in.size(), chain) and copies `in` into the packet.
  rte_mbuf* write(std::span<const uint8_t> in, size_t chain = 0);
  // Copies the first `bytes` bytes of packet `chain` (as last shaped) to `out`.
  void read(size_t bytes, uint8_t* out, size_t chain = 0) const;

 private:
  size_t capacity_ = 0;
  size_t seg_room_ = 0;  // data bytes per segment
  size_t per_chain_ = 0;  // segments per packet
  rte_mempool* pool_ = nullptr;
  std::vector<rte_mbuf*> segs_;  // packet c's segments at [c * per_chain_, (c + 1) * per_chain_)
};

// mbufs that carry no data of their own: each is attached to bytes of the
// caller's (rte_pktmbuf_attach_extbuf) for one operation, so that a
// software PMD reads the input where it lies and writes the output where
// it is wanted, as the PMD's own tools hand it data already in mbufs. Only
// for software PMDs: they run on this CPU in this address space, so the
// IO address is the virtual one and nothing is DMAed. A hardware PMD gets
// copies in MbufChain's DPDK memory instead.
class AttachedMbufs {
 public:
  explicit AttachedMbufs(size_t count);
  ~AttachedMbufs();
  AttachedMbufs(const AttachedMbufs&) = delete;
  AttachedMbufs& operator=(const AttachedMbufs&) = delete;

  // The largest span one mbuf can be attached to (buf_len is 16-bit).
  static constexpr size_t kMaxBytes = UINT16_MAX;

  // mbuf `i` over `bytes` bytes at `data` (read only unless the PMD is
  // told to write there), detached first if it still was attached.
  rte_mbuf* attach(size_t i, const uint8_t* data, size_t bytes);
  void detach(size_t i);

 private:
  rte_mempool* pool_ = nullptr;
  std::vector<rte_mbuf*> mbufs_;
  std::vector<rte_mbuf_ext_shared_info> shinfo_;
};

// A buffer on the DPDK heap with its IO address (what asymmetric crypto
// parameters and digests point at, so that a hardware PMD can reach them).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t size);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  rte_iova_t iova() const { return iova_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  rte_iova_t iova_ = 0;
};

// Operations a kernel has in flight at once: a burst, as DPDK's own
// dpdk-test-crypto-perf enqueues (--burst-sz 32). A multi-buffer PMD
// (crypto_aesni_mb's SHA and HMAC lanes) is fast only with its lanes full,
// and each enqueue and dequeue call's cost is shared by the burst.
constexpr size_t kBurstDepth = kMaxBurst;

// Gives up on a device that has not completed an operation in this long
// (a software PMD finishes within milliseconds; a wedged device must not
// hang the run).
constexpr double kOpTimeoutSeconds = 10.0;

// TSC ticks of kOpTimeoutSeconds.
uint64_t op_timeout_ticks();

// " (input #i of a burst of n)" where a burst has more than one input, so
// that the errors of a single operation read as before.
std::string burst_place(size_t i, size_t n);

// Throws std::length_error unless `bytes` fit a kernel made for `capacity`
// (input i of a burst of n).
void check_fits(size_t bytes, size_t capacity, size_t i = 0, size_t n = 1);

// Calls run(in', out') for consecutive slices of at most `depth` inputs and
// their outputs: a kernel's process_burst over its own burst depth.
template <class Run>
void in_bursts(size_t depth, std::span<const std::span<const uint8_t>> in, std::span<Bytes> out, Run&& run) {
  for (size_t done = 0; done < in.size(); done += depth) {
    const size_t n = std::min(depth, in.size() - done);
    run(in.subspan(done, n), out.subspan(done, n));
  }
}

// The error for a device that did not `what` ("take", "complete") an
// operation within kOpTimeoutSeconds.
std::runtime_error device_timeout(const std::string& device, const char* what);

// Enqueues the `n` operations (n <= kBurstDepth) on the kernel's queue pair
// and polls until all `n` have come back, in whatever order the device
// returns them; each operation's own status says how it went. `enqueue`
// and `dequeue` are the device class's burst calls, (ops, count) -> count.
// The burst stays in flight together: what the device has not taken yet is
// offered again while the rest is collected.
template <class Op, class Enqueue, class Dequeue>
void run_in_flight(Op** ops, uint16_t n, Enqueue&& enqueue, Dequeue&& dequeue, const std::string& device) {
  const uint64_t deadline = rte_rdtsc() + op_timeout_ticks();
  Op* done[kBurstDepth];
  uint16_t sent = 0, back = 0;
  while (back < n) {
    if (sent < n) sent = static_cast<uint16_t>(sent + enqueue(ops + sent, static_cast<uint16_t>(n - sent)));
    const uint16_t got = dequeue(done, static_cast<uint16_t>(n - back));
    back = static_cast<uint16_t>(back + got);
    if (got == 0 && rte_rdtsc() > deadline) throw device_timeout(device, sent < n ? "take" : "complete");
  }
}

// Marks the first free queue pair of a device used and returns it; throws
// Unavailable naming the device when all are taken (one per thread). The
// caller holds the lock that guards `used`.
uint16_t take_queue_pair(std::vector<bool>& used, const std::string& device, const char* hint = "");

}  // namespace dpukit::bench::dev
