// The BlueField engines' figures, per generation, each with its source
// (docs/core.md, "The engines", gives the table and the reasoning). A figure
// no public source gives is a named guess: its source starts with "guess".
// None is derived from DPUBench's Fig. 12 (RXPMatch and Compress 1.5-2x the
// Intel CPU): that ratio is what the model is checked against.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dpukit/core/engine.h"

namespace dpukit {

namespace {

constexpr const char* kGenerations[] = {"bluefield2", "bluefield3"};
constexpr const char* kKnownGenerations = "bluefield2, bluefield3";

// ---- Sources quoted by more than one figure --------------------------------

// Queue depths: the queue a DPDK test application of the same mlx5 driver
// sets up (DOCA's own task-pool limits are device queries, not documented
// numbers).
constexpr const char* kRegexQueueSource =
    "DPDK app/test-regex/main.c: each mlx5 regexdev queue pair is set up with nb_desc = 1024";
constexpr const char* kCompressQueueSource =
    "DPDK app/test-compress-perf: queue pairs set up for NUM_MAX_INFLIGHT_OPS = 512 operations in flight";
constexpr const char* kCryptoQueueSource =
    "DPDK app/test-crypto-perf: default nb_descriptors = 2048 per queue pair (cperf_options_default)";
constexpr const char* kPkaQueueSource =
    "Mellanox/pka engine/helper/pka_helper.h: the BlueField PKA OpenSSL engine sizes its command and result "
    "queues for PKA_MAX_OBJS = 32 operations";
constexpr const char* kPkaParallelSource =
    "Mellanox/pka engine/helper/pka_helper.h: the BlueField PKA OpenSSL engine opens PKA_ENGINE_RING_CNT = 4 "
    "hardware rings (4 on BlueField-2, PKA_ENGINE_RING_CNT_BF3_MB/_HB = 4 on both BlueField-3 bins), each "
    "served by one EIP-154 block; the card has more blocks (8 on BlueField-2: /dev/pka/0-31, 16 or 24 on "
    "BlueField-3: /dev/pka/0-63 or 0-95), which a single process does not use";
// Every mlx5 work-queue engine (RXP, the GGA deflate engines, the crypto
// engine) is driven the same way: a WQE written to host or Arm memory, a
// doorbell, the engine fetching the WQE and data by DMA, a CQE written back.
constexpr const char* kWqeLatencyGuess =
    "guess: 5 us, one round trip of an mlx5 work queue (doorbell, WQE and data fetched by DMA, CQE written "
    "back); no public per-job latency for BlueField's engines was found";
constexpr const char* kPkaLatencyGuess =
    "guess: 2 us, a command written into the PKA ring's window RAM by MMIO and its result polled there (no DMA, "
    "no doorbell round trip); no public per-job latency was found";
constexpr const char* kOneUnitGuess =
    "guess: 1, no public source gives the number of units; one unit at the whole engine's rate";

// ---- The PKA: operations per second ------------------------------------------
//
// No public rate exists for BlueField's PKA (EIP-154 blocks). One figure is
// guessed, 1,000 RSA-2048 CRT signatures per second per ring, and every
// operation is scaled from it by its cost in 2048-bit modular
// multiplications (a b-bit multiplication costs (b/2048)^2 of one):
//   RSA-n sign, CRT, sliding window: 2 exponentiations of n/2 bits at ~1.2
//     multiplications per exponent bit, each of n/2 bits: 1.2 n (n/4096)^2
//   RSA-n verify, e = 65537: 17 multiplications of n bits
//   DSA-2048 sign: one 256-bit exponent mod a 2048-bit p: 1.2 x 256
//   DSA-2048 verify: two such exponentiations
//   EC scalar multiplication over a b-bit prime field, double-and-add in
//     Jacobian coordinates (8 multiplications a doubling, 11 an addition,
//     b doublings, b/2 additions): 13.5 b (b/2048)^2
//   ECDSA sign, ECDH: one scalar multiplication; ECDSA verify: two
//   X25519: Montgomery ladder, 255 steps of ~10 multiplications of 255 bits
//   DH-2048: one 2048-bit exponent mod a 2048-bit p: 1.2 x 2048
constexpr double kPkaRsa2048SignsPerRing = 1000.0;
constexpr double kPkaRings = 4.0;

double rsa_sign_cost(double n) { return 1.2 * n * (n / 4096.0) * (n / 4096.0); }
double rsa_verify_cost(double n) { return 17.0 * (n / 2048.0) * (n / 2048.0); }
double ec_mult_cost(double b) { return 13.5 * b * (b / 2048.0) * (b / 2048.0); }

std::vector<std::pair<std::string, EngineFigure>> pka_ops() {
  const std::vector<std::pair<std::string, double>> costs = {
      {"rsa2048_sign", rsa_sign_cost(2048)},     {"rsa2048_verify", rsa_verify_cost(2048)},
      {"rsa3072_sign", rsa_sign_cost(3072)},     {"rsa3072_verify", rsa_verify_cost(3072)},
      {"rsa4096_sign", rsa_sign_cost(4096)},     {"rsa4096_verify", rsa_verify_cost(4096)},
      {"dsa2048_sign", 1.2 * 256},               {"dsa2048_verify", 2 * 1.2 * 256},
      {"ecdsa_p256_sign", ec_mult_cost(256)},    {"ecdsa_p256_verify", 2 * ec_mult_cost(256)},
      {"ecdsa_p384_sign", ec_mult_cost(384)},    {"ecdsa_p384_verify", 2 * ec_mult_cost(384)},
      {"ecdh_p256", ec_mult_cost(256)},          {"ecdh_p384", ec_mult_cost(384)},
      {"x25519", 255 * 10.0 * (255 / 2048.0) * (255 / 2048.0)},
      {"dh2048", 1.2 * 2048},
  };
  const double engine_mults_per_s = kPkaRsa2048SignsPerRing * kPkaRings * rsa_sign_cost(2048);
  std::vector<std::pair<std::string, EngineFigure>> ops;
  for (const auto& [name, cost] : costs) {
    char why[320];
    std::snprintf(why, sizeof why,
                  "guess: 1,000 RSA-2048 CRT signatures/s per ring x 4 rings (no public BlueField PKA rate), scaled "
                  "by this operation's cost of %.1f 2048-bit modular multiplications against RSA-2048 sign's %.1f "
                  "(docs/core.md, The engines)",
                  cost, rsa_sign_cost(2048));
    ops.push_back({name, EngineFigure{engine_mults_per_s / cost, why}});
  }
  return ops;
}

// ---- The table ----------------------------------------------------------------

EngineFigure fig(double value, std::string source) { return EngineFigure{value, std::move(source)}; }

// The PKA, the same on both generations as far as the sources tell.
EngineSpec pka(const char* generation) {
  EngineSpec e;
  e.generation = generation;
  e.kind = EngineKind::kPublicKey;
  e.name = "PKA (EIP-154)";
  e.algorithms = {"RSA", "DSA", "ECDSA", "ECDH", "DH", "X25519"};
  e.ops_per_s = pka_ops();
  e.latency_ns = fig(2000, kPkaLatencyGuess);
  e.queue_depth = fig(32, kPkaQueueSource);
  e.parallel = fig(kPkaRings, kPkaParallelSource);
  return e;
}

std::vector<EngineSpec> make_specs() {
  std::vector<EngineSpec> s;

  // -- BlueField-2 --------------------------------------------------------------
  {
    EngineSpec e;
    e.generation = "bluefield2";
    e.kind = EngineKind::kRegex;
    e.name = "RXP";
    e.bytes_per_s = fig(51e9 / 8,
                        "51 Gb/s: Sismis, Evrard, Riviere and Barbette, 'PAMO: Pattern Matching Offload for "
                        "Intrusion Detection Systems' (Middleware 2025) benchmark the BlueField-2 RXP at 51 Gb/s "
                        "'with big packets and not too many rules' (the Emerging Threats ruleset), as their summary "
                        "at perso.uclouvain.be/tom.barbette/pamo-at-middleware25 states; less with small packets or "
                        "more rules, which the model does not follow");
    e.latency_ns = fig(5000, kWqeLatencyGuess);
    e.queue_depth = fig(1024, kRegexQueueSource);
    e.parallel = fig(2, "DPDK drivers/regex/mlx5/mlx5_rxp.h: MLX5_RXP_MAX_ENGINES 2u, 'Number of RXP engines' "
                        "(the PMD programs the rules into each)");
    s.push_back(e);
  }
  {
    EngineSpec e;
    e.generation = "bluefield2";
    e.kind = EngineKind::kCompress;
    e.name = "deflate engine (GGA)";
    e.algorithms = {"deflate"};
    e.bytes_per_s = fig(2.5e9,
                        "guess: 2.5 GB/s of input; no public rate was found. Li et al. (HOTI'23, 'Characterizing "
                        "Lossy and Lossless Compression on Emerging BlueField DPU Architectures') measure the "
                        "C-engine at up to 26.8x one BlueField-2 Arm core's software DEFLATE; 26.8 x ~100 MB/s "
                        "(a guessed fast-level DEFLATE rate of one Cortex-A72 at 2.75 GHz) is ~2.7 GB/s");
    e.latency_ns = fig(5000, kWqeLatencyGuess);
    e.queue_depth = fig(512, kCompressQueueSource);
    e.parallel = fig(1, kOneUnitGuess);
    s.push_back(e);
  }
  {
    EngineSpec e;
    e.generation = "bluefield2";
    e.kind = EngineKind::kDecompress;
    e.name = "inflate engine (GGA)";
    e.algorithms = {"deflate"};
    e.bytes_per_s = fig(5e9,
                        "guess: 5 GB/s of output, twice the compress engine's guessed rate: inflating does no "
                        "match search; no public rate was found");
    e.latency_ns = fig(5000, kWqeLatencyGuess);
    e.queue_depth = fig(512, kCompressQueueSource);
    e.parallel = fig(1, kOneUnitGuess);
    s.push_back(e);
  }
  {
    EngineSpec e;
    e.generation = "bluefield2";
    e.kind = EngineKind::kBulkCrypto;
    e.name = "crypto engine";
    // Look-aside: AES-XTS only (DPDK mlx5 crypto: 'AES-GCM is supported only
    // on BlueField-3'). AES-GCM runs inline, on packets the NIC sends or
    // receives (IPsec crypto offload; kTLS offload, 'BlueField-2 crypto
    // devices onwards'), never on a buffer. MACsec offload is 'ConnectX-7
    // onwards', so BlueField-3 only.
    e.algorithms = {"AES-XTS", "inline:IPsec-AES-GCM", "inline:TLS-AES-GCM"};
    e.bytes_per_s = fig(100e9 / 8,
                        "100 Gb/s: NVIDIA's IPsec crypto offload guide (DOCA 2.9) and IPsec Security Gateway guide "
                        "(DOCA 2.0.2) describe BlueField-2 without caveat below 100 Gb/s and warn of 'a potential "
                        "bandwidth limitation' at 100 Gb/s or more of IPsec traffic; the card's 100 GbE port rate. "
                        "Published measurement: Diamond et al. (ICCWS 2022) reach ~16 Gb/s over an IPsec tunnel "
                        "on InfiniBand, not engine-bound");
    e.latency_ns = fig(5000, kWqeLatencyGuess);
    e.queue_depth = fig(2048, kCryptoQueueSource);
    e.parallel = fig(1, kOneUnitGuess);
    s.push_back(e);
  }
  s.push_back(pka("bluefield2"));

  // -- BlueField-3 --------------------------------------------------------------
  // No RXP and no deflate compressor (see kUnavailable).
  {
    EngineSpec e;
    e.generation = "bluefield3";
    e.kind = EngineKind::kDecompress;
    e.name = "inflate engine (GGA)";
    e.algorithms = {"deflate", "lz4"};  // DOCA Compress: 'Decompress operation using the LZ4 algorithm'
    e.bytes_per_s = fig(5e9,
                        "guess: 5 GB/s of output, BlueField-2's guessed rate (no public rate for either; Li et al., "
                        "IEEE Micro 2024, compare both generations' C-engines but no figure was available to us)");
    e.latency_ns = fig(5000, kWqeLatencyGuess);
    e.queue_depth = fig(512, kCompressQueueSource);
    e.parallel = fig(1, kOneUnitGuess);
    s.push_back(e);
  }
  {
    EngineSpec e;
    e.generation = "bluefield3";
    e.kind = EngineKind::kBulkCrypto;
    e.name = "crypto engine";
    e.algorithms = {"AES-XTS", "AES-GCM", "inline:IPsec-AES-GCM", "inline:TLS-AES-GCM", "inline:MACsec-AES-GCM"};
    e.bytes_per_s = fig(400e9 / 8,
                        "400 Gb/s: NVIDIA's line-rate claim for BlueField-3 encryption at the IP, transport and MAC "
                        "layers (2021 China DPU industry white paper, as summarised at besthub.dev; the datasheet "
                        "claim Amodo's 'The quest for 400G IPsec' starts from). Published measurement: 193 Gb/s of "
                        "IPsec with strongSwan between two BlueField-3s (blog.amododesign.com, limited by their "
                        "setup, not shown to be the engine)");
    e.latency_ns = fig(5000, kWqeLatencyGuess);
    e.queue_depth = fig(2048, kCryptoQueueSource);
    e.parallel = fig(1, kOneUnitGuess);
    s.push_back(e);
  }
  // The same blocks and library as BlueField-2, more of them (unused by one process).
  s.push_back(pka("bluefield3"));
  return s;
}

// Engines a generation does not have, and the sources that say so.
struct Unavailable {
  const char* generation;
  EngineKind kind;
  const char* why;
};
constexpr Unavailable kUnavailable[] = {
    {"bluefield3", EngineKind::kRegex,
     "no supported RXP: DOCA's RegEx library, the API DPUBench's RXPMatch used (DOCA 1.2.1), got 'no updates' "
     "in DOCA 2.2 and has no guide in DOCA 2.5-3.2; the DPDK mlx5 regex PMD lists BlueField-3 but says "
     "'Official support is not yet released' (docs/core.md, The engines)"},
    {"bluefield3", EngineKind::kCompress,
     "DOCA Compress supports only decompression (deflate, LZ4) on BlueField-3, and the DPDK mlx5 compress PMD "
     "says 'Compress operation is not supported by BlueField-3'"},
};

const std::vector<EngineSpec>& table() {
  static const std::vector<EngineSpec> specs = make_specs();
  return specs;
}

nlohmann::json figure_json(const EngineFigure& f) {
  return {{"value", f.value}, {"source", f.source}, {"guess", f.guess()}};
}

bool known_generation(const std::string& g) {
  return std::find(std::begin(kGenerations), std::end(kGenerations), g) != std::end(kGenerations);
}

}  // namespace

const char* engine_kind_name(EngineKind k) {
  switch (k) {
    case EngineKind::kRegex: return "regex";
    case EngineKind::kCompress: return "compress";
    case EngineKind::kDecompress: return "decompress";
    case EngineKind::kBulkCrypto: return "crypto";
    case EngineKind::kPublicKey: return "pka";
  }
  return "unknown";
}

EngineKind parse_engine_kind(const std::string& s) {
  for (EngineKind k : {EngineKind::kRegex, EngineKind::kCompress, EngineKind::kDecompress, EngineKind::kBulkCrypto,
                       EngineKind::kPublicKey})
    if (s == engine_kind_name(k)) return k;
  throw std::invalid_argument("unknown engine kind '" + s + "' (regex, compress, decompress, crypto, pka)");
}

nlohmann::json EngineSpec::to_json() const {
  nlohmann::json j = {{"generation", generation},
                      {"kind", engine_kind_name(kind)},
                      {"name", name},
                      {"algorithms", algorithms},
                      {"latency_ns", figure_json(latency_ns)},
                      {"queue_depth", figure_json(queue_depth)},
                      {"parallel", figure_json(parallel)}};
  if (kind == EngineKind::kPublicKey) {
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [op, f] : ops_per_s) ops[op] = figure_json(f);
    j["ops_per_s"] = std::move(ops);
  } else {
    j["bytes_per_s"] = figure_json(bytes_per_s);
  }
  return j;
}

std::span<const EngineSpec> engine_specs() { return table(); }

const EngineSpec& engine_spec(const std::string& generation, EngineKind kind) {
  if (!known_generation(generation))
    throw std::invalid_argument("unknown BlueField generation '" + generation + "': the known ones are " +
                                kKnownGenerations);
  for (const auto& e : table())
    if (e.generation == generation && e.kind == kind) return e;
  for (const auto& u : kUnavailable)
    if (generation == u.generation && kind == u.kind)
      throw EngineUnavailable(generation + " has no " + engine_kind_name(kind) + " engine: " + u.why);
  throw EngineUnavailable(generation + " has no " + engine_kind_name(kind) + " engine");
}

std::string engine_generation(const DpuSpeed& speed) {
  if (known_generation(speed.name)) return speed.name;
  throw std::invalid_argument(std::string("engines exist only on a named BlueField generation (") +
                              kKnownGenerations + "); --dpu-speed " + speed.name + " names none");
}

}  // namespace dpukit
