// Packets the network operators work on: Ethernet II + IPv4 (no options) +
// TCP (no options) or UDP + payload, with valid IPv4 and L4 checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "operator.h"

namespace dpukit::bench {

constexpr size_t kEthLen = 14, kIpv4Len = 20, kTcpLen = 20, kUdpLen = 8;
constexpr uint8_t kProtoTcp = 6, kProtoUdp = 17;

// A packet of exactly `size` bytes (throws std::invalid_argument when `size`
// cannot hold the headers): addresses, ports, IP id and TCP sequence drawn
// from `seed`, a text payload, checksums filled in.
Bytes make_ipv4_packet(size_t size, uint64_t seed, uint8_t proto = kProtoTcp);

// RFC 1071 one's-complement sum, folded to 16 bits, not complemented;
// `initial` carries a partial sum (e.g. the pseudo-header's).
uint32_t ones_complement_sum(std::span<const uint8_t> data, uint32_t initial = 0);
// The Internet checksum of `data` (the complement of the folded sum), in
// host order: store it big-endian.
uint16_t inet_checksum(std::span<const uint8_t> data, uint32_t initial = 0);
// The TCP/UDP checksum over the IPv4 pseudo-header and the L4 segment
// (`ip` points at the IPv4 header, whose total length bounds the segment).
uint16_t l4_checksum_ipv4(std::span<const uint8_t> ip_packet);

inline uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t load_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline void store_be16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void store_be32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

}  // namespace dpukit::bench
