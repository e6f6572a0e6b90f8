#include "channel_peer.h"

#include "dpukit/core/random.h"

#include <xxhash.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace dpukit::peer {


size_t payload_len(uint64_t seq, size_t size, bool vary) {
  if (!vary || size <= 1) return size;
  return 1 + SplitMix64(seq ^ 0x5eed).next() % size;
}

void fill_payload(uint64_t seq, std::span<uint8_t> out) {
  SplitMix64 rng(seq);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    uint64_t v = rng.next();
    std::memcpy(out.data() + i, &v, 8);
  }
  if (i < out.size()) {
    uint64_t v = rng.next();
    std::memcpy(out.data() + i, &v, out.size() - i);
  }
}

uint64_t checksum(std::span<const uint8_t> payload) { return XXH3_64bits(payload.data(), payload.size()); }

Totals run_dpu(ChannelDpu& ch, bool verify) {
  Totals t;
  std::vector<ChannelDpu::Message> msgs;
  std::vector<ChannelCompletion> done;
  std::vector<uint8_t> expected;
  while (true) {
    size_t n = ch.receive(msgs, 256, std::chrono::milliseconds(1000));
    if (n == 0) {
      if (ch.closed()) break;
      continue;
    }
    done.clear();
    for (const auto& m : msgs) {
      if (m.request.id != t.messages)
        throw std::runtime_error("message out of order: expected #" + std::to_string(t.messages) + ", got #" +
                                 std::to_string(m.request.id));
      uint64_t result = m.payload.size();
      if (verify) {
        expected.resize(m.payload.size());
        fill_payload(m.request.id, expected);
        if (std::memcmp(expected.data(), m.payload.data(), expected.size()) != 0)
          throw std::runtime_error("payload of message #" + std::to_string(m.request.id) + " is corrupt");
        result = checksum(m.payload);
      }
      done.push_back({m.request.id, static_cast<int64_t>(result), m.request.op, 0, m.payload.size()});
      ++t.messages;
      t.payload_bytes += m.payload.size();
    }
    ch.complete(done);
  }
  return t;
}

Totals run_host(ChannelHost& ch, uint64_t messages, size_t size, bool vary, bool verify) {
  Totals t;
  std::vector<uint8_t> buf(size), expected(size);
  ChannelCompletion comp[256];
  uint64_t next_completion = 0;
  auto check = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const ChannelCompletion& c = comp[i];
      if (c.id != next_completion)
        throw std::runtime_error("completion out of order: expected #" + std::to_string(next_completion) + ", got #" +
                                 std::to_string(c.id));
      size_t len = payload_len(c.id, size, vary);
      int64_t want;
      if (verify) {
        fill_payload(c.id, std::span(expected.data(), len));
        want = static_cast<int64_t>(checksum(std::span<const uint8_t>(expected.data(), len)));
      } else {
        want = static_cast<int64_t>(len);
      }
      if (c.status != 0 || c.result != want)
        throw std::runtime_error("completion of message #" + std::to_string(c.id) + " does not match what was sent");
      ++next_completion;
    }
  };
  size_t len = 0;
  bool filled = false;
  for (uint64_t seq = 0; seq < messages;) {
    if (!filled) {
      len = payload_len(seq, size, vary);
      if (verify || seq == 0) fill_payload(seq, std::span(buf.data(), len));
      filled = true;
    }
    if (ch.try_submit(kOpData, seq, std::span<const uint8_t>(buf.data(), len))) {
      t.payload_bytes += len;
      ++seq;
      filled = false;
      if ((seq & 63) == 0) check(ch.poll_completions(comp, 256));
    } else {
      // No room: the dpu side is behind. Its completions are what frees room.
      check(ch.wait_completions(comp, 256, std::chrono::milliseconds(100)));
    }
  }
  while (next_completion < messages) check(ch.wait_completions(comp, 256, std::chrono::milliseconds(1000)));
  ch.close();
  t.messages = messages;
  return t;
}

}  // namespace dpukit::peer
