// The ref backend's public-key arithmetic, written here in plain C++ (no
// intrinsics; builds on x86-64 and aarch64): unsigned multi-precision
// integers, Montgomery arithmetic modulo an odd number, the NIST P-256 group,
// and the three signature schemes the pubkey operators time (RSA PKCS#1 v1.5,
// DSA and ECDSA, both with RFC 6979 nonces).
//
// None of this is constant-time: exponent windows, branches and memory access
// follow the secret values. It is a reference for checking outputs and for
// measuring a straightforward implementation, not for protecting keys.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dpukit::bench::bn {

// 64-bit limbs where the compiler has a 128-bit product type (gcc and clang on
// x86-64 and aarch64); 32-bit limbs otherwise, or when DPUKIT_BIGNUM_LIMB32 is
// defined (to test that path).
#if defined(__SIZEOF_INT128__) && !defined(DPUKIT_BIGNUM_LIMB32)
using Limb = uint64_t;
using WideLimb = unsigned __int128;
#else
using Limb = uint32_t;
using WideLimb = uint64_t;
#endif
inline constexpr unsigned kLimbBits = 8 * sizeof(Limb);

// A non-negative integer of any size: little-endian limbs without leading
// zero limbs (zero has none).
class BigInt {
 public:
  BigInt() = default;
  explicit BigInt(uint64_t value);
  static BigInt from_hex(std::string_view hex);  // digits only (any case); throws std::invalid_argument
  static BigInt from_bytes(std::span<const uint8_t> big_endian);
  static BigInt from_limbs(std::span<const Limb> little_endian);

  std::string to_hex() const;  // lowercase without leading zeros; "0" for zero
  // Big-endian into exactly out.size() bytes, left-padded with zeros; throws
  // std::length_error when the value does not fit.
  void to_bytes(std::span<uint8_t> out) const;
  std::vector<uint8_t> to_bytes(size_t length) const;

  bool is_zero() const { return limbs_.empty(); }
  bool is_odd() const { return !limbs_.empty() && (limbs_[0] & 1); }
  size_t bit_length() const;
  bool bit(size_t i) const;
  const std::vector<Limb>& limbs() const { return limbs_; }
  uint64_t low_u64() const;  // the value mod 2^64

  friend bool operator==(const BigInt& a, const BigInt& b) { return a.limbs_ == b.limbs_; }
  friend std::strong_ordering operator<=>(const BigInt& a, const BigInt& b);

  friend BigInt operator+(const BigInt& a, const BigInt& b);
  friend BigInt operator-(const BigInt& a, const BigInt& b);  // throws std::domain_error when a < b
  friend BigInt operator*(const BigInt& a, const BigInt& b);
  friend BigInt operator/(const BigInt& a, const BigInt& b);  // throws std::domain_error on b == 0
  friend BigInt operator%(const BigInt& a, const BigInt& b);
  friend BigInt operator<<(const BigInt& a, size_t bits);
  friend BigInt operator>>(const BigInt& a, size_t bits);
  // Quotient and remainder in one pass (Knuth's algorithm D).
  static void divmod(const BigInt& a, const BigInt& b, BigInt& quotient, BigInt& remainder);

 private:
  void trim();
  std::vector<Limb> limbs_;
};

BigInt gcd(BigInt a, BigInt b);
// a^e mod m (m > 0): Montgomery when m is odd, square-and-multiply otherwise.
BigInt mod_exp(const BigInt& base, const BigInt& exponent, const BigInt& m);
// The x in [0, m) with a x = 1 mod m; throws std::domain_error when gcd(a, m) != 1.
BigInt mod_inverse(const BigInt& a, const BigInt& m);

// Montgomery arithmetic modulo an odd m > 1 of n = limbs() limbs, R = 2^(n
// kLimbBits). Works on caller-owned arrays of exactly n limbs holding values
// below m. Immutable after construction, so one context serves all threads.
class Montgomery {
 public:
  static constexpr size_t kMaxLimbs = 8192 / kLimbBits;  // moduli up to 8192 bits
  explicit Montgomery(const BigInt& modulus);           // throws std::invalid_argument

  size_t limbs() const { return n_; }
  const BigInt& modulus() const { return m_; }
  const Limb* one() const { return one_.data(); }  // R mod m: 1 in Montgomery form

  // out = a b R^-1 mod m (out may alias a or b).
  void mul(Limb* out, const Limb* a, const Limb* b) const;
  void sqr(Limb* out, const Limb* a) const { mul(out, a, a); }
  void add(Limb* out, const Limb* a, const Limb* b) const;  // a + b mod m
  void sub(Limb* out, const Limb* a, const Limb* b) const;  // a - b mod m
  void to_mont(Limb* out, const Limb* a) const;             // a R mod m
  void from_mont(Limb* out, const Limb* a) const;           // a R^-1 mod m
  // t mod m for t of t_limbs <= 2n limbs (so t < m R unless its top half is
  // at least m, which falls back to long division), into Montgomery form.
  void reduce_to_mont(Limb* out, const Limb* t, size_t t_limbs) const;
  // out = base^e (both in Montgomery form), left to right with a fixed window
  // of 4 or 5 bits. `scratch` holds the window table; it grows once.
  void exp(Limb* out, const Limb* base, const BigInt& e, std::vector<Limb>& scratch) const;

  // BigInt conveniences (they allocate): a in [0, m) or reduced first.
  std::vector<Limb> load(const BigInt& a) const;  // n limbs, normal form
  BigInt store(const Limb* a) const;
  BigInt mod_mul(const BigInt& a, const BigInt& b) const;       // a b mod m
  BigInt exp(const BigInt& base, const BigInt& e) const;        // base^e mod m
  BigInt inverse_prime(const BigInt& a) const;                  // a^(m-2): the inverse when m is prime

 private:
  BigInt m_;
  size_t n_ = 0;
  Limb m0inv_ = 0;  // -m^-1 mod 2^kLimbBits
  std::vector<Limb> mod_, one_, rr_, rrr_;  // m, R, R^2, R^3 mod m
};

// The NIST P-256 curve y^2 = x^3 - 3x + b over GF(p) (FIPS 186-4 D.1.2.3),
// in Jacobian coordinates with the field in Montgomery form (generic
// Montgomery reduction, not P-256's special form).
class P256 {
 public:
  static constexpr size_t kFieldLimbs = 256 / kLimbBits;
  using Fe = std::array<Limb, kFieldLimbs>;
  struct Affine {
    BigInt x, y;
    bool infinity = false;
  };

  P256();
  static const P256& instance();  // built once, shared
  const BigInt& p() const { return field_.modulus(); }
  const BigInt& order() const { return order_.modulus(); }
  const Montgomery& order_field() const { return order_; }
  const Affine& generator() const { return g_; }

  bool on_curve(const Affine& pt) const;
  Affine mul(const BigInt& k, const Affine& pt) const;  // k pt
  Affine mul_base(const BigInt& k) const;               // k G (precomputed window table)
  Affine mul_add(const BigInt& u1, const BigInt& u2, const Affine& q) const;  // u1 G + u2 Q
  Affine add(const Affine& a, const Affine& b) const;

 private:
  struct Jacobian {
    Fe x{}, y{}, z{};  // z == 0: the point at infinity
  };
  using Table = std::array<Jacobian, 16>;
  Jacobian to_jacobian(const Affine& a) const;
  Affine to_affine(const Jacobian& j) const;
  void dbl(Jacobian& r, const Jacobian& a) const;
  void add(Jacobian& r, const Jacobian& a, const Jacobian& b) const;
  void window_table(Table& t, const Jacobian& p) const;
  void mul_table(Jacobian& r, const BigInt& k, const Table& t) const;
  bool is_zero(const Fe& a) const;

  Montgomery field_, order_;
  Fe b_{};  // the curve's b in Montgomery form
  Affine g_;
  Table g_table_;
};

// ---- The signature schemes of the ref backend ------------------------------

// RFC 6979 section 2.3.2: the leftmost qlen bits of `bits` as an integer.
BigInt bits2int(std::span<const uint8_t> bits, size_t qlen);

// RFC 6979 section 3.2: the deterministic nonces for private key x modulo q
// and digest h1, from an HMAC-SHA-256 DRBG. next() gives the first candidate
// in [1, q-1], then, if the signer rejects it (r or s zero), the next.
class Rfc6979Nonce {
 public:
  Rfc6979Nonce(const BigInt& q, const BigInt& x, std::span<const uint8_t> h1);
  BigInt next();

 private:
  void step();  // K = HMAC_K(V || 0x00), V = HMAC_K(V)
  BigInt q_;
  size_t qlen_;
  std::array<uint8_t, 32> k_{}, v_{};
  bool started_ = false;
};

// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017 section 8.2): EMSA-PKCS1-v1_5
// with the SHA-256 DigestInfo, then RSASP1 by the Chinese remainder theorem
// (section 5.2.1, 2.b).
class RsaPkcs1Sha256 {
 public:
  struct Key {
    BigInt n, e, d, p, q;
    BigInt dp, dq, qinv;  // derived from d, p, q when left zero
  };
  // Buffers one signing thread reuses (so that signing does not allocate).
  struct Scratch {
    std::vector<Limb> c, m1, m2, h, t, window;
  };
  explicit RsaPkcs1Sha256(Key key);  // checks p q = n and e d = 1 mod lcm(p-1, q-1); throws std::invalid_argument
  size_t modulus_bytes() const { return k_; }
  const Key& key() const { return key_; }
  // EM = 0x00 01 FF..FF 00 || DigestInfo(SHA-256(message)), modulus_bytes() long.
  void encode(std::span<const uint8_t> message, std::span<uint8_t> em) const;
  void sign(std::span<const uint8_t> message, std::span<uint8_t> signature, Scratch& scratch) const;
  bool verify(std::span<const uint8_t> message, std::span<const uint8_t> signature) const;

 private:
  Key key_;
  size_t k_;
  Montgomery mont_n_, mont_p_, mont_q_;
  std::vector<Limb> qinv_;  // qInv as p-size limbs
};

// DSA (FIPS 186-4 section 4.6) with SHA-256, nonces by RFC 6979. A
// signature is r || s, each ceil(N/8) bytes big-endian.
class DsaSha256 {
 public:
  struct Key {
    BigInt p, q, g, x, y;
  };
  explicit DsaSha256(Key key);  // checks g^q = 1, y = g^x; throws std::invalid_argument
  size_t signature_bytes() const { return 2 * scalar_bytes_; }
  const Key& key() const { return key_; }
  void sign(std::span<const uint8_t> message, std::span<uint8_t> rs) const;
  void sign_digest(std::span<const uint8_t> digest, std::span<uint8_t> rs) const;
  bool verify(std::span<const uint8_t> message, std::span<const uint8_t> rs) const;
  BigInt nonce(std::span<const uint8_t> digest) const;  // RFC 6979's first k

 private:
  Key key_;
  size_t scalar_bytes_;
  Montgomery mont_p_, mont_q_;
};

// ECDSA over P-256 (FIPS 186-4 section 6.4) with SHA-256, nonces by RFC
// 6979. A signature is r || s, 32 + 32 bytes big-endian.
class EcdsaP256Sha256 {
 public:
  static constexpr size_t kSignatureBytes = 64;
  explicit EcdsaP256Sha256(const BigInt& d);  // the public key is d G; throws std::invalid_argument
  const P256::Affine& public_key() const { return q_; }
  void sign(std::span<const uint8_t> message, std::span<uint8_t> rs) const;
  void sign_digest(std::span<const uint8_t> digest, std::span<uint8_t> rs) const;
  bool verify(std::span<const uint8_t> message, std::span<const uint8_t> rs) const;
  // Verification with a public key alone.
  static bool verify(const P256::Affine& q, std::span<const uint8_t> message, std::span<const uint8_t> rs);
  BigInt nonce(std::span<const uint8_t> digest) const;  // RFC 6979's first k

 private:
  BigInt d_;
  P256::Affine q_;
};

}  // namespace dpukit::bench::bn
