// Public-key signatures (§4.1.3, Table 4: RSA, DSA, ECDSA). One unit of work
// signs one message (the input's `size` random bytes) with a fixed test key
// (pubkey_keys.h), hashing included: signing is the expensive direction.
//
// ref: bignum_ref (written here; variable-time, not constant-time).
// lib: OpenSSL 3 EVP. Each kernel owns its EVP_PKEY (built from the same hex
//   key) and an EVP_PKEY_CTX set up once; per message it hashes with SHA-256
//   (a reused EVP_MD_CTX) and calls EVP_PKEY_sign on the digest with the
//   signature digest set to SHA-256. That is the call `openssl speed rsa2048
//   dsa2048 ecdsap256` times (EVP_PKEY_sign on a reused context, there on a
//   short fixed input), plus the hash and the DigestInfo wrapping.
// dev: DPDK cryptodev's asymmetric path (dev/cryptodev.h): RSA and DSA on
//   crypto_openssl here; no software PMD of DPDK 22.11 offers ECDSA.
//
// RSA PKCS#1 v1.5 is deterministic, so lib must equal ref byte for byte. DSA
// and ECDSA draw k at random in OpenSSL (RFC 6979 in ref), so a lib signature
// is checked by verifying it with the ref verifier.
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <array>
#include <cstring>
#include <memory>

#include "bignum_ref.h"
#include "dev/cryptodev.h"
#include "operator.h"
#include "pubkey_keys.h"

namespace dpukit::bench {
namespace {

using bn::BigInt;

// Signing cost does not depend on the message bytes, so a few distinct
// messages suffice; fewer keep the reference check (a ref signature per
// input) short.
constexpr size_t kInputs = 64;

// A hex key field as the big-endian bytes cryptodev takes.
Bytes key_bytes(const char* hex_digits) {
  return BigInt::from_hex(hex_digits).to_bytes((std::strlen(hex_digits) + 1) / 2);
}

std::string openssl_error(const std::string& what) {
  std::string s = "OpenSSL: " + what;
  char buf[256];
  while (unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof buf);
    s += std::string(": ") + buf;
  }
  return s;
}

// ---- OpenSSL key building --------------------------------------------------

struct OpensslFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
  void operator()(EVP_MD* p) const { EVP_MD_free(p); }
  void operator()(OSSL_PARAM_BLD* p) const { OSSL_PARAM_BLD_free(p); }
  void operator()(OSSL_PARAM* p) const { OSSL_PARAM_free(p); }
  void operator()(BIGNUM* p) const { BN_clear_free(p); }
};
template <class T>
using Owned = std::unique_ptr<T, OpensslFree>;

// Builds an EVP_PKEY of `type` from named components.
class KeyBuilder {
 public:
  KeyBuilder() : bld_(OSSL_PARAM_BLD_new()) {
    if (!bld_) throw Unavailable(openssl_error("OSSL_PARAM_BLD_new"));
  }
  KeyBuilder& number(const char* name, const char* hex) {
    const BigInt v = BigInt::from_hex(hex);
    const std::vector<uint8_t> bytes = v.to_bytes((v.bit_length() + 7) / 8);
    BIGNUM* bn = BN_bin2bn(bytes.data(), static_cast<int>(bytes.size()), nullptr);
    if (!bn) throw Unavailable(openssl_error("BN_bin2bn"));
    numbers_.emplace_back(bn);
    if (!OSSL_PARAM_BLD_push_BN(bld_.get(), name, bn)) throw Unavailable(openssl_error(name));
    return *this;
  }
  KeyBuilder& text(const char* name, const char* value) {
    if (!OSSL_PARAM_BLD_push_utf8_string(bld_.get(), name, value, 0)) throw Unavailable(openssl_error(name));
    return *this;
  }
  KeyBuilder& octets(const char* name, std::vector<uint8_t> value) {
    blobs_.push_back(std::move(value));
    if (!OSSL_PARAM_BLD_push_octet_string(bld_.get(), name, blobs_.back().data(), blobs_.back().size()))
      throw Unavailable(openssl_error(name));
    return *this;
  }
  Owned<EVP_PKEY> build(const char* type) {
    Owned<OSSL_PARAM> params(OSSL_PARAM_BLD_to_param(bld_.get()));
    Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
    EVP_PKEY* pkey = nullptr;
    if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) <= 0 ||
        EVP_PKEY_fromdata(ctx.get(), &pkey, EVP_PKEY_KEYPAIR, params.get()) <= 0)
      throw Unavailable(openssl_error(std::string("building the ") + type + " key"));
    return Owned<EVP_PKEY>(pkey);
  }

 private:
  Owned<OSSL_PARAM_BLD> bld_;
  std::vector<Owned<BIGNUM>> numbers_;
  std::vector<std::vector<uint8_t>> blobs_;
};

Owned<EVP_PKEY> openssl_rsa_key(const RsaKeyHex& k) {
  return KeyBuilder()
      .number(OSSL_PKEY_PARAM_RSA_N, k.n)
      .number(OSSL_PKEY_PARAM_RSA_E, k.e)
      .number(OSSL_PKEY_PARAM_RSA_D, k.d)
      .number(OSSL_PKEY_PARAM_RSA_FACTOR1, k.p)
      .number(OSSL_PKEY_PARAM_RSA_FACTOR2, k.q)
      .number(OSSL_PKEY_PARAM_RSA_EXPONENT1, k.dp)
      .number(OSSL_PKEY_PARAM_RSA_EXPONENT2, k.dq)
      .number(OSSL_PKEY_PARAM_RSA_COEFFICIENT1, k.qinv)
      .build("RSA");
}

Owned<EVP_PKEY> openssl_dsa_key(const DsaKeyHex& k) {
  return KeyBuilder()
      .number(OSSL_PKEY_PARAM_FFC_P, k.p)
      .number(OSSL_PKEY_PARAM_FFC_Q, k.q)
      .number(OSSL_PKEY_PARAM_FFC_G, k.g)
      .number(OSSL_PKEY_PARAM_PUB_KEY, k.y)
      .number(OSSL_PKEY_PARAM_PRIV_KEY, k.x)
      .build("DSA");
}

Owned<EVP_PKEY> openssl_p256_key(const EcKeyHex& k) {
  std::vector<uint8_t> point{0x04};  // uncompressed: 04 || x || y (SEC 1 2.3.3)
  for (const char* c : {k.qx, k.qy}) {
    const std::vector<uint8_t> coord = BigInt::from_hex(c).to_bytes(32);
    point.insert(point.end(), coord.begin(), coord.end());
  }
  return KeyBuilder()
      .text(OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1")
      .number(OSSL_PKEY_PARAM_PRIV_KEY, k.d)
      .octets(OSSL_PKEY_PARAM_PUB_KEY, std::move(point))
      .build("EC");
}

// ---- The ref keys (built once, shared read-only by all threads) -------------

const RsaKeyHex& rsa_key_hex(uint64_t bits) {
  switch (bits) {
    case 2048: return kRsa2048Key;
    case 3072: return kRsa3072Key;
    case 4096: return kRsa4096Key;
  }
  throw std::invalid_argument("rsa.bits must be 2048, 3072 or 4096 (the embedded test keys), not " +
                              std::to_string(bits));
}

const bn::RsaPkcs1Sha256& rsa_ref(uint64_t bits) {
  auto make = [](const RsaKeyHex& k) {
    auto h = [](const char* s) { return BigInt::from_hex(s); };
    return bn::RsaPkcs1Sha256({h(k.n), h(k.e), h(k.d), h(k.p), h(k.q), h(k.dp), h(k.dq), h(k.qinv)});
  };
  switch (bits) {
    case 2048: {
      static const bn::RsaPkcs1Sha256 key = make(kRsa2048Key);
      return key;
    }
    case 3072: {
      static const bn::RsaPkcs1Sha256 key = make(kRsa3072Key);
      return key;
    }
    case 4096: {
      static const bn::RsaPkcs1Sha256 key = make(kRsa4096Key);
      return key;
    }
  }
  rsa_key_hex(bits);  // throws, naming the sizes there are keys for
  throw std::logic_error("unreachable");
}

const bn::DsaSha256& dsa_ref() {
  static const bn::DsaSha256 key({BigInt::from_hex(kDsa2048Key.p), BigInt::from_hex(kDsa2048Key.q),
                                  BigInt::from_hex(kDsa2048Key.g), BigInt::from_hex(kDsa2048Key.x),
                                  BigInt::from_hex(kDsa2048Key.y)});
  return key;
}

const bn::EcdsaP256Sha256& ecdsa_ref() {
  static const bn::EcdsaP256Sha256 key = [] {
    bn::EcdsaP256Sha256 k(BigInt::from_hex(kP256Key.d));
    if (k.public_key().x != BigInt::from_hex(kP256Key.qx) || k.public_key().y != BigInt::from_hex(kP256Key.qy))
      throw std::logic_error("the embedded P-256 public key is not d G");
    return k;
  }();
  return key;
}

// ---- DER ECDSA/DSA signatures -----------------------------------------------

// One DER element of `tag` at the front of `in`: its content, `in` advanced
// past it. False when malformed.
bool der_element(std::span<const uint8_t>& in, uint8_t tag, std::span<const uint8_t>& content) {
  if (in.size() < 2 || in[0] != tag) return false;
  size_t len = in[1], header = 2;
  if (len & 0x80) {
    const size_t octets = len & 0x7f;
    if (octets == 0 || octets > 2 || in.size() < 2 + octets) return false;
    len = 0;
    for (size_t i = 0; i < octets; ++i) len = (len << 8) | in[2 + i];
    header += octets;
  }
  if (in.size() - header < len) return false;
  content = in.subspan(header, len);
  in = in.subspan(header + len);
  return true;
}

// SEQUENCE { INTEGER r, INTEGER s } (RFC 3279 Dss-Sig-Value / Ecdsa-Sig-Value)
// into r || s, each `scalar` bytes big-endian.
bool der_to_rs(std::span<const uint8_t> der, size_t scalar, Bytes& rs) {
  std::span<const uint8_t> seq, r, s;
  if (!der_element(der, 0x30, seq) || !der.empty()) return false;
  if (!der_element(seq, 0x02, r) || !der_element(seq, 0x02, s) || !seq.empty()) return false;
  rs.assign(2 * scalar, 0);
  for (auto [v, at] : {std::pair{r, size_t{0}}, std::pair{s, scalar}}) {
    while (!v.empty() && v[0] == 0) v = v.subspan(1);  // DER's sign octet
    if (v.size() > scalar) return false;
    std::copy(v.begin(), v.end(), rs.begin() + static_cast<std::ptrdiff_t>(at + scalar - v.size()));
  }
  return true;
}

// ---- Kernels ----------------------------------------------------------------

class RefRsaSign final : public Kernel {
 public:
  explicit RefRsaSign(const bn::RsaPkcs1Sha256& rsa) : rsa_(rsa) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(rsa_.modulus_bytes());
    rsa_.sign(in, out, scratch_);
  }

 private:
  const bn::RsaPkcs1Sha256& rsa_;
  bn::RsaPkcs1Sha256::Scratch scratch_;
};

class RefDsaSign final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const bn::DsaSha256& dsa = dsa_ref();
    out.resize(dsa.signature_bytes());
    dsa.sign(in, out);
  }
};

class RefEcdsaSign final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(bn::EcdsaP256Sha256::kSignatureBytes);
    ecdsa_ref().sign(in, out);
  }
};

// EVP_PKEY_sign over the SHA-256 digest of each message. `der_scalar` > 0:
// the output is DER (DSA, ECDSA), converted to r || s of that many bytes each.
class LibSign final : public Kernel {
 public:
  LibSign(Owned<EVP_PKEY> key, bool rsa_pkcs1, size_t der_scalar)
      : key_(std::move(key)),
        ctx_(EVP_PKEY_CTX_new_from_pkey(nullptr, key_.get(), nullptr)),
        md_ctx_(EVP_MD_CTX_new()),
        sha256_(EVP_MD_fetch(nullptr, "SHA2-256", nullptr)),
        der_scalar_(der_scalar) {
    if (!ctx_ || !md_ctx_ || !sha256_ || EVP_PKEY_sign_init(ctx_.get()) <= 0 ||
        (rsa_pkcs1 && EVP_PKEY_CTX_set_rsa_padding(ctx_.get(), RSA_PKCS1_PADDING) <= 0) ||
        EVP_PKEY_CTX_set_signature_md(ctx_.get(), sha256_.get()) <= 0)
      throw Unavailable(openssl_error("setting up EVP_PKEY_sign"));
    if (EVP_PKEY_sign(ctx_.get(), nullptr, &max_signature_, digest_.data(), digest_.size()) <= 0)
      throw Unavailable(openssl_error("EVP_PKEY_sign size query"));
    der_.resize(max_signature_);
  }
  void process(std::span<const uint8_t> in, Bytes& out) override {
    unsigned int digest_len = 0;
    if (EVP_DigestInit_ex2(md_ctx_.get(), sha256_.get(), nullptr) <= 0 ||
        EVP_DigestUpdate(md_ctx_.get(), in.data(), in.size()) <= 0 ||
        EVP_DigestFinal_ex(md_ctx_.get(), digest_.data(), &digest_len) <= 0)
      throw std::runtime_error(openssl_error("SHA-256"));
    Bytes& sig = der_scalar_ ? der_ : out;
    sig.resize(max_signature_);
    size_t len = max_signature_;
    if (EVP_PKEY_sign(ctx_.get(), sig.data(), &len, digest_.data(), digest_len) <= 0)
      throw std::runtime_error(openssl_error("EVP_PKEY_sign"));
    if (!der_scalar_) {
      out.resize(len);
    } else if (!der_to_rs(std::span<const uint8_t>(der_.data(), len), der_scalar_, out)) {
      throw std::runtime_error("OpenSSL returned a malformed DER signature: " + hex({der_.data(), len}));
    }
  }

 private:
  Owned<EVP_PKEY> key_;
  Owned<EVP_PKEY_CTX> ctx_;
  Owned<EVP_MD_CTX> md_ctx_;
  Owned<EVP_MD> sha256_;
  size_t der_scalar_;
  std::array<uint8_t, 32> digest_{};
  size_t max_signature_ = 0;
  Bytes der_;
};

// ---- Operators --------------------------------------------------------------

// One signer per thread, each with its own EVP_PKEY (made by `make_key`).
template <class MakeKey>
std::vector<std::unique_ptr<Kernel>> lib_sign_kernels(unsigned threads, MakeKey make_key, bool rsa_pkcs1,
                                                      size_t der_scalar) {
  std::vector<std::unique_ptr<Kernel>> v;
  for (unsigned t = 0; t < threads; ++t) v.push_back(std::make_unique<LibSign>(make_key(), rsa_pkcs1, der_scalar));
  return v;
}

// DSA and ECDSA draw k at random: any signature the ref verifier accepts is right.
template <class RefSigner>
std::string signature_mismatch(const RefSigner& ref, size_t bytes, std::span<const uint8_t> in, const Bytes& got) {
  if (got.size() != bytes) return "signature is " + std::to_string(got.size()) + " bytes, not " + std::to_string(bytes);
  return ref.verify(in, got) ? "" : "r || s " + hex(got) + " does not verify with the ref verifier";
}

class Rsa final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"rsa", "security",
                                "sign one message: RSA PKCS#1 v1.5 with SHA-256 (RFC 8017 8.2) by the CRT; "
                                "output the modulus-size signature",
                                1, {Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}};
    return i;
  }
  // The PKA: one operation of the spec's ops_per_s; the body is OpenSSL's.
  std::optional<EngineWork> engine_work() const override {
    return EngineWork{EngineKind::kPublicKey, "rsa" + std::to_string(param_u64("bits")) + "_sign", ""};
  }
  size_t input_count(size_t) const override { return kInputs; }
  std::map<std::string, std::string> default_params() const override { return {{"bits", "2048"}}; }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    const uint64_t bits = param_u64("bits");
    const RsaKeyHex& key = rsa_key_hex(bits);
    switch (b) {
      case Backend::kRef: return kernels_of<RefRsaSign>(threads, rsa_ref(bits));
      case Backend::kLib: return lib_sign_kernels(threads, [&] { return openssl_rsa_key(key); }, true, 0);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: {
        DevRsaKey k;
        for (auto [field, text] : {std::pair{&k.n, key.n}, {&k.e, key.e}, {&k.d, key.d}, {&k.p, key.p},
                                   {&k.q, key.q}, {&k.dp, key.dp}, {&k.dq, key.dq}, {&k.qinv, key.qinv}})
          *field = key_bytes(text);
        return dev_rsa_sign_kernels(k, threads);
      }
    }
    throw Unavailable("no such backend");
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes& ref_out, const Bytes& got) const override {
    if (ref_out == got) return "";
    const bool verifies = rsa_ref(param_u64("bits")).verify(in, got);
    return describe_difference(ref_out, got) + (verifies ? " (yet it verifies)" : " (and it does not verify)");
  }
};

class Dsa final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"dsa", "security",
                                "sign one message: DSA (L, N) = (2048, 256) with SHA-256 (FIPS 186-4); "
                                "output r || s (32 + 32 bytes)",
                                1, {Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}};
    return i;
  }
  // The PKA: one operation of the spec's ops_per_s; the body is OpenSSL's.
  std::optional<EngineWork> engine_work() const override {
    return EngineWork{EngineKind::kPublicKey, "dsa2048_sign", ""};
  }
  size_t input_count(size_t) const override { return kInputs; }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef:
        dsa_ref();  // builds and checks the key on this thread
        return kernels_of<RefDsaSign>(threads);
      case Backend::kLib: return lib_sign_kernels(threads, [] { return openssl_dsa_key(kDsa2048Key); }, false, 32);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev:
        return dev_dsa_sign_kernels({key_bytes(kDsa2048Key.p), key_bytes(kDsa2048Key.q), key_bytes(kDsa2048Key.g),
                                     key_bytes(kDsa2048Key.x)},
                                    threads);
    }
    throw Unavailable("no such backend");
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes&, const Bytes& got) const override {
    return signature_mismatch(dsa_ref(), dsa_ref().signature_bytes(), in, got);
  }
};

class Ecdsa final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"ecdsa", "security",
                                "sign one message: ECDSA over P-256 with SHA-256 (FIPS 186-4); "
                                "output r || s (32 + 32 bytes)",
                                1, {Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}};
    return i;
  }
  // The PKA: one operation of the spec's ops_per_s; the body is OpenSSL's.
  std::optional<EngineWork> engine_work() const override {
    return EngineWork{EngineKind::kPublicKey, "ecdsa_p256_sign", ""};
  }
  size_t input_count(size_t) const override { return kInputs; }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef:
        ecdsa_ref();  // builds and checks the key on this thread
        return kernels_of<RefEcdsaSign>(threads);
      case Backend::kLib: return lib_sign_kernels(threads, [] { return openssl_p256_key(kP256Key); }, false, 32);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: {
        const Bytes d = BigInt::from_hex(kP256Key.d).to_bytes(32);
        return dev_ecdsa_p256_sign_kernels(d, threads);
      }
    }
    throw Unavailable("no such backend");
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes&, const Bytes& got) const override {
    return signature_mismatch(ecdsa_ref(), bn::EcdsaP256Sha256::kSignatureBytes, in, got);
  }
};

}  // namespace

void register_pubkey_ops(Registry& r) {
  r.push_back(std::make_unique<Rsa>());
  r.push_back(std::make_unique<Dsa>());
  r.push_back(std::make_unique<Ecdsa>());
}

}  // namespace dpukit::bench
