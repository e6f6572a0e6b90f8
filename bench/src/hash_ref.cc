// Reference digests and AES: straight transcriptions of RFC 1321, FIPS 180-4,
// FIPS-197 and SP 800-38A/D, one block at a time, no tables beyond the
// constants the standards give (the S-box is computed as FIPS-197 §5.1.1
// defines it).
#include "hash_ref.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace dpukit::bench {
namespace {

inline uint32_t rotl(uint32_t x, int n) { return x << n | x >> (32 - n); }
inline uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }
inline uint32_t load_be(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline uint32_t load_le(const uint8_t* p) {
  return uint32_t(p[3]) << 24 | uint32_t(p[2]) << 16 | uint32_t(p[1]) << 8 | p[0];
}

// Merkle-Damgard over a whole message: the full 64-byte blocks, then the
// tail with 0x80, zeros and the bit length in the last 8 bytes (big-endian
// for SHA, little-endian for MD5), which takes one or two more blocks.
template <class Compress>
void hash_blocks(std::span<const uint8_t> message, bool length_big_endian, Compress compress) {
  const size_t full = message.size() / 64;
  for (size_t i = 0; i < full; ++i) compress(message.data() + 64 * i);
  uint8_t tail[128] = {};
  const size_t rest = message.size() - 64 * full;
  if (rest) std::memcpy(tail, message.data() + 64 * full, rest);
  tail[rest] = 0x80;
  const size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
  const uint64_t bits = static_cast<uint64_t>(message.size()) * 8;
  for (int i = 0; i < 8; ++i)
    tail[tail_len - 8 + i] = static_cast<uint8_t>(length_big_endian ? bits >> (56 - 8 * i) : bits >> (8 * i));
  compress(tail);
  if (tail_len == 128) compress(tail + 64);
}

// RFC 1321 §3.4: T[i] = floor(2^32 * |sin(i + 1)|), and the per-round shifts.
constexpr uint32_t kMd5T[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
constexpr int kMd5Shift[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

void md5_compress(uint32_t h[4], const uint8_t* block) {
  uint32_t x[16];
  for (int i = 0; i < 16; ++i) x[i] = load_le(block + 4 * i);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
  for (int i = 0; i < 64; ++i) {
    const int round = i / 16;
    uint32_t f;
    int k;
    switch (round) {
      case 0: f = (b & c) | (~b & d), k = i; break;                   // F
      case 1: f = (b & d) | (c & ~d), k = (5 * i + 1) % 16; break;    // G
      case 2: f = b ^ c ^ d, k = (3 * i + 5) % 16; break;             // H
      default: f = c ^ (b | ~d), k = (7 * i) % 16; break;             // I
    }
    const uint32_t next = b + rotl(a + f + x[k] + kMd5T[i], kMd5Shift[round][i % 4]);
    a = d, d = c, c = b, b = next;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d;
}

void sha1_compress(uint32_t h[5], const uint8_t* block) {
  uint32_t w[80];
  for (int t = 0; t < 16; ++t) w[t] = load_be(block + 4 * t);
  for (int t = 16; t < 80; ++t) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; ++t) {
    uint32_t f, k;
    if (t < 20) f = (b & c) | (~b & d), k = 0x5a827999;        // Ch
    else if (t < 40) f = b ^ c ^ d, k = 0x6ed9eba1;            // Parity
    else if (t < 60) f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;  // Maj
    else f = b ^ c ^ d, k = 0xca62c1d6;                        // Parity
    const uint32_t temp = rotl(a, 5) + f + e + k + w[t];
    e = d, d = c, c = rotl(b, 30), b = a, a = temp;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube
// roots of the first 64 primes.
constexpr uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

void sha256_compress(uint32_t h[8], const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) w[t] = load_be(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kSha256K[t] + w[t];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

template <size_t N>
std::array<uint8_t, 4 * N> store_words(const uint32_t (&h)[N], bool big_endian) {
  std::array<uint8_t, 4 * N> out;
  for (size_t i = 0; i < N; ++i)
    for (size_t j = 0; j < 4; ++j)
      out[4 * i + j] = static_cast<uint8_t>(big_endian ? h[i] >> (24 - 8 * j) : h[i] >> (8 * j));
  return out;
}

}  // namespace

std::array<uint8_t, 16> md5_ref(std::span<const uint8_t> message) {
  uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
  hash_blocks(message, false, [&](const uint8_t* block) { md5_compress(h, block); });
  return store_words(h, false);
}

std::array<uint8_t, 20> sha1_ref(std::span<const uint8_t> message) {
  uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
  hash_blocks(message, true, [&](const uint8_t* block) { sha1_compress(h, block); });
  return store_words(h, true);
}

std::array<uint8_t, 32> sha256_ref(std::span<const uint8_t> message) {
  Sha256Ref sha;
  sha.update(message);
  return sha.finish();
}

// FIPS 180-4 §5.3.3: the first 32 bits of the fractional parts of the square
// roots of the first 8 primes.
Sha256Ref::Sha256Ref()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256Ref::update(std::span<const uint8_t> data) {
  total_bytes_ += data.size();
  size_t i = 0;
  if (block_used_) {
    const size_t take = std::min(data.size(), kBlockSize - block_used_);
    std::memcpy(block_.data() + block_used_, data.data(), take);
    block_used_ += take, i = take;
    if (block_used_ < kBlockSize) return;
    sha256_compress(state_.data(), block_.data());
    block_used_ = 0;
  }
  for (; i + kBlockSize <= data.size(); i += kBlockSize) sha256_compress(state_.data(), data.data() + i);
  if (i < data.size()) {
    std::memcpy(block_.data(), data.data() + i, data.size() - i);
    block_used_ = data.size() - i;
  }
}

std::array<uint8_t, 32> Sha256Ref::finish() {
  const uint64_t bits = total_bytes_ * 8;
  // 0x80, then zeros up to 8 bytes short of a block boundary, then the length.
  uint8_t pad[kBlockSize + 8] = {0x80};
  const size_t zeros_to = block_used_ < 56 ? 56 : 56 + kBlockSize;
  size_t pad_len = zeros_to - block_used_;
  for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update({pad, pad_len + 8});
  uint32_t h[8];
  for (int i = 0; i < 8; ++i) h[i] = state_[i];
  return store_words(h, true);
}

std::array<uint8_t, 32> hmac_sha256_ref(std::span<const uint8_t> key,
                                        std::initializer_list<std::span<const uint8_t>> parts) {
  // RFC 2104: H((K ^ opad) || H((K ^ ipad) || text)), K zero-padded to a
  // block, hashed first when longer than a block.
  uint8_t k[Sha256Ref::kBlockSize] = {};
  if (key.size() > Sha256Ref::kBlockSize) {
    const auto kh = sha256_ref(key);
    std::memcpy(k, kh.data(), kh.size());
  } else if (!key.empty()) {
    std::memcpy(k, key.data(), key.size());
  }
  uint8_t pad[Sha256Ref::kBlockSize];
  for (size_t i = 0; i < sizeof pad; ++i) pad[i] = k[i] ^ 0x36;
  Sha256Ref inner;
  inner.update(pad);
  for (const auto& part : parts) inner.update(part);
  const auto inner_digest = inner.finish();
  for (size_t i = 0; i < sizeof pad; ++i) pad[i] = k[i] ^ 0x5c;
  Sha256Ref outer;
  outer.update(pad);
  outer.update(inner_digest);
  return outer.finish();
}

std::array<uint8_t, 32> hmac_sha256_ref(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  return hmac_sha256_ref(key, {message});
}

// ---- AES-128 (FIPS-197) ----

namespace {

// Multiplication by x in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1 (§4.2.1).
constexpr uint8_t xtime(uint8_t a) { return static_cast<uint8_t>(a << 1 ^ (a & 0x80 ? 0x1b : 0)); }

constexpr uint8_t gf256_mul(uint8_t a, uint8_t b) {
  uint8_t p = 0;
  for (; b; b >>= 1, a = xtime(a))
    if (b & 1) p ^= a;
  return p;
}

constexpr uint8_t rotl8(uint8_t b, int n) { return static_cast<uint8_t>(b << n | b >> (8 - n)); }

// §5.1.1: the multiplicative inverse (a^254; 0 maps to 0), then the affine
// transform b ^ (b<<<1) ^ (b<<<2) ^ (b<<<3) ^ (b<<<4) ^ 0x63.
constexpr std::array<uint8_t, 256> make_sbox() {
  std::array<uint8_t, 256> s{};
  for (int x = 0; x < 256; ++x) {
    uint8_t inv = 1, base = static_cast<uint8_t>(x);
    for (int e = 254; e; e >>= 1, base = gf256_mul(base, base))
      if (e & 1) inv = gf256_mul(inv, base);
    if (x == 0) inv = 0;
    s[x] = static_cast<uint8_t>(inv ^ rotl8(inv, 1) ^ rotl8(inv, 2) ^ rotl8(inv, 3) ^ rotl8(inv, 4) ^ 0x63);
  }
  return s;
}
constexpr std::array<uint8_t, 256> kSbox = make_sbox();
static_assert(kSbox[0x00] == 0x63 && kSbox[0x53] == 0xed, "FIPS-197 Figure 7");

}  // namespace

Aes128Ref::Aes128Ref(std::span<const uint8_t, kKeySize> key) {
  // §5.2 key expansion, Nk = 4, Nr = 10: 44 words, byte by byte.
  std::memcpy(round_keys_.data(), key.data(), kKeySize);
  uint8_t rcon = 0x01;
  for (size_t i = 16; i < round_keys_.size(); i += 4) {
    uint8_t t[4] = {round_keys_[i - 4], round_keys_[i - 3], round_keys_[i - 2], round_keys_[i - 1]};
    if (i % 16 == 0) {  // RotWord, SubWord, Rcon
      const uint8_t first = t[0];
      t[0] = static_cast<uint8_t>(kSbox[t[1]] ^ rcon);
      t[1] = kSbox[t[2]];
      t[2] = kSbox[t[3]];
      t[3] = kSbox[first];
      rcon = xtime(rcon);
    }
    for (int j = 0; j < 4; ++j) round_keys_[i + j] = round_keys_[i - 16 + j] ^ t[j];
  }
}

void Aes128Ref::encrypt_block(const uint8_t in[kBlockSize], uint8_t out[kBlockSize]) const {
  // The state is column-major as the input bytes are: s[r + 4c].
  uint8_t s[16];
  for (int i = 0; i < 16; ++i) s[i] = in[i] ^ round_keys_[i];
  for (int round = 1; round <= 10; ++round) {
    uint8_t t[16];
    for (int c = 0; c < 4; ++c)  // SubBytes and ShiftRows: row r rotates left by r
      for (int r = 0; r < 4; ++r) t[r + 4 * c] = kSbox[s[r + 4 * ((c + r) % 4)]];
    if (round < 10) {
      for (int c = 0; c < 4; ++c) {  // MixColumns (§5.1.3) via xtime
        uint8_t* a = t + 4 * c;
        const uint8_t all = a[0] ^ a[1] ^ a[2] ^ a[3], a0 = a[0];
        a[0] ^= all ^ xtime(a[0] ^ a[1]);
        a[1] ^= all ^ xtime(a[1] ^ a[2]);
        a[2] ^= all ^ xtime(a[2] ^ a[3]);
        a[3] ^= all ^ xtime(a[3] ^ a0);
      }
    }
    for (int i = 0; i < 16; ++i) s[i] = t[i] ^ round_keys_[16 * round + i];
  }
  std::memcpy(out, s, 16);
}

void aes128_cbc_encrypt_ref(const Aes128Ref& aes, std::span<const uint8_t, 16> iv,
                            std::span<const uint8_t> plaintext, std::span<uint8_t> ciphertext) {
  if (plaintext.size() % 16 != 0 || ciphertext.size() != plaintext.size())
    throw std::invalid_argument("CBC without padding takes whole 16-byte blocks into an output of the same size");
  // SP 800-38A §6.2: C_j = E_K(P_j ^ C_{j-1}), C_0 = IV.
  uint8_t chain[16];
  std::memcpy(chain, iv.data(), 16);
  for (size_t off = 0; off < plaintext.size(); off += 16) {
    for (int i = 0; i < 16; ++i) chain[i] ^= plaintext[off + i];
    aes.encrypt_block(chain, chain);
    std::memcpy(ciphertext.data() + off, chain, 16);
  }
}

// ---- GCM (SP 800-38D) ----

namespace {

inline uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}
inline void store_be64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// The GHASH state Y; absorb() takes one 16-byte block: Y = (Y ^ X) * H.
struct Ghash {
  uint64_t h_hi, h_lo, y_hi = 0, y_lo = 0;

  void absorb(const uint8_t block[16]) {
    const uint64_t x_hi = y_hi ^ load_be64(block), x_lo = y_lo ^ load_be64(block + 8);
    // Algorithm 1: bit 0 is the most significant bit of the first byte; V
    // shifts right, folding with R = 11100001 || 0^120 when a bit falls out.
    uint64_t z_hi = 0, z_lo = 0, v_hi = h_hi, v_lo = h_lo;
    for (int i = 0; i < 128; ++i) {
      const uint64_t bit = i < 64 ? x_hi >> (63 - i) & 1 : x_lo >> (127 - i) & 1;
      const uint64_t take = 0 - bit;  // all ones when the bit is set
      z_hi ^= v_hi & take;
      z_lo ^= v_lo & take;
      const uint64_t fold = 0 - (v_lo & 1);
      v_lo = v_lo >> 1 | v_hi << 63;
      v_hi = v_hi >> 1 ^ (0xe100000000000000ull & fold);
    }
    y_hi = z_hi, y_lo = z_lo;
  }
  // Whole blocks, then the last partial block padded with zeros.
  void absorb_padded(std::span<const uint8_t> data) {
    size_t off = 0;
    for (; off + 16 <= data.size(); off += 16) absorb(data.data() + off);
    if (off < data.size()) {
      uint8_t last[16] = {};
      std::memcpy(last, data.data() + off, data.size() - off);
      absorb(last);
    }
  }
  void absorb_lengths(uint64_t a_bytes, uint64_t c_bytes) {
    uint8_t block[16];
    store_be64(block, a_bytes * 8);
    store_be64(block + 8, c_bytes * 8);
    absorb(block);
  }
};

// inc_32: the last 32 bits of the counter block as a big-endian counter.
void increment32(uint8_t counter[16]) {
  for (int i = 15; i >= 12; --i)
    if (++counter[i] != 0) break;
}

}  // namespace

Aes128GcmRef::Aes128GcmRef(std::span<const uint8_t, 16> key) : aes_(key) {
  uint8_t zero[16] = {}, h[16];
  aes_.encrypt_block(zero, h);
  h_hi_ = load_be64(h), h_lo_ = load_be64(h + 8);
}

std::array<uint8_t, 16> Aes128GcmRef::encrypt(std::span<const uint8_t> iv, std::span<const uint8_t> aad,
                                              std::span<const uint8_t> plaintext,
                                              std::span<uint8_t> ciphertext) const {
  if (iv.empty() || ciphertext.size() != plaintext.size())
    throw std::invalid_argument("GCM needs a non-empty IV and an output the size of the plaintext");
  // §7.1 step 2: J0 = IV || 0^31 || 1 for a 96-bit IV, otherwise
  // GHASH(IV padded || 0^64 || [len(IV)]_64).
  uint8_t j0[16] = {};
  if (iv.size() == 12) {
    std::memcpy(j0, iv.data(), 12);
    j0[15] = 1;
  } else {
    Ghash g{h_hi_, h_lo_};
    g.absorb_padded(iv);
    g.absorb_lengths(0, iv.size());
    store_be64(j0, g.y_hi);
    store_be64(j0 + 8, g.y_lo);
  }
  // Step 3: GCTR from inc_32(J0).
  uint8_t counter[16], keystream[16];
  std::memcpy(counter, j0, 16);
  for (size_t off = 0; off < plaintext.size(); off += 16) {
    increment32(counter);
    aes_.encrypt_block(counter, keystream);
    const size_t n = std::min<size_t>(16, plaintext.size() - off);
    for (size_t i = 0; i < n; ++i) ciphertext[off + i] = plaintext[off + i] ^ keystream[i];
  }
  // Steps 5-6: S = GHASH(A || 0^v || C || 0^u || [len(A)]_64 || [len(C)]_64),
  // T = MSB_128(GCTR(J0, S)) = E_K(J0) ^ S.
  Ghash g{h_hi_, h_lo_};
  g.absorb_padded(aad);
  g.absorb_padded(ciphertext);
  g.absorb_lengths(aad.size(), ciphertext.size());
  std::array<uint8_t, 16> tag;
  aes_.encrypt_block(j0, tag.data());
  uint8_t s[16];
  store_be64(s, g.y_hi);
  store_be64(s + 8, g.y_lo);
  for (int i = 0; i < 16; ++i) tag[i] ^= s[i];
  return tag;
}

}  // namespace dpukit::bench
