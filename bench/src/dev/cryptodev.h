// The dev backend of the security and public-key operators: DPDK cryptodev.
//
// Each function returns one kernel per thread (the kernels' process() is
// the operator's unit of work, with the operator's exact output) or throws
// Unavailable with the reason. The device is chosen by capability: a
// hardware PMD (RTE_CRYPTODEV_FF_HW_ACCELERATED, e.g. a DPU's) when one has
// the capability, else the first software PMD that has it (here
// crypto_aesni_mb, then crypto_openssl). Each device is configured once per
// process with all its queue pairs; each kernel takes one queue pair and
// one session and gives them back when destroyed. process_burst() keeps a
// burst of operations in flight (enqueued together, then collected until
// all are back), as DPDK's dpdk-test-crypto-perf drives a device;
// process() is a burst of one. On a software PMD the operations read the
// caller's input and write the caller's output in place (no copies); a
// hardware PMD gets them copied into and out of DPDK memory. The
// asymmetric kernels run one operation at a time. The kernels are
// DevKernel (device() names the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dev/dev_kernel.h"
#include "operator.h"

namespace dpukit::bench {

// AES-128-GCM encryption as the `aes` operator: `key` is 16 bytes, `salt`
// 4; for an input of n >= 8 bytes the IV is salt || input[0..8), there is
// no AAD, the plaintext is the whole input, and the output is the n-byte
// ciphertext followed by the 16-byte tag. `size` is the largest input.
// With `session_per_packet` each operation runs on a new session (the key
// schedule per packet: the operators' key_schedule=per_packet); else one
// session per kernel.
std::vector<std::unique_ptr<Kernel>> dev_aes_gcm_kernels(std::span<const uint8_t> key, std::span<const uint8_t> salt,
                                                         size_t size, unsigned threads,
                                                         bool session_per_packet = false);

// AES-128-CBC encryption as the `aes_cbc` operator: `key` is 16 bytes; the
// IV is the first 16 bytes of the input, the plaintext is the whole input
// (a multiple of 16 bytes, no padding) and the output is the ciphertext.
std::vector<std::unique_ptr<Kernel>> dev_aes_cbc_kernels(std::span<const uint8_t> key, size_t size,
                                                         unsigned threads, bool session_per_packet = false);

// One encryption on the device the kernels above use, with the IV given
// rather than taken from the input (12 bytes for GCM, 16 for CBC): for
// checking the device against published vectors, whose IVs are not part of
// their plaintexts. Output as the kernels'.
Bytes dev_aes_gcm_encrypt_with_iv(std::span<const uint8_t> key, std::span<const uint8_t> iv,
                                  std::span<const uint8_t> plaintext);
Bytes dev_aes_cbc_encrypt_with_iv(std::span<const uint8_t> key, std::span<const uint8_t> iv,
                                  std::span<const uint8_t> plaintext);

// A plain hash (not HMAC) of the whole input; the output is the digest
// (16, 20 or 32 bytes).
enum class DevHash { kMd5, kSha1, kSha256 };
std::vector<std::unique_ptr<Kernel>> dev_digest_kernels(DevHash hash, size_t size, unsigned threads);

// Private keys as big-endian unsigned byte strings (leading zeros allowed).
struct DevRsaKey {
  Bytes n, e, d, p, q, dp, dq, qinv;
};
struct DevDsaKey {
  Bytes p, q, g, x;
};

// RSA PKCS#1 v1.5 signature with SHA-256 of the whole input (RFC 8017
// RSASSA-PKCS1-v1_5); the output is the signature, as long as n. The
// SHA-256 of the input is computed on the CPU (OpenSSL), the signature by
// the device, with the CRT key form when the PMD takes it.
std::vector<std::unique_ptr<Kernel>> dev_rsa_sign_kernels(const DevRsaKey& key, unsigned threads);

// DSA signature (FIPS 186-4) of SHA-256 of the whole input; the output is
// r || s, each as long as q (32 bytes for (2048, 256)). The device draws k,
// so outputs differ from call to call: check them by verifying.
std::vector<std::unique_ptr<Kernel>> dev_dsa_sign_kernels(const DevDsaKey& key, unsigned threads);

// ECDSA P-256 signature of SHA-256 of the whole input; `private_key` is the
// 32-byte scalar; the output is r || s (32 + 32 bytes), k drawn fresh for
// every call. Throws Unavailable when no cryptodev offers ECDSA sign on
// P-256 (none does with DPDK 22.11's software PMDs).
std::vector<std::unique_ptr<Kernel>> dev_ecdsa_p256_sign_kernels(std::span<const uint8_t> private_key,
                                                                 unsigned threads);

}  // namespace dpukit::bench
