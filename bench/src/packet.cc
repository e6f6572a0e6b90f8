#include "packet.h"

#include <stdexcept>
#include <string>

namespace dpukit::bench {

uint32_t ones_complement_sum(std::span<const uint8_t> data, uint32_t initial) {
  uint64_t sum = initial;
  size_t i = 0;
  for (; i + 1 < data.size(); i += 2) sum += static_cast<uint32_t>(data[i] << 8 | data[i + 1]);
  if (i < data.size()) sum += static_cast<uint32_t>(data[i] << 8);  // odd length: pad with a zero byte
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint32_t>(sum);
}

uint16_t inet_checksum(std::span<const uint8_t> data, uint32_t initial) {
  return static_cast<uint16_t>(~ones_complement_sum(data, initial) & 0xFFFF);
}

uint16_t l4_checksum_ipv4(std::span<const uint8_t> ip) {
  const size_t ihl = (ip[0] & 0x0F) * 4u;
  const size_t total = load_be16(&ip[2]);
  const size_t l4_len = total - ihl;
  uint8_t pseudo[12];
  std::copy(&ip[12], &ip[20], pseudo);  // source and destination addresses
  pseudo[8] = 0;
  pseudo[9] = ip[9];
  store_be16(&pseudo[10], static_cast<uint16_t>(l4_len));
  uint32_t s = ones_complement_sum(pseudo);
  uint16_t c = inet_checksum(ip.subspan(ihl, l4_len), s);
  return (ip[9] == kProtoUdp && c == 0) ? 0xFFFF : c;  // UDP sends a computed zero as all ones
}

Bytes make_ipv4_packet(size_t size, uint64_t seed, uint8_t proto) {
  const size_t l4 = proto == kProtoUdp ? kUdpLen : kTcpLen;
  if (size < kEthLen + kIpv4Len + l4 || size - kEthLen > 65535)
    throw std::invalid_argument("a packet of " + std::to_string(size) + " bytes cannot hold Ethernet/IPv4/" +
                                (proto == kProtoUdp ? "UDP" : "TCP") + " headers (" +
                                std::to_string(kEthLen + kIpv4Len + l4) + " bytes) or exceeds 65535 bytes of IP");
  Bytes p(size);
  uint8_t r[32];
  fill_random(r, seed * 0x9E3779B97F4A7C15ull + 17);
  uint8_t* eth = p.data();
  std::copy(r, r + 12, eth);  // destination and source MAC
  eth[0] &= 0xFE;             // unicast
  eth[6] &= 0xFE;
  store_be16(&eth[12], 0x0800);
  uint8_t* ip = eth + kEthLen;
  ip[0] = 0x45;
  ip[1] = 0;
  store_be16(&ip[2], static_cast<uint16_t>(size - kEthLen));
  store_be16(&ip[4], load_be16(&r[12]));  // identification
  store_be16(&ip[6], 0x4000);             // DF, as TCP senders set it
  if (proto == kProtoUdp) store_be16(&ip[6], 0);
  ip[8] = 64;
  ip[9] = proto;
  std::copy(r + 14, r + 22, ip + 12);  // source and destination address
  ip[12] = static_cast<uint8_t>(10 + (ip[12] % 100));  // keep clear of 0/8, multicast and class E
  ip[16] = static_cast<uint8_t>(10 + (ip[16] % 200));
  store_be16(&ip[10], inet_checksum(std::span<const uint8_t>(ip, kIpv4Len)));
  uint8_t* l4h = ip + kIpv4Len;
  std::copy(r + 22, r + 26, l4h);  // ports
  if (proto == kProtoUdp) {
    store_be16(&l4h[4], static_cast<uint16_t>(size - kEthLen - kIpv4Len));
  } else {
    std::copy(r + 26, r + 30, l4h + 4);  // sequence number
    store_be32(&l4h[8], 0);
    l4h[12] = 5 << 4;  // data offset
    l4h[13] = 0x18;    // PSH | ACK
    store_be16(&l4h[14], 65535);
  }
  fill_text(std::span<uint8_t>(l4h + l4, size - kEthLen - kIpv4Len - l4), seed);
  uint16_t c = l4_checksum_ipv4(std::span<const uint8_t>(ip, size - kEthLen));
  store_be16(proto == kProtoUdp ? &l4h[6] : &l4h[16], c);
  return p;
}

}  // namespace dpukit::bench
