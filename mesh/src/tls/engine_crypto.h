// TLS record crypto on the BlueField's bulk-crypto engine, as kTLS hardware
// offload does it on a ConnectX-6 Dx / BlueField (docs/mesh.md, "Record
// crypto on the crypto engine"): once a connection's keys are set, the NIC
// encrypts and decrypts its records inline, and the Arm cores pay none of
// it. Handshakes stay on the cores.
//
// How it is emulated: an OpenSSL 3 provider, "dpukit-engine", in an
// OSSL_LIB_CTX of the proxy's own, implements the engine's AEAD ciphers
// (AES-128-GCM, AES-256-GCM) by handing every call to the default provider's
// implementation of the same cipher, so every byte is OpenSSL's. Each
// record's calls (its nonce, AAD, payload and tag) are timed as one span
// (the monotonic clock, guarded against preemption): that time is the engine's (hw place), not the dpu's. It is excluded from the
// calling loop's dilation (it does not slow by F) and counted here, so the
// proxy reports it as hw CPU. An SSL_CTX made in that library context with
// the property query kEngineQuery takes these ciphers and every other
// algorithm (ChaCha20-Poly1305, hashes, signatures, key exchange) from the
// default provider: those stay on the cores.
#pragma once

#include <openssl/types.h>

#include <cstdint>
#include <string>

#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/engine.h"

namespace dpukit::mesh {

// Prefers the engine's implementation of a cipher where it has one.
inline constexpr const char* kEngineQuery = "?dpukit.engine=yes";

// The library context with the default provider and the engine's (made on
// first use, process-wide; throws std::runtime_error when OpenSSL refuses).
OSSL_LIB_CTX* engine_libctx();

// The bulk-crypto engine of the BlueField generation `speed` names (core's
// engine_spec), checked to run TLS records inline (inline:TLS-AES-GCM). Throws
// std::runtime_error with a clear reason: a speed that names no generation
// (host, a bare number), a generation without the engine, an engine without
// AES-GCM.
const EngineSpec& record_crypto_engine(const DpuSpeed& speed);

// The proxy's dpu speed, for record_crypto_engine() when a TLS context asks
// for the engine: the generation is the process's (one proxy per process;
// run_proxy sets it before the configuration is built). Default: host.
void set_record_crypto_speed(const DpuSpeed& speed);
DpuSpeed record_crypto_speed();

// What the engine did, over the process's life.
struct EngineCryptoTotals {
  uint64_t calls = 0;  // timed spans: one per record
  uint64_t bytes = 0;  // payload bytes encrypted or decrypted
  uint64_t hw_ns = 0;  // their CPU time less the clock's own cost: the hw place's
  uint64_t excluded_ns = 0;  // what the loops did not dilate: hw_ns and the clock reads between
  uint64_t preempted = 0;    // spans longer than a record's crypto can be, charged at the others' rate
};
EngineCryptoTotals engine_crypto_totals();
bool engine_crypto_in_use();  // the engine's library context has been made

// The cost of the model per record: the median time between two
// back-to-back reads of the clock (measured once, when the
// library context is made). Subtracted from each call's time for hw_ns.
uint64_t engine_clock_read_ns();

}  // namespace dpukit::mesh
