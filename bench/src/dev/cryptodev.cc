// The cryptodev kernels (see cryptodev.h). Facts about the PMDs that the
// code relies on come from DPDK 22.11's sources (drivers/crypto/openssl,
// drivers/crypto/ipsec_mb) and are cited where used.
#define ALLOW_EXPERIMENTAL_API  // the asymmetric cryptodev API is experimental in 22.11

#include "dev/cryptodev.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <rte_crypto.h>
#include <rte_cryptodev.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "dev/dev_support.h"
#include "dpdk_env.h"

namespace dpukit::bench {
namespace {

using dev::DeviceBuffer;
using dev::MbufChain;

// Descriptors per queue pair (a power of two: the software PMDs' completion
// rings need one). A symmetric kernel keeps a burst (dev::kBurstDepth) in
// flight; an asymmetric one, one operation (it takes milliseconds).
constexpr uint32_t kQueueDescriptors = 64;
constexpr uint16_t kMaxQueuePairs = 256;
// The IV sits in the crypto op's private area, right after the sym op.
constexpr uint16_t kIvOffset = sizeof(rte_crypto_op) + sizeof(rte_crypto_sym_op);
constexpr uint16_t kIvRoom = 16;
constexpr size_t kMaxDigest = 64;

// One cryptodev as this process uses it: configured once, on first use,
// with every queue pair it has; kernels lease queue pairs.
struct CryptoDevice {
  uint8_t id = 0;
  std::string name, driver;
  uint64_t features = 0;
  uint16_t max_qps = 0;
  bool started = false;
  std::vector<bool> qp_used;
  rte_mempool* sym_sessions = nullptr;
  rte_mempool* asym_sessions = nullptr;
  bool hardware() const { return features & RTE_CRYPTODEV_FF_HW_ACCELERATED; }
};

class CryptoDevices {
 public:
  static CryptoDevices& get() {
    static CryptoDevices d;
    return d;
  }

  // The device chosen for a capability: a hardware PMD first, else the
  // first (lowest id) software PMD; throws Unavailable naming `what`.
  CryptoDevice& choose(const std::string& what, const std::function<bool(const CryptoDevice&)>& has) {
    std::lock_guard lock(mu_);
    CryptoDevice* best = nullptr;
    std::string names;
    for (CryptoDevice& d : devs_) {
      names += (names.empty() ? "" : ", ") + d.name;
      if (has(d) && (!best || (d.hardware() && !best->hardware()))) best = &d;
    }
    if (!best)
      throw Unavailable("no cryptodev offers " + what + " (devices: " + (names.empty() ? "none" : names) + ")");
    return *best;
  }

  // A free queue pair of `d` (configuring and starting `d` on first use).
  uint16_t lease(CryptoDevice& d) {
    std::lock_guard lock(mu_);
    if (!d.started) start(d);
    return dev::take_queue_pair(d.qp_used, d.name, "; a vdev takes max_nb_queue_pairs=N");
  }

  void release(CryptoDevice& d, uint16_t qp) {
    std::lock_guard lock(mu_);
    d.qp_used.at(qp) = false;
  }

  rte_mempool* sym_ops() const { return sym_ops_; }
  rte_mempool* asym_ops() const { return asym_ops_; }

 private:
  CryptoDevices() {
    require_dpdk();
    for (uint8_t id = 0; id < rte_cryptodev_count(); ++id) {
      rte_cryptodev_info info;
      rte_cryptodev_info_get(id, &info);
      CryptoDevice d;
      d.id = id;
      d.name = rte_cryptodev_name_get(id);
      d.driver = info.driver_name ? info.driver_name : "";
      d.features = info.feature_flags;
      // All queue pairs are set up at once (a started device takes no
      // more); a few hundred threads is the most a run asks for.
      d.max_qps = std::min<uint16_t>(info.max_nb_queue_pairs, kMaxQueuePairs);
      devs_.push_back(d);
    }
    // Ops are taken once per kernel and kept: a burst's worth for each
    // queue pair any kernel may hold.
    unsigned qps = 0;
    for (const CryptoDevice& d : devs_) qps += d.max_qps;
    const std::string sym_name = dev::unique_name("dpk_cops"), asym_name = dev::unique_name("dpk_copa");
    sym_ops_ = rte_crypto_op_pool_create(sym_name.c_str(), RTE_CRYPTO_OP_TYPE_SYMMETRIC,
                                         static_cast<unsigned>(qps * dev::kBurstDepth + 64), 0, kIvRoom,
                                         SOCKET_ID_ANY);
    asym_ops_ = rte_crypto_op_pool_create(asym_name.c_str(), RTE_CRYPTO_OP_TYPE_ASYMMETRIC, 256, 0, 0, SOCKET_ID_ANY);
    if (!sym_ops_ || !asym_ops_)
      throw std::runtime_error(std::string("cannot create crypto op pools: ") + rte_strerror(rte_errno));
  }

  void start(CryptoDevice& d) {
    const int socket = rte_cryptodev_socket_id(d.id);
    rte_cryptodev_config conf{};
    conf.socket_id = socket;
    conf.nb_queue_pairs = d.max_qps;
    if (d.max_qps == 0 || rte_cryptodev_configure(d.id, &conf) < 0)
      throw Unavailable("cannot configure " + d.name + " with " + std::to_string(d.max_qps) + " queue pairs");
    rte_cryptodev_qp_conf qp_conf{};
    qp_conf.nb_descriptors = kQueueDescriptors;
    for (uint16_t q = 0; q < d.max_qps; ++q)
      if (rte_cryptodev_queue_pair_setup(d.id, q, &qp_conf, socket) < 0)
        throw Unavailable("cannot set up queue pair " + std::to_string(q) + " of " + d.name);
    // Each kernel holds one session, and briefly one per operation in
    // flight when it makes a session per operation (key_schedule per
    // packet; DSA on crypto_openssl, see DsaSignKernel).
    const uint32_t sessions = static_cast<uint32_t>((dev::kBurstDepth + 2) * d.max_qps + 8);
    if (d.features & RTE_CRYPTODEV_FF_SYMMETRIC_CRYPTO) {
      // The private session size may depend on the queue pair count
      // (crypto_openssl keeps a context per queue pair): ask after configuring.
      const std::string name = dev::unique_name("dpk_css");
      d.sym_sessions = rte_cryptodev_sym_session_pool_create(
          name.c_str(), sessions, rte_cryptodev_sym_get_private_session_size(d.id), 0, 0, socket);
      if (!d.sym_sessions) throw Unavailable("cannot create a session pool for " + d.name);
    }
    if (d.features & RTE_CRYPTODEV_FF_ASYMMETRIC_CRYPTO) {
      const std::string name = dev::unique_name("dpk_cas");
      d.asym_sessions = rte_cryptodev_asym_session_pool_create(name.c_str(), sessions, 0, 0, socket);
      if (!d.asym_sessions) throw Unavailable("cannot create an asymmetric session pool for " + d.name);
    }
    if (rte_cryptodev_start(d.id) < 0) throw Unavailable("cannot start " + d.name);
    d.qp_used.assign(d.max_qps, false);
    d.started = true;
  }

  std::mutex mu_;
  std::vector<CryptoDevice> devs_;
  rte_mempool* sym_ops_ = nullptr;
  rte_mempool* asym_ops_ = nullptr;
};

// A leased queue pair, given back on destruction.
class QueuePair {
 public:
  explicit QueuePair(CryptoDevice& d) : dev_(d), qp_(CryptoDevices::get().lease(d)) {}
  ~QueuePair() { CryptoDevices::get().release(dev_, qp_); }
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  CryptoDevice& device() const { return dev_; }
  uint8_t dev_id() const { return dev_.id; }
  uint16_t qp() const { return qp_; }

  // Enqueues the `n` operations and polls until all have come back (each
  // op's status says how it went).
  void run_burst(rte_crypto_op** ops, uint16_t n) const {
    for (uint16_t i = 0; i < n; ++i) ops[i]->status = RTE_CRYPTO_OP_STATUS_NOT_PROCESSED;
    dev::run_in_flight(
        ops, n, [&](rte_crypto_op** o, uint16_t c) { return rte_cryptodev_enqueue_burst(dev_.id, qp_, o, c); },
        [&](rte_crypto_op** o, uint16_t c) { return rte_cryptodev_dequeue_burst(dev_.id, qp_, o, c); }, dev_.name);
  }

  // One operation, which must succeed.
  void run(rte_crypto_op* op) const {
    run_burst(&op, 1);
    if (op->status != RTE_CRYPTO_OP_STATUS_SUCCESS)
      throw std::runtime_error(dev_.name + ": operation failed (rte_crypto_op_status " + std::to_string(op->status) +
                               ")");
  }

 private:
  CryptoDevice& dev_;
  uint16_t qp_;
};

struct OpDeleter {
  void operator()(rte_crypto_op* op) const { rte_crypto_op_free(op); }
};
using OpPtr = std::unique_ptr<rte_crypto_op, OpDeleter>;

OpPtr alloc_op(rte_mempool* pool, rte_crypto_op_type type) {
  OpPtr op(rte_crypto_op_alloc(pool, type));
  if (!op) throw std::runtime_error("crypto op pool exhausted");
  return op;
}

// ---- symmetric ---------------------------------------------------------

// crypto_aesni_mb (DPDK 22.11) does GCM on chained mbufs natively but other
// algorithms by copying the chain into a linear buffer and back, and the
// copy back (post_process_sgl_linear) counts bytes in a uint16_t: past 64 KiB
// the output is cut short (CBC) or the digest comes out zero. So inputs that
// need a chain go to another PMD for those.
constexpr const char* kChainedNote =
    " on chained mbufs (inputs over one 64 KiB segment; crypto_aesni_mb is left out: it truncates those to 16 bits)";

enum class SymKind { kGcm, kCbc, kHash };

class SymKernel final : public DevKernel {
 public:
  // `xform` without its key, which is `key` (for a cipher); with
  // `session_per_packet` every operation gets a new session, so the key
  // schedule is part of each packet's cost (the operators' key_schedule).
  SymKernel(CryptoDevice& d, SymKind kind, const rte_crypto_sym_xform& xform, std::span<const uint8_t> key,
            std::span<const uint8_t> salt, size_t digest_len, size_t size, bool session_per_packet)
      : qp_(d),
        kind_(kind),
        digest_len_(digest_len),
        session_per_packet_(session_per_packet),
        xform_(xform),
        capacity_(std::max<size_t>(size, 1)),
        // A software PMD reads the caller's input and writes the output in
        // place of a copy (AttachedMbufs); a cipher's output is then a
        // second buffer, which needs out-of-place operations.
        attach_(!d.hardware() && capacity_ <= dev::AttachedMbufs::kMaxBytes &&
                (kind == SymKind::kHash || (d.features & RTE_CRYPTODEV_FF_OOP_LB_IN_LB_OUT))),
        // Packets past one segment are chained and go one at a time: their
        // per-operation cost is small beside their bytes.
        depth_(MbufChain::needs_chain(capacity_) ? 1 : dev::kBurstDepth),
        digests_(depth_ * kMaxDigest),
        ops_(depth_, nullptr),
        fresh_(depth_, nullptr) {
    if (attach_) {
      attached_ = std::make_unique<dev::AttachedMbufs>(2 * depth_);  // sources, then destinations
    } else {
      chains_ = std::make_unique<MbufChain>(capacity_, depth_);
      if (chains_->segments_for(capacity_) > 1 && !(d.features & RTE_CRYPTODEV_FF_IN_PLACE_SGL))
        throw Unavailable(std::to_string(size) + "-byte inputs need a chained mbuf and " + d.name +
                          " does not take in-place scatter-gather lists");
    }
    std::copy(salt.begin(), salt.end(), salt_);
    std::copy(key.begin(), key.end(), key_);
    if (kind == SymKind::kGcm) xform_.aead.key.data = key_;
    if (kind == SymKind::kCbc) xform_.cipher.key.data = key_;
    session_ = rte_cryptodev_sym_session_create(d.id, &xform_, d.sym_sessions);
    if (!session_) throw Unavailable(d.name + " refused the session: " + rte_strerror(rte_errno));
    if (rte_crypto_op_bulk_alloc(CryptoDevices::get().sym_ops(), RTE_CRYPTO_OP_TYPE_SYMMETRIC, ops_.data(),
                                 static_cast<uint16_t>(depth_)) != depth_) {
      rte_cryptodev_sym_session_free(d.id, session_);
      throw std::runtime_error("crypto op pool exhausted");
    }
    for (rte_crypto_op* op : ops_) rte_crypto_op_attach_sym_session(op, session_);
  }

  ~SymKernel() override {
    for (rte_crypto_op* op : ops_) rte_crypto_op_free(op);
    rte_cryptodev_sym_session_free(qp_.dev_id(), session_);
  }

  std::string device() const override { return qp_.device().name; }
  size_t min_burst() const override { return depth_; }

  void process(std::span<const uint8_t> in, Bytes& out) override { run(nullptr, {&in, 1}, {&out, 1}); }

  // Bursts of up to depth_ operations in flight, each burst enqueued and
  // collected whole before the next (outputs are due when the call returns).
  void process_burst(std::span<const std::span<const uint8_t>> in, std::span<Bytes> out) override {
    dev::in_bursts(depth_, in, out, [&](auto i, auto o) { run(nullptr, i, o); });
  }

  // One operation with the IV given (12 bytes for GCM, 16 for CBC, unused
  // for a hash).
  void run_with_iv(const uint8_t* iv, std::span<const uint8_t> in, Bytes& out) { run(iv, {&in, 1}, {&out, 1}); }

 private:
  // Every input is checked before any operation is enqueued: a bad one
  // refuses the whole burst and leaves nothing in flight.
  void check(std::span<const uint8_t> in, size_t i, size_t n) const {
    dev::check_fits(in.size(), capacity_, i, n);
    if (kind_ == SymKind::kGcm && in.size() < 8)
      throw std::invalid_argument("aes: the input must hold the 8 IV bytes" + dev::burst_place(i, n));
    if (kind_ == SymKind::kCbc && in.size() < 16)
      throw std::invalid_argument("aes_cbc: the input must hold the 16 IV bytes" + dev::burst_place(i, n));
    if (kind_ == SymKind::kCbc && in.size() % 16 != 0)
      throw std::invalid_argument("aes_cbc: the input must be whole 16-byte blocks" + dev::burst_place(i, n));
  }

  // Operation i of a burst: its IV, data, digest and mbufs. In attach mode
  // the output is sized here and the device writes it in place.
  void prepare(size_t i, const uint8_t* iv, std::span<const uint8_t> in, Bytes& out) {
    const size_t n = in.size();
    rte_crypto_op* op = ops_[i];
    rte_crypto_sym_op* sym = op->sym;
    uint8_t* op_iv = rte_crypto_op_ctod_offset(op, uint8_t*, kIvOffset);
    uint8_t* digest = digests_.data() + i * kMaxDigest;
    rte_iova_t digest_iova = digests_.iova() + i * kMaxDigest;
    uint8_t* dst = nullptr;
    switch (kind_) {
      case SymKind::kGcm:
        if (iv) {
          std::memcpy(op_iv, iv, 12);
        } else {
          std::memcpy(op_iv, salt_, 4);
          std::memcpy(op_iv + 4, in.data(), 8);
        }
        if (attach_) {
          out.resize(n + 16);
          dst = out.data();
          digest = out.data() + n;
        }
        break;
      case SymKind::kCbc:
        std::memcpy(op_iv, iv ? iv : in.data(), 16);
        if (attach_) {
          out.resize(n);
          dst = out.data();
        }
        break;
      case SymKind::kHash:
        if (attach_) {
          out.resize(digest_len_);
          digest = out.data();
        }
        break;
    }
    if (attach_) digest_iova = static_cast<rte_iova_t>(reinterpret_cast<uintptr_t>(digest));
    switch (kind_) {
      case SymKind::kGcm:
        sym->aead.data.offset = 0;
        sym->aead.data.length = static_cast<uint32_t>(n);
        sym->aead.digest.data = digest;
        sym->aead.digest.phys_addr = digest_iova;
        sym->aead.aad.data = nullptr;
        sym->aead.aad.phys_addr = 0;
        break;
      case SymKind::kCbc:
        sym->cipher.data.offset = 0;
        sym->cipher.data.length = static_cast<uint32_t>(n);
        break;
      case SymKind::kHash:
        sym->auth.data.offset = 0;
        sym->auth.data.length = static_cast<uint32_t>(n);
        sym->auth.digest.data = digest;
        sym->auth.digest.phys_addr = digest_iova;
        break;
    }
    if (attach_) {
      sym->m_src = attached_->attach(i, in.data(), n);
      sym->m_dst = dst ? attached_->attach(depth_ + i, dst, n) : nullptr;
    } else {
      sym->m_src = chains_->write(in, i);
      sym->m_dst = nullptr;  // in place
    }
    if (session_per_packet_) {
      fresh_[i] = rte_cryptodev_sym_session_create(qp_.dev_id(), &xform_, qp_.device().sym_sessions);
      if (!fresh_[i]) throw std::runtime_error(qp_.device().name + " refused a session: " + rte_strerror(rte_errno));
      rte_crypto_op_attach_sym_session(op, fresh_[i]);
    }
  }

  // Operation i's output, where it was not written in place.
  void collect(size_t i, size_t n, Bytes& out) const {
    const uint8_t* digest = digests_.data() + i * kMaxDigest;
    switch (kind_) {
      case SymKind::kGcm:
        out.resize(n + 16);
        chains_->read(n, out.data(), i);
        std::memcpy(out.data() + n, digest, 16);
        break;
      case SymKind::kCbc:
        out.resize(n);
        chains_->read(n, out.data(), i);
        break;
      case SymKind::kHash:
        out.assign(digest, digest + digest_len_);
        break;
    }
  }

  void free_fresh_sessions(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (fresh_[i]) rte_cryptodev_sym_session_free(qp_.dev_id(), fresh_[i]);
      fresh_[i] = nullptr;
    }
  }

  // in.size() <= depth_ operations, all in flight at once.
  void run(const uint8_t* iv, std::span<const std::span<const uint8_t>> in, std::span<Bytes> out) {
    const size_t n = in.size();
    for (size_t i = 0; i < n; ++i) check(in[i], i, n);
    try {
      for (size_t i = 0; i < n; ++i) prepare(i, iv, in[i], out[i]);
    } catch (...) {
      free_fresh_sessions(n);
      throw;
    }
    qp_.run_burst(ops_.data(), static_cast<uint16_t>(n));
    size_t failed = n;
    for (size_t i = 0; i < n; ++i) {
      if (ops_[i]->status != RTE_CRYPTO_OP_STATUS_SUCCESS) {
        if (failed == n) failed = i;
      } else if (!attach_) {
        collect(i, in[i].size(), out[i]);
      }
    }
    if (session_per_packet_) free_fresh_sessions(n);
    if (failed != n)
      throw std::runtime_error(qp_.device().name + ": operation failed (rte_crypto_op_status " +
                               std::to_string(ops_[failed]->status) + ")" + dev::burst_place(failed, n));
  }

  QueuePair qp_;
  SymKind kind_;
  size_t digest_len_;
  bool session_per_packet_;
  rte_crypto_sym_xform xform_;
  size_t capacity_;
  bool attach_;
  size_t depth_;
  uint8_t key_[32] = {};
  uint8_t salt_[4] = {};
  std::unique_ptr<dev::AttachedMbufs> attached_;  // attach mode
  std::unique_ptr<MbufChain> chains_;             // copy mode: one packet per operation of a burst
  DeviceBuffer digests_;                          // copy mode: one digest per operation
  void* session_ = nullptr;
  std::vector<rte_crypto_op*> ops_;
  std::vector<void*> fresh_;  // session_per_packet: each operation's own session
};

const rte_cryptodev_symmetric_capability* sym_capability(uint8_t id, rte_crypto_sym_xform_type type, int algo) {
  rte_cryptodev_sym_capability_idx idx{};
  idx.type = type;
  if (type == RTE_CRYPTO_SYM_XFORM_AEAD) idx.algo.aead = static_cast<rte_crypto_aead_algorithm>(algo);
  if (type == RTE_CRYPTO_SYM_XFORM_CIPHER) idx.algo.cipher = static_cast<rte_crypto_cipher_algorithm>(algo);
  if (type == RTE_CRYPTO_SYM_XFORM_AUTH) idx.algo.auth = static_cast<rte_crypto_auth_algorithm>(algo);
  return rte_cryptodev_sym_capability_get(id, &idx);
}

void require_size(std::span<const uint8_t> bytes, size_t want, const char* what) {
  if (bytes.size() != want)
    throw std::invalid_argument(std::string(what) + " must be " + std::to_string(want) + " bytes, not " +
                                std::to_string(bytes.size()));
}

template <class K, class... Args>
std::vector<std::unique_ptr<Kernel>> make_n(unsigned threads, Args&&... args) {
  std::vector<std::unique_ptr<Kernel>> v;
  for (unsigned i = 0; i < threads; ++i) v.push_back(std::make_unique<K>(args...));
  return v;
}

// ---- asymmetric --------------------------------------------------------

const rte_cryptodev_asymmetric_xform_capability* asym_capability(uint8_t id, rte_crypto_asym_xform_type type) {
  rte_cryptodev_asym_capability_idx idx{};
  idx.type = type;
  return rte_cryptodev_asym_capability_get(id, &idx);
}

bool can_sign(uint8_t id, rte_crypto_asym_xform_type type) {
  const auto* cap = asym_capability(id, type);
  return cap && rte_cryptodev_asym_xform_capability_check_optype(cap, RTE_CRYPTO_ASYM_OP_SIGN);
}

// A big-endian number without its leading zero bytes (at least one byte).
Bytes strip_zeros(std::span<const uint8_t> v) {
  size_t i = 0;
  while (i + 1 < v.size() && v[i] == 0) ++i;
  return Bytes(v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
}

// SHA-256 on the CPU: the asymmetric API signs a message digest.
class Sha256 {
 public:
  Sha256() : md_(EVP_MD_fetch(nullptr, "SHA256", nullptr)), ctx_(EVP_MD_CTX_new()) {
    if (!md_ || !ctx_) throw std::runtime_error("OpenSSL SHA-256 unavailable");
  }
  ~Sha256() {
    EVP_MD_CTX_free(ctx_);
    EVP_MD_free(md_);
  }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void digest(std::span<const uint8_t> in, uint8_t* out32) {
    unsigned len = 0;
    if (EVP_DigestInit_ex2(ctx_, md_, nullptr) != 1 || EVP_DigestUpdate(ctx_, in.data(), in.size()) != 1 ||
        EVP_DigestFinal_ex(ctx_, out32, &len) != 1 || len != 32)
      throw std::runtime_error("OpenSSL SHA-256 failed");
  }

 private:
  EVP_MD* md_;
  EVP_MD_CTX* ctx_;
};

// A key component copied to the DPDK heap (hardware PMDs read it there).
struct KeyPart {
  explicit KeyPart(std::span<const uint8_t> v) : buf(std::max<size_t>(v.size(), 1)), len(v.size()) {
    std::copy(v.begin(), v.end(), buf.data());
  }
  rte_crypto_param param() const {
    rte_crypto_param p{};
    p.data = buf.data();
    p.iova = buf.iova();
    p.length = len;
    return p;
  }
  DeviceBuffer buf;
  size_t len;
};

// Copies a big-endian number of `len` bytes into `out`, left-padded to `width`.
void put_padded(const uint8_t* v, size_t len, size_t width, uint8_t* out) {
  if (len > width) throw std::runtime_error("signature component longer than the group order");
  std::memset(out, 0, width - len);
  std::memcpy(out + width - len, v, len);
}

class AsymKernelBase : public DevKernel {
 public:
  explicit AsymKernelBase(CryptoDevice& d)
      : qp_(d), op_(alloc_op(CryptoDevices::get().asym_ops(), RTE_CRYPTO_OP_TYPE_ASYMMETRIC)) {}
  ~AsymKernelBase() override {
    op_.reset();
    if (session_) rte_cryptodev_asym_session_free(qp_.dev_id(), session_);
  }
  std::string device() const override { return qp_.device().name; }

 protected:
  void* new_session(rte_crypto_asym_xform& xform) {
    void* s = nullptr;
    int rc = rte_cryptodev_asym_session_create(qp_.dev_id(), &xform, qp_.device().asym_sessions, &s);
    if (rc < 0 || !s) throw Unavailable(qp_.device().name + " refused the session (" + rte_strerror(-rc) + ")");
    return s;
  }
  void set_session(rte_crypto_asym_xform& xform) {
    session_ = new_session(xform);
    rte_crypto_op_attach_asym_session(op_.get(), static_cast<rte_cryptodev_asym_session*>(session_));
  }

  QueuePair qp_;
  OpPtr op_;
  void* session_ = nullptr;
  Sha256 sha_;
};

// The DER DigestInfo prefix for SHA-256 (RFC 8017 §9.2, note 1).
constexpr uint8_t kSha256DigestInfo[19] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                           0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};

class RsaSignKernel final : public AsymKernelBase {
 public:
  RsaSignKernel(CryptoDevice& d, const DevRsaKey& key)
      : AsymKernelBase(d),
        modlen_(strip_zeros(key.n).size()),
        n_(strip_zeros(key.n)),
        e_(strip_zeros(key.e)),
        d_(strip_zeros(key.d)),
        p_(strip_zeros(key.p)),
        q_(strip_zeros(key.q)),
        dp_(strip_zeros(key.dp)),
        dq_(strip_zeros(key.dq)),
        qinv_(strip_zeros(key.qinv)),
        message_(sizeof kSha256DigestInfo + 32),
        sign_(modlen_) {
    rte_crypto_asym_xform xform{};
    xform.xform_type = RTE_CRYPTO_ASYM_XFORM_RSA;
    xform.rsa.n = n_.param();
    xform.rsa.e = e_.param();
    // The CRT quintuple when the PMD takes it (faster), else the exponent.
    // (In 22.11, d and the quintuple share a union in the xform.)
    if (d.features & RTE_CRYPTODEV_FF_RSA_PRIV_OP_KEY_QT) {
      xform.rsa.key_type = RTE_RSA_KEY_TYPE_QT;
      xform.rsa.qt.p = p_.param();
      xform.rsa.qt.q = q_.param();
      xform.rsa.qt.dP = dp_.param();
      xform.rsa.qt.dQ = dq_.param();
      xform.rsa.qt.qInv = qinv_.param();
    } else {
      xform.rsa.key_type = RTE_RSA_KEY_TYPE_EXP;
      xform.rsa.d = d_.param();
    }
    set_session(xform);
    // crypto_openssl (OpenSSL 3 path) calls EVP_PKEY_sign with PKCS#1 v1.5
    // padding and no digest set, so it pads the message as given and
    // ignores padding.hash: it must be handed DigestInfo || hash. The API
    // (rte_crypto_asym.h) says a PMD builds DigestInfo from padding.hash
    // itself, so any other PMD gets the bare hash.
    digest_info_in_message_ = d.driver == "crypto_openssl";
  }

  void process(std::span<const uint8_t> in, Bytes& out) override {
    uint8_t* msg = message_.data();
    size_t msg_len = 32;
    if (digest_info_in_message_) {
      std::memcpy(msg, kSha256DigestInfo, sizeof kSha256DigestInfo);
      msg_len += sizeof kSha256DigestInfo;
    }
    sha_.digest(in, msg + msg_len - 32);
    rte_crypto_op* op = op_.get();
    rte_crypto_rsa_op_param& rsa = op->asym->rsa;
    rsa.op_type = RTE_CRYPTO_ASYM_OP_SIGN;
    rsa.message.data = msg;
    rsa.message.iova = message_.iova();
    rsa.message.length = msg_len;
    rsa.sign.data = sign_.data();
    rsa.sign.iova = sign_.iova();
    rsa.sign.length = 0;
    rsa.padding.type = RTE_CRYPTO_RSA_PADDING_PKCS1_5;
    rsa.padding.hash = RTE_CRYPTO_AUTH_SHA256;
    qp_.run(op);
    out.resize(modlen_);
    put_padded(sign_.data(), rsa.sign.length, modlen_, out.data());
  }

 private:
  size_t modlen_;
  KeyPart n_, e_, d_, p_, q_, dp_, dq_, qinv_;
  DeviceBuffer message_, sign_;
  bool digest_info_in_message_ = false;
};

class DsaSignKernel final : public AsymKernelBase {
 public:
  DsaSignKernel(CryptoDevice& d, const DevDsaKey& key)
      : AsymKernelBase(d),
        qlen_(strip_zeros(key.q).size()),
        p_(strip_zeros(key.p)),
        q_(strip_zeros(key.q)),
        g_(strip_zeros(key.g)),
        x_(strip_zeros(key.x)),
        digest_(32),
        r_(qlen_),
        s_(qlen_) {
    xform_.xform_type = RTE_CRYPTO_ASYM_XFORM_DSA;
    xform_.dsa.p = p_.param();
    xform_.dsa.q = q_.param();
    xform_.dsa.g = g_.param();
    xform_.dsa.x = x_.param();
    set_session(xform_);
    // crypto_openssl with OpenSSL 3 keeps the DSA key as an OSSL_PARAM_BLD
    // in the session and turns it into a key with OSSL_PARAM_BLD_to_param on
    // each sign, which empties the builder: a session signs once. So that
    // PMD gets a fresh session per operation (its cost is small next to the
    // signature's, and it is part of using this PMD).
    session_per_op_ = d.driver == "crypto_openssl";
  }

  void process(std::span<const uint8_t> in, Bytes& out) override {
    sha_.digest(in, digest_.data());
    if (session_per_op_ && signed_once_) {
      void* fresh = new_session(xform_);
      rte_cryptodev_asym_session_free(qp_.dev_id(), session_);
      session_ = fresh;
      rte_crypto_op_attach_asym_session(op_.get(), static_cast<rte_cryptodev_asym_session*>(session_));
    }
    rte_crypto_op* op = op_.get();
    rte_crypto_dsa_op_param& dsa = op->asym->dsa;
    dsa.op_type = RTE_CRYPTO_ASYM_OP_SIGN;
    dsa.message.data = digest_.data();
    dsa.message.iova = digest_.iova();
    dsa.message.length = 32;
    dsa.k.data = nullptr;  // the PMD draws k
    dsa.k.length = 0;
    dsa.r.data = r_.data();
    dsa.r.iova = r_.iova();
    dsa.r.length = 0;
    dsa.s.data = s_.data();
    dsa.s.iova = s_.iova();
    dsa.s.length = 0;
    signed_once_ = true;
    qp_.run(op);
    out.resize(2 * qlen_);
    put_padded(r_.data(), dsa.r.length, qlen_, out.data());
    put_padded(s_.data(), dsa.s.length, qlen_, out.data() + qlen_);
  }

 private:
  size_t qlen_;
  KeyPart p_, q_, g_, x_;
  DeviceBuffer digest_, r_, s_;
  rte_crypto_asym_xform xform_{};
  bool session_per_op_ = false;
  bool signed_once_ = false;
};

// ECDSA on P-256 for a PMD that offers it. The per-message secret k is
// drawn here (OpenSSL's DRBG) for every call: DPDK 22.11 has no way to ask
// whether a PMD draws k itself, and some (e.g. QAT) require it given.
class EcdsaSignKernel final : public AsymKernelBase {
 public:
  EcdsaSignKernel(CryptoDevice& d, std::span<const uint8_t> private_key)
      : AsymKernelBase(d), pkey_(private_key), digest_(32), k_(32), r_(32), s_(32) {
    EC_GROUP* group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    order_ = group ? BN_dup(EC_GROUP_get0_order(group)) : nullptr;
    EC_GROUP_free(group);
    k_bn_ = BN_new();
    if (!order_ || !k_bn_) throw std::runtime_error("OpenSSL P-256 group unavailable");
    rte_crypto_asym_xform xform{};
    xform.xform_type = RTE_CRYPTO_ASYM_XFORM_ECDSA;
    xform.ec.curve_id = RTE_CRYPTO_EC_GROUP_SECP256R1;
    set_session(xform);
  }
  ~EcdsaSignKernel() override {
    BN_free(order_);
    BN_clear_free(k_bn_);
  }

  void process(std::span<const uint8_t> in, Bytes& out) override {
    sha_.digest(in, digest_.data());
    do {  // k uniform in [1, n-1]
      if (BN_priv_rand_range_ex(k_bn_, order_, 0, nullptr) != 1) throw std::runtime_error("OpenSSL RNG failed");
    } while (BN_is_zero(k_bn_));
    if (BN_bn2binpad(k_bn_, k_.data(), 32) != 32) throw std::runtime_error("k does not fit 32 bytes");
    rte_crypto_op* op = op_.get();
    rte_crypto_ecdsa_op_param& ecdsa = op->asym->ecdsa;
    ecdsa.op_type = RTE_CRYPTO_ASYM_OP_SIGN;
    ecdsa.pkey = pkey_.param();
    ecdsa.message.data = digest_.data();
    ecdsa.message.iova = digest_.iova();
    ecdsa.message.length = 32;
    ecdsa.k.data = k_.data();
    ecdsa.k.iova = k_.iova();
    ecdsa.k.length = 32;
    ecdsa.r.data = r_.data();
    ecdsa.r.iova = r_.iova();
    ecdsa.r.length = 0;
    ecdsa.s.data = s_.data();
    ecdsa.s.iova = s_.iova();
    ecdsa.s.length = 0;
    qp_.run(op);
    out.resize(64);
    // PMDs report either the minimal length or the full 32 bytes.
    put_padded(r_.data(), ecdsa.r.length ? ecdsa.r.length : 32, 32, out.data());
    put_padded(s_.data(), ecdsa.s.length ? ecdsa.s.length : 32, 32, out.data() + 32);
  }

 private:
  KeyPart pkey_;
  DeviceBuffer digest_, k_, r_, s_;
  BIGNUM* order_ = nullptr;
  BIGNUM* k_bn_ = nullptr;
};

}  // namespace

std::vector<std::unique_ptr<Kernel>> dev_aes_gcm_kernels(std::span<const uint8_t> key, std::span<const uint8_t> salt,
                                                         size_t size, unsigned threads, bool session_per_packet) {
  require_size(key, 16, "AES-128-GCM key");
  require_size(salt, 4, "AES-GCM salt");
  CryptoDevice& d =
      CryptoDevices::get().choose("AES-128-GCM (12-byte IV, 16-byte tag, no AAD)", [](const CryptoDevice& c) {
        const auto* cap = sym_capability(c.id, RTE_CRYPTO_SYM_XFORM_AEAD, RTE_CRYPTO_AEAD_AES_GCM);
        return cap && rte_cryptodev_sym_capability_check_aead(cap, 16, 16, 0, 12) == 0;
      });
  rte_crypto_sym_xform xform{};
  xform.type = RTE_CRYPTO_SYM_XFORM_AEAD;
  xform.aead.op = RTE_CRYPTO_AEAD_OP_ENCRYPT;
  xform.aead.algo = RTE_CRYPTO_AEAD_AES_GCM;
  xform.aead.key.length = 16;  // the data: the kernel's copy
  xform.aead.iv.offset = kIvOffset;
  xform.aead.iv.length = 12;
  xform.aead.digest_length = 16;
  xform.aead.aad_length = 0;
  return make_n<SymKernel>(threads, d, SymKind::kGcm, xform, key, salt, size_t{16}, size, session_per_packet);
}

Bytes dev_aes_gcm_encrypt_with_iv(std::span<const uint8_t> key, std::span<const uint8_t> iv,
                                  std::span<const uint8_t> plaintext) {
  require_size(iv, 12, "AES-GCM IV");
  const uint8_t no_salt[4] = {};
  auto k = dev_aes_gcm_kernels(key, no_salt, plaintext.size(), 1);
  Bytes out;
  static_cast<SymKernel&>(*k[0]).run_with_iv(iv.data(), plaintext, out);
  return out;
}

std::vector<std::unique_ptr<Kernel>> dev_aes_cbc_kernels(std::span<const uint8_t> key, size_t size,
                                                         unsigned threads, bool session_per_packet) {
  require_size(key, 16, "AES-128-CBC key");
  const bool chained = MbufChain::needs_chain(size);
  CryptoDevice& d = CryptoDevices::get().choose(
      std::string("AES-128-CBC") + (chained ? kChainedNote : ""), [&](const CryptoDevice& c) {
        const auto* cap = sym_capability(c.id, RTE_CRYPTO_SYM_XFORM_CIPHER, RTE_CRYPTO_CIPHER_AES_CBC);
        return cap && rte_cryptodev_sym_capability_check_cipher(cap, 16, 16) == 0 &&
               !(chained && c.driver == "crypto_aesni_mb");
      });
  rte_crypto_sym_xform xform{};
  xform.type = RTE_CRYPTO_SYM_XFORM_CIPHER;
  xform.cipher.op = RTE_CRYPTO_CIPHER_OP_ENCRYPT;
  xform.cipher.algo = RTE_CRYPTO_CIPHER_AES_CBC;
  xform.cipher.key.length = 16;  // the data: the kernel's copy
  xform.cipher.iv.offset = kIvOffset;
  xform.cipher.iv.length = 16;
  return make_n<SymKernel>(threads, d, SymKind::kCbc, xform, key, std::span<const uint8_t>(), size_t{0}, size,
                           session_per_packet);
}

Bytes dev_aes_cbc_encrypt_with_iv(std::span<const uint8_t> key, std::span<const uint8_t> iv,
                                  std::span<const uint8_t> plaintext) {
  require_size(iv, 16, "AES-CBC IV");
  auto k = dev_aes_cbc_kernels(key, plaintext.size(), 1);
  Bytes out;
  static_cast<SymKernel&>(*k[0]).run_with_iv(iv.data(), plaintext, out);
  return out;
}

std::vector<std::unique_ptr<Kernel>> dev_digest_kernels(DevHash hash, size_t size, unsigned threads) {
  rte_crypto_auth_algorithm algo = RTE_CRYPTO_AUTH_SHA256;
  uint16_t len = 32;
  const char* name = "SHA-256";
  switch (hash) {
    case DevHash::kMd5: algo = RTE_CRYPTO_AUTH_MD5, len = 16, name = "MD5"; break;
    case DevHash::kSha1: algo = RTE_CRYPTO_AUTH_SHA1, len = 20, name = "SHA-1"; break;
    case DevHash::kSha256: break;
  }
  // crypto_aesni_mb has plain SHA-1/SHA-256 but MD5 only as HMAC, so MD5
  // lands on crypto_openssl: chosen by capability, not by name.
  const bool chained = MbufChain::needs_chain(size);
  CryptoDevice& d = CryptoDevices::get().choose(
      std::string("plain ") + name + " (no key)" + (chained ? kChainedNote : ""), [&](const CryptoDevice& c) {
        const auto* cap = sym_capability(c.id, RTE_CRYPTO_SYM_XFORM_AUTH, algo);
        return cap && rte_cryptodev_sym_capability_check_auth(cap, 0, len, 0) == 0 &&
               !(chained && c.driver == "crypto_aesni_mb");
      });
  rte_crypto_sym_xform xform{};
  xform.type = RTE_CRYPTO_SYM_XFORM_AUTH;
  xform.auth.op = RTE_CRYPTO_AUTH_OP_GENERATE;
  xform.auth.algo = algo;
  xform.auth.digest_length = len;
  return make_n<SymKernel>(threads, d, SymKind::kHash, xform, std::span<const uint8_t>(), std::span<const uint8_t>(),
                           size_t{len}, size, false);
}

std::vector<std::unique_ptr<Kernel>> dev_rsa_sign_kernels(const DevRsaKey& key, unsigned threads) {
  const size_t modlen = strip_zeros(key.n).size();
  CryptoDevice& d = CryptoDevices::get().choose(
      "RSA-" + std::to_string(modlen * 8) + " PKCS#1 v1.5 signing", [&](const CryptoDevice& c) {
        const auto* cap = asym_capability(c.id, RTE_CRYPTO_ASYM_XFORM_RSA);
        return cap && rte_cryptodev_asym_xform_capability_check_optype(cap, RTE_CRYPTO_ASYM_OP_SIGN) &&
               rte_cryptodev_asym_xform_capability_check_modlen(cap, static_cast<uint16_t>(modlen)) == 0 &&
               (c.features & (RTE_CRYPTODEV_FF_RSA_PRIV_OP_KEY_QT | RTE_CRYPTODEV_FF_RSA_PRIV_OP_KEY_EXP));
      });
  return make_n<RsaSignKernel>(threads, d, key);
}

std::vector<std::unique_ptr<Kernel>> dev_dsa_sign_kernels(const DevDsaKey& key, unsigned threads) {
  CryptoDevice& d = CryptoDevices::get().choose(
      "DSA signing", [](const CryptoDevice& c) { return can_sign(c.id, RTE_CRYPTO_ASYM_XFORM_DSA); });
  return make_n<DsaSignKernel>(threads, d, key);
}

std::vector<std::unique_ptr<Kernel>> dev_ecdsa_p256_sign_kernels(std::span<const uint8_t> private_key,
                                                                 unsigned threads) {
  require_size(private_key, 32, "P-256 private key");
  // DPDK 22.11's crypto_openssl lists RSA, modexp, modinv, DH and DSA in its
  // capability table, no ECDSA (nor do its later releases through 25.11);
  // crypto_aesni_mb has no asymmetric crypto at all.
  CryptoDevice& d = CryptoDevices::get().choose(
      "ECDSA signing (DPDK 22.11's crypto_openssl PMD has no ECDSA capability; "
      "the qat, cnxk and octeontx PMDs have one)",
      [](const CryptoDevice& c) { return can_sign(c.id, RTE_CRYPTO_ASYM_XFORM_ECDSA); });
  return make_n<EcdsaSignKernel>(threads, d, private_key);
}

}  // namespace dpukit::bench
