#include "keyval.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dpukit/core/random.h"

namespace dpukit::kv::bench {

namespace {

constexpr uint32_t kMagic = 0x31564b44;  // "DKV1" little-endian
// Added before hashing so record 0 does not map to key 0 (mix64(0) == 0).
constexpr uint64_t kKeySalt = 0x6b76626e6368ull;

void put32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t filler_seed(uint64_t record, uint64_t generation, uint64_t seed) {
  return mix64(record ^ mix64(generation ^ mix64(seed + 0x9e3779b97f4a7c15ull)));
}

// The filler is produced 8 bytes at a time; a tail shorter than 8 takes the
// low bytes of one more draw.
void fill_bytes(char* p, size_t n, uint64_t s) {
  SplitMix64 rng(s);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) put64(p + i, rng.next());
  if (i < n) {
    uint64_t last = rng.next();
    std::memcpy(p + i, &last, n - i);
  }
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

const char* phase_name(uint8_t phase) {
  switch (static_cast<Phase>(phase)) {
    case Phase::kFill: return "fill";
    case Phase::kOverwrite: return "overwrite";
    case Phase::kLoad: return "ycsb-load";
    case Phase::kRunInsert: return "ycsb-insert";
    case Phase::kRunUpdate: return "ycsb-update";
  }
  return "unknown";
}

void key_of(uint64_t record, char out[kKeySize]) {
  static const char* digits = "0123456789abcdef";
  uint64_t h = mix64(record + kKeySalt);
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = digits[h & 15];
}

std::string key_of(uint64_t record) {
  std::string k(kKeySize, '\0');
  key_of(record, k.data());
  return k;
}

void make_value(uint64_t record, uint64_t generation, uint64_t seed, size_t size, std::string& out) {
  out.resize(size);
  char* p = out.data();
  put32(p, kMagic);
  put32(p + 4, static_cast<uint32_t>(size));
  put64(p + 8, record);
  put64(p + 16, generation);
  put64(p + 24, seed);
  fill_bytes(p + kValueHeaderSize, size - kValueHeaderSize, filler_seed(record, generation, seed));
}

std::optional<ValueInfo> check_value(std::string_view key, std::string_view value, std::string& why) {
  if (value.size() < kValueHeaderSize) {
    why = "value of " + std::to_string(value.size()) + " bytes is shorter than the " +
          std::to_string(kValueHeaderSize) + "-byte header (not written by dpukit-kvbench)";
    return std::nullopt;
  }
  const char* p = value.data();
  if (get32(p) != kMagic) {
    why = "bad magic " + hex64(get32(p)) + " (not written by dpukit-kvbench)";
    return std::nullopt;
  }
  ValueInfo info{get64(p + 8), get64(p + 16), get64(p + 24)};
  if (get32(p + 4) != value.size()) {
    why = "header says " + std::to_string(get32(p + 4)) + " bytes, value has " + std::to_string(value.size());
    return std::nullopt;
  }
  char expect_key[kKeySize];
  key_of(info.record, expect_key);
  if (key.size() != kKeySize || std::memcmp(expect_key, key.data(), kKeySize) != 0) {
    why = "value belongs to record " + std::to_string(info.record) + " (key " + std::string(expect_key, kKeySize) +
          "), not to this key";
    return std::nullopt;
  }
  // Regenerate the filler word by word and compare as we go (no copy of the value).
  SplitMix64 rng(filler_seed(info.record, info.generation, info.seed));
  size_t n = value.size() - kValueHeaderSize;
  const char* f = p + kValueHeaderSize;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = rng.next();
    size_t len = std::min<size_t>(8, n - i);
    if (std::memcmp(f + i, &w, len) != 0) {
      size_t at = i;
      while (at < i + len && f[at] == reinterpret_cast<const char*>(&w)[at - i]) ++at;
      why = "filler differs at value byte " + std::to_string(kValueHeaderSize + at) + " (record " +
            std::to_string(info.record) + ", generation " + hex64(info.generation) + " from " +
            phase_name(Gen::phase(info.generation)) + ", seed " + std::to_string(info.seed) + ")";
      return std::nullopt;
    }
  }
  return info;
}

}  // namespace dpukit::kv::bench
