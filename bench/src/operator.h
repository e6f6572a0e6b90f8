// The operator interface every backend implements (private to bench).
//
// An operator turns one input (a packet, a message, a block) into an output.
// The runner makes one Kernel per thread, checks each backend's outputs
// against the ref backend's for the same inputs, then times process() calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpukit/bench.h"
#include "dpukit/core/engine.h"

namespace dpukit::bench {

using Bytes = std::vector<uint8_t>;

// A backend that this build or this machine cannot offer, with the reason
// the runner prints ("no regexdev without RXP hardware", ...). Never faked.
struct Unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One operator on one backend, owned by one thread.
// The most units of work one process_burst() call gets.
constexpr size_t kMaxBurst = 32;
// The most units one process_packed() call gets: an application's array of
// work, the size of lpm_perf_autotest's batch of addresses.
constexpr size_t kMaxPacked = 4096;

class Kernel {
 public:
  virtual ~Kernel() = default;
  // One unit of work on `in`; the result replaces the contents of `out`
  // (which is reused from call to call, so a kernel need not allocate).
  virtual void process(std::span<const uint8_t> in, Bytes& out) = 0;
  // in.size() (at most kMaxBurst) units of work, out[i] for in[i]. The
  // runner times bursts when one unit is short, so that its own loop is not
  // what is measured; a kernel overrides this where the library has a burst
  // form that applications use (rte_lpm_lookup_bulk), and must give the
  // same outputs as process().
  virtual void process_burst(std::span<const std::span<const uint8_t>> in, std::span<Bytes> out) {
    for (size_t i = 0; i < in.size(); ++i) process(in[i], out[i]);
  }
  // The fewest units per process_burst() call at which this kernel runs at
  // its speed; the runner's timed bursts are at least this long. A device
  // kernel keeps a burst of operations in flight (a multi-buffer PMD fills
  // its SIMD lanes only so), so one unit per call would time the device
  // at its worst.
  virtual size_t min_burst() const { return 1; }
  // Packed inputs (Operator::packed_inputs): in.size() / unit (at most
  // kMaxPacked) units of `unit` bytes each, end to end; their outputs, end to end, replace the
  // contents of `out`. The runner times this form for such operators; a
  // kernel overrides it where the library takes arrays (rte_lpm_lookup_bulk)
  // and must give the same bytes as process() unit by unit.
  virtual void process_packed(std::span<const uint8_t> in, size_t unit, Bytes& out);
};

class Operator {
 public:
  virtual ~Operator() = default;
  virtual const OperatorInfo& info() const = 0;

  // `count` distinct inputs of `size` bytes, the same for every backend and
  // every run with the same seed. Default: pseudo-random bytes.
  virtual std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const;
  // How many distinct inputs a thread cycles through (LPM wants many
  // addresses so that lookups are not all cache hits). The runner takes
  // fewer where these would pass kInputBudget (inputs_within_budget); an
  // operator throws std::invalid_argument when its parameters ask for inputs
  // that cannot fit.
  virtual size_t input_count(size_t /*size*/) const { return 256; }
  // What the runner makes: input_count, at most kInputBudget bytes of them.
  // Throws std::invalid_argument for a size outside 1 byte to kMaxInputSize.
  size_t inputs_within_budget(size_t size) const;
  // The timed loop reads the inputs packed end to end in one array (as an
  // application holds a list of addresses), through Kernel::process_packed,
  // instead of each from its own buffer (as packets are). The inputs are
  // then all of one size.
  virtual bool packed_inputs() const { return false; }

  // One kernel per thread, all made on the caller's thread before any runs
  // (a backend sets up its shared state, e.g. a route table or a device with
  // one queue pair per thread, here). Throws Unavailable.
  virtual std::vector<std::unique_ptr<Kernel>> make_kernels(Backend backend, size_t size,
                                                            unsigned threads) const = 0;

  // "" when `got` (from the backend under test) is right for `in`, given
  // `ref_out` from the ref backend; otherwise what differs. Default: equal
  // bytes. Compressors decode `got` with the ref decoder; randomized
  // signatures are verified with the ref verifier.
  virtual std::string mismatch(std::span<const uint8_t> in, const Bytes& ref_out, const Bytes& got) const;

  // The BlueField engine that does this operator's work, if a BlueField has
  // one (the engine backend, bench/src/engine_backend.h): its kind, for the
  // PKA the operation's name in EngineSpec::ops_per_s, for bulk crypto the
  // algorithm that must be in EngineSpec::algorithms. The engine's job body
  // is the lib backend's kernel.
  struct EngineWork {
    EngineKind kind;
    std::string operation;  // the PKA: "rsa2048_sign", ...
    std::string algorithm;  // bulk crypto: "AES-GCM", ...
  };
  virtual std::optional<EngineWork> engine_work() const { return std::nullopt; }

  // Bytes one unit of work counts for Gbps (default: the input size).
  virtual size_t work_bytes(size_t size) const { return size; }

  // Parameters (route table size, MSS, key size...): the keys an operator
  // knows and their defaults. `--param op.key=value` sets one for a run; the
  // values in force are recorded with the results.
  virtual std::map<std::string, std::string> default_params() const { return {}; }
  // Throws std::invalid_argument naming the operator and the known keys.
  void set_param(const std::string& key, const std::string& value);
  void reset_params() { params_.clear(); }
  std::string param(const std::string& key) const;  // the value in force (set or default)
  uint64_t param_u64(const std::string& key) const;  // ... as a number; throws std::invalid_argument
  nlohmann::json parameters() const;                 // every key with the value in force

 private:
  std::map<std::string, std::string> params_;
};

// The operator families register here (one function per source file, so
// that a static library cannot drop them).
using Registry = std::vector<std::unique_ptr<Operator>>;
void register_network_ops(Registry& r);   // ops/network.cc: lpm, checksum, crc, toeplitz
void register_segmentation_ops(Registry& r);  // ops/segmentation.cc: tcp_seg, ip_frag
void register_storage_ops(Registry& r);   // ops/storage.cc: lz77, huffman, snappy, compress, decompress, crc32c
void register_security_ops(Registry& r);  // ops/security.cc: aes, aes_cbc, md5, sha1, sha256
void register_pubkey_ops(Registry& r);    // ops/pubkey.cc: rsa, dsa, ecdsa
void register_regex_ops(Registry& r);     // ops/regex.cc: rxp_match
void register_copy_ops(Registry& r);      // ops/copy.cc: memcpy
void register_programs(Registry& r);      // ops/programs.cc: the composed programs of Table 5

// Runs the ref kernel and `kernels` over the inputs (the first kernel on up
// to 512 of them, at least 16, stopping after about a second; exactly 16
// with fixed_count; every kernel on the first 8) and throws CheckFailed naming
// the operator, backend, size and input at the first wrong output. Returns
// how many inputs were checked (0 for the ref backend itself).
size_t check_against_ref(const Operator& op, Backend backend, size_t size, const std::vector<Bytes>& inputs,
                         std::vector<std::unique_ptr<Kernel>>& kernels, bool fixed_count = false);

Registry& registry();
Operator& find_operator(const std::string& name);  // throws std::invalid_argument

// Throws std::invalid_argument naming `size` unless it is 1 byte to
// kMaxInputSize.
void check_input_size(size_t size);
// "N bytes (x MiB)" for the messages that refuse sizes and input counts.
std::string bytes_text(uint64_t bytes);

// What the timed loops fold each output into (a sink the compiler cannot
// drop): its size and end bytes, cheap against any unit of work.
inline uint64_t digest(const Bytes& out) {
  uint64_t v = out.size();
  if (!out.empty()) v ^= static_cast<uint64_t>(out.front()) << 8 ^ static_cast<uint64_t>(out.back()) << 16;
  return v;
}

// Helpers shared by the operator families.
std::string hex(std::span<const uint8_t> bytes, size_t max = 64);  // for mismatch reports
std::string describe_difference(const Bytes& want, const Bytes& got);  // first differing offset, lengths
// Fills with a reproducible stream (splitmix64) — the default input data.
void fill_random(std::span<uint8_t> out, uint64_t seed);
// Text-like bytes (words from a fixed vocabulary, Zipf-skewed) — the
// compressible payload the storage operators and regex rules work on.
void fill_text(std::span<uint8_t> out, uint64_t seed);

// Makes `threads` kernels of type K from the same constructor arguments.
template <class K, class... Args>
std::vector<std::unique_ptr<Kernel>> kernels_of(unsigned threads, const Args&... args) {
  std::vector<std::unique_ptr<Kernel>> v;
  for (unsigned i = 0; i < threads; ++i) v.push_back(std::make_unique<K>(args...));
  return v;
}

}  // namespace dpukit::bench
