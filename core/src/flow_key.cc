#include "dpukit/core/flow_key.h"

#include "dpukit/core/flow_hash.h"

namespace dpukit {

namespace {
void put_be(uint8_t* p, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint64_t get_be(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

FlowKey FlowKey::from_tuple(uint32_t src_ip, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port,
                            uint8_t proto) {
  FlowKey k;
  put_be(&k.bytes[0], src_ip, 4);
  put_be(&k.bytes[4], dst_ip, 4);
  put_be(&k.bytes[8], src_port, 2);
  put_be(&k.bytes[10], dst_port, 2);
  k.bytes[12] = proto;
  return k;
}

uint32_t FlowKey::src_ip() const { return static_cast<uint32_t>(get_be(&bytes[0], 4)); }
uint32_t FlowKey::dst_ip() const { return static_cast<uint32_t>(get_be(&bytes[4], 4)); }
uint16_t FlowKey::src_port() const { return static_cast<uint16_t>(get_be(&bytes[8], 2)); }
uint16_t FlowKey::dst_port() const { return static_cast<uint16_t>(get_be(&bytes[10], 2)); }

std::string FlowKey::str() const {
  auto ip = [](uint32_t a) {
    return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." + std::to_string((a >> 8) & 255) +
           "." + std::to_string(a & 255);
  };
  return ip(src_ip()) + ":" + std::to_string(src_port()) + "->" + ip(dst_ip()) + ":" + std::to_string(dst_port()) +
         "/" + std::to_string(proto());
}

uint64_t flow_hash(const FlowKey& key, uint64_t seed) { return flow_hash64(key, seed); }

}  // namespace dpukit
