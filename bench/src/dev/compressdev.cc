// The compressdev kernel (see compressdev.h). compress_isal's behaviour
// cited here is from DPDK 22.11's drivers/compress/isal.
#define ALLOW_EXPERIMENTAL_API  // compressdev is experimental in 22.11

#include "dev/compressdev.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <rte_comp.h>
#include <rte_compressdev.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mbuf.h>

#include "dev/dev_support.h"
#include "dpdk_env.h"

namespace dpukit::bench {
namespace {

using dev::MbufChain;

constexpr uint16_t kMaxInflight = dev::kBurstDepth;
constexpr uint16_t kMaxQueuePairs = 256;
constexpr uint8_t kWindowLog2 = 15;  // DEFLATE's largest window, 32 KiB

struct CompressDevice {
  uint8_t id = 0;
  std::string name, driver;
  uint64_t features = 0;      // device feature flags
  uint64_t deflate_ff = 0;    // DEFLATE capability feature flags (0: no DEFLATE)
  uint8_t window_max = 0;     // largest window (log2) for DEFLATE
  uint16_t nb_qps = 0;
  bool started = false;
  std::vector<bool> qp_used;
  bool hardware() const { return features & RTE_COMPDEV_FF_HW_ACCELERATED; }
};

class CompressDevices {
 public:
  static CompressDevices& get() {
    static CompressDevices d;
    return d;
  }

  CompressDevice& choose() {
    std::lock_guard lock(mu_);
    CompressDevice* best = nullptr;
    std::string names;
    for (CompressDevice& d : devs_) {
      names += (names.empty() ? "" : ", ") + d.name;
      const bool fits = (d.deflate_ff & RTE_COMP_FF_HUFFMAN_DYNAMIC) && d.window_max >= 8;
      if (fits && (!best || (d.hardware() && !best->hardware()))) best = &d;
    }
    if (!best)
      throw Unavailable("no compressdev offers stateless DEFLATE with dynamic Huffman codes (devices: " +
                        (names.empty() ? std::string("none") : names) + ")");
    return *best;
  }

  uint16_t lease(CompressDevice& d) {
    std::lock_guard lock(mu_);
    if (!d.started) start(d);
    return dev::take_queue_pair(d.qp_used, d.name);
  }

  void release(CompressDevice& d, uint16_t qp) {
    std::lock_guard lock(mu_);
    d.qp_used.at(qp) = false;
  }

  rte_mempool* ops() const { return ops_; }

 private:
  CompressDevices() {
    require_dpdk();
    for (uint8_t id = 0; id < rte_compressdev_count(); ++id) {
      rte_compressdev_info info{};
      rte_compressdev_info_get(id, &info);
      CompressDevice d;
      d.id = id;
      d.name = rte_compressdev_name_get(id);
      d.driver = info.driver_name ? info.driver_name : "";
      d.features = info.feature_flags;
      // All queue pairs are set up at once (a started device takes no more);
      // 0 means no limit: one per CPU, at least 8, is plenty.
      d.nb_qps = info.max_nb_queue_pairs
                     ? std::min<uint16_t>(info.max_nb_queue_pairs, kMaxQueuePairs)
                     : static_cast<uint16_t>(std::clamp(std::thread::hardware_concurrency(), 8u, 256u));
      if (const rte_compressdev_capabilities* cap = rte_compressdev_capability_get(id, RTE_COMP_ALGO_DEFLATE)) {
        d.deflate_ff = cap->comp_feature_flags;
        d.window_max = static_cast<uint8_t>(cap->window_size.max);
      }
      devs_.push_back(d);
    }
    // Ops are taken once per kernel and kept: a burst's worth for each
    // queue pair any kernel may hold.
    unsigned qps = 0;
    for (const CompressDevice& d : devs_) qps += d.nb_qps;
    ops_ = rte_comp_op_pool_create(dev::unique_name("dpk_zop").c_str(), static_cast<unsigned>(qps * kMaxInflight + 64),
                                   0, 0, SOCKET_ID_ANY);
    if (!ops_) throw std::runtime_error(std::string("cannot create a compress op pool: ") + rte_strerror(rte_errno));
  }

  void start(CompressDevice& d) {
    const int socket = rte_compressdev_socket_id(d.id);
    rte_compressdev_config conf{};
    conf.socket_id = socket;
    conf.nb_queue_pairs = d.nb_qps;
    // One private xform per kernel; compress_isal sizes its xform pool from
    // this once and refuses to be reconfigured larger, so leave room.
    conf.max_nb_priv_xforms = static_cast<uint16_t>(2 * d.nb_qps + 8);
    conf.max_nb_streams = 0;
    if (rte_compressdev_configure(d.id, &conf) < 0)
      throw Unavailable("cannot configure " + d.name + " with " + std::to_string(d.nb_qps) + " queue pairs");
    for (uint16_t q = 0; q < d.nb_qps; ++q)
      if (rte_compressdev_queue_pair_setup(d.id, q, kMaxInflight, socket) < 0)
        throw Unavailable("cannot set up queue pair " + std::to_string(q) + " of " + d.name);
    if (rte_compressdev_start(d.id) < 0) throw Unavailable("cannot start " + d.name);
    d.qp_used.assign(d.nb_qps, false);
    d.started = true;
  }

  std::mutex mu_;
  std::vector<CompressDevice> devs_;
  rte_mempool* ops_ = nullptr;
};

// A leased queue pair, given back on destruction.
class CompressQueuePair {
 public:
  explicit CompressQueuePair(CompressDevice& d) : dev_(d), qp_(CompressDevices::get().lease(d)) {}
  ~CompressQueuePair() { CompressDevices::get().release(dev_, qp_); }
  CompressQueuePair(const CompressQueuePair&) = delete;
  CompressQueuePair& operator=(const CompressQueuePair&) = delete;
  uint16_t id() const { return qp_; }

 private:
  CompressDevice& dev_;
  uint16_t qp_;
};

class DeflateKernel final : public DevKernel {
 public:
  DeflateKernel(CompressDevice& d, int level, size_t size, size_t out_room)
      : dev_(d),
        qp_(d),
        capacity_(std::max<size_t>(size, 1)),
        room_(out_room),
        // Packets past one segment are chained and go one at a time: their
        // per-operation cost is small beside their bytes.
        depth_(MbufChain::needs_chain(std::max(capacity_, room_)) ? 1 : dev::kBurstDepth),
        // A software PMD reads the caller's input where it lies
        // (AttachedMbufs); the output is copied out of DPDK memory, as
        // only the PMD knows how long it will be.
        attach_(!d.hardware() && capacity_ <= dev::AttachedMbufs::kMaxBytes),
        dst_(room_, depth_),
        ops_(depth_, nullptr) {
    try {
      init(level);
    } catch (...) {
      cleanup();
      throw;
    }
  }
  ~DeflateKernel() override { cleanup(); }

  std::string device() const override { return dev_.name; }
  size_t min_burst() const override { return depth_; }

  void process(std::span<const uint8_t> in, Bytes& out) override { run({&in, 1}, {&out, 1}); }

  // Bursts of up to depth_ operations in flight, each burst enqueued and
  // collected whole before the next.
  void process_burst(std::span<const std::span<const uint8_t>> in, std::span<Bytes> out) override {
    dev::in_bursts(depth_, in, out, [&](auto i, auto o) { run(i, o); });
  }

 private:
  void init(int level) {
    const size_t segs = std::max(MbufChain::needs_chain(capacity_) ? size_t{2} : size_t{1},
                                 dst_.segments_for(room_));
    if (segs > 1 && !(dev_.deflate_ff & RTE_COMP_FF_OOP_SGL_IN_SGL_OUT))
      throw Unavailable(std::to_string(capacity_) + "-byte inputs need chained mbufs and " + dev_.name +
                        " does not take scatter-gather in and out");
    if (attach_)
      attached_ = std::make_unique<dev::AttachedMbufs>(depth_);
    else
      src_ = std::make_unique<MbufChain>(capacity_, depth_);
    rte_comp_xform xform{};
    xform.type = RTE_COMP_COMPRESS;
    xform.compress.algo = RTE_COMP_ALGO_DEFLATE;
    xform.compress.deflate.huffman = RTE_COMP_HUFFMAN_DYNAMIC;
    xform.compress.level = level;
    xform.compress.window_size = std::min(kWindowLog2, dev_.window_max);
    xform.compress.chksum = RTE_COMP_CHECKSUM_NONE;
    xform.compress.hash_algo = RTE_COMP_HASH_ALGO_NONE;
    // compress_isal refuses level 0 (it has no stored-only mode), and DPDK
    // 22.11's isal_comp_pmd_priv_xform_create, on refusing, puts the address
    // of the caller's pointer (not the object) back into its xform pool,
    // which later hands that address out and corrupts memory. So that
    // refusal is made here, without asking the PMD.
    if (dev_.driver == "compress_isal" && level == RTE_COMP_LEVEL_NONE)
      throw Unavailable(dev_.name + " has no level 0 (stored blocks only; ISA-L's levels are 1-3)");
    void* created = nullptr;
    int rc = rte_compressdev_private_xform_create(dev_.id, &xform, &created);
    if (rc < 0)
      throw Unavailable(dev_.name + " refused raw DEFLATE at level " + std::to_string(level) + " (" +
                        rte_strerror(-rc) + ")");
    xform_ = created;
    if (rte_comp_op_bulk_alloc(CompressDevices::get().ops(), ops_.data(), static_cast<uint16_t>(depth_)) !=
        static_cast<int>(depth_)) {
      ops_.assign(depth_, nullptr);
      throw std::runtime_error("compress op pool exhausted");
    }
  }

  void cleanup() {
    for (rte_comp_op*& op : ops_) {
      if (op) rte_comp_op_free(op);
      op = nullptr;
    }
    if (xform_) rte_compressdev_private_xform_free(dev_.id, xform_);
    xform_ = nullptr;
  }

  // in.size() <= depth_ operations, all in flight at once. Every input is
  // checked before any is enqueued; a failed operation is reported after
  // the whole burst has come back, so nothing is left in flight.
  void run(std::span<const std::span<const uint8_t>> in, std::span<Bytes> out) {
    const size_t n = in.size();
    for (size_t i = 0; i < n; ++i) dev::check_fits(in[i].size(), capacity_, i, n);
    for (size_t i = 0; i < n; ++i) {
      rte_comp_op* op = ops_[i];
      op->m_src = attach_ ? attached_->attach(i, in[i].data(), in[i].size()) : src_->write(in[i], i);
      op->m_dst = dst_.shape(room_, i);  // the PMD may fill all of it
      op->src.offset = 0;
      op->src.length = static_cast<uint32_t>(in[i].size());
      op->dst.offset = 0;
      op->op_type = RTE_COMP_OP_STATELESS;
      op->flush_flag = RTE_COMP_FLUSH_FINAL;
      op->private_xform = xform_;
      op->status = RTE_COMP_OP_STATUS_NOT_PROCESSED;
      op->consumed = op->produced = 0;
    }
    dev::run_in_flight(
        ops_.data(), static_cast<uint16_t>(n),
        [&](rte_comp_op** o, uint16_t c) { return rte_compressdev_enqueue_burst(dev_.id, qp_.id(), o, c); },
        [&](rte_comp_op** o, uint16_t c) { return rte_compressdev_dequeue_burst(dev_.id, qp_.id(), o, c); },
        dev_.name);
    std::string failure;
    for (size_t i = 0; i < n; ++i) {
      const rte_comp_op* op = ops_[i];
      if (!failure.empty()) continue;
      if (op->status != RTE_COMP_OP_STATUS_SUCCESS)
        failure = dev_.name + ": compression failed (rte_comp_op_status " + std::to_string(op->status) + ")" +
                  dev::burst_place(i, n);
      else if (op->consumed != in[i].size())
        failure = dev_.name + " consumed " + std::to_string(op->consumed) + " of " + std::to_string(in[i].size()) +
                  " input bytes" + dev::burst_place(i, n);
      else {
        out[i].resize(op->produced);
        dst_.read(op->produced, out[i].data(), i);
      }
    }
    if (!failure.empty()) throw std::runtime_error(failure);
  }

  CompressDevice& dev_;
  CompressQueuePair qp_;
  size_t capacity_, room_, depth_;
  bool attach_;
  std::unique_ptr<dev::AttachedMbufs> attached_;  // attach mode: the caller's inputs
  std::unique_ptr<MbufChain> src_;                // copy mode: one packet per operation of a burst
  MbufChain dst_;                                 // one packet per operation of a burst
  void* xform_ = nullptr;
  std::vector<rte_comp_op*> ops_;
};

}  // namespace

size_t dev_deflate_bound(size_t size) { return size + size / 8 + 1024; }

std::vector<std::unique_ptr<Kernel>> dev_deflate_kernels(int level, size_t size, unsigned threads, size_t out_room) {
  if (level < RTE_COMP_LEVEL_PMD_DEFAULT || level > RTE_COMP_LEVEL_MAX)
    throw std::invalid_argument("compressdev levels are -1 (PMD default) to 9, not " + std::to_string(level));
  CompressDevice& d = CompressDevices::get().choose();
  std::vector<std::unique_ptr<Kernel>> v;
  for (unsigned i = 0; i < threads; ++i) v.push_back(std::make_unique<DeflateKernel>(d, level, size, out_room ? out_room : dev_deflate_bound(size)));
  return v;
}

}  // namespace dpukit::bench
