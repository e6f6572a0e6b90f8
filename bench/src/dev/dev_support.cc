#include "dev/dev_support.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "dev/dev_kernel.h"

namespace dpukit::bench {

std::string dev_kernel_device(const Kernel& kernel) {
  const auto* k = dynamic_cast<const DevKernel*>(&kernel);
  return k ? k->device() : std::string();
}

namespace dev {
namespace {

// The largest data room an mbuf segment can have (buf_len is 16-bit).
constexpr size_t kMaxSegmentRoom = UINT16_MAX - RTE_PKTMBUF_HEADROOM;
// Segment size when a chain is needed: large enough that a chain stays short.
constexpr size_t kChainSegmentRoom = 32768;

}  // namespace

std::string unique_name(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  return std::string(prefix) + std::to_string(counter.fetch_add(1));
}

MbufChain::MbufChain(size_t capacity, size_t chains) : capacity_(std::max<size_t>(capacity, 1)) {
  seg_room_ = capacity_ <= kMaxSegmentRoom ? capacity_ : kChainSegmentRoom;
  per_chain_ = (capacity_ + seg_room_ - 1) / seg_room_;
  const size_t n = per_chain_ * std::max<size_t>(chains, 1);
  const std::string name = unique_name("dpk_mb");
  pool_ = rte_pktmbuf_pool_create(name.c_str(), static_cast<unsigned>(n), 0, 0,
                                  static_cast<uint16_t>(seg_room_ + RTE_PKTMBUF_HEADROOM), SOCKET_ID_ANY);
  if (!pool_)  // EAL's memory is small (no hugepages): big inputs times many threads may not fit
    throw Unavailable("DPDK memory cannot hold an mbuf pool for " + std::to_string(n) + " x " +
                      std::to_string(seg_room_) + " bytes: " + rte_strerror(rte_errno));
  segs_.resize(n);
  if (rte_pktmbuf_alloc_bulk(pool_, segs_.data(), static_cast<unsigned>(n)) != 0) {
    rte_mempool_free(pool_);
    throw Unavailable("cannot allocate " + std::to_string(n) + " mbufs");
  }
}

MbufChain::~MbufChain() {
  for (rte_mbuf* m : segs_) {
    m->next = nullptr;  // free each segment on its own, whatever the last chain was
    m->nb_segs = 1;
    rte_pktmbuf_free_seg(m);
  }
  rte_mempool_free(pool_);
}

bool MbufChain::needs_chain(size_t capacity) { return capacity > kMaxSegmentRoom; }

size_t MbufChain::segments_for(size_t bytes) const { return std::max<size_t>(1, (bytes + seg_room_ - 1) / seg_room_); }

rte_mbuf* MbufChain::shape(size_t bytes, size_t chain) {
  check_fits(bytes, capacity_);
  rte_mbuf** segs = segs_.data() + chain * per_chain_;
  const size_t n = segments_for(bytes);
  size_t left = bytes;
  for (size_t i = 0; i < n; ++i) {
    rte_mbuf* m = segs[i];
    m->data_off = RTE_PKTMBUF_HEADROOM;
    m->data_len = static_cast<uint16_t>(std::min(left, seg_room_));
    m->next = i + 1 < n ? segs[i + 1] : nullptr;
    left -= m->data_len;
  }
  rte_mbuf* head = segs[0];
  head->nb_segs = static_cast<uint16_t>(n);
  head->pkt_len = static_cast<uint32_t>(bytes);
  return head;
}

rte_mbuf* MbufChain::write(std::span<const uint8_t> in, size_t chain) {
  rte_mbuf* head = shape(in.size(), chain);
  size_t done = 0;
  for (rte_mbuf* m = head; m; m = m->next) {
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), in.data() + done, m->data_len);
    done += m->data_len;
  }
  return head;
}

void MbufChain::read(size_t bytes, uint8_t* out, size_t chain) const {
  size_t done = 0;
  for (const rte_mbuf* m = segs_[chain * per_chain_]; m && done < bytes; m = m->next) {
    size_t n = std::min<size_t>(m->data_len, bytes - done);
    std::memcpy(out + done, rte_pktmbuf_mtod(m, const uint8_t*), n);
    done += n;
  }
  if (done != bytes) throw std::logic_error("mbuf chain holds fewer bytes than read asks for");
}

namespace {
// The caller's bytes are not ours to free: nothing to do when the last
// reference to them goes.
void keep_attached_bytes(void*, void*) {}
}  // namespace

AttachedMbufs::AttachedMbufs(size_t count) : mbufs_(count), shinfo_(count) {
  const std::string name = unique_name("dpk_mx");
  pool_ = rte_pktmbuf_pool_create(name.c_str(), static_cast<unsigned>(count), 0, 0, 0, SOCKET_ID_ANY);
  if (!pool_) throw Unavailable(std::string("DPDK memory cannot hold an mbuf pool: ") + rte_strerror(rte_errno));
  if (rte_pktmbuf_alloc_bulk(pool_, mbufs_.data(), static_cast<unsigned>(count)) != 0) {
    rte_mempool_free(pool_);
    throw Unavailable("cannot allocate " + std::to_string(count) + " mbufs");
  }
  for (auto& s : shinfo_) {
    s = rte_mbuf_ext_shared_info{};
    s.free_cb = keep_attached_bytes;
  }
}

AttachedMbufs::~AttachedMbufs() {
  for (size_t i = 0; i < mbufs_.size(); ++i) {
    detach(i);
    rte_pktmbuf_free(mbufs_[i]);
  }
  rte_mempool_free(pool_);
}

rte_mbuf* AttachedMbufs::attach(size_t i, const uint8_t* data, size_t bytes) {
  if (bytes > kMaxBytes) throw std::logic_error("an attached mbuf holds at most 65535 bytes");
  rte_mbuf* m = mbufs_[i];
  if (RTE_MBUF_HAS_EXTBUF(m)) detach(i);
  rte_mbuf_ext_refcnt_set(&shinfo_[i], 1);
  // Software PMDs only (see the class): the IO address is the virtual one.
  void* p = const_cast<uint8_t*>(data);
  rte_pktmbuf_attach_extbuf(m, p, static_cast<rte_iova_t>(reinterpret_cast<uintptr_t>(p)),
                            static_cast<uint16_t>(bytes), &shinfo_[i]);
  m->data_len = static_cast<uint16_t>(bytes);
  m->pkt_len = static_cast<uint32_t>(bytes);
  return m;
}

void AttachedMbufs::detach(size_t i) {
  rte_mbuf* m = mbufs_[i];
  if (RTE_MBUF_HAS_EXTBUF(m)) rte_pktmbuf_detach(m);
}

DeviceBuffer::DeviceBuffer(size_t size) : size_(size) {
  data_ = static_cast<uint8_t*>(rte_zmalloc("dpukit_dev", std::max<size_t>(size, 1), RTE_CACHE_LINE_SIZE));
  if (!data_) throw Unavailable("DPDK memory cannot hold " + std::to_string(size) + " more bytes");
  iova_ = rte_malloc_virt2iova(data_);
}

DeviceBuffer::~DeviceBuffer() { rte_free(data_); }

uint64_t op_timeout_ticks() { return static_cast<uint64_t>(kOpTimeoutSeconds * static_cast<double>(rte_get_tsc_hz())); }

void check_fits(size_t bytes, size_t capacity, size_t i, size_t n) {
  if (bytes > capacity)
    throw std::length_error(std::to_string(bytes) + " bytes do not fit this kernel's " + std::to_string(capacity) +
                            "-byte buffer (kernels are made for a size)" + burst_place(i, n));
}

std::string burst_place(size_t i, size_t n) {
  return n > 1 ? " (input #" + std::to_string(i) + " of a burst of " + std::to_string(n) + ")" : "";
}

std::runtime_error device_timeout(const std::string& device, const char* what) {
  return std::runtime_error(device + " did not " + what + " an operation within " +
                            std::to_string(static_cast<int>(kOpTimeoutSeconds)) + " s");
}

uint16_t take_queue_pair(std::vector<bool>& used, const std::string& device, const char* hint) {
  for (uint16_t q = 0; q < used.size(); ++q) {
    if (!used[q]) {
      used[q] = true;
      return q;
    }
  }
  throw Unavailable(device + " has " + std::to_string(used.size()) +
                    " queue pairs and all are in use (one per thread" + hint + ")");
}

}  // namespace dev
}  // namespace dpukit::bench
