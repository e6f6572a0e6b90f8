// Multi-precision integers, Montgomery arithmetic and the P-256 group for the
// ref backend (see bignum_ref.h). Plain C++ only.
#include "bignum_ref.h"

#include <algorithm>
#include <stdexcept>

#include "hash_ref.h"

namespace dpukit::bench::bn {
namespace {

constexpr Limb kLimbMax = ~Limb{0};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

unsigned leading_zeros(Limb x) {
  unsigned n = 0;
  for (Limb bit = Limb{1} << (kLimbBits - 1); bit && !(x & bit); bit >>= 1) ++n;
  return n;
}

// a >= b for n-limb arrays.
bool geq(const Limb* a, const Limb* b, size_t n) {
  for (size_t i = n; i-- > 0;)
    if (a[i] != b[i]) return a[i] > b[i];
  return true;
}

// a -= b over n limbs; returns the borrow.
Limb sub_in_place(Limb* a, const Limb* b, size_t n) {
  Limb borrow = 0;
  for (size_t i = 0; i < n; ++i) {
    Limb x = a[i], y = b[i];
    Limb d = x - y - borrow;
    borrow = (x < y) || (x - y < borrow) ? 1 : 0;
    a[i] = d;
  }
  return borrow;
}

// a += b over n limbs; returns the carry.
Limb add_in_place(Limb* a, const Limb* b, size_t n) {
  Limb carry = 0;
  for (size_t i = 0; i < n; ++i) {
    WideLimb s = static_cast<WideLimb>(a[i]) + b[i] + carry;
    a[i] = static_cast<Limb>(s);
    carry = static_cast<Limb>(s >> kLimbBits);
  }
  return carry;
}

}  // namespace

// ---- BigInt ---------------------------------------------------------------

BigInt::BigInt(uint64_t value) {
  for (unsigned shift = 0; shift < 64 && (value >> shift); shift += kLimbBits)
    limbs_.push_back(static_cast<Limb>(value >> shift));
}

void BigInt::trim() {
  while (!limbs_.empty() && limbs_.back() == 0) limbs_.pop_back();
}

BigInt BigInt::from_hex(std::string_view hex) {
  if (hex.empty()) throw std::invalid_argument("empty hex number");
  BigInt r;
  r.limbs_.assign((hex.size() * 4 + kLimbBits - 1) / kLimbBits, 0);
  size_t bit = 0;
  for (size_t i = hex.size(); i-- > 0; bit += 4) {
    int v = hex_value(hex[i]);
    if (v < 0) throw std::invalid_argument("not a hex digit in '" + std::string(hex) + "'");
    r.limbs_[bit / kLimbBits] |= static_cast<Limb>(v) << (bit % kLimbBits);
  }
  r.trim();
  return r;
}

BigInt BigInt::from_bytes(std::span<const uint8_t> big_endian) {
  BigInt r;
  r.limbs_.assign((big_endian.size() + sizeof(Limb) - 1) / sizeof(Limb), 0);
  size_t byte = 0;
  for (size_t i = big_endian.size(); i-- > 0; ++byte)
    r.limbs_[byte / sizeof(Limb)] |= static_cast<Limb>(big_endian[i]) << (8 * (byte % sizeof(Limb)));
  r.trim();
  return r;
}

BigInt BigInt::from_limbs(std::span<const Limb> little_endian) {
  BigInt r;
  r.limbs_.assign(little_endian.begin(), little_endian.end());
  r.trim();
  return r;
}

std::string BigInt::to_hex() const {
  if (is_zero()) return "0";
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = limbs_.size(); i-- > 0;)
    for (int shift = kLimbBits - 4; shift >= 0; shift -= 4) s += digits[(limbs_[i] >> shift) & 15];
  return s.substr(s.find_first_not_of('0'));
}

void BigInt::to_bytes(std::span<uint8_t> out) const {
  if ((bit_length() + 7) / 8 > out.size())
    throw std::length_error("a " + std::to_string(bit_length()) + "-bit number does not fit in " +
                            std::to_string(out.size()) + " bytes");
  for (size_t byte = 0; byte < out.size(); ++byte) {
    size_t limb = byte / sizeof(Limb);
    out[out.size() - 1 - byte] =
        limb < limbs_.size() ? static_cast<uint8_t>(limbs_[limb] >> (8 * (byte % sizeof(Limb)))) : 0;
  }
}

std::vector<uint8_t> BigInt::to_bytes(size_t length) const {
  std::vector<uint8_t> v(length);
  to_bytes(v);
  return v;
}

size_t BigInt::bit_length() const {
  if (is_zero()) return 0;
  return limbs_.size() * kLimbBits - leading_zeros(limbs_.back());
}

bool BigInt::bit(size_t i) const {
  size_t limb = i / kLimbBits;
  return limb < limbs_.size() && ((limbs_[limb] >> (i % kLimbBits)) & 1);
}

uint64_t BigInt::low_u64() const {
  uint64_t v = 0;
  for (size_t i = 0; i < limbs_.size() && i * kLimbBits < 64; ++i) v |= static_cast<uint64_t>(limbs_[i]) << (i * kLimbBits);
  return v;
}

std::strong_ordering operator<=>(const BigInt& a, const BigInt& b) {
  if (a.limbs_.size() != b.limbs_.size()) return a.limbs_.size() <=> b.limbs_.size();
  for (size_t i = a.limbs_.size(); i-- > 0;)
    if (a.limbs_[i] != b.limbs_[i]) return a.limbs_[i] <=> b.limbs_[i];
  return std::strong_ordering::equal;
}

BigInt operator+(const BigInt& a, const BigInt& b) {
  const BigInt& big = a.limbs_.size() >= b.limbs_.size() ? a : b;
  const BigInt& small = &big == &a ? b : a;
  BigInt r = big;
  r.limbs_.push_back(0);
  Limb carry = add_in_place(r.limbs_.data(), small.limbs_.data(), small.limbs_.size());
  for (size_t i = small.limbs_.size(); carry; ++i) {
    r.limbs_[i] += 1;
    carry = r.limbs_[i] == 0;
  }
  r.trim();
  return r;
}

BigInt operator-(const BigInt& a, const BigInt& b) {
  if (a < b) throw std::domain_error("negative difference");
  BigInt r = a;
  Limb borrow = sub_in_place(r.limbs_.data(), b.limbs_.data(), b.limbs_.size());
  for (size_t i = b.limbs_.size(); borrow; ++i) {
    borrow = r.limbs_[i] == 0;
    r.limbs_[i] -= 1;
  }
  r.trim();
  return r;
}

BigInt operator*(const BigInt& a, const BigInt& b) {
  if (a.is_zero() || b.is_zero()) return BigInt();
  BigInt r;
  r.limbs_.assign(a.limbs_.size() + b.limbs_.size(), 0);
  for (size_t i = 0; i < a.limbs_.size(); ++i) {
    Limb carry = 0;
    for (size_t j = 0; j < b.limbs_.size(); ++j) {
      WideLimb t = static_cast<WideLimb>(a.limbs_[i]) * b.limbs_[j] + r.limbs_[i + j] + carry;
      r.limbs_[i + j] = static_cast<Limb>(t);
      carry = static_cast<Limb>(t >> kLimbBits);
    }
    r.limbs_[i + b.limbs_.size()] = carry;
  }
  r.trim();
  return r;
}

BigInt operator<<(const BigInt& a, size_t bits) {
  if (a.is_zero()) return a;
  const size_t limbs = bits / kLimbBits, shift = bits % kLimbBits;
  BigInt r;
  r.limbs_.assign(a.limbs_.size() + limbs + 1, 0);
  for (size_t i = 0; i < a.limbs_.size(); ++i) {
    r.limbs_[i + limbs] |= a.limbs_[i] << shift;
    if (shift) r.limbs_[i + limbs + 1] = a.limbs_[i] >> (kLimbBits - shift);
  }
  r.trim();
  return r;
}

BigInt operator>>(const BigInt& a, size_t bits) {
  const size_t limbs = bits / kLimbBits, shift = bits % kLimbBits;
  if (limbs >= a.limbs_.size()) return BigInt();
  BigInt r;
  r.limbs_.assign(a.limbs_.size() - limbs, 0);
  for (size_t i = 0; i < r.limbs_.size(); ++i) {
    r.limbs_[i] = a.limbs_[i + limbs] >> shift;
    if (shift && i + limbs + 1 < a.limbs_.size()) r.limbs_[i] |= a.limbs_[i + limbs + 1] << (kLimbBits - shift);
  }
  r.trim();
  return r;
}

void BigInt::divmod(const BigInt& a, const BigInt& b, BigInt& quotient, BigInt& remainder) {
  if (b.is_zero()) throw std::domain_error("division by zero");
  if (a < b) {
    remainder = a;
    quotient = BigInt();
    return;
  }
  const size_t n = b.limbs_.size(), m = a.limbs_.size();
  BigInt q;
  q.limbs_.assign(m - n + 1, 0);
  if (n == 1) {  // one-limb divisor: schoolbook short division
    Limb rem = 0, d = b.limbs_[0];
    for (size_t i = m; i-- > 0;) {
      WideLimb num = (static_cast<WideLimb>(rem) << kLimbBits) | a.limbs_[i];
      q.limbs_[i] = static_cast<Limb>(num / d);
      rem = static_cast<Limb>(num % d);
    }
    q.trim();
    quotient = std::move(q);
    remainder = BigInt(rem);
    return;
  }
  // Normalize so the divisor's top limb has its top bit set; then each
  // quotient limb estimate from the top two limbs is at most 2 too large.
  const unsigned s = leading_zeros(b.limbs_.back());
  std::vector<Limb> v(n), u(m + 1);
  for (size_t i = n; i-- > 0;)
    v[i] = (b.limbs_[i] << s) | (s && i ? b.limbs_[i - 1] >> (kLimbBits - s) : 0);
  u[m] = s ? a.limbs_[m - 1] >> (kLimbBits - s) : 0;
  for (size_t i = m; i-- > 0;) u[i] = (a.limbs_[i] << s) | (s && i ? a.limbs_[i - 1] >> (kLimbBits - s) : 0);
  const WideLimb base = static_cast<WideLimb>(1) << kLimbBits;
  for (size_t j = m - n + 1; j-- > 0;) {
    WideLimb num = (static_cast<WideLimb>(u[j + n]) << kLimbBits) | u[j + n - 1];
    WideLimb qhat = num / v[n - 1], rhat = num % v[n - 1];
    while (qhat >= base || qhat * v[n - 2] > ((rhat << kLimbBits) | u[j + n - 2])) {
      --qhat;
      rhat += v[n - 1];
      if (rhat >= base) break;
    }
    // u[j .. j+n] -= qhat * v
    Limb carry = 0, borrow = 0;
    for (size_t i = 0; i < n; ++i) {
      WideLimb p = qhat * v[i] + carry;
      carry = static_cast<Limb>(p >> kLimbBits);
      Limb lo = static_cast<Limb>(p), x = u[i + j];
      u[i + j] = x - lo - borrow;
      borrow = (x < lo) || (x - lo < borrow) ? 1 : 0;
    }
    Limb x = u[j + n];
    u[j + n] = x - carry - borrow;
    bool negative = (x < carry) || (x - carry < borrow);
    Limb qj = static_cast<Limb>(qhat);
    if (negative) {  // the estimate was one too large: add v back
      --qj;
      u[j + n] += add_in_place(&u[j], v.data(), n);
    }
    q.limbs_[j] = qj;
  }
  BigInt r;
  r.limbs_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) r.limbs_[i] = (u[i] >> s) | (s ? u[i + 1] << (kLimbBits - s) : 0);
  r.trim();
  q.trim();
  quotient = std::move(q);
  remainder = std::move(r);
}

BigInt operator/(const BigInt& a, const BigInt& b) {
  BigInt q, r;
  BigInt::divmod(a, b, q, r);
  return q;
}

BigInt operator%(const BigInt& a, const BigInt& b) {
  BigInt q, r;
  BigInt::divmod(a, b, q, r);
  return r;
}

BigInt gcd(BigInt a, BigInt b) {
  while (!b.is_zero()) {
    BigInt r = a % b;
    a = std::move(b);
    b = std::move(r);
  }
  return a;
}

BigInt mod_exp(const BigInt& base, const BigInt& exponent, const BigInt& m) {
  if (m.is_zero()) throw std::domain_error("modulus zero");
  if (m == BigInt(1)) return BigInt();
  if (m.is_odd()) return Montgomery(m).exp(base, exponent);
  BigInt result(1), b = base % m;
  for (size_t i = exponent.bit_length(); i-- > 0;) {
    result = result * result % m;
    if (exponent.bit(i)) result = result * b % m;
  }
  return result;
}

BigInt mod_inverse(const BigInt& a, const BigInt& m) {
  // Extended Euclid keeping the coefficient of a reduced mod m, so that
  // every quantity stays non-negative.
  if (m.is_zero()) throw std::domain_error("modulus zero");
  BigInt r0 = m, r1 = a % m, t0, t1(1);
  while (!r1.is_zero()) {
    BigInt q, r2;
    BigInt::divmod(r0, r1, q, r2);
    BigInt qt = q * t1 % m;
    BigInt t2 = t0 >= qt ? t0 - qt : t0 + m - qt;
    r0 = std::move(r1);
    r1 = std::move(r2);
    t0 = std::move(t1);
    t1 = std::move(t2);
  }
  if (r0 != BigInt(1)) throw std::domain_error("not invertible: gcd is " + r0.to_hex());
  return t0 % m;
}

// ---- Montgomery -------------------------------------------------------------

Montgomery::Montgomery(const BigInt& modulus) : m_(modulus) {
  if (!modulus.is_odd() || modulus == BigInt(1))
    throw std::invalid_argument("Montgomery arithmetic needs an odd modulus > 1");
  n_ = modulus.limbs().size();
  if (n_ > kMaxLimbs) throw std::invalid_argument("modulus over 8192 bits");
  mod_ = modulus.limbs();
  // Newton's iteration for m0^-1 mod 2^w: each step doubles the correct
  // low bits, starting from 3 (any odd m0 is its own inverse mod 8).
  Limb inv = mod_[0];
  for (int i = 0; i < 6; ++i) inv *= 2 - mod_[0] * inv;
  m0inv_ = static_cast<Limb>(0) - inv;
  // R, R^2 and R^3 mod m by long division (once per context).
  BigInt r = BigInt(1) << (n_ * kLimbBits);
  auto padded = [&](const BigInt& v) {
    std::vector<Limb> out(n_, 0);
    std::copy(v.limbs().begin(), v.limbs().end(), out.begin());
    return out;
  };
  BigInt r1 = r % m_, r2 = r1 * r1 % m_;
  one_ = padded(r1);
  rr_ = padded(r2);
  rrr_ = padded(r2 * r1 % m_);
}

void Montgomery::mul(Limb* out, const Limb* a, const Limb* b) const {
  // CIOS (coarsely integrated operand scanning): multiply by one limb of b,
  // then cancel the lowest limb with a multiple of m and shift down a limb.
  const size_t n = n_;
  Limb t[kMaxLimbs + 2];
  std::fill(t, t + n + 2, Limb{0});
  for (size_t i = 0; i < n; ++i) {
    Limb carry = 0;
    const Limb bi = b[i];
    for (size_t j = 0; j < n; ++j) {
      WideLimb s = static_cast<WideLimb>(a[j]) * bi + t[j] + carry;
      t[j] = static_cast<Limb>(s);
      carry = static_cast<Limb>(s >> kLimbBits);
    }
    WideLimb s = static_cast<WideLimb>(t[n]) + carry;
    t[n] = static_cast<Limb>(s);
    t[n + 1] = static_cast<Limb>(s >> kLimbBits);

    const Limb u = t[0] * m0inv_;
    s = static_cast<WideLimb>(u) * mod_[0] + t[0];
    carry = static_cast<Limb>(s >> kLimbBits);
    for (size_t j = 1; j < n; ++j) {
      s = static_cast<WideLimb>(u) * mod_[j] + t[j] + carry;
      t[j - 1] = static_cast<Limb>(s);
      carry = static_cast<Limb>(s >> kLimbBits);
    }
    s = static_cast<WideLimb>(t[n]) + carry;
    t[n - 1] = static_cast<Limb>(s);
    t[n] = t[n + 1] + static_cast<Limb>(s >> kLimbBits);
  }
  // t < 2m: one conditional subtraction.
  if (t[n] || geq(t, mod_.data(), n)) sub_in_place(t, mod_.data(), n);
  std::copy(t, t + n, out);
}

void Montgomery::add(Limb* out, const Limb* a, const Limb* b) const {
  Limb t[kMaxLimbs];
  std::copy(a, a + n_, t);
  Limb carry = add_in_place(t, b, n_);
  if (carry || geq(t, mod_.data(), n_)) sub_in_place(t, mod_.data(), n_);
  std::copy(t, t + n_, out);
}

void Montgomery::sub(Limb* out, const Limb* a, const Limb* b) const {
  Limb t[kMaxLimbs];
  std::copy(a, a + n_, t);
  if (sub_in_place(t, b, n_)) add_in_place(t, mod_.data(), n_);
  std::copy(t, t + n_, out);
}

void Montgomery::to_mont(Limb* out, const Limb* a) const { mul(out, a, rr_.data()); }

void Montgomery::from_mont(Limb* out, const Limb* a) const {
  Limb unit[kMaxLimbs];
  std::fill(unit, unit + n_, Limb{0});
  unit[0] = 1;
  mul(out, a, unit);
}

void Montgomery::reduce_to_mont(Limb* out, const Limb* t, size_t t_limbs) const {
  const size_t n = n_;
  bool below_m_r = t_limbs <= n;
  if (!below_m_r && t_limbs <= 2 * n) {
    Limb high[kMaxLimbs];
    std::fill(high, high + n, Limb{0});
    std::copy(t + n, t + t_limbs, high);
    below_m_r = !geq(high, mod_.data(), n);
  }
  if (!below_m_r) {  // outside REDC's range: plain long division
    std::vector<Limb> v = load(BigInt::from_limbs(std::span<const Limb>(t, t_limbs)) % m_);
    to_mont(out, v.data());
    return;
  }
  // REDC: add multiples of m that clear the low n limbs, keep the top half:
  // (t + u m) / R = t R^-1 mod m, below 2m because t < m R.
  Limb a[2 * kMaxLimbs + 1];
  std::fill(a, a + 2 * n + 1, Limb{0});
  std::copy(t, t + t_limbs, a);
  for (size_t i = 0; i < n; ++i) {
    const Limb u = a[i] * m0inv_;
    Limb carry = 0;
    for (size_t j = 0; j < n; ++j) {
      WideLimb s = static_cast<WideLimb>(u) * mod_[j] + a[i + j] + carry;
      a[i + j] = static_cast<Limb>(s);
      carry = static_cast<Limb>(s >> kLimbBits);
    }
    for (size_t k = i + n; carry; ++k) {
      a[k] += carry;
      carry = a[k] < carry ? 1 : 0;
    }
  }
  Limb* hi = a + n;
  if (hi[n] || geq(hi, mod_.data(), n)) sub_in_place(hi, mod_.data(), n);
  // t R^-1 times R^3, divided by R once more: t R.
  mul(out, hi, rrr_.data());
}

void Montgomery::exp(Limb* out, const Limb* base, const BigInt& e, std::vector<Limb>& scratch) const {
  const size_t n = n_, bits = e.bit_length();
  if (bits == 0) {
    std::copy(one_.begin(), one_.end(), out);
    return;
  }
  const unsigned w = bits > 512 ? 5 : 4;
  const size_t entries = size_t{1} << w;
  if (scratch.size() < (entries + 1) * n) scratch.resize((entries + 1) * n);
  Limb* table = scratch.data();  // table[i] = base^i
  Limb* acc = table + entries * n;
  std::copy(one_.begin(), one_.end(), table);
  std::copy(base, base + n, table + n);
  for (size_t i = 2; i < entries; ++i) mul(table + i * n, table + (i - 1) * n, base);
  auto digit = [&](size_t window) {
    size_t d = 0;
    for (unsigned b = w; b-- > 0;) d = (d << 1) | (e.bit(window * w + b) ? 1 : 0);
    return d;
  };
  size_t window = (bits + w - 1) / w - 1;
  std::copy(table + digit(window) * n, table + (digit(window) + 1) * n, acc);
  while (window-- > 0) {
    for (unsigned s = 0; s < w; ++s) sqr(acc, acc);
    if (size_t d = digit(window)) mul(acc, acc, table + d * n);
  }
  std::copy(acc, acc + n, out);
}

std::vector<Limb> Montgomery::load(const BigInt& a) const {
  const BigInt reduced = a < m_ ? a : a % m_;
  std::vector<Limb> v(n_, 0);
  std::copy(reduced.limbs().begin(), reduced.limbs().end(), v.begin());
  return v;
}

BigInt Montgomery::store(const Limb* a) const { return BigInt::from_limbs(std::span<const Limb>(a, n_)); }

BigInt Montgomery::mod_mul(const BigInt& a, const BigInt& b) const {
  std::vector<Limb> x = load(a), y = load(b);
  to_mont(x.data(), x.data());
  mul(x.data(), x.data(), y.data());  // a R * b / R = a b
  return store(x.data());
}

BigInt Montgomery::exp(const BigInt& base, const BigInt& e) const {
  std::vector<Limb> x = load(base), scratch;
  to_mont(x.data(), x.data());
  exp(x.data(), x.data(), e, scratch);
  from_mont(x.data(), x.data());
  return store(x.data());
}

BigInt Montgomery::inverse_prime(const BigInt& a) const { return exp(a, m_ - BigInt(2)); }

// ---- P-256 ------------------------------------------------------------------

namespace {
// FIPS 186-4 D.1.2.3 (curve P-256).
const char* const kP256P = "FFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF";
const char* const kP256N = "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551";
const char* const kP256B = "5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B";
const char* const kP256Gx = "6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296";
const char* const kP256Gy = "4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5";
}  // namespace

P256::P256() : field_(BigInt::from_hex(kP256P)), order_(BigInt::from_hex(kP256N)) {
  std::vector<Limb> b = field_.load(BigInt::from_hex(kP256B));
  field_.to_mont(b.data(), b.data());
  std::copy(b.begin(), b.end(), b_.begin());
  g_ = Affine{BigInt::from_hex(kP256Gx), BigInt::from_hex(kP256Gy), false};
  window_table(g_table_, to_jacobian(g_));
}

const P256& P256::instance() {
  static const P256 curve;
  return curve;
}

bool P256::is_zero(const Fe& a) const {
  for (Limb l : a)
    if (l) return false;
  return true;
}

P256::Jacobian P256::to_jacobian(const Affine& a) const {
  Jacobian j;
  if (a.infinity) return j;
  std::vector<Limb> x = field_.load(a.x), y = field_.load(a.y);
  field_.to_mont(j.x.data(), x.data());
  field_.to_mont(j.y.data(), y.data());
  std::copy(field_.one(), field_.one() + kFieldLimbs, j.z.begin());
  return j;
}

P256::Affine P256::to_affine(const Jacobian& j) const {
  Affine a;
  if (is_zero(j.z)) {
    a.infinity = true;
    return a;
  }
  // x = X / Z^2, y = Y / Z^3 with 1/Z = Z^(p-2).
  static const BigInt p_minus_2 = BigInt::from_hex(kP256P) - BigInt(2);
  std::vector<Limb> scratch;
  Fe zinv, zinv2, x, y;
  field_.exp(zinv.data(), j.z.data(), p_minus_2, scratch);
  field_.sqr(zinv2.data(), zinv.data());
  field_.mul(x.data(), j.x.data(), zinv2.data());
  field_.mul(y.data(), j.y.data(), zinv2.data());
  field_.mul(y.data(), y.data(), zinv.data());
  field_.from_mont(x.data(), x.data());
  field_.from_mont(y.data(), y.data());
  a.x = field_.store(x.data());
  a.y = field_.store(y.data());
  return a;
}

bool P256::on_curve(const Affine& pt) const {
  if (pt.infinity) return false;
  if (pt.x >= p() || pt.y >= p()) return false;
  const Jacobian j = to_jacobian(pt);
  Fe lhs, rhs, t;
  field_.sqr(lhs.data(), j.y.data());  // y^2
  field_.sqr(t.data(), j.x.data());
  field_.mul(rhs.data(), t.data(), j.x.data());  // x^3
  field_.sub(rhs.data(), rhs.data(), j.x.data());
  field_.sub(rhs.data(), rhs.data(), j.x.data());
  field_.sub(rhs.data(), rhs.data(), j.x.data());  // x^3 - 3x
  field_.add(rhs.data(), rhs.data(), b_.data());
  return lhs == rhs;
}

void P256::dbl(Jacobian& r, const Jacobian& a) const {
  // dbl-2001-b (a = -3): delta = Z^2, gamma = Y^2, beta = X gamma,
  // alpha = 3 (X - delta)(X + delta).
  if (is_zero(a.z) || is_zero(a.y)) {
    r = Jacobian{};
    return;
  }
  Fe delta, gamma, beta, alpha, t1, t2;
  field_.sqr(delta.data(), a.z.data());
  field_.sqr(gamma.data(), a.y.data());
  field_.mul(beta.data(), a.x.data(), gamma.data());
  field_.sub(t1.data(), a.x.data(), delta.data());
  field_.add(t2.data(), a.x.data(), delta.data());
  field_.mul(alpha.data(), t1.data(), t2.data());
  field_.add(t1.data(), alpha.data(), alpha.data());
  field_.add(alpha.data(), t1.data(), alpha.data());
  // Z3 = (Y + Z)^2 - gamma - delta (before X and Y are overwritten)
  Fe z3;
  field_.add(t1.data(), a.y.data(), a.z.data());
  field_.sqr(z3.data(), t1.data());
  field_.sub(z3.data(), z3.data(), gamma.data());
  field_.sub(z3.data(), z3.data(), delta.data());
  // X3 = alpha^2 - 8 beta
  Fe x3, beta4, beta8;
  field_.add(beta4.data(), beta.data(), beta.data());
  field_.add(beta4.data(), beta4.data(), beta4.data());
  field_.add(beta8.data(), beta4.data(), beta4.data());
  field_.sqr(x3.data(), alpha.data());
  field_.sub(x3.data(), x3.data(), beta8.data());
  // Y3 = alpha (4 beta - X3) - 8 gamma^2
  Fe y3;
  field_.sub(t1.data(), beta4.data(), x3.data());
  field_.mul(y3.data(), alpha.data(), t1.data());
  field_.sqr(t2.data(), gamma.data());
  field_.add(t2.data(), t2.data(), t2.data());
  field_.add(t2.data(), t2.data(), t2.data());
  field_.add(t2.data(), t2.data(), t2.data());
  field_.sub(y3.data(), y3.data(), t2.data());
  r.x = x3;
  r.y = y3;
  r.z = z3;
}

void P256::add(Jacobian& r, const Jacobian& a, const Jacobian& b) const {
  // add-1998-cmo-2 with the doubling and opposite-point cases.
  if (is_zero(a.z)) {
    r = b;
    return;
  }
  if (is_zero(b.z)) {
    r = a;
    return;
  }
  Fe z1z1, z2z2, u1, u2, s1, s2, h, rr, t;
  field_.sqr(z1z1.data(), a.z.data());
  field_.sqr(z2z2.data(), b.z.data());
  field_.mul(u1.data(), a.x.data(), z2z2.data());
  field_.mul(u2.data(), b.x.data(), z1z1.data());
  field_.mul(t.data(), b.z.data(), z2z2.data());
  field_.mul(s1.data(), a.y.data(), t.data());
  field_.mul(t.data(), a.z.data(), z1z1.data());
  field_.mul(s2.data(), b.y.data(), t.data());
  field_.sub(h.data(), u2.data(), u1.data());
  field_.sub(rr.data(), s2.data(), s1.data());
  if (is_zero(h)) {
    if (is_zero(rr)) {
      dbl(r, a);
    } else {
      r = Jacobian{};
    }
    return;
  }
  Fe hh, hhh, v, x3, y3, z3;
  field_.sqr(hh.data(), h.data());
  field_.mul(hhh.data(), h.data(), hh.data());
  field_.mul(v.data(), u1.data(), hh.data());
  // X3 = R^2 - H^3 - 2 V
  field_.sqr(x3.data(), rr.data());
  field_.sub(x3.data(), x3.data(), hhh.data());
  field_.sub(x3.data(), x3.data(), v.data());
  field_.sub(x3.data(), x3.data(), v.data());
  // Y3 = R (V - X3) - S1 H^3
  field_.sub(t.data(), v.data(), x3.data());
  field_.mul(y3.data(), rr.data(), t.data());
  field_.mul(t.data(), s1.data(), hhh.data());
  field_.sub(y3.data(), y3.data(), t.data());
  // Z3 = Z1 Z2 H
  field_.mul(z3.data(), a.z.data(), b.z.data());
  field_.mul(z3.data(), z3.data(), h.data());
  r.x = x3;
  r.y = y3;
  r.z = z3;
}

void P256::window_table(Table& t, const Jacobian& p) const {
  t[0] = Jacobian{};
  t[1] = p;
  for (size_t i = 2; i < t.size(); ++i) add(t[i], t[i - 1], p);
}

void P256::mul_table(Jacobian& r, const BigInt& k, const Table& t) const {
  // Left to right, 4 bits at a time.
  Jacobian acc;
  for (size_t window = (std::max<size_t>(k.bit_length(), 1) + 3) / 4; window-- > 0;) {
    for (int s = 0; s < 4; ++s) dbl(acc, acc);
    unsigned d = 0;
    for (unsigned b = 4; b-- > 0;) d = (d << 1) | (k.bit(window * 4 + b) ? 1 : 0);
    if (d) add(acc, acc, t[d]);
  }
  r = acc;
}

P256::Affine P256::mul(const BigInt& k, const Affine& pt) const {
  Table t;
  window_table(t, to_jacobian(pt));
  Jacobian r;
  mul_table(r, k, t);
  return to_affine(r);
}

P256::Affine P256::mul_base(const BigInt& k) const {
  Jacobian r;
  mul_table(r, k, g_table_);
  return to_affine(r);
}

P256::Affine P256::mul_add(const BigInt& u1, const BigInt& u2, const Affine& q) const {
  Table tq;
  window_table(tq, to_jacobian(q));
  Jacobian a, b;
  mul_table(a, u1, g_table_);
  mul_table(b, u2, tq);
  add(a, a, b);
  return to_affine(a);
}

P256::Affine P256::add(const Affine& a, const Affine& b) const {
  Jacobian r;
  add(r, to_jacobian(a), to_jacobian(b));
  return to_affine(r);
}

// ---- Signature schemes -----------------------------------------------------

namespace {

// Big-endian bytes into `count` little-endian limbs (the value must fit).
void bytes_to_limbs(std::span<const uint8_t> bytes, Limb* out, size_t count) {
  std::fill(out, out + count, Limb{0});
  size_t byte = 0;
  for (size_t i = bytes.size(); i-- > 0; ++byte)
    if (byte / sizeof(Limb) < count) out[byte / sizeof(Limb)] |= static_cast<Limb>(bytes[i]) << (8 * (byte % sizeof(Limb)));
}

// `count` limbs into exactly out.size() big-endian bytes (the value must fit).
void limbs_to_bytes(const Limb* in, size_t count, std::span<uint8_t> out) {
  for (size_t byte = 0; byte < out.size(); ++byte) {
    size_t limb = byte / sizeof(Limb);
    out[out.size() - 1 - byte] = limb < count ? static_cast<uint8_t>(in[limb] >> (8 * (byte % sizeof(Limb)))) : 0;
  }
}

std::span<const uint8_t> one_byte(const uint8_t& b) { return std::span<const uint8_t>(&b, 1); }

// RFC 8017 section 9.2, note 1: the DER DigestInfo prefix for SHA-256.
constexpr uint8_t kSha256DigestInfo[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                         0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};

}  // namespace

BigInt bits2int(std::span<const uint8_t> bits, size_t qlen) {
  BigInt x = BigInt::from_bytes(bits);
  const size_t blen = 8 * bits.size();
  return blen > qlen ? x >> (blen - qlen) : x;
}

Rfc6979Nonce::Rfc6979Nonce(const BigInt& q, const BigInt& x, std::span<const uint8_t> h1)
    : q_(q), qlen_(q.bit_length()) {
  const size_t rlen = (qlen_ + 7) / 8;
  const std::vector<uint8_t> x_octets = x.to_bytes(rlen);  // int2octets(x)
  BigInt z = bits2int(h1, qlen_);                           // bits2octets(h1): bits2int mod q,
  if (z >= q_) z = z - q_;                                  // which is below 2q
  const std::vector<uint8_t> h_octets = z.to_bytes(rlen);
  v_.fill(0x01);
  k_.fill(0x00);
  const uint8_t zero = 0x00, one = 0x01;
  k_ = hmac_sha256_ref(k_, {v_, one_byte(zero), x_octets, h_octets});
  v_ = hmac_sha256_ref(k_, v_);
  k_ = hmac_sha256_ref(k_, {v_, one_byte(one), x_octets, h_octets});
  v_ = hmac_sha256_ref(k_, v_);
}

void Rfc6979Nonce::step() {
  const uint8_t zero = 0x00;
  k_ = hmac_sha256_ref(k_, {v_, one_byte(zero)});
  v_ = hmac_sha256_ref(k_, v_);
}

BigInt Rfc6979Nonce::next() {
  if (started_) step();  // the previous k was rejected by the signer
  started_ = true;
  std::vector<uint8_t> t;
  for (;;) {
    t.clear();
    while (8 * t.size() < qlen_) {
      v_ = hmac_sha256_ref(k_, v_);
      t.insert(t.end(), v_.begin(), v_.end());
    }
    BigInt k = bits2int(t, qlen_);
    if (!k.is_zero() && k < q_) return k;
    step();
  }
}

// ---- RSA

RsaPkcs1Sha256::RsaPkcs1Sha256(Key key)
    : key_(std::move(key)),
      k_((key_.n.bit_length() + 7) / 8),
      mont_n_(key_.n),
      mont_p_(key_.p),
      mont_q_(key_.q) {
  const BigInt one(1);
  if (key_.p * key_.q != key_.n) throw std::invalid_argument("RSA key: p q != n");
  const BigInt p1 = key_.p - one, q1 = key_.q - one;
  const BigInt lambda = p1 * q1 / gcd(p1, q1);
  if (key_.e * key_.d % lambda != one) throw std::invalid_argument("RSA key: e d != 1 mod lcm(p-1, q-1)");
  const BigInt dp = key_.d % p1, dq = key_.d % q1, qinv = mod_inverse(key_.q, key_.p);
  if (key_.dp.is_zero() && key_.dq.is_zero() && key_.qinv.is_zero()) {
    key_.dp = dp;
    key_.dq = dq;
    key_.qinv = qinv;
  } else if (key_.dp != dp || key_.dq != dq || key_.qinv != qinv) {
    throw std::invalid_argument("RSA key: dP, dQ or qInv inconsistent with d, p, q");
  }
  if (k_ < sizeof kSha256DigestInfo + 32 + 11) throw std::invalid_argument("RSA modulus too short for SHA-256");
  qinv_ = mont_p_.load(key_.qinv);
}

void RsaPkcs1Sha256::encode(std::span<const uint8_t> message, std::span<uint8_t> em) const {
  const std::array<uint8_t, 32> h = sha256_ref(message);
  const size_t t_len = sizeof kSha256DigestInfo + h.size();
  em[0] = 0x00;
  em[1] = 0x01;
  std::fill(em.begin() + 2, em.end() - t_len - 1, 0xff);
  em[k_ - t_len - 1] = 0x00;
  std::copy(std::begin(kSha256DigestInfo), std::end(kSha256DigestInfo), em.begin() + (k_ - t_len));
  std::copy(h.begin(), h.end(), em.end() - h.size());
}

void RsaPkcs1Sha256::sign(std::span<const uint8_t> message, std::span<uint8_t> signature, Scratch& s) const {
  if (signature.size() != k_) throw std::invalid_argument("RSA signature buffer is not the modulus size");
  encode(message, signature);  // EM, replaced by the signature below
  const size_t nn = mont_n_.limbs(), np = mont_p_.limbs(), nq = mont_q_.limbs();
  s.c.resize(nn);
  s.m1.resize(np);
  s.m2.resize(nq);
  s.h.resize(np);
  s.t.resize(std::max(np + nq + 1, nn));
  bytes_to_limbs(signature, s.c.data(), nn);
  // m1 = c^dP mod p, m2 = c^dQ mod q
  mont_p_.reduce_to_mont(s.m1.data(), s.c.data(), nn);
  mont_p_.exp(s.m1.data(), s.m1.data(), key_.dp, s.window);
  mont_p_.from_mont(s.m1.data(), s.m1.data());
  mont_q_.reduce_to_mont(s.m2.data(), s.c.data(), nn);
  mont_q_.exp(s.m2.data(), s.m2.data(), key_.dq, s.window);
  mont_q_.from_mont(s.m2.data(), s.m2.data());
  // h = qInv (m1 - m2) mod p, in Montgomery form until the multiply by the
  // plain qInv takes the R back out.
  mont_p_.reduce_to_mont(s.t.data(), s.m2.data(), nq);
  mont_p_.to_mont(s.h.data(), s.m1.data());
  mont_p_.sub(s.h.data(), s.h.data(), s.t.data());
  mont_p_.mul(s.h.data(), s.h.data(), qinv_.data());
  // s = m2 + q h (below n)
  const std::vector<Limb>& q = key_.q.limbs();
  std::fill(s.t.begin(), s.t.end(), Limb{0});
  for (size_t i = 0; i < np; ++i) {
    Limb carry = 0;
    for (size_t j = 0; j < q.size(); ++j) {
      WideLimb v = static_cast<WideLimb>(s.h[i]) * q[j] + s.t[i + j] + carry;
      s.t[i + j] = static_cast<Limb>(v);
      carry = static_cast<Limb>(v >> kLimbBits);
    }
    for (size_t k = i + q.size(); carry; ++k) {
      WideLimb v = static_cast<WideLimb>(s.t[k]) + carry;
      s.t[k] = static_cast<Limb>(v);
      carry = static_cast<Limb>(v >> kLimbBits);
    }
  }
  Limb carry = add_in_place(s.t.data(), s.m2.data(), nq);
  for (size_t k = nq; carry; ++k) carry = ++s.t[k] == 0;
  limbs_to_bytes(s.t.data(), s.t.size(), signature);
}

bool RsaPkcs1Sha256::verify(std::span<const uint8_t> message, std::span<const uint8_t> signature) const {
  if (signature.size() != k_) return false;
  const BigInt s = BigInt::from_bytes(signature);
  if (s >= key_.n) return false;
  const std::vector<uint8_t> em = mont_n_.exp(s, key_.e).to_bytes(k_);
  std::vector<uint8_t> want(k_);
  encode(message, want);
  return em == want;
}

// ---- DSA

DsaSha256::DsaSha256(Key key)
    : key_(std::move(key)), scalar_bytes_((key_.q.bit_length() + 7) / 8), mont_p_(key_.p), mont_q_(key_.q) {
  const BigInt one(1);
  if ((key_.p - one) % key_.q != BigInt()) throw std::invalid_argument("DSA key: q does not divide p - 1");
  if (key_.g <= one || key_.g >= key_.p || mont_p_.exp(key_.g, key_.q) != one)
    throw std::invalid_argument("DSA key: g is not of order q");
  if (key_.x.is_zero() || key_.x >= key_.q || mont_p_.exp(key_.g, key_.x) != key_.y)
    throw std::invalid_argument("DSA key: y != g^x");
}

BigInt DsaSha256::nonce(std::span<const uint8_t> digest) const {
  return Rfc6979Nonce(key_.q, key_.x, digest).next();
}

void DsaSha256::sign_digest(std::span<const uint8_t> digest, std::span<uint8_t> rs) const {
  if (rs.size() != signature_bytes()) throw std::invalid_argument("DSA signature buffer has the wrong size");
  const BigInt& q = key_.q;
  // z: the leftmost min(N, outlen) bits of the digest (FIPS 186-4 4.6).
  const BigInt z = bits2int(digest, q.bit_length()) % q;
  Rfc6979Nonce nonces(q, key_.x, digest);
  for (;;) {
    const BigInt k = nonces.next();
    const BigInt r = mont_p_.exp(key_.g, k) % q;
    if (r.is_zero()) continue;
    const BigInt s = mont_q_.mod_mul(mont_q_.inverse_prime(k), (z + mont_q_.mod_mul(key_.x, r)) % q);
    if (s.is_zero()) continue;
    r.to_bytes(rs.first(scalar_bytes_));
    s.to_bytes(rs.subspan(scalar_bytes_));
    return;
  }
}

void DsaSha256::sign(std::span<const uint8_t> message, std::span<uint8_t> rs) const {
  sign_digest(sha256_ref(message), rs);
}

bool DsaSha256::verify(std::span<const uint8_t> message, std::span<const uint8_t> rs) const {
  if (rs.size() != signature_bytes()) return false;
  const BigInt& q = key_.q;
  const BigInt r = BigInt::from_bytes(rs.first(scalar_bytes_)), s = BigInt::from_bytes(rs.subspan(scalar_bytes_));
  if (r.is_zero() || s.is_zero() || r >= q || s >= q) return false;
  const BigInt z = bits2int(sha256_ref(message), q.bit_length()) % q;
  const BigInt w = mont_q_.inverse_prime(s);
  const BigInt u1 = mont_q_.mod_mul(z, w), u2 = mont_q_.mod_mul(r, w);
  const BigInt v = mont_p_.mod_mul(mont_p_.exp(key_.g, u1), mont_p_.exp(key_.y, u2)) % q;
  return v == r;
}

// ---- ECDSA

EcdsaP256Sha256::EcdsaP256Sha256(const BigInt& d) : d_(d) {
  const P256& curve = P256::instance();
  if (d.is_zero() || d >= curve.order()) throw std::invalid_argument("P-256 private key outside [1, n-1]");
  q_ = curve.mul_base(d);
}

BigInt EcdsaP256Sha256::nonce(std::span<const uint8_t> digest) const {
  return Rfc6979Nonce(P256::instance().order(), d_, digest).next();
}

void EcdsaP256Sha256::sign_digest(std::span<const uint8_t> digest, std::span<uint8_t> rs) const {
  if (rs.size() != kSignatureBytes) throw std::invalid_argument("ECDSA signature buffer is not 64 bytes");
  const P256& curve = P256::instance();
  const Montgomery& mod_n = curve.order_field();
  const BigInt& n = curve.order();
  const BigInt e = bits2int(digest, n.bit_length()) % n;
  Rfc6979Nonce nonces(n, d_, digest);
  for (;;) {
    const BigInt k = nonces.next();
    const BigInt r = curve.mul_base(k).x % n;
    if (r.is_zero()) continue;
    const BigInt s = mod_n.mod_mul(mod_n.inverse_prime(k), (e + mod_n.mod_mul(r, d_)) % n);
    if (s.is_zero()) continue;
    r.to_bytes(rs.first(32));
    s.to_bytes(rs.subspan(32));
    return;
  }
}

void EcdsaP256Sha256::sign(std::span<const uint8_t> message, std::span<uint8_t> rs) const {
  sign_digest(sha256_ref(message), rs);
}

bool EcdsaP256Sha256::verify(std::span<const uint8_t> message, std::span<const uint8_t> rs) const {
  return verify(q_, message, rs);
}

bool EcdsaP256Sha256::verify(const P256::Affine& q, std::span<const uint8_t> message,
                             std::span<const uint8_t> rs) {
  const P256& curve = P256::instance();
  if (rs.size() != kSignatureBytes || !curve.on_curve(q)) return false;
  const BigInt& n = curve.order();
  const BigInt r = BigInt::from_bytes(rs.first(32)), s = BigInt::from_bytes(rs.subspan(32));
  if (r.is_zero() || s.is_zero() || r >= n || s >= n) return false;
  const Montgomery& mod_n = curve.order_field();
  const BigInt e = bits2int(sha256_ref(message), n.bit_length()) % n;
  const BigInt w = mod_n.inverse_prime(s);
  const P256::Affine x = curve.mul_add(mod_n.mod_mul(e, w), mod_n.mod_mul(r, w), q);
  return !x.infinity && x.x % n == r;
}

}  // namespace dpukit::bench::bn
