// The security operators (§4.1.3): AES-128-GCM as IPsec ESP and TLS seal
// one packet, AES-128-CBC, and the MD5, SHA-1 and SHA-256 digests.
// ref is hash_ref's plain C++; lib is OpenSSL 3 through EVP with the
// algorithm fetched once and a context per kernel. dev is DPDK cryptodev
// (dev/cryptodev.h): crypto_aesni_mb here for AES and SHA, crypto_openssl
// for MD5; a DPU's PMD where it has the capability.
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "hash_ref.h"
#include "dev/cryptodev.h"
#include "operator.h"

namespace dpukit::bench {
namespace {

// The fixed key material every run uses, derived from a constant so that
// anyone can recompute it: SHA-256("dpukit-bench security key"); bytes 0-15
// are the AES-128 key, bytes 16-19 the GCM salt (ESP's implicit IV part,
// RFC 4106 §4).
struct KeyMaterial {
  std::array<uint8_t, 16> key;
  std::array<uint8_t, 4> salt;
};
const KeyMaterial& key_material() {
  static const KeyMaterial m = [] {
    static const char kLabel[] = "dpukit-bench security key";
    const auto d = sha256_ref({reinterpret_cast<const uint8_t*>(kLabel), sizeof kLabel - 1});
    KeyMaterial k;
    std::copy_n(d.begin(), 16, k.key.begin());
    std::copy_n(d.begin() + 16, 4, k.salt.begin());
    return k;
  }();
  return m;
}

constexpr size_t kGcmExplicitIv = 8, kGcmTag = 16, kAesBlock = 16;

// The 12-byte GCM nonce of a packet: salt || the packet's first 8 bytes.
std::array<uint8_t, 12> gcm_nonce(std::span<const uint8_t> in) {
  std::array<uint8_t, 12> iv;
  std::copy_n(key_material().salt.begin(), 4, iv.begin());
  std::copy_n(in.begin(), kGcmExplicitIv, iv.begin() + 4);
  return iv;
}

[[noreturn]] void openssl_failed(const char* what) {
  throw std::runtime_error(std::string("OpenSSL ") + what + " failed");
}

using CipherPtr = std::shared_ptr<EVP_CIPHER>;
CipherPtr fetch_cipher(const char* name) {
  EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, name, nullptr);
  if (!c) throw Unavailable(std::string("OpenSSL has no ") + name + " (EVP_CIPHER_fetch failed)");
  return CipherPtr(c, EVP_CIPHER_free);
}

// How often the key schedule runs (parameter key_schedule of aes and
// aes_cbc). "once": per kernel, as an ESP/TLS endpoint keeps one context per
// SA and a packet only sets its IV. "per_packet": every packet sets key and
// IV, as sessionless crypto (a DPDK cryptodev sessionless op) or a gateway
// with more SAs than cached contexts does. It is also what `openssl speed
// -evp aes-128-gcm` of OpenSSL 3.0.19 does per record (key and IV, no tag
// read), so the two can be compared doing the same work.
bool key_schedule_per_packet(const Operator& op) {
  const std::string v = op.param("key_schedule");
  if (v == "once") return false;
  if (v == "per_packet") return true;
  throw std::invalid_argument(op.info().name + ".key_schedule: '" + v + "' is neither once nor per_packet");
}
const std::map<std::string, std::string> kCipherParams = {{"key_schedule", "once"}};

// An EVP_CIPHER_CTX set up for encryption with the key; begin() starts a
// packet with its IV (and the key again when it is scheduled per packet).
class EvpEncryptContext {
 public:
  EvpEncryptContext(CipherPtr cipher, bool rekey_per_packet)
      : cipher_(std::move(cipher)), ctx_(EVP_CIPHER_CTX_new()), rekey_(rekey_per_packet) {
    if (!ctx_ || EVP_EncryptInit_ex2(ctx_, cipher_.get(), key_material().key.data(), nullptr, nullptr) != 1 ||
        EVP_CIPHER_CTX_set_padding(ctx_, 0) != 1)
      openssl_failed("cipher context setup");
  }
  ~EvpEncryptContext() { EVP_CIPHER_CTX_free(ctx_); }
  EvpEncryptContext(const EvpEncryptContext&) = delete;
  EvpEncryptContext& operator=(const EvpEncryptContext&) = delete;
  EVP_CIPHER_CTX* begin(const uint8_t* iv) {
    if (EVP_EncryptInit_ex2(ctx_, nullptr, rekey_ ? key_material().key.data() : nullptr, iv, nullptr) != 1)
      openssl_failed("EVP_EncryptInit_ex2 (IV)");
    return ctx_;
  }

 private:
  CipherPtr cipher_;  // kept alive while the context refers to it
  EVP_CIPHER_CTX* ctx_;
  bool rekey_;
};

// ---- aes: AES-128-GCM, one ESP/TLS record ----

class RefGcm final : public Kernel {
 public:
  explicit RefGcm(bool rekey_per_packet) : gcm_(key_material().key), rekey_(rekey_per_packet) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    if (rekey_) gcm_ = Aes128GcmRef(key_material().key);
    out.resize(in.size() + kGcmTag);
    const auto iv = gcm_nonce(in);
    const auto tag = gcm_.encrypt(iv, {}, in, std::span(out).first(in.size()));
    std::copy(tag.begin(), tag.end(), out.begin() + static_cast<std::ptrdiff_t>(in.size()));
  }

 private:
  Aes128GcmRef gcm_;
  bool rekey_;
};

class LibGcm final : public Kernel {
 public:
  LibGcm(const CipherPtr& cipher, bool rekey_per_packet) : ctx_(cipher, rekey_per_packet) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(in.size() + kGcmTag);
    EVP_CIPHER_CTX* c = ctx_.begin(gcm_nonce(in).data());
    int n = 0, tail = 0;
    if (EVP_EncryptUpdate(c, out.data(), &n, in.data(), static_cast<int>(in.size())) != 1 ||
        EVP_EncryptFinal_ex(c, out.data() + n, &tail) != 1)
      openssl_failed("AES-128-GCM encryption");
    // The tag through the provider parameter directly: EVP_CIPHER_CTX_ctrl
    // (EVP_CTRL_AEAD_GET_TAG) wraps the same call and costs ~10% more per
    // 64-byte packet on OpenSSL 3.0.
    OSSL_PARAM tag[] = {OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, out.data() + in.size(), kGcmTag),
                        OSSL_PARAM_construct_end()};
    if (EVP_CIPHER_CTX_get_params(c, tag) != 1) openssl_failed("AES-128-GCM tag");
  }

 private:
  EvpEncryptContext ctx_;
};

void require_gcm_size(size_t size) {
  if (size < kGcmExplicitIv)
    throw std::invalid_argument("aes: the input carries its 8-byte explicit IV, so it must be at least 8 bytes (got " +
                                std::to_string(size) + ")");
}

class AesGcm final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"aes", "security",
                                "AES-128-GCM seal of one packet: IV = 4-byte salt || the packet's first 8 bytes, no "
                                "AAD; output = ciphertext || 16-byte tag",
                                1, {Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}};
    return i;
  }
  // The bulk-crypto engine, where the card's does AES-GCM; the body is OpenSSL's.
  std::optional<EngineWork> engine_work() const override {
    return EngineWork{EngineKind::kBulkCrypto, "", "AES-GCM"};
  }
  std::map<std::string, std::string> default_params() const override { return kCipherParams; }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    require_gcm_size(size);
    return Operator::make_inputs(size, count, seed);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    require_gcm_size(size);
    const bool rekey = key_schedule_per_packet(*this);
    switch (b) {
      case Backend::kRef: return kernels_of<RefGcm>(threads, rekey);
      case Backend::kLib: return kernels_of<LibGcm>(threads, fetch_cipher("AES-128-GCM"), rekey);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: return dev_aes_gcm_kernels(key_material().key, key_material().salt, size, threads, rekey);
    }
    throw Unavailable("no such backend");
  }
};

// ---- aes_cbc: AES-128-CBC, no padding ----

std::span<const uint8_t, 16> cbc_iv(std::span<const uint8_t> in) { return in.first<kAesBlock>(); }

class RefCbc final : public Kernel {
 public:
  explicit RefCbc(bool rekey_per_packet) : aes_(key_material().key), rekey_(rekey_per_packet) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    if (rekey_) aes_ = Aes128Ref(key_material().key);
    out.resize(in.size());
    aes128_cbc_encrypt_ref(aes_, cbc_iv(in), in, out);
  }

 private:
  Aes128Ref aes_;
  bool rekey_;
};

class LibCbc final : public Kernel {
 public:
  LibCbc(const CipherPtr& cipher, bool rekey_per_packet) : ctx_(cipher, rekey_per_packet) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(in.size());
    EVP_CIPHER_CTX* c = ctx_.begin(cbc_iv(in).data());
    int n = 0, tail = 0;
    if (EVP_EncryptUpdate(c, out.data(), &n, in.data(), static_cast<int>(in.size())) != 1 ||
        EVP_EncryptFinal_ex(c, out.data() + n, &tail) != 1 || static_cast<size_t>(n + tail) != in.size())
      openssl_failed("AES-128-CBC encryption");
  }

 private:
  EvpEncryptContext ctx_;
};

void require_cbc_size(size_t size) {
  if (size == 0 || size % kAesBlock != 0)
    throw std::invalid_argument("aes_cbc: CBC without padding takes whole 16-byte blocks, so the size must be a "
                                "positive multiple of 16 (got " + std::to_string(size) + ")");
}

class AesCbc final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"aes_cbc", "security",
                                "AES-128-CBC encryption of one packet, no padding: IV = the packet's first 16 bytes, "
                                "plaintext = the whole packet; output = ciphertext",
                                1, {Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}};
    return i;
  }
  // Only where the card's bulk-crypto engine does CBC (EngineSpec::algorithms).
  std::optional<EngineWork> engine_work() const override {
    return EngineWork{EngineKind::kBulkCrypto, "", "AES-CBC"};
  }
  std::map<std::string, std::string> default_params() const override { return kCipherParams; }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    require_cbc_size(size);
    return Operator::make_inputs(size, count, seed);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    require_cbc_size(size);
    const bool rekey = key_schedule_per_packet(*this);
    switch (b) {
      case Backend::kRef: return kernels_of<RefCbc>(threads, rekey);
      case Backend::kLib: return kernels_of<LibCbc>(threads, fetch_cipher("AES-128-CBC"), rekey);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: return dev_aes_cbc_kernels(key_material().key, size, threads, rekey);
    }
    throw Unavailable("no such backend");
  }
};

// ---- md5, sha1, sha256 ----

template <size_t N>
using RefDigestFn = std::array<uint8_t, N> (*)(std::span<const uint8_t>);

template <size_t N>
class RefDigest final : public Kernel {
 public:
  explicit RefDigest(RefDigestFn<N> fn) : fn_(fn) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const auto d = fn_(in);
    out.assign(d.begin(), d.end());
  }

 private:
  RefDigestFn<N> fn_;
};

using MdPtr = std::shared_ptr<EVP_MD>;

// One-shot EVP_Digest with the EVP_MD fetched once, as `openssl speed -evp
// <digest>` times it (EVP_Digest makes and frees its context per call).
class LibDigest final : public Kernel {
 public:
  explicit LibDigest(MdPtr md) : md_(std::move(md)), size_(static_cast<size_t>(EVP_MD_get_size(md_.get()))) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(size_);
    if (EVP_Digest(in.data(), in.size(), out.data(), nullptr, md_.get(), nullptr) != 1) openssl_failed("EVP_Digest");
  }

 private:
  MdPtr md_;
  size_t size_;
};

template <size_t N>
class Digest final : public Operator {
 public:
  Digest(const char* name, const char* evp_name, const char* what, RefDigestFn<N> ref, DevHash dev_hash)
      : info_{name, "security", what, 1, {Backend::kRef, Backend::kLib, Backend::kDev}},
        evp_name_(evp_name),
        ref_(ref),
        dev_hash_(dev_hash) {}
  const OperatorInfo& info() const override { return info_; }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<RefDigest<N>>(threads, ref_);
      case Backend::kLib: {
        EVP_MD* md = EVP_MD_fetch(nullptr, evp_name_, nullptr);
        if (!md) throw Unavailable(std::string("OpenSSL has no ") + evp_name_ + " (EVP_MD_fetch failed)");
        return kernels_of<LibDigest>(threads, MdPtr(md, EVP_MD_free));
      }
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: return dev_digest_kernels(dev_hash_, size, threads);
    }
    throw Unavailable("no such backend");
  }

 private:
  OperatorInfo info_;
  const char* evp_name_;
  RefDigestFn<N> ref_;
  DevHash dev_hash_;
};

}  // namespace

void register_security_ops(Registry& r) {
  r.push_back(std::make_unique<AesGcm>());
  r.push_back(std::make_unique<AesCbc>());
  r.push_back(std::make_unique<Digest<16>>("md5", "MD5", "MD5 digest of one packet (RFC 1321); output = 16 bytes",
                                           md5_ref, DevHash::kMd5));
  r.push_back(std::make_unique<Digest<20>>("sha1", "SHA1",
                                           "SHA-1 digest of one packet (FIPS 180-4); output = 20 bytes", sha1_ref,
                                           DevHash::kSha1));
  r.push_back(std::make_unique<Digest<32>>("sha256", "SHA2-256",
                                           "SHA-256 digest of one packet (FIPS 180-4); output = 32 bytes", sha256_ref,
                                           DevHash::kSha256));
}

}  // namespace dpukit::bench
