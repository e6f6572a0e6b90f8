#include "rss.h"

#include <stdexcept>

namespace dpukit::measure {

const std::array<uint8_t, 40> kStandardRssKey = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

Toeplitz::Toeplitz(const std::array<uint8_t, 40>& key) {
  // For input bit b (counted from the left), the 32-bit window of the key
  // starting at bit b is XORed into the result when the bit is set.
  auto window = [&](size_t bit) {
    uint32_t w = 0;
    for (size_t k = 0; k < 32; ++k) {
      size_t kb = bit + k;
      uint32_t v = (key[kb / 8] >> (7 - kb % 8)) & 1;
      w = (w << 1) | v;
    }
    return w;
  };
  for (size_t i = 0; i < table_.size(); ++i)
    for (unsigned v = 0; v < 256; ++v) {
      uint32_t h = 0;
      for (unsigned b = 0; b < 8; ++b)
        if (v & (0x80u >> b)) h ^= window(i * 8 + b);
      table_[i][v] = h;
    }
}

uint32_t Toeplitz::hash(const uint8_t* input, size_t len) const {
  if (len > table_.size()) throw std::invalid_argument("toeplitz: input longer than 36 bytes");
  uint32_t h = 0;
  for (size_t i = 0; i < len; ++i) h ^= table_[i][input[i]];
  return h;
}

uint32_t Toeplitz::hash_l4(const FlowKey& key) const { return hash(key.bytes.data(), 12); }
uint32_t Toeplitz::hash_l3(const FlowKey& key) const { return hash(key.bytes.data(), 8); }

RssQueues::RssQueues(unsigned queues, const Toeplitz& toeplitz) : toeplitz_(toeplitz), queues_(queues) {
  if (queues == 0 || queues > 128) throw std::invalid_argument("rss: between 1 and 128 queues");
  for (unsigned i = 0; i < reta_.size(); ++i) reta_[i] = static_cast<uint8_t>(i % queues);
}

}  // namespace dpukit::measure
