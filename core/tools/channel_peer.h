// The two ends of the channel's integrity test and benchmark: the host sends
// numbered messages whose payload is a function of their number; the dpu side
// checks order and content and answers each with a checksum, which the host
// checks in turn. Shared by dpukit-core and the core tests.
#pragma once

#include <cstdint>
#include <span>

#include "dpukit/core/channel.h"

namespace dpukit::peer {

constexpr uint32_t kOpData = 1;

// Payload length of message `seq`: `size`, or when `vary`, between 1 and `size`.
size_t payload_len(uint64_t seq, size_t size, bool vary);
void fill_payload(uint64_t seq, std::span<uint8_t> out);
uint64_t checksum(std::span<const uint8_t> payload);

struct Totals {
  uint64_t messages = 0;
  uint64_t payload_bytes = 0;
};

// Receives until the host closes the channel. Throws std::runtime_error on a
// message out of order or (with verify) a payload that differs from what the
// host must have sent; ChannelError if the host dies.
Totals run_dpu(ChannelDpu& ch, bool verify);

// Sends `messages` messages, reaping completions as it goes, and checks that
// every completion comes back in order with the right checksum (with verify)
// or length. Closes the channel at the end.
Totals run_host(ChannelHost& ch, uint64_t messages, size_t size, bool vary, bool verify);

}  // namespace dpukit::peer
