// Reference cryptography written here in plain C++ (no intrinsics, any
// CPU): the digests MD5 (RFC 1321), SHA-1 and SHA-256 (FIPS 180-4) and
// HMAC-SHA-256 (RFC 2104 / FIPS 198-1), and the AES-128 block cipher
// (FIPS-197) with the CBC (SP 800-38A) and GCM (SP 800-38D) modes. The ref
// backends of the security and public-key operators use them; the tests
// check them against the published vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

namespace dpukit::bench {

std::array<uint8_t, 16> md5_ref(std::span<const uint8_t> message);
std::array<uint8_t, 20> sha1_ref(std::span<const uint8_t> message);
std::array<uint8_t, 32> sha256_ref(std::span<const uint8_t> message);

// HMAC-SHA-256 of `message`; the second form MACs the concatenation of
// `parts` without building it (RFC 6979 MACs V || 0x00 || x || h1).
std::array<uint8_t, 32> hmac_sha256_ref(std::span<const uint8_t> key, std::span<const uint8_t> message);
std::array<uint8_t, 32> hmac_sha256_ref(std::span<const uint8_t> key,
                                        std::initializer_list<std::span<const uint8_t>> parts);

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256Ref {
 public:
  static constexpr size_t kBlockSize = 64, kDigestSize = 32;
  Sha256Ref();
  void update(std::span<const uint8_t> data);
  std::array<uint8_t, 32> finish();

 private:
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
};

// AES-128 encryption of single blocks with the key expanded once.
class Aes128Ref {
 public:
  static constexpr size_t kBlockSize = 16, kKeySize = 16;
  explicit Aes128Ref(std::span<const uint8_t, kKeySize> key);
  void encrypt_block(const uint8_t in[kBlockSize], uint8_t out[kBlockSize]) const;

 private:
  std::array<uint8_t, 176> round_keys_;  // 11 round keys of 16 bytes
};

// CBC encryption without padding: `plaintext` is a whole number of blocks
// and `ciphertext` has its size. Throws std::invalid_argument otherwise.
void aes128_cbc_encrypt_ref(const Aes128Ref& aes, std::span<const uint8_t, 16> iv,
                            std::span<const uint8_t> plaintext, std::span<uint8_t> ciphertext);

// AES-128-GCM with a 128-bit tag; GHASH bit by bit as SP 800-38D Algorithm 1
// writes it. Any IV length (96 bits is the fast path the standard defines).
class Aes128GcmRef {
 public:
  explicit Aes128GcmRef(std::span<const uint8_t, 16> key);
  // Encrypts `plaintext` into `ciphertext` (the same size) and returns the tag.
  std::array<uint8_t, 16> encrypt(std::span<const uint8_t> iv, std::span<const uint8_t> aad,
                                  std::span<const uint8_t> plaintext, std::span<uint8_t> ciphertext) const;

 private:
  Aes128Ref aes_;
  uint64_t h_hi_, h_lo_;  // the hash subkey H = E_K(0^128), big-endian halves
};

}  // namespace dpukit::bench
