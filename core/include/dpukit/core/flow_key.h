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

  friend bool operator==(const FlowKey&, const FlowKey&) = default;
};

// XXH3 over the 13 bytes; seeded so that independent rows use independent hashes.
uint64_t flow_hash(const FlowKey& key, uint64_t seed = 0);

struct FlowKeyHash {
  size_t operator()(const FlowKey& k) const { return flow_hash(k); }
};

}  // namespace dpukit
