// What the bench tests share for published vectors: their hex text as bytes.
#pragma once

#include <string_view>

#include "operator.h"

namespace dpukit::bench {

// Hex digits (any case, no separators) as bytes; a vector's text is trusted.
inline Bytes from_hex(std::string_view h) {
  Bytes v;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (size_t i = 0; i + 1 < h.size(); i += 2) v.push_back(static_cast<uint8_t>(nibble(h[i]) << 4 | nibble(h[i + 1])));
  return v;
}

}  // namespace dpukit::bench
