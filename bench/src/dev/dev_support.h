// What the cryptodev and compressdev kernels share (private to src/dev):
// data buffers a device can reach (mbufs, DPDK heap memory) and the poll
// loop that waits for one operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <rte_memory.h>

struct rte_mbuf;
struct rte_mempool;

namespace dpukit::bench::dev {

// A name for a DPDK object (mempool, ring) that no other object of this
// process has: `prefix` + a counter. Mempool names hold 25 characters.
std::string unique_name(const char* prefix);

// One kernel's packet buffer: mbufs from a mempool of its own, holding up
// to `capacity` bytes in one segment when an mbuf can (data room is 16-bit),
// else in a chain of segments. Freed with the kernel, so making and
// destroying kernels does not exhaust memory.
class MbufChain {
 public:
  explicit MbufChain(size_t capacity);
  ~MbufChain();
  MbufChain(const MbufChain&) = delete;
  MbufChain& operator=(const MbufChain&) = delete;

  // Whether `capacity` bytes need more than one segment.
  static bool needs_chain(size_t capacity);

  size_t capacity() const { return capacity_; }
  size_t segments_for(size_t bytes) const;
  // Links the segments that `bytes` needs and sets the data lengths (the
  // packet then holds `bytes` bytes, contents unchanged); returns the head.
  rte_mbuf* shape(size_t bytes);
  // shape(in.size()) and copies `in` into the packet.
  rte_mbuf* write(std::span<const uint8_t> in);
  // Copies the first `bytes` bytes of the packet (as last shaped) to `out`.
  void read(size_t bytes, uint8_t* out) const;

 private:
  size_t capacity_ = 0;
  size_t seg_room_ = 0;  // data bytes per segment
  rte_mempool* pool_ = nullptr;
  std::vector<rte_mbuf*> segs_;
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

// Gives up on a device that has not completed an operation in this long
// (a software PMD finishes within milliseconds; a wedged device must not
// hang the run).
constexpr double kOpTimeoutSeconds = 10.0;

// TSC ticks of kOpTimeoutSeconds.
uint64_t op_timeout_ticks();

// Marks the first free queue pair of a device used and returns it; throws
// Unavailable naming the device when all are taken (one per thread). The
// caller holds the lock that guards `used`.
uint16_t take_queue_pair(std::vector<bool>& used, const std::string& device, const char* hint = "");

}  // namespace dpukit::bench::dev
