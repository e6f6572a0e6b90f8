// What the bench tests share for their inputs: published vectors' hex text
// as bytes, bytes made from a seed, and lib checked against ref on many.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "operator.h"

namespace dpukit::bench {

// Hex digits (any case, no separators) as bytes; a vector's text is trusted.
inline Bytes from_hex(std::string_view h) {
  Bytes v;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (size_t i = 0; i + 1 < h.size(); i += 2) v.push_back(static_cast<uint8_t>(nibble(h[i]) << 4 | nibble(h[i + 1])));
  return v;
}

// `n` random bytes (fill_random).
inline Bytes random_bytes(size_t n, uint64_t seed) {
  Bytes b(n);
  fill_random(b, seed);
  return b;
}

// `n` bytes of text, compressible as the storage operators' inputs are (fill_text).
inline Bytes text_bytes(size_t n, uint64_t seed) {
  Bytes b(n);
  fill_text(b, seed);
  return b;
}

// Every one of two lib kernels on every one of `inputs` (of `size`), each
// output checked against ref's by the operator's mismatch (the runner checks
// all kernels on the first inputs only): "" or the first failure.
inline std::string lib_differs_from_ref(const Operator& op, size_t size, const std::vector<Bytes>& inputs) {
  auto ref = op.make_kernels(Backend::kRef, size, 1);
  auto lib = op.make_kernels(Backend::kLib, size, 2);
  Bytes want, got;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ref[0]->process(inputs[i], want);
    for (auto& k : lib) {
      k->process(inputs[i], got);
      if (std::string why = op.mismatch(inputs[i], want, got); !why.empty())
        return "input #" + std::to_string(i) + ": " + why;
    }
  }
  return "";
}

}  // namespace dpukit::bench
