// Keys and values of dpukit-kvbench.
//
// Key: record number r -> 16 lowercase hex digits of mix64(r + salt). mix64 is
// a bijection, so distinct records never share a key, and consecutive records
// land at scattered places in the key space (YCSB's "hashed" insert order).
//
// Value: a 32-byte header then a deterministic filler, so that `verify` can
// tell, for every stored value, whether it is exactly what the generator wrote
// for that key and that write:
//
//   0  u32 magic "DKV1"        16  u64 generation (which write: see Gen)
//   4  u32 value length        24  u64 seed of the writing run
//   8  u64 record number       32  filler: SplitMix64(filler_seed(record, generation, seed))
//
// A value written by anything else (wrong magic, wrong record for its key,
// wrong length, wrong filler) is reported as a mismatch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dpukit::kv::bench {

inline constexpr size_t kKeySize = 16;
inline constexpr size_t kValueHeaderSize = 32;

// Who wrote a value. Packed into the generation so verify can say which
// phase last wrote a key: phase in the top byte; for updates, the client
// thread and that thread's operation index below it.
enum class Phase : uint8_t { kFill = 1, kOverwrite = 2, kLoad = 3, kRunInsert = 4, kRunUpdate = 5 };
const char* phase_name(uint8_t phase);  // "fill", ..., or "unknown"

struct Gen {
  static uint64_t insert(Phase p) { return uint64_t(p) << 56; }
  static uint64_t update(Phase p, uint32_t thread, uint64_t op) {
    return (uint64_t(p) << 56) | (uint64_t(thread & 0xfff) << 44) | (op & ((uint64_t(1) << 44) - 1));
  }
  static uint8_t phase(uint64_t gen) { return uint8_t(gen >> 56); }
};

std::string key_of(uint64_t record);
void key_of(uint64_t record, char out[kKeySize]);

// Writes the value of (record, generation, seed) of `size` bytes into `out`
// (resized). size must be >= kValueHeaderSize.
void make_value(uint64_t record, uint64_t generation, uint64_t seed, size_t size, std::string& out);

struct ValueInfo {
  uint64_t record, generation, seed;
};
// Checks that `value` is exactly what make_value wrote for `key`. Returns the
// header on success; otherwise sets `why` to a one-line reason.
std::optional<ValueInfo> check_value(std::string_view key, std::string_view value, std::string& why);

}  // namespace dpukit::kv::bench
