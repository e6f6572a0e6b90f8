// Receive-side scaling as a NIC does it: the Toeplitz hash over the IPv4
// 5-tuple with the standard 40-byte key, and a 128-entry redirection table
// that spreads hash values over the dpu workers' queues.
#pragma once

#include <array>
#include <cstdint>

#include "dpukit/core/flow_key.h"

namespace dpukit::measure {

// The key from Microsoft's RSS documentation, which most NIC drivers use by default.
extern const std::array<uint8_t, 40> kStandardRssKey;

class Toeplitz {
 public:
  explicit Toeplitz(const std::array<uint8_t, 40>& key = kStandardRssKey);
  // Over any input of up to 36 bytes, as the RSS specification defines it.
  uint32_t hash(const uint8_t* input, size_t len) const;
  // IPv4 + TCP/UDP: source address, destination address, source port,
  // destination port, in packet byte order (the protocol is not hashed).
  uint32_t hash_l4(const FlowKey& key) const;
  uint32_t hash_l3(const FlowKey& key) const;  // addresses only

 private:
  // table_[i][v]: the contribution of byte value v at input position i.
  std::array<std::array<uint32_t, 256>, 36> table_;
};

// The 128-entry indirection table filled round-robin with queue numbers.
class RssQueues {
 public:
  explicit RssQueues(unsigned queues, const Toeplitz& toeplitz = Toeplitz());
  unsigned queue(const FlowKey& key) const { return reta_[toeplitz_.hash_l4(key) & 127]; }
  unsigned queues() const { return queues_; }

 private:
  Toeplitz toeplitz_;
  unsigned queues_;
  std::array<uint8_t, 128> reta_{};
};

}  // namespace dpukit::measure
