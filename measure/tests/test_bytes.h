// Building frames and captures byte by byte in the trace tests.
#pragma once

#include <cstdint>
#include <vector>

namespace dpukit::measure::testing {

using Bytes = std::vector<uint8_t>;

// Big-endian (network order) stores into a byte buffer.
inline void put16(Bytes& b, size_t at, uint32_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}
inline void put32(Bytes& b, size_t at, uint32_t v) {
  put16(b, at, v >> 16);
  put16(b, at + 2, v);
}

}  // namespace dpukit::measure::testing
