// A portable RFC 1951 (raw deflate) decoder and encoder, written here in
// plain C++. The decoder is the check for every deflate producer (zlib,
// ISA-L igzip, a compressdev device): it is strict, and returns nothing on a
// malformed stream instead of guessing. The encoder is the ref backend of the
// huffman and compress operators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "operator.h"

namespace dpukit::bench {

// Decodes one raw deflate stream (no zlib or gzip wrapper): blocks until the
// one marked final, and nothing after it but the final byte's padding bits.
// Returns nullopt when the stream is malformed (truncated, reserved block
// type, stored LEN/NLEN mismatch, over-subscribed or incomplete code lengths,
// a symbol outside its alphabet, a distance before the start of the output,
// trailing bytes) or would decode to more than `max_out` bytes; `why`, when
// given, receives the reason. Incomplete codes are accepted only where zlib
// accepts them (a single code of one bit, or no distance codes at all). One
// rule is stricter than zlib: length 258 sent as symbol 284 with extra bits
// 31 is refused, as RFC 1951 3.2.5 gives 284 the lengths 227-257 only.
std::optional<Bytes> inflate_raw(std::span<const uint8_t> in, size_t max_out, std::string* why = nullptr);
// The same into a caller's buffer (its capacity is reused); false = malformed.
bool inflate_raw_into(std::span<const uint8_t> in, size_t max_out, Bytes& out, std::string* why = nullptr);

// Huffman code lengths for `freqs` no longer than `limit` bits (optimal under
// the limit: package-merge). Unused symbols get 0; a single used symbol gets
// length 1. Needs 2^limit >= the number of used symbols.
std::vector<uint8_t> limited_code_lengths(std::span<const uint32_t> freqs, unsigned limit);

struct DeflateOptions {
  // false: literals only (the huffman operator); true: LZ77 matching with
  // hash chains, greedy, over the 32 KiB window (the compress operator).
  bool find_matches = true;
  unsigned max_chain = 32;    // candidates tried per position
  // Per block, the cheapest of dynamic, fixed and stored is written (as zlib
  // and igzip do); off forces dynamic-Huffman blocks (tests).
  bool allow_fixed = true;
  bool allow_stored = true;
};

// Writes raw deflate streams. Holds its match-finder tables and token buffer,
// so one object per thread compresses without allocating once warmed up.
class RawDeflater {
 public:
  explicit RawDeflater(DeflateOptions options = {});
  // Replaces `out` with the raw deflate stream of `in` (always at least one
  // block, the last one final).
  void compress(std::span<const uint8_t> in, Bytes& out);

  struct Token {
    uint16_t length_or_literal;  // a literal byte when distance == 0, else a match length 3..258
    uint16_t distance;           // 1..32768, 0 for a literal
  };

 private:
  DeflateOptions options_;
  std::vector<Token> tokens_;  // one block's worth
  std::vector<int32_t> head_;  // hash of 3 bytes -> last position (sized per input)
  std::vector<int32_t> prev_;  // position & window mask -> previous position with that hash
};

}  // namespace dpukit::bench
