// The 13-byte IPv4 5-tuple that the hardware flow table matches on and that
// every measurement structure keys by.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

namespace dpukit {

struct FlowKey {
  // src_ip(4) dst_ip(4) src_port(2) dst_port(2) proto(1), all in network
  // byte order: the bytes as they stand in the packet headers.
  std::array<uint8_t, 13> bytes{};

  static FlowKey from_tuple(uint32_t src_ip, uint32_t dst_ip, uint16_t src_port,
                            uint16_t dst_port, uint8_t proto);  // host-order args
  uint32_t src_ip() const;
  uint32_t dst_ip() const;
  uint16_t src_port() const;
  uint16_t dst_port() const;
  uint8_t proto() const { return bytes[12]; }
  std::string str() const;  // "10.0.0.1:53->10.0.0.2:1234/17"

  // The key as two words for tables that compare keys a word at a time:
  // bytes 0-7, and bytes 8-12 in the low 40 bits of `hi` (its top 24 bits
  // are 0, free for the table's own flags). Built in registers: assembling
  // the 5-byte tail in memory and reading it back whole is a
  // store-forwarding stall on every lookup.
  void to_words(uint64_t& lo, uint64_t& hi) const {
    uint32_t mid;
    std::memcpy(&lo, bytes.data(), 8);
    std::memcpy(&mid, bytes.data() + 8, 4);
    hi = uint64_t(mid) | (uint64_t(bytes[12]) << 32);
  }

  friend bool operator==(const FlowKey&, const FlowKey&) = default;
};

// XXH3 over the 13 bytes, seeded. For per-packet use in many rows, the
// inline one-call hashes of flow_hash.h (flow_hash128).
uint64_t flow_hash(const FlowKey& key, uint64_t seed = 0);

struct FlowKeyHash {
  size_t operator()(const FlowKey& k) const { return flow_hash(k); }
};

}  // namespace dpukit
